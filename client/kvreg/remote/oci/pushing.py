"""Push a signed kvreg artifact of the local store to an OCI registry.

The artifact goes to repository ``<prefix>/<namespace>`` (``kvreg.core.oci``), in an
order that never shows a reader a tag whose pieces are missing:

1. the local artifact is opened and verified against the local trust policy, and
   the tag's current manifest is read: a tag whose artifact manifest carries
   ``dev.kvreg.immutable`` and names another kvreg manifest is not moved
   (``TagImmutableError``); ``tag=True`` (``--tag``) creates an immutable tag, so the
   tag must be absent or that artifact already;
2. every blob (objects, then the kvreg manifest as the config) is looked for with
   ``HEAD``; only the missing ones are sent, mounted from another repository of the
   same registry when this store has seen them there (``kvreg.store.tag_history``),
   else uploaded (monolithic, or chunked above ``chunk_threshold``), in parallel;
3. the artifact manifest is stored by digest (the last piece of the artifact);
4. the DSSE envelope blob, the empty config and the signature manifest (its
   ``subject`` is the artifact manifest) follow; where the registry does not answer
   ``OCI-Subject`` (no referrers API), the referrers tag ``sha256-<hex>`` is updated;
5. the tag is moved last, after reading it again (a tag that moved meanwhile is a
   ``RefConflictError``), and the store's tag history records the push.

Running it again sends nothing the registry has. This module neither prints nor
configures remotes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, ManifestInvalidError, RefConflictError, TagImmutableError
from kvreg.core.keys import PublicKey
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.core.oci import (
    ANNOTATION_MANIFEST,
    EMPTY_CONFIG_DATA,
    MEDIA_DSSE_ENVELOPE,
    OCI_MANIFEST,
    SIGNATURE_TYPE,
    ArtifactManifest,
    Descriptor,
    artifact_manifest,
    parse_artifact_manifest,
    signature_manifest,
    tag_for,
)
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.faults import crash_point
from kvreg.remote.oci.client import OciClient
from kvreg.remote.progress import Cancelled, Counter, NullProgress, Progress, run_parallel, validate_jobs
from kvreg.remote.pushing import PushReport, local_size
from kvreg.store.artifacts import open_artifact
from kvreg.store.home import Home
from kvreg.store.tag_history import TagHistory

log = logging.getLogger(__name__)

__all__ = ["current_artifact", "mount_sources", "push"]


def current_artifact(client: OciClient, repository: str, tag: str) -> ArtifactManifest | None:
    """The kvreg artifact manifest the tag names now (None: no such tag); a tag that names
    something else (a container image...) is a ``RefConflictError``: kvreg does not overwrite it."""
    raw = client.get_manifest(repository, tag)
    if raw is None:
        return None
    try:
        return parse_artifact_manifest(raw)
    except ManifestInvalidError as e:
        raise RefConflictError(
            f"tag {repository}:{tag} holds something that is not a kvreg artifact ({e.message})",
            hint="push under another name: --as NS/OTHER",
            ref=f"{repository}:{tag}",
        ) from e


def mount_sources(home: Home, remote: str, digests: Iterable[Digest], *, exclude: str) -> dict[Digest, str]:
    """For each of ``digests``: another repository of the same registry that holds it, as far as
    this store knows (artifacts it pushed there or pulled from there, per its tag history)."""
    wanted = set(digests)
    out: dict[Digest, str] = {}
    for repo, manifests in TagHistory(home, remote).repositories().items():
        if repo == exclude or not wanted:
            continue
        for m in dict.fromkeys(manifests):
            if not home.objects.has(m):
                continue
            try:
                manifest = Manifest.from_bytes(home.objects.read(m))
            except KvregError as e:  # a hint only; a damaged manifest is fsck's to report
                log.debug("cannot read manifest %s: %s", m, e.message)
                continue
            for d in [m, *manifest.object_digests()]:
                if d in wanted:
                    out[d] = repo
                    wanted.discard(d)
    return out


def push(
    home: Home,
    client: OciClient,
    ref: RefName,
    *,
    remote_ref: RefName | None = None,
    tag: bool = False,
    jobs: int = 4,
    progress: Progress | None = None,
    trust: TrustPolicy | None = None,
    known_keys: Iterable[PublicKey] = (),
) -> PushReport:
    """Push the local artifact ``ref`` to the OCI registry as ``remote_ref`` (default: the same
    name); ``tag``: as an immutable tag. See the module docstring."""
    validate_jobs(jobs)
    progress = progress or NullProgress()
    target = remote_ref or ref
    repository, oci_tag = client.repository(target.namespace), tag_for(target.name)
    artifact = open_artifact(home, str(ref), trust=trust, known_keys=known_keys)
    manifest, digest = artifact.manifest, artifact.digest
    envelope_bytes = home.envelopes.get(digest)
    digests = manifest.object_digests()
    sizes = {d: local_size(home, d, ref) for d in digests}
    art_bytes = artifact_manifest(manifest, sizes, immutable=tag)
    art = parse_artifact_manifest(art_bytes)

    current = current_artifact(client, repository, oci_tag)
    _check_tag(target, current, digest, tag)
    up_to_date = current is not None and current.kvreg_manifest == digest

    blobs = list(dict.fromkeys([*digests, digest]))
    blob_sizes = {**sizes, digest: len(manifest.raw_bytes)}
    stop = threading.Event()
    lock = threading.Lock()
    missing: list[Digest] = []

    def look(d: Digest) -> None:
        if client.blob_size(repository, d, push=True) is None:
            with lock:
                missing.append(d)

    run_parallel(blobs, look, jobs, stop)
    missing.sort(key=blobs.index)
    sources = (
        mount_sources(home, client.remote_name or "", missing, exclude=repository)
        if client.remote_name
        else {}
    )
    counter = Counter(progress, stop)
    mounted: list[Digest] = []
    progress.start(sum(blob_sizes[d] for d in missing), len(missing))

    def send(d: Digest) -> None:
        if stop.is_set():
            raise Cancelled
        location = None
        if d in sources:
            location = client.mount_blob(repository, d, sources[d])
            if location is None:
                with lock:
                    mounted.append(d)
                progress.object_done()
                return
        path: Path = home.objects.path(d)
        client.upload_blob(repository, d, path, blob_sizes[d], location=location, progress_cb=counter.advance)
        counter.done()

    run_parallel(missing, send, jobs, stop)
    crash_point("client.push.after_objects")
    client.put_manifest(repository, str(art.digest), art_bytes, OCI_MANIFEST)

    envelope_digest = client.put_blob_bytes(repository, envelope_bytes)
    client.put_blob_bytes(repository, EMPTY_CONFIG_DATA)
    envelope = Descriptor(MEDIA_DSSE_ENVELOPE, envelope_digest, len(envelope_bytes))
    sig_bytes = signature_manifest(art.descriptor(), envelope, kvreg_manifest=digest)
    sig_digest = Digest.of_bytes(sig_bytes)
    envelope_new = client.get_manifest(repository, str(sig_digest)) is None
    if client.put_manifest(repository, str(sig_digest), sig_bytes, OCI_MANIFEST):
        log.debug("the registry keeps the referrers of %s itself", art.digest)
    else:
        entry = Descriptor(
            OCI_MANIFEST, sig_digest, len(sig_bytes), SIGNATURE_TYPE, {ANNOTATION_MANIFEST: str(digest)}
        )
        client.add_referrer(repository, art.digest, entry)
    crash_point("client.push.after_envelope")

    changed = not up_to_date
    if changed:
        again = current_artifact(client, repository, oci_tag)
        if (again is None) != (current is None) or (
            again is not None and current is not None and again.digest != current.digest
        ):
            raise RefConflictError(
                f"{target} moved on the registry during the push; nothing was overwritten",
                hint=f"see where it is now (kvreg ls-remote {client.remote_name or 'NAME'} "
                f"{target.namespace}) and push again",
                ref=str(target),
            )
        client.put_manifest(repository, oci_tag, art_bytes, OCI_MANIFEST)
        crash_point("client.push.after_ref")
    if client.remote_name:
        TagHistory(home, client.remote_name).record(repository, oci_tag, digest, manifest.created)
    log.info("pushed %s to %s:%s (%s)", ref, repository, oci_tag, digest)
    return PushReport(
        remote=client.remote_name,
        ref=str(ref),
        remote_ref=str(target),
        digest=str(digest),
        tag=tag or bool(current is not None and current.immutable),
        objects_total=len(blobs),
        objects_missing=len(missing),
        objects_sent=counter.objects,
        bytes_total=sum(blob_sizes[d] for d in blobs),
        bytes_sent=counter.bytes,
        envelope_new=envelope_new,
        old=None if current is None else str(current.kvreg_manifest),
        new=str(digest),
        ref_changed=changed,
        objects_mounted=len(mounted),
        oci={
            "repository": repository,
            "tag": oci_tag,
            "manifest": str(art.digest),
            "signature": str(sig_digest),
        },
    )


def _check_tag(target: RefName, current: ArtifactManifest | None, digest: Digest, tag: bool) -> None:
    if current is None or current.kvreg_manifest == digest:
        return
    if current.immutable:
        raise TagImmutableError(
            f"remote ref {target} is an immutable tag on {current.kvreg_manifest}: "
            f"it cannot move to {digest}",
            hint="push under another name: kvreg push NAME REF --as NS/OTHER",
            ref=str(target),
            current=str(current.kvreg_manifest),
        )
    if tag:
        raise RefConflictError(
            f"remote ref {target} exists already (at {current.kvreg_manifest}); a tag can only be created",
            hint="push the tag under a new name: --as NS/NEW --tag",
            ref=str(target),
            current=str(current.kvreg_manifest),
        )
