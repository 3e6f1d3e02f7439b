"""Request and response bodies of the API, as pydantic models (they make the OpenAPI schema).

The formats of strings and the path parameters are in ``api.params``; :func:`errors` lists
the error responses a route documents.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from kvreg_registry.api.params import (
    DIGEST_PATTERN,
    KEY_LABEL_PATTERN,
    NAME_PATTERN,
    NAMESPACE_PATTERN,
    PUBLIC_KEY_PATTERN,
    USER_PATTERN,
    documented,
)
from kvreg_registry.services.accounts import MAX_DESCRIPTION


def _takes_int(annotation: object) -> bool:
    return annotation is int or int in typing.get_args(annotation)


class Strict(BaseModel):
    """A request body: unknown fields are refused, and so is ``true``/``false`` for an integer
    (pydantic's lax mode would read them as 1 and 0; ``5.0`` stays a JSON Schema integer)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_integers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                if isinstance(data.get(name), bool) and _takes_int(field.annotation):
                    raise ValueError(f"{name}: a boolean is not an integer")
        return data


class DigestList(Strict):
    digests: list[str] = Field(
        description="object digests, sha256:<64 hex>",
        json_schema_extra={"items": {"type": "string", "pattern": DIGEST_PATTERN}},
    )


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


class PackStored(BaseModel):
    objects: list[ObjectStored] = Field(description="the pack's objects, in the order they were sent")


class NamespaceIn(Strict):
    name: str = Field(json_schema_extra=documented(NAMESPACE_PATTERN))
    public: StrictBool = False
    description: str = Field(default="", max_length=MAX_DESCRIPTION, description="Markdown")


class NamespacePatch(Strict):
    """The fields of a namespace its admins may change (``PATCH``)."""

    description: str = Field(max_length=MAX_DESCRIPTION, description="Markdown; '' clears it")


class NamespaceOut(BaseModel):
    name: str
    public: bool
    description: str = Field(description="Markdown")
    created_at: str
    description_updated_at: str | None = Field(default=None, description="when the description was last set")
    description_updated_by: str | None = Field(
        default=None, description="who last set it (null: at creation)"
    )


class NamespaceList(BaseModel):
    namespaces: list[NamespaceOut]


class UserIn(Strict):
    name: str = Field(json_schema_extra=documented(USER_PATTERN))
    admin: StrictBool = False


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
        max_length=200,
        description="ed25519:<base64 of 32 bytes>, as `kvreg keys export` prints",
        json_schema_extra=documented(PUBLIC_KEY_PATTERN),
    )
    label: str = Field(
        default="",
        max_length=200,
        description="a human name for the key, shown where it signs (optional)",
        json_schema_extra=documented(KEY_LABEL_PATTERN),
    )
    owner: str | None = Field(
        default=None,
        max_length=64,
        description="the user the key belongs to (optional; default: the caller)",
        json_schema_extra=documented(USER_PATTERN),
    )


class KeyOut(BaseModel):
    keyid: str
    public_key: str
    created_at: str
    revoked_at: str | None
    label: str = Field(default="", description="the key's human name ('' when none was given)")
    owner: str | None = Field(default=None, description="the user the key belongs to")
    log_index: int | None = Field(default=None, description="the audit entry that registered the key")


class KeyList(BaseModel):
    keys: list[KeyOut]


