"""Request-scoped helpers for the routes: the registry state, the caller, the namespace, bodies, headers.

Nothing here decides who may do what (``auth`` and the services do) or declares a
path or query parameter: the routes declare every parameter themselves, so these
helpers never change the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kvreg.core.canonical import parse_json_object
from kvreg.core.digest import Digest
from kvreg.core.errors import (
    BodyTooLargeError,
    InvalidDigestError,
    RequestInvalidError,
    UnauthenticatedError,
)
from kvreg_registry.api.ratelimit import auth_attempt
from kvreg_registry.auth import Principal, authenticate, hash_token, needs_last_used_update, touch_token
from kvreg_registry.db.models import Namespace
from kvreg_registry.services import accounts, object_reads
from kvreg_registry.services import objects as object_service
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


def presented_token(header: str) -> str | None:
    """What an Authorization header presents as a token, however malformed (at most 256
    characters): the failed-authentication limiter counts failures per its prefix."""
    return header.partition(" ")[2].strip()[:256] or None


def authenticate_request(session: Session, request: Request) -> Principal:
    """The caller of ``request``, its bearer token looked up in ``session`` (anonymous without an
    Authorization header; ``UnauthenticatedError`` for a malformed header or an unknown, revoked
    or expired token).

    Failed authentications are counted per client and per token prefix; past the limit they
    answer 429 before any lookup. Only the lookup is counted: what the caller does with the
    principal afterwards (a role it lacks) is not a failed authentication.
    """
    header = request.headers.get("authorization")
    if header is None:
        return Principal()
    with auth_attempt(request, presented_token(header)):
        token = bearer_token(request)
        assert token is not None
        return authenticate(session, token)


def refresh_last_used(st: RegistryState, who: Principal) -> None:
    """Bring the token's last-used time up to date when it is stale (a write every few minutes
    per token, not one per request), in a transaction of its own after the lookup's."""
    if needs_last_used_update(who) and who.token_id is not None:
        with st.db.write() as s:
            touch_token(s, who.token_id)


def principal_sync(st: RegistryState, request: Request) -> Principal:
    if request.headers.get("authorization") is None:
        return Principal()
    with st.db.read() as s:
        who = authenticate_request(s, request)
    refresh_last_used(st, who)
    return who


async def principal(request: Request) -> Principal:
    return await run_in_threadpool(principal_sync, state(request), request)


