"""Garbage collection: drop what no envelope references, after a grace period.

One pass, in this order:

0. apply the namespaces' retention policies (``kvreg_registry.services.retention``):
   delete envelopes that no rule keeps, no ref points at and no legal hold protects,
   each with its ``envelope.deleted`` tombstone entry, so the next phases free
   their objects;
1. close upload sessions that have expired, and forget closed ones older than the
   grace period;
2. drop a namespace's hold on an object that no envelope of that namespace
   references (as a chunk, tokens, text, witness, prompt or as the manifest
   itself), that is older than the grace period, and that no open upload session of
   that namespace lists (a push in flight there), unless the namespace is under a legal hold (a
   namespace hold keeps everything the namespace holds);
3. delete every object that no namespace holds, older than the grace period and
   listed in no open session: row and bytes together, under the object's row lock
   (``objects.lock_object``), the same lock an upload holds while it makes an
   object visible, so GC never deletes bytes an upload has just reported stored;
4. delete orphan bytes in storage (no row: a crash between storage and database)
   older than the grace period, each under a row GC inserts for it
   (``objects.claim_unclaimed``), and only if no upload committed a row for the
   digest since the listing; and leftovers of crashed uploads: temp files idle
   for the grace period and at least ``INCOMPLETE_MIN_AGE_S`` (an hour), whatever
   the grace, so that a short grace (0 in tests) never pulls the temp file from
   under an upload in flight (found by ``bench/soak.py``: such an upload failed
   with a 500).

Foreign keys back this up: the database refuses to drop a hold that an envelope
references. The GC run is logged (``gc.run``, with what retention deleted and what
legal holds kept).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from sqlalchemy import and_, delete, exists, func, select

from kvreg.core.digest import Digest
from kvreg.fileio.faults import crash_point
from kvreg_registry import audit
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database, rowcount
from kvreg_registry.db.models import (
    Envelope,
    EnvelopeObject,
    NamespaceObject,
    StoredObject,
    UploadDigest,
    UploadSession,
    utcnow,
)
from kvreg_registry.services import holds, retention
from kvreg_registry.services import objects as object_service
from kvreg_registry.storage.base import ObjectStorage
from kvreg_registry.storage.base import StoredObject as StoredObjectInfo

log = logging.getLogger(__name__)

MAX_LISTED = 1000
#: Upload temp files younger than this are never swept, whatever the grace period.
INCOMPLETE_MIN_AGE_S = 3600


@dataclass
class GcReport:
    sessions_expired: int = 0
    sessions_removed: int = 0
    links_removed: int = 0
    objects_removed: int = 0
    bytes_removed: int = 0
    orphans_removed: int = 0
    incomplete_removed: int = 0
    retention_deleted: int = 0
    retention_held: int = 0
    links_held: int = 0
    dry_run: bool = False

    def to_dict(self) -> dict[str, int | bool]:
        return asdict(self)


def _without_rows(
    db: Database, storage: ObjectStorage, cutoff: float, in_flight: set[str]
) -> Iterator[StoredObjectInfo]:
    """The stored objects older than ``cutoff``, listed in no open session, that had no row when
    looked up: candidate orphans, checked again under the row lock before anything is deleted.

    The rows are looked up ``MAX_LISTED`` at a time in read transactions: one write transaction
    per stored object (as before) held SQLite's write lock thousands of times per GC and made
    every upload wait (seen in ``bench/soak.py``: GC runs of 8-37 s under load).
    """
    batch: list[StoredObjectInfo] = []

    def unclaimed() -> list[StoredObjectInfo]:
        with db.read() as s:
            known = set(
                s.scalars(
                    select(StoredObject.digest).where(StoredObject.digest.in_([o.digest for o in batch]))
                )
            )
        return [o for o in batch if o.digest not in known]

    for obj in storage.iter_objects():
        if obj.mtime >= cutoff or obj.digest in in_flight:
            continue
        batch.append(obj)
        if len(batch) >= MAX_LISTED:
            yield from unclaimed()
            batch = []
    if batch:
        yield from unclaimed()


def collect_garbage(
    db: Database, storage: ObjectStorage, principal: Principal, *, grace_seconds: int, dry_run: bool = False
) -> GcReport:
    principal.require_admin()
    crash_point("registry.gc.begin")
    report = GcReport(dry_run=dry_run)
    cutoff = utcnow() - dt.timedelta(seconds=grace_seconds)

    kept = retention.apply(db, principal, cutoff=cutoff, dry_run=dry_run)
    report.retention_deleted = kept.deleted
    report.retention_held = kept.held

    with db.write() as s:
        if not dry_run:
            report.sessions_expired = object_service.expire_sessions(s)
            report.sessions_removed = object_service.remove_closed_sessions(s, cutoff)
        # A link is kept for an upload in flight in its own namespace only: a session elsewhere
        # makes a link of its own when it completes (the stored object stays for it, below).
        in_flight_here = object_service.in_open_sessions_clause().where(
            UploadDigest.digest == NamespaceObject.digest,
            UploadSession.namespace_id == NamespaceObject.namespace_id,
        )
        referenced = exists().where(
            EnvelopeObject.namespace_id == NamespaceObject.namespace_id,
            EnvelopeObject.digest == NamespaceObject.digest,
        )
        is_manifest = exists().where(
            Envelope.namespace_id == NamespaceObject.namespace_id,
            Envelope.manifest_digest == NamespaceObject.digest,
        )
        unreferenced = and_(
            NamespaceObject.created_at < cutoff,
            ~referenced,
            ~is_manifest,
            ~in_flight_here.exists(),
        )
        under_hold = NamespaceObject.namespace_id.in_(holds.held_namespace_ids())
        stale_links = and_(unreferenced, ~under_hold)
        report.links_held = (
            s.scalar(select(func.count()).select_from(NamespaceObject).where(unreferenced, under_hold)) or 0
        )
        if dry_run:
            report.links_removed = len(s.execute(select(NamespaceObject.digest).where(stale_links)).all())
        else:
            result = s.execute(
                delete(NamespaceObject).where(stale_links).execution_options(synchronize_session=False)
            )
            report.links_removed = rowcount(result)

    crash_point("registry.gc.after_mark")
    with db.read() as s:
        candidates = s.execute(
            select(StoredObject.digest, StoredObject.size).where(
                StoredObject.created_at < cutoff,
                ~exists().where(NamespaceObject.digest == StoredObject.digest),
                StoredObject.digest.not_in(object_service.in_open_sessions_clause()),
            )
        ).all()
    for digest, size in candidates:
        if dry_run:
            report.objects_removed += 1
            report.bytes_removed += size
            continue
        with db.write() as s:
            row = s.execute(
                select(StoredObject).where(StoredObject.digest == digest).with_for_update()
            ).scalar_one_or_none()
            if row is None:
                continue
            still_held = s.scalar(select(exists().where(NamespaceObject.digest == digest)))
            in_session = object_service.in_open_session(s, digest)
            if still_held or in_session:
                continue
            # The row's deletion is flushed before the bytes go: a database refusal (a
            # constraint) then leaves both in place, never a held row without bytes.
            s.delete(row)
            s.flush()
            storage.delete(Digest(digest))
            crash_point("registry.gc.mid_sweep")
        report.objects_removed += 1
        report.bytes_removed += size

    crash_point("registry.gc.before_orphans")
    known_cutoff = cutoff.timestamp()
    with db.read() as s:
        in_flight_now = set(s.scalars(object_service.in_open_sessions_clause()).all())
    for obj in _without_rows(db, storage, known_cutoff, in_flight_now):
        crash_point("registry.gc.orphan_listed")
        if dry_run:
            with db.read() as s:
                if s.get(StoredObject, obj.digest) is None:
                    report.orphans_removed += 1
            continue
        with db.write() as s:
            # Claim the digest with a row of our own, which an upload waits on; if an upload
            # committed its row since the listing, the bytes are its object: leave them.
            if not object_service.claim_unclaimed(s, obj.digest, obj.size):
                continue
            storage.delete(obj.digest)
            s.execute(delete(StoredObject).where(StoredObject.digest == obj.digest))
        report.orphans_removed += 1
    if not dry_run:
        report.incomplete_removed = storage.sweep_incomplete(max(grace_seconds, INCOMPLETE_MIN_AGE_S))
        with db.write() as s:
            audit.append(
                s,
                "gc.run",
                actor=principal.name,
                details={
                    "grace_seconds": grace_seconds,
                    **{k: v for k, v in report.to_dict().items() if k != "dry_run"},
                    # What retention would have deleted but a legal hold kept (the GC's
                    # refused attempts); each deletion has its own envelope.deleted entry.
                    "retention_held_digests": kept.held_digests[:MAX_LISTED],
                },
            )
    log.info("gc: %s", report)
    return report
