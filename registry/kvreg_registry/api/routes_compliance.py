"""Legal holds, retention policies and graft receipts (docs/protocol.md, "Compliance").

Every call that changes something appends exactly one audit entry in the
transaction of the change (``hold.placed``, ``hold.lifted``, ``retention.set``,
``retention.cleared``, ``graft.receipt``); a call that changes nothing (lifting a
lifted hold, setting the same policy, a receipt sent again) appends none.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from kvreg.core.digest import Digest
from kvreg.core.names import validate_namespace
from kvreg_registry.api import models as m
from kvreg_registry.api.deps import NamespaceAccess, namespace_access, read_body
from kvreg_registry.api.params import DIGEST_PATTERN, IdPath, NsPath, documented
from kvreg_registry.api.routes_admin import iso
from kvreg_registry.db.models import LegalHold, RetentionPolicy
from kvreg_registry.services import holds, receipts, retention
from kvreg_registry.state import RegistryState

router = APIRouter(tags=["compliance"])


# --- legal holds -----------------------------------------------------------------------------


def hold_out(ns: str, h: LegalHold) -> m.HoldOut:
    return m.HoldOut(
        id=h.id,
        namespace=ns,
        ref=h.ref_name,
        digest=h.manifest_digest,
        reason=h.reason,
        active=h.lifted_at is None,
        created_by=h.created_by,
        created_at=iso(h.created_at) or "",
        log_index=h.log_seq,
        lifted_at=iso(h.lifted_at),
        lifted_by=h.lifted_by,
        lift_reason=h.lift_reason,
        lifted_log_index=h.lifted_log_seq,
    )


@router.post(
    "/namespaces/{ns}/holds",
    responses=m.errors(400, 403, 404),
    status_code=201,
    response_model=m.HoldOut,
    summary="Place a legal hold on the namespace or on one ref (namespace admin)",
)
def place_hold(ns: NsPath, body: m.HoldIn, access: NamespaceAccess = Depends(namespace_access)) -> m.HoldOut:
    with access.write("admin") as (s, namespace):
        return hold_out(ns, holds.place(s, access.who, namespace, ref=body.ref, reason=body.reason))


@router.get(
    "/namespaces/{ns}/holds",
    responses=m.errors(400, 403, 404),
    response_model=m.HoldList,
    summary="Legal holds (namespace admin)",
)
def list_holds(
    ns: NsPath,
    access: NamespaceAccess = Depends(namespace_access),
    active: bool = Query(default=False, description="only holds not lifted"),
) -> m.HoldList:
    with access.read("admin") as (s, namespace):
        return m.HoldList(holds=[hold_out(ns, h) for h in holds.list_holds(s, namespace, active_only=active)])


@router.get(
    "/namespaces/{ns}/holds/{hold_id}",
    responses=m.errors(400, 403, 404),
    response_model=m.HoldOut,
    summary="One legal hold",
)
def get_hold(ns: NsPath, hold_id: IdPath, access: NamespaceAccess = Depends(namespace_access)) -> m.HoldOut:
    with access.read("admin") as (s, namespace):
        return hold_out(ns, holds.get(s, namespace, hold_id))


@router.delete(
    "/namespaces/{ns}/holds/{hold_id}",
    responses=m.errors(400, 403, 404),
    response_model=m.HoldOut,
    summary="Lift a legal hold (namespace admin); logged as hold.lifted",
)
def lift_hold(
    ns: NsPath,
    hold_id: IdPath,
    access: NamespaceAccess = Depends(namespace_access),
    reason: str = Query(default="", max_length=2000, description="why it is lifted (logged)"),
) -> m.HoldOut:
    with access.write("admin") as (s, namespace):
        hold, _seq = holds.lift(s, access.who, namespace, hold_id, reason=reason)
        return hold_out(ns, hold)


# --- retention -------------------------------------------------------------------------------


def retention_out(ns: str, p: RetentionPolicy | None, seq: int | None = None) -> m.RetentionOut:
    return m.RetentionOut(
        namespace=ns,
        keep_versions=None if p is None else p.keep_versions,
        keep_days=None if p is None else p.keep_days,
        updated_at=None if p is None else iso(p.updated_at),
        updated_by=None if p is None else p.updated_by,
        log_index=seq,
    )


@router.get(
    "/namespaces/{ns}/retention",
    responses=m.errors(400, 404),
    response_model=m.RetentionOut,
    summary="The namespace's retention policy (nulls: keep everything)",
)
def get_retention(ns: NsPath, access: NamespaceAccess = Depends(namespace_access)) -> m.RetentionOut:
    with access.read() as (s, namespace):
        return retention_out(ns, retention.get_policy(s, namespace))


@router.put(
    "/namespaces/{ns}/retention",
    responses=m.errors(400, 403, 404),
    response_model=m.RetentionOut,
    summary="Set the retention policy GC applies (namespace admin)",
)
def put_retention(
    ns: NsPath, body: m.RetentionIn, access: NamespaceAccess = Depends(namespace_access)
) -> m.RetentionOut:
    with access.write("admin") as (s, namespace):
        policy, seq = retention.set_policy(
            s, access.who, namespace, keep_versions=body.keep_versions, keep_days=body.keep_days
        )
        return retention_out(ns, policy, seq)


@router.delete(
    "/namespaces/{ns}/retention",
    responses=m.errors(400, 403, 404),
    status_code=204,
    summary="Clear the retention policy: keep everything (namespace admin)",
)
def delete_retention(ns: NsPath, access: NamespaceAccess = Depends(namespace_access)) -> Response:
    with access.write("admin") as (s, namespace):
        retention.clear_policy(s, access.who, namespace)
    return Response(status_code=204)


# --- graft receipts --------------------------------------------------------------------------


def _store_receipt(access: NamespaceAccess, body: bytes) -> m.ReceiptStored:
    ns = access.name
    with access.write() as (s, namespace):
        opened = receipts.check(body, namespace)
        row, seq = receipts.store(s, access.who, namespace, opened)
        return m.ReceiptStored(
            id=row.id,
            namespace=ns,
            digest=row.manifest_digest,
            receipt_digest=row.receipt_digest,
            created=seq is not None,
            log_index=row.log_seq,
        )


@router.post(
    "/namespaces/{ns}/receipts",
    response_model=m.ReceiptStored,
    status_code=201,
    responses={
        **m.errors(400, 403, 404, 422),
        200: {"model": m.ReceiptStored, "description": "this receipt was stored already"},
    },
    summary="Send a signed graft receipt (read role, with a token); logged as graft.receipt",
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}
    },
)
async def post_receipt(
    ns: NsPath, request: Request, access: NamespaceAccess = Depends(namespace_access)
) -> JSONResponse:
    st = access.st
    validate_namespace(ns)
    body = await read_body(request, st.settings.max_json_bytes)
    out = await run_in_threadpool(_store_receipt, access, body)
    return JSONResponse(out.model_dump(), status_code=201 if out.created else 200)


def _receipt_outs(st: RegistryState, ns: str, views: list[receipts.ReceiptView]) -> list[m.ReceiptOut]:
    return [
        m.ReceiptOut(
            id=v.row.id,
            namespace=ns,
            digest=v.row.manifest_digest,
            ref=v.receipt.ref,
            receipt_digest=v.row.receipt_digest,
            signer=v.row.signer_keyid,
            signer_key=v.receipt.signer,
            signer_registered=v.signer_registered,
            host=v.receipt.host,
            witness=v.receipt.witness,  # type: ignore[arg-type]  # a str, checked against WITNESS_RESULTS when parsed
            check=v.receipt.check,
            graft=v.receipt.graft,
            time=v.receipt.time,
            received_at=iso(v.row.created_at) or "",
            submitted_by=v.row.created_by,
            log_index=v.row.log_seq,
            envelope=v.envelope,
        )
        for v in views
    ]


@router.get(
    "/namespaces/{ns}/receipts",
    responses=m.errors(400, 404),
    response_model=m.ReceiptList,
    summary="Graft receipts of the namespace (of one artifact with ?digest=), newest first",
)
def list_receipts(
    ns: NsPath,
    access: NamespaceAccess = Depends(namespace_access),
    digest: str | None = Query(
        default=None,
        description="only receipts for this manifest digest",
        json_schema_extra=documented(DIGEST_PATTERN),
    ),
    limit: int = Query(default=50, ge=1, le=receipts.MAX_LIMIT),
    offset: int = Query(default=0, ge=0, le=1_000_000),
) -> m.ReceiptList:
    st = access.st
    d = None if digest is None else Digest(digest)
    with access.read() as (s, namespace):
        rows, total = receipts.list_receipts(s, namespace, digest=d, limit=limit, offset=offset)
        views = receipts.view(s, namespace, rows)
    return m.ReceiptList(receipts=_receipt_outs(st, ns, views), total=total, limit=limit, offset=offset)


@router.get(
    "/namespaces/{ns}/receipts/{receipt_id}",
    responses=m.errors(400, 404),
    response_model=m.ReceiptOut,
    summary="One graft receipt",
)
def get_receipt(
    ns: NsPath, receipt_id: IdPath, access: NamespaceAccess = Depends(namespace_access)
) -> m.ReceiptOut:
    st = access.st
    with access.read() as (s, namespace):
        views = receipts.view(s, namespace, [receipts.get(s, namespace, receipt_id)])
    return _receipt_outs(st, ns, views)[0]
