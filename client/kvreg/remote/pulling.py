"""Pull: fetch a signed artifact from a registry into the local store, verified before it lands.

**Pull** reads the remote ref and the envelope, checks that the payload hashes
to the ref's digest, and verifies the signature against the *local* trust
policy for the namespace the artifact will have locally, with the registry's
keys only used to name an untrusted signer, all before downloading any object.
Objects not in the local store are downloaded in parallel into a staging folder
``tmp/pull-<manifest hex>/`` (several in one answer where the registry offers fetch
packs, ``kvreg.remote.staging.fetch_units``): each to ``<hex>.incomplete``, hashed while it
streams, renamed to ``<hex>`` only when its digest matches. A mismatch raises
``DigestMismatchError`` (exit 3) and deletes the whole staging folder, so a
tampered registry leaves no trace in the store. When every object is staged the
objects are moved into the store (``Staging.install``: linked in without a second
read, since each was hashed as it streamed), then the manifest, then the envelope,
and the local ref is set last, by compare-and-swap (a local tag on another digest
is ``TagImmutableError``; a remote tag becomes a local tag). An interrupted pull
resumes: complete staged objects are not downloaded again and a partial one
continues with a ``Range`` request.

**A lazy pull** (``lazy=True``, ``kvreg pull --lazy``) checks everything as above
but downloads only the tokens object (and stores the manifest from the envelope):
the chunks, the witness logits and the text stay on the registry. The objects it
did not fetch are recorded (``kvreg.store.access_log.record_deferred``) before the ref
is set, so that ``fsck`` lists them as "not fetched (lazy pull)" and a read of
one raises ``ObjectNotFoundError`` naming the command that fetches it. A later
pull of the ref without ``lazy`` fetches the rest; ``kvreg.remote.ondemand``
fetches only what a graft needs.

**Disk paging.** From installing the verified objects until the end, the pull holds a
lease (``kvreg.store.leases.lease``) on the artifact's manifest and objects; with
``pin`` it pins the local ref; then it brings the store back under
``store.max-bytes`` (``evict_if_over_budget``), which never evicts the artifact
just pulled, a pinned ref's objects or another live lease's. The report's
``eviction`` says what was evicted (None: no budget set).

**The audit log.** Given a ``RemoteLog`` (``kvreg.remote.auditlog``; the CLI
always gives one), pull first verifies the registry's signed checkpoint against
the one this store saw before (after the local checks, before the first request
that reads or changes anything), then proves the ref's latest entry (it names the
digest pulled) and the envelope's entry *before* downloading any object, so a
registry that serves what it did not log leaves nothing in the store. The
report's ``audit`` says what was verified. Without a ``RemoteLog`` nothing of the
log is checked.

This module neither prints nor imports rich (``kvreg.cli.remote`` renders); it
does not configure remotes or tokens (``kvreg.remote.remotes``). Push is
``kvreg.remote.pushing``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope, pae, verify_envelope
from kvreg.core.errors import (
    DigestMismatchError,
    KvregError,
    RefNotFoundError,
    TagImmutableError,
)
from kvreg.core.keys import PublicKey
from kvreg.core.logverify import envelope_claim, ref_claim
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.faults import crash_point
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.http import RegistryClient
from kvreg.remote.progress import Counter, NullProgress, Progress, run_parallel, validate_jobs
from kvreg.remote.staging import ObjectSource, Staging, fetch_units
from kvreg.store import access_log, eviction, leases, pins
from kvreg.store.home import Home
from kvreg.store.router_index import index_artifact

log = logging.getLogger(__name__)

__all__ = [
    "Installed",
    "PullReport",
    "check_local_ref",
    "fetch_and_install",
    "pull",
    "signer_of",
]


@dataclass(frozen=True)
class PullReport:
    """What a pull did. ``objects_staged``: found complete in the staging folder of an earlier try;
    ``objects_deferred``: left on the registry by a lazy pull; ``eviction``: what bringing the
    store back under ``store.max-bytes`` did (``EvictReport.to_dict()``; None without a budget);
    ``warnings``: what the user overrode (an OCI pull's ``--allow-rollback``); ``oci``: the
    repository, tag and manifest digest an OCI pull read."""

    remote: str | None
    ref: str
    local_ref: str
    digest: str
    tag: bool
    signer: str | None
    objects_total: int
    objects_local: int
    objects_staged: int
    objects_downloaded: int
    bytes_downloaded: int
    old: str | None
    new: str
    ref_changed: bool
    audit: dict[str, Any] | None = None
    lazy: bool = False
    objects_deferred: int = 0
    pinned: bool = False
    eviction: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    oci: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _progress_total(manifest: Manifest, sizes: dict[Digest, int], digests: list[Digest]) -> int:
    """Bytes to expect for the progress bar: stated sizes, plus the witness logits estimated
    from their shape and dtype (an estimate only: it bounds nothing)."""
    estimates = dict(sizes)
    witness = manifest.witness_size()
    if witness is not None:
        estimates.setdefault(manifest.witness.logits_digest, witness)
    return sum(estimates.get(d, 0) for d in digests)


def pull(
    home: Home,
    client: RegistryClient,
    ref: RefName,
    *,
    local_ref: RefName | None = None,
    jobs: int = 4,
    trust: TrustPolicy | None = None,
    known_keys: Iterable[PublicKey] = (),
    progress: Progress | None = None,
    audit: RemoteLog | None = None,
    lazy: bool = False,
    pin: bool = False,
) -> PullReport:
    """Pull the registry's ``ref`` into the local store as ``local_ref`` (default: the same name).

    The signature is checked against ``trust`` (default ``$KVREG_HOME/trust.json``)
    for ``local_ref``'s namespace, the one that later reads of the artifact check.
    With ``audit`` the registry's log is checked, and the ref's and envelope's
    entries proven, before any object is downloaded (the caller saves it).
    ``lazy`` downloads only the tokens object (see the module docstring); ``pin``
    pins ``local_ref`` once it is set.
    """
    validate_jobs(jobs)
    progress = progress or NullProgress()
    dest = local_ref or ref
    ns = ref.namespace

    if audit is not None:
        audit.check()
    remote = client.get_ref_logged(ns, ref.name)
    if remote is None:
        raise RefNotFoundError(
            f"no ref {ref} on the registry {client.remote_name or client.base_url}",
            hint=f"list its refs with: kvreg ls-remote {client.remote_name or 'NAME'} {ns}",
            ref=str(ref),
        )
    digest = remote.digest
    check_local_ref(home, dest, digest)

    envelope_bytes, envelope_index = client.get_envelope_logged(ns, digest)
    envelope = Envelope.from_json_bytes(envelope_bytes)
    if envelope.manifest_digest != digest:
        raise DigestMismatchError(
            f"the registry's envelope for {ref} signs a manifest with digest {envelope.manifest_digest}, "
            f"not {digest}",
            expected=str(digest),
            actual=str(envelope.manifest_digest),
        )
    policy = trust if trust is not None else load_trust_policy(home.trust_path)
    try:
        registry_keys = client.list_keys(ns)
    except KvregError as e:  # only used to name a signer
        log.debug("cannot list the registry's keys of %s: %s", ns, e.message)
        registry_keys = []
    manifest = verify_envelope(envelope, policy, dest.namespace, known_keys=[*known_keys, *registry_keys])
    signer = signer_of(envelope, policy.keys_for(dest.namespace))
    audit_report = None
    if audit is not None:
        audit_report = audit.prove(
            [
                ref_claim(remote.log_index, ns, ref.name, str(digest)),
                envelope_claim(envelope_index, ns, str(digest)),
            ]
        )

    sizes = manifest.stated_sizes()
    cap: int | None = None
    if not lazy and any(not home.objects.has(d) and d not in sizes for d in manifest.object_digests()):
        cap = client.limit("max_object_bytes", 0) or None  # for objects whose size is not stated
    done = fetch_and_install(
        home,
        client,
        ns,
        manifest,
        envelope_bytes,
        dest,
        tag=remote.tag,
        jobs=jobs,
        progress=progress,
        lazy=lazy,
        pin=pin,
        remote_ref=str(ref),
        sizes=sizes,
        cap=cap,
    )
    deferred = done.deferred
    digests = manifest.object_digests()

    log.info(
        "pulled %s as %s (%s)%s", ref, dest, digest, f", {len(deferred)} objects deferred" if lazy else ""
    )
    return PullReport(
        remote=client.remote_name,
        ref=str(ref),
        local_ref=str(dest),
        digest=str(digest),
        tag=remote.tag,
        signer=signer,
        objects_total=len(digests),
        objects_local=done.objects_local,
        objects_staged=done.objects_staged,
        objects_downloaded=done.objects_downloaded,
        bytes_downloaded=done.bytes_downloaded,
        old=None if done.old is None else str(done.old),
        new=str(digest),
        ref_changed=done.changed,
        audit=audit_report,
        lazy=lazy,
        objects_deferred=len(deferred),
        pinned=pin,
        eviction=done.eviction,
    )


@dataclass(frozen=True)
class Installed:
    """What :func:`fetch_and_install` did: objects found in the store, found staged by an earlier
    try, downloaded now (and their bytes), left on the registry (``deferred``), the local
    ref's old value and whether it changed, and what eviction did (None: no budget)."""

    objects_local: int
    objects_staged: int
    objects_downloaded: int
    bytes_downloaded: int
    deferred: list[Digest]
    old: Digest | None
    changed: bool
    eviction: dict[str, Any] | None


def fetch_and_install(
    home: Home,
    client: ObjectSource,
    namespace: str,
    manifest: Manifest,
    envelope_bytes: bytes,
    dest: RefName,
    *,
    tag: bool,
    jobs: int,
    progress: Progress,
    lazy: bool,
    pin: bool,
    remote_ref: str,
    sizes: dict[Digest, int],
    cap: int | None,
) -> Installed:
    """The second half of every pull, from a kvreg or an OCI registry, once the signature of
    ``manifest`` verified: download the absent objects of namespace ``namespace`` into the
    staging folder (each hashed while it streams; ``sizes`` bound each, else ``cap``), then
    install objects, manifest, envelope, the lazy pull's deferred record and, last, the
    local ref ``dest`` (``tag``: as a tag); pin it with ``pin``; evict over budget. A digest
    mismatch discards the staging folder and raises: nothing is written to the store."""
    digest = manifest.digest
    digests = manifest.object_digests()
    absent = [d for d in digests if not home.objects.has(d)]
    deferred: list[Digest] = []
    if lazy:  # only the tokens (the router and the token check before a graft read them)
        deferred = [d for d in absent if d != manifest.tokens.digest]
        absent = [d for d in absent if d == manifest.tokens.digest]
    stop = threading.Event()
    counter = Counter(progress, stop)

    with contextlib.ExitStack() as held, Staging(home, digest) as staging:
        try:
            progress.start(_progress_total(manifest, sizes, absent), len(absent))

            def fetch(unit: list[Digest]) -> None:
                staging.fetch_unit(client, namespace, unit, sizes=sizes, cap=cap, counter=counter)

            run_parallel(fetch_units(client, absent, sizes, jobs), fetch, jobs, stop)
            staged_count = len(staging.found_staged)
            crash_point("client.pull.after_fetch")
            # Verified; from here to the end the artifact is leased (eviction leaves it alone).
            # Not before: a refused download leaves no trace in the store, not even a lease.
            held.enter_context(leases.lease(home, [digest, *digests]))
            staging.install(absent)
            crash_point("client.pull.after_objects")
            home.objects.put_bytes(manifest.raw_bytes, expected=digest)
            crash_point("client.pull.after_manifest")
            home.envelopes.put(digest, envelope_bytes)
        except DigestMismatchError:
            staging.discard()
            raise
        staging.discard()  # everything is in the store now
        if deferred:  # before the ref: fsck never sees them as merely missing
            access_log.record_deferred(
                home, deferred, remote=client.remote_name, remote_ref=remote_ref, local_ref=str(dest)
            )
        crash_point("client.pull.before_ref")
        old, changed = _set_local_ref(home, dest, digest, tag=tag)
        if pin:
            pins.pin(home, str(dest))
        evicted = eviction.evict_if_over_budget(home)  # never this artifact: it is leased
    index_artifact(home, manifest)  # for the router; best effort (kvreg.store.router_index)
    return Installed(
        objects_local=len(digests) - len(absent),
        objects_staged=staged_count,
        objects_downloaded=counter.objects,
        bytes_downloaded=counter.bytes,
        deferred=deferred,
        old=old,
        changed=changed,
        eviction=None if evicted is None else evicted.to_dict(),
    )


def signer_of(envelope: Envelope, trusted: list[PublicKey]) -> str | None:
    """The key id of the trusted key whose signature verified (for the report)."""
    message = pae(envelope.payload_type, envelope.payload)
    for s in envelope.signatures:
        for key in trusted:
            with contextlib.suppress(KvregError):
                key.verify(s.sig, message)
                return key.keyid
    return None


def check_local_ref(home: Home, dest: RefName, digest: Digest) -> None:
    entry = home.refs.entry(dest)
    if entry is not None and entry.tag and entry.digest != digest:
        raise TagImmutableError(
            f"local ref {dest} is an immutable tag on {entry.digest}: it cannot move to {digest}",
            hint="pull under another name: kvreg pull NAME REF --as NS/OTHER",
            ref=str(dest),
            current=str(entry.digest),
        )


def _set_local_ref(home: Home, dest: RefName, digest: Digest, *, tag: bool) -> tuple[Digest | None, bool]:
    """Point ``dest`` at ``digest`` by compare-and-swap; return ``(old value, changed)``."""
    check_local_ref(home, dest, digest)
    entry = home.refs.entry(dest)
    old = None if entry is None else entry.digest
    if entry is not None and entry.digest == digest and (entry.tag or not tag):
        return old, False
    if tag:
        home.refs.tag(dest, digest, expected=old)
    else:
        home.refs.set(dest, digest, expected=old)
    return old, True
