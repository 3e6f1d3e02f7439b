"""full-text search: an index on envelopes' search text; indexes for the model filter and facets

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

What this changes and why (the web UI issue: "full-text search ... the page stays
fast with 10,000 artifacts"): search matched ``search_text`` with ``LIKE '%word%'``,
which reads every row. This makes a full-text index over ``envelopes.search_text``
on each backend (``kvreg_registry.services.search`` queries it):

- PostgreSQL: ``search_vector``, a stored generated column
  ``to_tsvector('simple', search_text)`` (computed for the existing rows when it is
  added), and ``ix_envelopes_fulltext``, a GIN index on it. A stored vector rather
  than an index on the expression: when the planner filters rows by another index
  (``created_at`` for a date range or the newest page), matching a stored vector is
  cheap, whereas the expression would parse each row's text again (about 0.3 ms per
  row of 3 KB: 300 ms for 1,000 rows). ``fastupdate = off``: each new envelope
  updates the index at once instead of a pending list that every search would scan
  (and that the planner, costing it, answers with sequential scans) until the next
  vacuum; envelopes arrive far too rarely for the slower insert to matter.
- SQLite: ``envelopes_fts``, an FTS5 external-content table over
  ``envelopes.search_text`` keyed by the envelopes' ``rowid`` (tokenizer ``ascii``,
  ``detail=none``: search needs words, not positions), and three triggers that keep
  it in step with inserts, deletes and updates of ``search_text``; backfilled here
  with FTS5's ``rebuild`` command.

Also ``ix_envelopes_model_name`` (the ``model`` filter matches the fingerprint or
the name; the fingerprint had an index already) and ``ix_envelopes_facets`` on
``(namespace_id, model_name, verifier, verdict)``: the search page lists the
distinct models, verifiers and verdicts of the namespaces a visitor can read, which
this index answers without reading the (large) envelope rows.

The full-text objects are not in ``kvreg_registry.db.models`` (SQLAlchemy cannot
declare an FTS5 table, nor a PostgreSQL-only column and index that the SQLite
schema lacks); the drift test ignores exactly these names. Caution for later migrations:
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
    "ALTER TABLE envelopes ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED",
    "CREATE INDEX ix_envelopes_fulltext ON envelopes USING gin (search_vector) WITH (fastupdate = off)",
]
_PG_DOWN = [
    "DROP INDEX IF EXISTS ix_envelopes_fulltext",
    "ALTER TABLE envelopes DROP COLUMN IF EXISTS search_vector",
]


def _dialect() -> str:
    name = op.get_bind().dialect.name
    if name not in {"sqlite", "postgresql"}:
        raise NotImplementedError(f"full-text search is made for sqlite and postgresql, not {name!r}")
    return name


def upgrade() -> None:
    op.create_index("ix_envelopes_model_name", "envelopes", ["model_name"], unique=False)
    facets = ["namespace_id", "model_name", "verifier", "verdict"]
    op.create_index("ix_envelopes_facets", "envelopes", facets, unique=False)
    for statement in _SQLITE_UP if _dialect() == "sqlite" else _PG_UP:
        op.execute(statement)


def downgrade() -> None:
    for statement in _SQLITE_DOWN if _dialect() == "sqlite" else _PG_DOWN:
        op.execute(statement)
    op.drop_index("ix_envelopes_facets", table_name="envelopes")
    op.drop_index("ix_envelopes_model_name", table_name="envelopes")
