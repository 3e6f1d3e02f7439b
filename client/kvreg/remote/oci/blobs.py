"""Blobs of an OCI registry: exists (HEAD), upload (monolithic or chunked), mount, download.

- :meth:`BlobsApi.blob_size`: ``HEAD /v2/<repo>/blobs/<digest>`` (None: absent).
- :meth:`BlobsApi.upload_blob`: ``POST .../blobs/uploads/`` then, for a blob up to
  ``chunk_threshold`` bytes, one ``PUT <location>?digest=`` with the whole body
  (``sendfile`` from the store's file); a larger one goes in ``PATCH`` pieces of
  ``chunk_threshold`` bytes with ``Content-Range``, then an empty ``PUT ?digest=``.
  The registry checks the digest; the client checks ``Docker-Content-Digest``.
- :meth:`BlobsApi.mount_blob`: ``POST .../blobs/uploads/?mount=<digest>&from=<repo>``,
  a cross-repository mount (no bytes move); a registry that does not mount answers
  with an upload location, which :meth:`upload_blob` then uses.
- :meth:`BlobsApi.get_object_to`: a blob streamed into a file, hashed while it
  streams, resumed with ``Range`` (``HttpSession.download``); its signature is
  ``RegistryClient.get_object_to``'s, so the pull staging folder
  (``kvreg.remote.staging``) and on-demand fetches use either client.
- :meth:`BlobsApi.get_blob_bytes` / :meth:`put_blob_bytes`: small blobs in memory
  (the envelope, the empty config), digest-checked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, RemoteError
from kvreg.remote.oci.challenges import pull_scope, push_scope
from kvreg.remote.oci.transport import OciTransport
from kvreg.remote.session import Download, ProgressCallback, Reply

log = logging.getLogger(__name__)

__all__ = ["BlobsApi"]

_OCTETS = "application/octet-stream"


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *params.items()]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


class BlobsApi(OciTransport):
    """The blob endpoints (see the module docstring)."""

    def blob_size(self, repository: str, digest: Digest, *, push: bool = False) -> int | None:
        """The size of blob ``digest`` in ``repository``, or None if it is not there."""
        scopes = [push_scope(repository) if push else pull_scope(repository)]
        reply = self.call("HEAD", self.url(repository, "blobs", str(digest)), scopes, expect=(200, 404))
        if reply.status == 404:
            return None
        try:
            return int(reply.headers.get("Content-Length", "-1"))
        except ValueError:
            return -1

    def _start_upload(self, repository: str, scopes: list[str], **params: str) -> Reply:
        return self.call(
            "POST",
            self.url(repository, "blobs", "uploads") + "/",
            scopes,
            expect=(201, 202),
            params=params or None,
            headers={"Content-Length": "0"},
        )

    def _location(self, reply: Reply) -> str:
        location = reply.headers.get("Location")
        if not location:
            raise RemoteError("the registry opened an upload without a Location")
        return self.absolute(location)

    def mount_blob(self, repository: str, digest: Digest, source: str) -> str | None:
        """Mount blob ``digest`` from repository ``source``; None if mounted, else the upload
        location the registry opened instead (pass it to :meth:`upload_blob`)."""
        scopes = [push_scope(repository), pull_scope(source)]
        reply = self._start_upload(repository, scopes, mount=str(digest), **{"from": source})
        if reply.status == 201:
            log.debug("mounted %s from %s into %s", digest, source, repository)
            return None
        return self._location(reply)

    def upload_blob(
        self,
        repository: str,
        digest: Digest,
        path: Path,
        size: int,
        *,
        location: str | None = None,
        progress_cb: ProgressCallback | None = None,
    ) -> None:
        """Upload the file ``path`` (``size`` bytes) as blob ``digest``; see the module docstring."""
        scopes = [push_scope(repository)]
        if location is None:
            location = self._location(self._start_upload(repository, scopes))
        if size > self.chunk_threshold:
            location = self._upload_chunks(location, scopes, digest, path, size, progress_cb)
            final = _with_query(location, digest=str(digest))
            reply = self.authorized(
                scopes,
                lambda auth: self.session.call(
                    "PUT", final, expect=(201,), headers={**auth, "Content-Length": "0"}, content=lambda: b""
                ),
                final,
            )
        else:
            final = _with_query(location, digest=str(digest))
            reply = self._send(final, scopes, path, 0, size, digest, "PUT", (201,), progress_cb)
        self._check_digest(reply, digest)

    def _upload_chunks(
        self,
        location: str,
        scopes: list[str],
        digest: Digest,
        path: Path,
        size: int,
        progress_cb: ProgressCallback | None,
    ) -> str:
        offset = 0
        while offset < size:
            n = min(self.chunk_threshold, size - offset)
            headers = {"Content-Range": f"{offset}-{offset + n - 1}"}
            reply = self._send(
                location, scopes, path, offset, n, digest, "PATCH", (202,), progress_cb, headers
            )
            location = self._location(reply)
            offset += n
        return location

    def _send(
        self,
        url: str,
        scopes: list[str],
        path: Path,
        offset: int,
        n: int,
        digest: Digest,
        method: str,
        expect: tuple[int, ...],
        progress_cb: ProgressCallback | None,
        extra: dict[str, str] | None = None,
    ) -> Reply:
        """``n`` bytes of ``path`` from ``offset`` as the body of ``method url``; after a ``401``
        (a token that expired meanwhile) the body is sent again, its bytes counted once."""
        sent = [0]

        def counted(k: int) -> None:
            sent[0] += k
            if progress_cb is not None:
                progress_cb(k)

        def send(auth: dict[str, str]) -> Reply:
            if sent[0] and progress_cb is not None:
                progress_cb(-sent[0])
            sent[0] = 0
            with path.open("rb") as f:
                return self.session.upload(
                    url,
                    f,
                    n,
                    digest,
                    expect=expect,
                    headers={"Content-Type": _OCTETS, **(extra or {}), **auth},
                    origin=offset,
                    progress_cb=counted,
                    method=method,
                    piece=True,
                )

        return self.authorized(scopes, send, url)

    @staticmethod
    def _check_digest(reply: Reply, digest: Digest) -> None:
        said = reply.headers.get("Docker-Content-Digest")
        if said and said != str(digest):
            raise DigestMismatchError(
                f"the registry stored blob {digest} under digest {said}",
                expected=str(digest),
                actual=said,
            )

    def put_blob_bytes(self, repository: str, data: bytes) -> Digest:
        """Upload a small blob held in memory (unless the registry has it); its digest."""
        digest = Digest.of_bytes(data)
        if self.blob_size(repository, digest, push=True) is not None:
            return digest
        scopes = [push_scope(repository)]
        final = _with_query(self._location(self._start_upload(repository, scopes)), digest=str(digest))
        reply = self.call(
            "PUT", final, scopes, expect=(201,), headers={"Content-Type": _OCTETS}, content=data
        )
        self._check_digest(reply, digest)
        return digest

    def get_blob_bytes(self, repository: str, digest: Digest, *, limit: int) -> bytes:
        """Blob ``digest`` read into memory (at most ``limit`` bytes), checked against its digest."""
        reply = self.call(
            "GET",
            self.url(repository, "blobs", str(digest)),
            [pull_scope(repository)],
            limit=limit,
            headers={"Accept": _OCTETS},
        )
        actual = Digest.of_bytes(reply.body)
        if actual != digest:
            raise DigestMismatchError(
                f"blob {digest} from the registry hashes to {actual}; nothing was stored",
                expected=str(digest),
                actual=str(actual),
            )
        return reply.body

    def get_object_to(
        self,
        namespace: str,
        digest: Digest,
        dest: Path,
        *,
        start: int = 0,
        max_size: int | None = None,
        progress_cb: ProgressCallback | None = None,
        fsync: bool = True,
    ) -> Download:
        """Stream blob ``digest`` of namespace ``namespace``'s repository into ``dest`` after its
        first ``start`` bytes; the returned digest covers the whole file."""
        repository = self.repository(namespace)
        url = self.url(repository, "blobs", str(digest))
        scopes = [pull_scope(repository)]

        def send(auth: dict[str, str]) -> Download:
            have = dest.stat().st_size if dest.exists() else 0
            begin = start if have >= start else have
            return self.session.download(
                url,
                digest,
                dest,
                start=begin,
                max_size=max_size,
                progress_cb=progress_cb,
                headers=auth,
                fsync=fsync,
            )

        return self.authorized(scopes, send, url)
