"""Databases as they were at each earlier alembic revision, with data in them.

A test cannot run the registry code of an earlier era, so the rows come from a registry at
head (every table a real ``kvreg serve`` filled through its API) and are written with SQL into
a database migrated to revision R, keeping only the tables and columns R has: what a registry
of that era held, in the schema it held it in (as ``tests/registry/test_search.py`` does for
0003, for every revision and every table).

After ``upgrade head`` the migrations must give back what the registry at head had, except
where an older schema could not hold it; :func:`expected_after_upgrade` says what, from the
rules below (a column or table of a later revision that has no rule here fails the test:
write down what its migration does to older rows):

- filled from older rows by their migration: the audit log's tree (``log_nodes``, 0002), its
  subjects (``audit_subjects``, 0003), the route index (``envelope_blocks`` and
  ``envelopes.prompt_tokens``, 0005), a signing key's ``owner`` and ``log_seq`` (0006), when
  a namespace's description was set (``namespaces.description_updated_at``, 0009: its
  creation time, for a description given then);
- filled by the registry on demand: ``oci_manifests`` (0007; its namespaces are flagged by
  0008, ``namespaces.oci_backfill_pending``, and the first ``/v2/`` miss there writes them);
- not recoverable, left empty or NULL: what the registry did not do before the revision that
  made room for it (checkpoints, legal holds, retention, graft receipts and the
  ``log_seq`` of envelopes and refs before 0002; web sessions before 0003; key labels before
  0006, ``''``; who last edited a namespace's description before 0009).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, select, text

from kvreg_registry.db.engine import alembic_config, make_engine

Row = dict[str, Any]
Rows = dict[str, list[Row]]
Schema = dict[str, set[str]]


def skipped(table: str) -> bool:
    """Tables that are not the registry's data: alembic's own, and SQLite's full-text index
    (0004; rebuilt from ``envelopes`` by its migration and kept by its triggers)."""
    return table == "alembic_version" or table.startswith("envelopes_fts")


def revisions() -> list[str]:
    """Every revision, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def earlier_revisions() -> list[str]:
    return revisions()[:-1]


def before(revision: str, than: str) -> bool:
    """``revision`` is older than ``than``."""
    order = revisions()
    return order.index(revision) < order.index(than)


@contextmanager
def engine_of(url: str) -> Iterator[Engine]:
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def _reflect(conn: Connection) -> MetaData:
    metadata = MetaData()
    metadata.reflect(conn, only=lambda name, _: not skipped(name))
    return metadata


def _plain(value: Any) -> Any:
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _order(row: Row) -> str:
    return repr(sorted(row.items()))


def schema(url: str) -> Schema:
    """The tables of the database at ``url`` and their columns (computed ones left out)."""
    with engine_of(url) as engine, engine.connect() as conn:
        return {
            name: {c.name for c in table.columns if c.computed is None}
            for name, table in _reflect(conn).tables.items()
        }


def read_rows(url: str) -> Rows:
    """Every row of every table, its columns by name, in a stable order."""
    out: Rows = {}
    with engine_of(url) as engine, engine.connect() as conn:
        for name, table in _reflect(conn).tables.items():
            columns = [c for c in table.columns if c.computed is None]
            rows = [
                {c.name: _plain(v) for c, v in zip(columns, r, strict=True)}
                for r in conn.execute(select(*columns))
            ]
            out[name] = sorted(rows, key=_order)
    return out


def project(rows: Rows, target: Schema) -> Rows:
    """``rows`` as a database of schema ``target`` holds them: its tables, its columns."""
    return {
        name: sorted(
            ({k: v for k, v in row.items() if k in columns} for row in rows.get(name, [])), key=_order
        )
        for name, columns in target.items()
    }


