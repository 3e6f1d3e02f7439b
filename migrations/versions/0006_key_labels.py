"""signing keys: a label, an owner and the audit entry that registered them

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

What this changes and why (issue 16, "who verified it is unclear"): the artifact
page named a signer by its 64-hex key id only. A key now carries

- ``signing_keys.label``: a human name given when it is registered ("CI signer");
  ``''`` for keys registered before (the page then shows the key id);
- ``signing_keys.owner``: who the key belongs to, by default the user who
  registered it (``kvreg-admin key add --owner`` names another);
- ``signing_keys.log_seq``: the ``key.registered`` audit entry, linked from the
  artifact page as the proof that the namespace accepts the key.

Existing keys are backfilled from the audit log: the newest ``key.registered``
entry of the key's namespace whose subject is the key id gives ``log_seq`` and,
as ``owner``, its actor. Plain correlated subqueries, valid on SQLite and
PostgreSQL. Written by hand; adding and dropping nullable (or defaulted) columns is a
plain ``ALTER TABLE`` on both.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "signing_keys", sa.Column("label", sa.String(length=200), nullable=False, server_default="")
    )
    op.add_column("signing_keys", sa.Column("owner", sa.String(length=64), nullable=True))
    op.add_column("signing_keys", sa.Column("log_seq", sa.BigInteger(), nullable=True))
    op.execute(
        "UPDATE signing_keys SET log_seq = ("
        " SELECT max(e.seq) FROM audit_entries e"
        " JOIN audit_subjects s ON s.seq = e.seq"
        " JOIN namespaces n ON n.name = e.namespace"
        " WHERE e.type = 'key.registered' AND s.digest = signing_keys.keyid"
        " AND n.id = signing_keys.namespace_id)"
    )
    op.execute(
        "UPDATE signing_keys SET owner ="
        " (SELECT e.actor FROM audit_entries e WHERE e.seq = signing_keys.log_seq)"
        " WHERE log_seq IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_column("signing_keys", "log_seq")
    op.drop_column("signing_keys", "owner")
    op.drop_column("signing_keys", "label")
