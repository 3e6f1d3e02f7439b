"""A registry that lies: an HTTP proxy in front of a real ``kvreg serve`` that rewrites its answers.

It forwards every request to the real registry (loopback only) and, for the answers
a test names, serves something else: another object's bytes, a ref as it was before
it moved, an old or forged checkpoint, another route answer. Everything not named
passes through unchanged, so the client talks to a genuine registry whose one part
lies, the way a compromised mirror, a CDN cache or a hostile operator would.

Lies are rules ``(method, path regex, rewrite)``; ``rewrite(status, body, match)``
returns the ``(status, body)`` to serve, or None to pass the genuine answer. Rules
can be added and removed while the proxy runs (the test first lets the client see
the truth, then turns a lie on). ``told`` counts the lies served, so a test can
check that its lie was actually told and did not pass by unused. :meth:`record`
saves a genuine answer to replay later (a ref before a move, a checkpoint).

This module is a test fixture: it makes no attempt at HTTP beyond what the kvreg
client sends (no chunked uploads, ranges are forwarded as they are) and stops with
:meth:`close` (or the ``with`` block).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from .proxy import HOP_HEADERS, LoopbackServer, QuietHandler, forward, read_body

Rewrite = Callable[[int, bytes, "re.Match[str]"], "tuple[int, bytes] | None"]
_FETCH = re.compile(r"/api/v1/namespaces/([^/]+)/objects/fetch")
_LISTING = "x-kvreg-objects"


@dataclass
class Lie:
    method: str
    path: re.Pattern[str]
    rewrite: Rewrite
    told: int = 0


class LyingRegistry:
    """A proxy to ``upstream`` (``http://127.0.0.1:PORT``) that serves the lies in :attr:`lies`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.lies: list[Lie] = []
        self.paths: list[str] = []
        # (namespace, digest) -> (the bytes served instead, the lie that counts them)
        self.replaced: dict[tuple[str, str], tuple[bytes, Lie]] = {}
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=60)
        proxy = self

        class Handler(QuietHandler):
            def _forward(self) -> None:
                r = forward(self, proxy.upstream, read_body(self), proxy._http)
                status, content = proxy._answer(self.command, self.path, r.status_code, r.content)
                headers = {
                    k: v for k, v in r.headers.items() if k.lower() not in HOP_HEADERS and k.lower() != "etag"
                }
                if self.command == "POST" and status == 200:
                    content = proxy._fetch_pack(self.path, headers, content)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(content)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward

        self._server = LoopbackServer(Handler)
        self.url = self._server.url

    def _answer(self, method: str, path: str, status: int, body: bytes) -> tuple[int, bytes]:
        plain = path.split("?", 1)[0]
        with self._lock:
            self.paths.append(f"{method} {path}")
            lies = list(self.lies)
        for lie in lies:
            match = lie.path.fullmatch(plain) if lie.method == method else None
            if match is None:
                continue
            told = lie.rewrite(status, body, match)
            if told is not None:
                with self._lock:
                    lie.told += 1
                return told
        return status, body

    # --- lies ---------------------------------------------------------------------------------

    def lie(self, method: str, path: str, rewrite: Rewrite) -> Lie:
        """Serve ``rewrite``'s answer for ``method`` on paths matching ``path`` (a regex of the
        URL path, ``/api/v1/...``, without the query)."""
        item = Lie(method, re.compile(path), rewrite)
        with self._lock:
            self.lies.append(item)
        return item

    def serve(self, method: str, path: str, body: bytes, status: int = 200) -> Lie:
        """Always answer ``body`` for ``method`` on ``path``."""
        return self.lie(method, path, lambda _s, _b, _m: (status, body))

    def replace_object(self, namespace: str, digest: str, data: bytes) -> Lie:
        """Serve ``data`` as the bytes of object ``digest``: to a full GET, and in its place in a
        fetch pack (``POST .../objects/fetch``), whose listing then states its size."""
        path = rf"/api/v1/namespaces/{re.escape(namespace)}/objects/{re.escape(digest)}"
        lie = self.lie("GET", path, lambda s, _b, _m: (200, data) if s == 200 else None)
        with self._lock:
            self.replaced[(namespace, digest)] = (data, lie)
        return lie

    def _fetch_pack(self, path: str, headers: dict[str, str], body: bytes) -> bytes:
        """A fetch pack's answer with the replaced objects' bytes (and sizes) in their places."""
        match = _FETCH.fullmatch(path.split("?", 1)[0])
        listing = next((v for k, v in headers.items() if k.lower() == _LISTING), None)
        if match is None or listing is None:
            return body
        parts, items, offset = [], [], 0
        for item in listing.split(","):
            digest, size = item.rsplit("=", 1)
            data = body[offset : offset + int(size)]
            offset += int(size)
            with self._lock:
                replaced = self.replaced.get((match.group(1), digest))
                if replaced is not None:
                    data = replaced[0]
                    replaced[1].told += 1
            parts.append(data)
            items.append(f"{digest}={len(data)}")
        for k in [k for k in headers if k.lower() == _LISTING]:
            headers[k] = ",".join(items)
        return b"".join(parts)

    def forget(self) -> None:
        """Tell the truth again."""
        with self._lock:
            self.lies.clear()

    @property
    def told(self) -> int:
        with self._lock:
            return sum(lie.told for lie in self.lies)

    # --- recording the truth --------------------------------------------------------------------

    def record(self, path: str, *, token: str | None = None, **params: Any) -> bytes:
        """The genuine answer of ``GET path`` now (``/api/v1/...``), to replay later."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        r = self._http.get(self.upstream + path, params=params or None, headers=headers)
        assert r.status_code == 200, r.text
        return r.content

    def close(self) -> None:
        self._server.close()
        self._http.close()

    def __enter__(self) -> LyingRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
