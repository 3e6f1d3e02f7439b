"""HTTP transport of the registry client: retries, capped reads, streamed bodies, resumable downloads.

``HttpSession`` owns two ``httpx.Client`` connection pools, both shared safely by
worker threads:

- one for the registry, which carries ``Authorization: Bearer <token>``;
- one with no token, for the presigned storage URLs that a registry may
  redirect object downloads to (``307``): the token never leaves the registry's
  origin.

Every request is retried on connection errors and ``429``/``502``/``503``/``504``
with exponential backoff, jitter and ``Retry-After``; after the last retry it
raises ``UnavailableError``. Other error answers become typed errors
(``kvreg.remote.errors``). Answers are read with a size cap. Downloads stream to
a file while hashing every byte of it, resume with ``Range`` after a broken
connection, and start over when a server ignores the range.

This module knows the HTTP mechanics only, not the endpoints (``kvreg.remote.http``)
or what the bytes mean. It never logs the token.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urljoin, urlsplit

import httpx

import kvreg
from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, KvregError, RemoteError, StoreError, UnavailableError
from kvreg.core.loopback import is_loopback
from kvreg.fileio.directio import AlignedWriter
from kvreg.remote.bulk import TRANSPORT_ERRORS, BulkHttp, BulkResponse, FileBody, ShortFileError, origin_of
from kvreg.remote.errors import RETRY_STATUSES, map_error

log = logging.getLogger(__name__)

__all__ = ["MAX_JSON_BYTES", "Download", "HttpSession", "ProgressCallback", "Reply"]

#: Largest JSON document (other than an envelope) the client reads from a registry.
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_ERROR_BYTES = 256 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_STORAGE_REDIRECTS = 5
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")

ProgressCallback = Callable[[int], None]
"""Called with a number of bytes moved (negative: bytes that will be moved again)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete answer: status, headers, body (read in full, capped), attempts it took."""

    status: int
    headers: httpx.Headers
    body: bytes
    attempts: int


@dataclass(frozen=True, slots=True)
class Download:
    """A finished download: the SHA-256 of the *whole* file, its size, and where this call started."""

    digest: Digest
    size: int
    resumed_from: int


class _Retry(Exception):
    """This attempt failed in a way worth retrying."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def _transport_reason(e: BaseException, where: str = "") -> str:
    text = f"{type(e).__name__}{where}"
    return f"{text}: {e}" if str(e) else text


