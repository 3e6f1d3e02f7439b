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

uvicorn's flow control pauses reading while more than ``HIGH_WATER_LIMIT`` bytes of
body wait for the app (64 KiB by default, which delivers a multi-MiB upload in
64 KiB pieces with a pause after each); :func:`install` raises it to 4 MiB where the
protocol modules read it. All of this relies on uvicorn internals (a module
constant, the ``RequestResponseCycle`` class the protocol builds, its ``body``
attribute and its ``send``): :func:`install` checks that they are there and leaves
uvicorn as it is, with a warning, where they are not. The uvicorn range pinned in
pyproject.toml is the one this was tested with.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["BODY_HIGH_WATER", "ZEROCOPY_SEND", "install"]

BODY_HIGH_WATER = 4 << 20
ZEROCOPY_SEND = "http.response.zerocopysend"
_installed = False


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
    setattr(httptools_protocol, "RequestResponseCycle", _cycle_class(base))  # noqa: B010 (a module global)
    _installed = True
