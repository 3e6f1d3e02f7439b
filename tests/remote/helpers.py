"""Helpers for the registry-client tests: a small scriptable HTTP file server and artifacts.

``FileServer`` is a real ``http.server`` on 127.0.0.1 that serves byte strings at
paths (with single ``Range`` requests), records every request it gets, and can
be told to misbehave: answer a status a number of times first, cut a body after
some bytes, ignore ``Range``, redirect, serve other bytes, or frame a body in chunks. It is not the
registry: it knows nothing of digests, refs or auth. It lets the tests exercise
the client's HTTP handling (retries, resume, redirects) and the pull's staging
logic without a registry. ``build_artifact`` makes a signed artifact of a given size
(``core.manifest_helpers.signed_artifact``); ``publish`` serves it as the registry would.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core.manifest_helpers import CONFIG_FP as CONFIG_FP  # re-exported for the tests here
from core.manifest_helpers import MODEL_FP as MODEL_FP
from core.manifest_helpers import TOKENIZER_FP as TOKENIZER_FP
from core.manifest_helpers import Built, signed_artifact
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.store.artifacts import store_artifact
from kvreg.store.home import Home

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    ranges: bool = False  # answer Range requests with 206
    chunked: bool = False  # send the body with Transfer-Encoding: chunked (as a re-framing proxy does)


class FileServer:
    """A threaded HTTP server on 127.0.0.1; ``url`` is its root."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.seen: list[Seen] = []
        self.fail: dict[str, list[int]] = {}  # path -> statuses to answer first, one per request
        self.cut: dict[str, list[int]] = {}  # path -> byte counts after which to drop the connection
        self.ignore_range: set[str] = set()
        # path -> (byte count, wait): the body stops after that many bytes until ``wait()`` returns
        self.pause: dict[str, tuple[int, Callable[[], None]]] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._read_chunked()
                else:
                    body = self.rfile.read(length) if length else b""
                path = self.path
                with server.lock:
                    server.seen.append(Seen(self.command, path, dict(self.headers.items()), body))
                    statuses = server.fail.get(path)
                    status = statuses.pop(0) if statuses else None
                    cuts = server.cut.get(path)
                    cut = cuts.pop(0) if cuts else None
                if status is not None:
                    self._send(
                        status, json.dumps({"error": {"code": "UNAVAILABLE", "message": "busy"}}).encode()
                    )
                    return
                bare = path.partition("?")[0]  # a route without a query answers any query
                route = (
                    server.routes.get((self.command, path))
                    or server.routes.get(("*", path))
                    or server.routes.get((self.command, bare))
                )
                if route is None:
                    self._send(
                        404, json.dumps({"error": {"code": "NOT_FOUND", "message": "no route"}}).encode()
                    )
                    return
                data, code, headers = route.body, route.status, dict(route.headers)
                rng = self.headers.get("Range")
                if route.ranges and code == 200:
                    headers["Accept-Ranges"] = "bytes"
                    if rng and path not in server.ignore_range:
                        m = _RANGE.fullmatch(rng)
                        assert m is not None, rng
                        start = int(m.group(1))
                        end = int(m.group(2)) if m.group(2) else len(data) - 1
                        if start >= len(data):
                            self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                            return
                        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                        data, code = data[start : end + 1], 206
                if route.chunked:
                    self._send_chunked(code, data, headers)
                    return
                self._send(code, data, headers, cut=cut, pause=server.pause.get(path))

            def _send_chunked(self, code: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(data), 65536):
                    piece = data[i : i + 65536]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")

            def _read_chunked(self) -> bytes:
                out = b""
                while True:
                    size = int(self.rfile.readline().strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()

            def _send(
                self,
                code: int,
                data: bytes,
                headers: dict[str, str] | None = None,
                cut: int | None = None,
                pause: tuple[int, Callable[[], None]] | None = None,
            ):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                if "Content-Type" not in (headers or {}):
                    self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                if cut is not None:
                    self.send_header("Connection", "close")
                self.end_headers()
                if cut is not None:
                    self.wfile.write(data[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if pause is not None:
                    self.wfile.write(data[: pause[0]])
                    self.wfile.flush()
                    pause[1]()
                    data = data[pause[0] :]
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # connections the tests cut on purpose

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def route(self, path: str, body: bytes | dict[str, Any] = b"", *, method: str = "GET", **kw: Any) -> None:
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            kw.setdefault("headers", {"Content-Type": "application/json"})
        self.routes[(method, path)] = Route(body, **kw)

    def requests(self, method: str | None = None, prefix: str = "") -> list[Seen]:
        with self.lock:
            return [
                s for s in self.seen if (method is None or s.method == method) and s.path.startswith(prefix)
            ]


@contextmanager
def serve(tls: ssl.SSLContext | None = None) -> Iterator[FileServer]:
    """A running ``FileServer``; with ``tls`` (a server context) it speaks HTTPS."""
    server = FileServer()
    if tls is not None:
        server.httpd.socket = tls.wrap_socket(server.httpd.socket, server_side=True)
        server.url = server.url.replace("http://", "https://", 1)
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


# --- artifacts ------------------------------------------------------------------------------


def build_artifact(
    key: SigningKey, *, token_count: int = 10, block_size: int = 4, chunk_bytes: int = 3000, seed: int = 0
) -> Built:
    """A signed manifest whose objects are real bytes (chunks are arbitrary bytes, not safetensors)."""
    tokens = [(seed * 7919 + i) % 5000 + 1 for i in range(token_count)]
    n = -(-token_count // block_size)
    return signed_artifact(
        key,
        tokens,
        [bytes([(seed + i + j) % 251 for j in range(chunk_bytes + i)]) for i in range(n)],
        text=f"text {seed}".encode(),
        logits=bytes(range(128)) * (seed + 1),
        block_size=block_size,
        evidence={"expected": "8788"},
        annotations={"title": f"t{seed}"},
    )


def store_built(home: Home, built: Built, ref: RefName) -> None:
    from kvreg.core.envelope import Envelope

    store_artifact(home, built.objects, built.manifest, Envelope.from_json_bytes(built.envelope_bytes), ref)


def publish(server: FileServer, built: Built, ref: RefName, *, key: SigningKey, tag: bool = False) -> None:
    """Serve ``built`` the way the registry's GET endpoints would (static answers)."""
    ns = f"/api/v1/namespaces/{ref.namespace}"
    server.route("/api/v1/", {"kvreg": "0.1.0", "api": 1, "storage": "folder", "limits": {}})
    server.route(f"{ns}/refs/{ref.name}", {"ref": str(ref), "digest": built.digest, "tag": tag})
    server.route(f"{ns}/envelopes/{built.digest}", built.envelope_bytes)
    server.route(
        f"{ns}/keys", {"keys": [{"keyid": key.public_key.keyid, "public_key": key.public_key.to_text()}]}
    )
    for d, data in built.objects.items():
        server.route(f"{ns}/objects/{d}", data, ranges=True)
