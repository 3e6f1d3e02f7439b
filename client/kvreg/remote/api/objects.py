"""Objects of a registry namespace: upload sessions, the missing-object query, uploads, downloads.

``PUT``/``GET .../objects/{digest}`` and object packs (``POST .../uploads/{id}/objects``)
stream; downloads resume and are hashed by the transport (``kvreg.remote.session``); this
module does not compare the digest of a download with the one asked for, nor touch the
local store (``kvreg.remote.pulling`` does).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, NotFoundError, RemoteError, StoreError
from kvreg.remote.api.core import ApiCore, jsonable_digests
from kvreg.remote.session import Download, ProgressCallback

__all__ = [
    "DEFAULT_MAX_MISSING_DIGESTS",
    "OBJECTS_HEADER",
    "UPLOAD_HEADER",
    "ObjectsApi",
    "StoredObject",
    "parse_fetch_listing",
]

UPLOAD_HEADER = "X-Kvreg-Upload"
#: The header of an object pack that lists its objects: ``sha256:<hex>=<size>,...`` in body order.
OBJECTS_HEADER = "X-Kvreg-Objects"
DEFAULT_MAX_MISSING_DIGESTS = 1000
_LISTED = re.compile(r"(sha256:[0-9a-f]{64})=([0-9]{1,20})", re.ASCII)


@dataclass(frozen=True, slots=True)
class StoredObject:
    """The registry's answer to an object upload; ``stored``: the bytes were new to its storage."""

    digest: Digest
    size: int
    stored: bool


