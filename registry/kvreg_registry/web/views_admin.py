"""What the admin page shows, read with a fixed number of queries whatever the registry's size.

The page lists the namespaces the visitor administers (every namespace for a server
admin, those where they hold the ``admin`` role otherwise), one page of them at a
time, and for that page's namespaces their signing keys, active legal holds,
retention policies and members: one query each, ``IN`` over the namespace ids, with
a per-namespace cap applied in SQL (``row_number() OVER (PARTITION BY namespace)``).
The visitor's own tokens (the newest :data:`TOKENS_SHOWN`, never their hashes) and,
for a server admin, the users (the first :data:`USERS_SHOWN` by name) complete it.

Which namespaces are listed only decides what the page offers; every action goes
through the same service functions as the API, which check the roles themselves.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TypeVarTuple

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from kvreg_registry.auth import Principal
from kvreg_registry.db.models import ApiToken, LegalHold, Namespace, RetentionPolicy, Role, SigningKey, User

Ts = TypeVarTuple("Ts")

NAMESPACES_PER_PAGE = 10  # each namespace gets four sections: keep the page short
KEYS_SHOWN = 50  # per namespace, newest first
HOLDS_SHOWN = 50  # active holds per namespace, newest first
MEMBERS_SHOWN = 100  # per namespace, by user name
TOKENS_SHOWN = 100  # the visitor's own, newest first
USERS_SHOWN = 200  # server admins only, by name


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
    total = session.scalar(select(func.count()).select_from(User)) or 0
    rows = session.execute(
        select(User.name, User.is_admin, User.created_at, User.disabled_at)
        .order_by(User.name)
        .limit(USERS_SHOWN)
    ).all()
    return [UserRow(*r) for r in rows], total


def admin_view(session: Session, principal: Principal, *, page: int = 1, name_filter: str = "") -> AdminView:
    """Everything the admin page shows for ``principal`` (a bounded number of queries), for the
    namespaces whose name contains ``name_filter``."""
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
    return view
