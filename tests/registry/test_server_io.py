"""kvreg_registry.server_io under a real uvicorn on 127.0.0.1: the zero-copy send extension
sends exactly the file span asked for, request bodies arrive intact without the copies,
and a client that goes away mid-file leaves the server serving."""

from __future__ import annotations

import hashlib
import http.client
import importlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.registry_server import free_port
from kvreg_registry import server_io
from kvreg_registry.server_io import BODY_HIGH_WATER, ZEROCOPY_SEND

DATA = os.urandom(5 * 1024 * 1024 + 321)


def make_app(path: Path) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "PUT":
            h, n, pieces = hashlib.sha256(), 0, 0
            more = True
            while more:
                message = await receive()
                body = message.get("body", b"")
                assert type(body) is bytes
                h.update(body)
                n += len(body)
                pieces += 1
                more = message.get("more_body", False)
            reply = f"{n} {h.hexdigest()}".encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"%d" % len(reply))],
                }
            )
            await send({"type": "http.response.body", "body": reply})
            return
        query = dict(p.split("=") for p in scope["query_string"].decode().split("&") if p)
        offset, count = int(query.get("offset", 0)), int(query.get("count", len(DATA)))
        extension = ZEROCOPY_SEND in scope.get("extensions", {})
        headers = [(b"content-length", b"%d" % count), (b"x-zerocopy", b"yes" if extension else b"no")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        with path.open("rb") as f:
            await send({"type": ZEROCOPY_SEND, "file": f, "offset": offset, "count": count})

    return app


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import uvicorn

    server_io.install()
    path = tmp_path_factory.mktemp("files") / "data.bin"
    path.write_bytes(DATA)
    port = free_port()
    config = uvicorn.Config(
        make_app(path), host="127.0.0.1", port=port, http="httptools", loop="asyncio", log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


def get(server: str, target: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(server, timeout=20)
    try:
        conn.request(method, target)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_install_tunes_uvicorn_once() -> None:
    h11_impl = importlib.import_module("uvicorn.protocols.http.h11_impl")
    httptools_impl = importlib.import_module("uvicorn.protocols.http.httptools_impl")
    server_io.install()
    cycle = httptools_impl.RequestResponseCycle
    server_io.install()
    assert httptools_impl.RequestResponseCycle is cycle, "installed twice"
    assert cycle.__name__ == "ZeroCopyRequestResponseCycle"
    assert h11_impl.HIGH_WATER_LIMIT == httptools_impl.HIGH_WATER_LIMIT == BODY_HIGH_WATER


@pytest.mark.parametrize(
    ("offset", "count"), [(0, len(DATA)), (0, 1), (12345, 1 << 20), (len(DATA) - 7, 7), (3, 0)]
)
def test_zero_copy_send_sends_exactly_the_span(server: str, offset: int, count: int) -> None:
    status, headers, body = get(server, f"/?offset={offset}&count={count}")
    assert status == 200 and headers["x-zerocopy"] == "yes"
    assert body == DATA[offset : offset + count]


def test_head_sends_no_body(server: str) -> None:
    status, headers, body = get(server, "/", method="HEAD")
    assert status == 200 and body == b"" and headers["content-length"] == str(len(DATA))


@pytest.mark.parametrize("size", [0, 1, 65536, 9 * 1024 * 1024 + 17])
def test_request_bodies_arrive_intact(server: str, size: int) -> None:
    data = os.urandom(size)
    conn = http.client.HTTPConnection(server, timeout=30)
    try:
        conn.request("PUT", "/", body=data, headers={"Content-Length": str(size)})
        reply = conn.getresponse().read().decode()
    finally:
        conn.close()
    assert reply == f"{size} {hashlib.sha256(data).hexdigest()}"


def test_a_client_gone_mid_file_leaves_the_server_serving(server: str) -> None:
    host, port = server.split(":")
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(1024).startswith(b"HTTP/1.1 200")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        # closed with a reset while the server still had megabytes to send
    status, _, body = get(server, "/?offset=0&count=100")
    assert status == 200 and body == DATA[:100]


def test_an_empty_span_is_answered_cleanly(server: str, caplog: pytest.LogCaptureFixture) -> None:
    status, _, body = get(server, "/?offset=5&count=0")
    assert status == 200 and body == b""
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
