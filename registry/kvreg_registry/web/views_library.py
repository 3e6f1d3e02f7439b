"""Queries and view models of the library pages that are not search: the namespace list
(``/ns``), the home page's overview (counts, verdicts, growth, recent activity), the refs
of a namespace in natural order, and the prefix lineage of a namespace's artifacts.

Every function runs a fixed number of queries, whatever the registry's size, and only
reads what ``principal`` may read (``services.search.visible_condition``). Nothing here
renders HTML or SVG (``web.svg_lineage``, ``web.svg_timeline`` draw the pictures).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope, EnvelopeBlock, GraftReceipt, Namespace, Ref
from kvreg_registry.services.search import visible_condition

NAMESPACES_PER_PAGE = 50
RECENT_SHOWN = 6
TIMELINE_DAYS = 90  # the growth chart shows at most this many days with activity
LINEAGE_ARTIFACTS = 40  # the newest artifacts of a namespace the lineage graph considers
MAX_REFS_SORTED = 20_000  # refs sorted naturally in Python; beyond, by name in SQL

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[Any, ...]:
    """A sort key that orders runs of digits by value: ``add-191-413`` before ``add-1467665``."""
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p.casefold()) for p in _DIGITS.split(text) if p)
    return (parts, text)


def _count_if(condition: Any) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _visible_namespaces(principal: Principal) -> Any:
    condition = visible_condition(principal)
    stmt = select(Namespace.id)
    return stmt if condition is True else stmt.where(condition)


# --- the namespace list ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NamespaceSummary:
    name: str
    public: bool
    description: str
    artifacts: int
    passed: int
    latest: dt.datetime | None


def namespace_summaries(
    session: Session, principal: Principal, *, page: int = 1, name_filter: str = ""
) -> tuple[list[NamespaceSummary], int]:
    """One page of the namespaces ``principal`` may read (by name), with their artifact counts;
    and how many there are. Two queries."""
    visible = visible_condition(principal)
    where: list[Any] = [] if visible is True else [visible]
    if name_filter:
        escaped = name_filter.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append(Namespace.name.like(f"%{escaped}%", escape="\\"))
    total = session.scalar(select(func.count()).select_from(Namespace).where(*where)) or 0
    rows = session.execute(
        select(
            Namespace.name,
            Namespace.public,
            Namespace.description,
            func.count(Envelope.manifest_digest),
            _count_if(Envelope.verdict == "pass"),
            func.max(Envelope.created_at),
        )
        .outerjoin(Envelope, Envelope.namespace_id == Namespace.id)
        .where(*where)
        .group_by(Namespace.id, Namespace.name, Namespace.public, Namespace.description)
        .order_by(Namespace.name)
        .limit(NAMESPACES_PER_PAGE)
        .offset((page - 1) * NAMESPACES_PER_PAGE)
    ).all()
    return [
        NamespaceSummary(r[0], bool(r[1]), r[2] or "", int(r[3]), int(r[4] or 0), r[5]) for r in rows
    ], int(total)


# --- the home page's overview ----------------------------------------------------------------------


@dataclass(frozen=True)
class RecentArtifact:
    namespace: str
    digest: str
    title: str
    verdict: str | None
    created_by: str | None
    created_at: dt.datetime


@dataclass
class Overview:
    namespaces: int = 0
    artifacts: int = 0
    receipts: int = 0
    byte_exact: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    # (day "YYYY-MM-DD", artifacts stored that day, receipts received that day), oldest first
    days: list[tuple[str, int, int]] = field(default_factory=list)
    recent: list[RecentArtifact] = field(default_factory=list)


def _day(value: Any) -> str:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()[:10]
    return str(value)[:10]


def overview(session: Session, principal: Principal) -> Overview:
    """What the home page shows above the search results: six queries."""
    visible = _visible_namespaces(principal)
    out = Overview()
    out.namespaces = session.scalar(select(func.count()).select_from(visible.subquery())) or 0
    in_visible = Envelope.namespace_id.in_(visible)
    for verdict, n in session.execute(
        select(Envelope.verdict, func.count()).where(in_visible).group_by(Envelope.verdict)
    ).all():
        out.verdicts[verdict or "none"] = int(n)
        out.artifacts += int(n)
    receipt_visible = GraftReceipt.namespace_id.in_(visible)
    receipts = session.execute(
        select(func.count(), _count_if(GraftReceipt.byte_exact.is_(True))).where(receipt_visible)
    ).one()
    out.receipts, out.byte_exact = int(receipts[0]), int(receipts[1] or 0)
    art_day = func.date(Envelope.created_at)
    per_day = {
        _day(d): int(n)
        for d, n in session.execute(
            select(art_day, func.count())
            .where(in_visible)
            .group_by(art_day)
            .order_by(art_day.desc())
            .limit(TIMELINE_DAYS)
        ).all()
    }
    rec_day = func.date(GraftReceipt.created_at)
    rec_per_day = {
        _day(d): int(n)
        for d, n in session.execute(
            select(rec_day, func.count())
            .where(receipt_visible)
            .group_by(rec_day)
            .order_by(rec_day.desc())
            .limit(TIMELINE_DAYS)
        ).all()
    }
    days = sorted(set(per_day) | set(rec_per_day))[-TIMELINE_DAYS:]
    out.days = [(d, per_day.get(d, 0), rec_per_day.get(d, 0)) for d in days]
    out.recent = [
        RecentArtifact(r[0], r[1], r[2] or "", r[3], r[4], r[5])
        for r in session.execute(
            select(
                Namespace.name,
                Envelope.manifest_digest,
                Envelope.title,
                Envelope.verdict,
                Envelope.created_by,
                Envelope.created_at,
            )
            .join(Namespace, Namespace.id == Envelope.namespace_id)
            .where(in_visible)
            .order_by(Envelope.created_at.desc(), Envelope.manifest_digest)
            .limit(RECENT_SHOWN)
        ).all()
    ]
    return out


# --- refs in natural order -------------------------------------------------------------------------


def refs_page(session: Session, namespace_id: int, page: int, size: int) -> tuple[list[Any], int]:
    """One page of a namespace's refs (``(Ref, title)`` rows) in natural order, and their total.

    Two queries: the names (sorted here, since SQL sorts digits character by character), then
    the page's rows. A namespace with more than ``MAX_REFS_SORTED`` refs is paged by name in SQL."""
    names = list(
        session.scalars(
            select(Ref.name)
            .where(Ref.namespace_id == namespace_id)
            .order_by(Ref.name)
            .limit(MAX_REFS_SORTED + 1)
        )
    )
    joined = (
        select(Ref, Envelope.title)
        .join(
            Envelope,
            (Envelope.namespace_id == Ref.namespace_id) & (Envelope.manifest_digest == Ref.manifest_digest),
        )
        .where(Ref.namespace_id == namespace_id)
    )
    if len(names) > MAX_REFS_SORTED:
        total = session.scalar(select(func.count()).select_from(Ref).where(Ref.namespace_id == namespace_id))
        rows = session.execute(joined.order_by(Ref.name).limit(size).offset((page - 1) * size)).all()
        return list(rows), int(total or 0)
    names.sort(key=natural_key)
    wanted = names[(page - 1) * size : page * size]
    if not wanted:
        return [], len(names)
    rows = session.execute(joined.where(Ref.name.in_(wanted))).all()
    order = {n: i for i, n in enumerate(wanted)}
    return sorted(rows, key=lambda r: order[r[0].name]), len(names)


