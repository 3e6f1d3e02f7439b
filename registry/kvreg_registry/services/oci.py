"""The OCI documents of a namespace's artifacts, kept for the ``/v2/`` pull API.

Every stored envelope has one ``oci_manifests`` row (``db.models.OciManifest``): its
artifact manifest and signature manifest, built by ``kvreg.core.oci`` and stored as
they are served, and the digest of the envelope bytes. :func:`record` writes it with
the envelope (``services.envelopes.store``); :func:`backfill` writes the rows of the
envelopes stored before migration 0007, the first time a lookup misses in a namespace whose
``oci_backfill_pending`` flag migration 0008 set, and clears the flag. The lookups
(:func:`for_envelope`, :func:`by_manifest_digest`, :func:`by_envelope_digest`) never build
anything, and a miss in a namespace without the flag costs no scan.

An envelope whose manifests cannot be built (too many layers for an OCI manifest, or
stored bytes that no longer parse) has no row: it is logged once, when it is stored or
backfilled, and is not served over OCI; nothing tries it again.

Artifact manifests are built without ``immutable=True``: the registry enforces its
tags itself, so one artifact has one OCI manifest whatever its refs are.

This module checks no access (the routes resolve the namespace for a role) and
knows nothing of HTTP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from kvreg.core import oci
from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope
from kvreg.core.errors import KvregError
from kvreg.core.manifest import Manifest
from kvreg_registry.db.models import Envelope as EnvelopeRow
from kvreg_registry.db.models import Namespace, OciManifest, StoredObject

log = logging.getLogger(__name__)

ARTIFACT = "artifact"
SIGNATURE = "signature"


@dataclass(frozen=True)
class Found:
    """A manifest found by digest: which of the envelope's two documents, and its row."""

    kind: str  # ARTIFACT or SIGNATURE
    row: OciManifest

    @property
    def data(self) -> bytes:
        return bytes(self.row.artifact if self.kind == ARTIFACT else self.row.signature)


def build(session: Session, ns: Namespace, manifest: Manifest, envelope: bytes) -> OciManifest:
    """The row for ``manifest`` and its envelope bytes (not added to the session).

    Sizes the manifest does not state (a chat prompt's messages) come from the
    ``objects`` table; the namespace holds every object of a stored envelope."""
    stated = oci.stated_sizes(manifest)
    unstated = [d for d in manifest.object_digests() if d not in stated]
    sizes: dict[Digest, int] = {}
    if unstated:
        rows = session.execute(
            select(StoredObject.digest, StoredObject.size).where(StoredObject.digest.in_(unstated))
        ).all()
        sizes = {Digest(d): int(size) for d, size in rows}
    artifact = oci.artifact_manifest(manifest, sizes)
    envelope_digest = Digest.of_bytes(envelope)
    subject = oci.Descriptor(oci.OCI_MANIFEST, Digest.of_bytes(artifact), len(artifact), oci.ARTIFACT_TYPE)
    signature = oci.signature_manifest(
        subject,
        oci.Descriptor(oci.MEDIA_DSSE_ENVELOPE, envelope_digest, len(envelope)),
        kvreg_manifest=manifest.digest,
    )
    return OciManifest(
        namespace_id=ns.id,
        manifest_digest=manifest.digest,
        artifact_digest=subject.digest,
        artifact=artifact,
        signature_digest=Digest.of_bytes(signature),
        signature=signature,
        envelope_digest=envelope_digest,
    )


def record(session: Session, ns: Namespace, manifest: Manifest, envelope: bytes) -> OciManifest | None:
    """Write the row of a newly stored envelope (in the transaction that stores it).

    An artifact whose OCI manifest cannot be built (more layers than fit in the 4 MiB
    registries accept, ``oci.MAX_OCI_MANIFEST_BYTES``) is still stored: it is only not
    served over OCI (a warning says so, and None is returned)."""
    try:
        row = build(session, ns, manifest, envelope)
    except KvregError as e:
        log.warning("artifact %s of %s cannot be served over OCI: %s", manifest.digest, ns.name, e)
        return None
    session.add(row)
    session.flush()
    return row


def forget(session: Session, ns: Namespace, manifest_digest: str) -> None:
    """Delete the row of an envelope being deleted (the foreign key cascades too)."""
    session.execute(
        delete(OciManifest).where(
            OciManifest.namespace_id == ns.id, OciManifest.manifest_digest == manifest_digest
        )
    )


def _without_rows(session: Session, ns: Namespace) -> list[str]:
    known = select(OciManifest.manifest_digest).where(OciManifest.namespace_id == ns.id)
    return list(
        session.scalars(
            select(EnvelopeRow.manifest_digest).where(
                EnvelopeRow.namespace_id == ns.id, EnvelopeRow.manifest_digest.not_in(known)
            )
        ).all()
    )


def backfill(session: Session, ns: Namespace) -> int:
    """Write the rows of the envelopes of ``ns`` that have none and clear its
    ``oci_backfill_pending`` flag (in the caller's write transaction); returns how many rows.

    An envelope whose stored bytes no longer parse (every one passed the full check when it
    was accepted) or whose manifests cannot be built is skipped with a warning: it cannot be
    served, and with the flag cleared it is not tried again."""
    done = 0
    for digest in _without_rows(session, ns):
        env = session.get(EnvelopeRow, (ns.id, digest))
        if env is None:  # deleted meanwhile
            continue
        try:
            manifest = Manifest.from_bytes(Envelope.from_json_bytes(bytes(env.envelope)).payload)
            row = build(session, ns, manifest, bytes(env.envelope))
        except KvregError as e:
            log.warning("envelope %s of %s cannot be served over OCI: %s", digest, ns.name, e)
            continue
        if row.manifest_digest != digest:
            log.warning("envelope %s of %s does not carry its manifest", digest, ns.name)
            continue
        session.add(row)
        done += 1
    ns.oci_backfill_pending = False
    session.flush()
    if done:
        log.info("wrote the OCI manifests of %d older envelope(s) of %s", done, ns.name)
    return done


def for_envelope(session: Session, ns: Namespace, manifest_digest: str) -> OciManifest | None:
    return session.get(OciManifest, (ns.id, manifest_digest))


def by_manifest_digest(session: Session, ns: Namespace, digest: str) -> Found | None:
    """The artifact or signature manifest of ``ns`` whose digest is ``digest``."""
    row = session.scalar(
        select(OciManifest).where(OciManifest.namespace_id == ns.id, OciManifest.artifact_digest == digest)
    )
    if row is not None:
        return Found(ARTIFACT, row)
    row = session.scalar(
        select(OciManifest).where(OciManifest.namespace_id == ns.id, OciManifest.signature_digest == digest)
    )
    return Found(SIGNATURE, row) if row is not None else None


def by_envelope_digest(session: Session, ns: Namespace, digest: str) -> OciManifest | None:
    """The row whose envelope bytes hash to ``digest``."""
    return session.scalar(
        select(OciManifest)
        .where(OciManifest.namespace_id == ns.id, OciManifest.envelope_digest == digest)
        .limit(1)
    )


def referrer(row: OciManifest) -> oci.Descriptor:
    """The signature manifest as an entry of the referrers index of the artifact manifest."""
    return oci.Descriptor(
        oci.OCI_MANIFEST,
        Digest(row.signature_digest),
        len(row.signature),
        oci.SIGNATURE_TYPE,
        {oci.ANNOTATION_MANIFEST: row.manifest_digest},
    )
