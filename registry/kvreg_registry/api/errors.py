"""One place that turns errors into HTTP answers with stable JSON codes.

Every ``KvregError`` becomes ``{"error": {"code", "message", "hint"?, "details"?}}``
with the status of its class (the table in docs/protocol.md) and the code again in
the ``X-Kvreg-Error-Code`` header. FastAPI's validation errors become
``400 REQUEST_INVALID``; unknown routes ``404 NOT_FOUND``; anything unexpected
``500 INTERNAL`` with the traceback in the server log only, never in the body; a write
that found no space left on the storage is ``507 DISK_FULL``.
Under ``/v2/`` (the OCI pull API) errors take the OCI distribution format instead
(``api.oci_errors``).
Starlette's own answers keep their headers (a ``405`` names the allowed methods in
``Allow``, as RFC 9110 requires).

The published OpenAPI says the same: :func:`install` drops FastAPI's default
``422 HTTPValidationError`` from every route, since validation errors are ``400``
with the body above; the routes declare their error codes themselves
(``models.errors``).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from kvreg.core import errors as e
from kvreg.core.errors import ERROR_CODE_HEADER
from kvreg_registry.api import oci_errors

log = logging.getLogger(__name__)


# Most specific class first; the first match wins.
_STATUS: list[tuple[type[e.KvregError], int]] = [
    (e.PreconditionRequiredError, 428),
    (e.BodyTooLargeError, 413),
    (e.RangeNotSatisfiableError, 416),
    (e.RateLimitedError, 429),
    (e.UsageError, 400),
    (e.KeyFileError, 400),
    (e.UnauthenticatedError, 401),
    (e.ForbiddenError, 403),
    (e.NotFoundError, 404),
    (e.RefConflictError, 409),
    (e.AlreadyExistsError, 409),
    (e.InUseError, 409),
    (e.IntegrityError, 422),
    (e.ObjectsMissingError, 422),
    (e.ManifestUnknownError, 422),
    (e.UnavailableError, 503),
    (e.DiskFullError, 507),
]


def status_of(error: e.KvregError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


def error_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    all_headers = {ERROR_CODE_HEADER: body["code"], **(headers or {})}
    if status == 401:
        all_headers["WWW-Authenticate"] = 'Bearer realm="kvreg"'
    return JSONResponse({"error": body}, status_code=status, headers=all_headers)


def kvreg_error_response(error: e.KvregError) -> JSONResponse:
    status = status_of(error)
    if status == 500:
        log.error("unexpected %s: %s", type(error).__name__, error.message)
        return error_response(500, {"code": "INTERNAL", "message": "internal error"})
    headers = {}
    if isinstance(error, e.RangeNotSatisfiableError) and "size" in error.details:
        headers["Content-Range"] = f"bytes */{error.details['size']}"
    if isinstance(error, e.RateLimitedError) and "retry_after" in error.details:
        headers["Retry-After"] = str(error.details["retry_after"])
    return error_response(status, error.to_dict(), headers)


HtmlRenderer = Callable[[Request, int, dict[str, Any]], Response]
API_PATH_PREFIX = "/api/"


def set_html_renderer(app: FastAPI, renderer: HtmlRenderer) -> None:
    """Answer errors on non-API paths (the web UI's pages) with ``renderer`` instead of JSON."""
    app.state.html_error_renderer = renderer


def _answer(request: Request, response: JSONResponse) -> Response:
    renderer: HtmlRenderer | None = getattr(request.app.state, "html_error_renderer", None)
    if renderer is None or request.url.path.startswith(API_PATH_PREFIX) or request.url.path == "/api":
        return response
    body = json.loads(bytes(response.body))["error"]
    page = renderer(request, response.status_code, body)
    if "retry-after" in response.headers:
        page.headers["Retry-After"] = response.headers["retry-after"]
    return page


@functools.lru_cache(maxsize=256)
def _template(path: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}/]+\})", path)
    return re.compile("".join("[^/]+" if part.startswith("{") else re.escape(part) for part in parts))


