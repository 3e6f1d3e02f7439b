"""Push: send a signed artifact of the local store to a registry.

**Push** (docs/design.md, "Flows") opens the local artifact, verified against the local
trust policy as every other reader does; opens upload sessions listing every
object the manifest references (the registry answers which are missing and keeps
the listed objects safe from its GC until the session closes); uploads the
missing ones in parallel, streamed from the store's files (several small ones in
one request, an object pack, where the registry takes them: ``kvreg.remote.packing``);
uploads the exact envelope bytes; then reads the remote ref and moves it by compare-and-swap from
the value it just read (``If-None-Match: *`` when absent); and closes the
sessions. Objects, then envelope, then ref: a reader never sees a ref whose
objects are missing. Running it again after an interruption sends only what is
still missing.

**The audit log.** Given a ``RemoteLog`` (``kvreg.remote.auditlog``; the CLI
always gives one), push first verifies the registry's signed checkpoint against
the one this store saw before (after the local checks, before the first request
that reads or changes anything), then proves that the registry logged its change:
the envelope's entry when the envelope was new, and the ref's entry (its
creation or move, or its latest change when it was up to date already), each
read, compared with what was done and proven included in a fresh checkpoint.
The report's ``audit`` says what was verified. Without a ``RemoteLog`` nothing of
the log is checked.

This module neither prints nor imports rich (``kvreg.cli.remote`` renders); it
does not configure remotes or tokens (``kvreg.remote.remotes``). Pull is
``kvreg.remote.pulling``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    KvregError,
    ObjectNotFoundError,
    ObjectsMissingError,
    RefConflictError,
    TagImmutableError,
)
from kvreg.core.keys import PublicKey
from kvreg.core.logverify import EntryClaim, envelope_claim, ref_claim
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.faults import crash_point
from kvreg.remote.api.objects import DEFAULT_MAX_MISSING_DIGESTS
from kvreg.remote.api.refs import RefValue
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.http import RegistryClient
from kvreg.remote.packing import PACK_BYTES, plan_packs
from kvreg.remote.progress import Cancelled, Counter, NullProgress, Progress, run_parallel, validate_jobs
from kvreg.store import absence
from kvreg.store.artifacts import open_artifact
from kvreg.store.home import Home

log = logging.getLogger(__name__)

__all__ = ["PushReport", "local_size", "push"]


@dataclass(frozen=True)
class PushReport:
    """What a push did. ``old``/``new``: the remote ref before and after (``old`` None: created).
    ``objects_mounted``: blobs an OCI registry mounted from another repository (no bytes sent);
    ``oci``: where an OCI push put the artifact (repository, tag, manifest and signature digests)."""

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
    objects_mounted: int = 0
    oci: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    sizes = {d: local_size(home, d, ref) for d in digests}

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

        pack_objects = client.limit("max_pack_objects", 0)  # 0: a registry without packs
        pack_bytes = client.limit("max_pack_bytes", PACK_BYTES)

        def plan(wanted: list[Digest]) -> list[list[Digest]]:
            if pack_objects < 2:
                return [[d] for d in wanted]
            return plan_packs(
                wanted, sizes, session_of, max_objects=pack_objects, max_bytes=pack_bytes, jobs=jobs
            )

        def send(pack: list[Digest]) -> None:
            if stop.is_set():
                raise Cancelled
            if len(pack) == 1:
                d = pack[0]
                path, upload_id = home.objects.path(d), session_of[d]
                client.put_object(ns, d, path, sizes[d], upload_id=upload_id, progress_cb=counter.advance)
            else:
                items = [(d, home.objects.path(d), sizes[d]) for d in pack]
                client.put_objects(ns, session_of[pack[0]], items, progress_cb=counter.advance)
            for _ in pack:
                counter.done()

        run_parallel(plan(missing), send, jobs, stop)
        crash_point("client.push.after_objects")
        try:
            stored_envelope = client.store_envelope(ns, digest, envelope_bytes)
        except ObjectsMissingError as e:  # e.g. collected between the missing query and now
            again = [d for d in _digests_in(e.details.get("missing")) if d in sizes]
            if not again:
                raise
            log.warning("the registry lost %d objects during the push; sending them again", len(again))
            run_parallel(plan(again), send, jobs, stop)
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


def local_size(home: Home, digest: Digest, ref: RefName) -> int:
    try:
        return home.objects.size(digest)
    except ObjectNotFoundError as e:
        why = absence.absence_error(home, digest, f"object {digest} of {ref}", ref=str(ref))
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
