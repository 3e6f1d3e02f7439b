"""Refs and immutable tags, moved only by compare-and-swap.

``put`` takes the expected current value: ``None`` means "must not exist"
(``If-None-Match: *``), a digest means "must be at exactly this digest"
(``If-Match``). The row is locked (``FOR UPDATE``) before it is compared, and the
update itself repeats the comparison, so of two racing writers exactly one wins
and the other gets ``RefConflictError`` — on SQLite and on PostgreSQL. A tag can
be created, never moved or deleted. A ref under a legal hold can be neither moved nor
deleted, and no ref can be deleted while its namespace is held
(``kvreg_registry.services.holds``). Every change appends an audit entry.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    ManifestUnknownError,
    RefConflictError,
    RefNotFoundError,
    RequestInvalidError,
    TagImmutableError,
)
from kvreg.core.names import validate_name
from kvreg.fileio.faults import crash_point
from kvreg_registry import audit
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import add_in_savepoint, rowcount
from kvreg_registry.db.models import Envelope, Namespace, Ref, utcnow
from kvreg_registry.services import holds


def get(session: Session, ns: Namespace, name: str, *, lock: bool = False) -> Ref:
    validate_name(name)
    stmt = select(Ref).where(Ref.namespace_id == ns.id, Ref.name == name)
    row = session.scalar(stmt.with_for_update() if lock else stmt)
    if row is None:
        raise RefNotFoundError(f"no ref {ns.name}/{name}")
    return row


def list_refs(session: Session, ns: Namespace) -> list[Ref]:
    return list(session.scalars(select(Ref).where(Ref.namespace_id == ns.id).order_by(Ref.name)).all())


def _tag_error(ns: Namespace, row: Ref) -> TagImmutableError:
    return TagImmutableError(
        f"{ns.name}/{row.name} is an immutable tag (at {row.manifest_digest})",
        hint="push under another name",
        current=row.manifest_digest,
    )


def put(
    session: Session,
    principal: Principal,
    ns: Namespace,
    name: str,
    digest: Digest,
    *,
    expected: Digest | None,
    tag: bool = False,
) -> tuple[Ref, bool, int]:
    """Create (``expected=None``) or move (``expected=digest``) a ref.

    Returns (row, created, sequence number of the audit entry)."""
    validate_name(name)
    principal.require(session, ns, "write")
    if session.get(Envelope, (ns.id, digest)) is None:
        raise ManifestUnknownError(
            f"namespace {ns.name!r} has no envelope {digest}",
            hint="upload the envelope before moving the ref",
        )
    current = session.scalar(select(Ref).where(Ref.namespace_id == ns.id, Ref.name == name).with_for_update())
    now = utcnow()
    if expected is None:
        if current is not None:
            if current.is_tag:
                raise _tag_error(ns, current)
            raise RefConflictError(
                f"{ns.name}/{name} exists already (at {current.manifest_digest})",
                current=current.manifest_digest,
            )
        row = Ref(
            namespace_id=ns.id,
            name=name,
            manifest_digest=digest,
            is_tag=tag,
            created_at=now,
            updated_at=now,
            updated_by=principal.name,
        )
        try:
            add_in_savepoint(session, row)
        except IntegrityError:
            raise RefConflictError(f"{ns.name}/{name} was created concurrently") from None
        crash_point("registry.ref.before_log")
        seq = audit.append(
            session,
            "tag.created" if tag else "ref.created",
            actor=principal.name,
            namespace=ns.name,
            subjects=[digest],
            old=None,
            new=str(digest),
            details={"ref": f"{ns.name}/{name}"},
        )
        row.log_seq = seq
        return row, True, seq
    if tag:
        raise RequestInvalidError(
            "a tag is made when the ref is created (If-None-Match: *), never by moving it"
        )
    if current is None:
        raise RefConflictError(f"{ns.name}/{name} does not exist (expected it at {expected})", current=None)
    if current.is_tag:
        raise _tag_error(ns, current)
    holds.check_ref_changeable(session, ns, name, current.manifest_digest, delete=False)
    if current.manifest_digest != expected:
        raise RefConflictError(
            f"{ns.name}/{name} is at {current.manifest_digest}, not {expected}: it moved since it was read",
            hint="pull or re-read the ref, then retry",
            current=current.manifest_digest,
        )
    result = session.execute(
        update(Ref)
        .where(
            Ref.namespace_id == ns.id,
            Ref.name == name,
            Ref.manifest_digest == expected,
            Ref.is_tag.is_(False),
        )
        .values(manifest_digest=digest, updated_at=now, updated_by=principal.name)
        .execution_options(synchronize_session=False)
    )
    if rowcount(result) != 1:
        raise RefConflictError(f"{ns.name}/{name} moved concurrently", current=None)
    crash_point("registry.ref.before_log")
    seq = audit.append(
        session,
        "ref.moved",
        actor=principal.name,
        namespace=ns.name,
        subjects=[digest],
        old=str(expected),
        new=str(digest),
        details={"ref": f"{ns.name}/{name}"},
    )
    session.execute(
        update(Ref)
        .where(Ref.namespace_id == ns.id, Ref.name == name)
        .values(log_seq=seq)
        .execution_options(synchronize_session=False)
    )
    session.refresh(current)
    return current, False, seq


def remove(session: Session, principal: Principal, ns: Namespace, name: str, *, expected: Digest) -> None:
    principal.require(session, ns, "admin")
    holds.lock_namespace(session, ns)
    row = get(session, ns, name, lock=True)
    if row.is_tag:
        raise _tag_error(ns, row)
    holds.check_ref_changeable(session, ns, name, row.manifest_digest, delete=True)
    if row.manifest_digest != expected:
        raise RefConflictError(
            f"{ns.name}/{name} is at {row.manifest_digest}, not {expected}", current=row.manifest_digest
        )
    session.execute(
        delete(Ref).where(Ref.namespace_id == ns.id, Ref.name == name, Ref.manifest_digest == expected)
    )
    audit.append(
        session,
        "ref.deleted",
        actor=principal.name,
        namespace=ns.name,
        subjects=[expected],
        old=str(expected),
        new=None,
        details={"ref": f"{ns.name}/{name}"},
    )
