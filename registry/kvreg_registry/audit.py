"""Append entries to the audit log, in the transaction of the change they record.

Every state change calls :func:`append` with the session that makes the change,
so the entry and the change commit or roll back together. Sequence numbers are
dense: the append locks the single ``log_head`` row (``SELECT ... FOR UPDATE`` on
PostgreSQL; SQLite's write transactions are already serialized by
``BEGIN IMMEDIATE``), takes its size as the new entry's number and increments it.

An entry is canonical JSON (RFC 8785) with ``seq``, ``time``, ``type``, ``actor``,
``namespace``, ``subjects`` (digests), ``old``/``new`` values and ``details``; its
RFC 6962 leaf hash is stored beside it. The append also stores the perfect subtrees the new leaf completes
(``log_nodes``, see ``kvreg.core.logtree``), so roots and proofs never read the
whole log; ``kvreg_registry.services.log`` computes them and signs checkpoints.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, or_, select, update
from sqlalchemy.orm import Session

from kvreg.core import logtree
from kvreg.core.canonical import canonical_json
from kvreg.core.merkle import leaf_hash
from kvreg.core.timestamps import rfc3339_micro
from kvreg.fileio.faults import crash_point
from kvreg_registry.db.models import AuditEntry, AuditSubject, LogHead, LogNode, utcnow

# The statements of an append, built once: Core statements on the tables (the ORM-enabled
# ``update(LogHead)`` goes through SQLAlchemy's bulk-update path, and building a statement
# and its cache key costs more than running it; an append of a pack's four entries went
# from about 3 to 2 ms of CPU on a 2-core Zen 3 host).
_HEAD = LogHead.__table__
_TAKE_SEQS = (
    update(_HEAD)
    .where(_HEAD.c.id == 1)
    .values(size=_HEAD.c.size + bindparam("count"))
    .returning(_HEAD.c.size)
)
_INSERT_ENTRIES = AuditEntry.__table__.insert()
_INSERT_SUBJECTS = AuditSubject.__table__.insert()
_INSERT_NODES = LogNode.__table__.insert()


def _iso(t: dt.datetime) -> str:
    return rfc3339_micro(t)


def subject_digests(subjects: Iterable[str], old: Any, new: Any) -> list[str]:
    """The digests an entry is about: its ``subjects`` and ``old``/``new`` when they are digests
    (indexed in ``audit_subjects``; migration 0003 applies the same rule to older entries)."""
    out: list[str] = []
    for v in [*subjects, old, new]:
        if isinstance(v, str) and len(v) == 71 and v.startswith("sha256:") and v not in out:
            out.append(v)
    return out


def append(
    session: Session,
    type: str,
    *,
    actor: str | None,
    namespace: str | None = None,
    subjects: Iterable[str] = (),
    old: Any = None,
    new: Any = None,
    details: Mapping[str, Any] | None = None,
) -> int:
    """Append one entry in ``session``'s transaction and return its sequence number."""
    entry = NewEntry(type, actor, namespace, tuple(subjects), old, new, details)
    return append_many(session, [entry])[0]


@dataclass(frozen=True)
class NewEntry:
    """One entry for :func:`append_many` (the arguments of :func:`append`)."""

    type: str
    actor: str | None
    namespace: str | None = None
    subjects: Sequence[str] = ()
    old: Any = None
    new: Any = None
    details: Mapping[str, Any] | None = None


def append_many(session: Session, entries: Sequence[NewEntry]) -> list[int]:
    """Append several entries in ``session``'s transaction, in order, and return their sequence
    numbers: one statement per table whatever their number (an object pack holds up to
    hundreds of objects, each with its ``object.held`` entry); they share one timestamp.
    The first statement takes the log head's row lock and the sequence numbers."""
    if not entries:
        return []
    count = len(entries)
    end = session.execute(_TAKE_SEQS, {"count": count}).scalar_one()
    first = end - count
    now = utcnow()
    time = _iso(now)
    rows: list[dict[str, Any]] = []
    subject_rows: list[dict[str, Any]] = []
    leaves: list[bytes] = []
    for seq, e in enumerate(entries, start=first):
        body: dict[str, Any] = {
            "seq": seq,
            "time": time,
            "type": e.type,
            "actor": e.actor,
            "namespace": e.namespace,
            "subjects": [str(s) for s in e.subjects],
            "old": e.old,
            "new": e.new,
            "details": dict(e.details or {}),
        }
        entry = canonical_json(body)
        leaf = leaf_hash(entry)
        leaves.append(leaf)
        rows.append(
            {
                "seq": seq,
                "created_at": now,
                "type": e.type,
                "actor": e.actor,
                "namespace": e.namespace,
                "entry": entry,
                "leaf_hash": leaf,
            }
        )
        subject_rows += [{"digest": d, "seq": seq} for d in subject_digests(body["subjects"], e.old, e.new)]
    # Core inserts, not ORM objects: the ORM's unit of work cost more than the rest of an
    # append (about 1 ms per entry).
    session.execute(_INSERT_ENTRIES, rows)
    for _ in rows:  # counted per entry, as the appends one by one count it
        crash_point("registry.log.after_entry")
    if subject_rows:
        session.execute(_INSERT_SUBJECTS, subject_rows)
    # The siblings stored before this batch are read in one query; the others are made by it.
    wanted = {
        (level, idx)
        for seq in range(first, end)
        for level, idx in logtree.siblings_for_append(seq)
        if (idx + 1) << level <= first
    }
    known = read_nodes(session, wanted)
    new_nodes: list[tuple[int, int, bytes]] = []
    for seq, leaf in zip(range(first, end), leaves, strict=True):
        made = logtree.nodes_after_append(seq, leaf, lambda level, idx: known[(level, idx)])
        known.update(((lv, ix), h) for lv, ix, h in made)
        new_nodes += made
    session.execute(_INSERT_NODES, [{"level": lv, "idx": ix, "hash": h} for lv, ix, h in new_nodes])
    return list(range(first, end))


def read_nodes(session: Session, wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored perfect subtrees ``wanted`` (level, index), in one query; missing ones are absent.

    One ``OR`` term per level: ``idx = ?`` for a level with one node (a proof or an
    append: the cheapest statement to build), ``idx IN (...)`` for more (the proofs of a
    page of the audit export need thousands of nodes, more ``OR`` terms than SQLite takes)."""
    by_level: dict[int, set[int]] = defaultdict(set)
    for level, idx in wanted:
        by_level[level].add(idx)
    if not by_level:
        return {}
    cond = or_(
        *(
            and_(
                LogNode.level == lv,
                LogNode.idx == min(ixs) if len(ixs) == 1 else LogNode.idx.in_(sorted(ixs)),
            )
            for lv, ixs in sorted(by_level.items())
        )
    )
    rows = session.execute(select(LogNode.level, LogNode.idx, LogNode.hash).where(cond)).all()
    return {(int(lv), int(ix)): bytes(h) for lv, ix, h in rows}
