"""kvreg_registry.server_io under a real uvicorn on 127.0.0.1: the zero-copy send extension
sends exactly the file span asked for, request bodies arrive intact without the copies
(through ASGI messages and straight from the socket), the connection serves the next
request after a socket body, and a client that goes away mid-file or mid-body leaves the
server serving."""

from __future__ import annotations

import asyncio
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


SOCKET_ERRORS: list[str] = []


def read_socket_body(body: server_io.SocketBody, h: Any) -> int:
    """Read a socket body in odd-sized pieces, as a worker thread would."""
    buf = memoryview(bytearray(3 << 20))
    n = 0
    while True:
        got = body.readinto(buf[: 1 + (n % 3) * (1 << 20)])
        if got == 0:
            assert body.remaining == 0
            return n
        h.update(buf[:got])
        n += got


def make_app(path: Path) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "PUT" and scope["path"] == "/ignore":  # answers without reading the body
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"no"})
            return
        if scope["method"] == "PUT":
            h, n = hashlib.sha256(), 0
            socket_body = server_io.socket_body(scope)
            if scope["path"] == "/socket" and socket_body is not None and await socket_body.start():
                way = "socket"
                try:
                    n = await asyncio.to_thread(read_socket_body, socket_body, h)
                except ConnectionResetError:
                    SOCKET_ERRORS.append("reset")
                    raise
                finally:
                    await socket_body.finish()
            else:
                way = "asgi"
                more = True
                while more:
                    message = await receive()
                    body = message.get("body", b"")
                    assert type(body) is bytes
                    h.update(body)
                    n += len(body)
                    more = message.get("more_body", False)
            reply = f"{n} {h.hexdigest()} {way}".encode()
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
        make_app(path),
        host="127.0.0.1",
        port=port,
        http=server_io.protocol_class(),
        loop="asyncio",
        log_level="warning",
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
    assert reply == f"{size} {hashlib.sha256(data).hexdigest()} asgi"


def put(conn: http.client.HTTPConnection, target: str, data: bytes, **headers: str) -> str:
    conn.request("PUT", target, body=data, headers={"Content-Length": str(len(data)), **headers})
    return conn.getresponse().read().decode()


@pytest.mark.parametrize("size", [1, 65536, 300_000, (1 << 20) - 1, 1 << 20, 9 * 1024 * 1024 + 17])
def test_socket_bodies_arrive_intact_and_the_connection_serves_on(server: str, size: int) -> None:
    data = os.urandom(size)
    digest = hashlib.sha256(data).hexdigest()
    # A small body may come whole with the headers (then receive() has it all); from 1 MiB
    # on, reading stops at the headers, so the body is always the socket's.
    way = "socket" if size >= 1 << 20 else ("socket", "asgi")
    conn = http.client.HTTPConnection(server, timeout=30)
    try:
        n, h, used = put(conn, "/socket", data).split()
        assert (int(n), h) == (size, digest) and used in way
        # the same connection: another socket body, a body through ASGI messages, a GET
        n, h, used = put(conn, "/socket", data[::-1]).split()
        assert (int(n), h) == (size, hashlib.sha256(data[::-1]).hexdigest()) and used in way
        assert put(conn, "/", data) == f"{size} {digest} asgi"
        conn.request("GET", "/?offset=0&count=10")
        assert conn.getresponse().read() == DATA[:10]
    finally:
        conn.close()


def test_a_socket_body_with_expect_100_continue(server: str) -> None:
    data = os.urandom(3 << 20)
    host, port = server.split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(
            b"PUT /socket HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
            % len(data)
        )
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(data)
        reply = b""
        while not reply.endswith(b"socket"):
            chunk = s.recv(4096)
            assert chunk, reply
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200") and hashlib.sha256(data).hexdigest().encode() in reply


def test_a_request_pipelined_behind_a_socket_body_is_answered(server: str) -> None:
    data = os.urandom((2 << 20) + 5)
    host, port = server.split(":")
    request = b"PUT /socket HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(data)
    follow = b"GET /?offset=0&count=7 HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(request + data + follow)
        reply = b""
        while not reply.endswith(DATA[:7]):
            chunk = s.recv(65536)
            assert chunk, reply
            reply += chunk
    assert reply.count(b"HTTP/1.1 200") == 2
    assert hashlib.sha256(data).hexdigest().encode() + b" socket" in reply


def test_a_client_gone_mid_socket_body_leaves_the_server_serving(server: str) -> None:
    host, port = server.split(":")
    SOCKET_ERRORS.clear()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"PUT /socket HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (8 << 20))
        s.sendall(os.urandom(3 << 20))
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while not SOCKET_ERRORS:
        assert time.monotonic() < deadline, "the reader did not notice the client leaving"
        time.sleep(0.05)
    assert SOCKET_ERRORS == ["reset"]
    conn = http.client.HTTPConnection(server, timeout=30)
    try:
        assert put(conn, "/socket", b"after").startswith(f"5 {hashlib.sha256(b'after').hexdigest()} ")
    finally:
        conn.close()


def test_a_large_body_not_taken_from_the_socket_still_arrives(server: str) -> None:
    """Reading pauses at the headers of a large body; an app that uses receive() resumes it."""
    data = os.urandom(6 << 20)
    conn = http.client.HTTPConnection(server, timeout=30)
    try:
        assert put(conn, "/", data) == f"{len(data)} {hashlib.sha256(data).hexdigest()} asgi"
    finally:
        conn.close()


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


def test_a_large_body_left_unread_does_not_break_the_connection(server: str) -> None:
    conn = http.client.HTTPConnection(server, timeout=30)
    try:
        assert put(conn, "/ignore", os.urandom(3 << 20)) == "no"
        conn.request("GET", "/?offset=3&count=4")
        assert conn.getresponse().read() == DATA[3:7]
    finally:
        conn.close()
