"""OCI error answers → ``KvregError`` subclasses.

An OCI registry answers errors as ``{"errors": [{"code", "message", "detail"}]}``
(distribution-spec, "Error Codes"). The first code picks the class: a missing blob
or manifest is a not-found error, ``UNAUTHORIZED`` asks to log in, ``DENIED`` is
forbidden, ``DIGEST_INVALID`` is a digest mismatch (exit 3),
``TOOMANYREQUESTS`` is rate limiting. An answer without a known code falls back
on its status. ``details`` keep ``http_status``, ``oci_code`` and the
``WWW-Authenticate`` challenge of a 401 (``kvreg.remote.oci.client`` answers it).

This module only maps; it does not send requests or retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvreg.core.errors import (
    DigestMismatchError,
    ForbiddenError,
    InternalServerError,
    KvregError,
    NotFoundError,
    ObjectNotFoundError,
    RateLimitedError,
    RemoteError,
    UnauthenticatedError,
    UnavailableError,
)
from kvreg.remote.errors import error_document

__all__ = ["CHALLENGE_DETAIL", "map_oci_error"]

#: ``details`` key of an ``UnauthenticatedError`` that holds the registry's challenge.
CHALLENGE_DETAIL = "www_authenticate"

_BY_CODE: dict[str, type[KvregError]] = {
    "BLOB_UNKNOWN": ObjectNotFoundError,
    "BLOB_UPLOAD_UNKNOWN": NotFoundError,
    "MANIFEST_UNKNOWN": NotFoundError,
    "NAME_UNKNOWN": NotFoundError,
    "UNAUTHORIZED": UnauthenticatedError,
    "DENIED": ForbiddenError,
    "DIGEST_INVALID": DigestMismatchError,
    "TOOMANYREQUESTS": RateLimitedError,
}
_BY_STATUS: dict[int, type[KvregError]] = {
    401: UnauthenticatedError,
    403: ForbiddenError,
    404: NotFoundError,
    429: RateLimitedError,
    500: InternalServerError,
    502: UnavailableError,
    503: UnavailableError,
    504: UnavailableError,
}


def _first_error(body: bytes) -> dict[str, Any]:
    errors = error_document(body).get("errors")
    first = errors[0] if isinstance(errors, list) and errors else None
    return first if isinstance(first, dict) else {}


def map_oci_error(
    status: int, headers: Mapping[str, str], body: bytes, *, remote_name: str | None, url: str
) -> KvregError:
    """The ``KvregError`` for an OCI registry's error answer (see the module docstring)."""
    first = _first_error(body)
    code = first.get("code") if isinstance(first.get("code"), str) else None
    text = first.get("message") if isinstance(first.get("message"), str) else None
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, RemoteError)
    if status == 401:
        cls = UnauthenticatedError
    message = f"the OCI registry answered HTTP {status}" + (f" {code}" if code else "") + f" for {url}"
    if text:
        message += f": {text[:300]}"
    who = remote_name or "NAME"
    hint = None
    if cls is UnauthenticatedError:
        hint = (
            f"log in: kvreg login {who} --username USER --password-stdin, or docker login / podman login "
            "to the registry (kvreg reads their credential files and helpers)"
        )
    elif cls is ForbiddenError:
        hint = "your account lacks the permission this needs on that repository (pull, or push)"
    details: dict[str, Any] = {"http_status": status, "url": url}
    if code:
        details["oci_code"] = code
    challenge = headers.get("WWW-Authenticate")
    if challenge:
        details[CHALLENGE_DETAIL] = challenge[:2000]
    error = cls(message, hint=hint)
    error.details = details
    return error
