"""Envelopes (signed manifests), refs and tags, search, and garbage collection."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from kvreg.core.digest import Digest
from kvreg.core.errors import ObjectsMissingError, PreconditionRequiredError, RequestInvalidError
from kvreg.core.names import validate_name, validate_namespace
from kvreg.fileio.faults import crash_point
from kvreg_registry.api import models as m
from kvreg_registry.api.deps import (
    NamespaceAccess,
    etag,
    namespace_access,
    parse_etag,
    principal,
    read_body,
    state,
)
from kvreg_registry.api.params import (
    ETAG_PATTERN,
    NAMESPACE_PATTERN,
    TIME_PATTERN,
    DigestPath,
    NamePath,
    NsPath,
    documented,
)
from kvreg_registry.api.routes_admin import iso
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope, Ref
from kvreg_registry.services import accounts, envelopes, holds, refs, search, search_text
from kvreg_registry.services import objects as object_service
from kvreg_registry.services.gc import collect_garbage

router = APIRouter()


# --- envelopes --------------------------------------------------------------------------------


def _store_envelope(access: NamespaceAccess, d: Digest, body: bytes) -> tuple[str, int | None]:
    st, ns = access.st, access.name
    with access.read("write") as (s, namespace):
        existing = s.get(Envelope, (namespace.id, d))
        if existing is not None:
            return existing.signer_keyid, None
        keys = accounts.list_keys(s, namespace, include_revoked=False)
        checked = envelopes.check_envelope(d, body, keys, ns)
        # Refuse before writing anything if objects are missing (the write transaction checks again).
        absent = object_service.missing(s, namespace, checked.manifest.object_digests())
        if absent:
            raise ObjectsMissingError(
                f"namespace {ns!r} lacks {len(absent)} object(s) that the manifest references",
                hint="upload the objects first (kvreg push does), then the envelope",
                missing=[str(x) for x in absent[:1000]],
            )
    # The namespace holds the text objects (checked above): read them for search, outside any
    # transaction (capped at search_text.MAX_TEXT_BYTES each).
    text, prompt = search_text.artifact_texts(st.storage, checked.manifest)
    payload = checked.envelope.payload
    with st.storage.begin_upload() as pending:
        pending.write(payload)
        with st.db.write() as s:
            namespace = accounts.get_namespace(s, ns)
            object_service.lock_object(s, d, len(payload))
            pending.commit(d)
            crash_point("registry.envelope.after_publish")
            object_service.hold(s, namespace, d)
            row, seq = envelopes.store(s, access.who, namespace, checked, text=text, prompt=prompt)
            return row.signer_keyid, seq


@router.put(
    "/namespaces/{ns}/envelopes/{digest}",
    response_model=m.EnvelopeStored,
    responses={**m.errors(400, 403, 404, 422), 201: {"model": m.EnvelopeStored}},
    summary="Upload a signed manifest (DSSE envelope JSON); checked against the namespace's keys and objects",
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}
    },
)
async def put_envelope(
    ns: NsPath, digest: DigestPath, request: Request, access: NamespaceAccess = Depends(namespace_access)
) -> JSONResponse:
    st = access.st
    validate_namespace(ns)
    d = Digest(digest)
    body = await read_body(request, st.settings.max_json_bytes)
    signer, seq = await run_in_threadpool(_store_envelope, access, d, body)
    crash_point("registry.envelope.after_commit")
    out = m.EnvelopeStored(namespace=ns, digest=d, signer=signer, created=seq is not None, log_index=seq)
    return JSONResponse(out.model_dump(), status_code=201 if seq is not None else 200)


@router.get(
    "/namespaces/{ns}/envelopes/{digest}",
    summary="The envelope exactly as uploaded",
    responses={**m.errors(400, 404), 200: {"content": {"application/json": {}}}},
)
def get_envelope(
    ns: NsPath, digest: DigestPath, access: NamespaceAccess = Depends(namespace_access)
) -> Response:
    d = Digest(digest)
    with access.read() as (s, namespace):
        row = envelopes.get(s, namespace, d)
        headers = {"ETag": etag(d)}
        if row.log_seq is not None:
            headers["X-Kvreg-Log-Index"] = str(row.log_seq)
        return Response(row.envelope, media_type="application/json", headers=headers)


@router.delete(
    "/namespaces/{ns}/envelopes/{digest}",
    responses=m.errors(400, 403, 404, 409),
    status_code=204,
    summary="Delete an envelope no ref points at and no legal hold protects (namespace admin)",
)
def delete_envelope(
    ns: NsPath,
    digest: DigestPath,
    access: NamespaceAccess = Depends(namespace_access),
    reason: str | None = Query(default=None, max_length=2000, description="why (kept in the tombstone)"),
) -> Response:
    d = Digest(digest)
    with holds.refusals_logged(access.st.db, access.who), access.write() as (s, namespace):
        envelopes.delete_envelope(s, access.who, namespace, d, note=reason)
    return Response(status_code=204)


# --- refs --------------------------------------------------------------------------------------


def _ref_out(ns: str, r: Ref) -> m.RefOut:
    return m.RefOut(
        ref=f"{ns}/{r.name}",
        name=r.name,
        digest=r.manifest_digest,
        tag=r.is_tag,
        updated_at=iso(r.updated_at) or "",
        updated_by=r.updated_by,
        log_index=r.log_seq,
    )


@router.get(
    "/namespaces/{ns}/refs",
    responses=m.errors(400, 404),
    response_model=m.RefList,
    summary="The refs of a namespace",
)
def list_refs(ns: NsPath, access: NamespaceAccess = Depends(namespace_access)) -> m.RefList:
    with access.read() as (s, namespace):
        return m.RefList(refs=[_ref_out(ns, r) for r in refs.list_refs(s, namespace)])


@router.get(
    "/namespaces/{ns}/refs/{name}",
    responses=m.errors(400, 404),
    response_model=m.RefOut,
    summary="One ref (ETag: its digest)",
)
def get_ref(ns: NsPath, name: NamePath, access: NamespaceAccess = Depends(namespace_access)) -> JSONResponse:
    validate_name(name)
    with access.read() as (s, namespace):
        r = refs.get(s, namespace, name)
        return JSONResponse(_ref_out(ns, r).model_dump(), headers={"ETag": etag(r.manifest_digest)})


def _precondition(if_match: str | None, if_none_match: str | None) -> Digest | None:
    if if_match is not None and if_none_match is not None:
        raise RequestInvalidError("send If-Match or If-None-Match, not both")
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise RequestInvalidError("If-None-Match must be '*' (create only if absent)")
        return None
    if if_match is None:
        raise PreconditionRequiredError(
            "a ref changes only by compare-and-swap",
            hint='send If-Match: "<current digest>" to move it, or If-None-Match: * to create it',
        )
    return parse_etag(if_match)


@router.put(
    "/namespaces/{ns}/refs/{name}",
    response_model=m.RefOut,
    responses={**m.errors(400, 403, 404, 409, 422, 428), 201: {"model": m.RefOut}},
    summary="Create (If-None-Match: *) or move (If-Match) a ref; tags are immutable",
)
def put_ref(
    ns: NsPath,
    name: NamePath,
    body: m.RefIn,
    access: NamespaceAccess = Depends(namespace_access),
    if_match: str | None = Header(
        default=None, description="the ref's current digest", json_schema_extra=documented(ETAG_PATTERN)
    ),
    if_none_match: str | None = Header(
        default=None, description="'*': create only", json_schema_extra=documented(r"^\*$")
    ),
) -> JSONResponse:
    validate_name(name)
    expected = _precondition(if_match, if_none_match)
    d = Digest(body.digest)
    with holds.refusals_logged(access.st.db, access.who), access.write("write") as (s, namespace):
        row, created, _seq = refs.put(s, access.who, namespace, name, d, expected=expected, tag=body.tag)
        out = _ref_out(ns, row)
    crash_point("registry.ref.after_commit")
    return JSONResponse(out.model_dump(), status_code=201 if created else 200, headers={"ETag": etag(d)})


@router.delete(
    "/namespaces/{ns}/refs/{name}",
    responses=m.errors(400, 403, 404, 409, 428),
    status_code=204,
    summary="Delete a ref (namespace admin, If-Match)",
)
def delete_ref(
    ns: NsPath,
    name: NamePath,
    access: NamespaceAccess = Depends(namespace_access),
    if_match: str | None = Header(
        default=None, description="the ref's current digest", json_schema_extra=documented(ETAG_PATTERN)
    ),
) -> Response:
    validate_name(name)
    if if_match is None:
        raise PreconditionRequiredError('deleting a ref needs If-Match: "<current digest>"')
    expected = parse_etag(if_match)
    with holds.refusals_logged(access.st.db, access.who), access.write() as (s, namespace):
        refs.remove(s, access.who, namespace, name, expected=expected)
    return Response(status_code=204)


# --- search and GC ------------------------------------------------------------------------------


@router.get(
    "/artifacts",
    responses=m.errors(400),
    response_model=m.ArtifactList,
    summary="List and search the artifacts the caller can read",
)
def list_artifacts(
    request: Request,
    who: Principal = Depends(principal),
    namespace: str | None = Query(
        default=None, max_length=63, json_schema_extra=documented(NAMESPACE_PATTERN)
    ),
    model: str | None = Query(default=None, max_length=200),
    verifier: str | None = Query(default=None, max_length=200),
    verdict: str | None = Query(default=None, max_length=64),
    q: str | None = Query(
        default=None, max_length=500, description="words, each a prefix of a word of the artifact (AND)"
    ),
    since: str | None = Query(
        default=None,
        max_length=40,
        description="stored at or after: YYYY-MM-DD or ISO 8601 (UTC default)",
        json_schema_extra=documented(TIME_PATTERN),
    ),
    until: str | None = Query(
        default=None,
        max_length=40,
        description="stored before: ISO 8601, or YYYY-MM-DD (that day included)",
        json_schema_extra=documented(TIME_PATTERN),
    ),
    limit: int = Query(default=50, ge=1, le=search.MAX_LIMIT),
    offset: int = Query(default=0, ge=0, le=1_000_000),
) -> m.ArtifactList:
    if namespace is not None:
        validate_namespace(namespace)
    query = search.Query(
        namespace=namespace,
        model=model,
        verifier=verifier,
        verdict=verdict,
        text=q,
        limit=limit,
        offset=offset,
        since=search.parse_time(since),
        until=search.parse_time(until, end_of_day=True),
    )
    with state(request).db.read() as s:
        rows, total = search.search(s, who, query)
        items = [
            m.ArtifactOut(
                namespace=ns_name,
                digest=e.manifest_digest,
                refs=names,
                title=e.title,
                question=e.question,
                model_fingerprint=e.model_fingerprint,
                model_name=e.model_name,
                tokenizer_fingerprint=e.tokenizer_fingerprint,
                config_fingerprint=e.config_fingerprint,
                verifier=e.verifier,
                verdict=e.verdict,
                token_count=e.token_count,
                chunk_count=e.chunk_count,
                block_size=e.block_size,
                size=e.size,
                merkle_root=e.merkle_root,
                signer=e.signer_keyid,
                created_at=iso(e.created_at) or "",
                created_by=e.created_by,
            )
            for e, ns_name, names in rows
        ]
    return m.ArtifactList(artifacts=items, total=total, limit=limit, offset=offset)


@router.post(
    "/gc",
    responses=m.errors(400, 403),
    response_model=m.GcOut,
    summary="Garbage collection with a grace period (server admin)",
)
def run_gc(body: m.GcIn, request: Request, who: Principal = Depends(principal)) -> m.GcOut:
    st = state(request)
    who.require_admin()
    grace = st.settings.gc_grace_seconds if body.grace_seconds is None else body.grace_seconds
    report = collect_garbage(st.db, st.storage, who, grace_seconds=grace, dry_run=body.dry_run)
    return m.GcOut.model_validate(report.to_dict())
