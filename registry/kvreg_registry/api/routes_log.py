"""The audit log: the log key, signed checkpoints, entries, inclusion and consistency proofs.

The key, checkpoints and proofs reveal only hashes and sizes: anyone may fetch
them (a client verifies consistency on every contact, with or without a token).
Entries name namespaces, actors and digests: they need a valid token unless the
registry sets ``KVREG_LOG_PUBLIC=1``.
"""

from __future__ import annotations

import base64

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from kvreg.core.errors import UnauthenticatedError
from kvreg_registry.api import models as m
from kvreg_registry.api.deps import principal, state
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import AuditEntry
from kvreg_registry.services.log import MAX_ENTRIES_PER_PAGE

router = APIRouter(prefix="/log", tags=["audit log"])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@router.get(
    "/key",
    responses=m.errors(base=m.ANY_REQUEST),
    response_model=m.LogKey,
    summary="The log's name and public key (pin it)",
)
def log_key(request: Request) -> m.LogKey:
    log = state(request).log
    return m.LogKey(
        origin=log.origin, verifier_key=log.verifier.to_text(), public_key=log.verifier.public_key.to_text()
    )


@router.get(
    "/checkpoint",
    response_class=PlainTextResponse,
    summary="The latest checkpoint, as a C2SP signed note (text/plain)",
    responses={**m.errors(base=m.ANY_REQUEST), 200: {"content": {"text/plain": {}}}},
)
async def checkpoint(request: Request) -> PlainTextResponse:
    note = await run_in_threadpool(state(request).log.checkpoint)
    return PlainTextResponse(note, headers={"Cache-Control": "no-store"})


@router.get(
    "/proof/inclusion",
    responses=m.errors(400, 404, base=m.ANY_REQUEST),
    response_model=m.InclusionProof,
    summary="Inclusion proof of entry INDEX",
)
def inclusion(
    request: Request,
    index: int = Query(ge=0, le=2**53),
    size: int | None = Query(default=None, ge=1, le=2**53, description="tree size (default: current)"),
) -> m.InclusionProof:
    st = state(request)
    with st.db.read() as s:
        proof = st.log.inclusion(s, index, size)
        entry_hash = s.execute(select(AuditEntry.leaf_hash).where(AuditEntry.seq == index)).scalar_one()
    return m.InclusionProof(
        index=index,
        size=proof.size,
        root=_b64(proof.root),
        hashes=proof.hashes_b64(),
        leaf_hash=_b64(bytes(entry_hash)),
    )


@router.get(
    "/proof/consistency",
    responses=m.errors(400, base=m.ANY_REQUEST),
    response_model=m.ConsistencyProof,
    summary="Consistency proof FIRST -> SECOND",
)
def consistency(
    request: Request,
    first: int = Query(ge=0, le=2**53),
    second: int | None = Query(default=None, ge=0, le=2**53, description="tree size (default: current)"),
) -> m.ConsistencyProof:
    st = state(request)
    with st.db.read() as s:
        proof = st.log.consistency(s, first, second)
    return m.ConsistencyProof(first=first, size=proof.size, root=_b64(proof.root), hashes=proof.hashes_b64())


@router.get(
    "/entries",
    responses=m.errors(400),
    response_model=m.LogEntries,
    summary="Entries [START, END), at most 1000 per call",
)
def entries(
    request: Request,
    who: Principal = Depends(principal),
    start: int = Query(default=0, ge=0, le=2**53),
    end: int | None = Query(default=None, ge=0, le=2**53),
) -> m.LogEntries:
    st = state(request)
    if who.anonymous and not st.settings.log_public:
        raise UnauthenticatedError("reading log entries needs a token on this registry")
    with st.db.read() as s:
        size = st.log.size(s)
        stop = size if end is None else min(end, size)
        rows = st.log.entries(s, start, max(start, min(stop, start + MAX_ENTRIES_PER_PAGE)))
    return m.LogEntries(
        entries=[m.LogEntry(seq=seq, entry=_b64(entry), leaf_hash=_b64(leaf)) for seq, entry, leaf in rows],
        size=size,
    )