# --- prefix lineage --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineageNode:
    digest: str
    title: str
    blocks: int


@dataclass
class Lineage:
    nodes: list[LineageNode]
    # (parent digest, child digest): the child is longer and starts with the parent's full blocks,
    # the parent being the longest such prefix among the nodes (``prefix_edges``).
    edges: list[tuple[str, str]]
    considered: int
    capped: bool


def prefix_edges(
    keys: dict[str, list[str]], full: dict[str, int], tokens: dict[str, int]
) -> list[tuple[str, str]]:
    """The immediate prefix relations between artifacts, given their block keys in order, how
    many of their blocks are full and their token counts.

    ``B`` extends ``A`` when ``A`` has a full block, ``B`` has more tokens, and ``B``'s block
    ``full[A] - 1`` has ``A``'s key there (keys chain their parents, so equal keys mean equal
    tokens up to there): a host grafts ``A``'s full blocks and computes only the rest. Each
    child gets one parent, its longest such prefix."""
    by_last: dict[tuple[int, str], list[str]] = {}
    for digest, ks in keys.items():
        n = min(full.get(digest, 0), len(ks))
        if n:
            by_last.setdefault((n - 1, ks[n - 1]), []).append(digest)
    edges: list[tuple[str, str]] = []
    for child, ks in sorted(keys.items()):
        for i in range(len(ks) - 1, -1, -1):
            parents = [p for p in by_last.get((i, ks[i]), []) if p != child and tokens[p] < tokens[child]]
            if parents:
                edges.append((min(parents), child))
                break
    return edges


def lineage(session: Session, namespace_id: int) -> Lineage:
    """The prefix lineage of the ``LINEAGE_ARTIFACTS`` newest artifacts of a namespace: two queries."""
    envs = session.execute(
        select(Envelope.manifest_digest, Envelope.title, Envelope.token_count, Envelope.block_size)
        .where(Envelope.namespace_id == namespace_id)
        .order_by(Envelope.created_at.desc(), Envelope.manifest_digest)
        .limit(LINEAGE_ARTIFACTS + 1)
    ).all()
    capped = len(envs) > LINEAGE_ARTIFACTS
    envs = envs[:LINEAGE_ARTIFACTS]
    titles = {r[0]: r[1] or "" for r in envs}
    tokens = {r[0]: int(r[2]) for r in envs}
    full = {r[0]: int(r[2]) // max(1, int(r[3])) for r in envs}
    keys: dict[str, list[str]] = {d: [] for d in titles}
    if titles:
        for digest, key in session.execute(
            select(EnvelopeBlock.manifest_digest, EnvelopeBlock.block_key)
            .where(
                EnvelopeBlock.namespace_id == namespace_id, EnvelopeBlock.manifest_digest.in_(list(titles))
            )
            .order_by(EnvelopeBlock.manifest_digest, EnvelopeBlock.block_index)
        ).all():
            keys[digest].append(key)
    edges = prefix_edges(keys, full, tokens)
    related = {d for e in edges for d in e}
    nodes = [LineageNode(d, titles[d], len(keys[d])) for d in titles if d in related]
    return Lineage(nodes=nodes, edges=edges, considered=len(titles), capped=capped)
