"""route index: the block keys of every envelope, and the prompt's token count

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29

What this changes and why (issue 6, part 1: "the registry's route endpoint over the
same keys; the client sends block keys, not tokens"): ``POST /api/v1/route``
(``kvreg_registry.services.router``) finds the artifacts that share the longest
block-aligned prefix with a prompt by looking its block keys up.

- ``envelope_blocks``: one row per chunk of each envelope's manifest,
  ``(namespace_id, manifest_digest, block_index) -> block_key``
  (``manifest.chunks[i].block_key``), deleted with the envelope (cascade, and
  explicitly by ``services.envelopes.remove``). ``ix_envelope_blocks_block_key`` on
  ``(block_key, block_index, namespace_id, manifest_digest)`` answers the lookup from
  the index alone.
- ``envelopes.prompt_tokens``: the manifest's ``prompt.token_count`` (NULL when it
  records no prompt), returned to the router. The other per-artifact fields it needs
  (fingerprints, block size, token count, verdict, verifier) were columns already.
- ``ix_envelopes_route`` on ``(model_fingerprint, tokenizer_fingerprint,
  config_fingerprint, block_size)``: the listing for a prompt shorter than one block.

Existing envelopes are backfilled here from the signed manifest each row carries
(``envelopes.envelope``: DSSE JSON whose base64 payload is the manifest), with plain
``json``/``base64`` so that this revision does not depend on later application code.
Every stored envelope passed the full manifest check when it was accepted; a row
whose bytes do not parse anyway is left without blocks (and a warning), as it could
not be routed to.

Written by hand from autogenerate's output. Not ``batch_alter_table("envelopes")``: on
SQLite that recreates the table and drops the full-text triggers of 0004; adding
(and, on downgrade, dropping) a nullable column is a plain ``ALTER TABLE`` there.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

log = logging.getLogger("alembic.runtime.migration")

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_BATCH = 500


def upgrade() -> None:
    op.create_table(
        "envelope_blocks",
        sa.Column("namespace_id", sa.Integer(), nullable=False),
        sa.Column("manifest_digest", sa.String(length=71), nullable=False),
        sa.Column("block_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("block_key", sa.String(length=71), nullable=False),
        sa.CheckConstraint(
            "length(block_key) = 71 AND substr(block_key, 1, 7) = 'sha256:'",
            name=op.f("ck_envelope_blocks_block_key_is_digest"),
        ),
        sa.CheckConstraint("block_index >= 0", name=op.f("ck_envelope_blocks_block_index_not_negative")),
        sa.ForeignKeyConstraint(
            ["namespace_id", "manifest_digest"],
            ["envelopes.namespace_id", "envelopes.manifest_digest"],
            name="fk_envelope_blocks_envelope",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "namespace_id", "manifest_digest", "block_index", name=op.f("pk_envelope_blocks")
        ),
    )
    op.create_index(
        "ix_envelope_blocks_block_key",
        "envelope_blocks",
        ["block_key", "block_index", "namespace_id", "manifest_digest"],
        unique=False,
    )
    op.add_column("envelopes", sa.Column("prompt_tokens", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_envelopes_route",
        "envelopes",
        ["model_fingerprint", "tokenizer_fingerprint", "config_fingerprint", "block_size"],
        unique=False,
    )
    _backfill()


def _manifest(envelope: bytes) -> dict[str, object] | None:
    """The manifest document inside a stored DSSE envelope, or None if it does not parse."""
    try:
        doc = json.loads(bytes(envelope))
        payload = doc["payload"]
        altchars = b"-_" if ("-" in payload or "_" in payload) else None
        manifest = json.loads(base64.b64decode(payload, altchars=altchars, validate=True))
    except (ValueError, TypeError, KeyError, binascii.Error):
        return None
    return manifest if isinstance(manifest, dict) else None


def _blocks(manifest: dict[str, object]) -> list[tuple[int, str]] | None:
    chunks = manifest.get("chunks")
    if not isinstance(chunks, list):
        return None
    out: list[tuple[int, str]] = []
    for position, chunk in enumerate(chunks):
        if not isinstance(chunk, dict):
            return None
        index, key = chunk.get("index"), chunk.get("block_key")
        if index != position or not isinstance(key, str) or _DIGEST.fullmatch(key) is None:
            return None
        out.append((position, key))
    return out


def _prompt_tokens(manifest: dict[str, object]) -> int | None:
    prompt = manifest.get("prompt")
    count = prompt.get("token_count") if isinstance(prompt, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


def _backfill() -> None:
    conn = op.get_bind()
    blocks_table = sa.table(
        "envelope_blocks",
        sa.column("namespace_id", sa.Integer()),
        sa.column("manifest_digest", sa.String()),
        sa.column("block_index", sa.Integer()),
        sa.column("block_key", sa.String()),
    )
    set_prompt = sa.text(
        "UPDATE envelopes SET prompt_tokens = :count WHERE namespace_id = :ns AND manifest_digest = :digest"
    )
    rows = conn.execute(
        sa.text(
            "SELECT namespace_id, manifest_digest, envelope FROM envelopes "
            "ORDER BY namespace_id, manifest_digest"
        )
    )
    pending: list[dict[str, object]] = []
    prompts: list[dict[str, object]] = []
    skipped = 0
    for ns_id, digest, envelope in rows.all():
        manifest = _manifest(envelope)
        blocks = None if manifest is None else _blocks(manifest)
        if manifest is None or blocks is None:
            skipped += 1
            continue
        pending += [
            {"namespace_id": ns_id, "manifest_digest": digest, "block_index": i, "block_key": k}
            for i, k in blocks
        ]
        count = _prompt_tokens(manifest)
        if count is not None:
            prompts.append({"count": count, "ns": ns_id, "digest": digest})
        if len(pending) >= _BATCH:
            op.bulk_insert(blocks_table, pending)
            pending = []
    if pending:
        op.bulk_insert(blocks_table, pending)
    if prompts:
        conn.execute(set_prompt, prompts)
    if skipped:
        log.warning(
            "route index: %d envelope(s) whose manifest does not parse were left without blocks", skipped
        )


def downgrade() -> None:
    op.drop_index("ix_envelopes_route", table_name="envelopes")
    op.drop_column("envelopes", "prompt_tokens")
    op.drop_index("ix_envelope_blocks_block_key", table_name="envelope_blocks")
    op.drop_table("envelope_blocks")
