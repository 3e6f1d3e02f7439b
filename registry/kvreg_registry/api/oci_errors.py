"""Errors of the ``/v2/`` routes in the OCI distribution format, and the auth challenge.

Under ``/v2/`` an error is ``{"errors": [{"code", "message", "detail"}]}`` with the
distribution specification's codes (NAME_UNKNOWN, MANIFEST_UNKNOWN, BLOB_UNKNOWN 404;
NAME_INVALID, DIGEST_INVALID 400; UNAUTHORIZED 401; DENIED 403; UNSUPPORTED 405 or 400;
TOOMANYREQUESTS 429), plus two that CNCF distribution uses beyond the list:
RANGE_INVALID (416) and UNAVAILABLE (503); an unexpected error is UNKNOWN (500). A 401
carries the Docker token-flow challenge (:func:`challenge`), whose realm, the token
endpoint's absolute URL, comes from :func:`token_realm`. ``api.errors`` sends every error
of a ``/v2/`` path here; the rest of the API keeps kvreg's own format.

This module decides no access and touches no database.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kvreg.core import errors as e
from kvreg.core.errors import ERROR_CODE_HEADER
from kvreg.core.loopback import is_loopback

log = logging.getLogger(__name__)

V2_PREFIX = "/v2"
#: ``service`` of the challenge and of the token endpoint.
SERVICE = "kvreg"
TOKEN_PATH = "/v2/token"
#: Sent on every ``/v2/`` answer, as distribution does (clients check it on ``GET /v2/``).
API_VERSION_HEADER = "Docker-Distribution-API-Version"
API_VERSION = "registry/2.0"

PUSH_HINT = (
    "the kvreg registry serves OCI pulls only; it takes pushes through its own API "
    "(kvreg push), which checks every object and the signature"
)


class OciError(Exception):
    """An error that has an OCI code of its own (not a kvreg error's mapping)."""

    def __init__(
        self, status: int, code: str, message: str, detail: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.detail = status, code, message, detail
        self.headers = headers or {}


def is_oci_path(path: str) -> bool:
    return path == V2_PREFIX or path.startswith(V2_PREFIX + "/")


def request_repository(request: Request) -> str | None:
    """The repository a ``/v2/`` request is about: ``<ns>`` or the per-ref ``<ns>/<name>``
    (``None`` for ``/v2/`` itself and the token endpoint)."""
    params = request.scope.get("path_params", {})
    ns, name = params.get("ns"), params.get("name")
    if isinstance(ns, str):
        return f"{ns}/{name}" if isinstance(name, str) else ns
    parts = request.url.path.split("/")
    # /v2/<name>/(manifests|blobs|tags|referrers)/...: name is what comes before the verb
    for i in range(len(parts) - 1, 1, -1):
        if parts[i] in ("manifests", "blobs", "tags", "referrers") and i > 2:
            return "/".join(parts[2:i])
    return None


_warned_realm = False


def token_realm(request: Request) -> str:
    """The absolute URL of the token endpoint that every challenge names.

    ``KVREG_PUBLIC_URL`` when it is set. Otherwise the request's own base URL (its ``Host``,
    and the scheme a trusted proxy forwarded) when that host is loopback; for any other host
    ``https://<Host>``, so that clients never send credentials in clear off this machine (a
    warning, once per process, asks the operator to set ``KVREG_PUBLIC_URL``)."""
    global _warned_realm
    public_url: str | None = request.app.state.registry.settings.public_url
    if public_url is not None:
        return public_url + TOKEN_PATH
    base = urllib.parse.urlsplit(str(request.base_url))
    if base.scheme != "https" and not is_loopback(base.hostname or ""):
        if not _warned_realm:
            _warned_realm = True
            log.warning(
                "OCI clients reach this registry as %s, which is not loopback: their token realm is "
                "https://%s%s; set KVREG_PUBLIC_URL to the registry's public URL",
                base.netloc,
                base.netloc,
                TOKEN_PATH,
            )
        base = base._replace(scheme="https")
    return urllib.parse.urlunsplit(base).rstrip("/") + TOKEN_PATH


def challenge(request: Request, *, error: str | None = None, repository: str | None = None) -> str:
    """``WWW-Authenticate`` of a 401: where to get a token (the Docker token flow), and for what.

    ``repository`` (default: the request path's) is named in the ``scope`` to ask for;
    ``error`` is RFC 6750's: ``invalid_token`` (expired, revoked or forged: ask for a new
    one) or ``insufficient_scope`` (the token does not cover this repository)."""
    value = f'Bearer realm="{token_realm(request)}",service="{SERVICE}"'
    repository = repository or request_repository(request)
    if repository:
        value += f',scope="repository:{repository}:pull"'
    if error is not None:
        value += f',error="{error}"'
    return value


def respond(
    request: Request,
    status: int,
    code: str,
    message: str,
    detail: Any = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    all_headers = {ERROR_CODE_HEADER: code, API_VERSION_HEADER: API_VERSION, **(headers or {})}
    if status == 401:
        all_headers.setdefault("WWW-Authenticate", challenge(request))
    error: dict[str, Any] = {"code": code, "message": message}
    error["detail"] = detail if detail is not None else {}
    return JSONResponse({"errors": [error]}, status_code=status, headers=all_headers)


# Most specific class first; the first match wins.
_CODES: list[tuple[type[e.KvregError], int, str]] = [
    (e.RateLimitedError, 429, "TOOMANYREQUESTS"),
    (e.RangeNotSatisfiableError, 416, "RANGE_INVALID"),
    (e.InvalidNameError, 400, "NAME_INVALID"),
    (e.InvalidDigestError, 400, "DIGEST_INVALID"),
    (e.UsageError, 400, "UNSUPPORTED"),
    (e.UnauthenticatedError, 401, "UNAUTHORIZED"),
    (e.ForbiddenError, 403, "DENIED"),
    (e.NamespaceNotFoundError, 404, "NAME_UNKNOWN"),
    (e.ObjectNotFoundError, 404, "BLOB_UNKNOWN"),
    (e.RefNotFoundError, 404, "MANIFEST_UNKNOWN"),
    (e.EnvelopeNotFoundError, 404, "MANIFEST_UNKNOWN"),
    (e.ManifestUnknownError, 404, "MANIFEST_UNKNOWN"),
    (e.NotFoundError, 404, "NAME_UNKNOWN"),
    (e.UnavailableError, 503, "UNAVAILABLE"),
]


def from_kvreg(request: Request, error: e.KvregError) -> JSONResponse:
    match = next(((status, code) for cls, status, code in _CODES if isinstance(error, cls)), None)
    if match is None:
        log.error("unexpected %s under /v2/: %s", type(error).__name__, error.message)
        return respond(request, 500, "UNKNOWN", "internal error")
    status, code = match
    headers: dict[str, str] = {}
    if isinstance(error, e.RangeNotSatisfiableError) and "size" in error.details:
        headers["Content-Range"] = f"bytes */{error.details['size']}"
    if isinstance(error, e.RateLimitedError) and "retry_after" in error.details:
        headers["Retry-After"] = str(error.details["retry_after"])
    detail: dict[str, Any] = {"kvreg_code": error.code}
    if error.hint:
        detail["hint"] = error.hint
    return respond(request, status, code, error.message, detail, headers)


def from_oci(request: Request, error: OciError) -> JSONResponse:
    return respond(request, error.status, error.code, error.message, error.detail, error.headers)


def from_http(request: Request, error: StarletteHTTPException) -> JSONResponse:
    """Starlette's own answers under ``/v2/`` (a path no route serves)."""
    if error.status_code == 405:
        return respond(request, 405, "UNSUPPORTED", PUSH_HINT, headers={"Allow": "GET, HEAD"})
    if error.status_code == 404:
        return respond(request, 404, "NAME_UNKNOWN", "no such repository or endpoint")
    return respond(request, error.status_code, "UNSUPPORTED", str(error.detail))


def from_validation(request: Request, message: str) -> JSONResponse:
    return respond(request, 400, "UNSUPPORTED", message)


def unexpected(request: Request) -> JSONResponse:
    return respond(request, 500, "UNKNOWN", "internal error")
