"""The scoped tokens of the ``/v2/`` token flow: the scopes asked for, what is granted, the JWT.

``GET /v2/token?service=kvreg&scope=repository:NAME:pull`` answers a short-lived token that
covers the repositories and actions asked for, as far as the caller may have them (the
Docker registry token specification): :func:`parse_scopes` reads the scopes,
:func:`grant` decides, :func:`issue` signs and :func:`verify` checks.

- **What is granted**: ``pull`` of a repository ``<ns>`` or ``<ns>/<name>`` (the per-ref
  repository) whose namespace the caller may read at issue time (``accounts.readable_namespace``:
  a public namespace for anyone, a private one with the ``read`` role); nothing else, ever
  (``push``, ``delete``, ``*``, other resource types such as ``registry:catalog:*``). Each
  resource asked for is listed in the token's ``access`` with the actions granted, possibly
  none: a token lists what its holder asked for, so a repository it does not list is one to
  ask a new token for (``insufficient_scope``), while one listed without ``pull`` was refused.
- **The token**: a JWT (PyJWT), HS256 with a 32-byte key derived by HKDF-SHA256 from the
  registry's audit-log signing key (:func:`signing_secret`; the ``info`` label keeps it apart
  from the log's own use of that key), so that every process of one registry, which all read
  the same key file, issues and accepts the same tokens. Claims: ``iss`` (the log's origin,
  which names the registry), ``aud`` ``kvreg``, ``sub`` (the user, ``""`` when anonymous),
  ``token_id`` (the kvreg API token it was issued for, null when anonymous), ``access``,
  ``iat``, ``nbf``, ``exp``, ``jti``.
- **Verification**: signature, ``iss``, ``aud`` and ``exp``/``nbf`` with
  :data:`LEEWAY_SECONDS` for clock skew between processes, then the claims' shapes. Whether
  the API token is still valid is the caller's check (``api.oci_auth``), on every request.

This module reads the database only through ``accounts`` in :func:`grant` and knows no HTTP
but its errors (``OciError``).
"""

from __future__ import annotations

import functools
import re
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy.orm import Session

from kvreg.core import oci
from kvreg.core.errors import KvregError
from kvreg.core.keys import SigningKey
from kvreg_registry.api.oci_errors import SERVICE, OciError
from kvreg_registry.auth import Principal
from kvreg_registry.services import accounts

ALGORITHM = "HS256"
AUDIENCE = SERVICE
#: HKDF's ``info``: what the derived key is for (never the log's own signatures).
HKDF_INFO = b"kvreg registry: HS256 key of the OCI /v2/ scoped tokens"
#: Clock skew tolerated between the process that issued a token and the one that checks it.
LEEWAY_SECONDS = 30
#: The most resource scopes one token request may name.
MAX_SCOPES = 32
#: The longest resource scope (``type:name:actions``) accepted.
MAX_SCOPE_CHARS = 256
REPOSITORY = "repository"
PULL = "pull"

# The Docker token specification's grammar, with a resource name of any printable ASCII but
# quotes, backslashes and separators; the name may hold ``:`` (a registry host's port).
_TYPE = re.compile(r"[a-z0-9]+(?:\([a-z0-9]+\))?", re.ASCII)
_NAME = re.compile(r"[A-Za-z0-9._/:-]+", re.ASCII)
_ACTIONS = re.compile(r"(?:[a-z*]*)(?:,[a-z*]*)*", re.ASCII)


class InvalidOciToken(Exception):
    """A token that is not one of this registry's, is malformed, or has expired."""


@dataclass(frozen=True)
class Access:
    """One entry of a token's ``access``: a resource and the actions on it."""

    type: str
    name: str
    actions: tuple[str, ...]

    def claim(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "actions": list(self.actions)}


@dataclass(frozen=True)
class Claims:
    """What a verified token says."""

    subject: str
    token_id: int | None
    access: tuple[Access, ...]
    issued_at: int
    expires_at: int

    def pull_of(self, repository: str) -> bool | None:
        """Whether the token grants ``pull`` of ``repository``; ``None`` if it does not name it."""
        listed = [a for a in self.access if a.type == REPOSITORY and a.name == repository]
        if not listed:
            return None
        return any(PULL in a.actions for a in listed)


def _bad(field: str, message: str) -> OciError:
    return OciError(400, "UNSUPPORTED", f"{field}: {message}", detail={"field": field})


