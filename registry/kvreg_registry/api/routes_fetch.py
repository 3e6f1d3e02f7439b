"""Fetch packs: several objects of a namespace in one download.

``POST /namespaces/{ns}/objects/fetch`` with ``{"digests": [...]}`` answers ``200`` with
the objects' bytes concatenated in the order asked, ``Content-Length`` their sum, and
``X-Kvreg-Objects: sha256:<hex>=<size>,...`` saying where each one ends. An object's
``GET`` costs the registry a few milliseconds of CPU whatever its size (routing,
middleware, authentication, a transaction, a worker-thread hop, the answer); a pull
of many objects pays that once per pack instead (the download side of the upload
packs of ``routes_packs``).

Every object is checked before the first byte goes out, in a single ``GET``'s order: the
caller, the digests' syntax, the caller's read role in the namespace, then that it holds
each digest (``404 OBJECT_UNKNOWN`` names the first it lacks). The bytes then go out as a
single ``GET``'s do: from the file to the socket with the zero-copy send extension where
the server offers it and the storage is a local folder, else read and streamed.
Nothing here verifies a digest for the client: the client hashes every object it
receives. There is no ``Range``: a client whose pack broke off asks for the object
it was receiving with a single ``GET`` and a range, and for the rest again.

A registry whose object downloads are redirected to presigned storage URLs
(``KVREG_S3_REDIRECT``) does not publish ``max_fetch_objects`` in its limits, so that
clients keep downloading from the storage directly; the route still answers there, by
reading the objects through the registry. Reads are not audited, as single ``GET``\\ s
are not. This module does not serve single objects (``routes_objects``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, BinaryIO

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse

from kvreg.core.digest import Digest
from kvreg_registry.api import models as m
from kvreg_registry.api.deps import NamespaceAccess, deferred_namespace_access
from kvreg_registry.api.params import NsPath
from kvreg_registry.server_io import ZEROCOPY_SEND
from kvreg_registry.services import accounts
from kvreg_registry.services import objects as object_service
from kvreg_registry.state import RegistryState

router = APIRouter()

#: The answer's header that lists the pack's objects and sizes, in body order: the listing of an
#: upload pack (``routes_packs.OBJECTS_HEADER``; not imported: routes_admin imports this module).
OBJECTS_HEADER = "X-Kvreg-Objects"


def fetch_packs_offered(st: RegistryState) -> bool:
    """Whether clients should fetch packs here: only where object downloads are not redirected
    to the storage (a pack would turn the storage's bandwidth into the registry's)."""
    return not (st.settings.s3.redirect and st.storage.kind == "s3")


@router.post(
    "/namespaces/{ns}/objects/fetch",
    summary="Download several objects in one answer (a fetch pack)",
    responses={
        **m.errors(400, 404, 413),
        200: {
            "description": f"the objects' bytes in the order asked; {OBJECTS_HEADER} lists digest=size",
            "content": {"application/octet-stream": {}},
        },
    },
)
def fetch_objects(
    ns: NsPath,
    body: m.DigestList,
    request: Request,
    access: NamespaceAccess = Depends(deferred_namespace_access),
) -> Response:
    st = access.st
    # In a GET's order: the caller, the digests' syntax, the namespace, the objects.
    with access.session() as (s, who):
        digests = object_service.parse_digests(body.digests, limit=st.settings.max_pack_objects)
        namespace = accounts.readable_namespace(s, who, access.name, "read")
        sizes = object_service.held_sizes(s, namespace, digests)
    headers = {
        OBJECTS_HEADER: ",".join(f"{d}={sizes[d]}" for d in digests),
        "Content-Length": str(sum(sizes.values())),
        "Cache-Control": "private, no-store",
    }
    if ZEROCOPY_SEND in request.scope.get("extensions", {}):
        files = _open_local(st, digests)
        if files is not None:
            return FilesResponse(files, [sizes[d] for d in digests], headers=headers)
    return StreamingResponse(
        _read_all(st, digests, sizes), headers=headers, media_type="application/octet-stream"
    )


def _open_local(st: RegistryState, digests: list[Digest]) -> list[BinaryIO] | None:
    """Every object opened from the local folder, or None where the storage has no local files."""
    with contextlib.ExitStack() as opened:
        files: list[BinaryIO] = []
        for d in digests:
            f = st.storage.open_local(d)
            if f is None:
                return None  # the ones opened are closed on the way out
            files.append(opened.enter_context(f))
        opened.pop_all()  # kept open: FilesResponse closes them
        return files


def _read_all(st: RegistryState, digests: list[Digest], sizes: dict[Digest, int]) -> Iterator[bytes]:
    for d in digests:
        yield from st.storage.read_range(d, 0, sizes[d])


class FilesResponse(Response):
    """Open files sent whole one after the other, each without Python reading it (the ASGI
    zero-copy send extension, ``kvreg_registry.server_io``). Closes every file."""

    media_type = "application/octet-stream"

    def __init__(self, files: list[BinaryIO], counts: list[int], *, headers: dict[str, str]) -> None:
        super().__init__(status_code=200, headers=headers)
        self.files, self.counts = files, counts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        with contextlib.ExitStack() as closing:
            for f in self.files:
                closing.callback(f.close)
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            last = len(self.files) - 1
            for i, (f, count) in enumerate(zip(self.files, self.counts, strict=True)):
                await send(
                    {"type": ZEROCOPY_SEND, "file": f, "offset": 0, "count": count, "more_body": i < last}
                )
            if not self.files:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
