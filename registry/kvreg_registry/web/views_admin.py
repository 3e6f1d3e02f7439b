"""What the admin page shows, read with a fixed number of queries whatever the registry's size.

The page lists the namespaces the visitor administers (every namespace for a server
admin, those where they hold the ``admin`` role otherwise), one page of them at a
time, and for that page's namespaces their signing keys, active legal holds,
retention policies and members: one query each, ``IN`` over the namespace ids, with
a per-namespace cap applied in SQL (``row_number() OVER (PARTITION BY namespace)``).
The visitor's own tokens (the newest :data:`TOKENS_SHOWN`, never their hashes) and,
for a server admin, the users (the first :data:`USERS_SHOWN` by name, with their state and
how many of their tokens are neither revoked nor expired) and every user's tokens (the
newest :data:`USER_TOKENS_SHOWN`, of one user or all, with or without the revoked and
expired ones: :class:`TokenFilter`) complete it.

Which namespaces are listed only decides what the page offers; every action goes
through the same service functions as the API, which check the roles themselves.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TypeVarTuple

from sqlalchemy import Select, func, or_, select
from sqlalchemy.orm import Session

from kvreg.core.errors import InvalidNameError, UserNotFoundError
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import (
    ApiToken,
    LegalHold,
    Namespace,
    RetentionPolicy,
    Role,
    SigningKey,
    User,
    utcnow,
)
from kvreg_registry.services import accounts

Ts = TypeVarTuple("Ts")

NAMESPACES_PER_PAGE = 10  # each namespace gets four sections: keep the page short
KEYS_SHOWN = 50  # per namespace, newest first
HOLDS_SHOWN = 50  # active holds per namespace, newest first
MEMBERS_SHOWN = 100  # per namespace, by user name
TOKENS_SHOWN = 100  # the visitor's own, newest first
USERS_SHOWN = 200  # server admins only, by name
USER_TOKENS_SHOWN = 100  # every user's (server admins only), newest first


@dataclass(frozen=True)
class NamespaceRow:
    id: int
    name: str
    public: bool
    description: str
    created_at: dt.datetime


@dataclass(frozen=True)
class KeyRow:
    keyid: str
    public_key: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


@dataclass(frozen=True)
class HoldRow:
    id: int
    ref: str | None
    digest: str | None
    reason: str
    created_by: str | None
    created_at: dt.datetime


@dataclass(frozen=True)
class PolicyRow:
    keep_versions: int | None
    keep_days: int | None
    updated_at: dt.datetime
    updated_by: str | None


@dataclass(frozen=True)
class MemberRow:
    user: str
    role: str


@dataclass(frozen=True)
class TokenRow:
    id: int
    label: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


@dataclass(frozen=True)
class UserRow:
    name: str
    is_admin: bool
    created_at: dt.datetime
    disabled_at: dt.datetime | None
    active_tokens: int = 0


@dataclass(frozen=True)
class TokenFilter:
    """Which tokens of every user's the page lists: one user's (``user``) or all, and with or
    without the revoked and expired ones."""

    user: str = ""
    include_inactive: bool = False


@dataclass
class AdminView:
    namespaces: list[NamespaceRow]
    namespace_total: int
    page: int
    pages: int
    keys: dict[int, list[KeyRow]] = field(default_factory=dict)
    holds: dict[int, list[HoldRow]] = field(default_factory=dict)
    policies: dict[int, PolicyRow] = field(default_factory=dict)
    members: dict[int, list[MemberRow]] = field(default_factory=dict)
    tokens: list[TokenRow] = field(default_factory=list)
    token_total: int = 0
    users: list[UserRow] = field(default_factory=list)
    user_total: int = 0
    user_tokens: list[accounts.TokenInfo] = field(default_factory=list)
    user_tokens_more: bool = False  # more tokens match than the page shows
    user_tokens_unknown: bool = False  # the filter names no user


def _administered(principal: Principal) -> Select[int, str, bool, str, dt.datetime]:
    """A SELECT of the namespaces ``principal`` administers (all of them for a server admin)."""
    stmt = select(Namespace.id, Namespace.name, Namespace.public, Namespace.description, Namespace.created_at)
    if principal.is_admin:
        return stmt
    return stmt.join(Role, Role.namespace_id == Namespace.id).where(
        Role.user_id == principal.user_id, Role.role == "admin"
    )


def administered_namespaces(
    session: Session, principal: Principal, *, page: int, name_filter: str = ""
) -> tuple[list[NamespaceRow], int, int, int]:
    """One page of the namespaces ``principal`` administers whose name contains ``name_filter``,
    by name: (rows, total, page, pages)."""
    if principal.user_id is None and not principal.is_admin:
        return [], 0, 1, 1
    base = _administered(principal)
    if name_filter:
        escaped = name_filter.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        base = base.where(Namespace.name.like(f"%{escaped}%", escape="\\"))
    total = session.scalar(select(func.count()).select_from(base.subquery())) or 0
    pages = max(1, -(-total // NAMESPACES_PER_PAGE))
    page = min(max(1, page), pages)
    rows = session.execute(
        base.order_by(Namespace.name).limit(NAMESPACES_PER_PAGE).offset((page - 1) * NAMESPACES_PER_PAGE)
    ).all()
    return [NamespaceRow(*r) for r in rows], total, page, pages


def _capped(stmt: Select[*Ts], partition: Any, order: Any, cap: int) -> Select[*Ts]:
    """``stmt`` limited to the first ``cap`` rows of each ``partition`` in ``order`` (in SQL)."""
    numbered = stmt.add_columns(func.row_number().over(partition_by=partition, order_by=order).label("rn"))
    sub = numbered.subquery()
    cols = [c for c in sub.c if c.name != "rn"]
    return select(*cols).where(sub.c.rn <= cap)


def keys_of(session: Session, ns_ids: list[int]) -> dict[int, list[KeyRow]]:
    out: dict[int, list[KeyRow]] = defaultdict(list)
    if not ns_ids:
        return out
    stmt = _capped(
        select(
            SigningKey.namespace_id,
            SigningKey.keyid,
            SigningKey.public_key,
            SigningKey.created_at,
            SigningKey.revoked_at,
        ).where(SigningKey.namespace_id.in_(ns_ids)),
        SigningKey.namespace_id,
        SigningKey.id.desc(),
        KEYS_SHOWN,
    )
    for ns_id, keyid, public_key, created_at, revoked_at in session.execute(stmt).all():
        out[ns_id].append(KeyRow(keyid, public_key, created_at, revoked_at))
    for rows in out.values():
        rows.sort(key=lambda k: (k.revoked_at is not None, k.created_at), reverse=False)
    return out


def active_holds_of(session: Session, ns_ids: list[int]) -> dict[int, list[HoldRow]]:
    out: dict[int, list[HoldRow]] = defaultdict(list)
    if not ns_ids:
        return out
    stmt = _capped(
        select(
            LegalHold.namespace_id,
            LegalHold.id,
            LegalHold.ref_name,
            LegalHold.manifest_digest,
            LegalHold.reason,
            LegalHold.created_by,
            LegalHold.created_at,
        ).where(LegalHold.namespace_id.in_(ns_ids), LegalHold.lifted_at.is_(None)),
        LegalHold.namespace_id,
        LegalHold.id.desc(),
        HOLDS_SHOWN,
    )
    for ns_id, hold_id, ref, digest, reason, created_by, created_at in session.execute(stmt).all():
        out[ns_id].append(HoldRow(hold_id, ref, digest, reason, created_by, created_at))
    for rows in out.values():
        rows.sort(key=lambda h: h.id)
    return out


def policies_of(session: Session, ns_ids: list[int]) -> dict[int, PolicyRow]:
    if not ns_ids:
        return {}
    rows = session.execute(
        select(
            RetentionPolicy.namespace_id,
            RetentionPolicy.keep_versions,
            RetentionPolicy.keep_days,
            RetentionPolicy.updated_at,
            RetentionPolicy.updated_by,
        ).where(RetentionPolicy.namespace_id.in_(ns_ids))
    ).all()
    return {
        ns_id: PolicyRow(keep_versions, keep_days, updated_at, updated_by)
        for ns_id, keep_versions, keep_days, updated_at, updated_by in rows
    }


def members_of(session: Session, ns_ids: list[int]) -> dict[int, list[MemberRow]]:
    out: dict[int, list[MemberRow]] = defaultdict(list)
    if not ns_ids:
        return out
    stmt = _capped(
        select(Role.namespace_id, User.name, Role.role)
        .join(User, User.id == Role.user_id)
        .where(Role.namespace_id.in_(ns_ids)),
        Role.namespace_id,
        User.name,
        MEMBERS_SHOWN,
    )
    for ns_id, user, role in session.execute(stmt).all():
        out[ns_id].append(MemberRow(user, role))
    for rows in out.values():
        rows.sort(key=lambda m: m.user)
    return out


def tokens_of(session: Session, principal: Principal) -> tuple[list[TokenRow], int]:
    """The newest :data:`TOKENS_SHOWN` tokens of the visitor (no hashes), and how many they have."""
    if principal.user_id is None:
        return [], 0
    total = session.scalar(select(func.count()).where(ApiToken.user_id == principal.user_id)) or 0
    rows = session.execute(
        select(
            ApiToken.id,
            ApiToken.label,
            ApiToken.created_at,
            ApiToken.expires_at,
            ApiToken.last_used_at,
            ApiToken.revoked_at,
        )
        .where(ApiToken.user_id == principal.user_id)
        .order_by(ApiToken.id.desc())
        .limit(TOKENS_SHOWN)
    ).all()
    return [TokenRow(*r) for r in rows], total


def users(session: Session) -> tuple[list[UserRow], int]:
    """The first :data:`USERS_SHOWN` users by name, each with the number of their tokens that are
    neither revoked nor expired, and how many users there are."""
    total = session.scalar(select(func.count()).select_from(User)) or 0
    active = (
        select(func.count())
        .where(
            ApiToken.user_id == User.id,
            ApiToken.revoked_at.is_(None),
            or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > utcnow()),
        )
        .correlate(User)
        .scalar_subquery()
    )
    rows = session.execute(
        select(User.name, User.is_admin, User.created_at, User.disabled_at, active)
        .order_by(User.name)
        .limit(USERS_SHOWN)
    ).all()
    return [UserRow(*r) for r in rows], total


def user_tokens(
    session: Session, principal: Principal, wanted: TokenFilter
) -> tuple[list[accounts.TokenInfo], bool, bool]:
    """The newest :data:`USER_TOKENS_SHOWN` tokens ``wanted`` names (never their hashes), whether
    more match, and whether the filter names a user that does not exist."""
    try:
        rows = accounts.list_tokens(
            session,
            principal,
            user=wanted.user or None,
            include_inactive=wanted.include_inactive,
            newest_first=True,
            limit=USER_TOKENS_SHOWN + 1,
        )
    except (UserNotFoundError, InvalidNameError):
        return [], False, True
    return rows[:USER_TOKENS_SHOWN], len(rows) > USER_TOKENS_SHOWN, False


def admin_view(
    session: Session,
    principal: Principal,
    *,
    page: int = 1,
    name_filter: str = "",
    token_filter: TokenFilter | None = None,
) -> AdminView:
    """Everything the admin page shows for ``principal`` (a bounded number of queries), for the
    namespaces whose name contains ``name_filter`` and, for a server admin, the tokens
    ``token_filter`` names (default: every user's neither revoked nor expired)."""
    namespaces, total, page, pages = administered_namespaces(
        session, principal, page=page, name_filter=name_filter
    )
    ids = [ns.id for ns in namespaces]
    view = AdminView(namespaces=namespaces, namespace_total=total, page=page, pages=pages)
    view.keys = keys_of(session, ids)
    view.holds = active_holds_of(session, ids)
    view.policies = policies_of(session, ids)
    view.members = members_of(session, ids)
    view.tokens, view.token_total = tokens_of(session, principal)
    if principal.is_admin:
        view.users, view.user_total = users(session)
        view.user_tokens, view.user_tokens_more, view.user_tokens_unknown = user_tokens(
            session, principal, token_filter or TokenFilter()
        )
    return view
