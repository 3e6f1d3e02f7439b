"""``kvreg remote add|list|remove``: the store's named registries, and the audit-log key pinned for each.

:func:`add_remote` holds the key-pinning policy. Adding a remote contacts
nothing: the first contact pins the registry's audit-log key, or ``log_key`` (a
key learned out of band) pins one now. A new remote, or ``replace=True``,
forgets any pin left for the name (changing a pin is a human decision); without
``replace``, ``log_key`` may not contradict the key already pinned for an
existing remote. :func:`remove_remote` forgets the remote with its pin and
checkpoint. Nothing here contacts a registry, renders or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreg.core.errors import AlreadyExistsError, NotFoundError
from kvreg.core.logverify import parse_log_key
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.remotes import Credentials, RemoteConfig, parse_age
from kvreg.store.audit_state import RemoteLogStore
from kvreg.store.home import Home


@dataclass(frozen=True)
class RemoteAdded:
    """What ``remote add`` stored. ``max_checkpoint_age`` is None unless it was given;
    ``log_key`` is the key pinned now, if any; ``forgot_pinned_log``: an earlier pin was forgotten."""

    name: str
    url: str
    max_checkpoint_age: int | None = None
    log_key: str | None = None
    forgot_pinned_log: bool = False

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "url": self.url}
        if self.max_checkpoint_age is not None:
            data["max_checkpoint_age"] = self.max_checkpoint_age
        if self.log_key is not None:
            data["log_key"] = self.log_key
        if self.forgot_pinned_log:
            data["forgot_pinned_log"] = True
        return data


@dataclass(frozen=True)
class RemoteRow:
    """One configured remote, and whether a token is stored for it."""

    name: str
    url: str
    logged_in: bool

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "logged_in": self.logged_in}


@dataclass(frozen=True)
class RemoteRemoved:
    """The remote ``remote remove`` forgot."""

    name: str
    url: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "removed": True}


def add_remote(
    home: Home,
    name: str,
    url: str,
    *,
    replace: bool = False,
    log_key: str | None = None,
    max_checkpoint_age: str | None = None,
) -> RemoteAdded:
    """Add (or with ``replace``, change) the remote ``name``; ``log_key`` (``NAME+ID+KEY``) pins the
    registry's audit-log key, ``max_checkpoint_age`` (``90s``, ``24h``, ``off``...) is how old a signed
    checkpoint may be. ``AlreadyExistsError`` when ``log_key`` contradicts the existing pin."""
    config, pins = RemoteConfig(home), RemoteLogStore(home)
    validate_remote_name(name)
    if log_key is not None:
        log_key = parse_log_key(log_key).to_text()
    max_age = None if max_checkpoint_age is None else parse_age(max_checkpoint_age)
    try:
        existed = config.get(name).url
    except NotFoundError:
        existed = None
    if log_key is not None and existed is not None and not replace:
        pinned = pins.load(name)
        if pinned is not None and pinned.verifier.to_text() != log_key:
            raise AlreadyExistsError(
                f"remote {name!r} has another audit-log key pinned ({pinned.verifier.to_text()})",
                hint="changing it is a deliberate decision: "
                f"kvreg remote add {name} URL --replace --log-key KEY",
                remote=name,
            )
    remote = config.add(name, url, replace=replace, max_checkpoint_age=max_age)
    forgot = pins.reset(name) if existed is None or replace else False
    pinned_key = None
    if log_key is not None:
        pinned_key = pins.pin(name, remote.url, log_key).verifier.to_text()
    return RemoteAdded(
        name=remote.name,
        url=remote.url,
        max_checkpoint_age=None if max_age is None else remote.max_checkpoint_age,
        log_key=pinned_key,
        forgot_pinned_log=forgot,
    )


def list_remotes(home: Home) -> list[RemoteRow]:
    """The configured remotes, in the config's order."""
    remotes = RemoteConfig(home).list()
    logged_in = set(Credentials(home).names()) if remotes else set()
    return [RemoteRow(r.name, r.url, r.name in logged_in) for r in remotes]


def remove_remote(home: Home, name: str) -> RemoteRemoved:
    """Remove the remote ``name`` (and its stored token, pinned audit-log key and checkpoint)."""
    remote = RemoteConfig(home).remove(name)
    RemoteLogStore(home).reset(name)
    return RemoteRemoved(remote.name, remote.url)
