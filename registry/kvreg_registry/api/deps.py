"""Request-scoped helpers for the routes: the registry state, the caller, the namespace, bodies, headers.

Nothing here decides who may do what (``auth`` and the services do) or declares a
path or query parameter: the routes declare every parameter themselves, so these
helpers never change the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kvreg.core.canonical import parse_json_object
from kvreg.core.digest import Digest
from kvreg.core.errors import BodyTooLargeError, RequestInvalidError, UnauthenticatedError
from kvreg_registry.api.ratelimit import auth_attempt
from kvreg_registry.auth import Principal, authenticate, needs_last_used_update, touch_token
from kvreg_registry.db.models import Namespace
from kvreg_registry.services import accounts
from kvreg_registry.state import RegistryState


def state(request: Request) -> RegistryState:
    registry: RegistryState = request.app.state.registry  # set by create_app's lifespan
    return registry


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 256:
        raise UnauthenticatedError("the Authorization header must be 'Bearer <token>'")
    return token


def principal_sync(st: RegistryState, request: Request) -> Principal:
    header = request.headers.get("authorization")
    if header is None:
        return Principal()
    # Failed authentications (malformed header, unknown/revoked/expired token) are counted
    # per client and per token prefix; past the limit they answer 429 before any lookup.
    presented = header.partition(" ")[2].strip()[:256] or None
    with auth_attempt(request, presented):
        token = bearer_token(request)
        assert token is not None
        return principal_of_token(st, token)


def principal_of_token(st: RegistryState, token: str) -> Principal:
    """The principal of an API token (``UnauthenticatedError`` if unknown, revoked or expired);
    its last-used time is brought up to date when it is stale. The caller counts failures."""
    with st.db.read() as s:
        who = authenticate(s, token)
    if needs_last_used_update(who) and who.token_id is not None:
        with st.db.write() as s:
            touch_token(s, who.token_id)
    return who


async def principal(request: Request) -> Principal:
    return await run_in_threadpool(principal_sync, state(request), request)


@dataclass(frozen=True)
class NamespaceAccess:
    """The caller's way into the namespace ``{ns}`` of the request path.

    :meth:`write` and :meth:`read` open a database session and resolve the namespace in
    it for a role (``accounts.readable_namespace``: a private namespace the caller may not
    read looks absent). They open nothing until the route calls them, so the session is
    the route's own: it commits before the response is sent, and its errors are answered
    like any other.
    """

    st: RegistryState
    who: Principal
    name: str

    @contextmanager
    def write(self, role: str = "read") -> Iterator[tuple[Session, Namespace]]:
        """A write transaction and the namespace, if the caller has ``role`` in it."""
        with self.st.db.write() as s:
            yield s, accounts.readable_namespace(s, self.who, self.name, role)

    @contextmanager
    def read(self, role: str = "read") -> Iterator[tuple[Session, Namespace]]:
        """A read-only session and the namespace, if the caller has ``role`` in it."""
        with self.st.db.read() as s:
            yield s, accounts.readable_namespace(s, self.who, self.name, role)


async def namespace_access(request: Request, who: Principal = Depends(principal)) -> NamespaceAccess:
    """The dependency of every ``/namespaces/{ns}/...`` route that reads or changes the namespace.

    It reads ``ns`` from the matched path rather than declaring it, so the route's own
    ``ns: NsPath`` stays the one declaration in the OpenAPI document, in its place.
    """
    return NamespaceAccess(state(request), who, request.path_params["ns"])


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BodyTooLargeError(f"the body is {declared} bytes, more than the limit of {limit}")
        except ValueError:
            raise RequestInvalidError("Content-Length is not a number") from None
    parts: list[bytes] = []
    size = 0
    async for piece in request.stream():
        size += len(piece)
        if size > limit:
            raise BodyTooLargeError(f"the body is more than the limit of {limit} bytes")
        parts.append(piece)
    return b"".join(parts)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    data = await read_body(request, limit)
    return parse_json_object(data, what="request body", max_bytes=limit, error=RequestInvalidError)


def parse_etag(value: str) -> Digest:
    """A digest from an ``If-Match`` value: ``"sha256:..."`` (quotes optional, one value only)."""
    v = value.strip()
    if v.startswith("W/"):
        raise RequestInvalidError("weak ETags are not accepted in If-Match")
    if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        v = v[1:-1]
    return Digest(v)


def etag(digest: str) -> str:
    return f'"{digest}"'
