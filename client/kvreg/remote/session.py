"""HTTP transport of the registry clients: retries, capped reads, redirects, streamed bodies.

``HttpSession`` talks to one registry (its origin: scheme, host, port) through two
connection pools, both shared safely by worker threads: ``httpx`` for JSON and other
small answers, and the bulk transport (``kvreg.remote.bulk``) for object bodies.

- Every request is retried on connection errors and ``429``/``502``/``503``/``504``
  (``kvreg.remote.retrying``); after the last retry it raises ``UnavailableError``.
  Other error answers become typed errors (``kvreg.remote.errors``, or the OCI mapping
  of a subclass). Answers are read with a size cap.
- The registry's token (``Authorization: Bearer``), and any header a caller passes
  for the registry, go to the registry's origin only. ``GET`` and ``HEAD`` follow
  redirects (``kvreg.remote.redirects``): a registry on object storage answers with a
  presigned URL of the store, which gets neither the token nor the caller's
  credentials, and whose error answers are its own (never a challenge for the
  registry's credentials).
- Uploads stream a file's bytes with ``sendfile``; downloads (``kvreg.remote.downloads``)
  stream into a file while hashing every byte of it and resume with ``Range``.

This module knows the HTTP mechanics only, not the endpoints (``kvreg.remote.http``)
or what the bytes mean. It never logs the token.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import httpx

import kvreg
from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, RemoteError, StoreError
from kvreg.core.loopback import is_loopback
from kvreg.remote.bulk import TRANSPORT_ERRORS, BulkHttp, FileBody, ShortFileError, origin_of
from kvreg.remote.downloads import MAX_ERROR_BYTES, Downloads
from kvreg.remote.errors import RETRY_STATUSES, map_error
from kvreg.remote.redirects import (
    FOLLOWED_METHODS,
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    foreign_error,
    hop_headers,
    redirect_target,
    same_origin,
)
from kvreg.remote.retrying import Retry, RetryPolicy, retry_after, transport_reason
from kvreg.remote.sink import Download, ProgressCallback, check_body_size
from kvreg.remote.tls import TlsOnFirstUse, cert_error, tls_verify, untrusted

log = logging.getLogger(__name__)

__all__ = ["MAX_JSON_BYTES", "Download", "HttpSession", "ProgressCallback", "Reply"]

#: Largest JSON document (other than an envelope) the client reads from a registry.
MAX_JSON_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete answer: status, headers, body (read in full, capped), attempts it took, and
    the URL that answered (the registry's, or where a ``GET`` was redirected to)."""

    status: int
    headers: httpx.Headers
    body: bytes
    attempts: int
    url: str = ""


