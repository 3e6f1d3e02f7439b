"""Who is calling a ``/v2/`` route, and the token endpoint of the Docker token flow.

Every ``/v2/`` route accepts, in ``Authorization``:

- ``Bearer <OCI token>``: a scoped token from ``GET /v2/token`` (``api.oci_tokens``). It is
  verified (signature, ``exp``/``nbf``; else ``401`` with ``error="invalid_token"`` in the
  challenge), then the kvreg API token it was issued for is loaded again, on every request,
  so that revoking that token, its expiry or disabling its user takes effect at once (the
  error's ``detail.kvreg_code`` then says which: ``UNAUTHENTICATED`` or ``USER_DISABLED``). A
  request about a repository the token does not name is ``401`` with
  ``error="insufficient_scope"`` and that repository's scope, so that the client asks for a
  new token; one the token names without ``pull`` is answered as the caller's present
  rights say (a namespace it may not read: ``404``, or ``401`` to an anonymous token). The
  caller's rights are thus those of the token *and* those of its user now: the routes check
  the latter (``accounts.readable_namespace``).
- ``Bearer <kvreg API token>`` and ``Basic base64(<any user>:<kvreg API token>)`` (what
  ``docker login``, ``skopeo login`` and ``oras login`` store): the API's own tokens.
- ``Bearer kvreg-anonymous`` (:data:`ANONYMOUS_TOKEN`), what older registries handed an
  anonymous caller: no credentials.

``GET /v2/token`` (:func:`issue_token`) authenticates the caller with an API token (Basic or
Bearer; none: anonymous) and answers a scoped token, never the API token. Failed
authentications with API tokens (and malformed headers) count against the API's limiter
(``api.ratelimit``); failures of OCI tokens do not (guessing a signed token is hopeless, and
an expired one is how a client learns to fetch the next). What a principal may read is
decided by ``auth`` and ``services.accounts``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any

from fastapi import Request
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kvreg.core.errors import UnauthenticatedError
from kvreg.core.timestamps import rfc3339
from kvreg_registry.api import oci_tokens
from kvreg_registry.api.deps import presented_token, refresh_last_used, state
from kvreg_registry.api.oci_errors import SERVICE, OciError, challenge, request_repository
from kvreg_registry.api.ratelimit import auth_attempt
from kvreg_registry.auth import TOKEN_PREFIX, Principal, authenticate, principal_of
from kvreg_registry.db.models import ApiToken, User, utcnow
from kvreg_registry.services import accounts
from kvreg_registry.state import RegistryState

#: The bearer token of an anonymous caller (not a kvreg token: those start with ``kvreg_``).
ANONYMOUS_TOKEN = "kvreg-anonymous"
#: The longest credential read: an OCI token for many repositories is a few KiB.
_MAX_CREDENTIALS = 16384
#: The longest API token looked up (longer ones are unknown without a lookup).
_MAX_API_TOKEN = 256


def credentials(header: str) -> str | None:
    """The token in an ``Authorization`` value (an API or OCI token); None for the anonymous one.

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


def is_oci_token(token: str) -> bool:
    """Whether ``token`` has the shape of an OCI token (a JWT), not of an API token."""
    return not token.startswith(TOKEN_PREFIX) and token.count(".") == 2


