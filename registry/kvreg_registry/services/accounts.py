"""Namespaces, users, API tokens, roles and the signing keys registered per namespace."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kvreg.core.errors import (
    AlreadyExistsError,
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
from kvreg_registry.db.models import ApiToken, Namespace, Role, SigningKey, User, utcnow

MAX_KEY_LABEL = 200
#: A key label: no control characters (``api.params.KEY_LABEL_PATTERN`` publishes it).
KEY_LABEL_RE = re.compile(r"[^\x00-\x1f\x7f-\x9f]*")
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
    if session.scalar(select(Namespace.id).where(Namespace.name == name)) is not None:
        raise AlreadyExistsError(f"namespace {name!r} exists already")
    ns = Namespace(name=name, public=public, description=description)
    _add_unique(session, ns, f"namespace {name!r} exists already")
    audit.append(
        session,
        "namespace.created",
        actor=principal.name,
        namespace=name,
        new={"public": public, "description": description},
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
    if expires_in_days is not None and expires_in_days < 1:
        raise RequestInvalidError("expires_in_days must be at least 1")
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


def revoke_token(session: Session, principal: Principal, token_id: int) -> None:
    row = session.get(ApiToken, token_id)
    if row is None:
        raise TokenNotFoundError(f"no token {token_id}")
    if principal.user_id != row.user_id:
        principal.require_admin()
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        audit.append(session, "token.revoked", actor=principal.name, old={"token_id": token_id})


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
