"""Which objects a namespace holds, upload sessions, and the per-object lock.

Bytes live in the storage backend; this module keeps the metadata in step with it:

- ``objects`` says the verified bytes of a digest are in storage;
- ``namespace_objects`` says a namespace holds it (someone with write access
  uploaded it there);
- upload sessions list the digests of a push in flight; GC keeps them.

:func:`lock_object` is the one serialization point between an upload making an
object visible and garbage collection deleting it: both run their storage change
while holding the object's row lock, inside a write transaction, so GC can never
delete bytes that an upload has just been told are stored.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Sequence

from sqlalchemy import Select, delete, exists, select, update
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    BodyTooLargeError,
    DigestMismatchError,
    ObjectNotFoundError,
    RequestInvalidError,
    UnavailableError,
    UploadNotFoundError,
)
from kvreg_registry.db.engine import insert_ignore, insert_ignore_returning, rowcount
from kvreg_registry.db.models import (
    Namespace,
    NamespaceObject,
    StoredObject,
    UploadDigest,
    UploadSession,
    utcnow,
)

BATCH = 500


def parse_digests(values: object, *, limit: int) -> list[Digest]:
    """A JSON list of digest strings, validated and deduplicated in order."""
    if not isinstance(values, list):
        raise RequestInvalidError("'digests' must be an array of digest strings")
    if len(values) > limit:
        raise BodyTooLargeError(f"{len(values)} digests in one request, more than the limit {limit}")
    out: list[Digest] = []
    seen: set[str] = set()
    for v in values:
        d = Digest(v)
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _batches(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), BATCH):
        yield items[i : i + BATCH]


def held(session: Session, ns: Namespace, digests: Sequence[str]) -> set[str]:
    """The subset of ``digests`` that ``ns`` holds."""
    out: set[str] = set()
    for batch in _batches(digests):
        out.update(
            session.scalars(
                select(NamespaceObject.digest).where(
                    NamespaceObject.namespace_id == ns.id, NamespaceObject.digest.in_(batch)
                )
            ).all()
        )
    return out


def missing(session: Session, ns: Namespace, digests: Sequence[Digest]) -> list[Digest]:
    have = held(session, ns, digests)
    return [d for d in digests if d not in have]


def held_size(session: Session, ns: Namespace, digest: Digest) -> int:
    """The size of an object ``ns`` holds; ``ObjectNotFoundError`` otherwise."""
    return held_sizes(session, ns, [digest])[digest]


def held_sizes(session: Session, ns: Namespace, digests: Sequence[Digest]) -> dict[Digest, int]:
    """The size of each of ``digests``, all held by ``ns``; ``ObjectNotFoundError`` names the first
    one (in the order given) that ``ns`` does not hold."""
    sizes: dict[str, int] = {}
    for batch in _batches(digests):
        rows = session.execute(
            select(StoredObject.digest, StoredObject.size)
            .join(NamespaceObject, NamespaceObject.digest == StoredObject.digest)
            .where(NamespaceObject.namespace_id == ns.id, StoredObject.digest.in_(batch))
        )
        sizes.update((digest, size) for digest, size in rows)
    for d in digests:
        if d not in sizes:
            raise ObjectNotFoundError(f"namespace {ns.name!r} has no object {d}")
    return {d: sizes[d] for d in digests}


def open_session(
    session: Session, ns: Namespace, user_id: int | None, digests: Sequence[Digest], ttl_seconds: int
) -> UploadSession:
    now = utcnow()
    row = UploadSession(
        id=str(uuid.uuid4()),
        namespace_id=ns.id,
        user_id=user_id,
        created_at=now,
        expires_at=now + dt.timedelta(seconds=ttl_seconds),
    )
    session.add(row)
    session.flush()
    add_to_session(session, row.id, digests)
    return row


def add_to_session(session: Session, upload_id: str, digests: Sequence[str]) -> None:
    for batch in _batches(digests):
        insert_ignore(session, UploadDigest.__table__, [{"upload_id": upload_id, "digest": d} for d in batch])


def unlisted_in_open_session(
    session: Session, ns: Namespace, upload_id: str, digests: Sequence[str]
) -> list[str]:
    """The ``digests`` that ``upload_id``, an open session of ``ns``, does not list (all of them when it
    is not one: :func:`get_open_session` then says why), in one query per 500 digests (the usual
    case of a push's PUT or pack: the session lists them all already)."""
    try:
        uuid.UUID(upload_id)
    except (ValueError, TypeError):
        raise RequestInvalidError(f"not an upload id: {upload_id!r}") from None
    listed: set[str] = set()
    for batch in _batches(digests):
        listed.update(
            session.scalars(
                select(UploadDigest.digest)
                .join(UploadSession, UploadSession.id == UploadDigest.upload_id)
                .where(
                    UploadDigest.upload_id == upload_id,
                    UploadDigest.digest.in_(batch),
                    UploadSession.namespace_id == ns.id,
                    UploadSession.closed_at.is_(None),
                    UploadSession.expires_at > utcnow(),
                )
            ).all()
        )
    return [d for d in digests if d not in listed]


def get_open_session(session: Session, ns: Namespace, upload_id: str) -> UploadSession:
    try:
        uuid.UUID(upload_id)
    except (ValueError, TypeError):
        raise RequestInvalidError(f"not an upload id: {upload_id!r}") from None
    row = session.get(UploadSession, upload_id)
    if row is None or row.namespace_id != ns.id or row.closed_at is not None or row.expires_at <= utcnow():
        raise UploadNotFoundError(f"no open upload session {upload_id} in namespace {ns.name!r}")
    return row


def close_session(session: Session, ns: Namespace, upload_id: str) -> bool:
    """Close an upload session; True if it was open (idempotent)."""
    try:
        uuid.UUID(upload_id)
    except (ValueError, TypeError):
        raise RequestInvalidError(f"not an upload id: {upload_id!r}") from None
    row = session.get(UploadSession, upload_id)
    if row is None or row.namespace_id != ns.id:
        raise UploadNotFoundError(f"no upload session {upload_id} in namespace {ns.name!r}")
    if row.closed_at is None:
        row.closed_at = utcnow()
        return True
    return False


def lock_object(session: Session, digest: Digest, size: int) -> None:
    """Insert the object's row if absent and lock it for the rest of the transaction.

    A row this call inserts is locked already (PostgreSQL locks the rows a transaction
    inserts; SQLite's write transaction is exclusive), so only an existing row is read
    with a lock. On PostgreSQL the insert finds a committed row without waiting on its
    lock; if GC holds that lock and deletes the row, the locking read then finds
    nothing: the insert is tried again (GC has committed by then, so the second insert
    goes in or finds a new row).
    """
    lock_objects(session, [(digest, size)])


def lock_objects(session: Session, items: Iterable[tuple[Digest, int]]) -> None:
    """:func:`lock_object` for several objects in two statements, not two per object.

    The rows are inserted in digest order by one statement, then the existing ones are read
    with a lock in digest order by another: two transactions locking overlapping sets never
    wait on each other in a cycle (an insert waits only on a row another transaction
    inserted, which it reached first in the same order; a locking read only on a row another
    transaction locked the same way). An existing row of another size refuses them all.
    """
    wanted = {str(d): size for d, size in items}
    todo = sorted(wanted)
    now = utcnow()
    for _ in range(3):
        inserted = set(
            insert_ignore_returning(
                session,
                StoredObject.__table__,
                [{"digest": d, "size": wanted[d], "created_at": now} for d in todo],
                "digest",
            )
        )
        existing = [d for d in todo if d not in inserted]
        if not existing:
            return
        rows = session.execute(
            select(StoredObject.digest, StoredObject.size)
            .where(StoredObject.digest.in_(existing))
            .order_by(StoredObject.digest)
            .with_for_update()
        )
        found = {str(d): int(size) for d, size in rows}
        for d, size in found.items():
            if size != wanted[d]:
                # Same digest, other length: these bytes cannot hash to the digest.
                raise DigestMismatchError(
                    f"object {d} has {size} bytes; the uploaded bytes ({wanted[d]}) cannot hash to it"
                )
        todo = [d for d in existing if d not in found]  # deleted by GC since the insert: again
        if not todo:
            return
    raise UnavailableError(  # pragma: no cover - three GC deletions of one digest during one upload
        f"object {todo[0]} was garbage-collected three times while being stored; retry"
    )


def claim_unclaimed(session: Session, digest: Digest, size: int) -> bool:
    """Insert the row of bytes that no row claimed when listed, locked for the transaction.

    True if this transaction inserted it: nobody else claims the bytes and, until the
    transaction ends, an upload of the digest waits on the row (:func:`lock_object`), so
    the caller may delete them. False if an upload committed the row after the bytes were
    listed: the bytes are that upload's object now, and must be left alone. (Locking the
    existing row instead, as GC once did, let it delete the bytes of an object a namespace
    had just been told it holds: found by ``bench/soak.py`` on PostgreSQL.)
    """
    return _insert_row_if_absent(session, digest, size)


def _insert_row_if_absent(session: Session, digest: Digest, size: int) -> bool:
    """Insert the object's row unless one exists; True if this call inserted it."""
    rows = [{"digest": digest, "size": size, "created_at": utcnow()}]
    return insert_ignore(session, StoredObject.__table__, rows) > 0


def hold(session: Session, ns: Namespace, digest: Digest) -> bool:
    """Record that ``ns`` holds ``digest`` (already in ``objects``); True if new."""
    return bool(hold_many(session, ns, [digest]))


def hold_many(session: Session, ns: Namespace, digests: Iterable[Digest]) -> set[str]:
    """:func:`hold` for several digests in one statement; the digests that were new to ``ns``."""
    now = utcnow()
    rows = [{"namespace_id": ns.id, "digest": str(d), "created_at": now} for d in digests]
    return set(insert_ignore_returning(session, NamespaceObject.__table__, rows, "digest"))


def expire_sessions(session: Session) -> int:
    now = utcnow()
    result = session.execute(
        update(UploadSession)
        .where(UploadSession.closed_at.is_(None), UploadSession.expires_at <= now)
        .values(closed_at=now)
    )
    return rowcount(result)


def in_open_sessions_clause() -> Select[str]:
    """A subquery of the digests listed in open, unexpired upload sessions."""
    return (
        select(UploadDigest.digest)
        .join(UploadSession, UploadSession.id == UploadDigest.upload_id)
        .where(UploadSession.closed_at.is_(None), UploadSession.expires_at > utcnow())
    )


def in_open_session(session: Session, digest: str) -> bool:
    return bool(
        session.scalar(select(exists(in_open_sessions_clause().where(UploadDigest.digest == digest))))
    )


def remove_closed_sessions(session: Session, cutoff: dt.datetime) -> int:
    """Delete sessions closed before ``cutoff`` (their digest lists go with them)."""
    old = select(UploadSession.id).where(
        UploadSession.closed_at.is_not(None), UploadSession.closed_at < cutoff
    )
    ids = list(session.scalars(old).all())
    for batch in _batches(ids):
        session.execute(delete(UploadDigest).where(UploadDigest.upload_id.in_(batch)))
        session.execute(delete(UploadSession).where(UploadSession.id.in_(batch)))
    return len(ids)
