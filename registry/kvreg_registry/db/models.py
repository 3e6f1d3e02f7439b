"""The registry's metadata schema: SQLAlchemy 2 declarative models.

The database enforces the invariants, not only the code (as warehouse does):

- digests are ``sha256:<64 hex>`` (length and prefix checked), sizes non-negative,
  roles one of ``read``/``write``/``admin``, token hashes 64 hex characters;
- a namespace *holds* an object (``namespace_objects``) only if the object exists;
- an envelope's manifest and every object it references must be held by its
  namespace (composite foreign keys), so a held object cannot be dropped while an
  envelope references it — garbage collection cannot break an artifact even if its
  code were wrong;
- a ref can only point at an envelope of its own namespace, and an envelope a ref
  points at cannot be deleted;
- audit entries have dense sequence numbers assigned under a lock on ``log_head``.

The schema is created by the alembic migrations in ``migrations/`` (never by
``create_all`` outside tests of the drift check). This module has no queries; see
``kvreg_registry.services``.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

DIGEST_LEN = 71  # len("sha256:") + 64
ROLES = ("read", "write", "admin")

# Stable constraint names, so that migrations can refer to them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# The full-text objects of migration 0004 are per dialect (an FTS5 table on SQLite, a
# generated tsvector column and its GIN index on PostgreSQL) and not in these models:
# autogenerate and the drift test leave exactly these names out.
FULLTEXT_TABLES = frozenset(
    {"envelopes_fts", "envelopes_fts_data", "envelopes_fts_idx", "envelopes_fts_config"}
)
FULLTEXT_INDEXES = frozenset({"ix_envelopes_fulltext"})
FULLTEXT_COLUMN = "search_vector"


def include_in_autogenerate(name: str | None, type_: str, parent: dict[str, str | None]) -> bool:
    """alembic's ``include_name`` hook: everything but the full-text objects of migration 0004."""
    if type_ == "table":
        return name not in FULLTEXT_TABLES
    if type_ == "index":
        return name not in FULLTEXT_INDEXES
    if type_ == "column":
        return not (name == FULLTEXT_COLUMN and parent.get("table_name") == "envelopes")
    return True


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timestamps stored as naive UTC and returned timezone-aware (UTC) on every backend."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=dt.UTC)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _digest_check(column: str) -> CheckConstraint:
    return CheckConstraint(
        f"length({column}) = {DIGEST_LEN} AND substr({column}, 1, 7) = 'sha256:'",
        name=f"{column}_is_digest",
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    if TYPE_CHECKING:
        # Every model here is declared with __tablename__, so it is mapped to a Table
        # (declarative's own annotation says FromClause, which has no insert/update).
        __table__: ClassVar[Table]


class Namespace(Base):
    __tablename__ = "namespaces"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    public: Mapped[bool] = mapped_column(Boolean, default=False)
    description: Mapped[str] = mapped_column(Text, default="")  # Markdown (web.markdown renders it)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Who last set the description and when (migration 0009); NULL while it was never set.
    description_updated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    description_updated_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Some envelope stored before migration 0007 may lack its OCI manifests: the first /v2/
    # lookup here that misses writes them and clears it (services.oci.backfill, migration 0008).
    oci_backfill_pending: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    disabled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class ApiToken(Base):
    """A bearer token; only the SHA-256 of the token text is stored."""

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint("length(token_hash) = 64", name="token_hash_is_sha256_hex"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Role(Base):
    __tablename__ = "roles"
    __table_args__ = (CheckConstraint("role IN ('read', 'write', 'admin')", name="role_known"),)

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    namespace_id: Mapped[int] = mapped_column(
        ForeignKey("namespaces.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(8))


class SigningKey(Base):
    """An Ed25519 public key whose signatures the namespace accepts on envelopes.

    ``label`` is a human name for it ("CI signer", "alice's laptop"), ``owner`` who it
    belongs to (by default the user who registered it), ``log_seq`` the audit entry
    that registered it (NULL for keys registered before the entry was recorded here).
    """

    __tablename__ = "signing_keys"
    __table_args__ = (
        CheckConstraint("length(keyid) = 71 AND substr(keyid, 1, 7) = 'sha256:'", name="keyid_is_digest"),
        Index("uq_signing_keys_namespace_keyid", "namespace_id", "keyid", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id", ondelete="CASCADE"))
    keyid: Mapped[str] = mapped_column(String(DIGEST_LEN))
    public_key: Mapped[str] = mapped_column(Text)
    label: Mapped[str] = mapped_column(String(200), default="", server_default="")
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    log_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class StoredObject(Base):
    """An object whose verified bytes are in the storage backend."""

    __tablename__ = "objects"
    __table_args__ = (
        _digest_check("digest"),
        CheckConstraint("size >= 0", name="size_not_negative"),
    )

    digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class NamespaceObject(Base):
    """A namespace holds an object: someone with write access to it uploaded the bytes."""

    __tablename__ = "namespace_objects"

    namespace_id: Mapped[int] = mapped_column(
        ForeignKey("namespaces.id", ondelete="CASCADE"), primary_key=True
    )
    digest: Mapped[str] = mapped_column(
        ForeignKey("objects.digest", ondelete="RESTRICT"), primary_key=True, index=True
    )
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Envelope(Base):
    """A signed manifest stored in a namespace, with the fields search filters on."""

    __tablename__ = "envelopes"
    __table_args__ = (
        ForeignKeyConstraint(
            ["namespace_id", "manifest_digest"],
            ["namespace_objects.namespace_id", "namespace_objects.digest"],
            name="fk_envelopes_manifest_held",
            ondelete="RESTRICT",
        ),
        CheckConstraint("token_count >= 0 AND chunk_count >= 0 AND size >= 0", name="counts_not_negative"),
        Index("ix_envelopes_created_at", "created_at"),
        Index("ix_envelopes_model_fingerprint", "model_fingerprint"),
        Index("ix_envelopes_model_name", "model_name"),
        Index("ix_envelopes_verifier_verdict", "verifier", "verdict"),
        # The search filters' values per namespace, without reading the rows (search.facets).
        Index("ix_envelopes_facets", "namespace_id", "model_name", "verifier", "verdict"),
        # The router's listing of the artifacts of one engine (services.router, migration 0005).
        Index(
            "ix_envelopes_route",
            "model_fingerprint",
            "tokenizer_fingerprint",
            "config_fingerprint",
            "block_size",
        ),
    )
    # ``search_text`` also has a full-text index that SQLAlchemy cannot declare (migration
    # 0004: an FTS5 table with triggers on SQLite; on PostgreSQL a stored generated column
    # ``search_vector`` with a GIN index), queried by ``kvreg_registry.services.search``.

    namespace_id: Mapped[int] = mapped_column(
        ForeignKey("namespaces.id", ondelete="CASCADE"), primary_key=True
    )
    manifest_digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True)
    envelope: Mapped[bytes] = mapped_column(LargeBinary)
    signer_keyid: Mapped[str] = mapped_column(String(DIGEST_LEN))
    model_fingerprint: Mapped[str] = mapped_column(String(DIGEST_LEN))
    model_name: Mapped[str] = mapped_column(String(200), default="")
    tokenizer_fingerprint: Mapped[str] = mapped_column(String(DIGEST_LEN))
    config_fingerprint: Mapped[str] = mapped_column(String(DIGEST_LEN))
    token_count: Mapped[int] = mapped_column(BigInteger)
    chunk_count: Mapped[int] = mapped_column(Integer)
    block_size: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)
    merkle_root: Mapped[str] = mapped_column(String(DIGEST_LEN))
    verifier: Mapped[str | None] = mapped_column(String(200), nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(64), nullable=True)
    title: Mapped[str] = mapped_column(Text, default="")
    question: Mapped[str] = mapped_column(Text, default="")
    search_text: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The audit entry that recorded it (clients check its inclusion in the log).
    log_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The manifest's ``prompt.token_count`` (None: no prompt recorded), for the router
    # (``kvreg_registry.services.router``; migration 0005).
    prompt_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class EnvelopeObject(Base):
    """An object an envelope's manifest references; keeps the object held (RESTRICT)."""

    __tablename__ = "envelope_objects"
    __table_args__ = (
        ForeignKeyConstraint(
            ["namespace_id", "manifest_digest"],
            ["envelopes.namespace_id", "envelopes.manifest_digest"],
            name="fk_envelope_objects_envelope",
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["namespace_id", "digest"],
            ["namespace_objects.namespace_id", "namespace_objects.digest"],
            name="fk_envelope_objects_object_held",
            ondelete="RESTRICT",
        ),
        Index("ix_envelope_objects_holder", "namespace_id", "digest"),
        CheckConstraint("position >= 0", name="position_not_negative"),
    )

    namespace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    manifest_digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True)
    digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)


class EnvelopeBlock(Base):
    """Block ``block_index`` of an envelope's manifest has block key ``block_key``
    (``manifest.chunks[i].block_key``, ``kvreg.core.blockkey``): the registry's route index.

    Written with the envelope (``services.envelopes.store``), gone with it (deleted
    explicitly, and by the cascade); looked up by key (``services.router``). The keys are
    what the signed manifest says; the registry cannot recompute them (it has no tokens
    to hash), so a client checks tokens before any graft, as it does for local routes."""

    __tablename__ = "envelope_blocks"
    __table_args__ = (
        ForeignKeyConstraint(
            ["namespace_id", "manifest_digest"],
            ["envelopes.namespace_id", "envelopes.manifest_digest"],
            name="fk_envelope_blocks_envelope",
            ondelete="CASCADE",
        ),
        _digest_check("block_key"),
        CheckConstraint("block_index >= 0", name="block_index_not_negative"),
        # Looked up by key, compared with the key's position in the prompt: covers the lookup.
        Index("ix_envelope_blocks_block_key", "block_key", "block_index", "namespace_id", "manifest_digest"),
    )

    namespace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    manifest_digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True)
    block_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    block_key: Mapped[str] = mapped_column(String(DIGEST_LEN))


class OciManifest(Base):
    """The OCI documents that carry an envelope's artifact (``kvreg.core.oci``), for ``/v2/``.

    ``artifact`` is the artifact manifest (the kvreg manifest as config, its objects as
    layers), ``signature`` the manifest attaching the DSSE envelope to it; both are stored
    as served, so a digest a client pinned keeps naming the same bytes across upgrades.
    ``envelope_digest`` is the SHA-256 of the envelope bytes (the signature's one layer).
    Written with the envelope (``services.envelopes.store``) or, for envelopes stored before
    migration 0007, the first time a ``/v2/`` lookup needs them (``services.oci``); gone
    with the envelope (deleted explicitly, and by the cascade)."""

    __tablename__ = "oci_manifests"
    __table_args__ = (
        ForeignKeyConstraint(
            ["namespace_id", "manifest_digest"],
            ["envelopes.namespace_id", "envelopes.manifest_digest"],
            name="fk_oci_manifests_envelope",
            ondelete="CASCADE",
        ),
        _digest_check("artifact_digest"),
        _digest_check("signature_digest"),
        _digest_check("envelope_digest"),
        Index("ix_oci_manifests_artifact", "namespace_id", "artifact_digest", unique=True),
        Index("ix_oci_manifests_signature", "namespace_id", "signature_digest", unique=True),
        Index("ix_oci_manifests_envelope", "namespace_id", "envelope_digest"),
    )

    namespace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    manifest_digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True)
    artifact_digest: Mapped[str] = mapped_column(String(DIGEST_LEN))
    artifact: Mapped[bytes] = mapped_column(LargeBinary)
    signature_digest: Mapped[str] = mapped_column(String(DIGEST_LEN))
    signature: Mapped[bytes] = mapped_column(LargeBinary)
    envelope_digest: Mapped[str] = mapped_column(String(DIGEST_LEN))


