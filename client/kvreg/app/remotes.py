"""``kvreg remote add|list|remove``: the store's named registries, and the audit-log key pinned for each.

:func:`add_remote` holds the key-pinning policy. Adding a remote contacts
nothing: the first contact pins the registry's audit-log key, or ``log_key`` (a
key learned out of band) pins one now. A new remote, or ``replace=True``,
forgets any pin left for the name (changing a pin is a human decision); without
``replace``, ``log_key`` may not contradict the key already pinned for an
existing remote. :func:`remove_remote` forgets the remote with its pin and
checkpoint. :func:`show_remote` says everything about one remote; for an OCI
registry (``oci://``) what it cannot give (:data:`OCI_LIMITATIONS`) and what the
client recovers instead (its tag history, ``kvreg.store.tag_history``). Nothing
here contacts a registry, renders or prints.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvreg.core.errors import AlreadyExistsError, NotFoundError, UsageError
from kvreg.core.logverify import parse_log_key
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.oci.client import credentials_for
from kvreg.remote.remotes import TOKEN_ENV_VAR, Credentials, RemoteConfig, parse_age
from kvreg.store.audit_state import RemoteLogStore
from kvreg.store.home import Home
from kvreg.store.tag_history import TagHistory


@dataclass(frozen=True)
class RemoteAdded:
    """What ``remote add`` stored. ``max_checkpoint_age`` is None unless it was given;
    ``log_key`` is the key pinned now, if any; ``forgot_pinned_log``: an earlier pin was forgotten."""

    name: str
    url: str
    max_checkpoint_age: int | None = None
    log_key: str | None = None
    forgot_pinned_log: bool = False
    kind: str = "kvreg"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "url": self.url}
        if self.kind != "kvreg":
            data["kind"] = self.kind
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
    insecure: bool = False,
    force_insecure: bool = False,
) -> RemoteAdded:
    """Add (or with ``replace``, change) the remote ``name``; ``log_key`` (``NAME+ID+KEY``) pins the
    registry's audit-log key, ``max_checkpoint_age`` (``90s``, ``24h``, ``off``...) is how old a signed
    checkpoint may be. ``AlreadyExistsError`` when ``log_key`` contradicts the existing pin.
    ``oci://HOST[:PORT]/PREFIX`` adds an OCI registry (no audit log: ``log_key`` and
    ``max_checkpoint_age`` do not apply); ``insecure``: plain HTTP, loopback only unless
    ``force_insecure``."""
    if isinstance(url, str) and url.strip().lower().startswith("oci://") and log_key is not None:
        raise UsageError("an OCI registry has no audit log: --log-key does not apply")
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
    remote = config.add(
        name,
        url,
        replace=replace,
        max_checkpoint_age=max_age,
        insecure=insecure,
        force_insecure=force_insecure,
    )
    forgot = pins.reset(name) if existed is None or replace else False
    pinned_key = None
    if log_key is not None:
        pinned_key = pins.pin(name, remote.url, log_key).verifier.to_text()
    if remote.is_oci and (existed is None or replace):
        TagHistory(home, name).forget()
    return RemoteAdded(
        name=remote.name,
        url=remote.url,
        kind=remote.kind,
        max_checkpoint_age=None if max_age is None else remote.max_checkpoint_age,
        log_key=pinned_key,
        forgot_pinned_log=forgot,
    )


#: What an OCI remote cannot give, as ``kvreg remote show`` states it (docs/security.md).
OCI_LIMITATIONS = (
    "no transparency log: nothing proves the registry's history, so it cannot show that a tag was "
    "never moved back to an older signed artifact, nor that it is not frozen on an old state",
    "no graft receipts: kvreg graft --receipt and kvreg engine serve --receipts need a kvreg registry",
    "no routing by block keys: kvreg ask routes over the local store only and the refs it is told",
    "no server-side checks: the registry stores what it is sent; kvreg verifies every signature "
    "against this store's trust policy, and every blob against its digest, when it pulls",
)


@dataclass(frozen=True)
class RemoteShown:
    """What ``remote show`` says of one remote: where it is, where its credentials come from,
    and for an OCI remote what it cannot give and what the client recovers instead."""

    name: str
    url: str
    kind: str
    credentials: str
    insecure: bool = False
    max_checkpoint_age: int | None = None
    log_key: str | None = None
    limitations: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def show_remote(home: Home, name: str) -> RemoteShown:
    """The remote ``name`` in full (contacts nothing; may run a Docker credential helper)."""
    remote = RemoteConfig(home).get(name)
    if not remote.is_oci:
        auth = Credentials(home).auth_for(name)
        pinned = RemoteLogStore(home).load(name)
        return RemoteShown(
            name=remote.name,
            url=remote.url,
            kind=remote.kind,
            credentials="none" if auth is None else f"token ({_source(home, auth.source)})",
            max_checkpoint_age=remote.max_checkpoint_age,
            log_key=None if pinned is None else pinned.verifier.to_text(),
        )
    creds = credentials_for(home, remote)
    history = TagHistory(home, name)
    tags = sum(len(v) > 0 for v in history.repositories().values())
    recovered = [
        f"rollback detection by the client: {history.path} records the kvreg manifests seen per "
        "repository and tag, with their creation times; a pull that finds a tag moved back to one seen "
        f"and replaced, or to an older artifact, is refused (exit 3; --allow-rollback overrides). "
        f"Repositories recorded: {tags}",
        "immutable tags: kvreg push --tag marks the artifact dev.kvreg.immutable and kvreg refuses to move "
        "it (the registry enforces nothing unless its own tag immutability is configured)",
        "signatures: DSSE envelopes travel as OCI referrers (or the sha256-<hex> referrers tag) and are "
        "verified against the local trust policy before any chunk is downloaded",
    ]
    return RemoteShown(
        name=remote.name,
        url=remote.url,
        kind=remote.kind,
        credentials="none (anonymous)"
        if creds is None
        else (
            f"user {creds.username} ({_source(home, creds.source)})"
            if creds.username
            else f"identity token ({_source(home, creds.source)})"
        ),
        insecure=remote.insecure,
        limitations=list(OCI_LIMITATIONS),
        recovered=recovered,
    )


def _source(home: Home, source: str) -> str:
    """Where credentials come from, in words: ``kvreg login``'s file is named as such."""
    if source == "credentials":
        return f"kvreg login, {Credentials(home).path}"
    return f"${TOKEN_ENV_VAR}" if source == "env" else source


def list_remotes(home: Home) -> list[RemoteRow]:
    """The configured remotes, in the config's order."""
    remotes = RemoteConfig(home).list()
    logged_in = set(Credentials(home).names()) if remotes else set()
    return [RemoteRow(r.name, r.url, r.name in logged_in) for r in remotes]


def remove_remote(home: Home, name: str) -> RemoteRemoved:
    """Remove the remote ``name`` (and its stored token, pinned audit-log key and checkpoint)."""
    remote = RemoteConfig(home).remove(name)
    RemoteLogStore(home).reset(name)
    TagHistory(home, name).forget()
    return RemoteRemoved(remote.name, remote.url)
