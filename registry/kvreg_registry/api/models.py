"""Request and response bodies of the API, as pydantic models (they make the OpenAPI schema)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DigestList(Strict):
    digests: list[str] = Field(description="object digests, sha256:<64 hex>")


class UploadOpened(BaseModel):
    upload: str
    missing: list[str]
    expires_at: str


class Missing(BaseModel):
    missing: list[str]


class ObjectStored(BaseModel):
    digest: str
    size: int
    stored: bool = Field(description="the bytes were new to the storage")
    log_index: int | None = Field(
        default=None, description="the audit entry (None: the namespace held it already)"
    )


class NamespaceIn(Strict):
    name: str
    public: bool = False
    description: str = Field(default="", max_length=2000)


class NamespaceOut(BaseModel):
    name: str
    public: bool
    description: str
    created_at: str


class NamespaceList(BaseModel):
    namespaces: list[NamespaceOut]


class UserIn(Strict):
    name: str
    admin: bool = False


class UserOut(BaseModel):
    name: str
    admin: bool
    created_at: str


class TokenIn(Strict):
    label: str = Field(default="", max_length=200)
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)


class TokenOut(BaseModel):
    id: int
    token: str = Field(description="shown once; only its hash is stored")
    user: str
    label: str
    expires_at: str | None


class RoleIn(Strict):
    role: Literal["read", "write", "admin"]


class KeyIn(Strict):
    public_key: str = Field(
        max_length=200, description="ed25519:<base64 of 32 bytes>, as `kvreg keys export` prints"
    )


class KeyOut(BaseModel):
    keyid: str
    public_key: str
    created_at: str
    revoked_at: str | None


class KeyList(BaseModel):
    keys: list[KeyOut]


class RefIn(Strict):
    digest: str
    tag: bool = False


class RefOut(BaseModel):
    ref: str
    name: str
    digest: str
    tag: bool
    updated_at: str
    updated_by: str | None
    log_index: int | None = Field(
        default=None, description="in a PUT's answer: the audit entry of this change"
    )


class RefList(BaseModel):
    refs: list[RefOut]


class EnvelopeStored(BaseModel):
    namespace: str
    digest: str
    signer: str
    created: bool
    log_index: int | None = Field(
        default=None, description="the audit entry of this change (None: stored already)"
    )


class ArtifactOut(BaseModel):
    namespace: str
    digest: str
    refs: list[str]
    title: str
    question: str
    model_fingerprint: str
    model_name: str
    tokenizer_fingerprint: str
    config_fingerprint: str
    verifier: str | None
    verdict: str | None
    token_count: int
    chunk_count: int
    block_size: int
    size: int
    merkle_root: str
    signer: str
    created_at: str
    created_by: str | None


class ArtifactList(BaseModel):
    artifacts: list[ArtifactOut]
    total: int
    limit: int
    offset: int


class GcIn(Strict):
    grace_seconds: int | None = Field(default=None, ge=0)
    dry_run: bool = False


class GcOut(BaseModel):
    sessions_expired: int
    sessions_removed: int
    links_removed: int
    objects_removed: int
    bytes_removed: int
    orphans_removed: int
    incomplete_removed: int
    retention_deleted: int = Field(default=0, description="envelopes retention deleted (or would)")
    retention_held: int = Field(
        default=0, description="envelopes retention would delete but a legal hold kept"
    )
    links_held: int = Field(default=0, description="unreferenced objects kept by a namespace's legal hold")
    dry_run: bool


class Limits(BaseModel):
    max_object_bytes: int
    max_json_bytes: int
    max_missing_digests: int
    max_route_keys: int = Field(description="block keys per POST /route")


class ServerInfo(BaseModel):
    kvreg: str
    api: int
    storage: str
    limits: Limits


class WhoAmI(BaseModel):
    user: str | None
    admin: bool
    roles: dict[str, str]


class LogKey(BaseModel):
    origin: str
    verifier_key: str = Field(description="C2SP verifier key: NAME+KEYID+base64(0x01 || public key)")
    public_key: str


class LogProof(BaseModel):
    size: int
    root: str = Field(description="base64 root hash of the tree of this size")
    hashes: list[str] = Field(description="base64 proof hashes, RFC 6962 order")


class InclusionProof(LogProof):
    index: int
    leaf_hash: str


class ConsistencyProof(LogProof):
    first: int


class LogEntry(BaseModel):
    seq: int
    entry: str = Field(description="base64 of the entry's canonical JSON bytes (the leaf)")
    leaf_hash: str


class LogEntries(BaseModel):
    entries: list[LogEntry]
    size: int


# --- compliance: legal holds, retention, graft receipts -------------------------------------


class HoldIn(Strict):
    ref: str | None = Field(
        default=None, description="a ref NAME of the namespace; null: the whole namespace"
    )
    reason: str = Field(min_length=1, max_length=2000, description="why (the matter, a ticket)")


class HoldOut(BaseModel):
    id: int
    namespace: str
    ref: str | None
    digest: str | None = Field(description="a ref hold: the envelope the ref pointed at when it was placed")
    reason: str
    active: bool
    created_by: str | None
    created_at: str
    log_index: int | None = Field(description="the hold.placed entry")
    lifted_at: str | None
    lifted_by: str | None
    lift_reason: str | None
    lifted_log_index: int | None = Field(description="the hold.lifted entry")


class HoldList(BaseModel):
    holds: list[HoldOut]


class RetentionIn(Strict):
    keep_versions: int | None = Field(default=None, ge=1, le=1_000_000)
    keep_days: int | None = Field(default=None, ge=1, le=1_000_000)


class RetentionOut(BaseModel):
    namespace: str
    keep_versions: int | None
    keep_days: int | None
    updated_at: str | None
    updated_by: str | None
    log_index: int | None = Field(
        default=None, description="in a PUT's answer: the audit entry (None: unchanged)"
    )


class ReceiptStored(BaseModel):
    id: int
    namespace: str
    digest: str
    receipt_digest: str
    created: bool
    log_index: int | None = Field(description="the graft.receipt entry (the first one's for a repeat)")


class ReceiptOut(BaseModel):
    id: int
    namespace: str
    digest: str
    ref: str | None
    receipt_digest: str
    signer: str = Field(description="key id of the signer")
    signer_key: str
    signer_registered: bool = Field(
        description="the signer is a non-revoked key registered for the namespace"
    )
    host: dict[str, str | None]
    witness: Literal["pass", "fail", "skipped"]
    check: dict[str, int | bool] | None
    graft: dict[str, int | bool] | None
    time: str = Field(description="when the client says it grafted")
    received_at: str
    submitted_by: str | None
    log_index: int
    envelope: dict[str, object] = Field(description="the signed receipt (DSSE envelope) as sent")


class ReceiptList(BaseModel):
    receipts: list[ReceiptOut]
    total: int
    limit: int
    offset: int


# --- the router -----------------------------------------------------------------------------


class RouteIn(Strict):
    """``POST /api/v1/route``: the prompt's block keys under one engine (``kvreg.core.blockkey``)."""

    model_fingerprint: str = Field(max_length=200, description="sha256:<64 hex> of the model")
    tokenizer_fingerprint: str = Field(max_length=200, description="sha256:<64 hex> of the tokenizer")
    config_fingerprint: str = Field(max_length=200, description="sha256:<64 hex> of the engine config")
    block_size: int = Field(description="tokens per block of the prompt's keys (1 to 1048576)")
    block_keys: list[str] = Field(
        description="the prompt's block keys in order, block 0 first (at most 4096, all different); "
        "empty for a prompt shorter than one block",
        json_schema_extra={"maxItems": 4096},
    )
    namespaces: list[str] | None = Field(
        default=None,
        description="only these namespaces (at most 100); null: every namespace the caller can read",
        json_schema_extra={"maxItems": 100},
    )
    limit: int = Field(default=20, description="at most this many candidates (1 to 100)")


class RouteCandidateOut(BaseModel):
    namespace: str
    manifest_digest: str
    refs: list[str] = Field(description="names of the refs of the namespace that point at the artifact")
    matched_blocks: int = Field(
        description="leading prompt keys the artifact holds at the same index (0 with no keys)"
    )
    token_count: int
    prompt_tokens: int | None = Field(description="the manifest's prompt.token_count, if it records one")
    block_size: int
    verdict: str | None
    verifier: str | None
    created_at: str = Field(description="when the registry stored it (UTC)")


class RouteOut(BaseModel):
    candidates: list[RouteCandidateOut]
    limit: int