class RefIn(Strict):
    digest: str = Field(json_schema_extra=documented(DIGEST_PATTERN))
    tag: StrictBool = False


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
    dry_run: StrictBool = False


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
    max_pack_objects: int = Field(description="objects per object pack (POST .../uploads/{id}/objects)")
    max_pack_bytes: int = Field(description="bytes per object pack, all objects together")
    max_route_keys: int = Field(description="block keys per POST /route")
    max_fetch_objects: int | None = Field(
        default=None,
        description="objects per fetch pack (POST .../objects/fetch); null where object downloads "
        "are redirected to the storage, and clients then download objects one by one",
    )


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
        default=None,
        description="a ref NAME of the namespace; null: the whole namespace",
        json_schema_extra={"anyOf": [{"type": "string", "pattern": NAME_PATTERN}, {"type": "null"}]},
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
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "description": "at least one of keep_versions and keep_days (DELETE clears the policy)",
            "anyOf": [
                {"required": ["keep_versions"], "properties": {"keep_versions": {"type": "integer"}}},
                {"required": ["keep_days"], "properties": {"keep_days": {"type": "integer"}}},
            ],
        },
    )
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

    model_fingerprint: str = Field(
        max_length=200,
        description="sha256:<64 hex> of the model",
        json_schema_extra=documented(DIGEST_PATTERN),
    )
    tokenizer_fingerprint: str = Field(
        max_length=200,
        description="sha256:<64 hex> of the tokenizer",
        json_schema_extra=documented(DIGEST_PATTERN),
    )
    config_fingerprint: str = Field(
        max_length=200,
        description="sha256:<64 hex> of the engine config",
        json_schema_extra=documented(DIGEST_PATTERN),
    )
    block_size: int = Field(
        description="tokens per block of the prompt's keys (1 to 1048576)",
        json_schema_extra={"minimum": 1, "maximum": 1 << 20},
    )
    block_keys: list[str] = Field(
        description="the prompt's block keys in order, block 0 first (at most 4096, all different); "
        "empty for a prompt shorter than one block",
        json_schema_extra={
            "maxItems": 4096,
            "uniqueItems": True,
            "items": {"type": "string", "pattern": DIGEST_PATTERN},
        },
    )
    namespaces: list[str] | None = Field(
        default=None,
        description="only these namespaces (at most 100); null: every namespace the caller can read",
        json_schema_extra={
            "anyOf": [
                {"type": "array", "maxItems": 100, "items": {"type": "string", "pattern": NAMESPACE_PATTERN}},
                {"type": "null"},
            ]
        },
    )
    limit: int = Field(
        default=20,
        description="at most this many candidates (1 to 100)",
        json_schema_extra={"minimum": 1, "maximum": 100},
    )


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


# --- errors -----------------------------------------------------------------------------------


class ErrorBody(BaseModel):
    """The error itself; ``code`` is stable (docs/protocol.md, "Error codes")."""

    code: str = Field(description="stable machine-readable code, also in the X-Kvreg-Error-Code header")
    message: str
    hint: str | None = None
    details: dict[str, object] | None = None


class ErrorOut(BaseModel):
    """Every 4xx and 5xx answer of ``/api/v1`` (``kvreg_registry.api.errors``)."""

    error: ErrorBody


_ERROR_MEANING: dict[int, str] = {
    400: "the request is malformed (REQUEST_INVALID, DIGEST_INVALID, NAME_INVALID, KEY_INVALID)",
    401: "no token, an unknown, revoked or expired one (UNAUTHENTICATED), a disabled user's (USER_DISABLED)",
    403: "the token lacks the role (FORBIDDEN), or a legal hold protects the target (LEGAL_HOLD)",
    404: "the namespace, or the thing asked for in it, is not there (*_UNKNOWN)",
    409: "a conflict: REF_CONFLICT, TAG_IMMUTABLE, ALREADY_EXISTS or IN_USE",
    413: "the body is over the limit (BODY_TOO_LARGE)",
    416: "the Range is outside the object (RANGE_NOT_SATISFIABLE)",
    422: "the content is refused (DIGEST_MISMATCH, ENVELOPE_INVALID, SIGNATURE_INVALID, OBJECTS_MISSING...)",
    428: "a ref change without If-Match or If-None-Match: * (PRECONDITION_REQUIRED)",
    429: "too many failed authentications (RATE_LIMITED; Retry-After says when to try again)",
    503: "the database or the storage is unreachable (UNAVAILABLE)",
}

#: What any request may get: a body over the limit (the body-limit middleware answers every
#: path) and an unreachable database or storage.
ANY_REQUEST = (413, 503)
#: What any request that reads the ``Authorization`` header may get besides.
AUTHENTICATED = (*ANY_REQUEST, 401, 429)


def errors(*codes: int, base: tuple[int, ...] = AUTHENTICATED) -> dict[int | str, dict[str, object]]:
    """The ``responses=`` of a route that may answer ``codes`` (and ``base``) with an ``ErrorOut``."""
    return {
        code: {"model": ErrorOut, "description": _ERROR_MEANING[code]} for code in sorted({*base, *codes})
    }
