"""The front door: what is decided from a request's headers, before its body is read.

:class:`Gate` is a pure ASGI middleware in front of the FastAPI application. For each HTTP
request, in order:

1. the API key (when the server has one): every route but ``/health`` wants
   ``Authorization: Bearer KEY``; anything else is answered 401 ``invalid_api_key`` at once,
   so an unauthenticated client cannot make the server read, parse or store a body, nor read
   ``/openapi.json``, ``/version`` or ``/metrics``;
2. a declared ``Content-Length`` over the body limit: 413 at once (a body streamed without a
   length is cut off at the limit by FastAPI's ``max_body_size``, also 413);
3. a place in the queue (``.admission``) for the routes that use the model: 429 with
   ``Retry-After`` when every place is taken.

Refusals are OpenAI's error object. Then the request goes on with a :class:`~.trace.Trace`
as the current one; once its whole body is read, the gate watches for the client leaving and
sets ``trace.gone`` (what waits for the model listens to it). When the answer ends, the gate
gives the place back and hands the trace to the metrics.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kvreg.app.serving import trace as traces
from kvreg.app.serving.admission import Admission, Overloaded
from kvreg.app.serving.protocol import ApiError

if TYPE_CHECKING:
    from kvreg.app.serving.metrics import ServeMetrics

#: Routes answered without the API key: an orchestrator's liveness and readiness probe.
OPEN_ROUTES = frozenset({"/health"})
#: Routes that need the model's thread, hence a place in the queue (POST only).
MODEL_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"})
_ROUTES = frozenset({*MODEL_ROUTES, *OPEN_ROUTES, "/v1/models", "/version", "/metrics", "/openapi.json"})


def route_label(path: str) -> str:
    """The route a path belongs to, from a fixed set (a metrics label must stay bounded)."""
    if path in _ROUTES:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{model}"
    return "other"


def key_matches(scope: Scope, expected: bytes | None) -> bool:
    """Whether the request carries ``Authorization: Bearer <expected>`` (always, with no key);
    compared in constant time."""
    if expected is None:
        return True
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, given = bytes(value).partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), expected)
    return False


def declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def send_json(
    send: Send, status: int, body: dict[str, Any], headers: Iterable[tuple[str, str]] = ()
) -> None:
    """A whole JSON answer (the connection closes after it when the body was left unread)."""
    data = json.dumps(body, separators=(",", ":")).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data, "more_body": False})


def unauthorized() -> ApiError:
    return ApiError(
        "a valid API key is required: send 'Authorization: Bearer KEY' with the server's key",
        status=401,
        code="invalid_api_key",
    )


class Gate:
    """The pure ASGI middleware described in the module's docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str | None,
        max_body: int,
        admission: Admission,
        metrics: ServeMetrics,
    ) -> None:
        self.app = app
        self.expected = None if api_key is None else api_key.encode("utf-8")
        self.max_body = max_body
        self.admission = admission
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        trace = traces.Trace(route_label(path), time.perf_counter())
        status = 0
        watcher: asyncio.Task[None] | None = None

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        async def watch() -> None:  # the body is read: what comes next is the disconnect
            while (await receive())["type"] != "http.disconnect":
                pass
            trace.gone.set()

        async def received() -> Message:
            nonlocal watcher
            message = await receive()
            if message["type"] == "http.disconnect":
                trace.gone.set()
            elif watcher is None and not message.get("more_body", False) and trace.ticket is not None:
                watcher = asyncio.ensure_future(watch())
            return message

        token = traces.enter(trace)
        try:
            refusal = self._refusal(scope, path, trace)
            if refusal is not None:
                error, headers = refusal
                await send_json(sent, error.status, error.body(), headers)
                return
            await self.app(scope, received, sent)
        finally:
            traces.leave_context(token)
            if watcher is not None:
                watcher.cancel()
            if trace.ticket is not None:
                trace.ticket.release()
            self.metrics.finished(trace, status)

    def _refusal(
        self, scope: Scope, path: str, trace: traces.Trace
    ) -> tuple[ApiError, list[tuple[str, str]]] | None:
        """The answer that ends the request from its headers alone, if any (and takes its place
        in the queue otherwise, when it needs the model)."""
        if path not in OPEN_ROUTES and not key_matches(scope, self.expected):
            return unauthorized(), []
        length = declared_length(scope)
        if length is not None and length > self.max_body:
            error = ApiError(
                f"the request body is {length} bytes, over this server's limit of {self.max_body} bytes",
                status=413,
                code="request_too_large",
            )
            return error, []
        if path in MODEL_ROUTES and scope.get("method") == "POST":
            try:
                trace.ticket = self.admission.admit()
            except Overloaded as full:
                error = ApiError(str(full), status=429, type="requests", code="rate_limit_exceeded")
                return error, [("retry-after", str(full.retry_after))]
        return None
