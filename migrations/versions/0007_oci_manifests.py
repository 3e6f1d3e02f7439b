"""OCI manifests: the artifact and signature manifests ``/v2/`` serves, per envelope

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

What this changes and why (issue 18, item 4: "the kvreg registry speaks OCI, the pull
side"): ``GET /v2/<ns>/manifests/<digest>`` finds an artifact by the digest of its OCI
artifact manifest (or of the signature manifest that attaches its envelope), and
``GET /v2/<ns>/blobs/<digest>`` serves the envelope by the digest of its bytes. Neither
digest can be found from the envelope rows without rebuilding every manifest of the
namespace, so one row per envelope keeps them:

- ``oci_manifests``: ``(namespace_id, manifest_digest)`` (the envelope, cascade on
  delete) -> ``artifact_digest`` + ``artifact`` (the bytes served), ``signature_digest`` +
  ``signature``, ``envelope_digest``; unique per namespace on each manifest digest.

The bytes are stored rather than rebuilt on each request so that a manifest keeps its
digest even if a later ``kvreg.core.oci`` writes new envelopes' manifests differently.
Existing envelopes are NOT backfilled here: building their manifests needs the
application's ``kvreg.core.oci``, which a revision must not depend on. The registry
fills the rows of a namespace's older envelopes the first time a ``/v2/`` lookup there
misses (``kvreg_registry.services.oci.backfill``), one write transaction, once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _is_digest(column: str) -> sa.CheckConstraint:
    return sa.CheckConstraint(
        f"length({column}) = 71 AND substr({column}, 1, 7) = 'sha256:'",
        name=op.f(f"ck_oci_manifests_{column}_is_digest"),
    )


def upgrade() -> None:
    op.create_table(
        "oci_manifests",
        sa.Column("namespace_id", sa.Integer(), nullable=False),
        sa.Column("manifest_digest", sa.String(length=71), nullable=False),
        sa.Column("artifact_digest", sa.String(length=71), nullable=False),
        sa.Column("artifact", sa.LargeBinary(), nullable=False),
        sa.Column("signature_digest", sa.String(length=71), nullable=False),
        sa.Column("signature", sa.LargeBinary(), nullable=False),
        sa.Column("envelope_digest", sa.String(length=71), nullable=False),
        _is_digest("artifact_digest"),
        _is_digest("signature_digest"),
        _is_digest("envelope_digest"),
        sa.ForeignKeyConstraint(
            ["namespace_id", "manifest_digest"],
            ["envelopes.namespace_id", "envelopes.manifest_digest"],
            name="fk_oci_manifests_envelope",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace_id", "manifest_digest", name=op.f("pk_oci_manifests")),
    )
    op.create_index(
        "ix_oci_manifests_artifact", "oci_manifests", ["namespace_id", "artifact_digest"], unique=True
    )
    op.create_index(
        "ix_oci_manifests_signature", "oci_manifests", ["namespace_id", "signature_digest"], unique=True
    )
    op.create_index(
        "ix_oci_manifests_envelope", "oci_manifests", ["namespace_id", "envelope_digest"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_oci_manifests_envelope", table_name="oci_manifests")
    op.drop_index("ix_oci_manifests_signature", table_name="oci_manifests")
    op.drop_index("ix_oci_manifests_artifact", table_name="oci_manifests")
    op.drop_table("oci_manifests")