class HttpSession(Downloads):
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
        self.policy = RetryPolicy.of(base_url, retries, backoff, max_backoff)
        self._agent = {"User-Agent": f"kvreg/{kvreg.__version__}"}
        self._token_header = None if token is None else f"Bearer {token}"
        if self._token_header is not None:
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
        # No default Authorization: the token is added per request, for the registry's origin.
        self.http = httpx.Client(
            headers={**self._agent, "Accept": "application/json"},
            follow_redirects=False,
            transport=transport,
            mounts=mounts,
            **common,
        )
        # Object bodies (uploads, downloads, storage redirects) take the bulk transport;
        # ``transport`` (tests, custom stacks) applies to the JSON requests above only.
        self.bulk = BulkHttp(timeout=timeout, connect_timeout=connect_timeout, ssl_context=self.ssl_context)

    @property
    def retries(self) -> int:
        return self.policy.retries

    def transports(
        self, limits: httpx.Limits | None = None
    ) -> tuple[httpx.BaseTransport, dict[str, httpx.BaseTransport]]:
        """``(transport, mounts)`` for an ``httpx.Client`` with this session's TLS settings, built
        on the first https request: every https:// URL takes the mounted transport, which
        verifies with :meth:`ssl_context`; the default one carries plain http only, where there
        is no certificate to verify."""
        limits = limits or httpx.Limits()
        tls = TlsOnFirstUse(
            lambda: httpx.HTTPTransport(verify=self.ssl_context(), limits=limits, trust_env=False)
        )
        plain = httpx.HTTPTransport(verify=False, limits=limits, trust_env=False)  # http:// only (above)
        return plain, {"https://": tls}

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS settings of every https request, JSON or bulk: httpx's, built from ``verify``
        (and ``SSL_CERT_FILE``/``SSL_CERT_DIR``) on first use."""
        with self._ssl_lock:
            if self._ssl is None:
                v = tls_verify(self._verify_setting)
                self._ssl = v if isinstance(v, ssl.SSLContext) else httpx.create_ssl_context(verify=v)
            return self._ssl

    def close(self) -> None:
        self.http.close()
        self.bulk.close()

    # --- errors --------------------------------------------------------------------------

    def is_registry(self, url: str) -> bool:
        """Whether ``url`` is on the registry's own origin (where its credentials may go)."""
        return same_origin(url, self.base_url)

    def error(self, status: int, headers: httpx.Headers, body: bytes, url: str) -> KvregError:
        """The typed error of an error answer from ``url``: the registry's mapping for the
        registry's origin (:meth:`registry_error`), a storage host's error for any other."""
        if not self.is_registry(url):
            log.debug("HTTP %d from %s, which the registry redirected to", status, urlsplit(url).hostname)
            return foreign_error(status, url, registry=self.base_url)
        return self.registry_error(status, headers, body, url)

    def registry_error(self, status: int, headers: httpx.Headers, body: bytes, url: str) -> KvregError:
        """The typed error of the registry's own error answer (subclasses map other formats)."""
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
        ``retries`` overrides the session's number of retries for this request. A ``GET``
        or ``HEAD`` follows redirects; ``expect`` applies to the answer at the end of them.
        """

        def attempt(n: int) -> Reply:
            kwargs: dict[str, Any] = {"params": params}
            if json_body is not None:
                kwargs["json"] = json_body
            elif content is not None:
                kwargs["content"] = content()
            return self._attempt(method, url, dict(headers or {}), kwargs, expect, limit, n)

        return self.policy.run(method, url, attempt, budget=retries, on_retry=on_retry)

    def _send(
        self, method: str, url: str, headers: Mapping[str, str], kwargs: dict[str, Any]
    ) -> httpx.Response:
        sent = dict(headers)
        if self._token_header is not None and self.is_registry(url):
            sent.setdefault("Authorization", self._token_header)
        try:
            return self.http.send(self.http.build_request(method, url, headers=sent, **kwargs), stream=True)
        except httpx.TransportError as e:
            bad_cert = cert_error(e)
            if bad_cert is not None:
                raise untrusted(url, bad_cert) from e
            raise Retry(transport_reason(e)) from e

    def _attempt(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        kwargs: dict[str, Any],
        expect: Sequence[int],
        limit: int,
        attempt: int,
    ) -> Reply:
        target = url
        for _ in range(1 + MAX_REDIRECTS):  # the registry, then where it sends us
            response = self._send(method, target, headers, kwargs)
            if method not in FOLLOWED_METHODS or response.status_code not in REDIRECT_STATUSES:
                break
            try:
                location = redirect_target(target, response.status_code, response.headers)
            finally:
                response.close()
            log.debug("%s %s -> %d: to %s", method, target, response.status_code, urlsplit(location).hostname)
            headers = hop_headers(headers, target, location)
            kwargs = {**kwargs, "params": None}  # the Location is complete
            target = location
        else:
            raise RemoteError(f"{method} {url} was redirected more than {MAX_REDIRECTS} times")
        try:
            status = response.status_code
            log.debug("%s %s -> %d", method, target, status)
            if status in RETRY_STATUSES:
                raise Retry(f"HTTP {status}", retry_after(response.headers))
            cap = limit if status in expect else MAX_ERROR_BYTES
            try:
                body = self.read_capped(response, cap, f"{method} {target}")
            except httpx.TransportError as e:
                raise Retry(transport_reason(e, " while reading the answer")) from e
            if status not in expect:
                raise self.error(status, response.headers, body, target)
            return Reply(status, response.headers, body, attempt + 1, target)
        finally:
            response.close()

    # --- object bodies ------------------------------------------------------------------

    def bulk_headers(self, url: str, extra: Mapping[str, str]) -> dict[str, str]:
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
        check_body_size(source, origin, size, digest, piece=piece)
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
            check_body_size(path, 0, size, digest)
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

        return self.policy.run(
            method,
            url,
            lambda _: self._upload_attempt(url, body, headers, expect, counted, method),
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
                method, url, self.bulk_headers(url, headers), body, progress_cb
            ) as response:
                status = response.status
                log.debug("%s %s -> %d", method, url, status)
                if status in RETRY_STATUSES:
                    raise Retry(f"HTTP {status}", retry_after(response.headers))
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
            raise untrusted(url, e) from e
        except ShortFileError as e:
            raise StoreError(
                f"an object file changed while it was uploaded to {url}: {e}",
                hint="run 'kvreg fsck' on the local store",
            ) from e
        except TRANSPORT_ERRORS as e:
            raise Retry(transport_reason(e)) from e
