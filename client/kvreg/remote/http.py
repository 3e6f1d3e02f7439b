"""The HTTP client of the registry API (``docs/protocol.md``): one method per endpoint.

``RegistryClient`` wraps one ``httpx.Client`` (a connection pool that worker
threads share: push and pull call it from a ``ThreadPoolExecutor``). It

- sends ``Authorization: Bearer <token>`` to the registry only, never to a host
  that a ``307`` sends object downloads to (presigned storage URLs), and never
  logs or repeats the token;
- retries connection errors and ``429``/``502``/``503``/``504`` with exponential
  backoff and jitter (every request of the protocol is idempotent: objects are
  named by digest, envelopes by manifest digest, and ref changes are
  compare-and-swaps whose retries are checked, see :meth:`RegistryClient.put_ref`),
  honouring ``Retry-After``; after the last retry it raises ``UnavailableError``;
- turns error bodies ``{"error": {"code", "message", "hint", "details"}}`` (the
  code also in ``X-Kvreg-Error-Code``) into the ``KvregError`` subclass that owns
  the code (``kvreg.core.errors.error_classes``), keeping message, hint and
  details; an unknown code becomes ``RemoteError``; 401 and 403 get a hint with
  the command that fixes them;
- streams object bodies both ways (never a whole object in memory), resumes
  downloads with ``Range`` and hashes every downloaded byte, so the caller gets
  the SHA-256 of the whole file;
- caps what it reads from the server (JSON documents, envelopes, object sizes).

This module checks digests of downloads but does not decide what they mean: it
does not verify signatures or manifests and does not touch the local store
(``kvreg.remote.transfer`` does). Nothing here prints.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple
from urllib.parse import quote, urljoin, urlsplit

import httpx

import kvreg
from kvreg.core.atomicfile import finish
from kvreg.core.digest import Digest
from kvreg.core.envelope import MAX_ENVELOPE_BYTES
from kvreg.core.errors import (
    DigestMismatchError,
    ForbiddenError,
    InternalServerError,
    KvregError,
    NotFoundError,
    RefConflictError,
    RemoteError,
    StoreError,
    UnauthenticatedError,
    UnavailableError,
    error_classes,
)
from kvreg.core.keys import PublicKey
from kvreg.core.names import RefName, validate_name, validate_namespace

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_MISSING_DIGESTS",
    "RETRY_STATUSES",
    "Download",
    "ProgressCallback",
    "RefValue",
    "RegistryClient",
    "RemoteRefEntry",
    "StoredObject",
    "error_from_response",
]

API_PREFIX = "/api/v1"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
ERROR_CODE_HEADER = "X-Kvreg-Error-Code"
UPLOAD_HEADER = "X-Kvreg-Upload"
DEFAULT_MAX_MISSING_DIGESTS = 1000
#: Largest JSON document (other than an envelope) the client reads from a registry.
MAX_JSON_BYTES = 64 * 1024 * 1024
_MAX_ERROR_BYTES = 256 * 1024
_BLOCK = 1 << 20
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")

ProgressCallback = Callable[[int], None]
"""Called with the number of bytes sent or received (negative: bytes to count again)."""


class RefValue(NamedTuple):
    """What a remote ref points at: the manifest digest and whether the ref is a tag."""

    digest: Digest
    tag: bool


@dataclass(frozen=True, slots=True)
class RemoteRefEntry:
    """One ref of a registry namespace."""

    ref: RefName
    digest: Digest
    tag: bool
    updated_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": str(self.ref),
            "digest": str(self.digest),
            "tag": self.tag,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class StoredObject:
    """The registry's answer to an object upload; ``stored``: the bytes were new to its storage."""

    digest: Digest
    size: int
    stored: bool


@dataclass(frozen=True, slots=True)
class Download:
    """A finished download: the SHA-256 of the *whole* file, its size, and where this call started."""

    digest: Digest
    size: int
    resumed_from: int


# --- error mapping ---------------------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _parse_error_body(body: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return doc["error"]
    return None


_FALLBACK_BY_STATUS: dict[int, type[KvregError]] = {
    401: UnauthenticatedError,
    403: ForbiddenError,
    404: NotFoundError,
    500: InternalServerError,
}