class ObjectsApi(ApiCore):
    """The object endpoints of :class:`kvreg.remote.http.RegistryClient`."""

    def open_upload(self, namespace: str, digests: Sequence[Digest]) -> tuple[str, list[Digest]]:
        """Open an upload session listing ``digests`` (at most ``max_missing_digests``).

        Returns ``(upload id, the digests the namespace does not hold)``. Until the
        session is closed or expires, the registry's GC keeps every listed object.
        """
        body = {"digests": jsonable_digests(digests)}
        reply = self._call("POST", self._ns_url(namespace, "uploads"), expect=(200, 201), json_body=body)
        doc = self._json(reply, "open upload")
        upload = doc.get("upload")
        if not isinstance(upload, str | int) or isinstance(upload, bool) or str(upload) == "":
            raise RemoteError("the registry's upload session has no id")
        return str(upload), self._digest_list(doc.get("missing"), "the missing objects")

    def close_upload(self, namespace: str, upload_id: str) -> None:
        """Close an upload session (idempotent; an unknown session is fine; retried once only:
        a session left open expires on its own)."""
        try:
            self._call("DELETE", self._ns_url(namespace, "uploads", upload_id), expect=(200, 204), retries=1)
        except NotFoundError as e:
            if e.code != "UPLOAD_UNKNOWN":
                raise

    def missing(self, namespace: str, digests: Sequence[Digest]) -> list[Digest]:
        """The digests the namespace does not hold, asked in batches of ``max_missing_digests``."""
        batch = self.limit("max_missing_digests", DEFAULT_MAX_MISSING_DIGESTS)
        out: list[Digest] = []
        items = list(digests)
        for i in range(0, len(items), batch):
            body = {"digests": jsonable_digests(items[i : i + batch])}
            reply = self._call("POST", self._ns_url(namespace, "objects", "missing"), json_body=body)
            out += self._digest_list(self._json(reply, "missing").get("missing"), "missing objects")
        return out

    def put_object(
        self,
        namespace: str,
        digest: Digest,
        source: str | os.PathLike[str] | BinaryIO,
        size: int,
        *,
        upload_id: str | None = None,
        progress_cb: ProgressCallback | None = None,
    ) -> StoredObject:
        """Upload an object, streamed from a file path or a seekable binary file (from its
        current position, which must be followed by exactly ``size`` bytes).

        ``size`` bytes are sent with ``Content-Length`` (a file goes to the socket with
        ``sendfile``: ``kvreg.remote.bulk``); the registry hashes them and refuses
        (``DigestMismatchError``, exit 3) bytes that are not ``digest``. A retry sends
        the whole object again (``progress_cb`` is then called with the negative count
        of bytes to send again).
        """
        digest = Digest(digest)
        if size < 0:
            raise StoreError(f"object {digest}: negative size {size}")
        body_source: Path | BinaryIO = Path(source) if isinstance(source, str | os.PathLike) else source
        origin = 0 if isinstance(body_source, Path) else body_source.tell()
        headers = {"Content-Type": "application/octet-stream"}
        if upload_id is not None:
            headers[UPLOAD_HEADER] = upload_id
        reply = self._session.upload(
            self._ns_url(namespace, "objects", digest),
            body_source,
            size,
            digest,
            expect=(200, 201),
            headers=headers,
            origin=origin,
            progress_cb=progress_cb,
        )
        doc = self._json(reply, f"PUT object {digest}") if reply.body.strip() else {}
        got = doc.get("digest", str(digest))
        if got != digest:
            raise RemoteError(f"the registry stored {got!r} when sent {digest}")
        stored = doc.get("stored")
        return StoredObject(digest, size, stored if isinstance(stored, bool) else reply.status == 201)

    def put_objects(
        self,
        namespace: str,
        upload_id: str,
        items: Sequence[tuple[Digest, Path, int]],
        progress_cb: ProgressCallback | None = None,
    ) -> list[StoredObject]:
        """Upload several objects of the upload session ``upload_id`` in one request (an object
        pack: ``POST .../uploads/{id}/objects``), each ``(digest, file, size)`` streamed from its
        file with ``sendfile``, in order.

        The registry stores all of them or none: one object that does not hash to its digest
        refuses the pack (``DigestMismatchError``, exit 3). At most the registry's
        ``max_pack_objects`` objects and ``max_pack_bytes`` bytes (``limit()``); a registry
        without packs answers 404 or 405. A retry sends the whole pack again (``progress_cb``
        then gets the negative count of the bytes sent before).
        """
        digests = [Digest(d) for d, _, _ in items]
        for d, _, size in items:
            if size < 0:
                raise StoreError(f"object {d}: negative size {size}")
        headers = {
            "Content-Type": "application/octet-stream",
            OBJECTS_HEADER: ",".join(f"{d}={size}" for d, (_, _, size) in zip(digests, items, strict=True)),
        }
        reply = self._session.upload_files(
            self._ns_url(namespace, "uploads", upload_id, "objects"),
            [(Path(path), size, d) for d, (_, path, size) in zip(digests, items, strict=True)],
            expect=(200,),
            headers=headers,
            progress_cb=progress_cb,
        )
        answer = self._json(reply, f"object pack of {len(items)} objects").get("objects")
        if not isinstance(answer, list) or len(answer) != len(items):
            raise RemoteError(f"the registry's answer to an object pack of {len(items)} objects is malformed")
        out: list[StoredObject] = []
        for d, (_, _, size), doc in zip(digests, items, answer, strict=True):
            if not isinstance(doc, dict) or doc.get("digest") != d:
                raise RemoteError(f"the registry's answer to an object pack does not name {d} in its place")
            stored = doc.get("stored")
            out.append(StoredObject(d, size, stored if isinstance(stored, bool) else False))
        return out

    def get_object_to(
        self,
        namespace: str,
        digest: Digest,
        dest: str | os.PathLike[str],
        *,
        start: int = 0,
        max_size: int | None = None,
        progress_cb: ProgressCallback | None = None,
        fsync: bool = True,
    ) -> Download:
        """Download an object into the file ``dest``, resuming after its first ``start`` bytes.

        With ``start > 0`` the first ``start`` bytes already in ``dest`` are kept
        (and hashed) and the rest is asked for with ``Range: bytes=start-``; a
        server that ignores the range starts the file over (``progress_cb`` then
        gets the negative count of bytes dropped). A connection broken in the
        middle resumes from the bytes received. A redirect to a presigned storage
        URL is followed without the token. The file is fsynced (unless ``fsync`` is
        false: then the caller fsyncs it before relying on it); the returned
        digest is the SHA-256 of the whole file, which the caller compares with
        ``digest`` (this method renames and deletes nothing). More than
        ``max_size`` bytes raise ``DigestMismatchError``: they cannot be the object.
        """
        digest = Digest(digest)
        url = self._ns_url(namespace, "objects", digest)
        return self._session.download(
            url, digest, Path(dest), start=start, max_size=max_size, progress_cb=progress_cb, fsync=fsync
        )

    def get_objects_to(
        self,
        namespace: str,
        items: Sequence[tuple[Digest, Path, int | None]],
        progress_cb: ProgressCallback | None = None,
    ) -> list[Download]:
        """Download several objects in one answer (a fetch pack: ``POST .../objects/fetch``), each
        ``(digest, file, max_size)`` into its new file, in order, hashed while it is written and
        not fsynced (the caller fsyncs). At most the registry's ``max_fetch_objects``, which only
        a registry that takes fetch packs publishes (``limit()``).

        Returns the downloads finished, in order: all of them, or those before a broken
        connection or an answer to retry; the file under way then holds the bytes that
        arrived, which :meth:`get_object_to` resumes. The caller compares each digest. An answer
        that lists other objects than asked is ``RemoteError``; one that states more than an
        object's ``max_size`` bytes ``DigestMismatchError`` (they cannot be the object)."""
        digests = [Digest(d) for d, _, _ in items]
        caps = [cap for _, _, cap in items]

        def sizes_of(headers: httpx.Headers) -> list[int]:
            return parse_fetch_listing(headers.get(OBJECTS_HEADER), digests, caps)

        body = json.dumps({"digests": jsonable_digests(digests)}).encode()
        return self._session.download_many(
            self._ns_url(namespace, "objects", "fetch"),
            body,
            [(d, Path(path)) for d, (_, path, _) in zip(digests, items, strict=True)],
            sizes_of,
            progress_cb=progress_cb,
        )


def parse_fetch_listing(
    value: str | None, digests: Sequence[Digest], caps: Sequence[int | None]
) -> list[int]:
    """The sizes a fetch pack's ``X-Kvreg-Objects`` answer header states, which must list exactly
    ``digests`` in that order; a size over its cap is ``DigestMismatchError``."""
    if value is None:
        raise RemoteError(f"the registry's fetch pack has no {OBJECTS_HEADER} header")
    parts = value.split(",") if value.strip() else []
    if len(parts) != len(digests):
        raise RemoteError(
            f"the registry's fetch pack lists {len(parts)} objects, not the {len(digests)} asked for"
        )
    sizes: list[int] = []
    for part, digest, cap in zip(parts, digests, caps, strict=True):
        match = _LISTED.fullmatch(part.strip())
        if match is None or match.group(1) != digest:
            raise RemoteError(f"the registry's fetch pack does not list {digest} in its place")
        size = int(match.group(2))
        if cap is not None and size > cap:
            raise DigestMismatchError(
                f"the registry sent more than {cap} bytes for object {digest}",
                expected=str(digest),
                max_size=cap,
            )
        sizes.append(size)
    return sizes
