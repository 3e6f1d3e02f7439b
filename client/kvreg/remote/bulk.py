"""Object bodies over HTTP/1.1 at the speed of the socket: ``sendfile`` up, ``readinto`` down.

Registry objects are megabytes to gigabytes. Through httpx every 64 KiB piece of a
body goes through httpcore and h11 as a new ``bytes`` object, which cost the client
about 5 CPU seconds per GiB pulled (bench/push_pull.py, docs/benchmarks.md). This
module moves object bodies with the standard library's ``http.client`` instead:

- **uploads** (one file, or several files as one body: an object pack) go from the
  file to the socket with ``socket.sendfile`` (the kernel copies; Python never sees
  the bytes), in pieces of a few MiB so that progress is reported; over TLS, where
  ``sendfile`` cannot encrypt, a reused buffer is read into and sent;
- **downloads** are read with ``HTTPResponse.readinto`` straight into the caller's
  buffer (for ``kvreg.remote.session``: a pooled, page-aligned one that is then
  hashed and written with ``O_DIRECT``), so a GiB costs a few hundred large reads.

Connections are kept per origin (scheme, host, port) and reused when an answer was
read to its end. Headers are the caller's: the registry's token is added by
``kvreg.remote.session`` for the registry's origin only. This module does no
retries, no redirects and no error mapping (``kvreg.remote.session`` does) and it
knows nothing of digests; it raises ``OSError`` or ``http.client.HTTPException``
for a transport failure, which the caller retries. Proxies are not used (as with
the JSON client, whose ``trust_env`` is off).
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast
from urllib.parse import urlsplit

import httpx

from kvreg.fileio.directio import default_pool

log = logging.getLogger(__name__)

__all__ = ["TRANSPORT_ERRORS", "BulkHttp", "BulkResponse", "FileBody", "ShortFileError", "origin_of"]

#: What a broken connection raises here (the caller retries or resumes on these).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)
#: Bytes handed to ``sendfile`` (or sent from the buffer) at once, between progress reports.
SEND_PIECE = 8 << 20
_IDLE_PER_ORIGIN = 8

Origin = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class FileBody:
    """``size`` bytes of the open binary file ``file`` (or of the file at a path, opened only
    while it is sent) from ``offset``: a request body."""

    file: BinaryIO | Path
    offset: int
    size: int


class BulkResponse:
    """An answer whose body is read by the caller: :meth:`readinto` or :meth:`read_capped`."""

    def __init__(
        self,
        status: int,
        headers: httpx.Headers,
        response: http.client.HTTPResponse,
        sock: socket.socket | None,
    ) -> None:
        self.status = status
        self.headers = headers
        self._response = response
        self._sock = sock
        self._first_read = True

    @property
    def remaining(self) -> int | None:
        """Bytes of the body not read yet, when the server stated a length (else ``None``)."""
        return self._response.length

    @property
    def complete(self) -> bool:
        """Whether the whole body has been read."""
        return self._response.isclosed()

    def readinto(
        self, view: memoryview, *, on_idle: Callable[[], None] | None = None, idle_after: float = 0.2
    ) -> int:
        """Read what the network has of the body (at least one byte, at most ``len(view)``)
        into ``view``; 0 at the body's end.

        With a stated length this is one socket read straight into ``view``, so a slow
        or stalled peer never holds back bytes that arrived; if nothing arrives within
        ``idle_after`` seconds, ``on_idle`` is called before the wait goes on (a
        download writes out what it holds, so that a kill meanwhile loses nothing). A
        connection that ends before the stated length raises ``http.client.IncompleteRead``;
        the bytes counted before it are good.
        """
        r = self._response
        if r.isclosed() or not view:
            return 0
        if r.length is None or r.chunked:  # no stated length: http.client frames the body
            return r.readinto(view)
        assert r.fp is not None
        if r.length == 0:  # an empty body (or its end): let http.client close the answer
            r.read()
            return 0
        view = view[: r.length]
        # The first read takes what http.client buffered with the headers; later ones wait on the socket.
        if on_idle is not None and not self._first_read and not self._ready(idle_after):
            on_idle()
        n = r.fp.readinto1(view)
        self._first_read = False
        if not n:
            raise http.client.IncompleteRead(b"", r.length)
        r.length -= n
        if r.length == 0:
            r.read()  # the end: http.client marks the answer complete, the connection reusable
        return n

    def _ready(self, timeout: float) -> bool:
        sock = self._sock
        if sock is None:
            return True
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        readable, _, _ = select.select([sock], [], [], timeout)
        return bool(readable)

    def read_capped(self, limit: int) -> bytes:
        """The rest of the body, refused (``ValueError``) past ``limit`` bytes."""
        data = self._response.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"more than {limit} bytes")
        return data


class BulkHttp:
    """Connections for object bodies, kept per origin; thread-safe."""

    def __init__(
        self,
        *,
        timeout: float,
        connect_timeout: float,
        ssl_context: Callable[[], ssl.SSLContext],
    ) -> None:
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
            self._closed = True
        for conns in idle.values():
            for conn in conns:
                conn.close()

    @contextlib.contextmanager
    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: FileBody | Sequence[FileBody] | bytes | None = None,
        progress_cb: Callable[[int], None] | None = None,
    ) -> Iterator[BulkResponse]:
        """Send one request and yield its answer; the connection goes back to the pool
        if the answer was read to its end, and is closed otherwise. A sequence of file
        bodies is sent as one body, each in turn (an object pack); ``bytes`` are sent as
        they are (a small body: a fetch pack's JSON).

        A kept connection the server has closed meanwhile is detected on the first
        write or on the status line, and the request is sent once more on a new
        one (nothing of it can have been processed: no answer was read), unless
        part of its body went out already: that failure is the caller's to retry.
        """
        origin = origin_of(url)
        target = _target(url)
        data = body if isinstance(body, bytes) else None
        parts: list[FileBody] = []
        if isinstance(body, FileBody):
            parts = [body]
        elif body is not None and not isinstance(body, bytes):
            parts = list(body)
        length = len(data) if data is not None else None if body is None else sum(p.size for p in parts)
        conn, reused = self._checkout(origin)
        sent = [0]

        def counted(n: int) -> None:
            sent[0] += n
            if progress_cb is not None:
                progress_cb(n)

        try:
            try:
                response = self._exchange(conn, method, target, headers, parts, length, counted, data)
            except TRANSPORT_ERRORS:
                conn.close()
                if not reused or sent[0]:  # a body under way is the caller's to send again
                    raise
                log.debug("kept connection to %s:%d was closed; sending again on a new one", *origin[1:])
                conn = self._connect(origin)
                response = self._exchange(conn, method, target, headers, parts, length, counted, data)
            answer = BulkResponse(response.status, httpx.Headers(response.getheaders()), response, conn.sock)
            yield answer
        except BaseException:
            conn.close()
            raise
        if answer.complete and not response.will_close:
            self._checkin(origin, conn)
        else:
            conn.close()

    # --- one exchange ----------------------------------------------------------------

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        target: str,
        headers: Mapping[str, str],
        parts: Sequence[FileBody],
        length: int | None,
        progress_cb: Callable[[int], None] | None,
        data: bytes | None = None,
    ) -> http.client.HTTPResponse:
        if getattr(conn, "sock", None) is None:
            conn.connect()
            cast(socket.socket, conn.sock).settimeout(self._timeout)
        conn.putrequest(method, target, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        if length is not None:
            conn.putheader("Content-Length", str(length))
        conn.endheaders(data)
        if parts:
            try:
                for part in parts:
                    _send_body(conn.sock, part, progress_cb)
            except TRANSPORT_ERRORS:
                # The server may have answered before reading the whole body (a refusal:
                # 403, 413) and closed; its answer says more than the broken pipe.
                with contextlib.suppress(*TRANSPORT_ERRORS):
                    return conn.getresponse()
                raise
        return conn.getresponse()

    # --- the pool ----------------------------------------------------------------------

    def _checkout(self, origin: Origin) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the HTTP client is closed")
            idle = self._idle.get(origin, [])
            while idle:
                conn = idle.pop()
                if _still_open(conn):
                    return conn, True
                conn.close()  # closed by the server while it waited (its keep-alive timeout)
        return self._connect(origin), False

    def _checkin(self, origin: Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if not self._closed and len(idle) < _IDLE_PER_ORIGIN:
                idle.append(conn)
                return
        conn.close()

    def _connect(self, origin: Origin) -> http.client.HTTPConnection:
        scheme, host, port = origin
        if scheme == "https":
            return http.client.HTTPSConnection(
                host, port, timeout=self._connect_timeout, context=self._ssl_context()
            )
        return http.client.HTTPConnection(host, port, timeout=self._connect_timeout)


def origin_of(url: str) -> Origin:
    """``(scheme, host, port)`` of an http(s) URL (``ValueError`` for anything else): the unit
    connections are kept for, and the one the registry's token may be sent to."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80)


def _target(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _still_open(conn: http.client.HTTPConnection) -> bool:
    """Whether a kept connection can take a request: an idle one has nothing to read, so a
    readable socket means the server closed it (or sent what no request asked for)."""
    sock = getattr(conn, "sock", None)
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _send_body(sock: socket.socket | None, body: FileBody, progress_cb: Callable[[int], None] | None) -> None:
    """Send the body: ``sendfile`` from a real file to a plain socket, else through a reused buffer
    (TLS, where the kernel cannot encrypt; a file object without a descriptor)."""
    if sock is None:  # pragma: no cover - connected by the caller
        raise ConnectionError("not connected")
    if isinstance(body.file, Path):  # one file of a pack: open while it is sent
        with body.file.open("rb") as f:
            _send_body(sock, FileBody(f, body.offset, body.size), progress_cb)
        return
    file = body.file
    offset, remaining = body.offset, body.size
    if not isinstance(sock, ssl.SSLSocket) and _has_fileno(file):
        while remaining > 0:
            sent = sock.sendfile(file, offset, min(SEND_PIECE, remaining))
            if sent <= 0:
                raise _short_file(body, body.size - remaining)
            offset += sent
            remaining -= sent
            if progress_cb is not None:
                progress_cb(sent)
        return
    pool = default_pool()
    buffer = pool.acquire()
    view = memoryview(buffer)
    try:
        file.seek(offset)
        while remaining > 0:
            piece = view[: min(len(view), remaining)]
            n = file.readinto(piece)  # type: ignore[attr-defined]
            if not n:
                raise _short_file(body, body.size - remaining)
            sock.sendall(piece[:n])
            remaining -= n
            if progress_cb is not None:
                progress_cb(n)
    finally:
        view.release()
        pool.release(buffer)


def _has_fileno(f: BinaryIO) -> bool:
    try:
        f.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both
        return False
    return True


class ShortFileError(ValueError):
    """The file held fewer bytes than the body was to send: it changed while it was sent.
    Not a transport failure (the connection is closed, the request not retried)."""


def _short_file(body: FileBody, sent: int) -> ShortFileError:
    return ShortFileError(f"the file ended after {sent} of {body.size} bytes")
