"""Pull a signed kvreg artifact from an OCI registry into the local store, verified before it lands.

The same guarantees as a pull from a kvreg registry (``kvreg.remote.pulling``),
in this order, before any object is downloaded:

1. the tag's artifact manifest is read (its bytes hash to ``Docker-Content-Digest``)
   and parsed strictly (``kvreg.core.oci``);
2. its signatures are found through the referrers API or, without it, the referrers
   tag ``sha256-<hex>``; each signature manifest must name this artifact manifest as
   its subject; its envelope blob is fetched (digest-checked), its payload must be
   the artifact's config (the kvreg manifest), and the signature is verified against
   the **local** trust policy for the local ref's namespace (the first signature
   that verifies wins; one that is missing, corrupt or untrusted is passed over for
   the next; none: the last refusal is raised);
3. ``check_artifact``: the layers are exactly the signed manifest's objects, with
   the sizes it states (a swapped layer is ``DigestMismatchError``, exit 3);
4. the store's tag history (``kvreg.store.tag_history``) refuses a tag moved back
   to an artifact seen and replaced before, or older than the newest seen
   (``RefRollbackError``, exit 3) unless ``allow_rollback``, which the report says.

Then :func:`kvreg.remote.pulling.fetch_and_install` does what every pull does:
objects streamed into the staging folder and hashed (``Range`` resumes a killed
pull), nothing installed on a mismatch, then objects, manifest, envelope and the
ref; the history records the tag last. An OCI registry keeps no audit log: the
report's ``audit`` says so. This module neither prints nor configures remotes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kvreg.core.digest import Digest
from kvreg.core.envelope import MAX_ENVELOPE_BYTES, Envelope, verify_envelope
from kvreg.core.errors import (
    DigestMismatchError,
    EnvelopeNotFoundError,
    IntegrityError,
    KvregError,
    NotFoundError,
    RefNotFoundError,
    RefRollbackError,
    RemoteError,
    UnavailableError,
)
from kvreg.core.keys import PublicKey
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.core.oci import (
    SIGNATURE_TYPE,
    ArtifactManifest,
    check_artifact,
    parse_artifact_manifest,
    parse_signature_manifest,
    tag_for,
)
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.remote.oci.client import OciClient
from kvreg.remote.progress import NullProgress, Progress, validate_jobs
from kvreg.remote.pulling import PullReport, check_local_ref, fetch_and_install, signer_of
from kvreg.store.home import Home
from kvreg.store.tag_history import TagHistory

log = logging.getLogger(__name__)

__all__ = ["NO_AUDIT_LOG", "pull", "signed_artifact"]

#: What a pull from an OCI registry reports of the audit log.
NO_AUDIT_LOG = {
    "verified": False,
    "reason": "an OCI registry keeps no audit log; the client's own tag history guards against rollback",
}


def signed_artifact(
    client: OciClient,
    repository: str,
    art: ArtifactManifest,
    policy: TrustPolicy,
    namespace: str,
    known_keys: Iterable[PublicKey] = (),
) -> tuple[bytes, Envelope, Manifest]:
    """The envelope (bytes and parsed) whose signature over ``art``'s kvreg manifest verifies
    against ``policy`` for ``namespace``, and the manifest it signs. A signature that is
    missing, corrupt, about something else or not trusted is passed over for the next one;
    when none verifies, the last refusal is raised, or ``EnvelopeNotFoundError`` when no
    signature is attached."""
    refusal: KvregError | None = None
    for descriptor in client.referrers(repository, art.digest, SIGNATURE_TYPE):
        try:
            return _verified(client, repository, art, descriptor.digest, policy, namespace, known_keys)
        except UnavailableError:
            raise  # the registry, not this signature: the next would fail alike
        except (NotFoundError, IntegrityError, RemoteError) as e:
            log.debug("signature %s of %s passed over: %s", descriptor.digest, art.digest, e.message)
            refusal = e
    if refusal is not None:
        raise refusal
    raise EnvelopeNotFoundError(
        f"no kvreg signature is attached to {repository}@{art.digest}",
        hint="the artifact was not pushed by kvreg, or its signature was removed; nothing was written",
        manifest=str(art.digest),
    )


def _verified(
    client: OciClient,
    repository: str,
    art: ArtifactManifest,
    signature: Digest,
    policy: TrustPolicy,
    namespace: str,
    known_keys: Iterable[PublicKey],
) -> tuple[bytes, Envelope, Manifest]:
    """The envelope of signature manifest ``signature``, verified for ``art``; raises the refusal."""
    raw = client.get_manifest(repository, str(signature))
    if raw is None:
        raise NotFoundError(f"signature manifest {signature} is listed but not in {repository}")
    sig = parse_signature_manifest(raw)
    if sig.subject.digest != art.digest:
        raise DigestMismatchError(
            f"signature manifest {sig.digest} is about {sig.subject.digest}, not {art.digest}",
            expected=str(art.digest),
            actual=str(sig.subject.digest),
        )
    envelope_bytes = client.get_blob_bytes(repository, sig.envelope.digest, limit=MAX_ENVELOPE_BYTES)
    envelope = Envelope.from_json_bytes(envelope_bytes)
    if envelope.manifest_digest != art.kvreg_manifest:
        raise DigestMismatchError(
            f"the envelope attached to {art.digest} signs manifest {envelope.manifest_digest}, "
            f"not the artifact's config {art.kvreg_manifest}",
            expected=str(art.kvreg_manifest),
            actual=str(envelope.manifest_digest),
        )
    manifest = verify_envelope(envelope, policy, namespace, known_keys=known_keys)
    return envelope_bytes, envelope, manifest


def pull(
    home: Home,
    client: OciClient,
    ref: RefName,
    *,
    local_ref: RefName | None = None,
    jobs: int = 4,
    trust: TrustPolicy | None = None,
    known_keys: Iterable[PublicKey] = (),
    progress: Progress | None = None,
    lazy: bool = False,
    pin: bool = False,
    allow_rollback: bool = False,
) -> PullReport:
    """Pull tag ``ref.name`` of namespace ``ref.namespace``'s repository into the local store as
    ``local_ref`` (default: the same name); see the module docstring."""
    validate_jobs(jobs)
    progress = progress or NullProgress()
    dest = local_ref or ref
    ns = ref.namespace
    repository, oci_tag = client.repository(ns), tag_for(ref.name)
    raw = client.get_manifest(repository, oci_tag)
    if raw is None:
        who = client.remote_name or "NAME"
        raise RefNotFoundError(
            f"no tag {oci_tag} in repository {repository} of {client.location.host}",
            hint=f"list its tags with: kvreg ls-remote {who} {ns}",
            ref=str(ref),
        )
    art = parse_artifact_manifest(raw)
    digest = art.kvreg_manifest
    check_local_ref(home, dest, digest)
    policy = trust if trust is not None else load_trust_policy(home.trust_path)
    envelope_bytes, envelope, manifest = signed_artifact(
        client, repository, art, policy, dest.namespace, known_keys
    )
    check_artifact(art, manifest)
    history = TagHistory(home, client.remote_name) if client.remote_name else None
    warnings: list[str] = []
    if history is not None:
        try:
            history.check(repository, oci_tag, digest, manifest.created)
        except RefRollbackError as e:
            if not allow_rollback:
                raise
            log.warning("%s (allowed by --allow-rollback)", e.message)
            warnings.append(f"rollback allowed by --allow-rollback: {e.message}")

    sizes = manifest.stated_sizes()
    for layer in art.layers:  # unstated sizes (a chat prompt's messages) are bounded by the layer's
        sizes.setdefault(layer.digest, layer.size)
    done = fetch_and_install(
        home,
        client,
        ns,
        manifest,
        envelope_bytes,
        dest,
        tag=art.immutable,
        jobs=jobs,
        progress=progress,
        lazy=lazy,
        pin=pin,
        remote_ref=str(ref),
        sizes=sizes,
        cap=None,
    )
    if history is not None:
        history.record(repository, oci_tag, digest, manifest.created)
    log.info("pulled %s:%s as %s (%s)", repository, oci_tag, dest, digest)
    return PullReport(
        remote=client.remote_name,
        ref=str(ref),
        local_ref=str(dest),
        digest=str(digest),
        tag=art.immutable,
        signer=signer_of(envelope, policy.keys_for(dest.namespace)),
        objects_total=len(manifest.object_digests()),
        objects_local=done.objects_local,
        objects_staged=done.objects_staged,
        objects_downloaded=done.objects_downloaded,
        bytes_downloaded=done.bytes_downloaded,
        old=None if done.old is None else str(done.old),
        new=str(digest),
        ref_changed=done.changed,
        audit=dict(NO_AUDIT_LOG),
        lazy=lazy,
        objects_deferred=len(done.deferred),
        pinned=pin,
        eviction=done.eviction,
        warnings=warnings,
        oci={"repository": repository, "tag": oci_tag, "manifest": str(art.digest)},
    )