def write_rows(url: str, rows: Rows) -> None:
    """Write ``rows`` into the database at ``url`` (migrated to some revision, otherwise empty),
    each table with the columns it has there; PostgreSQL's id sequences are moved past them."""
    with engine_of(url) as engine, engine.begin() as conn:
        metadata = _reflect(conn)
        for table in metadata.sorted_tables:
            columns = {c.name for c in table.columns if c.computed is None}
            wanted = [{k: v for k, v in row.items() if k in columns} for row in rows.get(table.name, [])]
            if wanted:
                conn.execute(table.delete())  # log_head's one row, made by 0001
                conn.execute(table.insert(), wanted)
        if engine.dialect.name == "postgresql":
            for table in metadata.sorted_tables:
                for column in table.primary_key.columns:
                    sequence = conn.scalar(
                        text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table.name, "c": column.name}
                    )
                    if sequence is not None and rows.get(table.name):
                        conn.execute(
                            text("SELECT setval(:s, :v)"),
                            {"s": sequence, "v": max(r[column.name] for r in rows[table.name])},
                        )


# --- what an upgrade from an older revision gives back ------------------------------------------

Rule = Callable[[Row, Rows, str], Any]

#: Tables whose migration fills them from the rows of older tables.
BACKFILLED_TABLES = frozenset({"log_nodes", "audit_subjects", "envelope_blocks"})
#: Tables the registry fills on demand after the upgrade (see the module docstring).
ON_DEMAND_TABLES = frozenset({"oci_manifests"})
#: Tables of features an older registry did not have: empty after the upgrade.
NEW_FEATURE_TABLES = frozenset(
    {"log_checkpoints", "legal_holds", "retention_policies", "graft_receipts", "web_sessions"}
)


def _same(column: str) -> Rule:
    return lambda row, _rows, _revision: row[column]


def _flagged(row: Row, rows: Rows, revision: str) -> bool:
    """0008 flags the namespaces with envelopes that lack their OCI rows: before 0007, all."""
    return before(revision, "0007") and any(e["namespace_id"] == row["id"] for e in rows["envelopes"])


def _described_at(row: Row, _rows: Rows, _revision: str) -> Any:
    """0009: a namespace with a description had it from its creation (it could not be edited)."""
    return row["created_at"] if row["description"] else None


#: Columns a later revision added, and the value an upgrade gives an older row.
COLUMN_RULES: Mapping[tuple[str, str], Rule] = {
    ("envelopes", "log_seq"): lambda *_: None,
    ("refs", "log_seq"): lambda *_: None,
    ("envelopes", "prompt_tokens"): _same("prompt_tokens"),
    ("signing_keys", "label"): lambda *_: "",
    ("signing_keys", "owner"): _same("owner"),
    ("signing_keys", "log_seq"): _same("log_seq"),
    ("namespaces", "oci_backfill_pending"): _flagged,
    ("namespaces", "description_updated_at"): _described_at,
    ("namespaces", "description_updated_by"): lambda *_: None,
}


def expected_after_upgrade(source: Rows, at_head: Schema, old: Schema, revision: str) -> Rows:
    """What the database must hold once the rows of ``source`` (a registry at head), written in
    the schema ``old`` of ``revision``, are migrated to head (schema ``at_head``)."""
    out: Rows = {}
    for name, columns in at_head.items():
        if name not in old:
            known = BACKFILLED_TABLES | ON_DEMAND_TABLES | NEW_FEATURE_TABLES
            assert name in known, (
                f"table {name} is new since {revision}: say what its migration fills it with"
            )
            out[name] = list(source.get(name, [])) if name in BACKFILLED_TABLES else []
            continue
        rows = []
        for row in source.get(name, []):
            new = {}
            for column in columns:
                if column in old[name]:
                    new[column] = row[column]
                else:
                    rule = COLUMN_RULES.get((name, column))
                    assert rule is not None, f"{name}.{column} is new since {revision}: add its rule"
                    new[column] = rule(row, source, revision)
            rows.append(new)
        out[name] = sorted(rows, key=_order)
    return out


def differences(expected: Rows, actual: Rows, *, ignore: frozenset[str] = frozenset()) -> list[str]:
    """Where two databases' rows differ, table by table, in words (empty: none)."""
    out = []
    for name in sorted(set(expected) | set(actual)):
        if name in ignore:
            continue
        want, got = expected.get(name), actual.get(name)
        if want is None or got is None:
            out.append(f"{name}: only in {'actual' if want is None else 'expected'}")
        elif want != got:
            missing = [r for r in want if r not in got][:2]
            extra = [r for r in got if r not in want][:2]
            out.append(
                f"{name}: {len(want)} rows expected, {len(got)} found; missing {missing}; unexpected {extra}"
            )
    return out
