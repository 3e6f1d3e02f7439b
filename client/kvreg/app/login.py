"""``kvreg login`` and ``logout``: store or forget the API token of a named remote.

:func:`login` checks the token with the registry's ``whoami`` (a token naming no
user is refused) and verifies the registry's audit-log checkpoint (pinning its
key on first contact) before the token is stored; the checkpoint is saved only
then. The token is asked for (``read_token``) only once the remote is known. It
is never logged or returned. :func:`login_oci` stores a user name and password (or
token) for an OCI remote once the registry accepted them. Nothing here renders or
prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvreg.core.errors import UnauthenticatedError, UsageError
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.http import RegistryClient
from kvreg.remote.oci.client import OciClient
from kvreg.remote.remotes import BasicCredentials, Credentials, RemoteConfig, validate_token
from kvreg.store.home import Home


@dataclass(frozen=True)
class LoginReport:
    """Who the stored token authenticates as on the remote."""

    remote: str
    url: str
    user: Any
    admin: bool
    roles: dict[str, Any] = field(default_factory=dict)
    scheme: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "remote": self.remote,
            "url": self.url,
            "user": self.user,
            "admin": self.admin,
            "roles": self.roles,
        }
        if self.scheme is not None:
            data["scheme"] = self.scheme
        return data


def login(home: Home, name: str, read_token: Callable[[], str]) -> LoginReport:
    """Check the token ``read_token()`` gives with the remote ``name``'s registry, then store it."""
    remote = RemoteConfig(home).get(validate_remote_name(name))
    if remote.is_oci:
        raise UsageError(
            f"remote {name!r} is an OCI registry: it takes a user name and a password or token",
            hint=f'echo "$PASSWORD" | kvreg login {name} --username USER --password-stdin',
        )
    value = validate_token(read_token())
    with RegistryClient(remote.url, value, remote_name=name, retries=2) as client:
        who = client.whoami()
        if not isinstance(who.get("user"), str):
            raise UnauthenticatedError(
                f"the registry at {remote.url} did not recognize the token (whoami names no user)",
                hint="check the token; a registry admin creates them with: kvreg-admin token create USER",
            )
        audit = RemoteLog(home, name, client)
        audit.check()
        Credentials(home).set(name, value)
        audit.save()
    raw_roles = who.get("roles")
    return LoginReport(
        remote=name,
        url=remote.url,
        user=who.get("user"),
        admin=who.get("admin") is True,
        roles=raw_roles if isinstance(raw_roles, dict) else {},
    )


def login_oci(home: Home, name: str, username: str, read_password: Callable[[], str]) -> LoginReport:
    """Check a user name and password (or token) with the OCI remote ``name`` (``GET /v2/``, or the
    token service for a Bearer registry), then store them (mode 0600). ``UsageError`` for a
    kvreg remote; ``UnauthenticatedError`` if the registry refuses them."""
    remote = RemoteConfig(home).get(validate_remote_name(name))
    if not remote.is_oci:
        raise UsageError(
            f"remote {name!r} is a kvreg registry: it takes a token",
            hint=f"kvreg login {name} --token TOKEN",
        )
    password = read_password().strip("\r\n")
    creds = BasicCredentials(username, password, "kvreg login")
    with OciClient(remote.oci, creds, remote_name=name, retries=2) as client:
        try:
            scheme = client.check_credentials()
        except UnauthenticatedError as e:
            raise UnauthenticatedError(
                f"the registry at {remote.url} refused user {username!r} with that password or token",
                hint="check the user name and the password or token (a robot account, an access token "
                f"with the registry's scopes), then run kvreg login {name} again",
                **e.details,
            ) from e
    Credentials(home).set_basic(name, username, password)
    return LoginReport(
        remote=name, url=remote.url, user=username, admin=False, roles={}, scheme=scheme or "none"
    )


def is_oci_remote(home: Home, name: str) -> bool:
    """Whether the remote ``name`` is an OCI registry (its login takes a user name and password)."""
    return RemoteConfig(home).get(validate_remote_name(name)).is_oci


def logout(home: Home, name: str) -> bool:
    """Forget the stored token of the remote ``name``; False if none was stored (nothing is revoked)."""
    return Credentials(home).remove(validate_remote_name(name))