@dataclass
class NamespaceAccess:
    """The caller's way into the namespace ``{ns}`` of the request path.

    :meth:`write` and :meth:`read` open a database session and resolve the namespace in
    it for a role (``accounts.readable_namespace``: a private namespace the caller may not
    read looks absent). They open nothing until the route calls them, so the session is
    the route's own: it commits before the response is sent, and its errors are answered
    like any other.

    ``principal`` is the caller, or ``None`` for a *deferred* access
    (:func:`deferred_namespace_access`): then the first session :meth:`session`,
    :meth:`read` or :meth:`write` opens authenticates the caller from ``request`` before
    anything else, so that a route reading one thing pays for one transaction and one
    worker-thread hop, not two of each; :attr:`who` is known from then on.
    """

    st: RegistryState
    principal: Principal | None
    name: str
    request: Request | None = None

    @property
    def who(self) -> Principal:
        """The caller (``RuntimeError`` on a deferred access before its first session)."""
        if self.principal is None:
            raise RuntimeError("a deferred NamespaceAccess knows its caller after its first session")
        return self.principal

    @contextmanager
    def session(self) -> Iterator[tuple[Session, Principal]]:
        """A read-only session and the caller (authenticated in it on a deferred access)."""
        with self._opened(self.st.db.read) as opened:
            yield opened

    @contextmanager
    def write(self, role: str = "read") -> Iterator[tuple[Session, Namespace]]:
        """A write transaction and the namespace, if the caller has ``role`` in it."""
        with self._opened(self.st.db.write) as (s, who):
            yield s, accounts.readable_namespace(s, who, self.name, role)

    @contextmanager
    def read(self, role: str = "read") -> Iterator[tuple[Session, Namespace]]:
        """A read-only session and the namespace, if the caller has ``role`` in it."""
        with self.session() as (s, who):
            yield s, accounts.readable_namespace(s, who, self.name, role)

    def held_object(self, digest: str) -> tuple[Digest, int]:
        """The digest and size of an object the namespace holds, in one read session: the
        caller (on a deferred access), then the digest's syntax, then the namespace and the
        object, each refused with its own error in that order.

        On a deferred access the answer is first looked for with one statement
        (``object_reads``: an object's GET or HEAD is the bulk of every pull); when that does
        not grant it, the same session takes the general way, which says why."""
        with self._transaction(self.st.db.read) as s:
            if self.principal is None and self.request is not None:
                granted = self._held_in_one_statement(s, self.request, digest)
                if granted is not None:
                    return granted
            who = self._caller(s)
            d = Digest(digest)
            namespace = accounts.readable_namespace(s, who, self.name, "read")
            return d, object_service.held_size(s, namespace, d)

    def _held_in_one_statement(self, s: Session, request: Request, digest: str) -> tuple[Digest, int] | None:
        """The digest and size when ``object_reads`` grants the read (the caller is then known),
        else ``None``; a malformed or locked-out Authorization header raises as it would in
        :func:`authenticate_request`."""
        token_hash = None
        header = request.headers.get("authorization")
        if header is not None:
            # As authenticate_request: a locked-out client is answered 429 before any lookup, and a
            # malformed header is a counted failure.
            with auth_attempt(request, presented_token(header)):
                token = bearer_token(request)
            assert token is not None
            token_hash = hash_token(token)
        try:
            d = Digest(digest)
        except InvalidDigestError:
            return None
        granted = object_reads.readable_object(s, token_hash, self.name, d)
        if granted is None:
            return None
        self.principal, size = granted
        return d, size

    @contextmanager
    def _opened(
        self, open_session: Callable[[], AbstractContextManager[Session]]
    ) -> Iterator[tuple[Session, Principal]]:
        """A session from ``open_session`` and the caller, authenticated first thing in it on a
        deferred access."""
        with self._transaction(open_session) as s:
            yield s, self._caller(s)

    @contextmanager
    def _transaction(self, open_session: Callable[[], AbstractContextManager[Session]]) -> Iterator[Session]:
        """A session from ``open_session``. After it (even if the route then failed: the token
        was used), a deferred caller's last-used time is brought up to date, as
        :func:`principal_sync` does."""
        deferred = self.principal is None
        try:
            with open_session() as s:
                yield s
        finally:
            if deferred and self.principal is not None:
                refresh_last_used(self.st, self.principal)

    def _caller(self, session: Session) -> Principal:
        if self.principal is None:
            if self.request is None:  # pragma: no cover - deferred_namespace_access always sets it
                raise RuntimeError("a deferred NamespaceAccess needs the request")
            self.principal = authenticate_request(session, self.request)
        return self.principal


async def namespace_access(request: Request, who: Principal = Depends(principal)) -> NamespaceAccess:
    """The dependency of every ``/namespaces/{ns}/...`` route that reads or changes the namespace.

    It reads ``ns`` from the matched path rather than declaring it, so the route's own
    ``ns: NsPath`` stays the one declaration in the OpenAPI document, in its place.
    """
    return NamespaceAccess(state(request), who, request.path_params["ns"])


async def deferred_namespace_access(request: Request) -> NamespaceAccess:
    """:func:`namespace_access` for a route whose first act is one session of
    :class:`NamespaceAccess` (an object's GET or HEAD, the bulk of every pull): the caller is
    authenticated inside that session, on the route's worker thread, not in a hop and a
    transaction of its own. The route must not use :attr:`NamespaceAccess.who` before it."""
    return NamespaceAccess(state(request), None, request.path_params["ns"], request)


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
