"""Bearer tokens and roles: who is calling, and may they do this to that namespace.

Tokens are ``kvreg_`` followed by 43 URL-safe characters (256 random bits). Only
their SHA-256 is stored; a lookup is by that hash, and the final comparison is
constant-time, so neither the database nor timing reveals a token. Roles are per
namespace and ordered ``read`` < ``write`` < ``admin``; a server admin has every
role everywhere; a public namespace may be read by anyone.

Access failures raise typed errors (``UnauthenticatedError`` → 401, ``UserDisabledError``
(``USER_DISABLED``, a kind of it) → 401 for any token of a disabled user,
``ForbiddenError`` → 403, ``NamespaceNotFoundError`` → 404 for a private namespace
the caller may not even read). This module does not parse HTTP headers (the API's
dependencies do) and never logs tokens.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from kvreg.core.errors import (
    ForbiddenError,
    NamespaceNotFoundError,
    UnauthenticatedError,
    UserDisabledError,
)
from kvreg_registry.db.models import ApiToken, Namespace, Role, User, utcnow

TOKEN_PREFIX = "kvreg_"
ROLE_RANK = {"read": 1, "write": 2, "admin": 3}


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenFields(Protocol):
    """What :func:`principal_of` reads of a token: an ``ApiToken`` or a row with its columns."""

    @property
    def id(self) -> int: ...
    @property
    def revoked_at(self) -> dt.datetime | None: ...
    @property
    def expires_at(self) -> dt.datetime | None: ...
    @property
    def last_used_at(self) -> dt.datetime | None: ...


class UserFields(Protocol):
    """What :func:`principal_of` reads of a user: a ``User`` or a row with its columns."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def is_admin(self) -> bool: ...
    @property
    def disabled_at(self) -> dt.datetime | None: ...


@dataclass
class Principal:
    """The caller: ``user`` is None for an anonymous request."""

    user_id: int | None = None
    name: str | None = None
    is_admin: bool = False
    token_id: int | None = None
    last_used_at: dt.datetime | None = None
    _roles: dict[int, str | None] = field(default_factory=dict, repr=False)

    @property
    def anonymous(self) -> bool:
        """No token (the operator's ``kvreg-admin`` principal has no user but is an admin)."""
        return self.user_id is None and not self.is_admin

    def role_in(self, session: Session, namespace: Namespace) -> str | None:
        if not self.is_admin and self.user_id is not None and namespace.id not in self._roles:
            self._roles[namespace.id] = session.scalar(
                select(Role.role).where(Role.user_id == self.user_id, Role.namespace_id == namespace.id)
            )
        return self.known_role(namespace.id)

    def known_role(self, namespace_id: int) -> str | None:
        """The caller's role in a namespace as far as it is known without a query: ``admin`` for
        a server admin, ``None`` for the anonymous caller or a role not read yet."""
        if self.is_admin:
            return "admin"
        if self.user_id is None:
            return None
        return self._roles.get(namespace_id)

    def can(self, session: Session, namespace: Namespace, role: str) -> bool:
        if role == "read" and namespace.public:
            return True
        return role_grants(self.role_in(session, namespace), role)

    def knows_role(self, namespace_id: int, role: str | None) -> None:
        """Remember the caller's role in a namespace, read by a statement of the caller's own
        (``role_in`` then asks the database nothing for it)."""
        self._roles[namespace_id] = role

    def require(self, session: Session, namespace: Namespace, role: str) -> None:
        """Raise unless the caller has ``role`` in ``namespace`` (401, 403 or 404)."""
        if self.can(session, namespace, role):
            return
        if self.anonymous:
            raise UnauthenticatedError(
                f"namespace {namespace.name!r} needs a token for this ({role} access)",
                hint="kvreg login REMOTE --token TOKEN",
            )
        if not self.can(session, namespace, "read"):
            raise NamespaceNotFoundError(f"no namespace {namespace.name!r}")
        raise ForbiddenError(
            f"user {self.name!r} does not have the {role} role in namespace {namespace.name!r}",
            hint="ask an admin of the namespace for the role",
        )

    def require_admin(self) -> None:
        if self.is_admin:
            return
        if self.anonymous:
            raise UnauthenticatedError(
                "this needs a server admin's token", hint="kvreg login REMOTE --token TOKEN"
            )
        if not self.is_admin:
            raise ForbiddenError(f"user {self.name!r} is not a server admin")


ANONYMOUS = Principal()


def authenticate(session: Session, token: str | None) -> Principal:
    """The principal a bearer token belongs to; ``None`` gives the anonymous principal."""
    if token is None:
        return Principal()
    digest = hash_token(token)
    row = session.execute(
        select(ApiToken, User).join(User, User.id == ApiToken.user_id).where(ApiToken.token_hash == digest)
    ).first()
    # compare_digest on the hashes keeps the final check constant-time.
    if row is None or not hmac.compare_digest(row[0].token_hash, digest):
        raise UnauthenticatedError(
            "unknown token", hint="kvreg login REMOTE --token TOKEN with a valid token"
        )
    token_row, user = row
    return principal_of(token_row, user)


def principal_for_token_id(session: Session, token_id: int) -> Principal:
    """The principal of the token with id ``token_id`` (a web session acts with the token it was
    opened with); raises ``UnauthenticatedError`` when it was revoked, expired or deleted."""
    row = session.execute(
        select(ApiToken, User).join(User, User.id == ApiToken.user_id).where(ApiToken.id == token_id)
    ).first()
    if row is None:
        raise UnauthenticatedError("the token of this session no longer exists")
    return principal_of(row[0], row[1])


def principal_of(token_row: TokenFields, user: UserFields) -> Principal:
    """The principal of a token row and its user (ORM entities, or the columns of the same names
    read by a statement of one's own), refused when the token or user is not usable."""
    now = utcnow()
    if token_row.revoked_at is not None:
        raise UnauthenticatedError("this token was revoked")
    if token_row.expires_at is not None and token_row.expires_at <= now:
        raise UnauthenticatedError("this token has expired")
    if user.disabled_at is not None:
        raise UserDisabledError(
            f"user {user.name!r} is disabled: none of their tokens is accepted",
            hint="a server admin can enable the user again (kvreg-admin user enable USER)",
        )
    principal = Principal(user_id=user.id, name=user.name, is_admin=user.is_admin, token_id=token_row.id)
    principal.last_used_at = token_row.last_used_at
    return principal


def role_grants(have: str | None, wanted: str) -> bool:
    """Whether holding role ``have`` (``None``: no role) is enough for ``wanted``."""
    return have is not None and ROLE_RANK[have] >= ROLE_RANK[wanted]


LAST_USED_RESOLUTION = dt.timedelta(minutes=5)


def needs_last_used_update(principal: Principal) -> bool:
    """Whether the token's ``last_used_at`` is older than the resolution we keep (one write per
    token every few minutes, not one per request)."""
    if principal.token_id is None:
        return False
    last = principal.last_used_at
    return last is None or utcnow() - last > LAST_USED_RESOLUTION


def touch_token(session: Session, token_id: int) -> None:
    from sqlalchemy import update

    session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=utcnow()))


def expiry(days: int | None) -> dt.datetime | None:
    return None if days is None else utcnow() + dt.timedelta(days=days)