def parse_scopes(values: Iterable[str]) -> list[Access]:
    """The resource scopes of a token request (``scope`` may repeat, and a value may hold
    several separated by spaces), merged per resource; ``OciError`` 400 naming ``scope`` for
    a malformed one or more than :data:`MAX_SCOPES`."""
    merged: dict[tuple[str, str], list[str]] = {}
    count = 0
    for value in values:
        for scope in value.split(" "):
            if not scope:
                continue
            count += 1
            if count > MAX_SCOPES:
                raise _bad("scope", f"at most {MAX_SCOPES} resource scopes per token request")
            kind, name, actions = _parse_scope(scope)
            wanted = merged.setdefault((kind, name), [])
            wanted.extend(a for a in actions if a not in wanted)
    return [Access(kind, name, tuple(actions)) for (kind, name), actions in merged.items()]


def _parse_scope(scope: str) -> tuple[str, str, list[str]]:
    shown = scope if len(scope) <= 80 else scope[:77] + "..."
    kind, sep, rest = scope.partition(":")
    name, sep2, actions = rest.rpartition(":")
    if (
        len(scope) > MAX_SCOPE_CHARS
        or not sep
        or not sep2
        or _TYPE.fullmatch(kind) is None
        or _NAME.fullmatch(name) is None
        or _ACTIONS.fullmatch(actions) is None
    ):
        raise _bad("scope", f"{shown!r} is not a resource scope (type:name:action[,action...])")
    return kind, name, [a for a in actions.split(",") if a]


def may_pull(session: Session, who: Principal, repository: str) -> bool:
    """Whether ``who`` may pull ``repository`` now: ``<ns>`` or ``<ns>/<name>`` (a ref name that
    is an OCI tag) of a namespace ``who`` may read."""
    ns, slash, name = repository.partition("/")
    try:
        if slash:
            oci.tag_for(name)  # InvalidNameError for a name with another "/" or not a tag
        accounts.readable_namespace(session, who, ns, "read")
    except KvregError:  # an invalid name, a missing namespace or one the caller may not read
        return False
    return True


def grant(session: Session, who: Principal, requested: Sequence[Access]) -> list[Access]:
    """Each resource asked for, with the actions granted: ``pull`` of a repository ``who`` may
    pull, nothing else (an empty list of actions for the rest)."""
    granted = []
    for access in requested:
        pull = access.type == REPOSITORY and PULL in access.actions and may_pull(session, who, access.name)
        granted.append(Access(access.type, access.name, (PULL,) if pull else ()))
    return granted


@functools.lru_cache(maxsize=8)
def signing_secret(log_key: SigningKey) -> bytes:
    """The tokens' HS256 key: HKDF-SHA256 of the log key (its PKCS#8 encoding, which is
    deterministic), with :data:`HKDF_INFO` as ``info``."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO).derive(log_key.to_pem())


def issue(
    secret: bytes,
    *,
    issuer: str,
    subject: str,
    token_id: int | None,
    access: Sequence[Access],
    lifetime: int,
    now: float | None = None,
) -> str:
    """A signed token for ``access``, valid ``lifetime`` seconds from ``now`` (default: the
    current time; a past ``now`` makes an expired token, for tests)."""
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": subject,
        "token_id": token_id,
        "access": [a.claim() for a in access],
        "iat": issued,
        "nbf": issued,
        "exp": issued + lifetime,
        "jti": secrets.token_urlsafe(16),
    }
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify(secret: bytes, token: str, *, issuer: str) -> Claims:
    """The claims of ``token`` if this registry signed it and it is valid now (with
    :data:`LEEWAY_SECONDS`); ``InvalidOciToken`` otherwise."""
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            audience=AUDIENCE,
            issuer=issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["iss", "aud", "sub", "iat", "nbf", "exp", "jti"]},
        )
    except jwt.ExpiredSignatureError:
        raise InvalidOciToken("the token has expired") from None
    except jwt.InvalidTokenError:
        raise InvalidOciToken("the token is not one this registry issued, or is malformed") from None
    try:
        return _claims(claims)
    except (KeyError, TypeError, ValueError):
        raise InvalidOciToken("the token's claims are malformed") from None


def _claims(claims: dict[str, Any]) -> Claims:
    subject, token_id, access = claims["sub"], claims["token_id"], claims["access"]
    if not isinstance(subject, str) or not isinstance(access, list):
        raise TypeError("sub and access")
    if token_id is not None and (type(token_id) is not int or token_id < 1):
        raise TypeError("token_id")
    entries = []
    for entry in access:
        kind, name, actions = entry["type"], entry["name"], entry["actions"]
        if not isinstance(actions, list) or not all(isinstance(x, str) for x in (kind, name, *actions)):
            raise TypeError("access")
        entries.append(Access(kind, name, tuple(actions)))
    return Claims(subject, token_id, tuple(entries), int(claims["iat"]), int(claims["exp"]))