def _presented(request: Request) -> str | None:
    """The request's token (None: anonymous); a malformed header is a counted failure."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    try:
        return credentials(header)
    except UnauthenticatedError:
        with auth_attempt(request, presented_token(header)):
            raise


def sent_credentials(request: Request) -> bool:
    """Whether the request carries credentials (the legacy anonymous token is none)."""
    header = request.headers.get("authorization")
    return header is not None and header.strip().partition(" ")[2].strip() != ANONYMOUS_TOKEN


def _secret(st: RegistryState) -> bytes:
    return oci_tokens.signing_secret(st.log.key)


def _authenticate_api_token(session: Session, request: Request, token: str) -> Principal:
    with auth_attempt(request, token[:_MAX_API_TOKEN]):
        if len(token) > _MAX_API_TOKEN:
            raise UnauthenticatedError("unknown token")
        return authenticate(session, token)


# --- the caller of a /v2/ route ----------------------------------------------------------------


def principal_sync(st: RegistryState, request: Request) -> Principal:
    token = _presented(request)
    if token is None:
        return Principal()
    if is_oci_token(token):
        return _oci_principal(st, request, token)
    with st.db.read() as s:
        who = _authenticate_api_token(s, request, token)
    refresh_last_used(st, who)
    return who


async def principal(request: Request) -> Principal:
    """The dependency of every ``/v2/`` route: the caller (anonymous without credentials)."""
    return await run_in_threadpool(principal_sync, state(request), request)


def _refused(
    request: Request, message: str, *, error: str, repository: str | None = None, detail: Any = None
) -> OciError:
    header = challenge(request, error=error, repository=repository)
    return OciError(401, "UNAUTHORIZED", message, detail, headers={"WWW-Authenticate": header})


def _oci_principal(st: RegistryState, request: Request, token: str) -> Principal:
    """The caller of an OCI token, if the token covers the request's repository (module docstring)."""
    try:
        claims = oci_tokens.verify(_secret(st), token, issuer=st.log.origin)
    except oci_tokens.InvalidOciToken as e:
        raise _refused(request, f"{e}; ask the token endpoint for a new one", error="invalid_token") from None
    repository = request_repository(request)
    with st.db.read() as s:
        who = Principal() if claims.token_id is None else _principal_of_claims(s, request, claims)
        pull = claims.pull_of(repository) if repository is not None else True
        if pull is None:
            raise _refused(
                request,
                f"the token does not cover repository {repository!r}; ask for one with its scope",
                error="insufficient_scope",
            )
        if not pull and repository is not None:
            # Refused when issued. The caller's present rights say why (as without a token), or,
            # if they now allow it, a new token will.
            accounts.readable_namespace(s, who, repository.partition("/")[0], "read")
            if oci_tokens.may_pull(s, who, repository):
                raise _refused(
                    request,
                    f"the token was issued without pull access to {repository!r}; ask for a new one",
                    error="insufficient_scope",
                )
            raise OciError(404, "NAME_UNKNOWN", f"no repository {repository}")
    refresh_last_used(st, who)
    return who


def _principal_of_claims(session: Session, request: Request, claims: oci_tokens.Claims) -> Principal:
    """The principal of the API token a verified OCI token was issued for, as it is now."""
    row = session.execute(
        select(ApiToken, User).join(User, User.id == ApiToken.user_id).where(ApiToken.id == claims.token_id)
    ).first()
    # A token row created after the OCI token (an id reused after a restore) is another token.
    issued = dt.datetime.fromtimestamp(claims.issued_at + oci_tokens.LEEWAY_SECONDS, dt.UTC)
    if row is None or row[1].name != claims.subject or row[0].created_at > issued:
        message = "the kvreg token this token was issued for no longer exists"
        raise _refused(request, message, error="invalid_token")
    try:
        return principal_of(row[0], row[1])
    except UnauthenticatedError as e:
        message = f"the kvreg token this token was issued for is refused: {e.message}"
        raise _refused(request, message, error="invalid_token", detail={"kvreg_code": e.code}) from None


# --- the token endpoint ------------------------------------------------------------------------


def _check_service(request: Request) -> None:
    services = request.query_params.getlist("service")
    if len(services) > 1 or any(s != SERVICE for s in services):
        shown = ", ".join(repr(s[:64]) for s in services[:3])
        raise OciError(
            400, "UNSUPPORTED", f"service: this token service serves {SERVICE!r}, not {shown}",
            detail={"field": "service"},
        )  # fmt: skip


def issue_token(st: RegistryState, request: Request) -> dict[str, Any]:
    """``GET /v2/token``: a scoped token for the scopes asked for, as far as the caller may have
    them (``account``, ``client_id`` and ``offline_token`` are ignored)."""
    _check_service(request)
    requested = oci_tokens.parse_scopes(request.query_params.getlist("scope"))
    token = _presented(request)
    if token is not None and is_oci_token(token):
        raise UnauthenticatedError(
            "an OCI token cannot ask for another", hint="send the kvreg API token: Basic auth, any user name"
        )
    now = utcnow()
    expires_at: dt.datetime | None = None
    with st.db.read() as s:
        who = Principal() if token is None else _authenticate_api_token(s, request, token)
        if who.token_id is not None:
            expires_at = s.scalar(select(ApiToken.expires_at).where(ApiToken.id == who.token_id))
        granted = oci_tokens.grant(s, who, requested)
    refresh_last_used(st, who)
    lifetime = st.settings.oci_token_seconds
    if expires_at is not None:  # never past the API token's own expiry
        lifetime = max(1, min(lifetime, int((expires_at - now).total_seconds())))
    issued = oci_tokens.issue(
        _secret(st),
        issuer=st.log.origin,
        subject=who.name or "",
        token_id=who.token_id,
        access=granted,
        lifetime=lifetime,
        now=now.timestamp(),
    )
    return {"token": issued, "access_token": issued, "expires_in": lifetime, "issued_at": rfc3339(now)}
