"""How ``kvreg serve`` moves object bytes under uvicorn: zero-copy sends, bodies without copies.

uvicorn's httptools protocol handles a request body and a response body as Python
``bytes``: every piece of an upload is appended to a ``bytearray`` and copied out of
it again for the app, and a download is read from the file into ``bytes`` and
written to the socket. bench/push_pull.py measured the registry at about 1 CPU
second per GiB served and 2.5 per GiB received that way (docs/benchmarks.md).
:func:`install` changes two things, for the httptools protocol only (h11, the
fallback when httptools is missing, keeps its stock behaviour):

- **the ASGI zero-copy send extension** (``http.response.zerocopysend``, from the
  ASGI spec's extensions): a response may send ``{"type":
  "http.response.zerocopysend", "file": FILE, "offset": N, "count": N}`` after its
  start, and the bytes go from the file to the socket with ``loop.sendfile``
  (``os.sendfile`` on a plain connection; asyncio reads and writes the file
  itself over TLS or on a loop without it). ``kvreg_registry.api.routes_objects``
  uses it for objects in a local folder when the scope offers it;
- **request bodies** are kept as the pieces httptools delivered and handed to the
  app as they are (one piece) or joined once, instead of being appended to a
  ``bytearray`` and copied out of it.

- **the socket body extension** (``kvreg.http.request.body.socket``, this module's
  own): for a request with a ``Content-Length`` on a plain TCP connection, the app
  may take the rest of the body straight from the socket (:class:`SocketBody`):
  the transport stops reading, one worker thread reads into the app's own
  large buffers until the body is complete, and the connection goes back to
  uvicorn with a fresh parser for the next request. Python then handles the body a
  MiB at a time instead of a 64 to 256 KiB piece at a time through the event loop,
  the parser and the queue between the protocol and the app
  (``kvreg_registry.api.routes_objects`` uses it for object PUTs).

uvicorn's flow control pauses reading while more than ``HIGH_WATER_LIMIT`` bytes of
body wait for the app (64 KiB by default, which delivers a multi-MiB upload in
64 KiB pieces with a pause after each); :func:`install` raises it to 4 MiB where the
protocol modules read it. All of this relies on uvicorn internals (a module
constant, the ``RequestResponseCycle`` class the protocol builds, its ``body``,
``more_body`` and ``keep_alive`` attributes and its ``send``; the protocol's
``parser``, ``flow`` and callbacks): :func:`install` checks that they are there and leaves
uvicorn as it is, with a warning, where they are not. The uvicorn range pinned in
pyproject.toml is the one this was tested with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
import threading
from collections import deque
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "BODY_HIGH_WATER",
    "BODY_IDLE_TIMEOUT",
    "BODY_SOCKET",
    "ZEROCOPY_SEND",
    "SocketBody",
    "install",
    "protocol_class",
    "socket_body",
]

BODY_HIGH_WATER = 4 << 20
ZEROCOPY_SEND = "http.response.zerocopysend"
BODY_SOCKET = "kvreg.http.request.body.socket"
#: Seconds a socket body may wait for the client's next byte before the request fails.
BODY_IDLE_TIMEOUT = 60.0
#: At most this many bytes are waited for before a read returns (``SO_RCVLOWAT``).
_READ_AT_LEAST = 1 << 20
_POLL_MS = 500
_installed = False
_protocol: Any = None


class _BodyPieces:
    """Request body received and not yet given to the app, as the pieces that arrived.

    uvicorn's protocol does ``cycle.body += piece``, ``len(cycle.body)`` and
    ``bytes(cycle.body)``; this supports exactly those without copying a piece.
    """

    __slots__ = ("_pieces", "_size")

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0

    def __iadd__(self, piece: bytes) -> _BodyPieces:
        if piece:
            self._pieces.append(piece)
            self._size += len(piece)
        return self

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        if len(self._pieces) == 1 and type(self._pieces[0]) is bytes:
            return self._pieces[0]
        return b"".join(self._pieces)

    def take(self) -> list[bytes]:
        """The pieces, leaving none."""
        pieces, self._pieces, self._size = self._pieces, [], 0
        return pieces


class SocketBody:
    """The rest of one request's body, read from the connection's socket by a worker thread.

    Use: ``await start()`` on the event loop (``False``: not possible now, read the
    body with ``receive`` as usual), then :meth:`readinto` from one worker thread
    until it returns 0, then ``await finish()`` on the loop, whatever happened. The
    body ends at its ``Content-Length``: nothing past it is read. A body not read to
    its end (an error, a client that went away) closes the connection after the
    response, since its rest is still in the socket.

    :meth:`readinto` raises ``ConnectionResetError`` when the client closes the
    connection early and ``TimeoutError`` after :data:`BODY_IDLE_TIMEOUT` seconds
    without a byte; either way :meth:`finish` drops the connection (the request counts
    as disconnected: nothing is answered).
    """

    def __init__(self, protocol: Any, cycle: Any, length: int) -> None:
        self.length = length
        self._protocol = protocol
        self._cycle = cycle
        self._delivered = 0  # body bytes the parser handed to the cycle
        self._pieces: deque[memoryview] = deque()
        self._remaining = 0  # body bytes still in the socket
        self._received = 0  # body bytes readinto returned
        self._sock: socket.socket | None = None
        self._lowat = 1
        self._client_gone = False
        self._poller = select.poll()
        self._state = "new"  # new -> reading -> done | broken
        self._lock = threading.Lock()

    def delivered(self, n: int) -> None:
        """The parser handed ``n`` more body bytes to the cycle (the protocol calls this)."""
        self._delivered += n

    async def start(self) -> bool:
        """Stop the transport reading and take the body's bytes parsed so far; ``False`` if the
        body cannot be taken now (complete already, a later request parsed, a closed connection)."""
        protocol, cycle = self._protocol, self._cycle
        transport = protocol.transport
        if (
            self._state != "new"
            or protocol.cycle is not cycle
            or not cycle.more_body
            or cycle.disconnected
            or cycle.response_started
            or transport is None
            or transport.is_closing()
        ):
            return False
        raw = transport.get_extra_info("socket")
        if raw is None:
            return False
        sock = raw.dup()  # the thread's own handle (non-blocking): the transport may close its own
        self._poller.register(sock, select.POLLIN | select.POLLRDHUP)
        protocol.flow.pause_reading()
        if cycle.waiting_for_100_continue:  # the app would otherwise ask for it with its first receive
            transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        self._pieces = deque(memoryview(piece) for piece in cycle.body.take())
        self._remaining = self.length - self._delivered
        self._sock = sock
        self._state = "reading"
        return True

    @property
    def remaining(self) -> int:
        """Body bytes not yet returned by :meth:`readinto`."""
        return self._remaining + sum(len(piece) for piece in self._pieces)

    @property
    def received(self) -> int:
        """Body bytes :meth:`readinto` returned (they never went through ``receive``: the
        registry's metrics count them here)."""
        return self._received

    def readinto(self, view: memoryview) -> int:
        """Put the next bytes of the body at the start of ``view``; 0 at its end (blocking)."""
        with self._lock:
            if self._state != "reading" or self._sock is None:
                raise RuntimeError(f"the socket body is {self._state}, not being read")
            if self._pieces:
                piece = self._pieces[0]
                n = min(len(view), len(piece))
                view[:n] = piece[:n]
                if n == len(piece):
                    self._pieces.popleft()
                else:
                    self._pieces[0] = piece[n:]
                self._received += n
                return n
            if self._remaining == 0 or not view:
                return 0
            n = self._recv(view[: self._remaining])
            self._received += n
            return n

    def _recv(self, view: memoryview) -> int:
        sock = self._sock
        assert sock is not None
        # Wake up for a MiB (or the whole rest), not for every 64 KiB that arrives.
        lowat = min(len(view), _READ_AT_LEAST)
        if lowat != self._lowat:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
            self._lowat = lowat
        waited = 0.0
        while True:
            # poll first: it waits for ``lowat`` bytes, where recv would return what is there
            if self._poller.poll(_POLL_MS):
                try:
                    n = sock.recv_into(view)
                except BlockingIOError:
                    continue
                if n == 0:
                    self._client_gone = True
                    raise ConnectionResetError(
                        f"the client closed the connection with {self._remaining} bytes of the body unsent"
                    )
                self._remaining -= n
                return n
            if self._cycle.disconnected:
                self._client_gone = True
                raise ConnectionResetError("the client went away during the request body")
            waited += _POLL_MS / 1000
            if waited >= BODY_IDLE_TIMEOUT:
                self._client_gone = True  # as good as gone: the connection is dropped
                raise TimeoutError(f"no byte of the request body for {BODY_IDLE_TIMEOUT:.0f} seconds")

    async def finish(self) -> None:
        """Give the connection back to uvicorn: to parse the next request if the body was read to
        its end, else to close it after the response. Idempotent."""
        with self._lock:
            if self._state != "reading":
                return
            sock, self._sock = self._sock, None
            complete = self._remaining == 0 and not self._pieces
            self._state = "done" if complete else "broken"
        protocol, cycle = self._protocol, self._cycle
        if sock is not None:
            try:
                if self._lowat != 1:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            except OSError:
                pass  # the connection is gone already
            finally:
                sock.close()
        if self._client_gone:  # nobody to answer: drop the connection, as uvicorn does when it sees one go
            cycle.disconnected = True
            protocol.transport.close()
            return
        if not complete:
            cycle.keep_alive = False  # the rest of the body is still in the socket: close after the answer
            return
        # The old parser still expects the body read here: the next request needs a new one.
        protocol.parser = _new_parser(protocol)
        cycle.more_body = False
        cycle.message_event.set()
        if not cycle.disconnected:
            protocol.flow.resume_reading()


def _new_parser(protocol: Any) -> Any:
    import httptools

    parser = httptools.HttpRequestParser(protocol)
    with contextlib.suppress(AttributeError):  # older httptools lack it
        parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn does
    return parser


def socket_body(scope: Any) -> SocketBody | None:
    """The request's :class:`SocketBody` where the server offers one, else ``None``."""
    extension = scope.get("extensions", {}).get(BODY_SOCKET)
    return None if extension is None else extension.get("body")


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The body's length if exactly one valid ``Content-Length`` and no ``Transfer-Encoding``."""
    lengths = [value for name, value in headers if name == b"content-length"]
    if len(lengths) != 1 or any(name == b"transfer-encoding" for name, _ in headers):
        return None
    value = lengths[0].strip()
    return int(value) if value.isdigit() else None


def _cycle_class(base: Any) -> Any:
    """A subclass of uvicorn's ``RequestResponseCycle`` with the two changes above."""

    class Cycle(base):  # type: ignore[misc]
        # uvicorn's state, read here (set by the base class)
        disconnected: bool
        response_started: bool
        response_complete: bool
        chunked_encoding: bool | None
        expected_content_length: int

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.socket_body: SocketBody | None = None
            self.scope.setdefault("extensions", {})[ZEROCOPY_SEND] = {}

        @property
        def body(self) -> _BodyPieces:
            return self._kvreg_body

        @body.setter
        def body(self, value: Any) -> None:
            # ``body += piece`` assigns the same pieces back; uvicorn resets it with ``bytearray()``.
            self._kvreg_body = value if isinstance(value, _BodyPieces) else _BodyPieces()

        async def send(self, message: Any) -> None:
            if message.get("type") == ZEROCOPY_SEND:
                await self._send_file(message)
                return
            await super().send(message)

        async def _send_file(self, message: Any) -> None:
            if not self.response_started or self.response_complete:
                raise RuntimeError(f"'{ZEROCOPY_SEND}' is only valid after the response start")
            more_body = bool(message.get("more_body", False))
            file = message["file"]
            offset = message.get("offset")
            count = message.get("count")
            if self.scope["method"] == "HEAD":  # no body to send
                await super().send({"type": "http.response.body", "body": b"", "more_body": more_body})
                return
            if self.chunked_encoding:  # chunked framing around sendfile is not worth it: read and send
                data = await asyncio.to_thread(_read_span, file, offset, count)
                await super().send({"type": "http.response.body", "body": data, "more_body": more_body})
                return
            if self.flow.write_paused and not self.disconnected:
                await self.flow.drain()
            if self.disconnected:
                return
            start = file.tell() if offset is None else offset
            if count == 0:  # nothing to send (asyncio refuses a count of 0)
                await super().send({"type": "http.response.body", "body": b"", "more_body": more_body})
                return
            try:
                sent = await asyncio.get_running_loop().sendfile(self.transport, file, start, count)
            except (ConnectionError, OSError):
                if self.transport.is_closing():  # the client went away: as for any other send
                    self.disconnected = True
                    return
                raise
            if sent > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= sent
            await super().send({"type": "http.response.body", "body": b"", "more_body": more_body})

    Cycle.__name__ = Cycle.__qualname__ = "ZeroCopyRequestResponseCycle"
    return Cycle


def _protocol_class(base: Any) -> Any:
    """A subclass of uvicorn's ``HttpToolsProtocol`` that offers :class:`SocketBody`."""

    class Protocol(base):  # type: ignore[misc]
        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is None or cycle.scope is not self.scope:  # an upgrade: no cycle for this request
                return
            length = _content_length(self.headers)
            if (
                length
                and self.transport.get_extra_info("sslcontext") is None
                and self.transport.get_extra_info("socket") is not None
            ):
                cycle.socket_body = SocketBody(self, cycle, length)
                self.scope.setdefault("extensions", {})[BODY_SOCKET] = {"body": cycle.socket_body}
                if length >= _READ_AT_LEAST and self.cycle is cycle:
                    # Leave a large body in the socket until the app asks: a SocketBody then takes
                    # it whole, and an app that calls receive() resumes reading as uvicorn does.
                    self.flow.pause_reading()

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if cycle is not None and getattr(cycle, "socket_body", None) is not None:
                cycle.socket_body.delivered(len(body))
            super().on_body(body)

    Protocol.__name__ = Protocol.__qualname__ = "KvregHttpToolsProtocol"
    return Protocol


#: The import path of this module's protocol class (built by :func:`install`, see ``__getattr__``).
PROTOCOL_PATH = f"{__name__}:KvregHttpToolsProtocol"


def protocol_class() -> str:
    """What to give ``uvicorn.Config(http=...)``: the import path of this module's httptools
    protocol (worker processes import it too), or ``"auto"`` where :func:`install` could not
    tune uvicorn."""
    install()
    return PROTOCOL_PATH if _protocol is not None else "auto"


def __getattr__(name: str) -> Any:
    # The protocol class subclasses uvicorn's, so it exists once install() has run; uvicorn
    # imports it by PROTOCOL_PATH, in worker processes too.
    if name == "KvregHttpToolsProtocol":
        install()
        if _protocol is not None:
            return _protocol
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _read_span(file: Any, offset: int | None, count: int | None) -> bytes:
    if offset is not None:
        file.seek(offset)
    return bytes(file.read() if count is None else file.read(count))


def install(high_water: int = BODY_HIGH_WATER) -> None:
    """Tune uvicorn's protocols in this process (idempotent); see the module docstring."""
    global _installed
    from uvicorn.protocols.http import flow_control, h11_impl

    modules: list[Any] = [flow_control, h11_impl]
    httptools_protocol: Any = None
    try:
        from uvicorn.protocols.http import httptools_impl as httptools_protocol
    except ImportError:  # httptools is a dependency; without it uvicorn falls back to h11
        log.warning("httptools is not installed: the registry parses HTTP with h11 (slower uploads)")
    else:
        modules.append(httptools_protocol)
    for module in modules:
        if not hasattr(module, "HIGH_WATER_LIMIT"):
            log.warning("uvicorn's %s has no HIGH_WATER_LIMIT; uploads keep its default flow control", module)
            continue
        module.HIGH_WATER_LIMIT = high_water
    if _installed or httptools_protocol is None:
        return
    base = getattr(httptools_protocol, "RequestResponseCycle", None)
    if base is None or not all(hasattr(base, name) for name in ("send", "receive", "run_asgi")):
        log.warning("uvicorn's httptools protocol changed: object bytes go through it unchanged")
        return
    protocol = getattr(httptools_protocol, "HttpToolsProtocol", None)
    if protocol is None or not all(
        hasattr(protocol, name) for name in ("on_headers_complete", "on_body", "data_received")
    ):
        log.warning("uvicorn's httptools protocol changed: object bytes go through it unchanged")
        return
    setattr(httptools_protocol, "RequestResponseCycle", _cycle_class(base))  # noqa: B010 (a module global)
    global _protocol
    _protocol = _protocol_class(protocol)
    _installed = True
