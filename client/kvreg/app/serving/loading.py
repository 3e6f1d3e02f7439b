"""What the server answers before its model is loaded, then the application once it is.

``kvreg engine serve`` listens first and loads the model in the background (``.lifecycle``),
so that an orchestrator sees a live process at once and a not-ready one until the model
answers. Meanwhile :class:`Starting` (a pure ASGI application) answers every request from
its headers, never reading a body:

- ``GET /health``: 503 ``{"status": "loading"}`` (``{"status": "failed", "error"}`` if the
  load failed: the server then stops);
- any other route: 401 without the API key (as once loaded), else 503 with OpenAI's error
  object, ``code: model_loading`` and ``Retry-After``.

:meth:`Starting.ready` hands every later request to the loaded application.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from kvreg.app.serving.gate import OPEN_ROUTES, key_matches, send_json, unauthorized
from kvreg.app.serving.protocol import ApiError

RETRY_SECONDS = 5  # Retry-After while loading


class Starting:
    """Answers while the model loads; then the loaded application answers."""

    def __init__(self, api_key: str | None) -> None:
        self.expected = None if api_key is None else api_key.encode("utf-8")
        self.app: ASGIApp | None = None
        self.error: str | None = None

    def ready(self, app: ASGIApp) -> None:
        self.app = app

    def failed(self, error: str) -> None:
        self.error = error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        if app is not None:
            await app(scope, receive, send)
            return
        if scope["type"] != "http":  # lifespan is off; no websockets here
            return
        path = str(scope.get("path", ""))
        if path in OPEN_ROUTES:
            body = {"status": "loading"} if self.error is None else {"status": "failed", "error": self.error}
            await send_json(send, 503, body, [("cache-control", "no-store")])
            return
        if not key_matches(scope, self.expected):
            error = unauthorized()
            await send_json(send, error.status, error.body())
            return
        if self.error is not None:
            error = ApiError(f"the model failed to load: {self.error}", status=503, type="server_error")
        else:
            error = ApiError(
                "the model is loading; retry when GET /health answers 200",
                status=503,
                type="server_error",
                code="model_loading",
            )
        await send_json(send, error.status, error.body(), [("retry-after", str(RETRY_SECONDS))])