def _retry_after(headers: httpx.Headers) -> float | None:
    try:
        seconds = float(headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


class _Sink:
    """The file a download writes to (through pooled aligned buffers, a full one written by a
    disk thread while the next fills, ``kvreg.fileio.directio``), the hash of everything in it,
    and the progress callback."""

    def __init__(self, fd: int, start: int, progress_cb: ProgressCallback | None) -> None:
        self.fd = fd
        self.hasher = hashlib.sha256()
        self.progress_cb = progress_cb
        # Keep at most ``start`` bytes, and hash them: the digest covers the whole file.
        if os.fstat(fd).st_size > start:
            os.ftruncate(fd, start)
        if start > 0:
            with open(fd, "rb", closefd=False) as kept:
                self.hasher = hashlib.file_digest(kept, "sha256")
        done = os.fstat(fd).st_size
        self.offset = done
        self.writer = AlignedWriter(fd, offset=done)

    def receive(self, response: BulkResponse, digest: Digest, max_size: int | None) -> None:
        """Read the rest of ``response``'s body into the file, hashing every byte."""
        if max_size is not None and response.remaining is not None:
            self._refuse_past(max_size, self.offset + response.remaining, digest)
        while True:
            view = self.writer.free()
            n = response.readinto(view, on_idle=self.writer.flush)
            if n == 0:
                return
            if max_size is not None:
                self._refuse_past(max_size, self.offset + n, digest)
            self.hasher.update(view[:n])
            self.writer.advance(n)
            self.offset += n
            if self.progress_cb is not None:
                self.progress_cb(n)

    def receive_exactly(self, response: BulkResponse, count: int) -> None:
        """Read the next ``count`` bytes of ``response``'s body into the file, hashing every byte
        (one object of a fetch pack); a body that ends before raises ``IncompleteRead``."""
        left = count
        while left:
            view = self.writer.free()
            n = response.readinto(view[: min(len(view), left)], on_idle=self.writer.flush)
            if n == 0:
                raise http.client.IncompleteRead(b"", left)
            self.hasher.update(view[:n])
            self.writer.advance(n)
            self.offset += n
            left -= n
            if self.progress_cb is not None:
                self.progress_cb(n)

    @staticmethod
    def _refuse_past(max_size: int, size: int, digest: Digest) -> None:
        if size > max_size:
            raise DigestMismatchError(
                f"the registry sent more than {max_size} bytes for object {digest}",
                expected=str(digest),
                max_size=max_size,
            )

    def restart(self) -> None:
        if self.progress_cb is not None and self.offset:
            self.progress_cb(-self.offset)
        self.writer.release()
        os.ftruncate(self.fd, 0)
        self.hasher = hashlib.sha256()
        self.offset = 0
        self.writer = AlignedWriter(self.fd, offset=0)

    def finish(self, *, fsync: bool = True) -> None:
        """Write what is buffered, cut the file to the bytes received, fsync it (unless the
        caller fsyncs it later, see ``HttpSession.download``)."""
        self.writer.close()
        os.ftruncate(self.fd, self.offset)
        if fsync:
            os.fsync(self.fd)

    def abandon(self) -> None:
        """Keep what was received in the file (a later call resumes from it); drop the buffers."""
        try:
            self.writer.close()  # what was counted is good: write it, so the resume starts after it
        finally:
            # If the close failed (a full disk), only the bytes written are kept: a resume must
            # not hash a hole as if it had arrived.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, min(self.offset, self.writer.offset))

    def digest(self) -> Digest:
        return Digest.from_hex(self.hasher.hexdigest())


@contextlib.contextmanager
def _sink_file(
    dest: Path, start: int, progress_cb: ProgressCallback | None, *, fsync: bool
) -> Iterator[_Sink]:
    """A :class:`_Sink` on the file ``dest`` (created if absent; its first ``start`` bytes kept):
    finished (fsynced unless ``fsync`` is false) when the block ends, abandoned (what was
    received stays, for a resume) when it raises."""
    fd = os.open(dest, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        sink = _Sink(fd, start, progress_cb)
        try:
            yield sink
        except BaseException:
            sink.abandon()
            raise
        sink.finish(fsync=fsync)
    finally:
        os.close(fd)


def _check_body_size(
    source: Path | BinaryIO, origin: int, size: int, digest: Digest, *, piece: bool = False
) -> None:
    """Refuse (``StoreError``) a file that does not hold exactly ``size`` bytes after ``origin``."""
    if isinstance(source, Path):
        try:
            total = source.stat().st_size
        except OSError as e:
            raise StoreError(f"cannot read object {digest}: {e.strerror or e}", digest=str(digest)) from e
    else:
        total = source.seek(0, os.SEEK_END)
    if total - origin < size:
        raise StoreError(
            f"object {digest} ended after {max(0, total - origin)} of {size} bytes while uploading it",
            hint="run 'kvreg fsck' on the local store",
            digest=str(digest),
        )
    if total - origin > size and not piece:
        raise StoreError(
            f"object {digest} is longer than {size} bytes while uploading it",
            hint="run 'kvreg fsck' on the local store",
            digest=str(digest),
        )


def _tls_verify(verify: bool | str) -> bool | str | ssl.SSLContext:
    """``verify`` as given, except that the default honours ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``."""
    if verify is not True:
        return verify
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile is None and capath is None:
        return True
    return ssl.create_default_context(cafile=cafile, capath=capath)


class _TlsOnFirstUse(httpx.BaseTransport):
    """An ``https://`` transport built on its first request: loading a trust store costs tens of
    milliseconds of CPU (44 ms for certifi's bundle, 52 ms for the system one of ``SSL_CERT_FILE``
    on the benchmark host), which a session with a plain-http registry would pay for nothing on
    every command."""

    def __init__(self, build: Callable[[], httpx.BaseTransport]) -> None:
        self._build = build
        self._transport: httpx.BaseTransport | None = None
        self._lock = threading.Lock()

    def _get(self) -> httpx.BaseTransport:
        with self._lock:
            if self._transport is None:
                self._transport = self._build()
            return self._transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._get().handle_request(request)

    def close(self) -> None:
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()


class HttpSession:
    """Requests to one registry with retries; see the module docstring."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float,
        connect_timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float,
        remote_name: str | None,
        max_connections: int,
        verify: bool | str,
        transport: httpx.BaseTransport | None,
    ) -> None:
        self.base_url = base_url
        self.remote_name = remote_name
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.max_backoff = max(0.0, float(max_backoff))
        agent = {"User-Agent": f"kvreg/{kvreg.__version__}"}
        headers = {**agent, "Accept": "application/json"}
        self._agent = agent
        self._token_header = None if token is None else f"Bearer {token}"
        if self._token_header is not None:
            headers["Authorization"] = self._token_header
            host = urlsplit(base_url).hostname or ""
            if base_url.startswith("http://") and not is_loopback(host):
                log.warning(
                    "sending a token over plain http to %s: anyone on the path can read it; use https",
                    host,
                )
        self._origin = origin_of(base_url)
        timeouts = httpx.Timeout(timeout, connect=connect_timeout, pool=None)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        # trust_env is off (no proxies or .netrc picked up silently); the CA settings that
        # users of a private certificate authority rely on are honoured explicitly, when the
        # first https request needs them (ssl_context).
        self._verify_setting = verify
        self._ssl: ssl.SSLContext | None = None
        self._ssl_lock = threading.Lock()
        common: dict[str, Any] = {"timeout": timeouts, "limits": limits, "trust_env": False}
        mounts: dict[str, httpx.BaseTransport] | None = None
        if transport is None:
            transport, mounts = self.transports(limits)
        self.http = httpx.Client(
            headers=headers, follow_redirects=False, transport=transport, mounts=mounts, **common
        )
        # Object bodies (uploads, downloads, storage redirects) take the bulk transport;
        # ``transport`` (tests, custom stacks) applies to the JSON requests above only.
        self.bulk = BulkHttp(timeout=timeout, connect_timeout=connect_timeout, ssl_context=self.ssl_context)

    def transports(
        self, limits: httpx.Limits | None = None
    ) -> tuple[httpx.BaseTransport, dict[str, httpx.BaseTransport]]:
        """``(transport, mounts)`` for an ``httpx.Client`` with this session's TLS settings, built
        on the first https request: every https:// URL takes the mounted transport, which
        verifies with :meth:`ssl_context`; the default one carries plain http only, where there
        is no certificate to verify."""
        limits = limits or httpx.Limits()
        tls = _TlsOnFirstUse(
            lambda: httpx.HTTPTransport(verify=self.ssl_context(), limits=limits, trust_env=False)
        )
        plain = httpx.HTTPTransport(verify=False, limits=limits, trust_env=False)  # http:// only (above)
        return plain, {"https://": tls}

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS settings of every https request, JSON or bulk: httpx's, built from ``verify``
        (and ``SSL_CERT_FILE``/``SSL_CERT_DIR``) on first use."""
        with self._ssl_lock:
            if self._ssl is None:
                v = _tls_verify(self._verify_setting)
                self._ssl = v if isinstance(v, ssl.SSLContext) else httpx.create_ssl_context(verify=v)
            return self._ssl

    def close(self) -> None:
        self.http.close()
        self.bulk.close()

    # --- retries -------------------------------------------------------------------------

    def _sleep_before_retry(self, attempt: int, reason: str, retry_after: float | None) -> None:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        delay = delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 (jitter, not cryptography)
        if retry_after is not None:
            delay = max(delay, min(retry_after, 60.0))
        log.info(
            "registry request failed (%s); retry %d/%d in %.2f s", reason, attempt + 1, self.retries, delay
        )
        time.sleep(delay)

    def unavailable(self, method: str, url: str, reason: str, attempts: int) -> UnavailableError:
        return UnavailableError(
            f"the registry at {self.base_url} is unavailable: {method} {url} failed "
            f"{attempts} time{'s' if attempts != 1 else ''} ({reason})",
            hint="check the URL (kvreg remote list) and the network, then run the command again; "
            "transfers resume where they stopped",
            url=url,
            attempts=attempts,
        )

    def error(self, status: int, headers: httpx.Headers, body: bytes, url: str) -> KvregError:
        return map_error(status, headers, body, remote_name=self.remote_name, url=url)

    @staticmethod
    def read_capped(response: httpx.Response, limit: int, what: str) -> bytes:
        out = bytearray()
        for block in response.iter_bytes():
            out += block
            if len(out) > limit:
                raise RemoteError(f"the registry sent more than {limit} bytes for {what}", limit=limit)
        return bytes(out)

    # --- requests ------------------------------------------------------------------------

    def call(
        self,
        method: str,
        url: str,
        *,
        expect: Sequence[int] = (200,),
        json_body: Any = None,
        content: Callable[[], Iterator[bytes] | bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        limit: int = MAX_JSON_BYTES,
        on_retry: Callable[[], None] | None = None,
        retries: int | None = None,
    ) -> Reply:
        """One request with retries: the reply if its status is in ``expect``, else the mapped error.

        ``content`` builds the body afresh for every attempt (a generator streams it);
        ``retries`` overrides the session's number of retries for this request.
        """

        def attempt(n: int) -> Reply:
            kwargs: dict[str, Any] = {"headers": dict(headers or {}), "params": params}
            if json_body is not None:
                kwargs["json"] = json_body
            elif content is not None:
                kwargs["content"] = content()
            return self._attempt(method, url, kwargs, expect, limit, n)

        budget = self.retries if retries is None else max(0, retries)
        return self._retrying(method, url, attempt, budget=budget, on_retry=on_retry)

    def _retrying(
        self,
        method: str,
        url: str,
        attempt: Callable[[int], Reply],
        *,
        budget: int,
        on_retry: Callable[[], None] | None = None,
    ) -> Reply:
        """``attempt(n)`` for n = 0, 1, ... until it does not raise ``_Retry``; after ``budget``
        retries, ``UnavailableError``. ``on_retry`` runs before each wait."""
        n = 0
        while True:
            try:
                return attempt(n)
            except _Retry as r:
                if n >= budget:
                    raise self.unavailable(method, url, r.reason, n + 1) from r
                if on_retry is not None:
                    on_retry()
                self._sleep_before_retry(n, r.reason, r.retry_after)
                n += 1

    def _attempt(
        self, method: str, url: str, kwargs: dict[str, Any], expect: Sequence[int], limit: int, attempt: int
    ) -> Reply:
        try:
            response = self.http.send(self.http.build_request(method, url, **kwargs), stream=True)
        except httpx.TransportError as e:
            untrusted = _cert_error(e)
            if untrusted is not None:
                raise _untrusted(url, untrusted) from e
            raise _Retry(_transport_reason(e)) from e
        try:
            status = response.status_code
            log.debug("%s %s -> %d", method, url, status)
            if status in RETRY_STATUSES:
                raise _Retry(f"HTTP {status}", _retry_after(response.headers))
            cap = limit if status in expect else MAX_ERROR_BYTES
            try:
                body = self.read_capped(response, cap, f"{method} {url}")
            except httpx.TransportError as e:
                raise _Retry(_transport_reason(e, " while reading the answer")) from e
            if status not in expect:
                raise self.error(status, response.headers, body, url)
            return Reply(status, response.headers, body, attempt + 1)
        finally:
            response.close()

    # --- object bodies ------------------------------------------------------------------

    def _bulk_headers(self, url: str, extra: Mapping[str, str]) -> dict[str, str]:
        """Headers of a bulk request: the token only for the registry's own origin."""
        headers = {**self._agent, **extra}
        if self._token_header is not None and origin_of(url) == self._origin:
            headers["Authorization"] = self._token_header
        return headers

    def upload(
        self,
        url: str,
        source: Path | BinaryIO,
        size: int,
        digest: Digest,
        *,
        expect: Sequence[int],
        headers: Mapping[str, str],
        origin: int = 0,
        progress_cb: ProgressCallback | None = None,
        method: str = "PUT",
        piece: bool = False,
    ) -> Reply:
        """PUT (or ``method``) exactly ``size`` bytes of ``source`` (a path, or a seekable file
        from ``origin``) with retries; every attempt sends the whole body again (``progress_cb``
        first gets the negative count of the bytes sent before). A file that does not hold
        exactly ``size`` bytes there (at least ``size`` with ``piece``: one piece of a chunked
        OCI upload, a PATCH) raises ``StoreError`` before anything is sent."""
        _check_body_size(source, origin, size, digest, piece=piece)
        with contextlib.ExitStack() as stack:
            if isinstance(source, Path):
                try:
                    f: BinaryIO = stack.enter_context(source.open("rb"))
                except OSError as e:
                    raise StoreError(
                        f"cannot read object {digest}: {e.strerror or e}", digest=str(digest)
                    ) from e
            else:
                f = source
            return self._send_retrying(url, FileBody(f, origin, size), headers, expect, progress_cb, method)

    def upload_files(
        self,
        url: str,
        files: Sequence[tuple[Path, int, Digest]],
        *,
        expect: Sequence[int],
        headers: Mapping[str, str],
        progress_cb: ProgressCallback | None = None,
        method: str = "POST",
    ) -> Reply:
        """POST (or ``method``) several files as one body, each ``(path, size, digest)`` in turn,
        with retries, as :meth:`upload` sends one (an object pack: ``Content-Length`` is the sum;
        each file is opened only while it is sent, so a pack of hundreds holds one descriptor).
        A file that does not hold exactly its size raises ``StoreError`` before anything is sent."""
        for path, size, digest in files:
            _check_body_size(path, 0, size, digest)
        bodies = [FileBody(path, 0, size) for path, size, _ in files]
        return self._send_retrying(url, bodies, headers, expect, progress_cb, method)

    def _send_retrying(
        self,
        url: str,
        body: FileBody | Sequence[FileBody],
        headers: Mapping[str, str],
        expect: Sequence[int],
        progress_cb: ProgressCallback | None,
        method: str,
    ) -> Reply:
        """Send ``body`` with retries; before a retry ``progress_cb`` gets the negative count of
        the bytes the failed attempt sent."""
        sent = [0]

        def counted(n: int) -> None:
            sent[0] += n
            if progress_cb is not None:
                progress_cb(n)

        def rewind() -> None:
            if progress_cb is not None and sent[0]:
                progress_cb(-sent[0])
            sent[0] = 0

        return self._retrying(
            method,
            url,
            lambda _: self._upload_attempt(url, body, headers, expect, counted, method),
            budget=self.retries,
            on_retry=rewind,
        )

    def _upload_attempt(
        self,
        url: str,
        body: FileBody | Sequence[FileBody],
        headers: Mapping[str, str],
        expect: Sequence[int],
        progress_cb: ProgressCallback,
        method: str = "PUT",
    ) -> Reply:
        try:
            with self.bulk.request(
                method, url, self._bulk_headers(url, headers), body, progress_cb
            ) as response:
                status = response.status
                log.debug("%s %s -> %d", method, url, status)
                if status in RETRY_STATUSES:
                    raise _Retry(f"HTTP {status}", _retry_after(response.headers))
                cap = MAX_JSON_BYTES if status in expect else MAX_ERROR_BYTES
                try:
                    answer = response.read_capped(cap)
                except ValueError as e:
                    raise RemoteError(
                        f"the registry sent more than {cap} bytes for {method} {url}", limit=cap
                    ) from e
                if status not in expect:
                    raise self.error(status, response.headers, answer, url)
                return Reply(status, response.headers, answer, 1)
        except ssl.SSLCertVerificationError as e:
            raise _untrusted(url, e) from e
        except ShortFileError as e:
            raise StoreError(
                f"an object file changed while it was uploaded to {url}: {e}",
                hint="run 'kvreg fsck' on the local store",
            ) from e
        except TRANSPORT_ERRORS as e:
            raise _Retry(_transport_reason(e)) from e

    def download(
        self,
        url: str,
        digest: Digest,
        dest: Path,
        *,
        start: int = 0,
        max_size: int | None = None,
        progress_cb: ProgressCallback | None = None,
        headers: Mapping[str, str] | None = None,
        fsync: bool = True,
    ) -> Download:
        """Stream ``url`` into ``dest`` after its first ``start`` bytes (``RegistryClient.get_object_to``).

        ``headers`` are sent to the registry's own origin only, never to the storage a
        registry redirects to (an OCI registry's per-request ``Authorization``). With
        ``fsync=False`` the file is written but not fsynced: the caller fsyncs it before it
        relies on it (a pull fsyncs all its objects at once, after the last download)."""
        with _sink_file(dest, start, progress_cb, fsync=fsync) as sink:
            resumed_from = sink.offset
            if sink.offset != start:
                log.debug("partial file %s holds %d bytes, not %d", dest, sink.offset, start)
            attempt = 0
            while True:
                before = sink.offset
                try:
                    if self._download_attempt(url, digest, sink, max_size, headers or {}):
                        break
                except _Retry as r:
                    sink.writer.flush()  # what arrived stays in the file while we wait
                    if sink.offset > before:
                        attempt = 0  # progress was made: the retry budget starts again
                    if attempt >= self.retries:
                        raise self.unavailable("GET", url, r.reason, attempt + 1) from r
                    self._sleep_before_retry(attempt, r.reason, r.retry_after)
                    attempt += 1
        return Download(sink.digest(), sink.offset, resumed_from)

    def download_many(
        self,
        url: str,
        body: bytes,
        dests: Sequence[tuple[Digest, Path]],
        sizes_of: Callable[[httpx.Headers], list[int]],
        *,
        progress_cb: ProgressCallback | None = None,
    ) -> list[Download]:
        """POST the JSON ``body`` to ``url`` and cut the answer's body into the files ``dests``, in
        order, each hashed while it is written and not fsynced (the caller fsyncs it before it
        relies on it). ``sizes_of`` reads the files' sizes from the answer's headers and refuses
        (raises) a layout it does not accept.

        One attempt, no retry: a broken connection or an answer to retry (429, 503) ends it,
        and what it returns are the downloads finished before, in order; the file under way
        keeps the bytes that arrived (:meth:`download` resumes it with a range). Other error
        answers raise their typed error."""
        headers = self._bulk_headers(
            url, {"Accept": "application/octet-stream", "Content-Type": "application/json"}
        )
        done: list[Download] = []
        try:
            with self.bulk.request("POST", url, headers, body) as response:
                if response.status in RETRY_STATUSES:
                    log.debug("POST %s answered %d: the objects are fetched one by one", url, response.status)
                    return done
                if response.status != 200:
                    raise self.error(
                        response.status, response.headers, response.read_capped(MAX_ERROR_BYTES), url
                    )
                sizes = sizes_of(response.headers)
                stated = response.remaining  # None: a chunked answer (a proxy re-framed it)
                if len(sizes) != len(dests) or (stated is not None and stated != sum(sizes)):
                    raise RemoteError(
                        f"the registry's answer to POST {url} holds {stated} bytes, "
                        f"not the {sum(sizes)} of the objects it lists"
                    )
                for (digest, dest), size in zip(dests, sizes, strict=True):
                    done.append(self._receive_file(response, digest, dest, size, progress_cb))
                if stated is None and response.readinto(memoryview(bytearray(1))):
                    raise RemoteError(f"the registry's answer to POST {url} goes on after its objects")
        except ssl.SSLCertVerificationError as e:
            raise _untrusted(url, e) from e
        except ValueError as e:  # an error answer over its cap
            raise RemoteError(f"the registry's answer to POST {url} is unusable: {e}") from e
        except TRANSPORT_ERRORS as e:
            log.debug(
                "POST %s broke off after %d of %d objects: %s",
                url,
                len(done),
                len(dests),
                _transport_reason(e),
            )
        return done

    @staticmethod
    def _receive_file(
        response: BulkResponse, digest: Digest, dest: Path, size: int, progress_cb: ProgressCallback | None
    ) -> Download:
        """The next ``size`` bytes of ``response`` into a new file ``dest``, hashed."""
        with _sink_file(dest, 0, progress_cb, fsync=False) as sink:
            sink.receive_exactly(response, size)
        log.debug("object %s: %d bytes of a fetch pack", digest, size)
        return Download(sink.digest(), sink.offset, 0)

    def _download_attempt(
        self, url: str, digest: Digest, sink: _Sink, max_size: int | None, extra: Mapping[str, str]
    ) -> bool:
        """One GET (following a storage redirect); True when finished, False to ask again."""
        headers = {"Accept": "application/octet-stream"}
        if sink.offset > 0:
            headers["Range"] = f"bytes={sink.offset}-"
        target = url
        try:
            for _ in range(1 + _MAX_STORAGE_REDIRECTS):  # the registry, then the storage it sends us to
                sent = {**extra, **headers} if origin_of(target) == self._origin else headers
                with self.bulk.request("GET", target, self._bulk_headers(target, sent)) as response:
                    if response.status not in _REDIRECTS:
                        return self._receive(target, digest, sink, max_size, response)
                    location = urljoin(target, response.headers.get("Location", ""))
                    if location == target or urlsplit(location).scheme not in ("http", "https"):
                        raise RemoteError(f"GET {target} was redirected to an unusable location")
                    response.read_capped(MAX_ERROR_BYTES)  # so that the connection can be kept
                log.debug("object %s: redirected to %s", digest, urlsplit(location).hostname)
                target = location
            raise RemoteError(f"GET {url} was redirected more than {_MAX_STORAGE_REDIRECTS} times")
        except ssl.SSLCertVerificationError as e:
            raise _untrusted(url, e) from e
        except ValueError as e:  # an answer over its cap, or a Location that is not a URL
            raise RemoteError(f"the registry's answer to GET {url} is unusable: {e}") from e
        except TRANSPORT_ERRORS as e:
            raise _Retry(_transport_reason(e, f" after {sink.offset} bytes")) from e

    def _receive(
        self, url: str, digest: Digest, sink: _Sink, max_size: int | None, response: BulkResponse
    ) -> bool:
        status = response.status
        if status in RETRY_STATUSES:
            raise _Retry(f"HTTP {status}", _retry_after(response.headers))
        if status == 416 and sink.offset > 0:
            # The partial file may be complete already (interrupted before its rename).
            m = _UNSATISFIED_RANGE.fullmatch(response.headers.get("Content-Range", ""))
            if m is not None and int(m.group(1)) == sink.offset:
                return True
            log.debug("range from %d refused for %s: downloading it again", sink.offset, digest)
            sink.restart()
            return False
        if status == 200 and sink.offset > 0:
            log.debug("the server ignored the range for %s: downloading it again", digest)
            sink.restart()
        elif status == 206:
            m = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
            if m is None or int(m.group(1)) != sink.offset:
                raise RemoteError(
                    f"the registry answered a range request for {digest} with the wrong range "
                    f"({response.headers.get('Content-Range')!r}, asked from {sink.offset})"
                )
        elif status != 200:
            raise self.error(status, response.headers, response.read_capped(MAX_ERROR_BYTES), url)
        sink.receive(response, digest, max_size)
        return True


def _cert_error(e: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate error under a transport error (httpx wraps httpcore's, which wraps ssl's)."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None or isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _untrusted(url: str, e: ssl.SSLCertVerificationError) -> RemoteError:
    """A certificate that does not verify: a setting to fix, not a failure to retry."""
    return RemoteError(
        f"the TLS certificate of {urlsplit(url).hostname} is not trusted ({e.verify_message or e})",
        hint="if the registry uses a private certificate authority, point SSL_CERT_FILE at its certificate",
        url=url,
    )
