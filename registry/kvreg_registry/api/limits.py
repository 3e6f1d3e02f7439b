"""An ASGI middleware that bounds every request body before any route reads it.

A ``Content-Length`` over the limit is answered ``413 BODY_TOO_LARGE`` at once;
a chunked body is counted as it arrives and cut off at the limit. Object uploads
(``PUT .../objects/{digest}``) get ``max_object_bytes``, object packs (``POST
.../uploads/{id}/objects``) ``max_pack_bytes``; ``POST /api/v1/route`` gets
``ROUTER_MAX_BODY_BYTES`` (4096 block keys need about 300 KB; a read anyone may send
should not make the server parse megabytes), or ``max_json_bytes`` if smaller; every
other request gets ``max_json_bytes``. The routes check again (defence in depth).
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kvreg.core.errors import BodyTooLargeError
from kvreg_registry.api.errors import kvreg_error_response

_OBJECT_PUT = re.compile(r"^/api/v1/namespaces/[^/]+/objects/[^/]+$")
_OBJECT_PACK = re.compile(r"^/api/v1/namespaces/[^/]+/uploads/[^/]+/objects$")
_ROUTE_PATH = "/api/v1/route"
#: The largest body of ``POST /api/v1/route``.
ROUTER_MAX_BODY_BYTES = 512 * 1024


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_object_bytes: int, max_json_bytes: int, max_pack_bytes: int | None = None
    ) -> None:
        self.app = app
        self.max_object_bytes = max_object_bytes
        self.max_json_bytes = max_json_bytes
        self.max_pack_bytes = max_json_bytes if max_pack_bytes is None else max_pack_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_object = scope["method"] == "PUT" and _OBJECT_PUT.match(scope["path"]) is not None
        is_pack = scope["method"] == "POST" and _OBJECT_PACK.match(scope["path"]) is not None
        limit = self.max_json_bytes
        if is_object:
            limit = self.max_object_bytes
        elif is_pack:
            limit = self.max_pack_bytes
        if scope["path"].rstrip("/") == _ROUTE_PATH:
            limit = min(limit, ROUTER_MAX_BODY_BYTES)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            response = kvreg_error_response(
                BodyTooLargeError(
                    f"the body is {declared} bytes, more than the limit of {limit}", limit=limit
                )
            )
            await _drain_small(receive)
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLargeError(f"the body is more than the limit of {limit} bytes", limit=limit)
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _drain_small(receive: Any) -> None:
    """Nothing: the connection is closed after the 413 rather than reading a huge body."""
    return None
