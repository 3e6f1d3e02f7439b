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

import hashlib
import ipaddress
import logging
import os
import random
import re
import ssl
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
from kvreg.fileio.atomicfile import finish
from kvreg.remote.errors import RETRY_STATUSES, map_error

log = logging.getLogger(__name__)

__all__ = ["MAX_JSON_BYTES", "Download", "HttpSession", "ProgressCallback", "Reply", "file_body"]

#: Largest JSON document (other than an envelope) the client reads from a registry.
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_ERROR_BYTES = 256 * 1024
BLOCK = 1 << 20
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
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


def _transport_reason(e: httpx.TransportError, where: str = "") -> str:
    text = f"{type(e).__name__}{where}"
    return f"{text}: {e}" if str(e) else text


def _retry_after(headers: httpx.Headers) -> float | None:
    try:
        seconds = float(headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Sink:
    """The file a download writes to, the hash of everything in it, and the progress callback."""

    def __init__(self, f: BinaryIO, start: int, progress_cb: ProgressCallback | None) -> None:
        self.f = f
        self.hasher = hashlib.sha256()
        self.progress_cb = progress_cb
        f.seek(0)
        done = 0
        while done < start:  # hash the kept prefix, so that the digest covers the whole file
            block = f.read(min(BLOCK, start - done))
            if not block:
                break
            self.hasher.update(block)
            done += len(block)
        f.seek(done)
        f.truncate(done)
        self.offset = done

    def write(self, block: bytes) -> None:
        self.f.write(block)
        self.hasher.update(block)
        self.offset += len(block)
        if self.progress_cb is not None:
            self.progress_cb(len(block))

    def restart(self) -> None:
        if self.progress_cb is not None and self.offset:
            self.progress_cb(-self.offset)
        self.f.seek(0)
        self.f.truncate(0)
        self.hasher = hashlib.sha256()
        self.offset = 0

    def digest(self) -> Digest:
        return Digest.from_hex(self.hasher.hexdigest())


def file_body(
    source: Path | BinaryIO,
    size: int,
    digest: Digest,
    sent: list[int],
    progress_cb: ProgressCallback | None,
    origin: int = 0,
) -> Iterator[bytes]:
    """Exactly ``size`` bytes of a file (a path, or a seekable file from ``origin``) in blocks.

    Counts them in ``sent[0]`` and reports them to ``progress_cb``. A file that
    holds another number of bytes raises ``StoreError``.
    """
    sent[0] = 0
    if isinstance(source, Path):
        with source.open("rb") as f:
            yield from _blocks(f, size, digest, sent, progress_cb)
    else:
        source.seek(origin)
        yield from _blocks(source, size, digest, sent, progress_cb)


def _blocks(
    f: BinaryIO, size: int, digest: Digest, sent: list[int], progress_cb: ProgressCallback | None
) -> Iterator[bytes]:
    remaining = size
    while remaining > 0:
        block = f.read(min(BLOCK, remaining))
        if not block:
            raise StoreError(
                f"object {digest} ended after {size - remaining} of {size} bytes while uploading it",
                hint="run 'kvreg fsck' on the local store",
                digest=str(digest),
            )
        remaining -= len(block)
        sent[0] += len(block)
        if progress_cb is not None:
            progress_cb(len(block))
        yield block
    if f.read(1):
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
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
            host = urlsplit(base_url).hostname or ""
            if base_url.startswith("http://") and not is_loopback(host):
                log.warning(
                    "sending a token over plain http to %s: anyone on the path can read it; use https",
                    host,
                )
        timeouts = httpx.Timeout(timeout, connect=connect_timeout, pool=None)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        # trust_env is off (no proxies or .netrc picked up silently); the CA settings that
        # users of a private certificate authority rely on are honoured explicitly.
        common: dict[str, Any] = {
            "timeout": timeouts,
            "limits": limits,
            "verify": _tls_verify(verify),
            "trust_env": False,
        }
        self.http = httpx.Client(headers=headers, follow_redirects=False, transport=transport, **common)
        self.bare = httpx.Client(headers=agent, follow_redirects=True, max_redirects=5, **common)

    def close(self) -> None:
        self.http.close()
        self.bare.close()

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
        budget = self.retries if retries is None else max(0, retries)
        attempt = 0
        while True:
            kwargs: dict[str, Any] = {"headers": dict(headers or {}), "params": params}
            if json_body is not None:
                kwargs["json"] = json_body
            elif content is not None:
                kwargs["content"] = content()
            try:
                return self._attempt(method, url, kwargs, expect, limit, attempt)
            except _Retry as r:
                if attempt >= budget:
                    raise self.unavailable(method, url, r.reason, attempt + 1) from r
                if on_retry is not None:
                    on_retry()
                self._sleep_before_retry(attempt, r.reason, r.retry_after)
                attempt += 1

    def _attempt(
        self, method: str, url: str, kwargs: dict[str, Any], expect: Sequence[int], limit: int, attempt: int
    ) -> Reply:
        try:
            response = self.http.send(self.http.build_request(method, url, **kwargs), stream=True)
        except httpx.TransportError as e:
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

    # --- downloads -----------------------------------------------------------------------

    def download(
        self,
        url: str,
        digest: Digest,
        dest: Path,
        *,
        start: int = 0,
        max_size: int | None = None,
        progress_cb: ProgressCallback | None = None,
    ) -> Download:
        """Stream ``url`` into ``dest`` after its first ``start`` bytes (``RegistryClient.get_object_to``)."""
        with dest.open("r+b" if dest.exists() else "w+b") as f:
            sink = _Sink(f, start, progress_cb)
            resumed_from = sink.offset
            if sink.offset != start:
                log.debug("partial file %s holds %d bytes, not %d", dest, sink.offset, start)
            attempt = 0
            while True:
                before = sink.offset
                try:
                    if self._download_attempt(url, digest, sink, max_size):
                        break
                except _Retry as r:
                    if sink.offset > before:
                        attempt = 0  # progress was made: the retry budget starts again
                    if attempt >= self.retries:
                        raise self.unavailable("GET", url, r.reason, attempt + 1) from r
                    self._sleep_before_retry(attempt, r.reason, r.retry_after)
                    attempt += 1
            f.truncate(sink.offset)
            finish(f)
        return Download(sink.digest(), sink.offset, resumed_from)

    def _download_attempt(self, url: str, digest: Digest, sink: _Sink, max_size: int | None) -> bool:
        """One GET (following a storage redirect); True when finished, False to ask again."""
        headers = {"Accept": "application/octet-stream"}
        if sink.offset > 0:
            headers["Range"] = f"bytes={sink.offset}-"
        try:
            response = self.http.send(self.http.build_request("GET", url, headers=headers), stream=True)
        except httpx.TransportError as e:
            raise _Retry(_transport_reason(e)) from e
        try:
            if response.status_code in _REDIRECTS:
                target = urljoin(url, response.headers.get("Location", ""))
                if target == url or urlsplit(target).scheme not in ("http", "https"):
                    raise RemoteError(f"the registry redirected GET {url} to an unusable location")
                response.close()
                log.debug("object %s: redirected to storage", digest)
                try:
                    response = self.bare.send(
                        self.bare.build_request("GET", target, headers=headers), stream=True
                    )
                except httpx.TransportError as e:
                    raise _Retry(_transport_reason(e, " from the storage redirect")) from e
            status = response.status_code
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
                body = self.read_capped(response, MAX_ERROR_BYTES, f"the error of GET {url}")
                raise self.error(status, response.headers, body, url)
            try:
                for block in response.iter_bytes():
                    if max_size is not None and sink.offset + len(block) > max_size:
                        raise DigestMismatchError(
                            f"the registry sent more than {max_size} bytes for object {digest}",
                            expected=str(digest),
                            max_size=max_size,
                        )
                    sink.write(block)
            except httpx.TransportError as e:
                raise _Retry(_transport_reason(e, f" after {sink.offset} bytes")) from e
            return True
        finally:
            response.close()
