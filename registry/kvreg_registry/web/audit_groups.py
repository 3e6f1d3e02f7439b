"""The audit list's rows as people read them: a push's entries folded into one row, and
artifacts named by their titles instead of digests.

:func:`titles` looks up, in one query, the titles of the artifacts a page of entries names
(only in each entry's own namespace, so nothing of another namespace is shown).
:func:`group` folds consecutive entries of one push — the same actor and namespace, the
types a push leaves (``upload.opened``, ``object.held``..., ``envelope.stored``, then the
ref or tag) — into a :class:`Group` with a headline; any other entry is a group of one.
Nothing here decides who may read what (``views_audit``, ``pages_audit`` do).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from kvreg_registry.db.models import Envelope, Namespace
from kvreg_registry.web import audit_sentences
from kvreg_registry.web.views_audit import EntryRow, summarize

PUSH_TYPES = frozenset(
    {
        "upload.opened",
        "object.held",
        "upload.closed",
        "envelope.stored",
        "ref.created",
        "tag.created",
        "ref.moved",
    }
)
REF_TYPES = frozenset({"ref.created", "tag.created", "ref.moved"})
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _digests(doc: dict[str, Any] | None) -> list[str]:
    if not doc:
        return []
    values: list[Any] = list(doc.get("subjects") or []) if isinstance(doc.get("subjects"), list) else []
    values += [doc.get("old"), doc.get("new")]
    return [v for v in values if isinstance(v, str) and _DIGEST.fullmatch(v)]


def titles(session: Session, rows: Iterable[EntryRow]) -> dict[tuple[str, str], str]:
    """``(namespace, digest) -> title`` of the artifacts the entries name, in one query."""
    wanted = {(r.namespace, d) for r in rows if r.namespace for d in _digests(r.doc)}
    if not wanted:
        return {}
    found = session.execute(
        select(Namespace.name, Envelope.manifest_digest, Envelope.title)
        .join(Namespace, Namespace.id == Envelope.namespace_id)
        .where(tuple_(Namespace.name, Envelope.manifest_digest).in_(sorted(wanted)))
    ).all()
    return {(n, d): t for n, d, t in found if t}


def receipt_summary(doc: dict[str, Any] | None, names: dict[str, str]) -> str | None:
    """A graft receipt in words: which artifact, and what the host's check found."""
    new = (doc or {}).get("new")
    digests = _digests(doc)
    if not isinstance(new, dict) or not digests:
        return None
    title = names.get(digests[0])
    what = f"“{title}”" if title else digests[0][:19] + "…"
    ref = new.get("ref")
    check = new.get("check")
    if isinstance(check, dict) and "byte_exact" in check:
        steps = check.get("steps")
        result = (
            f"byte-exact over {steps} steps"
            if check.get("byte_exact")
            else f"NOT byte-exact ({check.get('sha256_equal_steps')} of {steps} steps equal)"
        )
    else:
        result = "no logits check"
    return f"grafted {what}" + (f" ({ref})" if isinstance(ref, str) else "") + f": {result}"


def _ref_of(doc: dict[str, Any] | None) -> str | None:
    details = (doc or {}).get("details")
    ref = details.get("ref") if isinstance(details, dict) else None
    return ref if isinstance(ref, str) else None


@dataclass
class Group:
    rows: list[EntryRow]  # newest first, as the page lists them
    headline: str = ""
    artifact: str | None = None  # the pushed artifact's page
    ref: str | None = None

    @property
    def folded(self) -> bool:
        return len(self.rows) > 1

    @property
    def first(self) -> EntryRow:
        return self.rows[0]

    @property
    def types(self) -> list[str]:
        return sorted({r.type for r in self.rows})


@dataclass
class _Open:
    rows: list[EntryRow] = field(default_factory=list)
    envelope: str | None = None


def _starts_new(current: _Open, row: EntryRow) -> bool:
    last = current.rows[-1]
    if row.type not in PUSH_TYPES or last.type not in PUSH_TYPES:
        return True
    if (row.actor, row.namespace) != (last.actor, last.namespace):
        return True
    if row.type == "upload.opened":
        return True
    if row.type == "envelope.stored":
        return current.envelope is not None
    if row.type in REF_TYPES:
        return current.envelope is None or current.envelope not in _digests(row.doc)
    # object.held, upload.closed: part of an upload, not after the envelope was stored
    return current.envelope is not None


def group(rows: list[EntryRow], names: dict[tuple[str, str], str]) -> list[Group]:
    """The page's rows (newest first) as groups (newest first), each row summarized with titles."""
    for row in rows:
        own = {d: t for (n, d), t in names.items() if n == row.namespace}
        row.summary = (receipt_summary(row.doc, own) if row.type == "graft.receipt" else None) or summarize(
            row.doc, own
        )
        row.sentence = audit_sentences.sentence(row.type, row.actor, row.namespace, row.doc, own)
        row.links = audit_sentences.links(row.namespace, row.doc)
    groups: list[_Open] = []
    for row in reversed(rows):  # oldest first: a push reads in order
        if not groups or _starts_new(groups[-1], row):
            groups.append(_Open())
        current = groups[-1]
        current.rows.append(row)
        if row.type == "envelope.stored":
            found = _digests(row.doc)
            current.envelope = found[0] if found else None
    out: list[Group] = []
    for g in reversed(groups):
        made = Group(rows=list(reversed(g.rows)))
        if made.folded:
            _headline(made, g.envelope, names)
        out.append(made)
    return out


def _headline(g: Group, envelope: str | None, names: dict[tuple[str, str], str]) -> None:
    ns = g.first.namespace or ""
    ref = next((name for r in g.rows if r.type in REF_TYPES and (name := _ref_of(r.doc))), None)
    g.ref = ref
    held = sum(1 for r in g.rows if r.type == "object.held")
    objects = f", {held} object{'s' if held != 1 else ''} uploaded" if held else ""
    if envelope is not None:
        title = names.get((ns, envelope))
        name = f"“{title}”" if title else envelope[:19] + "…"
        g.artifact = f"/ns/{ns}/artifacts/{envelope}"
        g.headline = f"Pushed {name}" + (f" as {ref}" if ref else "") + objects
    else:
        g.headline = f"Upload to {ns}{objects}" if ns else f"{len(g.rows)} entries"