def _map_error(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    remote_name: str | None = None,
    url: str | None = None,
) -> KvregError:
    """The ``KvregError`` for an HTTP error answer (see the module docstring)."""
    payload = _parse_error_body(body) or {}
    code = payload.get("code") if isinstance(payload.get("code"), str) else None
    code = code or headers.get(ERROR_CODE_HEADER) or None
    message = payload.get("message") if isinstance(payload.get("message"), str) else None
    hint = payload.get("hint") if isinstance(payload.get("hint"), str) and payload.get("hint") else None
    raw_details = payload.get("details")
    details: dict[str, Any] = dict(raw_details) if isinstance(raw_details, dict) else {}

    classes = error_classes()
    cls: type[KvregError]
    if code is not None and code in classes:
        cls = classes[code]
    elif code is not None:
        cls = RemoteError
        details.setdefault("remote_code", code)
    elif status in RETRY_STATUSES:
        cls = UnavailableError
    elif status in _FALLBACK_BY_STATUS:
        cls = _FALLBACK_BY_STATUS[status]
    else:
        cls = RemoteError
    if message is None:
        where = f" for {url}" if url else ""
        message = f"the registry answered HTTP {status}{where}"
        if code is None and status == 404:
            message += " (no such route)"
            hint = hint or "check that the remote's URL is a kvreg registry (kvreg remote list)"
    who = remote_name or "NAME"
    if status == 401 or cls is UnauthenticatedError:
        hint = (
            f"log in with a valid token: kvreg login {who} --token TOKEN "
            "(a registry admin creates tokens; a revoked or expired one must be replaced)"
        )
    elif status == 403 or cls is ForbiddenError:
        hint = (
            "your token lacks the role this needs: ask a namespace admin for the write role "
            "(push) or the admin role (deleting refs and envelopes)"
            + (f"; the registry says: {hint}" if hint else "")
        )
    details["http_status"] = status
    error = cls(message, hint=hint)
    error.details = details
    return error


def error_from_response(response: httpx.Response, *, remote_name: str | None = None) -> KvregError:
    """The ``KvregError`` that an error answer of the registry stands for (reads the body)."""
    body = response.read()
    try:
        url: str | None = str(response.request.url)
    except RuntimeError:  # a response built without a request (tests)
        url = None
    return _map_error(response.status_code, response.headers, body, remote_name=remote_name, url=url)


# --- the client ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    headers: httpx.Headers
    body: bytes
    attempts: int


