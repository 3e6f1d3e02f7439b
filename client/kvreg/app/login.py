"""``kvreg login`` and ``logout``: store or forget the API token of a named remote.

:func:`login` checks the token with the registry's ``whoami`` (a token naming no
user is refused) and verifies the registry's audit-log checkpoint (pinning its
key on first contact) before the token is stored; the checkpoint is saved only
then. The token is asked for (``read_token``) only once the remote is known. It
is never logged or returned. Nothing here renders or prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvreg.core.errors import UnauthenticatedError
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.http import RegistryClient
from kvreg.remote.remotes import Credentials, RemoteConfig, validate_token
from kvreg.store.home import Home


@dataclass(frozen=True)
class LoginReport:
    """Who the stored token authenticates as on the remote."""

    remote: str
    url: str
    user: Any
    admin: bool
    roles: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "remote": self.remote,
            "url": self.url,
            "user": self.user,
            "admin": self.admin,
            "roles": self.roles,
        }


def login(home: Home, name: str, read_token: Callable[[], str]) -> LoginReport:
    """Check the token ``read_token()`` gives with the remote ``name``'s registry, then store it."""
    remote = RemoteConfig(home).get(validate_remote_name(name))
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


def logout(home: Home, name: str) -> bool:
    """Forget the stored token of the remote ``name``; False if none was stored (nothing is revoked)."""
    return Credentials(home).remove(validate_remote_name(name))
