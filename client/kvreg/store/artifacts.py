"""Opening signed artifacts from the local store: ref or digest → verified manifest.

An artifact is a manifest, its DSSE envelope and the objects it references. This
module resolves a user's target (``namespace/name`` or ``sha256:…``), checks that
the manifest object hashes to its name, that the envelope signs exactly those
bytes, and that a key trusted for the namespace signed it, then returns the
manifest parsed from the signed payload. It also writes artifacts in the one
safe order: objects, then manifest and envelope, then the ref; and then brings
the store back under ``store.max-bytes`` (``kvreg.store.eviction``), never evicting
the artifact just written (it is leased from before the first write).

It does not compute KV states (``kvreg.engine``) and does not talk to registries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kvreg.core.digest import Digest, is_digest
from kvreg.core.envelope import Envelope, verify_envelope
from kvreg.core.errors import DigestMismatchError, IntegrityError
from kvreg.core.keys import PublicKey
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.store import eviction, leases
from kvreg.store.home import Home
from kvreg.store.refs import ANY, Expected
from kvreg.store.router_index import index_artifact

ANY_NAMESPACE = "*"
# The namespace named in errors about an artifact reached by a digest that no ref names.
UNNAMED_NAMESPACE = "unnamed"


@dataclass(frozen=True)
class Target:
    ref: RefName | None
    digest: Digest


@dataclass(frozen=True)
class Artifact:
    """A manifest whose signature has been checked against the trust policy."""

    target: Target
    manifest: Manifest
    envelope: Envelope

    @property
    def digest(self) -> Digest:
        return self.target.digest

    @property
    def ref(self) -> RefName | None:
        return self.target.ref


def resolve(home: Home, target: str) -> Target:
    """``sha256:…`` names a manifest directly; anything else must be ``namespace/name``."""
    if is_digest(target):
        return Target(None, Digest(target))
    ref = RefName.parse(target)
    return Target(ref, home.refs.get(ref))


def namespace_for(home: Home, target: Target) -> str:
    """The namespace whose trust applies: the ref's, or one of a ref pointing at the digest."""
    if target.ref is not None:
        return target.ref.namespace
    for entry in home.refs.list():
        if entry.digest == target.digest:
            return entry.ref.namespace
    return ANY_NAMESPACE


def open_artifact(
    home: Home,
    target: str | Target,
    *,
    trust: TrustPolicy | None = None,
    known_keys: Iterable[PublicKey] = (),
) -> Artifact:
    """Resolve, read and verify an artifact. Raises on any integrity or trust failure.

    ``known_keys`` are public keys that are *not* trusted (this store's own keys,
    say); they are used only to name the signer in an ``UntrustedKeyError``.
    """
    resolved = resolve(home, target) if isinstance(target, str) else target
    manifest_bytes = home.objects.read(resolved.digest, verify=True)
    envelope = Envelope.from_json_bytes(home.envelopes.get(resolved.digest))
    if envelope.payload != manifest_bytes:
        raise IntegrityError(f"the envelope stored for {resolved.digest} signs other bytes than the manifest")
    policy = trust if trust is not None else load_trust_policy(home.trust_path)
    namespace = namespace_for(home, resolved)
    if namespace == ANY_NAMESPACE:
        # A bare digest that no ref names: only keys trusted for every namespace count.
        policy = TrustPolicy({ANY_NAMESPACE: policy.keys_for(ANY_NAMESPACE)})
        namespace = UNNAMED_NAMESPACE
    manifest = verify_envelope(envelope, policy, namespace, known_keys=known_keys)
    return Artifact(resolved, manifest, envelope)


def read_tokens(home: Home, manifest: Manifest) -> list[int]:
    """The artifact's token ids, read from the tokens object and checked against the manifest."""
    data = home.objects.read(manifest.tokens.digest, verify=True)
    if len(data) != 4 * manifest.token_count:
        raise IntegrityError(
            f"tokens object holds {len(data) // 4} tokens, the manifest says {manifest.token_count}"
        )
    return list(struct.unpack(f"<{manifest.token_count}I", data))


@dataclass
class WriteReport:
    """What :func:`store_artifact` wrote; ``eviction``: what keeping the budget evicted
    (``EvictReport.to_dict()``; None when no budget is set or ``evict`` was False)."""

    objects_written: int = 0
    objects_new: int = 0
    bytes_written: int = 0
    bytes_new: int = 0
    eviction: dict[str, Any] | None = None


def store_artifact(
    home: Home,
    objects: Mapping[Digest, bytes] | Iterable[tuple[Digest, bytes]],
    manifest: Manifest,
    envelope: Envelope,
    ref: RefName | None,
    *,
    expected: Expected = ANY,
    evict: bool = True,
) -> WriteReport:
    """Write objects, then manifest and envelope, then move the ref (compare-and-swap);
    then, with ``evict``, evict to stay under ``store.max-bytes`` (never this artifact)."""
    if envelope.manifest_digest != manifest.digest:
        raise DigestMismatchError("the envelope does not sign this manifest")
    report = WriteReport()
    items = list(objects.items() if isinstance(objects, Mapping) else objects)
    with leases.lease(home, [manifest.digest, *(d for d, _ in items)]):
        for digest, data in items:
            result = home.objects.put_bytes(data, expected=digest)
            report.objects_written += 1
            report.bytes_written += result.size
            if result.new:
                report.objects_new += 1
                report.bytes_new += result.size
        result = home.objects.put_bytes(manifest.raw_bytes, expected=manifest.digest)
        report.bytes_written += result.size
        report.bytes_new += result.size if result.new else 0
        home.envelopes.put(manifest.digest, envelope.to_json_bytes())
        if ref is not None:
            home.refs.set(ref, manifest.digest, expected=expected)
        if evict:
            evicted = eviction.evict_if_over_budget(home)
            report.eviction = None if evicted is None else evicted.to_dict()
    index_artifact(home, manifest)  # for the router; best effort
    return report
