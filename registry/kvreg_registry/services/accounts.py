"""Namespaces, users, API tokens, roles and the signing keys registered per namespace.

A user may be *disabled* (:func:`set_user_disabled`, the offboarding switch): from then on
every token of theirs is refused (``auth.principal_of``: ``401 USER_DISABLED``), so are the
OCI tokens issued for them and their web sessions (ended at once). Their tokens, roles,
signing keys and artifacts stay as they are, and enabling the user again gives them back
their tokens that were neither revoked nor expired meanwhile.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from sqlalchemy import delete, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kvreg.core.errors import (
    AlreadyExistsError,
    ForbiddenError,
    InvalidNameError,
    KeyNotFoundError,
    NamespaceNotFoundError,
    RequestInvalidError,
    TokenNotFoundError,
    UnauthenticatedError,
    UserNotFoundError,
)
from kvreg.core.keys import PublicKey
from kvreg.core.names import validate_namespace
from kvreg_registry import audit
from kvreg_registry.auth import ROLE_RANK, Principal, expiry, generate_token, hash_token
from kvreg_registry.db.engine import add_in_savepoint, rowcount
from kvreg_registry.db.models import ApiToken, Namespace, Role, SigningKey, User, WebSession, utcnow

MAX_KEY_LABEL = 200
#: A namespace's description (Markdown), in characters: the API, the web form and the CLI say the same.
MAX_DESCRIPTION = 10_000
#: The longest expiry a token may be given, in days (the API and the web form say the same).
MAX_TOKEN_DAYS = 3650
#: A key label: no control characters (``api.params.KEY_LABEL_PATTERN`` publishes it).
KEY_LABEL_RE = re.compile(r"[^\x00-\x1f\x7f-\x9f]*")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_USER_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}", re.ASCII)


def validate_user_name(name: str) -> str:
    if not isinstance(name, str) or _USER_RE.fullmatch(name) is None or ".." in name:
        raise InvalidNameError(
            f"invalid user name {name!r}",
            hint="1-64 lowercase ASCII letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


# --- namespaces -------------------------------------------------------------------------


def get_namespace(session: Session, name: str) -> Namespace:
    validate_namespace(name)
    ns = session.scalar(select(Namespace).where(Namespace.name == name))
    if ns is None:
        raise NamespaceNotFoundError(f"no namespace {name!r}")
    return ns


def readable_namespace(session: Session, principal: Principal, name: str, role: str = "read") -> Namespace:
    """The namespace if it exists and the caller has ``role`` in it (a private one the
    caller cannot read looks like it does not exist)."""
    validate_namespace(name)
    ns = session.scalar(select(Namespace).where(Namespace.name == name))
    if ns is None:
        if principal.anonymous:
            # A private namespace answers 401 to anonymous callers; so does a missing one,
            # or the difference would tell which private namespaces exist.
            raise UnauthenticatedError(
                f"namespace {name!r} does not exist or needs a token", hint="kvreg login REMOTE --token TOKEN"
            )
        raise NamespaceNotFoundError(f"no namespace {name!r}")
    principal.require(session, ns, role)
    return ns


def list_namespaces(session: Session, principal: Principal) -> list[Namespace]:
    rows = session.scalars(select(Namespace).order_by(Namespace.name)).all()
    return [ns for ns in rows if principal.can(session, ns, "read")]


def create_namespace(
    session: Session, principal: Principal, name: str, *, public: bool = False, description: str = ""
) -> Namespace:
    principal.require_admin()
    validate_namespace(name)
    description = validate_description(description)
    if session.scalar(select(Namespace.id).where(Namespace.name == name)) is not None:
        raise AlreadyExistsError(f"namespace {name!r} exists already")
    now = utcnow()
    ns = Namespace(name=name, public=public, description=description, created_at=now)
    if description:
        ns.description_updated_at, ns.description_updated_by = now, principal.name
    _add_unique(session, ns, f"namespace {name!r} exists already")
    audit.append(
        session,
        "namespace.created",
        actor=principal.name,
        namespace=name,
        new={"public": public, "description": description},
    )
    return ns


def validate_description(text: str) -> str:
    """A namespace description as stored: Markdown, trailing blanks dropped, at most
    :data:`MAX_DESCRIPTION` characters and no control characters but tab and newline."""
    text = text.replace("\r\n", "\n").rstrip()
    if len(text) > MAX_DESCRIPTION:
        raise RequestInvalidError(f"the field 'description' is longer than {MAX_DESCRIPTION} characters")
    if _CONTROL_RE.search(text):
        raise RequestInvalidError("the field 'description' holds a control character")
    return text


def set_namespace_description(
    session: Session, principal: Principal, name: str, description: str
) -> Namespace:
    """Replace the description of namespace ``name`` (its admins, and server admins); logged as
    ``namespace.description`` with the old and new text. Setting the same text again changes
    nothing and logs nothing."""
    ns = get_namespace(session, name)
    principal.require(session, ns, "admin")
    description = validate_description(description)
    if description == ns.description:
        return ns
    old = ns.description
    ns.description = description
    ns.description_updated_at, ns.description_updated_by = utcnow(), principal.name
    audit.append(
        session, "namespace.description", actor=principal.name, namespace=name, old=old, new=description
    )
    return ns


def set_namespace_public(session: Session, principal: Principal, name: str, public: bool) -> Namespace:
    ns = get_namespace(session, name)
    principal.require(session, ns, "admin")
    old = ns.public
    ns.public = public
    audit.append(session, "namespace.visibility", actor=principal.name, namespace=name, old=old, new=public)
    return ns


# --- users and tokens -----------------------------------------------------------------


def get_user(session: Session, name: str) -> User:
    validate_user_name(name)
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise UserNotFoundError(f"no user {name!r}")
    return user


def create_user(session: Session, principal: Principal, name: str, *, admin: bool = False) -> User:
    principal.require_admin()
    validate_user_name(name)
    if session.scalar(select(User.id).where(User.name == name)) is not None:
        raise AlreadyExistsError(f"user {name!r} exists already")
    user = User(name=name, is_admin=admin)
    _add_unique(session, user, f"user {name!r} exists already")
    audit.append(session, "user.created", actor=principal.name, new={"user": name, "admin": admin})
    return user


@dataclass(frozen=True)
class NewToken:
    id: int
    token: str
    user: str
    label: str
    expires_at: dt.datetime | None


def create_token(
    session: Session,
    principal: Principal,
    user_name: str,
    *,
    label: str = "",
    expires_in_days: int | None = None,
) -> NewToken:
    """A new token for ``user_name``; the text is returned once and only its hash is kept."""
    user = get_user(session, user_name)
    if principal.user_id != user.id:
        principal.require_admin()
    if len(label) > 200:
        raise RequestInvalidError("a token label is at most 200 characters")
    if expires_in_days is not None and not 1 <= expires_in_days <= MAX_TOKEN_DAYS:
        raise RequestInvalidError(f"expires_in_days must be from 1 to {MAX_TOKEN_DAYS}")
    text = generate_token()
    row = ApiToken(
        user_id=user.id, token_hash=hash_token(text), label=label, expires_at=expiry(expires_in_days)
    )
    session.add(row)
    session.flush()
    audit.append(
        session,
        "token.created",
        actor=principal.name,
        new={"user": user.name, "token_id": row.id, "label": label},
    )
    return NewToken(row.id, text, user.name, label, row.expires_at)


def revoke_token(session: Session, principal: Principal, token_id: int) -> bool:
    """Revoke token ``token_id`` (its owner or a server admin); False when it was revoked already."""
    row = session.get(ApiToken, token_id)
    if row is None:
        raise TokenNotFoundError(f"no token {token_id}")
    if principal.user_id != row.user_id:
        principal.require_admin()
    if row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    audit.append(session, "token.revoked", actor=principal.name, old={"token_id": token_id})
    return True


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown of a token: never its text or its hash."""

    id: int
    user: str
    label: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None
    user_disabled: bool

    def state(self, now: dt.datetime | None = None) -> str:
        """``revoked``, ``expired``, ``user disabled`` (it works again if the user is enabled)
        or ``active``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= (now or utcnow()):
            return "expired"
        return "user disabled" if self.user_disabled else "active"


def list_tokens(
    session: Session,
    principal: Principal,
    *,
    user: str | None = None,
    include_inactive: bool = False,
    newest_first: bool = False,
    limit: int | None = None,
) -> list[TokenInfo]:
    """The tokens of ``user`` (every user's: a server admin only), by user and id or newest first;
    revoked and expired ones only with ``include_inactive``. A user may list their own."""
    stmt = select(
        ApiToken.id,
        User.name,
        ApiToken.label,
        ApiToken.created_at,
        ApiToken.expires_at,
        ApiToken.last_used_at,
        ApiToken.revoked_at,
        User.disabled_at,
    ).join(User, User.id == ApiToken.user_id)
    if user is None:
        principal.require_admin()
    else:
        row = get_user(session, user)
        if principal.user_id != row.id:
            principal.require_admin()
        stmt = stmt.where(ApiToken.user_id == row.id)
    if not include_inactive:
        stmt = stmt.where(
            ApiToken.revoked_at.is_(None), or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > utcnow())
        )
    stmt = stmt.order_by(ApiToken.id.desc()) if newest_first else stmt.order_by(User.name, ApiToken.id)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [
        TokenInfo(tid, name, label, created, expires, used, revoked, disabled_at is not None)
        for tid, name, label, created, expires, used, revoked, disabled_at in session.execute(stmt).all()
    ]


# --- disabling users (offboarding) ----------------------------------------------------------


@dataclass(frozen=True)
class UserState:
    """What :func:`set_user_disabled` did: ``changed`` is False when the user was in that state
    already. ``active_tokens``: the tokens that are neither revoked nor expired (refused while
    the user is disabled, accepted again once enabled)."""

    user: str
    disabled_at: dt.datetime | None
    changed: bool
    active_tokens: int
    web_sessions_ended: int = 0

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None


def set_user_disabled(session: Session, principal: Principal, name: str, disabled: bool) -> UserState:
    """Disable user ``name`` (or, with ``disabled=False``, enable them again); server admins only.

    Disabling refuses every token of the user from the next request on (the API, the OCI
    tokens issued for them, object reads), and ends their web sessions here. It revokes
    nothing and keeps their roles, keys and artifacts. The last server admin who is not
    disabled cannot be disabled (nobody could administer the registry over HTTP any more).
    Each change appends ``user.disabled`` or ``user.enabled``; asking for the state the user
    is in already changes nothing and appends nothing."""
    principal.require_admin()
    validate_user_name(name)
    # Disabling locks the enabled admins first, in id order, then the user: two admins
    # disabling each other at once wait for one another instead of deadlocking (PostgreSQL).
    admins = _enabled_admins(session, lock=True) if disabled else None
    user = session.scalar(select(User).where(User.name == name).with_for_update())
    if user is None:
        raise UserNotFoundError(f"no user {name!r}", hint="kvreg-admin user list")
    active = _active_tokens(session, user.id)
    if (user.disabled_at is not None) == disabled:
        return UserState(name, user.disabled_at, False, active)
    if not disabled:
        user.disabled_at = None
        audit.append(session, "user.enabled", actor=principal.name, new={"user": name})
        return UserState(name, None, True, active)
    refuse_last_admin(session, user, admins)
    user.disabled_at = utcnow()
    tokens = select(ApiToken.id).where(ApiToken.user_id == user.id)
    ended = rowcount(session.execute(delete(WebSession).where(WebSession.token_id.in_(tokens))))
    audit.append(
        session,
        "user.disabled",
        actor=principal.name,
        new={"user": name},
        details={"active_tokens": active, "web_sessions_ended": ended},
    )
    return UserState(name, user.disabled_at, True, active, ended)


def _active_tokens(session: Session, user_id: int) -> int:
    return (
        session.scalar(
            select(func.count()).where(
                ApiToken.user_id == user_id,
                ApiToken.revoked_at.is_(None),
                or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > utcnow()),
            )
        )
        or 0
    )


def _enabled_admins(session: Session, *, lock: bool) -> set[int]:
    """The ids of the server admins who are not disabled; with ``lock`` (a write transaction)
    their rows are locked in id order on PostgreSQL, so that of two admins disabling each other
    at once the second waits, then sees the first's change (READ COMMITTED reads it again)."""
    stmt = select(User.id).where(User.is_admin.is_(True), User.disabled_at.is_(None)).order_by(User.id)
    return set(session.scalars(stmt.with_for_update() if lock else stmt).all())


def refuse_last_admin(session: Session, user: User, enabled_admins: set[int] | None = None) -> None:
    """``ForbiddenError`` when ``user`` is a server admin and no other one is enabled
    (``enabled_admins``: their ids, read already; else read here, without a lock)."""
    if not user.is_admin:
        return
    if enabled_admins is None:
        enabled_admins = _enabled_admins(session, lock=False)
    if enabled_admins <= {user.id}:
        raise ForbiddenError(
            f"user {user.name!r} is the last server admin who is not disabled; disabling them would "
            "leave nobody to administer the registry over HTTP or the web UI",
            hint="create another server admin first: kvreg-admin user create NAME --admin",
        )


# --- roles --------------------------------------------------------------------------------


def set_role(session: Session, principal: Principal, namespace: str, user_name: str, role: str) -> None:
    if role not in ROLE_RANK:
        raise RequestInvalidError(f"unknown role {role!r}", hint="one of: read, write, admin")
    ns = get_namespace(session, namespace)
    principal.require(session, ns, "admin")
    user = get_user(session, user_name)
    row = session.get(Role, (user.id, ns.id))
    old = row.role if row else None
    if row is None:
        session.add(Role(user_id=user.id, namespace_id=ns.id, role=role))
    else:
        row.role = role
    audit.append(
        session,
        "role.set",
        actor=principal.name,
        namespace=namespace,
        old=old,
        new={"user": user.name, "role": role},
    )


def remove_role(session: Session, principal: Principal, namespace: str, user_name: str) -> None:
    ns = get_namespace(session, namespace)
    principal.require(session, ns, "admin")
    user = get_user(session, user_name)
    result = session.execute(delete(Role).where(Role.user_id == user.id, Role.namespace_id == ns.id))
    if rowcount(result):
        audit.append(
            session, "role.removed", actor=principal.name, namespace=namespace, old={"user": user.name}
        )


def roles_of(session: Session, principal: Principal) -> dict[str, str]:
    if principal.user_id is None:
        return {}
    rows = session.execute(
        select(Namespace.name, Role.role)
        .join(Role, Role.namespace_id == Namespace.id)
        .where(Role.user_id == principal.user_id)
    ).all()
    return {name: role for name, role in rows}


# --- signing keys ---------------------------------------------------------------------------


def list_keys(session: Session, ns: Namespace, *, include_revoked: bool = True) -> list[SigningKey]:
    stmt = select(SigningKey).where(SigningKey.namespace_id == ns.id).order_by(SigningKey.id)
    if not include_revoked:
        stmt = stmt.where(SigningKey.revoked_at.is_(None))
    return list(session.scalars(stmt).all())


def register_key(
    session: Session,
    principal: Principal,
    namespace: str,
    public_key_text: str,
    *,
    label: str = "",
    owner: str | None = None,
) -> SigningKey:
    """Accept envelopes signed by the key in ``namespace``; ``label`` names it, ``owner`` (default: the
    caller) is who it belongs to. Both are shown wherever the key signs something."""
    ns = get_namespace(session, namespace)
    principal.require(session, ns, "admin")
    key = PublicKey.from_text(public_key_text)
    existing = session.scalar(
        select(SigningKey).where(SigningKey.namespace_id == ns.id, SigningKey.keyid == key.keyid)
    )
    if existing is not None:
        if existing.revoked_at is None:
            raise AlreadyExistsError(f"key {key.keyid} is registered for {namespace!r} already")
        raise AlreadyExistsError(
            f"key {key.keyid} was revoked for {namespace!r}; a revoked key cannot be registered again",
            hint="generate a new key",
        )
    if len(label) > MAX_KEY_LABEL or KEY_LABEL_RE.fullmatch(label) is None:
        raise RequestInvalidError(
            f"a key label is at most {MAX_KEY_LABEL} characters, none of them control characters",
            hint='e.g. --label "CI signer"',
        )
    label = label.strip()
    owner = principal.name if owner is None else validate_user_name(owner)
    row = SigningKey(namespace_id=ns.id, keyid=key.keyid, public_key=key.to_text(), label=label, owner=owner)
    _add_unique(session, row, f"key {key.keyid} is registered for {namespace!r} already")
    details = {"label": label, "owner": owner} if label or owner != principal.name else None
    row.log_seq = audit.append(
        session,
        "key.registered",
        actor=principal.name,
        namespace=namespace,
        subjects=[key.keyid],
        new=key.to_text(),
        details=details,
    )
    return row


def revoke_key(session: Session, principal: Principal, namespace: str, keyid: str) -> SigningKey:
    ns = get_namespace(session, namespace)
    principal.require(session, ns, "admin")
    row = session.scalar(
        select(SigningKey).where(SigningKey.namespace_id == ns.id, SigningKey.keyid == keyid)
    )
    if row is None:
        raise KeyNotFoundError(f"no key {keyid!r} registered for {namespace!r}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        audit.append(session, "key.revoked", actor=principal.name, namespace=namespace, subjects=[keyid])
    return row


def _add_unique(session: Session, row: object, message: str) -> None:
    """Insert ``row``; ``AlreadyExistsError`` if a concurrent transaction took its key first."""
    try:
        add_in_savepoint(session, row)
    except IntegrityError as e:
        raise AlreadyExistsError(message) from e
