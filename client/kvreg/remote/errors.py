"""Registry error answers → ``KvregError`` subclasses.

The registry answers errors as ``{"error": {"code", "message", "hint",
"details"}}`` with the code also in the ``X-Kvreg-Error-Code`` header
(docs/protocol.md). The code picks the class from
``kvreg.core.errors.error_classes()`` (so ``DIGEST_MISMATCH`` is a
``DigestMismatchError``, exit 3, on both sides of the wire); message, hint and
details are kept, and ``details["http_status"]`` is added. An unknown code is a
``RemoteError`` that keeps the code in ``details["remote_code"]``; an answer with
no code falls back on its status (401, 403, 404, 500, and 429/502/503/504 as
``UnavailableError``). 401 gets a hint naming the command that fixes it (``kvreg
login NAME``), but ``USER_DISABLED`` one saying that only a registry admin can (a new
token would be refused too); 403 one about roles unless the registry sent its own.

This module only maps; it does not send requests or retry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from kvreg.core.errors import (
    ERROR_CODE_HEADER,
    ForbiddenError,
    InternalServerError,
    KvregError,
    NotFoundError,
    RemoteError,
    UnauthenticatedError,
    UnavailableError,
    UserDisabledError,
    error_classes,
)

__all__ = ["ERROR_CODE_HEADER", "RETRY_STATUSES", "error_document", "error_from_response", "map_error"]

RETRY_STATUSES = frozenset({429, 502, 503, 504})

_FALLBACK_BY_STATUS: dict[int, type[KvregError]] = {
    401: UnauthenticatedError,
    403: ForbiddenError,
    404: NotFoundError,
    500: InternalServerError,
}


def error_document(body: bytes) -> dict[str, Any]:
    """An error answer's body as a JSON object; ``{}`` for anything else (the status decides then)."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: [[[[... from a hostile body
        return {}
    return doc if isinstance(doc, dict) else {}


def _parse_error_body(body: bytes) -> dict[str, Any]:
    error = error_document(body).get("error")
    return error if isinstance(error, dict) else {}


def _text(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value else None


def map_error(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    remote_name: str | None = None,
    url: str | None = None,
) -> KvregError:
    """The ``KvregError`` for an HTTP error answer (see the module docstring)."""
    payload = _parse_error_body(body)
    code = _text(payload, "code") or headers.get(ERROR_CODE_HEADER) or None
    message = _text(payload, "message")
    hint = _text(payload, "hint")
    raw_details = payload.get("details")
    details: dict[str, Any] = dict(raw_details) if isinstance(raw_details, dict) else {}

    classes = error_classes()
    cls: type[KvregError]
    if code is not None and code in classes:
        cls = classes[code]
    elif code is not None:
        cls = RemoteError
        details.setdefault("remote_code", code)
    elif status in RETRY_STATUSES:
        cls = UnavailableError
    else:
        cls = _FALLBACK_BY_STATUS.get(status, RemoteError)
    if message is None:
        message = f"the registry answered HTTP {status}" + (f" for {url}" if url else "")
        if code is None and status == 404:
            message += " (no such route)"
            hint = hint or "check that the remote's URL is a kvreg registry (kvreg remote list)"
    who = remote_name or "NAME"
    if issubclass(cls, UserDisabledError):
        hint = (
            "your user is disabled on this registry: every token of yours is refused, a new one too; "
            "ask a registry admin (they re-enable users with: kvreg-admin user enable USER)"
        )
    elif status == 401 or cls is UnauthenticatedError:
        hint = (
            f"log in with a valid token: kvreg login {who} --token TOKEN "
            "(a registry admin creates tokens; a revoked or expired one must be replaced)"
        )
    elif (status == 403 or cls is ForbiddenError) and hint is None:
        hint = (
            "your token lacks the role this needs: ask a namespace admin for the write role "
            "(push) or the admin role (deleting refs and envelopes)"
        )
    details["http_status"] = status
    error = cls(message, hint=hint)
    error.details = details  # set after construction: details may hold keys named "message" or "hint"
    return error


def error_from_response(response: httpx.Response, *, remote_name: str | None = None) -> KvregError:
    """The ``KvregError`` that an error answer of the registry stands for (reads the body)."""
    body = response.read()
    try:
        url: str | None = str(response.request.url)
    except RuntimeError:  # a response built without a request
        url = None
    return map_error(response.status_code, response.headers, body, remote_name=remote_name, url=url)
