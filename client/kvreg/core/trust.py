"""Trust policy: which public keys may sign manifests for which namespace.

A policy maps a namespace (``aime25``) or the wildcard ``"*"`` to a list of
Ed25519 public keys. The keys trusted for a namespace are its own plus the
wildcard's. On disk (``kvreg.fileio.keyfiles``) it is one JSON file::

    {"namespaces": {"*": ["ed25519:..."], "aime25": ["ed25519:..."]}, "version": 1}

(canonical JSON, keys listed in the order they were allowed). A missing file is an
empty policy; a malformed one raises ``ConfigError`` rather than being treated as
empty, so a damaged policy can never silently trust nothing or everything.

This module stores and answers questions about trust; it does not verify
signatures (``kvreg.core.envelope`` does, using ``keys_for``) and does not fetch
keys from anywhere.
"""

from __future__ import annotations

from typing import Any

from kvreg.core.canonical import canonical_json, parse_json_object
from kvreg.core.errors import ConfigError, KeyFileError, KvregError, NotFoundError
from kvreg.core.keys import PublicKey
from kvreg.core.names import validate_namespace

__all__ = ["POLICY_VERSION", "WILDCARD", "TrustPolicy"]

POLICY_VERSION = 1
WILDCARD = "*"
MAX_POLICY_BYTES = 4 * 1024 * 1024


def _check_pattern(pattern: str) -> str:
    if pattern == WILDCARD:
        return pattern
    return validate_namespace(pattern)


class TrustPolicy:
    """Namespace patterns to allowed public keys (deduplicated by keyid, ordered)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: dict[str, list[PublicKey]] | None = None) -> None:
        self._entries: dict[str, list[PublicKey]] = {}
        for pattern, keys in (entries or {}).items():
            for key in keys:
                self.allow(pattern, key)

    # --- questions ------------------------------------------------------------

    def keys_for(self, namespace: str) -> list[PublicKey]:
        """Keys trusted for ``namespace``: its own, then the wildcard's (no duplicates)."""
        _check_pattern(namespace)
        out: list[PublicKey] = []
        seen: set[str] = set()
        for pattern in (namespace, WILDCARD):
            for key in self._entries.get(pattern, []):
                if key.keyid not in seen:
                    seen.add(key.keyid)
                    out.append(key)
        return out

    def all_keys(self) -> list[PublicKey]:
        """Every key in the policy, whatever it is trusted for (no duplicates)."""
        out: list[PublicKey] = []
        seen: set[str] = set()
        for keys in self._entries.values():
            for key in keys:
                if key.keyid not in seen:
                    seen.add(key.keyid)
                    out.append(key)
        return out

    def namespaces(self) -> dict[str, list[PublicKey]]:
        """A copy of the mapping, patterns sorted."""
        return {pattern: list(self._entries[pattern]) for pattern in sorted(self._entries)}

    def is_empty(self) -> bool:
        return not self._entries

    # --- changes --------------------------------------------------------------

    def allow(self, namespace: str, public_key: PublicKey) -> None:
        """Trust ``public_key`` for ``namespace`` (or ``"*"``). Idempotent."""
        pattern = _check_pattern(namespace)
        if not isinstance(public_key, PublicKey):
            raise KeyFileError(f"expected a PublicKey, not {type(public_key).__name__}")
        keys = self._entries.setdefault(pattern, [])
        if all(k.keyid != public_key.keyid for k in keys):
            keys.append(public_key)

    def remove(self, namespace: str, keyid: str) -> None:
        """Stop trusting the key ``keyid`` for ``namespace``; ``NotFoundError`` if it was not."""
        pattern = _check_pattern(namespace)
        keys = self._entries.get(pattern, [])
        kept = [k for k in keys if k.keyid != keyid]
        if len(kept) == len(keys):
            raise NotFoundError(f"key {keyid} is not trusted for {pattern!r}")
        if kept:
            self._entries[pattern] = kept
        else:
            del self._entries[pattern]

    # --- serialization --------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": POLICY_VERSION,
            "namespaces": {p: [k.to_text() for k in keys] for p, keys in sorted(self._entries.items())},
        }

    def to_json_bytes(self) -> bytes:
        return canonical_json(self.to_dict()) + b"\n"

    @classmethod
    def from_json_bytes(cls, data: bytes, *, source: str = "trust policy") -> TrustPolicy:
        doc = parse_json_object(data, what=source, max_bytes=MAX_POLICY_BYTES, error=ConfigError)
        version = doc.get("version")
        if type(version) is not int or version != POLICY_VERSION:
            raise ConfigError(f"{source}: unsupported version {version!r}, expected {POLICY_VERSION}")
        unknown = sorted(set(doc) - {"version", "namespaces"})
        if unknown:
            raise ConfigError(f"{source}: unknown fields {unknown}")
        namespaces = doc.get("namespaces")
        if not isinstance(namespaces, dict):
            raise ConfigError(f"{source}: 'namespaces' must be an object")
        policy = cls()
        for pattern, keys in namespaces.items():
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise ConfigError(f"{source}: namespaces.{pattern} must be a list of 'ed25519:...' strings")
            try:
                _check_pattern(pattern)
                for text in keys:
                    policy.allow(pattern, PublicKey.from_text(text))
            except KvregError as e:  # a bad pattern (InvalidNameError) or a bad key (KeyFileError)
                raise ConfigError(f"{source}: namespaces.{pattern}: {e.message}", hint=e.hint) from e
        return policy

    def __repr__(self) -> str:
        counts = {p: len(k) for p, k in sorted(self._entries.items())}
        return f"TrustPolicy({counts})"
