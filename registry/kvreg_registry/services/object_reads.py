"""The one statement behind an object's ``GET`` and ``HEAD``: the caller, the namespace, the role
and the object's size, read together.

A pull asks for every object of an artifact in turn, so this read is the registry's most
frequent. Done the general way (``auth.authenticate``, ``accounts.readable_namespace``,
``Principal.role_in``, ``objects.held_size``) it takes four statements, each built anew
through the ORM: about 3 ms of the server's CPU per object on a 2 GHz core, about what the
kernel spends sending 16 MiB (docs/benchmarks-history.md, "Push and pull", item 24).
Here one prebuilt Core statement reads the same rows (about 0.4 ms).

This module only ever *grants*: :func:`readable_object` answers with the caller and the
size when the token is known and usable, the caller may read the namespace and the
namespace holds the object, and ``None`` otherwise, without saying why. On ``None`` the
caller takes the general way in the same transaction, which raises the error the API
documents (401, 403, 404, in its order), so the fast path can never answer differently
from it. It checks nothing the general way does not check, and reads no bearer token:
the token's SHA-256 is what it is given.
"""

from __future__ import annotations

import datetime as dt
import hmac
from dataclasses import dataclass

from sqlalchemy import and_, bindparam, select
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import UnauthenticatedError
from kvreg_registry.auth import Principal, principal_of, role_grants
from kvreg_registry.db.models import ApiToken, Namespace, NamespaceObject, Role, StoredObject, User

__all__ = ["readable_object"]

_tokens, _users, _namespaces = ApiToken.__table__, User.__table__, Namespace.__table__
_roles, _held, _objects = Role.__table__, NamespaceObject.__table__, StoredObject.__table__

# Built once: a statement built per request costs more than running it. Every join is an
# outer join from the namespace's row, so a row comes back whenever the namespace exists
# and each missing piece (token, role, object) reads as NULL.
_STATEMENT = (
    select(
        _tokens.c.id.label("token_id"),
        _tokens.c.token_hash,
        _tokens.c.revoked_at,
        _tokens.c.expires_at,
        _tokens.c.last_used_at,
        _users.c.id.label("user_id"),
        _users.c.name.label("user_name"),
        _users.c.is_admin,
        _users.c.disabled_at,
        _namespaces.c.id.label("namespace_id"),
        _namespaces.c.public,
        _roles.c.role,
        _objects.c.size,
    )
    .select_from(
        _namespaces.outerjoin(_tokens, _tokens.c.token_hash == bindparam("token_hash"))
        .outerjoin(_users, _users.c.id == _tokens.c.user_id)
        .outerjoin(_roles, and_(_roles.c.user_id == _users.c.id, _roles.c.namespace_id == _namespaces.c.id))
        .outerjoin(
            _held, and_(_held.c.namespace_id == _namespaces.c.id, _held.c.digest == bindparam("digest"))
        )
        .outerjoin(_objects, _objects.c.digest == _held.c.digest)
    )
    .where(_namespaces.c.name == bindparam("namespace"))
)


@dataclass(frozen=True, slots=True)
class _TokenColumns:
    id: int
    revoked_at: dt.datetime | None
    expires_at: dt.datetime | None
    last_used_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class _UserColumns:
    id: int
    name: str
    is_admin: bool
    disabled_at: dt.datetime | None


def readable_object(
    session: Session, token_hash: str | None, namespace: str, digest: Digest
) -> tuple[Principal, int] | None:
    """The caller and the size of ``digest`` when the caller (the token whose SHA-256 is
    ``token_hash``; ``None``: anonymous) may read ``namespace`` and it holds the object;
    ``None`` in every other case (the caller then asks the general way, which says why)."""
    row = session.execute(
        _STATEMENT, {"token_hash": token_hash, "namespace": namespace, "digest": str(digest)}
    ).first()
    if row is None or row.size is None:
        return None
    if token_hash is None:
        principal = Principal()
    else:
        # compare_digest on the hashes keeps the final check constant-time, as auth.authenticate does.
        if row.token_id is None or row.user_id is None or not hmac.compare_digest(row.token_hash, token_hash):
            return None
        token = _TokenColumns(row.token_id, row.revoked_at, row.expires_at, row.last_used_at)
        user = _UserColumns(row.user_id, row.user_name, row.is_admin, row.disabled_at)
        try:
            principal = principal_of(token, user)
        except UnauthenticatedError:
            return None
        principal.knows_role(row.namespace_id, row.role)
    if not (row.public or role_grants(principal.known_role(row.namespace_id), "read")):
        return None
    return principal, int(row.size)
