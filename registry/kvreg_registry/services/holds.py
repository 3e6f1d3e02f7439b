"""Legal holds: placing and lifting them, and what they protect.

A hold is on a whole namespace (``ref_name`` NULL) or on one ref:

- a **namespace hold** protects every envelope of the namespace from deletion (by
  the API and by retention) and every object the namespace holds from GC, and
  refuses ref deletions; refs may still be created and moved (new work goes on,
  nothing is lost: the old target stays, protected);
- a **ref hold** freezes the ref — it can be neither moved nor deleted while the
  hold is active — and protects the envelope it pointed at when the hold was placed
  (recorded in the hold as ``manifest_digest``). Because the ref cannot move while
  held, "every envelope the ref pointed at while held" is exactly that one, and the
  protection does not depend on the ref row or on reading the audit log.

What a refused attempt looks like: ``LegalHoldError`` (403 ``LEGAL_HOLD``) with the
ids of the holds in the way. The transaction of the attempt rolls back, so the
routes wrap it in :func:`refusals_logged`, which appends one ``<action>.refused``
entry in a transaction of its own: the attempt is logged although nothing changed.
Only callers that passed the role check get that far (a writer moving a ref, a
namespace admin deleting), so anonymous callers cannot fill the log.

Concurrency: placing a hold locks the namespace row (and the ref row for a ref
hold); deleting an envelope or a ref locks the namespace row before it checks the
holds, and moving a ref locks the ref row first. So a deletion and a hold placed at
the same moment are serialized on PostgreSQL too (SQLite serializes every writer).
Every change appends its audit entry in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import HoldNotFoundError, LegalHoldError, RefNotFoundError, RequestInvalidError
from kvreg.core.names import validate_name
from kvreg_registry import audit
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database
from kvreg_registry.db.models import LegalHold, Namespace, Ref, utcnow

MAX_REASON_CHARS = 2000


def lock_namespace(session: Session, ns: Namespace) -> None:
    """``SELECT ... FOR UPDATE`` on the namespace row (a no-op on SQLite, whose writers are serial)."""
    session.execute(select(Namespace.id).where(Namespace.id == ns.id).with_for_update())


def _reason(text: str | None, *, what: str = "reason") -> str:
    value = (text or "").strip()
    if len(value) > MAX_REASON_CHARS:
        raise RequestInvalidError(f"the {what} is longer than {MAX_REASON_CHARS} characters")
    return value


def hold_doc(h: LegalHold, namespace: str) -> dict[str, object]:
    """What the audit entries and the admin CLI say about a hold."""
    return {
        "id": h.id,
        "namespace": namespace,
        "ref": h.ref_name,
        "digest": h.manifest_digest,
        "reason": h.reason,
    }


# --- placing, lifting, listing ------------------------------------------------------------


def place(
    session: Session, principal: Principal, ns: Namespace, *, ref: str | None, reason: str
) -> LegalHold:
    """Place a hold on ``ns`` (``ref`` None) or on ``ns/ref`` (namespace admin). Logged ``hold.placed``."""
    principal.require(session, ns, "admin")
    text = _reason(reason)
    if not text:
        raise RequestInvalidError(
            "a legal hold needs a reason", hint="say why, e.g. the matter or ticket it is for"
        )
    lock_namespace(session, ns)
    digest: str | None = None
    if ref is not None:
        validate_name(ref)
        row = session.scalar(select(Ref).where(Ref.namespace_id == ns.id, Ref.name == ref).with_for_update())
        if row is None:
            raise RefNotFoundError(f"no ref {ns.name}/{ref}", hint="a ref hold needs an existing ref")
        digest = row.manifest_digest
    hold = LegalHold(
        namespace_id=ns.id,
        ref_name=ref,
        manifest_digest=digest,
        reason=text,
        created_by=principal.name,
        created_at=utcnow(),
    )
    session.add(hold)
    session.flush()
    hold.log_seq = audit.append(
        session,
        "hold.placed",
        actor=principal.name,
        namespace=ns.name,
        subjects=[digest] if digest else [],
        new=hold_doc(hold, ns.name),
        details={"ref": f"{ns.name}/{ref}" if ref else None, "scope": "ref" if ref else "namespace"},
    )
    return hold


def get(session: Session, ns: Namespace | None, hold_id: int) -> LegalHold:
    """Hold ``hold_id`` (of ``ns`` when given); ``HoldNotFoundError`` otherwise."""
    hold = session.get(LegalHold, hold_id)
    if hold is None or (ns is not None and hold.namespace_id != ns.id):
        where = f" in namespace {ns.name!r}" if ns is not None else ""
        raise HoldNotFoundError(f"no legal hold {hold_id}{where}")
    return hold


def lift(
    session: Session, principal: Principal, ns: Namespace, hold_id: int, *, reason: str | None = None
) -> tuple[LegalHold, int | None]:
    """Lift hold ``hold_id`` of ``ns`` (namespace admin). Logged ``hold.lifted``.

    Lifting a hold that is lifted already changes nothing and logs nothing (a retried
    request is harmless); the second value is then None, else the entry's number."""
    principal.require(session, ns, "admin")
    text = _reason(reason)
    lock_namespace(session, ns)
    hold = session.execute(
        select(LegalHold).where(LegalHold.id == hold_id, LegalHold.namespace_id == ns.id).with_for_update()
    ).scalar_one_or_none()
    if hold is None:
        raise HoldNotFoundError(f"no legal hold {hold_id} in namespace {ns.name!r}")
    if hold.lifted_at is not None:
        return hold, None
    hold.lifted_at = utcnow()
    hold.lifted_by = principal.name
    hold.lift_reason = text
    seq = audit.append(
        session,
        "hold.lifted",
        actor=principal.name,
        namespace=ns.name,
        subjects=[hold.manifest_digest] if hold.manifest_digest else [],
        old=hold_doc(hold, ns.name),
        details={
            "hold": hold.id,
            "reason": text,
            "placed_by": hold.created_by,
            "placed_log_index": hold.log_seq,
        },
    )
    hold.lifted_log_seq = seq
    return hold, seq