class Ref(Base):
    """``namespace/name`` → a manifest digest of an envelope in that namespace."""

    __tablename__ = "refs"
    __table_args__ = (
        ForeignKeyConstraint(
            ["namespace_id", "manifest_digest"],
            ["envelopes.namespace_id", "envelopes.manifest_digest"],
            name="fk_refs_envelope",
            ondelete="RESTRICT",
        ),
        Index("ix_refs_target", "namespace_id", "manifest_digest"),
    )

    namespace_id: Mapped[int] = mapped_column(
        ForeignKey("namespaces.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    manifest_digest: Mapped[str] = mapped_column(String(DIGEST_LEN))
    is_tag: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The audit entry of the ref's latest change.
    log_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class UploadSession(Base):
    """A push in flight: GC keeps every object listed in it until it is closed or expires."""

    __tablename__ = "upload_sessions"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id", ondelete="CASCADE"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    closed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class UploadDigest(Base):
    __tablename__ = "upload_digests"
    __table_args__ = (_digest_check("digest"),)

    upload_id: Mapped[str] = mapped_column(
        ForeignKey("upload_sessions.id", ondelete="CASCADE"), primary_key=True
    )
    digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True, index=True)


class AuditEntry(Base):
    """One leaf of the append-only audit log: canonical JSON bytes and their RFC 6962 leaf hash."""

    __tablename__ = "audit_entries"
    __table_args__ = (
        CheckConstraint("seq >= 0", name="seq_not_negative"),
        CheckConstraint("length(leaf_hash) = 32", name="leaf_hash_is_sha256"),
        Index("ix_audit_entries_namespace", "namespace"),
        Index("ix_audit_entries_type", "type"),
        Index("ix_audit_entries_actor", "actor"),
        Index("ix_audit_entries_created_at", "created_at"),
    )

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    type: Mapped[str] = mapped_column(String(64))
    actor: Mapped[str | None] = mapped_column(String(64), nullable=True)
    namespace: Mapped[str | None] = mapped_column(String(63), nullable=True)
    entry: Mapped[bytes] = mapped_column(LargeBinary)
    leaf_hash: Mapped[bytes] = mapped_column(LargeBinary)


class AuditSubject(Base):
    """A digest an audit entry is about (its ``subjects``, and ``old``/``new`` when they are
    digests): lets the web UI list an artifact's history with one indexed query."""

    __tablename__ = "audit_subjects"
    __table_args__ = (_digest_check("digest"),)

    digest: Mapped[str] = mapped_column(String(DIGEST_LEN), primary_key=True)
    seq: Mapped[int] = mapped_column(
        ForeignKey("audit_entries.seq", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )


class LogHead(Base):
    """The single row locked while appending to the audit log (dense sequence numbers)."""

    __tablename__ = "log_head"
    __table_args__ = (
        CheckConstraint("id = 1", name="single_row"),
        CheckConstraint("size >= 0", name="size_not_negative"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    size: Mapped[int] = mapped_column(BigInteger)


class LogNode(Base):
    """A perfect subtree of the audit log's Merkle tree (``kvreg.core.logtree``); level 0 = leaves."""

    __tablename__ = "log_nodes"
    __table_args__ = (
        CheckConstraint("level >= 0 AND level < 64 AND idx >= 0", name="position_valid"),
        CheckConstraint("length(hash) = 32", name="hash_is_sha256"),
    )

    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary)


class LogCheckpoint(Base):
    """A checkpoint the registry signed; it never signs another, inconsistent one."""

    __tablename__ = "log_checkpoints"
    __table_args__ = (
        CheckConstraint("size >= 0", name="size_not_negative"),
        CheckConstraint("length(root) = 32", name="root_is_sha256"),
    )

    size: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    root: Mapped[bytes] = mapped_column(LargeBinary)
    note: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class LegalHold(Base):
    """A legal hold on a namespace (``ref_name`` NULL) or on one ref: blocks deletion and GC of
    everything it reaches until it is lifted.

    A ref hold records the envelope the ref pointed at when the hold was placed
    (``manifest_digest``); while the hold is active the ref can be neither moved nor
    deleted, so that envelope is the one it reaches (``kvreg_registry.services.holds``)."""

    __tablename__ = "legal_holds"
    __table_args__ = (
        Index("ix_legal_holds_active", "namespace_id", "lifted_at"),
        _digest_check("manifest_digest"),
        CheckConstraint(
            "(ref_name IS NULL AND manifest_digest IS NULL) OR "
            "(ref_name IS NOT NULL AND manifest_digest IS NOT NULL)",
            name="ref_hold_has_digest",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id", ondelete="RESTRICT"))
    ref_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    manifest_digest: Mapped[str | None] = mapped_column(String(DIGEST_LEN), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The audit entry that recorded the hold, and the one that recorded its lifting.
    log_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    lifted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    lifted_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lift_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    lifted_log_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class RetentionPolicy(Base):
    """Per-namespace retention applied by GC to envelopes no ref points at."""

    __tablename__ = "retention_policies"
    __table_args__ = (
        CheckConstraint("keep_versions IS NULL OR keep_versions >= 1", name="keep_versions_positive"),
        CheckConstraint("keep_days IS NULL OR keep_days >= 1", name="keep_days_positive"),
    )

    namespace_id: Mapped[int] = mapped_column(
        ForeignKey("namespaces.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    keep_versions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    keep_days: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_by: Mapped[str | None] = mapped_column(String(64), nullable=True)


class GraftReceipt(Base):
    """A signed statement by a client that it grafted an artifact, with the check's result.

    ``receipt`` is the DSSE envelope exactly as sent; ``receipt_digest`` the SHA-256 of
    its payload (a receipt sent twice is stored once). No foreign key to the envelope:
    a receipt is history and outlives the artifact's deletion."""

    __tablename__ = "graft_receipts"
    __table_args__ = (
        _digest_check("manifest_digest"),
        _digest_check("receipt_digest"),
        Index("ix_graft_receipts_artifact", "namespace_id", "manifest_digest"),
        Index("uq_graft_receipts_receipt", "namespace_id", "receipt_digest", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id", ondelete="RESTRICT"))
    manifest_digest: Mapped[str] = mapped_column(String(DIGEST_LEN))
    ref_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    receipt_digest: Mapped[str] = mapped_column(String(DIGEST_LEN))
    receipt: Mapped[bytes] = mapped_column(LargeBinary)
    signer_keyid: Mapped[str] = mapped_column(String(DIGEST_LEN))
    host_fingerprint: Mapped[str] = mapped_column(String(DIGEST_LEN))
    witness_ok: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    byte_exact: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # The time the client says it grafted; ``created_at`` is when the registry received it.
    grafted_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    log_seq: Mapped[int] = mapped_column(BigInteger)
    created_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebSession(Base):
    """A browser sign-in: the cookie holds a random id, the database only its SHA-256.

    The session acts with the API token it was opened with, so revoking or expiring
    the token ends the session too; ``csrf_token`` is the synchroniser token every
    form of the session must echo (``kvreg_registry.web.session``)."""

    __tablename__ = "web_sessions"
    __table_args__ = (CheckConstraint("length(id_hash) = 64", name="id_hash_is_sha256_hex"),)

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
