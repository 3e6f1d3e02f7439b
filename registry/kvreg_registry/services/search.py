"""Listing and searching the envelopes a caller may read, filtered and paginated in SQL."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.orm import Session

from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope, Namespace, Ref, Role

MAX_LIMIT = 200


@dataclass(frozen=True)
class Query:
    namespace: str | None = None
    model: str | None = None
    verifier: str | None = None
    verdict: str | None = None
    text: str | None = None
    limit: int = 50
    offset: int = 0


def visible_condition(principal: Principal) -> object:
    """The SQL condition on ``Namespace`` that the namespaces ``principal`` may read satisfy
    (``True`` for a server admin: no condition)."""
    if principal.is_admin:
        return True
    if principal.user_id is None:
        return Namespace.public.is_(True)
    has_role = exists().where(Role.namespace_id == Namespace.id, Role.user_id == principal.user_id)
    return or_(Namespace.public.is_(True), has_role)


def _filtered(stmt: Select, q: Query, principal: Principal) -> Select:  # type: ignore[type-arg]
    visible = visible_condition(principal)
    if visible is not True:
        stmt = stmt.where(visible)  # type: ignore[arg-type]
    if q.namespace:
        stmt = stmt.where(Namespace.name == q.namespace)
    if q.model:
        stmt = stmt.where(or_(Envelope.model_fingerprint == q.model, Envelope.model_name == q.model))
    if q.verifier:
        stmt = stmt.where(Envelope.verifier == q.verifier)
    if q.verdict:
        stmt = stmt.where(Envelope.verdict == q.verdict)
    if q.text:
        stmt = stmt.where(Envelope.search_text.contains(q.text.lower(), autoescape=True))
    return stmt


def search(
    session: Session, principal: Principal, q: Query
) -> tuple[list[tuple[Envelope, str, list[str]]], int]:
    """The matching envelopes (newest first) with their namespace name and ref names, and the total."""
    base = select(Envelope, Namespace.name).join(Namespace, Namespace.id == Envelope.namespace_id)
    stmt = _filtered(base, q, principal)
    total_stmt = _filtered(
        select(func.count()).select_from(Envelope).join(Namespace, Namespace.id == Envelope.namespace_id),
        q,
        principal,
    )
    total = session.scalar(total_stmt) or 0
    limit = max(1, min(q.limit, MAX_LIMIT))
    rows = session.execute(
        stmt.order_by(Envelope.created_at.desc(), Envelope.manifest_digest)
        .limit(limit)
        .offset(max(0, q.offset))
    ).all()
    refs: dict[tuple[int, str], list[str]] = {}
    if rows:
        keys = [(e.namespace_id, e.manifest_digest) for e, _ in rows]
        conditions = [and_(Ref.namespace_id == a, Ref.manifest_digest == b) for a, b in keys]
        for r in session.scalars(select(Ref).where(or_(*conditions)).order_by(Ref.name)).all():
            refs.setdefault((r.namespace_id, r.manifest_digest), []).append(r.name)
    return [(e, name, refs.get((e.namespace_id, e.manifest_digest), [])) for e, name in rows], total