def list_holds(session: Session, ns: Namespace, *, active_only: bool = False) -> list[LegalHold]:
    stmt = select(LegalHold).where(LegalHold.namespace_id == ns.id)
    if active_only:
        stmt = stmt.where(LegalHold.lifted_at.is_(None))
    return list(session.scalars(stmt.order_by(LegalHold.id)).all())


# --- what holds protect --------------------------------------------------------------------


def _active(ns_id: int) -> Select[int]:
    return select(LegalHold.id).where(LegalHold.namespace_id == ns_id, LegalHold.lifted_at.is_(None))


def envelope_holds(session: Session, ns: Namespace, digest: str) -> list[int]:
    """The active holds that protect envelope ``digest`` of ``ns``: namespace holds, and ref
    holds placed while the ref pointed at it."""
    stmt = _active(ns.id).where(or_(LegalHold.ref_name.is_(None), LegalHold.manifest_digest == str(digest)))
    return list(session.scalars(stmt.order_by(LegalHold.id)).all())


def ref_holds(session: Session, ns: Namespace, name: str, *, namespace_holds: bool) -> list[int]:
    """The active holds on ref ``name`` (and, with ``namespace_holds``, those on the whole namespace)."""
    cond = LegalHold.ref_name == name
    if namespace_holds:
        cond = or_(cond, LegalHold.ref_name.is_(None))
    return list(session.scalars(_active(ns.id).where(cond).order_by(LegalHold.id)).all())


def held_digests(session: Session, ns: Namespace) -> tuple[bool, set[str]]:
    """(whether a namespace hold is active, the digests active ref holds protect)."""
    rows = session.execute(
        select(LegalHold.ref_name, LegalHold.manifest_digest).where(
            LegalHold.namespace_id == ns.id, LegalHold.lifted_at.is_(None)
        )
    ).all()
    whole = any(ref is None for ref, _ in rows)
    return whole, {d for ref, d in rows if ref is not None and d is not None}


def held_namespace_ids() -> Select[int]:
    """A subquery: the ids of namespaces under an active namespace hold (GC keeps all they hold)."""
    return select(LegalHold.namespace_id).where(LegalHold.ref_name.is_(None), LegalHold.lifted_at.is_(None))


def check_envelope_deletable(session: Session, ns: Namespace, digest: Digest) -> None:
    held = envelope_holds(session, ns, digest)
    if held:
        raise LegalHoldError(
            f"envelope {digest} of namespace {ns.name!r} is under legal hold ({_ids(held)}): "
            "it cannot be deleted",
            hint=f"a namespace admin lifts the hold first (kvreg-admin hold list {ns.name}); "
            "lifting is logged",
            holds=held,
            action="envelope.delete",
            namespace=ns.name,
            digest=str(digest),
        )


def check_ref_changeable(session: Session, ns: Namespace, name: str, digest: str, *, delete: bool) -> None:
    """Refuse to delete a ref under a ref or namespace hold, or to move one under a ref hold."""
    held = ref_holds(session, ns, name, namespace_holds=delete)
    if held:
        verb = "deleted" if delete else "moved"
        raise LegalHoldError(
            f"ref {ns.name}/{name} is under legal hold ({_ids(held)}): it cannot be {verb}",
            hint=f"a namespace admin lifts the hold first (kvreg-admin hold list {ns.name}); "
            "lifting is logged",
            holds=held,
            action="ref.delete" if delete else "ref.move",
            namespace=ns.name,
            ref=f"{ns.name}/{name}",
            digest=digest,
        )


def _ids(held: list[int]) -> str:
    return ", ".join(f"hold {i}" for i in held)


# --- logging refused attempts ----------------------------------------------------------------


@contextmanager
def refusals_logged(db: Database, principal: Principal) -> Iterator[None]:
    """Run a change; if a legal hold refuses it, log the attempt (in a transaction of its own,
    since the change's rolled back) as one ``<action>.refused`` entry, then re-raise.

    The entry's number is added to the error's details as ``log_index``."""
    try:
        yield
    except LegalHoldError as e:
        action = str(e.details.get("action", "change"))
        digest = e.details.get("digest")
        with db.write() as s:
            seq = audit.append(
                s,
                f"{action}.refused",
                actor=principal.name,
                namespace=e.details.get("namespace"),
                subjects=[digest] if digest else [],
                details={
                    "code": e.code,
                    "holds": list(e.details.get("holds", [])),
                    "ref": e.details.get("ref"),
                    "message": e.message,
                },
            )
        e.details["log_index"] = seq
        raise
