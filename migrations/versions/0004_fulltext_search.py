"""full-text search: an index on envelopes' search text, and an index on model names

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

What this changes and why (the web UI issue: "full-text search ... the page stays
fast with 10,000 artifacts"): search matched ``search_text`` with ``LIKE '%word%'``,
which reads every row. This makes a full-text index over ``envelopes.search_text``
on each backend (``kvreg_registry.services.search`` queries it):

- PostgreSQL: ``ix_envelopes_fulltext``, a GIN index on the expression
  ``to_tsvector('simple', search_text)`` (queries must use the same expression);
  built from the existing rows by ``CREATE INDEX`` itself.
- SQLite: ``envelopes_fts``, an FTS5 external-content table over
  ``envelopes.search_text`` keyed by the envelopes' ``rowid`` (tokenizer ``ascii``,
  ``detail=none``: search needs words, not positions), and three triggers that keep
  it in step with inserts, deletes and updates of ``search_text``; backfilled here
  with FTS5's ``rebuild`` command.

Also ``ix_envelopes_model_name`` (the ``model`` filter matches the fingerprint or
the name; the fingerprint had an index already).

Neither index object is in ``kvreg_registry.db.models`` (SQLAlchemy cannot declare
an FTS5 table, nor a PostgreSQL-only expression index that the SQLite schema
lacks); the drift test ignores exactly these names. Caution for later migrations:
on SQLite, a ``batch_alter_table("envelopes")`` that recreates the table drops the
three triggers and may renumber rowids; such a migration must create the triggers
again and run ``rebuild`` (``kvreg-admin search reindex`` rebuilds it too).

Rows stored before this revision have search text without the solution and prompt
text (the migration cannot read object storage): ``kvreg-admin search reindex``
recomputes it from storage.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SQLITE_UP = [
    "CREATE VIRTUAL TABLE envelopes_fts USING fts5("
    "search_text, content='envelopes', content_rowid='rowid', "
    "tokenize='ascii', detail='none', columnsize=0)",
    "CREATE TRIGGER envelopes_fts_insert AFTER INSERT ON envelopes BEGIN "
    "INSERT INTO envelopes_fts(rowid, search_text) VALUES (new.rowid, new.search_text); "
    "END",
    "CREATE TRIGGER envelopes_fts_delete AFTER DELETE ON envelopes BEGIN "
    "INSERT INTO envelopes_fts(envelopes_fts, rowid, search_text) "
    "VALUES ('delete', old.rowid, old.search_text); "
    "END",
    "CREATE TRIGGER envelopes_fts_update AFTER UPDATE OF search_text ON envelopes BEGIN "
    "INSERT INTO envelopes_fts(envelopes_fts, rowid, search_text) "
    "VALUES ('delete', old.rowid, old.search_text); "
    "INSERT INTO envelopes_fts(rowid, search_text) VALUES (new.rowid, new.search_text); "
    "END",
    "INSERT INTO envelopes_fts(envelopes_fts) VALUES ('rebuild')",
]
_SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS envelopes_fts_update",
    "DROP TRIGGER IF EXISTS envelopes_fts_delete",
    "DROP TRIGGER IF EXISTS envelopes_fts_insert",
    "DROP TABLE IF EXISTS envelopes_fts",
]
_PG_UP = [
    "CREATE INDEX ix_envelopes_fulltext ON envelopes USING gin (to_tsvector('simple', search_text))",
]
_PG_DOWN = ["DROP INDEX IF EXISTS ix_envelopes_fulltext"]


def _dialect() -> str:
    name = op.get_bind().dialect.name
    if name not in {"sqlite", "postgresql"}:
        raise NotImplementedError(f"full-text search is made for sqlite and postgresql, not {name!r}")
    return name


def upgrade() -> None:
    op.create_index("ix_envelopes_model_name", "envelopes", ["model_name"], unique=False)
    for statement in _SQLITE_UP if _dialect() == "sqlite" else _PG_UP:
        op.execute(statement)


def downgrade() -> None:
    for statement in _SQLITE_DOWN if _dialect() == "sqlite" else _PG_DOWN:
        op.execute(statement)
    op.drop_index("ix_envelopes_model_name", table_name="envelopes")
