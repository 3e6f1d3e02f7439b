"""The store's signing keys: generate one (and trust it here), list them, export a public half.

Keys live in ``keys/<name>.key`` (PEM PKCS#8, mode 0600) with the public half in
``<name>.pub`` (``ed25519:<base64>``); the file helpers are :mod:`kvreg.app.keyring`'s.
:func:`generate_key` also trusts the new key for every namespace (``"*"``) in this
store's trust policy unless told not to. This module renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app import keyring
from kvreg.core.errors import KeyFileError
from kvreg.core.keys import SigningKey
from kvreg.core.trust import WILDCARD, TrustPolicy
from kvreg.fileio.atomicfile import atomic_write_bytes
from kvreg.fileio.keyfiles import load_trust_policy, save_signing_key, save_trust_policy
from kvreg.store.home import Home


@dataclass(frozen=True)
class GeneratedKey:
    name: str
    keyid: str
    public_key: str
    path: Path
    trusted_for: list[str]
    trust_path: Path

    @property
    def trusted(self) -> bool:
        return bool(self.trusted_for)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "keyid": self.keyid,
            "public_key": self.public_key,
            "path": str(self.path),
            "trusted_for": self.trusted_for,
        }


@dataclass(frozen=True)
class KeyEntry:
    name: str
    keyid: str
    public_key: str
    private: bool  # the private half (.key) is here too
    trusted_for: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "keyid": self.keyid,
            "public_key": self.public_key,
            "private": self.private,
            "trusted_for": self.trusted_for,
        }


@dataclass(frozen=True)
class KeyList:
    keys: list[KeyEntry]
    keys_dir: Path

    def to_dict(self) -> dict[str, Any]:
        return {"keys": [k.to_dict() for k in self.keys]}


@dataclass(frozen=True)
class ExportedKey:
    name: str
    keyid: str
    public_key: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "keyid": self.keyid, "public_key": self.public_key}


def generate_key(home: Home, name: str, *, force: bool = False, trust: bool = True) -> GeneratedKey:
    """Create the store and key ``name`` (``force`` replaces one); with ``trust``, trust it for ``*``."""
    home.ensure()
    path = keyring.key_path(home, name)
    if path.exists() and not force:
        raise KeyFileError(
            f"a key named {name!r} exists already ({path})",
            hint="use --force to replace it (the old key is lost), or choose another --name",
        )
    key = SigningKey.generate()
    save_signing_key(key, path, overwrite=force)
    public = key.public_key
    atomic_write_bytes(keyring.pub_path(home, name), (public.to_text() + "\n").encode("ascii"), mode=0o644)
    if trust:
        policy = load_trust_policy(home.trust_path)
        policy.allow(WILDCARD, public)
        save_trust_policy(policy, home.trust_path)
    return GeneratedKey(
        name=name,
        keyid=public.keyid,
        public_key=public.to_text(),
        path=path,
        trusted_for=[WILDCARD] if trust else [],
        trust_path=home.trust_path,
    )


def _trusted_for(policy: TrustPolicy, keyid: str) -> list[str]:
    return [pattern for pattern, keys in policy.namespaces().items() if any(k.keyid == keyid for k in keys)]


def list_keys(home: Home) -> KeyList:
    """Every key in ``keys/``, with whether its private half is here and where it is trusted."""
    policy = load_trust_policy(home.trust_path)
    entries = [
        KeyEntry(
            name=name,
            keyid=public.keyid,
            public_key=public.to_text(),
            private=keyring.key_path(home, name).exists(),
            trusted_for=_trusted_for(policy, public.keyid),
        )
        for name, public in keyring.local_public_keys(home).items()
    ]
    return KeyList(entries, home.keys_dir)


def export_key(home: Home, name: str) -> ExportedKey:
    """The public half of key ``name``; ``KeyFileError`` when there is none."""
    public = keyring.local_public_keys(home).get(keyring.validate_key_name(name))
    if public is None:
        raise KeyFileError(
            f"no key named {name!r} in {home.keys_dir}", hint="list them with: kvreg keys list"
        )
    return ExportedKey(name, public.keyid, public.to_text())
