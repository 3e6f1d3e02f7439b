"""The store's trust policy (``trust.json``): trust a key for a namespace, list, stop trusting.

A namespace is a namespace name or ``*`` (every namespace); the policy itself is
:class:`kvreg.core.trust.TrustPolicy`, its file :mod:`kvreg.fileio.keyfiles`'.
This module renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app import keyring
from kvreg.core.keys import PublicKey
from kvreg.fileio.keyfiles import load_trust_policy, read_public_key, save_trust_policy
from kvreg.store.home import Home


@dataclass(frozen=True)
class TrustedKey:
    namespace: str
    keyid: str
    public_key: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "keyid": self.keyid, "public_key": self.public_key}


@dataclass(frozen=True)
class TrustEntry:
    namespace: str
    keyid: str
    public_key: str
    local_key: str | None  # the name of this store's key with that id, if any

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "keyid": self.keyid,
            "public_key": self.public_key,
            "local_key": self.local_key,
        }


@dataclass(frozen=True)
class TrustList:
    entries: list[TrustEntry]
    trust_path: Path

    def to_dict(self) -> dict[str, Any]:
        return {"trust": [e.to_dict() for e in self.entries]}


@dataclass(frozen=True)
class Untrusted:
    namespace: str
    keyid: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "keyid": self.keyid, "removed": True}


def trust_key(home: Home, namespace: str, pubkey: str) -> TrustedKey:
    """Trust ``pubkey`` (``ed25519:...`` or a .pub or PEM file) to sign for ``namespace``."""
    public = read_public_key(pubkey)
    policy = load_trust_policy(home.trust_path)
    policy.allow(namespace, public)
    home.root.mkdir(parents=True, exist_ok=True)
    save_trust_policy(policy, home.trust_path)
    return TrustedKey(namespace, public.keyid, public.to_text())


def list_trust(home: Home) -> TrustList:
    """Every trusted key per namespace, named when it is one of this store's keys."""
    policy = load_trust_policy(home.trust_path)
    local = {p.keyid: name for name, p in keyring.local_public_keys(home).items()}
    entries = [
        TrustEntry(pattern, key.keyid, key.to_text(), local.get(key.keyid))
        for pattern, keys in policy.namespaces().items()
        for key in keys
    ]
    return TrustList(entries, home.trust_path)


def untrust(home: Home, namespace: str, keyid: str) -> Untrusted:
    """Stop trusting ``keyid`` (``sha256:...``, or the ``ed25519:...`` key) for ``namespace``."""
    if keyid.startswith("ed25519:"):
        keyid = PublicKey.from_text(keyid).keyid
    policy = load_trust_policy(home.trust_path)
    policy.remove(namespace, keyid)
    save_trust_policy(policy, home.trust_path)
    return Untrusted(namespace, keyid)
