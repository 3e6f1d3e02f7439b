"""namespaces: a flag for the namespaces whose older envelopes still lack their OCI manifests

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

What this changes and why: revision 0007 left the ``oci_manifests`` rows of the envelopes
stored before it to be written by the registry the first time a ``/v2/`` lookup in their
namespace misses. To know whether that was still to do, every miss (a tag or digest a
client asks for that does not exist: common, as clients probe) scanned the namespace's
envelopes for one without a row, and an envelope whose manifests cannot be built was
tried again on every miss of every process. Now one boolean says it:

- ``namespaces.oci_backfill_pending`` (not null, default false): true while some envelope
  stored before 0007 may lack its row. It is set here, in SQL only, for the namespaces
  that have an envelope without an ``oci_manifests`` row; the registry writes the rows at
  the first miss in such a namespace and clears the flag in the same write transaction
  (an envelope whose manifests cannot be built is logged and skipped, not retried). A
  miss elsewhere reads the flag from the namespace row it has already loaded: no scan.

Envelopes stored from 0007 on get their row when they are stored, so nothing but this
revision sets the flag. Written by hand; adding a defaulted column is a plain
``ALTER TABLE`` on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "namespaces",
        sa.Column("oci_backfill_pending", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    namespaces = sa.table("namespaces", sa.column("id", sa.Integer()), sa.column("oci_backfill_pending"))
    envelopes = sa.table("envelopes", sa.column("namespace_id"), sa.column("manifest_digest"))
    rows = sa.table("oci_manifests", sa.column("namespace_id"), sa.column("manifest_digest"))
    without_row = (
        sa.select(envelopes.c.namespace_id)
        .where(envelopes.c.namespace_id == namespaces.c.id)
        .where(
            ~sa.exists().where(
                rows.c.namespace_id == envelopes.c.namespace_id,
                rows.c.manifest_digest == envelopes.c.manifest_digest,
            )
        )
    )
    op.execute(namespaces.update().where(sa.exists(without_row)).values(oci_backfill_pending=sa.true()))


def downgrade() -> None:
    op.drop_column("namespaces", "oci_backfill_pending")
