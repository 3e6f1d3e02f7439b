"""Per-namespace retention, applied by garbage collection.

A policy keeps envelopes by two rules, either or both set:

- ``keep_versions = N``: the N newest envelopes of the namespace (by the time the
  registry stored them; ties by digest), referenced or not;
- ``keep_days = D``: every envelope stored less than D days ago.

An envelope is **kept if any rule that is set keeps it** (with both set: the N newest,
and everything younger than D days). Deletion cannot be undone, so of the two ways
to combine the rules this is the one that deletes less. Whatever the policy, retention
never deletes an envelope that a ref points at, one a legal hold protects
(``kvreg_registry.services.holds``), or one younger than GC's grace period (a push
stores the envelope before it moves the ref: the grace period covers that window).

GC applies retention first (:func:`apply`), one envelope per transaction: under the
namespace row's lock it re-reads the policy and re-checks refs, holds and age, then
deletes the envelope and appends its ``envelope.deleted`` tombstone (``details.reason``
``"retention"``, the policy) in the same transaction. GC's later phases then free the
objects no envelope references any more. Envelopes retention would have deleted but a
hold kept are counted and named in GC's ``gc.run`` entry.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, Exists, and_, exists, func, or_, select
from sqlalchemy.orm import Session

from kvreg.core.errors import InUseError, RequestInvalidError
from kvreg_registry import audit
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database
from kvreg_registry.db.models import Envelope, Namespace, Ref, RetentionPolicy, utcnow
from kvreg_registry.services import envelopes as envelope_service
from kvreg_registry.services import holds

MAX_KEEP = 1_000_000


def policy_doc(p: RetentionPolicy | None) -> dict[str, int | None] | None:
    return None if p is None else {"keep_versions": p.keep_versions, "keep_days": p.keep_days}


def get_policy(session: Session, ns: Namespace) -> RetentionPolicy | None:
    return session.get(RetentionPolicy, ns.id)


def set_policy(
    session: Session,
    principal: Principal,
    ns: Namespace,
    *,
    keep_versions: int | None,
    keep_days: int | None,
) -> tuple[RetentionPolicy, int | None]:
    """Set the namespace's policy (namespace admin). Logged ``retention.set`` with the old and
    new values; setting the same values again logs nothing (second value None)."""
    principal.require(session, ns, "admin")
    if keep_versions is None and keep_days is None:
        raise RequestInvalidError(
            "a retention policy needs keep_versions, keep_days or both",
            hint="to keep everything, clear the policy (DELETE, or kvreg-admin retention clear NS)",
        )
    for name, value in (("keep_versions", keep_versions), ("keep_days", keep_days)):
        if value is not None and (isinstance(value, bool) or not 1 <= value <= MAX_KEEP):
            raise RequestInvalidError(f"{name} must be between 1 and {MAX_KEEP}")
    holds.lock_namespace(session, ns)
    row = session.get(RetentionPolicy, ns.id, with_for_update=True)
    old = policy_doc(row)
    new = {"keep_versions": keep_versions, "keep_days": keep_days}
    if old == new and row is not None:
        return row, None
    now = utcnow()
    if row is None:
        row = RetentionPolicy(namespace_id=ns.id)
        session.add(row)
    row.keep_versions = keep_versions
    row.keep_days = keep_days
    row.updated_at = now
    row.updated_by = principal.name
    session.flush()
    seq = audit.append(session, "retention.set", actor=principal.name, namespace=ns.name, old=old, new=new)
    return row, seq


def clear_policy(session: Session, principal: Principal, ns: Namespace) -> int | None:
    """Remove the namespace's policy (namespace admin): keep everything. Logged
    ``retention.cleared``; clearing when there is none logs nothing and returns None."""
    principal.require(session, ns, "admin")
    holds.lock_namespace(session, ns)
    row = session.get(RetentionPolicy, ns.id, with_for_update=True)
    if row is None:
        return None
    old = policy_doc(row)
    session.delete(row)
    session.flush()
    return audit.append(session, "retention.cleared", actor=principal.name, namespace=ns.name, old=old)


# --- applying a policy ------------------------------------------------------------------------


@dataclass
class RetentionReport:
    deleted: int = 0
    held: int = 0
    deleted_digests: list[str] = field(default_factory=list)
    held_digests: list[str] = field(default_factory=list)


def _referenced(ns_id: int) -> Exists:
    return exists().where(Ref.namespace_id == ns_id, Ref.manifest_digest == Envelope.manifest_digest)


def _expired_clause(ns_id: int, policy: RetentionPolicy, now: dt.datetime) -> ColumnElement[bool]:
    """Envelopes of ``ns_id`` that no rule of ``policy`` keeps."""
    conds = []
    if policy.keep_days is not None:
        conds.append(Envelope.created_at < now - dt.timedelta(days=policy.keep_days))
    if policy.keep_versions is not None:
        n = Envelope.__table__.alias("newer")
        count_newer = (
            select(func.count())
            .select_from(n)
            .where(
                n.c.namespace_id == ns_id,
                or_(
                    n.c.created_at > Envelope.created_at,
                    and_(
                        n.c.created_at == Envelope.created_at, n.c.manifest_digest > Envelope.manifest_digest
                    ),
                ),
            )
            .scalar_subquery()
        )
        conds.append(count_newer >= policy.keep_versions)
    return and_(*conds)


def expired(
    session: Session, ns: Namespace, policy: RetentionPolicy, *, now: dt.datetime, cutoff: dt.datetime
) -> list[str]:
    """The envelopes of ``ns`` that the policy lets go: no rule keeps them, no ref points at
    them, older than ``cutoff`` (GC's grace period). Holds are not looked at here."""
    stmt = (
        select(Envelope.manifest_digest)
        .where(
            Envelope.namespace_id == ns.id,
            Envelope.created_at < cutoff,
            ~_referenced(ns.id),
            _expired_clause(ns.id, policy, now),
        )
        .order_by(Envelope.created_at, Envelope.manifest_digest)
    )
    return list(session.scalars(stmt).all())


def apply(
    db: Database, principal: Principal, *, cutoff: dt.datetime, dry_run: bool = False
) -> RetentionReport:
    """Apply every namespace's policy (GC's first phase; the caller checked the server-admin role)."""
    report = RetentionReport()
    now = utcnow()
    with db.read() as s:
        namespaces = list(
            s.scalars(
                select(Namespace).join(RetentionPolicy, RetentionPolicy.namespace_id == Namespace.id)
            ).all()
        )
    for ns in namespaces:
        with db.read() as s:
            policy = s.get(RetentionPolicy, ns.id)
            if policy is None:
                continue
            candidates = expired(s, ns, policy, now=now, cutoff=cutoff)
            whole, held = holds.held_digests(s, ns)
        for digest in candidates:
            if whole or digest in held:
                report.held += 1
                report.held_digests.append(digest)
                continue
            if dry_run:
                report.deleted += 1
                report.deleted_digests.append(digest)
                continue
            if _delete_one(db, principal, ns.id, digest, now=now, cutoff=cutoff, report=report):
                report.deleted += 1
                report.deleted_digests.append(digest)
    return report


def _delete_one(
    db: Database,
    principal: Principal,
    ns_id: int,
    digest: str,
    *,
    now: dt.datetime,
    cutoff: dt.datetime,
    report: RetentionReport,
) -> bool:
    """Delete one expired envelope after checking everything again under the namespace's lock."""
    with db.write() as s:
        ns = s.get(Namespace, ns_id)
        if ns is None:
            return False
        holds.lock_namespace(s, ns)
        policy = s.get(RetentionPolicy, ns.id)
        if policy is None:
            return False
        still = s.scalar(
            select(Envelope.manifest_digest).where(
                Envelope.namespace_id == ns.id,
                Envelope.manifest_digest == digest,
                Envelope.created_at < cutoff,
                ~_referenced(ns.id),
                _expired_clause(ns.id, policy, now),
            )
        )
        if still is None:
            return False
        if holds.envelope_holds(s, ns, digest):
            report.held += 1
            report.held_digests.append(digest)
            return False
        row = envelope_service.get(s, ns, digest)
        try:
            envelope_service.remove(
                s, principal.name, ns, row, {"reason": "retention", "policy": policy_doc(policy)}
            )
        except InUseError:  # a ref was pointed at it meanwhile: it stays
            return False
    return True
