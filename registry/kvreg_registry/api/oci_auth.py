"""Who is calling a ``/v2/`` route, and the token endpoint of the Docker token flow.

The same kvreg API tokens as ``/api/v1``, presented three ways:

- ``Authorization: Bearer <kvreg token>``;
- ``Authorization: Basic base64(<any user>:<kvreg token>)`` (what ``docker login`` and
  ``oras login`` store);
- ``Authorization: Bearer kvreg-anonymous`` (:data:`ANONYMOUS_TOKEN`): the token
  ``GET /v2/token`` hands a caller who sent no credentials; it means "anonymous".

``GET /v2/token`` answers the token flow's request with the caller's own kvreg token
(after checking it), never a new one: see docs/protocol.md § OCI for why. Failed
authentications count against the same limiter as the API's (``api.ratelimit``).
What a principal may read is decided by ``auth`` and ``services.accounts``, not here.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from kvreg.core.errors import UnauthenticatedError
from kvreg.core.timestamps import rfc3339
from kvreg_registry.api.deps import principal_of_token, state
from kvreg_registry.api.ratelimit import auth_attempt
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import ApiToken, utcnow
from kvreg_registry.state import RegistryState

#: The bearer token of an anonymous caller (not a kvreg token: those start with ``kvreg_``).
ANONYMOUS_TOKEN = "kvreg-anonymous"
#: ``expires_in`` of a token that does not expire (the client asks again after it; harmless).
DEFAULT_EXPIRES_IN = 3600
_MAX_CREDENTIALS = 1024


def credentials(header: str) -> str | None:
    """The kvreg token in an ``Authorization`` value; None for the anonymous token.

    Raises ``UnauthenticatedError`` for any other scheme or a malformed value."""
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if not value or len(value) > _MAX_CREDENTIALS:
        raise UnauthenticatedError("the Authorization header must be 'Bearer <token>' or 'Basic <base64>'")
    if scheme.lower() == "bearer":
        return None if value == ANONYMOUS_TOKEN else value
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise UnauthenticatedError("the Basic credentials are not base64 of 'user:password'") from None
        _user, sep, password = decoded.partition(":")
        if not sep or not password:
            raise UnauthenticatedError(
                "Basic credentials need a kvreg token as the password",
                hint="log in with any user name and a kvreg token as the password",
            )
        return password
    raise UnauthenticatedError(f"unsupported Authorization scheme {scheme!r}")


def principal_sync(st: RegistryState, request: Request) -> Principal:
    header = request.headers.get("authorization")
    if header is None:
        return Principal()
    token: str | None = None
    try:
        token = credentials(header)
    except UnauthenticatedError:
        with auth_attempt(request, header.partition(" ")[2].strip()[:256] or None):
            raise
    if token is None:
        return Principal()
    with auth_attempt(request, token[:256]):
        if len(token) > 256:
            raise UnauthenticatedError("unknown token")
        return principal_of_token(st, token)


async def principal(request: Request) -> Principal:
    """The dependency of every ``/v2/`` route: the caller (anonymous without credentials)."""
    return await run_in_threadpool(principal_sync, state(request), request)


def issue_token(st: RegistryState, request: Request) -> dict[str, Any]:
    """The token endpoint's answer: the caller's checked kvreg token, or the anonymous one."""
    who = principal_sync(st, request)
    now = utcnow()
    header = request.headers.get("authorization")
    token = credentials(header) if header is not None else None
    expires_in = DEFAULT_EXPIRES_IN
    if token is None or who.token_id is None:
        token = ANONYMOUS_TOKEN
    else:
        with st.db.read() as s:
            row = s.get(ApiToken, who.token_id)
            expires_at = row.expires_at if row is not None else None
        if expires_at is not None:
            expires_in = max(1, int((expires_at - now) / dt.timedelta(seconds=1)))
    return {
        "token": token,
        "access_token": token,
        "expires_in": expires_in,
        "issued_at": rfc3339(now),
    }
