"""Upload sessions, the missing query, and object PUT / GET / HEAD.

An object PUT streams the body into a :class:`PendingObject` (which hashes it),
then, inside one write transaction holding the object's row lock, commits it to
storage under its digest (refused unless the hash matches) and records that the
namespace holds it. Every PUT is covered by an upload session — the client's
(``X-Kvreg-Upload``) or one opened for this request alone — so GC keeps the
digest while the bytes travel.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from kvreg.core.digest import Digest
from kvreg.core.errors import BodyTooLargeError, RangeNotSatisfiableError, RequestInvalidError
from kvreg.core.names import validate_namespace
from kvreg.fileio.faults import crash_point
from kvreg_registry import audit
from kvreg_registry.api import models as m
from kvreg_registry.api.deps import NamespaceAccess, deferred_namespace_access, etag, namespace_access
from kvreg_registry.api.metrics import metrics_of
from kvreg_registry.api.params import RANGE_PATTERN, UUID_PATTERN, DigestPath, NsPath, UploadPath, documented
from kvreg_registry.api.routes_admin import iso
from kvreg_registry.auth import Principal
from kvreg_registry.server_io import ZEROCOPY_SEND, SocketBody, socket_body
from kvreg_registry.services import accounts
from kvreg_registry.services import objects as object_service
from kvreg_registry.state import RegistryState
from kvreg_registry.storage.base import ObjectStorage, PendingObject

log = logging.getLogger(__name__)
router = APIRouter()

#: Bytes of request body gathered before they are handed to a worker thread.
WRITE_PIECE = 4 << 20
#: The OpenAPI request body of the routes that take raw bytes (an object, an object pack).
OCTET_STREAM_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post(
    "/namespaces/{ns}/uploads",
    responses=m.errors(400, 403, 404),
    status_code=201,
    response_model=m.UploadOpened,
    summary="Open an upload session and ask which objects are missing",
)
def open_upload(
    ns: NsPath, body: m.DigestList, access: NamespaceAccess = Depends(namespace_access)
) -> m.UploadOpened:
    st = access.st
    digests = object_service.parse_digests(body.digests, limit=st.settings.max_missing_digests)
    with access.write("write") as (s, namespace):
        missing = object_service.missing(s, namespace, digests)
        row = object_service.open_session(
            s, namespace, access.who.user_id, digests, st.settings.upload_ttl_seconds
        )
        audit.append(
            s,
            "upload.opened",
            actor=access.who.name,
            namespace=ns,
            details={"upload": row.id, "digests": len(digests), "missing": len(missing)},
        )
        return m.UploadOpened(upload=row.id, missing=list(missing), expires_at=iso(row.expires_at) or "")


@router.delete(
    "/namespaces/{ns}/uploads/{upload_id}",
    responses=m.errors(400, 403, 404),
    status_code=204,
    summary="Close an upload session",
)
def close_upload(
    ns: NsPath, upload_id: UploadPath, access: NamespaceAccess = Depends(namespace_access)
) -> Response:
    with access.write("write") as (s, namespace):
        if object_service.close_session(s, namespace, upload_id):
            audit.append(
                s, "upload.closed", actor=access.who.name, namespace=ns, details={"upload": upload_id}
            )
    return Response(status_code=204)


@router.post(
    "/namespaces/{ns}/objects/missing",
    responses=m.errors(400, 404),
    response_model=m.Missing,
    summary="Which of these objects the namespace lacks",
)
def missing(ns: NsPath, body: m.DigestList, access: NamespaceAccess = Depends(namespace_access)) -> m.Missing:
    st = access.st
    digests = object_service.parse_digests(body.digests, limit=st.settings.max_missing_digests)
    with access.read() as (s, namespace):
        return m.Missing(missing=list(object_service.missing(s, namespace, digests)))


#: The paths under ``.../objects/`` that are queries taking a POST (the missing query here, fetch
#: packs in ``routes_fetch``), not objects.
QUERY_SEGMENTS = ("missing", "fetch")


async def _not_an_object(request: Request) -> Response:
    """``405`` (with ``Allow: POST``) to the object methods on a query's path, as to any other method
    there, instead of the digest error the object routes below would answer."""
    raise StarletteHTTPException(status_code=405)


for _segment in QUERY_SEGMENTS:  # before the object routes: the first full match wins
    router.add_api_route(
        f"/namespaces/{{ns}}/objects/{_segment}",
        _not_an_object,
        methods=["GET", "HEAD", "PUT"],
        include_in_schema=False,
    )


def _prepare_upload(access: NamespaceAccess, digest: Digest, upload_id: str | None) -> str | None:
    """Check the write role; cover the digest by an upload session. Returns an implicit session to close."""
    st = access.st
    if upload_id is not None:
        # The usual case, a session that lists the digest already (push lists every object
        # when it opens one), needs no write: a read transaction checks it.
        with access.read("write") as (s, namespace):
            if not object_service.unlisted_in_open_session(s, namespace, upload_id, [digest]):
                return None
        with access.write("write") as (s, namespace):
            object_service.get_open_session(s, namespace, upload_id)
            object_service.add_to_session(s, upload_id, [digest])
            return None
    with access.write("write") as (s, namespace):
        row = object_service.open_session(
            s, namespace, access.who.user_id, [digest], st.settings.upload_ttl_seconds
        )
        return row.id


def _finish_upload(
    st: RegistryState,
    who: Principal,
    ns: str,
    digest: Digest,
    pending: PendingObject,
    *,
    implicit: str | None,
) -> tuple[bool, int | None, int]:
    """Publish a received object and record that the namespace holds it (a worker thread):
    (new to storage, the audit entry's sequence number or ``None``, size)."""
    pending.seal(digest)  # verified and fsynced before the write transaction, which only publishes
    with st.db.write() as s:
        namespace = accounts.get_namespace(s, ns)
        object_service.lock_object(s, digest, pending.size)
        stored = pending.commit(digest)
        crash_point("registry.object.after_publish")
        seq = None
        if object_service.hold(s, namespace, digest):
            seq = audit.append(
                s,
                "object.held",
                actor=who.name,
                namespace=ns,
                subjects=[digest],
                details={"size": pending.size},
            )
        if implicit is not None:
            object_service.close_session(s, namespace, implicit)
    crash_point("registry.object.after_commit")
    return stored, seq, pending.size


def _write_pieces(pending: PendingObject, pieces: list[bytes]) -> None:
    """Hash and store pieces of the body (on a worker thread: hashlib and the writes
    release the GIL)."""
    for piece in pieces:
        pending.write(piece)


async def _store_body(
    request: Request,
    storage: ObjectStorage,
    limit: int,
    finish: Callable[[PendingObject], tuple[bool, int | None, int]],
) -> tuple[bool, int | None, int]:
    """Stream the request body into a new pending object, at most ``limit`` bytes
    (``BodyTooLargeError``), and ``finish`` it: straight from the socket on one worker
    thread where the server offers it, else through ASGI messages."""
    body = socket_body(request.scope)
    if body is not None and body.length > limit:
        raise BodyTooLargeError(f"the object is more than the limit of {limit} bytes", limit=limit)
    if body is not None and await body.start():
        try:
            return await run_in_threadpool(_store_from_socket, storage, body, finish)
        finally:
            await body.finish()
    with storage.begin_upload() as pending:
        await _receive_messages(request, pending, limit)
        return await run_in_threadpool(finish, pending)


def _store_from_socket(
    storage: ObjectStorage,
    body: SocketBody,
    finish: Callable[[PendingObject], tuple[bool, int | None, int]],
) -> tuple[bool, int | None, int]:
    """Read a :class:`SocketBody` into a new pending object and ``finish`` it (a worker thread)."""
    with storage.begin_upload() as pending:
        try:
            pending.receive(body.readinto)
        except (ConnectionResetError, TimeoutError) as e:  # as Starlette reports a client gone mid-body
            raise ClientDisconnect(str(e)) from e
        return finish(pending)


async def _receive_messages(request: Request, pending: PendingObject, limit: int) -> None:
    """Stream the request body's ASGI messages into ``pending``, at most ``limit`` bytes.

    Pieces are handed to a worker thread a few MiB at a time, and the next ones are
    received while it hashes and writes them, so the event loop keeps draining the
    socket. At most one hand-over is in flight, so the writes stay in order.
    """
    pieces: list[bytes] = []
    held = received = 0
    in_flight: asyncio.Future[None] | None = None
    try:
        async for piece in request.stream():
            received += len(piece)
            if received > limit:
                raise BodyTooLargeError(f"the object is more than the limit of {limit} bytes", limit=limit)
            if piece:
                pieces.append(piece)
                held += len(piece)
            if held >= WRITE_PIECE:
                if in_flight is not None:
                    await in_flight
                in_flight = asyncio.ensure_future(run_in_threadpool(_write_pieces, pending, pieces))
                pieces, held = [], 0
        if in_flight is not None:
            await in_flight
            in_flight = None
        if pieces:
            await run_in_threadpool(_write_pieces, pending, pieces)
    finally:
        if in_flight is not None:  # an error or a disconnect: let the thread finish before the abort
            with contextlib.suppress(BaseException):
                await asyncio.shield(in_flight)


def _close_quietly(st: RegistryState, ns: str, implicit: str | None) -> None:
    if implicit is None:
        return
    try:
        with st.db.write() as s:
            object_service.close_session(s, accounts.get_namespace(s, ns), implicit)
    except Exception:  # the session expires by itself; never hide the original error
        log.warning("could not close upload session %s", implicit, exc_info=True)


@router.put(
    "/namespaces/{ns}/objects/{digest}",
    response_model=m.ObjectStored,
    responses={**m.errors(400, 403, 404, 422), 201: {"model": m.ObjectStored}},
    summary="Upload an object (raw bytes); stored only if they hash to the digest",
    openapi_extra=OCTET_STREAM_BODY,
)
async def put_object(
    ns: NsPath,
    digest: DigestPath,
    request: Request,
    access: NamespaceAccess = Depends(namespace_access),
    x_kvreg_upload: str | None = Header(
        default=None,
        description="the upload session this object belongs to",
        json_schema_extra=documented(UUID_PATTERN),
    ),
) -> Response:
    st = access.st
    validate_namespace(ns)
    d = Digest(digest)
    implicit = await run_in_threadpool(_prepare_upload, access, d, x_kvreg_upload)
    finish = functools.partial(_finish_upload, st, access.who, ns, d, implicit=implicit)
    try:
        stored, seq, size = await _store_body(request, st.storage, st.settings.max_object_bytes, finish)
    except ClientDisconnect as e:  # a push killed or cut off: usual, and nobody to answer
        log.info("upload of %s into %s stopped: %s", d, ns, e or "the client went away")
        await run_in_threadpool(_close_quietly, st, ns, implicit)
        return Response(status_code=400)
    except BaseException:
        await run_in_threadpool(_close_quietly, st, ns, implicit)
        raise
    metrics_of(request).objects_stored([(stored, size)])
    body = m.ObjectStored(digest=d, size=size, stored=stored, log_index=seq)
    return JSONResponse(body.model_dump(), status_code=201 if seq is not None else 200)


#: Published so that clients (and the conformance run) know it; the route reads the raw header.
RANGE_HEADER = Header(
    default=None,
    alias="Range",
    description="one range: bytes=A-B, bytes=A- or bytes=-N",
    json_schema_extra=documented(RANGE_PATTERN),
)
_RANGE_NUMBER = re.compile(r"[0-9]{1,20}", re.ASCII)


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end_exclusive)`` for one ``bytes=`` range, or None for no header.

    Malformed syntax or several ranges are ``400``; a range outside the object ``416``.
    """
    if header is None:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or not spec or "," in spec:
        raise RequestInvalidError(
            f"unsupported Range {header!r}", hint="one range: bytes=A-B, bytes=A- or bytes=-N"
        )
    first, sep, last = spec.strip().partition("-")
    # ASCII digits only (RFC 9110 DIGIT): str.isdigit() also takes '²' and '١', which int()
    # then refuses or reads as another number; at most 20 of them, so no huge int is built.
    if (
        not sep
        or (first and _RANGE_NUMBER.fullmatch(first) is None)
        or (last and _RANGE_NUMBER.fullmatch(last) is None)
        or (not first and not last)
    ):
        raise RequestInvalidError(f"malformed Range {header!r}")
    if not first:
        n = int(last)
        if n == 0:
            raise RangeNotSatisfiableError("an empty suffix range", size=size)
        if size == 0:  # no byte to send: (0, 0) would give "Content-Range: bytes 0--1/0"
            raise RangeNotSatisfiableError("a suffix range of an empty object", size=size)
        return max(0, size - n), size
    start = int(first)
    end = size if not last else min(int(last) + 1, size)
    if start >= size or (last and int(last) < start):
        raise RangeNotSatisfiableError(f"range {header!r} is outside the object ({size} bytes)", size=size)
    return start, end


def object_response(request: Request, access: NamespaceAccess, digest: str, *, head: bool) -> Response:
    st = access.st
    d, size = access.held_object(digest)
    headers = {
        "Accept-Ranges": "bytes",
        "ETag": etag(d),
        "X-Kvreg-Digest": d,
        "Cache-Control": "private, immutable",
    }
    if st.settings.s3.redirect and not head:
        url = st.storage.presigned_url(d)
        if url is not None:
            return RedirectResponse(url, status_code=307, headers={"X-Kvreg-Digest": d})
    span = parse_range(request.headers.get("range"), size)
    status = 200
    start, end = 0, size
    if span is not None:
        start, end = span
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    headers["Content-Length"] = str(end - start)
    if head:
        return Response(status_code=status, headers=headers, media_type="application/octet-stream")
    if ZEROCOPY_SEND in request.scope.get("extensions", {}):
        local = st.storage.open_local(d)
        if local is not None:
            return FileSpanResponse(local, start, end - start, status_code=status, headers=headers)
    pieces: Iterator[bytes] = st.storage.read_range(d, start, end)
    return StreamingResponse(
        pieces, status_code=status, headers=headers, media_type="application/octet-stream"
    )


class FileSpanResponse(Response):
    """``count`` bytes of an open file from ``offset``, sent by the server without Python reading
    them (the ASGI zero-copy send extension, ``kvreg_registry.server_io``). Closes the file."""

    media_type = "application/octet-stream"

    def __init__(
        self, file: BinaryIO, offset: int, count: int, *, status_code: int, headers: dict[str, str]
    ) -> None:
        super().__init__(status_code=status_code, headers=headers)
        self.file, self.offset, self.count = file, offset, count

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            await send({"type": ZEROCOPY_SEND, "file": self.file, "offset": self.offset, "count": self.count})
        finally:
            self.file.close()


@router.get(
    "/namespaces/{ns}/objects/{digest}",
    summary="Download an object (Range supported; may redirect to a presigned URL)",
    responses={
        **m.errors(400, 404, 416),
        200: {"content": {"application/octet-stream": {}}},
        206: {"description": "partial content", "content": {"application/octet-stream": {}}},
        307: {"description": "redirect to storage"},
    },
)
def get_object(
    ns: NsPath,
    digest: DigestPath,
    request: Request,
    access: NamespaceAccess = Depends(deferred_namespace_access),
    range_: str | None = RANGE_HEADER,
) -> Response:
    return object_response(request, access, digest, head=False)


@router.head(
    "/namespaces/{ns}/objects/{digest}",
    responses={
        **m.errors(400, 404, 416),
        200: {"description": "the object's size", "content": {"application/octet-stream": {}}},
        206: {"description": "the size of the range asked for", "content": {"application/octet-stream": {}}},
    },
    summary="An object's size and digest headers",
)
def head_object(
    ns: NsPath,
    digest: DigestPath,
    request: Request,
    access: NamespaceAccess = Depends(deferred_namespace_access),
    range_: str | None = RANGE_HEADER,
) -> Response:
    return object_response(request, access, digest, head=True)
