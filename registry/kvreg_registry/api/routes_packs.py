"""Object packs: several objects of an upload session in one request.

``POST /namespaces/{ns}/uploads/{upload_id}/objects`` with ``X-Kvreg-Objects:
sha256:<hex>=<size>,...`` and the objects' bytes concatenated in that order. A
single PUT costs the registry milliseconds of CPU whatever the object's size
(routing, middleware, auth, two transactions, two worker-thread hops); a pack pays
that once for up to ``max_pack_objects`` objects.

The header, the limits and the session are checked before a byte of the body is
read. Each object is then read into its own :class:`PendingObject` (straight from
the socket where the server offers it, ``kvreg_registry.server_io``) and sealed
(hashed and fsynced); if any object does not hash to its digest the whole pack is
refused and every pending object discarded. Then ONE write transaction publishes
them all, as a single PUT publishes one: the object's row lock, the storage
commit, the hold and its ``object.held`` audit entry. A client that goes away
mid-body leaves nothing behind.

This module does not handle single-object PUTs or downloads (``routes_objects``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from kvreg.core.digest import Digest
from kvreg.core.errors import BodyTooLargeError, DigestMismatchError, RequestInvalidError
from kvreg.core.names import validate_namespace
from kvreg.fileio.faults import crash_point
from kvreg_registry import audit
from kvreg_registry.api import models as m
from kvreg_registry.api.deps import NamespaceAccess, namespace_access
from kvreg_registry.api.metrics import metrics_of
from kvreg_registry.api.params import NsPath, UploadPath, documented
from kvreg_registry.api.routes_objects import OCTET_STREAM_BODY, WRITE_PIECE
from kvreg_registry.auth import Principal
from kvreg_registry.server_io import SocketBody, socket_body
from kvreg_registry.services import accounts
from kvreg_registry.services import objects as object_service
from kvreg_registry.state import RegistryState
from kvreg_registry.storage.base import ObjectStorage, PendingObject

log = logging.getLogger(__name__)
router = APIRouter()

#: The header that lists a pack's objects, in body order.
OBJECTS_HEADER = "X-Kvreg-Objects"
_ITEM = re.compile(r"(sha256:[0-9a-f]{64})=([0-9]{1,20})", re.ASCII)
_ITEM_PATTERN = r"sha256:[0-9a-f]{64}=[0-9]{1,20}"
HEADER_PATTERN = rf"^{_ITEM_PATTERN}(,{_ITEM_PATTERN})*$"

PackItems = list[tuple[Digest, int]]


def parse_pack_header(value: str | None, *, max_objects: int, max_object_bytes: int) -> PackItems:
    """``[(digest, size), ...]`` from ``X-Kvreg-Objects``: malformed or a digest twice is
    ``RequestInvalidError`` (400); too many objects or one too large ``BodyTooLargeError`` (413)."""
    if value is None or not value.strip():
        raise RequestInvalidError(
            f"an object pack needs the {OBJECTS_HEADER} header",
            hint=f"{OBJECTS_HEADER}: sha256:<hex>=<size>,...",
        )
    parts = value.split(",")
    if len(parts) > max_objects:
        raise BodyTooLargeError(
            f"{len(parts)} objects in one pack, more than the limit {max_objects}", limit=max_objects
        )
    items: PackItems = []
    seen: set[str] = set()
    for part in parts:
        match = _ITEM.fullmatch(part.strip())
        if match is None:
            raise RequestInvalidError(
                f"malformed {OBJECTS_HEADER} item {part.strip()[:100]!r}",
                hint="sha256:<64 hex>=<size in bytes>",
            )
        digest, size = Digest(match.group(1)), int(match.group(2))
        if size > max_object_bytes:
            raise BodyTooLargeError(
                f"object {digest} is {size} bytes, more than the limit of {max_object_bytes}",
                limit=max_object_bytes,
            )
        if digest in seen:
            raise RequestInvalidError(f"object {digest} is twice in the pack")
        seen.add(digest)
        items.append((digest, size))
    return items


def _declared_length(request: Request) -> int | None:
    values = request.headers.getlist("content-length")
    if len(values) != 1 or "transfer-encoding" in request.headers:
        return None
    value = values[0].strip()
    return int(value) if value.isascii() and value.isdigit() else None


def _cover(access: NamespaceAccess, upload_id: str, digests: list[Digest]) -> None:
    """Check the write role and that ``upload_id`` is an open session of the namespace, and make it
    list every digest, as a single PUT does (one read transaction in the usual case)."""
    with access.read("write") as (s, namespace):
        unlisted = object_service.unlisted_in_open_session(s, namespace, upload_id, digests)
    if not unlisted:
        return
    with access.write("write") as (s, namespace):
        object_service.get_open_session(s, namespace, upload_id)
        object_service.add_to_session(s, upload_id, unlisted)


class PackReceiver:
    """Reads a pack's body into one :class:`PendingObject` per object and seals each.

    Fed either from a blocking ``read_into`` (:meth:`receive`, the socket body) or piece by
    piece (:meth:`feed` then :meth:`end`, ASGI messages); either way on a worker thread.
    The first object that does not hash to its digest is remembered and raised by
    :meth:`sealed`; the bytes after it are read and dropped, so that the answer can be sent
    on a connection whose request was read to its end. Leaving the ``with`` block (after the
    commit's write transaction) discards every pending object not committed and closes the
    committed ones (``PendingObject.close``).
    """

    def __init__(self, storage: ObjectStorage, items: PackItems) -> None:
        self._storage = storage
        self.items = items
        self.pending: list[PendingObject] = []
        self.mismatch: DigestMismatchError | None = None
        self._index = 0  # the object being received (``feed``)
        self._current: PendingObject | None = None
        self._skipped = 0  # bytes of the current object dropped after a mismatch

    def __enter__(self) -> PackReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        for pending in self.pending:
            pending.close()  # discards an uncommitted one; a committed one's temp name goes

    # --- from a socket ------------------------------------------------------------------

    def receive(self, read_into: Callable[[memoryview], int]) -> None:
        """Read every object from ``read_into`` (blocking)."""
        for digest, size in self.items:
            bounded = _Bounded(read_into, size)
            if self.mismatch is not None:
                bounded.drain()
            else:
                pending = self._begin()
                pending.receive(bounded)
                self._check_complete(pending, digest, size)
                self._seal(pending, digest)
            if bounded.left:
                raise ConnectionResetError(f"the pack's body ended {bounded.left} bytes before its end")

    # --- from pieces ----------------------------------------------------------------------

    def feed(self, pieces: list[bytes]) -> None:
        """Write ``pieces`` of the body, in order, across the objects' boundaries."""
        for piece in pieces:
            view = memoryview(piece)
            while view:
                self._close_empty()
                if self._index >= len(self.items):
                    raise RequestInvalidError("the pack's body is longer than its objects")
                digest, size = self.items[self._index]
                if self.mismatch is not None:
                    take = min(len(view), size - self._skipped)
                    self._skipped += take
                    done = self._skipped == size
                else:
                    pending = self._current or self._start()
                    take = min(len(view), size - pending.size)
                    pending.write(view[:take])
                    done = pending.size == size
                    if done:
                        self._seal(pending, digest)
                view = view[take:]
                if done:
                    self._next()
        self._close_empty()

    def end(self) -> None:
        """The body ended: every object must be complete."""
        self._close_empty()
        if self._index < len(self.items):
            raise ClientDisconnect("the pack's body ended before its last object")

    # --- both ------------------------------------------------------------------------------

    def sealed(self) -> list[PendingObject]:
        """The sealed pending objects, in order; ``DigestMismatchError`` if one was a lie."""
        if self.mismatch is not None:
            raise self.mismatch
        return self.pending

    def _begin(self) -> PendingObject:
        pending = self._storage.begin_upload()
        self.pending.append(pending)
        return pending

    def _start(self) -> PendingObject:
        self._current = self._begin()
        return self._current

    def _next(self) -> None:
        self._index += 1
        self._current = None
        self._skipped = 0

    def _close_empty(self) -> None:
        """Seal the empty objects at the reading position (they take no byte of the body)."""
        while self._index < len(self.items) and self.items[self._index][1] == 0 and self._current is None:
            if self.mismatch is None:
                self._seal(self._start(), self.items[self._index][0])
            self._next()

    @staticmethod
    def _check_complete(pending: PendingObject, digest: Digest, size: int) -> None:
        if pending.size != size:
            pending.abort()
            raise ConnectionResetError(f"the pack's body ended inside object {digest}")

    def _seal(self, pending: PendingObject, digest: Digest) -> None:
        try:
            pending.seal(digest)  # verified and fsynced; a mismatch discards it
        except DigestMismatchError as e:
            self.mismatch = self.mismatch or e


class _Bounded:
    """A ``read_into`` that stops after ``left`` bytes of the one it wraps."""

    def __init__(self, read_into: Callable[[memoryview], int], left: int) -> None:
        self._read_into = read_into
        self.left = left

    def __call__(self, view: memoryview) -> int:
        if self.left == 0:
            return 0
        n = self._read_into(view[: self.left])
        self.left -= n
        return n

    def drain(self) -> None:
        scratch = memoryview(bytearray(min(self.left, 1 << 20)))
        while self.left and self(scratch):
            pass


def _commit(
    st: RegistryState, who: Principal, ns: str, items: PackItems, pending: list[PendingObject]
) -> list[m.ObjectStored]:
    """Publish the sealed objects and record that the namespace holds them, in one write
    transaction (a worker thread): per object, as a single PUT does. Every row lock is taken
    before the first object is published (in digest order, so that two packs of the same
    objects never wait on each other in a cycle)."""
    with st.db.write() as s:
        namespace = accounts.get_namespace(s, ns)
        object_service.lock_objects(s, items)
        stored = st.storage.commit_many(list(zip(pending, (d for d, _ in items), strict=True)))
        new_to_ns = object_service.hold_many(s, namespace, (d for d, _ in items))
        held = [str(digest) in new_to_ns for digest, _ in items]
        entries = [
            audit.NewEntry(
                "object.held", actor=who.name, namespace=ns, subjects=[digest], details={"size": size}
            )
            for (digest, size), new in zip(items, held, strict=True)
            if new
        ]
        seqs = iter(audit.append_many(s, entries))
    for _ in items:  # counted per object, as single PUTs count it
        crash_point("registry.object.after_commit")
    return [
        m.ObjectStored(digest=digest, size=size, stored=new, log_index=next(seqs) if hold else None)
        for (digest, size), new, hold in zip(items, stored, held, strict=True)
    ]


def _store_from_socket(
    st: RegistryState, who: Principal, ns: str, items: PackItems, body: SocketBody
) -> list[m.ObjectStored]:
    with PackReceiver(st.storage, items) as receiver:
        try:
            receiver.receive(body.readinto)
        except (ConnectionResetError, TimeoutError) as e:  # as Starlette reports a client gone mid-body
            raise ClientDisconnect(str(e)) from e
        return _commit(st, who, ns, items, receiver.sealed())


async def _store_from_messages(
    request: Request, st: RegistryState, who: Principal, ns: str, items: PackItems
) -> list[m.ObjectStored]:
    with PackReceiver(st.storage, items) as receiver:
        pieces: list[bytes] = []
        held = 0
        async for piece in request.stream():
            if piece:
                pieces.append(piece)
                held += len(piece)
            if held >= WRITE_PIECE:
                await run_in_threadpool(receiver.feed, pieces)
                pieces, held = [], 0
        await run_in_threadpool(receiver.feed, pieces)
        await run_in_threadpool(receiver.end)
        return await run_in_threadpool(_commit, st, who, ns, items, receiver.sealed())


@router.post(
    "/namespaces/{ns}/uploads/{upload_id}/objects",
    response_model=m.PackStored,
    responses=m.errors(400, 403, 404, 413, 422),
    summary="Upload several objects of an upload session in one request (an object pack)",
    description=(
        f"The body is the objects' bytes, concatenated in the order of the {OBJECTS_HEADER} header; "
        "Content-Length must be their sum. All are stored, or none: one object that does not hash "
        "to its digest refuses the pack (422)."
    ),
    openapi_extra=OCTET_STREAM_BODY,
)
async def put_pack(
    ns: NsPath,
    upload_id: UploadPath,
    request: Request,
    access: NamespaceAccess = Depends(namespace_access),
    x_kvreg_objects: str = Header(
        description="the objects, in body order: sha256:<hex>=<size>,sha256:<hex>=<size>,...",
        json_schema_extra=documented(HEADER_PATTERN),
    ),
) -> Response:
    st = access.st
    validate_namespace(ns)
    settings = st.settings
    items = parse_pack_header(
        x_kvreg_objects, max_objects=settings.max_pack_objects, max_object_bytes=settings.max_object_bytes
    )
    total = sum(size for _, size in items)
    if total > settings.max_pack_bytes:
        raise BodyTooLargeError(
            f"the pack is {total} bytes, more than the limit of {settings.max_pack_bytes}",
            limit=settings.max_pack_bytes,
        )
    declared = _declared_length(request)
    if declared != total:
        raise RequestInvalidError(
            f"the pack's Content-Length is {declared}, not the {total} bytes of its objects",
            hint=f"send the objects of {OBJECTS_HEADER} concatenated, with their total as Content-Length",
        )
    await run_in_threadpool(_cover, access, upload_id, [d for d, _ in items])
    try:
        body = socket_body(request.scope)
        if body is not None and await body.start():
            try:
                stored = await run_in_threadpool(_store_from_socket, st, access.who, ns, items, body)
            finally:
                await body.finish()
        else:
            stored = await _store_from_messages(request, st, access.who, ns, items)
    except ClientDisconnect as e:  # a push killed or cut off: usual, and nobody to answer
        log.info("pack of %d objects into %s stopped: %s", len(items), ns, e or "the client went away")
        return Response(status_code=400)
    metrics_of(request).objects_stored((o.stored, o.size) for o in stored)
    return JSONResponse(m.PackStored(objects=stored).model_dump())