class _Retry(Exception):
    """Internal: this attempt failed in a way worth retrying."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _segment(value: str) -> str:
    return quote(value, safe="")


def _jsonable_digests(digests: Iterable[Digest | str]) -> list[str]:
    return [str(Digest(d)) for d in digests]


class RegistryClient:
    """A registry at ``base_url`` (its root; ``/api/v1`` is added), optionally with a bearer token.

    Thread-safe: one client serves every worker of a push or pull. Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        remote_name: str | None = None,
        max_connections: int = 32,
        verify: bool | str = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        from kvreg.remote.config import normalize_url

        self.base_url = normalize_url(base_url)
        self.api_url = self.base_url + API_PREFIX
        self.remote_name = remote_name
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.max_backoff = max(0.0, float(max_backoff))
        self._has_token = token is not None
        headers = {"User-Agent": f"kvreg/{kvreg.__version__}", "Accept": "application/json"}
        if token is not None:
            from kvreg.remote.config import validate_token

            headers["Authorization"] = f"Bearer {validate_token(token)}"
            host = urlsplit(self.base_url).hostname or ""
            if self.base_url.startswith("http://") and not _is_loopback(host):
                log.warning(
                    "sending a token over plain http to %s: anyone on the network path can read it; "
                    "use https",
                    host,
                )
        timeouts = httpx.Timeout(timeout, connect=connect_timeout, pool=None)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.Client(
            headers=headers,
            timeout=timeouts,
            limits=limits,
            follow_redirects=False,
            verify=verify,
            transport=transport,
            trust_env=False,
        )
        # Object downloads that the registry redirects to presigned storage URLs: no token here.
        self._bare = httpx.Client(
            headers={"User-Agent": headers["User-Agent"]},
            timeout=timeouts,
            limits=limits,
            follow_redirects=True,
            max_redirects=5,
            verify=verify,
            trust_env=False,
        )
        self._info: dict[str, Any] | None = None
        self._info_lock = threading.Lock()

    def __repr__(self) -> str:
        auth = ", token=***" if self._has_token else ""
        return f"RegistryClient({self.base_url!r}{auth})"

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        self._bare.close()

    # --- plumbing ------------------------------------------------------------------------

    def _url(self, *segments: str) -> str:
        return (
            self.api_url + "/" + "/".join(_segment(s) for s in segments) if segments else self.api_url + "/"
        )

    def _ns_url(self, namespace: str, *segments: str) -> str:
        return self._url("namespaces", validate_namespace(namespace), *segments)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        delay = delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 (jitter, not cryptography)
        if retry_after is not None:
            delay = max(delay, min(retry_after, 60.0))
        return delay

    def _sleep_before_retry(self, attempt: int, reason: str, retry_after: float | None) -> None:
        delay = self._delay(attempt, retry_after)
        log.info(
            "registry request failed (%s); retry %d/%d in %.2f s", reason, attempt + 1, self.retries, delay
        )
        time.sleep(delay)

    def _error(self, status: int, headers: httpx.Headers, body: bytes, url: str) -> KvregError:
        return _map_error(status, headers, body, remote_name=self.remote_name, url=url)

    def _unavailable(self, method: str, url: str, reason: str, attempts: int) -> UnavailableError:
        return UnavailableError(
            f"the registry at {self.base_url} is unavailable: {method} {url} failed "
            f"{attempts} time{'s' if attempts != 1 else ''} ({reason})",
            hint="check the URL (kvreg remote list) and the network, then run the command again; "
            "transfers resume where they stopped",
            url=url,
            attempts=attempts,
        )

    @staticmethod
    def _read_capped(response: httpx.Response, limit: int, what: str) -> bytes:
        out = bytearray()
        for block in response.iter_bytes():
            out += block
            if len(out) > limit:
                raise RemoteError(f"the registry sent more than {limit} bytes for {what}", limit=limit)
        return bytes(out)

    def _call(
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
    ) -> _Reply:
        """One request with retries; the reply if its status is in ``expect``, else the mapped error."""
        attempt = 0
        while True:
            try:
                return self._attempt(method, url, expect, json_body, content, headers, params, limit, attempt)
            except _Retry as r:
                if attempt >= self.retries:
                    raise self._unavailable(method, url, r.reason, attempt + 1) from r
                if on_retry is not None:
                    on_retry()
                self._sleep_before_retry(attempt, r.reason, r.retry_after)
                attempt += 1

    def _attempt(
        self,
        method: str,
        url: str,
        expect: Sequence[int],
        json_body: Any,
        content: Callable[[], Iterator[bytes] | bytes] | None,
        headers: Mapping[str, str] | None,
        params: Mapping[str, Any] | None,
        limit: int,
        attempt: int,
    ) -> _Reply:
        kwargs: dict[str, Any] = {"headers": dict(headers or {}), "params": params}
        if json_body is not None:
            kwargs["json"] = json_body
        elif content is not None:
            kwargs["content"] = content()
        try:
            request = self._http.build_request(method, url, **kwargs)
            response = self._http.send(request, stream=True)
        except httpx.TransportError as e:
            raise _Retry(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from e
        try:
            log.debug("%s %s -> %d", method, url, response.status_code)
            status = response.status_code
            if status in RETRY_STATUSES:
                raise _Retry(f"HTTP {status}", _retry_after(response.headers))
            try:
                if status in expect:
                    body = self._read_capped(response, limit, f"{method} {url}")
                else:
                    body = self._read_capped(response, _MAX_ERROR_BYTES, f"the error of {method} {url}")
            except httpx.TransportError as e:
                raise _Retry(f"{type(e).__name__} while reading the answer") from e
            if status not in expect:
                raise self._error(status, response.headers, body, url)
            return _Reply(status, response.headers, body, attempt + 1)
        finally:
            response.close()

    @staticmethod
    def _json(reply: _Reply, what: str) -> dict[str, Any]:
        try:
            doc = json.loads(reply.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise RemoteError(f"the registry's answer to {what} is not JSON") from e
        if not isinstance(doc, dict):
            raise RemoteError(f"the registry's answer to {what} is not a JSON object")
        return doc

    @staticmethod
    def _digest(value: Any, what: str) -> Digest:
        try:
            return Digest(value)
        except KvregError as e:
            raise RemoteError(f"the registry sent an invalid digest for {what}: {value!r}") from e

    # --- server --------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """``GET /api/v1/``: version, API level, storage kind and limits (cached after the first call)."""
        with self._info_lock:
            if self._info is None:
                doc = self._json(self._call("GET", self._url()), "GET /api/v1/")
                api = doc.get("api")
                if api is not None and api != 1:
                    raise RemoteError(
                        f"the registry speaks API version {api!r}; this client speaks 1",
                        hint="upgrade kvreg (or use a registry of the same version)",
                    )
                self._info = doc
            return self._info

    def limit(self, name: str, default: int) -> int:
        """A positive integer from ``info()["limits"]``, else ``default``."""
        limits = self.info().get("limits")
        value = limits.get(name) if isinstance(limits, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    def whoami(self) -> dict[str, Any]:
        """``GET /api/v1/whoami``: ``{"user": NAME|None, "admin": bool, "roles": {NS: ROLE}}``."""
        return self._json(self._call("GET", self._url("whoami")), "whoami")

    def list_namespaces(self) -> list[str]:
        """The names of the namespaces the caller can read."""
        doc = self._json(self._call("GET", self._url("namespaces")), "GET namespaces")
        items = doc.get("namespaces", [])
        if not isinstance(items, list):
            raise RemoteError("the registry's namespace list is malformed")
        names: list[str] = []
        for item in items:
            name = item.get("name") if isinstance(item, dict) else item
            try:
                names.append(validate_namespace(name))
            except KvregError:
                log.warning("the registry listed an invalid namespace name %r; ignoring it", name)
        return sorted(names)

    # --- objects -------------------------------------------------------------------------

    def open_upload(self, namespace: str, digests: Sequence[Digest]) -> tuple[str, list[Digest]]:
        """Open an upload session listing ``digests`` (at most ``max_missing_digests``).

        Returns ``(upload id, the digests the namespace does not hold)``. Until the
        session is closed or expires, the registry's GC keeps every listed object.
        """
        body = {"digests": _jsonable_digests(digests)}
        reply = self._call("POST", self._ns_url(namespace, "uploads"), expect=(200, 201), json_body=body)
        doc = self._json(reply, "open upload")
        upload = doc.get("upload")
        if not isinstance(upload, str | int) or isinstance(upload, bool) or str(upload) == "":
            raise RemoteError("the registry's upload session has no id")
        return str(upload), self._digest_list(doc.get("missing"), "the missing objects")

    def close_upload(self, namespace: str, upload_id: str) -> None:
        """Close an upload session (idempotent; an unknown session is fine)."""
        try:
            self._call("DELETE", self._ns_url(namespace, "uploads", upload_id), expect=(200, 204))
        except NotFoundError as e:
            if e.code != "UPLOAD_UNKNOWN":
                raise

    def _digest_list(self, value: Any, what: str) -> list[Digest]:
        if not isinstance(value, list):
            raise RemoteError(f"the registry's list of {what} is malformed")
        return [self._digest(v, what) for v in value]

    def missing(self, namespace: str, digests: Sequence[Digest]) -> list[Digest]:
        """The digests the namespace does not hold, asked in batches of ``max_missing_digests``."""
        batch = self.limit("max_missing_digests", DEFAULT_MAX_MISSING_DIGESTS)
        out: list[Digest] = []
        items = list(digests)
        for i in range(0, len(items), batch):
            body = {"digests": _jsonable_digests(items[i : i + batch])}
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
        """Upload an object, streamed from a file path or a seekable binary file.

        ``size`` bytes are sent with ``Content-Length``; the registry hashes them
        and refuses (``DigestMismatchError``, exit 3) bytes that are not ``digest``.
        A retry sends the whole object again (``progress_cb`` is then called with
        the negative count of bytes to send again).
        """
        digest = Digest(digest)
        if size < 0:
            raise StoreError(f"object {digest}: negative size {size}")
        path = None if hasattr(source, "read") else Path(source)  # type: ignore[arg-type]
        stream: BinaryIO | None = None if path is not None else source  # type: ignore[assignment]
        origin = stream.tell() if stream is not None else 0
        sent = [0]

        def body() -> Iterator[bytes]:
            sent[0] = 0
            if path is not None:
                with path.open("rb") as f:
                    yield from _blocks(f, size, digest, sent, progress_cb)
            else:
                assert stream is not None
                stream.seek(origin)
                yield from _blocks(stream, size, digest, sent, progress_cb)

        def rewind() -> None:
            if progress_cb is not None and sent[0]:
                progress_cb(-sent[0])
            sent[0] = 0

        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if upload_id is not None:
            headers[UPLOAD_HEADER] = upload_id
        reply = self._call(
            "PUT",
            self._ns_url(namespace, "objects", digest),
            expect=(200, 201),
            content=body,
            headers=headers,
            on_retry=rewind,
        )
        doc = self._json(reply, f"PUT object {digest}") if reply.body.strip() else {}
        got = doc.get("digest", str(digest))
        if got != digest:
            raise RemoteError(f"the registry stored {got!r} when sent {digest}")
        stored = doc.get("stored")
        return StoredObject(digest, size, stored if isinstance(stored, bool) else reply.status == 201)

    def get_object_to(
        self,
        namespace: str,
        digest: Digest,
        dest: str | os.PathLike[str],
        *,
        start: int = 0,
        max_size: int | None = None,
        progress_cb: ProgressCallback | None = None,
    ) -> Download:
        """Download an object into the file ``dest``, resuming after its first ``start`` bytes.

        With ``start > 0`` the first ``start`` bytes already in ``dest`` are kept
        (and hashed) and the rest is asked for with ``Range: bytes=start-``; a
        server that ignores the range starts the file over. Connection errors in
        the middle resume from the bytes received. A ``307`` to a presigned URL is
        followed without the token. The file is fsynced; the returned digest is
        the SHA-256 of the whole file, which the caller compares with ``digest``
        (this method does not rename or delete anything). More than ``max_size``
        bytes raise ``DigestMismatchError``: they cannot be the object.
        """
        digest = Digest(digest)
        target = Path(dest)
        url = self._ns_url(namespace, "objects", digest)
        hasher = hashlib.sha256()
        with target.open("r+b" if target.exists() else "w+b") as f:
            offset = _hash_prefix(f, hasher, start)
            if offset != start:  # the partial file was shorter than announced: keep what is there
                log.debug("partial file %s holds %d bytes, not %d", target, offset, start)
            resumed_from = offset
            attempt = 0
            while True:
                try:
                    offset, hasher, done = self._download_attempt(
                        url, digest, f, offset, hasher, max_size, progress_cb
                    )
                    if done:
                        break
                    attempt = 0  # progress was made: the retry budget starts again
                    continue
                except _Retry as r:
                    if attempt >= self.retries:
                        raise self._unavailable("GET", url, r.reason, attempt + 1) from r
                    self._sleep_before_retry(attempt, r.reason, r.retry_after)
                    attempt += 1
            f.truncate(offset)
            finish(f)
        return Download(Digest.from_hex(hasher.hexdigest()), offset, resumed_from)

    def _download_attempt(
        self,
        url: str,
        digest: Digest,
        f: BinaryIO,
        offset: int,
        hasher: Any,
        max_size: int | None,
        progress_cb: ProgressCallback | None,
    ) -> tuple[int, Any, bool]:
        """One GET (and its redirect): returns ``(new offset, hasher, finished)``; raises ``_Retry``."""
        headers = {"Accept": "application/octet-stream"}
        if offset > 0:
            headers["Range"] = f"bytes={offset}-"
        try:
            response = self._http.send(self._http.build_request("GET", url, headers=headers), stream=True)
        except httpx.TransportError as e:
            raise _Retry(f"{type(e).__name__}: {e}") from e
        try:
            if response.status_code in _REDIRECTS:
                location = response.headers.get("Location")
                if not location:
                    raise RemoteError(f"the registry redirected GET {url} without a Location")
                target = urljoin(url, location)
                if urlsplit(target).scheme not in ("http", "https"):
                    raise RemoteError(f"the registry redirected GET {url} to a non-http URL")
                response.close()
                log.debug("object %s redirected to storage", digest)
                try:
                    response = self._bare.send(
                        self._bare.build_request("GET", target, headers=headers), stream=True
                    )
                except httpx.TransportError as e:
                    raise _Retry(f"{type(e).__name__} from the storage redirect: {e}") from e
            status = response.status_code
            if status in RETRY_STATUSES:
                raise _Retry(f"HTTP {status}", _retry_after(response.headers))
            if status == 416 and offset > 0:
                # The partial file may be complete already (interrupted before the rename).
                m = _UNSATISFIED_RANGE.fullmatch(response.headers.get("Content-Range", ""))
                if m is not None and int(m.group(1)) == offset:
                    return offset, hasher, True
                log.debug("range from %d refused for %s; downloading it again", offset, digest)
                return self._restart(f, progress_cb, offset), hashlib.sha256(), False
            if status == 200 and offset > 0:
                log.debug("the server ignored the range for %s; downloading it again", digest)
                if progress_cb is not None:
                    progress_cb(-offset)
                f.seek(0)
                f.truncate(0)
                offset, hasher = 0, hashlib.sha256()
            elif status == 206:
                m = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
                if m is None or int(m.group(1)) != offset:
                    raise RemoteError(
                        f"the registry answered a range request for {digest} with the wrong range "
                        f"({response.headers.get('Content-Range')!r}, asked from {offset})"
                    )
            elif status != 200:
                body = self._read_capped(response, _MAX_ERROR_BYTES, f"the error of GET {url}")
                raise self._error(status, response.headers, body, url)
            try:
                for block in response.iter_bytes(_BLOCK):
                    if max_size is not None and offset + len(block) > max_size:
                        raise DigestMismatchError(
                            f"the registry sent more than {max_size} bytes for object {digest}",
                            expected=str(digest),
                            max_size=max_size,
                        )
                    f.write(block)
                    hasher.update(block)
                    offset += len(block)
                    if progress_cb is not None:
                        progress_cb(len(block))
            except httpx.TransportError as e:
                raise _Retry(f"{type(e).__name__} after {offset} bytes") from e
            return offset, hasher, True
        finally:
            response.close()

    @staticmethod
    def _restart(f: BinaryIO, progress_cb: ProgressCallback | None, offset: int) -> int:
        if progress_cb is not None:
            progress_cb(-offset)
        f.seek(0)
        f.truncate(0)
        return 0

    # --- envelopes -----------------------------------------------------------------------

    def put_envelope(self, namespace: str, manifest_digest: Digest, envelope_bytes: bytes) -> bool:
        """Upload a signed envelope (exact bytes); True if it was new to the namespace."""
        reply = self._call(
            "PUT",
            self._ns_url(namespace, "envelopes", Digest(manifest_digest)),
            expect=(200, 201),
            content=lambda: bytes(envelope_bytes),
            headers={"Content-Type": "application/json"},
        )
        return reply.status == 201

    def get_envelope(self, namespace: str, manifest_digest: Digest) -> bytes:
        """The exact envelope bytes the registry holds (not verified here)."""
        reply = self._call(
            "GET", self._ns_url(namespace, "envelopes", Digest(manifest_digest)), limit=MAX_ENVELOPE_BYTES
        )
        return reply.body

    # --- refs ----------------------------------------------------------------------------

    def get_ref(self, namespace: str, name: str) -> RefValue | None:
        """What ``namespace/name`` points at, or None if the ref does not exist."""
        try:
            reply = self._call("GET", self._ns_url(namespace, "refs", validate_name(name)))
        except NotFoundError as e:
            if e.code == "REF_UNKNOWN":
                return None
            raise
        doc = self._json(reply, f"GET ref {namespace}/{name}")
        return RefValue(self._digest(doc.get("digest"), f"ref {namespace}/{name}"), doc.get("tag") is True)

    def put_ref(
        self, namespace: str, name: str, digest: Digest, expected: Digest | None, *, tag: bool = False
    ) -> bool:
        """Move ``namespace/name`` to ``digest`` by compare-and-swap; True if the ref was created.

        ``expected=None`` creates it (``If-None-Match: *``); a digest moves it only
        if it is there now (``If-Match``). ``RefConflictError`` when it is not,
        ``TagImmutableError`` for a tag. A conflict answered to a *retried* request
        is checked: if the ref now is exactly what was asked, the first attempt
        succeeded and its answer was lost, and that is success.
        """
        digest = Digest(digest)
        url = self._ns_url(namespace, "refs", validate_name(name))
        headers = {"If-None-Match": "*"} if expected is None else {"If-Match": f'"{Digest(expected)}"'}
        retried = [False]

        def mark() -> None:
            retried[0] = True

        try:
            reply = self._call(
                "PUT",
                url,
                expect=(200, 201),
                json_body={"digest": str(digest), "tag": tag},
                headers=headers,
                on_retry=mark,
            )
        except RefConflictError:  # TagImmutableError too
            if retried[0]:
                now = self.get_ref(namespace, name)
                if now is not None and now.digest == digest and (now.tag or not tag):
                    log.info("ref %s/%s is at %s after a retried update: done", namespace, name, digest)
                    return expected is None
            raise
        return reply.status == 201

    def delete_ref(self, namespace: str, name: str, expected: Digest) -> None:
        """Delete ``namespace/name`` if it points at ``expected`` (namespace admin; tags cannot go)."""
        url = self._ns_url(namespace, "refs", validate_name(name))
        retried = [False]

        def mark() -> None:
            retried[0] = True

        try:
            self._call(
                "DELETE", url, expect=(200, 204), headers={"If-Match": f'"{Digest(expected)}"'}, on_retry=mark
            )
        except NotFoundError as e:
            if not (retried[0] and e.code == "REF_UNKNOWN"):
                raise

    def list_refs(self, namespace: str) -> list[RemoteRefEntry]:
        """Every ref of ``namespace``, sorted by name."""
        doc = self._json(self._call("GET", self._ns_url(namespace, "refs")), f"GET refs of {namespace}")
        items = doc.get("refs")
        if not isinstance(items, list):
            raise RemoteError(f"the registry's ref list of {namespace} is malformed")
        out: list[RemoteRefEntry] = []
        for item in items:
            if not isinstance(item, dict):
                raise RemoteError(f"the registry's ref list of {namespace} is malformed")
            name = item.get("name")
            try:
                ref = RefName(namespace, name)  # type: ignore[arg-type]
            except KvregError as e:
                raise RemoteError(f"the registry listed an invalid ref name {name!r}") from e
            updated = item.get("updated_at")
            out.append(
                RemoteRefEntry(
                    ref,
                    self._digest(item.get("digest"), f"ref {ref}"),
                    item.get("tag") is True,
                    updated if isinstance(updated, str) else None,
                )
            )
        out.sort(key=lambda e: e.ref.name)
        return out

    # --- keys and search -----------------------------------------------------------------

    def list_keys(self, namespace: str) -> list[PublicKey]:
        """The public keys the registry has registered for ``namespace`` (revoked ones too).

        These are *not* trusted: pull uses them only to name the signer of a
        manifest that the local trust policy does not accept. Malformed entries
        are skipped with a warning.
        """
        doc = self._json(self._call("GET", self._ns_url(namespace, "keys")), f"GET keys of {namespace}")
        items = doc.get("keys")
        if not isinstance(items, list):
            raise RemoteError(f"the registry's key list of {namespace} is malformed")
        out: list[PublicKey] = []
        for item in items:
            text = item.get("public_key") if isinstance(item, dict) else None
            try:
                out.append(PublicKey.from_text(text))  # type: ignore[arg-type]
            except KvregError:
                log.warning("the registry listed a malformed key for %s; ignoring it", namespace)
        return out

    def search(
        self,
        *,
        namespace: str | None = None,
        model: str | None = None,
        verifier: str | None = None,
        verdict: str | None = None,
        q: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> dict[str, Any]:
        """``GET /api/v1/artifacts``: ``{"artifacts": [...], "total": N}`` (see docs/protocol.md)."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        for key, value in (
            ("namespace", namespace),
            ("model", model),
            ("verifier", verifier),
            ("verdict", verdict),
            ("q", q),
        ):
            if value is not None:
                params[key] = value
        doc = self._json(self._call("GET", self._url("artifacts"), params=params), "search")
        if not isinstance(doc.get("artifacts"), list):
            raise RemoteError("the registry's search answer is malformed")
        return doc


# --- helpers -------------------------------------------------------------------------------


def _blocks(
    f: BinaryIO, size: int, digest: Digest, sent: list[int], progress_cb: ProgressCallback | None
) -> Iterator[bytes]:
    """``size`` bytes of ``f`` in blocks; ``StoreError`` if the file holds another number of bytes."""
    remaining = size
    while remaining > 0:
        block = f.read(min(_BLOCK, remaining))
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


def _hash_prefix(f: BinaryIO, hasher: Any, start: int) -> int:
    """Hash the first ``start`` bytes of ``f`` (fewer if it is shorter); leave ``f`` after them."""
    f.seek(0)
    done = 0
    while done < start:
        block = f.read(min(_BLOCK, start - done))
        if not block:
            break
        hasher.update(block)
        done += len(block)
    f.seek(done)
    f.truncate(done)
    return done
