"""Helpers of the operations tests: a raw HTTP exchange on a socket, a parsed /metrics page
(``prometheus_text``, shared with the registry's tests), and a model thread held busy."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from kvreg.app.serving.host import ModelHost
from prometheus_text import samples


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def read_answer(sock: socket.socket) -> Answer:
    """One HTTP/1.1 answer with a Content-Length, read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the connection closed before an answer: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Answer(status, headers, rest[:length])


def request_head(path: str, length: int, headers: dict[str, str] | None = None) -> bytes:
    """A POST's request line and headers declaring a JSON body of ``length`` bytes (not sent)."""
    lines = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", "content-type: application/json"]
    lines += [f"content-length: {length}"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def scrape(
    root: str, headers: dict[str, str] | None = None
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    r = httpx.get(root + "/metrics", headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(r.text)


def sample(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


@contextlib.contextmanager
def model_thread_held(host: ModelHost) -> Iterator[Callable[[], None]]:
    """The model's thread busy until the block ends (or the yielded function is called): what a
    long request does, without a model in it."""
    release = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        release.wait(120)

    done = host.executor.submit(hold)
    assert started.wait(60), "the model thread never took up the hold"
    try:
        yield release.set
    finally:
        release.set()
        done.result(60)


def wait_for(what: Callable[[], bool], message: str, seconds: float = 60) -> None:
    """Poll ``what`` until true; the deadline is a guard against a hang, not a figure."""
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, message
        time.sleep(0.01)
