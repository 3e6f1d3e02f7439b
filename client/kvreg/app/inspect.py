"""Read the local store: an artifact's manifest (``show``), the refs (``ls``), an object's bytes (``cat``).

:func:`show_artifact` checks the manifest's digest and, unless ``unverified``,
its signature through the trust policy; :func:`list_refs` summarises every ref's
manifest without signature checks (a listing; a manifest that cannot be read is
reported on its row); :func:`read_object` re-hashes an object and records the
read in the access log (the LRU order of disk paging). This module renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app import keyring
from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope
from kvreg.core.errors import KvregError
from kvreg.core.manifest import Manifest
from kvreg.store import access_log
from kvreg.store.artifacts import resolve
from kvreg.store.home import Home


@dataclass(frozen=True)
class ShownArtifact:
    manifest: Manifest
    ref: str | None
    signers: list[str]  # key ids of the signatures (unverified: the ones the envelope claims)
    signature_checked: bool
    text: str | None  # the artifact's text, when asked for and readable

    def to_dict(self) -> dict[str, Any]:
        return self.manifest.to_dict()


@dataclass(frozen=True)
class RefListing:
    refs: list[dict[str, Any]]  # ref, digest, tag and the manifest's summary, or error
    root: Path

    def to_dict(self) -> dict[str, Any]:
        return {"refs": self.refs}


def show_artifact(
    home: Home, target: str, *, unverified: bool = False, with_text: bool = True
) -> ShownArtifact:
    """The manifest of ``target`` (ref or digest), verified unless ``unverified`` (the digest always is)."""
    resolved = resolve(home, target)
    if unverified:
        manifest = Manifest.from_bytes(home.objects.read(resolved.digest, verify=True))
        try:
            envelope = Envelope.from_json_bytes(home.envelopes.get(resolved.digest))
            claimed = [s.keyid or "?" for s in envelope.signatures]
        except KvregError:
            claimed = []
        signers = claimed
    else:
        artifact = keyring.open_verified(home, target)
        manifest = artifact.manifest
        signers = [s.keyid or "?" for s in artifact.envelope.signatures]
    text: str | None = None
    if with_text:
        try:
            text = home.objects.read(manifest.text.digest, verify=True).decode("utf-8", errors="replace")
        except KvregError:
            text = None
    ref = str(resolved.ref) if resolved.ref else None
    return ShownArtifact(manifest, ref, signers, not unverified, text)


def _summary(home: Home, digest: Digest) -> dict[str, Any]:
    m = Manifest.from_bytes(home.objects.read(digest, verify=True))
    v = m.verification
    return {
        "token_count": m.token_count,
        "chunk_count": len(m.chunks),
        "block_size": m.block_size,
        "model": m.model.name,
        "dtype": m.model.dtype,
        "verdict": v.verdict if v else None,
        "verifier": v.verifier if v else None,
        "title": m.annotations.get("title"),
        "created": m.created,
    }


def list_refs(home: Home) -> RefListing:
    """Every ref and tag with a summary of its manifest (``error`` on the row when unreadable)."""
    rows: list[dict[str, Any]] = []
    for entry in home.refs.list():
        row: dict[str, Any] = {"ref": str(entry.ref), "digest": str(entry.digest), "tag": entry.tag}
        try:
            row.update(_summary(home, entry.digest))
        except KvregError as e:
            row["error"] = e.to_dict()
        rows.append(row)
    return RefListing(rows, home.root)


def read_object(home: Home, digest: str) -> bytes:
    """The raw bytes of object ``digest``, re-hashed; the read is recorded in the access log."""
    target = Digest(digest)
    data = home.objects.read(target, verify=True)
    access_log.touch(home, [target])
    return data
