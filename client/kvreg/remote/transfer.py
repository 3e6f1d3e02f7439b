"""Push and pull: move a signed artifact between the local store and a registry.

**Push** (DESIGN.md §3) opens the local artifact, verified against the local
trust policy as every other reader does; opens upload sessions listing every
object the manifest references (the registry answers which are missing and keeps
the listed objects safe from its GC until the session closes); uploads the
missing ones in parallel, streamed from the store's files; uploads the exact
envelope bytes; then reads the remote ref and moves it by compare-and-swap from
the value it just read (``If-None-Match: *`` when absent); and closes the
sessions. Objects, then envelope, then ref: a reader never sees a ref whose
objects are missing. Running it again after an interruption sends only what is
still missing.

**Pull** reads the remote ref and the envelope, checks that the payload hashes
to the ref's digest, and verifies the signature against the *local* trust
policy for the namespace the artifact will have locally, with the registry's
keys only used to name an untrusted signer, all before downloading any object.
Objects not in the local store are downloaded in parallel into a staging folder
``tmp/pull-<manifest hex>/``: each to ``<hex>.incomplete``, hashed while it
streams, renamed to ``<hex>`` only when its digest matches. A mismatch raises
``DigestMismatchError`` (exit 3) and deletes the whole staging folder, so a
tampered registry leaves no trace in the store. When every object is staged the
objects are moved into the store (``adopt_file`` re-hashes them), then the
manifest, then the envelope, and the local ref is set last, by compare-and-swap
(a local tag on another digest is ``TagImmutableError``; a remote tag becomes a
local tag). An interrupted pull resumes: complete staged objects are not
downloaded again and a partial one continues with a ``Range`` request.

**A lazy pull** (``lazy=True``, ``kvreg pull --lazy``) checks everything as above
but downloads only the tokens object (and stores the manifest from the envelope):
the chunks, the witness logits and the text stay on the registry. The objects it
did not fetch are recorded (``kvreg.store.paging.record_deferred``) before the ref
is set, so that ``fsck`` lists them as "not fetched (lazy pull)" and a read of
one raises ``ObjectNotFoundError`` naming the command that fetches it. A later
pull of the ref without ``lazy`` fetches the rest; ``kvreg.remote.ondemand``
fetches only what a graft needs.

**Disk paging.** From installing the verified objects until the end, the pull holds a
lease (``kvreg.store.paging.lease``) on the artifact's manifest and objects; with
``pin`` it pins the local ref; then it brings the store back under
``store.max-bytes`` (``evict_if_over_budget``), which never evicts the artifact
just pulled, a pinned ref's objects or another live lease's. The report's
``eviction`` says what was evicted (None: no budget set).

**The audit log.** Given a ``RemoteLog`` (``kvreg.remote.auditlog``; the CLI
always gives one), both first verify the registry's signed checkpoint against the
one this store saw before (after the local checks, before the first request that
reads or changes anything). Push then proves that the registry logged its change:
the envelope's entry when the envelope was new, and the ref's entry (its
creation or move, or its latest change when it was up to date already), each
read, compared with what was done and proven included in a fresh checkpoint.
Pull proves the ref's latest entry (it names the digest pulled) and the
envelope's entry *before* downloading any object, so a registry that serves
what it did not log leaves nothing in the store. The report's ``audit`` says
what was verified. Without a ``RemoteLog`` nothing of the log is checked.

This module neither prints nor imports rich (``kvreg.cli.remote`` renders); it
does not configure remotes or tokens (``kvreg.remote.remotes``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope, pae, verify_envelope
from kvreg.core.errors import (
    DigestMismatchError,
    KvregError,
    ObjectNotFoundError,
    ObjectsMissingError,
    RefConflictError,
    RefNotFoundError,
    TagImmutableError,
)
from kvreg.core.keys import PublicKey
from kvreg.core.logverify import EntryClaim, envelope_claim, ref_claim
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.faults import crash_point
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.remote.api.objects import DEFAULT_MAX_MISSING_DIGESTS
from kvreg.remote.api.refs import RefValue
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.http import RegistryClient
from kvreg.remote.progress import Cancelled, Counter, NullProgress, Progress, run_parallel, validate_jobs
from kvreg.remote.staging import Staging
from kvreg.store import paging
from kvreg.store.artifacts import open_artifact
from kvreg.store.home import Home
from kvreg.store.route_index import index_artifact

log = logging.getLogger(__name__)

__all__ = ["PullReport", "PushReport", "known_sizes", "pull", "push"]


@dataclass(frozen=True)
class PushReport:
    """What a push did. ``old``/``new``: the remote ref before and after (``old`` None: created)."""

    remote: str | None
    ref: str
    remote_ref: str
    digest: str
    tag: bool
    objects_total: int
    objects_missing: int
    objects_sent: int
    bytes_total: int
    bytes_sent: int
    envelope_new: bool
    old: str | None
    new: str
    ref_changed: bool
    audit: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PullReport:
    """What a pull did. ``objects_staged``: found complete in the staging folder of an earlier try;
    ``objects_deferred``: left on the registry by a lazy pull; ``eviction``: what bringing the
    store back under ``store.max-bytes`` did (``EvictReport.to_dict()``; None without a budget)."""

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- push ----------------------------------------------------------------------------------


def push(
    home: Home,
    client: RegistryClient,
    ref: RefName,
    *,
    remote_ref: RefName | None = None,
    tag: bool = False,
    jobs: int = 4,
    progress: Progress | None = None,
    trust: TrustPolicy | None = None,
    known_keys: Iterable[PublicKey] = (),
    audit: RemoteLog | None = None,
) -> PushReport:
    """Push the local artifact ``ref`` to the registry as ``remote_ref`` (default: the same name).

    ``trust`` defaults to ``$KVREG_HOME/trust.json``; ``known_keys`` only name an
    untrusted signer in the error. ``tag`` creates the remote ref as an immutable
    tag (it must not exist yet, or be that tag already). With ``audit`` the
    registry's log is checked and the change proven logged (the caller saves it).
    """
    validate_jobs(jobs)
    progress = progress or NullProgress()
    target = remote_ref or ref
    ns, name = target.namespace, target.name
    artifact = open_artifact(home, str(ref), trust=trust, known_keys=known_keys)
    digest = artifact.digest
    envelope_bytes = home.envelopes.get(digest)
    digests = artifact.manifest.object_digests()
    sizes = {d: _local_size(home, d, ref) for d in digests}

    if audit is not None:
        audit.check()
    before = client.get_ref(ns, name)  # fail before uploading anything if the ref cannot move
    _check_remote_ref(target, before, digest, tag)

    batch = client.limit("max_missing_digests", DEFAULT_MAX_MISSING_DIGESTS)
    sessions: list[str] = []
    session_of: dict[Digest, str] = {}
    missing: list[Digest] = []
    stop = threading.Event()
    counter = Counter(progress, stop)
    try:
        for i in range(0, len(digests), batch):
            part = digests[i : i + batch]
            upload_id, absent = client.open_upload(ns, part)
            sessions.append(upload_id)
            session_of.update(dict.fromkeys(part, upload_id))
            wanted = set(part)
            missing += [d for d in absent if d in wanted]
        missing = list(dict.fromkeys(missing))
        progress.start(sum(sizes[d] for d in missing), len(missing))

        def send(d: Digest) -> None:
            if stop.is_set():
                raise Cancelled
            client.put_object(
                ns, d, home.objects.path(d), sizes[d], upload_id=session_of[d], progress_cb=counter.advance
            )
            counter.done()

        run_parallel(missing, send, jobs, stop)
        crash_point("client.push.after_objects")
        try:
            stored_envelope = client.store_envelope(ns, digest, envelope_bytes)
        except ObjectsMissingError as e:  # e.g. collected between the missing query and now
            again = [d for d in _digests_in(e.details.get("missing")) if d in sizes]
            if not again:
                raise
            log.warning("the registry lost %d objects during the push; sending them again", len(again))
            run_parallel(again, send, jobs, stop)
            stored_envelope = client.store_envelope(ns, digest, envelope_bytes)
        envelope_new = stored_envelope.created
        crash_point("client.push.after_envelope")

        current_logged = client.get_ref_logged(ns, name)
        current = None if current_logged is None else current_logged.value
        _check_remote_ref(target, current, digest, tag)
        changed = current is None or current.digest != digest
        ref_index = None if current_logged is None else current_logged.log_index
        if changed:
            try:
                update = client.update_ref(
                    ns, name, digest, None if current is None else current.digest, tag=tag
                )
                ref_index = update.log_index
                crash_point("client.push.after_ref")
            except RefConflictError as e:
                if e.hint is None and type(e) is RefConflictError:
                    e.hint = (
                        f"{target} moved on the registry during the push; see where it is now "
                        f"(kvreg ls-remote {client.remote_name or 'NAME'} {ns}) and push again to replace it"
                    )
                raise
    finally:
        for upload_id in sessions:
            try:
                client.close_upload(ns, upload_id)
            except KvregError as e:  # the session expires on its own
                log.warning("could not close upload session %s: %s", upload_id, e.message)

    audit_report = None
    if audit is not None:
        claims: list[EntryClaim] = []
        if envelope_new:
            claims.append(envelope_claim(stored_envelope.log_index, ns, str(digest)))
        if changed and ref_index is None:  # a retried update whose answer was lost: ask the ref
            latest = client.get_ref_logged(ns, name)
            ref_index = None if latest is None or latest.digest != digest else latest.log_index
        if changed:
            old = None if current is None else str(current.digest)
            claims.append(
                ref_claim(ref_index, ns, name, str(digest), created=current is None, tag=tag, old=old)
            )
        else:
            claims.append(ref_claim(ref_index, ns, name, str(digest)))
        audit_report = audit.prove(claims)

    log.info("pushed %s to %s/%s (%s)", ref, ns, name, digest)
    return PushReport(
        remote=client.remote_name,
        ref=str(ref),
        remote_ref=str(target),
        digest=str(digest),
        tag=tag or bool(current is not None and current.tag),
        objects_total=len(digests),
        objects_missing=len(missing),
        objects_sent=counter.objects,
        bytes_total=sum(sizes.values()),
        bytes_sent=counter.bytes,
        envelope_new=envelope_new,
        old=None if current is None else str(current.digest),
        new=str(digest),
        ref_changed=changed,
        audit=audit_report,
    )


def _local_size(home: Home, digest: Digest, ref: RefName) -> int:
    try:
        return home.objects.size(digest)
    except ObjectNotFoundError as e:
        why = paging.absence_error(home, digest, f"object {digest} of {ref}", ref=str(ref))
        if why is not None:  # evicted, or left on the registry by a lazy pull: say how to get it
            why.message += "; cannot push an incomplete artifact"
            raise why from e
        raise ObjectNotFoundError(
            f"object {digest} of {ref} is missing from the local store; cannot push an incomplete artifact",
            hint="run 'kvreg fsck'; pull or deposit the artifact again",
            digest=str(digest),
        ) from e


def _digests_in(value: Any) -> list[Digest]:
    out: list[Digest] = []
    for item in value if isinstance(value, list) else []:
        with contextlib.suppress(KvregError):
            out.append(Digest(item))
    return out


def _check_remote_ref(target: RefName, current: RefValue | None, digest: Digest, tag: bool) -> None:
    """Refuse early what the registry would refuse: moving a tag, tagging an existing ref."""
    if current is None:
        return
    if current.tag and current.digest != digest:
        raise TagImmutableError(
            f"remote ref {target} is an immutable tag on {current.digest}: it cannot move to {digest}",
            hint="push under another name: kvreg push NAME REF --as NS/OTHER",
            ref=str(target),
            current=str(current.digest),
        )
    if tag and not current.tag:
        raise RefConflictError(
            f"remote ref {target} exists already (at {current.digest}); a tag can only be created",
            hint="push the tag under a new name: --as NS/NEW --tag",
            ref=str(target),
            current=str(current.digest),
        )


# --- pull ----------------------------------------------------------------------------------


def known_sizes(manifest: Manifest) -> dict[Digest, int]:
    """Sizes the signed manifest states (chunks, tokens, text, prompt); others are unknown."""
    sizes: dict[Digest, int] = {c.digest: c.size for c in manifest.chunks}
    sizes[manifest.tokens.digest] = 4 * manifest.token_count
    sizes[manifest.text.digest] = manifest.text.size
    if manifest.prompt is not None:
        sizes[manifest.prompt.digest] = manifest.prompt.size
    return sizes


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def _progress_total(manifest: Manifest, sizes: dict[Digest, int], digests: list[Digest]) -> int:
    """Bytes to expect for the progress bar: stated sizes, plus the witness logits estimated
    from their shape and dtype (an estimate only: it bounds nothing)."""
    estimates = dict(sizes)
    w = manifest.witness
    if w.logits_digest not in estimates and w.dtype in _ITEMSIZE:
        n = _ITEMSIZE[w.dtype]
        for dim in w.shape:
            n *= dim
        estimates[w.logits_digest] = n
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
    _check_local_ref(home, dest, digest)

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
    signer = _signer(envelope, policy.keys_for(dest.namespace))
    audit_report = None
    if audit is not None:
        audit_report = audit.prove(
            [
                ref_claim(remote.log_index, ns, ref.name, str(digest)),
                envelope_claim(envelope_index, ns, str(digest)),
            ]
        )

    digests = manifest.object_digests()
    absent = [d for d in digests if not home.objects.has(d)]
    deferred: list[Digest] = []
    if lazy:  # only the tokens (the router and the token check before a graft read them)
        deferred = [d for d in absent if d != manifest.tokens.digest]
        absent = [d for d in absent if d == manifest.tokens.digest]
    sizes = known_sizes(manifest)
    cap: int | None = None
    if absent:  # objects whose size the manifest does not state are capped by the registry's limit
        cap = client.limit("max_object_bytes", 0) or None
    stop = threading.Event()
    counter = Counter(progress, stop)

    with contextlib.ExitStack() as held, Staging(home, digest) as staging:
        try:
            staged_before = sum(1 for d in absent if staging.has(d))
            progress.start(_progress_total(manifest, sizes, absent), len(absent))

            def fetch(d: Digest) -> None:
                if stop.is_set():
                    raise Cancelled
                staging.fetch(client, ns, d, size=sizes.get(d), cap=cap, counter=counter)

            run_parallel(absent, fetch, jobs, stop)
            crash_point("client.pull.after_fetch")
            # Verified; from here to the end the artifact is leased (eviction leaves it alone).
            # Not before: a refused download leaves no trace in the store, not even a lease.
            held.enter_context(paging.lease(home, [digest, *digests]))
            staging.install(absent)
            crash_point("client.pull.after_objects")
            home.objects.put_bytes(envelope.payload, expected=digest)
            crash_point("client.pull.after_manifest")
            home.envelopes.put(digest, envelope_bytes)
        except DigestMismatchError:
            staging.discard()
            raise
        staging.discard()  # everything is in the store now
        if deferred:  # before the ref: fsck never sees them as merely missing
            paging.record_deferred(
                home, deferred, remote=client.remote_name, remote_ref=str(ref), local_ref=str(dest)
            )
        crash_point("client.pull.before_ref")
        old, changed = _set_local_ref(home, dest, digest, tag=remote.tag)
        if pin:
            paging.pin(home, str(dest))
        eviction = paging.evict_if_over_budget(home)  # never this artifact: it is leased
    index_artifact(home, manifest)  # for the router; best effort (kvreg.store.route_index)

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
        objects_local=len(digests) - len(absent),
        objects_staged=staged_before,
        objects_downloaded=counter.objects,
        bytes_downloaded=counter.bytes,
        old=None if old is None else str(old),
        new=str(digest),
        ref_changed=changed,
        audit=audit_report,
        lazy=lazy,
        objects_deferred=len(deferred),
        pinned=pin,
        eviction=None if eviction is None else eviction.to_dict(),
    )


def _signer(envelope: Envelope, trusted: list[PublicKey]) -> str | None:
    """The key id of the trusted key whose signature verified (for the report)."""
    message = pae(envelope.payload_type, envelope.payload)
    for s in envelope.signatures:
        for key in trusted:
            with contextlib.suppress(KvregError):
                key.verify(s.sig, message)
                return key.keyid
    return None


def _check_local_ref(home: Home, dest: RefName, digest: Digest) -> None:
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
    _check_local_ref(home, dest, digest)
    entry = home.refs.entry(dest)
    old = None if entry is None else entry.digest
    if entry is not None and entry.digest == digest and (entry.tag or not tag):
        return old, False
    if tag:
        home.refs.tag(dest, digest, expected=old)
    else:
        home.refs.set(dest, digest, expected=old)
    return old, True
