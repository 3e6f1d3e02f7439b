"""A fault-injecting HTTP proxy in front of a real registry, for interruption tests.

It forwards every request to the registry unchanged, except that after ``allow``
object transfers (GETs or PUTs of ``/objects/sha256:...``) it stalls the next one:
a GET gets its headers and the first half of its body, then nothing; a PUT is
never forwarded. The test then kills the client with SIGKILL, as a crash or a
pulled cable would, and checks that a second run resumes. Loopback only; the
server thread stops with :meth:`close`.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

_OBJECT = re.compile(r"/api/v1/namespaces/[^/]+/objects/sha256:[0-9a-f]{64}$")
#: An object pack (several objects in one POST).
PACK = re.compile(r"/api/v1/namespaces/[^/]+/uploads/[^/]+/objects$")
#: A fetch pack (several objects in one answer to a POST).
FETCH = re.compile(r"/api/v1/namespaces/[^/]+/objects/fetch$")
#: Where :class:`StallingProxy` serves the storage a registry redirects downloads to.
STORAGE_PREFIX = "/_storage"
#: Hop-by-hop and length headers a proxy must not copy from one connection to the other.
HOP_HEADERS = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "accept-encoding"}


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request body the handler is answering (the kvreg client never sends chunked bodies)."""
    length = int(handler.headers.get("content-length") or 0)
    return handler.rfile.read(length) if length else b""


def forward(
    handler: BaseHTTPRequestHandler, upstream: str, body: bytes, client: httpx.Client
) -> httpx.Response:
    """Send the handler's request, end-to-end headers and ``body`` to ``upstream``; its answer."""
    headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS}
    return client.request(handler.command, upstream + handler.path, headers=headers, content=body)


def relay(handler: BaseHTTPRequestHandler, response: httpx.Response) -> None:
    """Answer the handler's request with ``response`` (read in full), end-to-end headers only."""
    handler.send_response(response.status_code)
    for k, v in response.headers.items():
        if k.lower() not in HOP_HEADERS:
            handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(response.content)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(response.content)


class QuietHandler(BaseHTTPRequestHandler):
    """An HTTP/1.1 request handler that logs nothing (the proxies' base)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) running ``handler`` until :meth:`close`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StallingProxy:
    def __init__(
        self,
        upstream: str,
        *,
        method: str,
        allow: int,
        fail_first: int = 0,
        pattern: re.Pattern[str] = _OBJECT,
        hide_packs: bool = False,
        hide_fetch_packs: bool = False,
        storage: str | None = None,
    ) -> None:
        """Stall the transfer after ``allow`` ones; before that, answer the first ``fail_first``
        transfers with ``503`` (a transient failure the client must retry). ``pattern``: the
        paths that are transfers (default: kvreg objects; an OCI test passes blob paths;
        :data:`PACK` object packs). ``hide_packs``: the registry looks like one without object
        packs (``max_pack_objects`` is taken out of its limits), so a push sends one PUT each;
        ``hide_fetch_packs`` likewise without fetch packs (``max_fetch_objects``), so a pull sends
        one GET each. A stalled download (a GET, a fetch pack) gets half its answer; a stalled
        upload is never forwarded. ``storage``: the origin (``http://host:port``) a registry
        redirects blob downloads to; those redirects are rewritten to go through this proxy
        too (under :data:`STORAGE_PREFIX`), so that a transfer from the storage can be stalled."""
        self.pattern = pattern
        self.hide_packs = hide_packs
        self.hide_fetch_packs = hide_fetch_packs
        self.upstream = upstream
        self.storage = storage
        self.method = method
        self.allow = allow
        self.fail_first = fail_first
        self.failed = 0
        self.passed = 0
        self.stalled = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=60)
        proxy = self

        class Handler(QuietHandler):
            def _forward(self) -> None:
                body = read_body(self)
                is_transfer = self.command == proxy.method and proxy.pattern.match(self.path) is not None
                stall = False
                if is_transfer:
                    with proxy._lock:
                        fail = proxy.failed < proxy.fail_first
                        if fail:
                            proxy.failed += 1
                    if fail:
                        payload = (
                            b'{"error": {"code": "UNAVAILABLE", "message": "injected by the test proxy"}}'
                        )
                        self.send_response(503)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("X-Kvreg-Error-Code", "UNAVAILABLE")
                        self.send_header("Retry-After", "0")
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        return
                    with proxy._lock:
                        if proxy.passed >= proxy.allow:
                            stall = True
                        else:
                            proxy.passed += 1
                if stall and self.command in ("PUT", "POST") and proxy.pattern is not FETCH:
                    proxy.stalled.set()
                    proxy.release.wait(120)
                    return
                if proxy.storage is not None and self.path.startswith(STORAGE_PREFIX + "/"):
                    self.path = self.path[len(STORAGE_PREFIX) :]
                    r = forward(self, proxy.storage, body, proxy._http)
                else:
                    r = forward(self, proxy.upstream, body, proxy._http)
                content = r.content
                location = r.headers.get("location", "")
                if proxy.storage is not None and location.startswith(proxy.storage + "/"):
                    r.headers["location"] = proxy.url + STORAGE_PREFIX + location[len(proxy.storage) :]
                hidden = [
                    name
                    for name, hide in (
                        ("max_pack_objects", proxy.hide_packs),
                        ("max_fetch_objects", proxy.hide_fetch_packs),
                    )
                    if hide
                ]
                if hidden and self.command == "GET" and self.path.rstrip("/") == "/api/v1":
                    info = json.loads(content)
                    for name in hidden:
                        info["limits"].pop(name, None)
                    content = json.dumps(info).encode()
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in HOP_HEADERS:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if stall:
                    self.wfile.write(content[: len(content) // 2])
                    self.wfile.flush()
                    proxy.stalled.set()
                    proxy.release.wait(120)
                    return
                if self.command != "HEAD":
                    self.wfile.write(content)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = LoopbackServer(Handler)
        self.url = self._server.url

    def close(self) -> None:
        self.release.set()
        self._server.close()
        self._http.close()
