"""An ASGI middleware that measures every HTTP request for ``kvreg_registry.api.metrics``.

Per request: its method, the template of the route that answered it (never the raw path: a
path that matches no route is ``unmatched``), its status, how long it took, the body bytes it
received (through ASGI messages, and straight from the socket where ``server_io`` let the route
read it so) and sent (``http.response.body`` messages and zero-copy sends); and, from the route
and the answer's ``X-Kvreg-Error-Code``, what it stands for:

- a 2xx to ``PUT .../envelopes/{digest}``: a push;
- a 2xx to ``GET .../envelopes/{digest}``: a pull (``api="kvreg"``), to a ``GET`` of an OCI
  manifest under ``/v2/``: a pull (``api="oci"``);
- ``DIGEST_MISMATCH`` or ``BODY_TOO_LARGE`` from an object PUT or an object pack: a refused upload;
- ``REF_CONFLICT`` (a ref that was not at the digest the caller expected): a ref conflict.

It sits outside ``BodyLimitMiddleware``, so the uploads that middleware refuses before any route
runs are counted too (their route is found by :class:`RouteTemplates`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from starlette.routing import BaseRoute, Mount, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kvreg.core.errors import ERROR_CODE_HEADER
from kvreg_registry.api.metrics import RegistryMetrics
from kvreg_registry.server_io import ZEROCOPY_SEND, socket_body

API = "/api/v1"
UNMATCHED = "unmatched"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_ERROR_CODE = ERROR_CODE_HEADER.lower().encode("latin-1")

PUSH = ("PUT", f"{API}/namespaces/{{ns}}/envelopes/{{digest}}")
PULLS = {
    ("GET", f"{API}/namespaces/{{ns}}/envelopes/{{digest}}"): "kvreg",
    ("GET", "/v2/{ns}/manifests/{reference}"): "oci",
    ("GET", "/v2/{ns}/{name}/manifests/{reference}"): "oci",
}
UPLOADS = frozenset(
    {
        ("PUT", f"{API}/namespaces/{{ns}}/objects/{{digest}}"),
        ("POST", f"{API}/namespaces/{{ns}}/uploads/{{upload_id}}/objects"),
    }
)
REFUSALS = {"DIGEST_MISMATCH": "digest_mismatch", "BODY_TOO_LARGE": "too_large"}


class RouteTemplates:
    """The full path template of each route of an app.

    FastAPI keeps an included router's prefix apart from its routes (the route in the scope
    says ``/namespaces/{ns}/refs``, not ``/api/v1/namespaces/{ns}/refs``), so the app tells
    this table which prefix each router was included under. A request that no route answered
    (one ``BodyLimitMiddleware`` refused first, a file under a mount, a path nothing serves) is
    matched against the templates here: the first whose path matches, preferring one that
    takes the method; ``unmatched`` when none does.
    """

    def __init__(self) -> None:
        self._by_route: dict[int, str] = {}
        self._patterns: list[tuple[re.Pattern[str], frozenset[str] | None, str]] = []

    def include(self, routes: Iterable[BaseRoute], prefix: str = "") -> None:
        for route in routes:
            path = getattr(route, "path", None)
            if not isinstance(path, str):
                continue  # an included router's own entry: its routes are given with their prefix
            template = prefix + path
            if isinstance(route, Mount):
                template = f"{template}/{{path:path}}"
            self._by_route[id(route)] = template
            methods = getattr(route, "methods", None)
            regex = compile_path(template)[0]
            self._patterns.append((regex, frozenset(methods) if methods else None, template))

    def of(self, scope: Scope) -> str:
        """The template of the route that answered (or would have answered) the request."""
        route = scope.get("route")
        if route is not None:
            known = self._by_route.get(id(route))
            if known is not None:
                return known
            path = getattr(route, "path", None)  # an older FastAPI copies routes with their prefix
            if isinstance(path, str) and path:
                return path
        fallback = UNMATCHED
        for regex, methods, template in self._patterns:
            if regex.match(scope["path"]):
                if methods is None or scope["method"] in methods:
                    return template
                if fallback == UNMATCHED:
                    fallback = template
        return fallback


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: RegistryMetrics, routes: RouteTemplates) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        received = served = 0
        answer: dict[str, Any] = {"status": 500, "code": None}

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        async def counted_send(message: Message) -> None:
            nonlocal served
            kind = message["type"]
            if kind == "http.response.start":
                answer["status"] = int(message["status"])
                for name, value in message.get("headers", ()):
                    if name.lower() == _ERROR_CODE:
                        answer["code"] = bytes(value).decode("latin-1")
            elif kind == "http.response.body":
                served += len(message.get("body", b""))
            elif kind == ZEROCOPY_SEND and scope["method"] != "HEAD":
                served += int(message.get("count") or 0)
            await send(message)

        self.metrics.in_progress.inc()
        try:
            await self.app(scope, counted_receive, counted_send)
        finally:
            self.metrics.in_progress.dec()
            body = socket_body(scope)
            if body is not None:
                received += body.received
            self._record(scope, answer, received, served, time.perf_counter() - started)

    def _record(
        self, scope: Scope, answer: dict[str, Any], received: int, served: int, seconds: float
    ) -> None:
        m = self.metrics
        method = scope["method"] if scope["method"] in _METHODS else "OTHER"
        route = self.routes.of(scope)
        status: int = answer["status"]
        code: str | None = answer["code"]
        m.requests.labels(method=method, route=route, status=str(status)).inc()
        m.duration.labels(method=method, route=route).observe(seconds)
        if received:
            m.received.labels(route=route).inc(received)
        if served:
            m.served.labels(route=route).inc(served)
        key = (method, route)
        if 200 <= status < 300:
            if key == PUSH:
                m.pushes.inc()
            elif key in PULLS:
                m.pulls.labels(api=PULLS[key]).inc()
        elif code is not None:
            if code in REFUSALS and key in UPLOADS:
                m.refused.labels(reason=REFUSALS[code]).inc()
            elif code == "REF_CONFLICT":
                m.ref_conflicts.inc()