def allowed_methods(request: Request) -> list[str] | None:
    """The methods the published API serves at this path (Starlette's 405 names only the
    methods of one route); None for a path the OpenAPI does not describe (the web UI).

    The most specific paths win: ``.../objects/missing`` is the missing query (POST), not an
    object whose digest is ``missing``."""
    path = request.scope.get("path", "")
    matching = [
        (template.count("{"), operations)
        for template, operations in request.app.openapi().get("paths", {}).items()
        if _template(template).fullmatch(path)
    ]
    if not matching:
        return None
    fewest = min(params for params, _ in matching)
    return sorted({m.upper() for params, operations in matching if params == fewest for m in operations})


_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _without_fastapi_422(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` less the ``422`` answers FastAPI documents for validation errors (we send 400),
    and with every error answer as ``application/json``."""
    ref = f"#/components/schemas/{_FASTAPI_VALIDATION_SCHEMAS[0]}"
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
            documented = responses.get("422", {}).get("content", {}).get("application/json", {})
            if documented.get("schema", {}).get("$ref") == ref:
                del responses["422"]
            for status, response in responses.items():
                # Errors are JSON whatever the route answers on success (the checkpoint is text).
                content = response.get("content", {}) if status[:1] in "45" else {}
                for media_type in [t for t in content if t != "application/json"]:
                    content.setdefault("application/json", content.pop(media_type))
    components = schema.get("components", {}).get("schemas", {})
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        components.pop(name, None)
    return schema


def install(app: FastAPI) -> None:
    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        # FastAPI builds and caches the schema; dropping what is already gone is a no-op.
        return _without_fastapi_422(original_openapi())

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to change the schema

    @app.exception_handler(e.KvregError)
    async def _kvreg(request: Request, exc: e.KvregError) -> Response:
        if oci_errors.is_oci_path(request.url.path):
            return oci_errors.from_kvreg(request, exc)
        return _answer(request, kvreg_error_response(exc))

    @app.exception_handler(oci_errors.OciError)
    async def _oci(request: Request, exc: oci_errors.OciError) -> Response:
        return oci_errors.from_oci(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        if oci_errors.is_oci_path(request.url.path):
            return oci_errors.from_validation(request, f"invalid request: {exc.errors()[:1]}")
        problems = [
            {"loc": [str(p) for p in err.get("loc", ())], "message": str(err.get("msg", ""))}
            for err in exc.errors()[:20]
        ]
        first = problems[0] if problems else {"loc": [], "message": "invalid request"}
        message = f"invalid request: {'.'.join(first['loc'])}: {first['message']}"
        return _answer(
            request,
            error_response(
                400, {"code": "REQUEST_INVALID", "message": message, "details": {"problems": problems}}
            ),
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if oci_errors.is_oci_path(request.url.path):
            return oci_errors.from_http(request, exc)
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "REQUEST_INVALID")
        body = {"code": code, "message": str(exc.detail)}
        headers = dict(exc.headers or {})
        allowed = allowed_methods(request) if exc.status_code == 405 else None
        if allowed is not None:
            headers["Allow"] = ", ".join(allowed)
        return _answer(request, error_response(exc.status_code, body, headers))

    @app.exception_handler(OSError)
    async def _os_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, OSError) and isinstance(e.from_os_error(exc), e.DiskFullError):
            # The storage is full: the operator's to fix, and the client's to know (no path in the body).
            log.error("no space left for a request to %s: %s", request.url.path, exc)
            full = e.DiskFullError(
                "the registry's storage has no space left: nothing of this request was stored",
                hint="retry later; the registry's operator must free space or add storage",
            )
            return await _kvreg(request, full)
        raise exc  # any other: on to the 500 handler below, as if this one were not there

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error while serving a request", exc_info=exc)
        if oci_errors.is_oci_path(request.url.path):
            return oci_errors.unexpected(request)
        return _answer(request, error_response(500, {"code": "INTERNAL", "message": "internal error"}))
