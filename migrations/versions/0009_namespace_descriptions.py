"""namespaces: who last edited the description, and when

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06

What this changes and why: a namespace's description was one line of plain text given
when the namespace was created, and nobody could change it. It is now Markdown (shown on
the namespace page, rendered safely), and the namespace's admins edit it from the web UI
or the API (``PATCH /api/v1/namespaces/{ns}``; each edit is a ``namespace.description``
audit entry). The page says who last edited it and when:

- ``namespaces.description_updated_at`` (nullable): when the description was last set;
  NULL while it is empty and was never edited;
- ``namespaces.description_updated_by`` (nullable): the user who last edited it; NULL for
  a description given at creation before this revision (the audit log's
  ``namespace.created`` entry names its creator).

Existing rows with a description get ``description_updated_at = created_at`` (it was set
when the namespace was created and could not change since). Plain text is Markdown that
renders as the same words, so existing descriptions need no conversion. Written by hand;
adding and dropping nullable columns is a plain ``ALTER TABLE`` on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("namespaces", sa.Column("description_updated_at", sa.DateTime(), nullable=True))
    op.add_column("namespaces", sa.Column("description_updated_by", sa.String(length=64), nullable=True))
    namespaces = sa.table(
        "namespaces",
        sa.column("description", sa.Text()),
        sa.column("created_at", sa.DateTime()),
        sa.column("description_updated_at", sa.DateTime()),
    )
    op.execute(
        namespaces.update()
        .where(namespaces.c.description != "")
        .values(description_updated_at=namespaces.c.created_at)
    )


def downgrade() -> None:
    op.drop_column("namespaces", "description_updated_by")
    op.drop_column("namespaces", "description_updated_at")
