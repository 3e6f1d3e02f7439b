"""The schema is made by alembic, and the models and the migrations do not drift apart.

``alembic upgrade head`` on an empty SQLite file and on an empty PostgreSQL
database, then alembic's autogenerate comparison between the migrated database and
``Base.metadata``: any difference (a column, index, constraint or type added to a
model without a migration, or the reverse) fails the test. A downgrade to base and
an upgrade again must work too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from kvreg_registry.db.engine import alembic_config, make_engine, upgrade
from kvreg_registry.db.models import (
    FULLTEXT_COLUMN,
    FULLTEXT_INDEXES,
    FULLTEXT_TABLES,
    Base,
    include_in_autogenerate,
)

EXPECTED_TABLES = {
    "namespaces",
    "users",
    "api_tokens",
    "roles",
    "signing_keys",
    "objects",
    "namespace_objects",
    "envelopes",
    "envelope_objects",
    "refs",
    "upload_sessions",
    "upload_digests",
    "audit_entries",
    "log_head",
}


# The full-text index of migration 0004 cannot be declared in the models (an FTS5 virtual
# table with its shadow tables on SQLite; on PostgreSQL only, a generated tsvector column of
# envelopes and its GIN index), so the comparison ignores exactly these names (the same hook
# as migrations/env.py), and ``_fulltext_objects`` checks that they exist instead.
def _drift(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "include_name": include_in_autogenerate}
            )
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def _fulltext_objects(url: str) -> set[str]:
    """The full-text objects of migration 0004 that the database has (tables, triggers, indexes)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                rows = conn.execute(text("SELECT name FROM sqlite_master WHERE name LIKE 'envelopes_fts%'"))
            else:
                rows = conn.execute(
                    text(
                        "SELECT indexname FROM pg_indexes WHERE tablename = 'envelopes' UNION ALL "
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_name = 'envelopes' AND is_generated = 'ALWAYS'"
                    )
                )
            return {r[0] for r in rows} & (
                FULLTEXT_TABLES | FULLTEXT_INDEXES | SQLITE_TRIGGERS | {FULLTEXT_COLUMN}
            )
    finally:
        engine.dispose()


SQLITE_TRIGGERS = {"envelopes_fts_insert", "envelopes_fts_delete", "envelopes_fts_update"}


def _check(url: str) -> None:
    upgrade(url)
    engine = make_engine(url)
    try:
        tables = set(inspect(engine).get_table_names())
        assert tables >= EXPECTED_TABLES, EXPECTED_TABLES - tables
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, size FROM log_head")).all() == [(1, 0)]
    finally:
        engine.dispose()
    on_sqlite = url.startswith("sqlite")
    expected = FULLTEXT_TABLES | SQLITE_TRIGGERS if on_sqlite else FULLTEXT_INDEXES | {FULLTEXT_COLUMN}
    assert _fulltext_objects(url) == expected
    assert _drift(url) == []
    command.downgrade(alembic_config(url), "0003")
    assert _fulltext_objects(url) == set()
    command.downgrade(alembic_config(url), "base")
    engine = make_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    upgrade(url)
    assert _drift(url) == []


def test_sqlite_schema_comes_from_migrations_without_drift(tmp_path: Path) -> None:
    _check(f"sqlite:///{tmp_path / 'registry.sqlite3'}")


def test_postgresql_schema_comes_from_migrations_without_drift(fresh_pg_url: str) -> None:
    _check(fresh_pg_url)


def test_drift_is_detected(tmp_path: Path) -> None:
    """The comparison is not vacuous: a model change without a migration shows up."""
    from sqlalchemy import Column, Integer, MetaData, Table

    url = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    upgrade(url)
    extra = MetaData()
    for table in Base.metadata.tables.values():
        table.to_metadata(extra)
    Table("not_migrated", extra, Column("id", Integer, primary_key=True))
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), extra)
    finally:
        engine.dispose()
    assert any(d[0] == "add_table" and d[1].name == "not_migrated" for d in diffs)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_database_enforces_invariants(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Check constraints and foreign keys hold even if the code were wrong."""
    from sqlalchemy.exc import IntegrityError

    url = (
        f"sqlite:///{tmp_path / 'r.sqlite3'}"
        if backend == "sqlite"
        else request.getfixturevalue("fresh_pg_url")
    )
    upgrade(url)
    engine = make_engine(url)
    bad_statements = [
        "INSERT INTO objects (digest, size, created_at) "
        "VALUES ('sha256:../../etc/passwd', 1, CURRENT_TIMESTAMP)",
        "INSERT INTO objects (digest, size, created_at) VALUES ('sha256:"
        + "a" * 64
        + "', -1, CURRENT_TIMESTAMP)",
        "INSERT INTO namespace_objects (namespace_id, digest, created_at) VALUES (1, 'sha256:"
        + "b" * 64
        + "', CURRENT_TIMESTAMP)",
        "INSERT INTO log_head (id, size) VALUES (2, 0)",
        "INSERT INTO api_tokens (user_id, token_hash, label, created_at) "
        "VALUES (1, 'short', '', CURRENT_TIMESTAMP)",
    ]
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO namespaces (name, public, description, created_at) "
                    "VALUES ('ns', false, '', CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                text("INSERT INTO users (name, is_admin, created_at) VALUES ('u', false, CURRENT_TIMESTAMP)")
            )
        for stmt in bad_statements:
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(text(stmt))
    finally:
        engine.dispose()
