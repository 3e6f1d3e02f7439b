"""Queries and view models of the audit trail pages (``kvreg_registry.web.pages_audit``).

- :func:`list_entries`: one page of entries, newest first, filtered on indexed
  columns (``type``, ``namespace``, ``actor``, ``created_at``) and paginated by
  keyset on ``seq`` in SQL: two queries whatever the log's size.
- :func:`latest_checkpoint`: the log's latest signed checkpoint
  (``AuditLog.checkpoint``), its note verified with the log's public key.
- :func:`entry_detail`: one entry, its inclusion proof in the latest checkpoint
  (``AuditLog.inclusion``) verified against the *signed* root with a leaf hash
  computed from the stored bytes (never the stored leaf hash), the artifacts its
  subjects are, and other entries about the same subjects (``audit_subjects``).

The export of the whole log (``/audit/export``) is ``web.audit_export``.

Who may read entries is the API's rule (``api/routes_log.py``): anyone when
``settings.log_public``, else any valid token (a signed-in visitor), whatever
its roles: :func:`may_read_entries`. Everyone else (as on Rekor) reads the entries of
public namespaces only (``public_only=True``): never an entry of a private namespace
nor one without a namespace (users, tokens).

The list hides the low-level entries a push leaves (:data:`LOW_LEVEL_TYPES`) unless
asked (``all=1``, or a type filter naming one); ``web.audit_groups`` folds a push's
entries into one row and names artifacts by title.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kvreg.core.checkpoint import Checkpoint, verify_signed_checkpoint
from kvreg.core.errors import KvregError, NotFoundError
from kvreg.core.merkle import leaf_hash, verify_inclusion
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import AuditEntry, AuditSubject, Envelope, Namespace
from kvreg_registry.services.log import AuditLog
from kvreg_registry.settings import Settings

log = logging.getLogger(__name__)

PAGE_SIZE = 50
MAX_RELATED = 20
MAX_FILTER_LEN = 64

# Every entry type the registry writes (docs/audit.md, section 2; a test keeps the two equal).
KNOWN_TYPES = (
    "namespace.created",
    "namespace.visibility",
    "namespace.description",
    "user.created",
    "user.disabled",
    "user.enabled",
    "token.created",
    "token.revoked",
    "role.set",
    "role.removed",
    "key.registered",
    "key.revoked",
    "upload.opened",
    "upload.closed",
    "object.held",
    "envelope.stored",
    "envelope.deleted",
    "ref.created",
    "tag.created",
    "ref.moved",
    "ref.deleted",
    "gc.run",
    "retention.set",
    "retention.cleared",
    "hold.placed",
    "hold.lifted",
    "envelope.delete.refused",
    "ref.delete.refused",
    "ref.move.refused",
    "graft.receipt",
)

# What a push leaves besides the envelope and its ref: hidden from the list by default.
LOW_LEVEL_TYPES = ("upload.opened", "object.held", "upload.closed")

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def may_read_entries(principal: Principal, settings: Settings) -> bool:
    """The API's rule for ``GET /api/v1/log/entries``: a valid token, or a public log."""
    return settings.log_public or not principal.anonymous


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def short(value: str, n: int = 12) -> str:
    if value.startswith("sha256:") and len(value) > 7 + n:
        return value[: 7 + n] + "…"
    return value if len(value) <= 24 else value[:24] + "…"


# --- filters and the list of entries -----------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    type: str = ""
    namespace: str = ""
    actor: str = ""
    since: str = ""
    until: str = ""
    all: bool = False  # also the low-level entries (LOW_LEVEL_TYPES)

    def params(self) -> dict[str, str]:
        """The filters as query parameters (empty ones are dropped by ``query_url``)."""
        return {
            "type": self.type,
            "namespace": self.namespace,
            "actor": self.actor,
            "since": self.since,
            "until": self.until,
            "all": "1" if self.all else "",
        }

    @property
    def active(self) -> bool:
        return any(v for k, v in self.params().items() if k != "all")

    @property
    def hides_low_level(self) -> bool:
        return not self.all and not self.type


class FilterError(ValueError):
    pass


def _parse_time(text: str, *, end: bool) -> tuple[dt.datetime, bool]:
    """A date (``YYYY-MM-DD``) or an ISO datetime, as UTC; and whether it was a whole date.

    ``until`` with a date means the end of that day (entries before the next midnight)."""
    text = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        try:
            day = dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=dt.UTC)
        except ValueError:
            raise FilterError(f"{text!r} is not a date (YYYY-MM-DD)") from None
        return (day + dt.timedelta(days=1) if end else day), True
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        raise FilterError(
            f"{text!r} is not a date (YYYY-MM-DD) or a time (YYYY-MM-DDTHH:MM[:SS], UTC unless it says)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC), False


def parse_filters(query: Mapping[str, str]) -> tuple[Filters, list[str]]:
    """The filters of ``query`` (the page's form) and the problems found in them."""
    problems: list[str] = []

    def field_(name: str) -> str:
        value = (query.get(name) or "").strip()
        if len(value) > MAX_FILTER_LEN:
            problems.append(f"{name} is longer than {MAX_FILTER_LEN} characters")
            return ""
        return value

    filters = Filters(
        type=field_("type"),
        namespace=field_("namespace"),
        actor=field_("actor"),
        since=field_("since"),
        until=field_("until"),
        all=query.get("all") in ("1", "on", "true", "yes"),
    )
    for name, end in (("since", False), ("until", True)):
        value = getattr(filters, name)
        if value:
            try:
                _parse_time(value, end=end)
            except FilterError as e:
                problems.append(f"{name}: {e}")
    return filters, problems


def public_namespaces() -> Any:
    """A SELECT of the names of public namespaces (what a visitor without a token may read)."""
    return select(Namespace.name).where(Namespace.public.is_(True))


def _conditions(filters: Filters, public_only: bool = False) -> list[Any]:
    out: list[Any] = []
    if filters.hides_low_level:
        out.append(AuditEntry.type.not_in(LOW_LEVEL_TYPES))
    if public_only:
        out.append(AuditEntry.namespace.in_(public_namespaces()))
    if filters.type:
        out.append(AuditEntry.type == filters.type)
    if filters.namespace:
        out.append(AuditEntry.namespace == filters.namespace)
    if filters.actor:
        out.append(AuditEntry.actor == filters.actor)
    if filters.since:
        since, _ = _parse_time(filters.since, end=False)
        out.append(AuditEntry.created_at >= since)
    if filters.until:
        until, whole_day = _parse_time(filters.until, end=True)
        out.append(AuditEntry.created_at < until if whole_day else AuditEntry.created_at <= until)
    return out


_LIST_COLUMNS = (
    AuditEntry.seq,
    AuditEntry.created_at,
    AuditEntry.type,
    AuditEntry.actor,
    AuditEntry.namespace,
    AuditEntry.entry,
)


@dataclass
class EntryRow:
    seq: int
    time: dt.datetime
    type: str
    actor: str | None
    namespace: str | None
    summary: str
    doc: dict[str, Any] | None = None
    sentence: str = ""  # audit_sentences.sentence, set by audit_groups.group
    links: dict[str, str] = field(default_factory=dict)  # audit_sentences.links


@dataclass
class EntryPage:
    rows: list[EntryRow]
    newer: int | None  # ``after`` for the link to newer entries (rel=prev), None if none
    older: int | None  # ``before`` for the link to older entries (rel=next), None if none


def parse_entry(raw: bytes) -> dict[str, Any] | None:
    """An entry's JSON object, or None when the stored bytes are not one (an altered entry)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _named(value: str, names: Mapping[str, str] | None) -> str:
    """An artifact's title in quotes when ``names`` knows the digest, else the shortened value."""
    title = (names or {}).get(value)
    return f"“{title}”" if title else short(value)


def _value_text(value: Any, names: Mapping[str, str] | None = None) -> str:
    """A value of an entry in a few words: digests shortened, objects as ``key: value`` pairs."""
    if isinstance(value, str):
        return _named(value, names)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, dict):
        pairs = [
            f"{k}: {short(v) if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
            for k, v in sorted(value.items())
            if v is not None and not isinstance(v, dict | list)
        ]
        text = ", ".join(pairs) or "{…}"
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= 80 else text[:79] + "…"


def summarize(doc: dict[str, Any] | None, names: Mapping[str, str] | None = None) -> str:
    """One line about an entry: its ref, its old and new values and its subjects, shortened;
    artifacts named by their titles where ``names`` (digest -> title) knows them."""
    if doc is None:
        return "(the stored entry is not a JSON object)"
    parts: list[str] = []
    raw_details = doc.get("details")
    details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    ref = details.get("ref")
    if isinstance(ref, str):
        parts.append(ref)
    old, new = doc.get("old"), doc.get("new")
    if old is not None and new is not None:
        parts.append(f"{_value_text(old, names)} → {_value_text(new, names)}")
    elif new is not None:
        parts.append(f"new {_value_text(new, names)}")
    elif old is not None:
        parts.append(f"was {_value_text(old, names)}")
    raw_subjects = doc.get("subjects")
    subjects: list[Any] = raw_subjects if isinstance(raw_subjects, list) else []
    shown = [s for s in subjects if isinstance(s, str) and s not in (old, new)]
    if shown:
        more = f" +{len(shown) - 3}" if len(shown) > 3 else ""
        parts.append("subjects " + ", ".join(_named(s, names) for s in shown[:3]) + more)
    if isinstance(details.get("reason"), str):
        parts.append(f"reason: {details['reason']}")
    return "; ".join(parts) or "–"


def list_entries(
    session: Session,
    filters: Filters,
    *,
    before: int | None = None,
    after: int | None = None,
    public_only: bool = False,
) -> EntryPage:
    """A page of entries matching ``filters``, newest first: below ``before`` (older entries),
    above ``after`` (newer ones), or the newest. Two queries: the page (one row more than it
    shows, to know whether there are older or newer entries) and whether there is any entry
    on the other side of the page. ``public_only``: entries of public namespaces only."""
    conds = _conditions(filters, public_only)
    cols = _LIST_COLUMNS
    if after is not None:
        rows = session.execute(
            select(*cols)
            .where(*conds, AuditEntry.seq > after)
            .order_by(AuditEntry.seq.asc())
            .limit(PAGE_SIZE + 1)
        ).all()
        more_newer = len(rows) > PAGE_SIZE
        rows = list(reversed(rows[:PAGE_SIZE]))
        edge = rows[-1].seq if rows else after + 1
        more_older = (
            session.execute(select(AuditEntry.seq).where(*conds, AuditEntry.seq < edge).limit(1)).first()
            is not None
        )
    else:
        query = select(*cols).where(*conds)
        if before is not None:
            query = query.where(AuditEntry.seq < before)
        rows = session.execute(query.order_by(AuditEntry.seq.desc()).limit(PAGE_SIZE + 1)).all()
        more_older = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        more_newer = False
        if before is not None:
            edge = rows[0].seq if rows else before - 1
            more_newer = (
                session.execute(select(AuditEntry.seq).where(*conds, AuditEntry.seq > edge).limit(1)).first()
                is not None
            )
    out = [
        EntryRow(
            seq=int(r.seq),
            time=r.created_at,
            type=r.type,
            actor=r.actor,
            namespace=r.namespace,
            summary="",
            doc=parse_entry(bytes(r.entry)),
        )
        for r in rows
    ]
    for row in out:
        row.summary = summarize(row.doc)
    return EntryPage(
        rows=out,
        newer=out[0].seq if out and more_newer else None,
        older=out[-1].seq if out and more_older else None,
    )


# --- the checkpoint ------------------------------------------------------------------------------


@dataclass
class CheckpointView:
    """The latest checkpoint, and whether its note verified with the log's key."""

    origin: str
    verifier_key: str
    note: str | None = None
    checkpoint: Checkpoint | None = None
    problem: str | None = None

    @property
    def verified(self) -> bool:
        return self.checkpoint is not None and self.problem is None

    @property
    def root_b64(self) -> str:
        return b64(self.checkpoint.root) if self.checkpoint else ""

    @property
    def root_hex(self) -> str:
        return self.checkpoint.root.hex() if self.checkpoint else ""


def latest_checkpoint(log_: AuditLog) -> CheckpointView:
    """``AuditLog.checkpoint()`` (the stored one for the current size, or signed now), verified
    as a client would with the log's public key. A refusal to sign (the database was altered)
    or a note that does not verify is reported, not raised."""
    view = CheckpointView(origin=log_.origin, verifier_key=log_.verifier.to_text())
    try:
        view.note = log_.checkpoint()
        view.checkpoint = verify_signed_checkpoint(view.note, log_.verifier)
    except KvregError as e:
        view.problem = e.message
    return view


# --- one entry -----------------------------------------------------------------------------------


@dataclass
class SubjectLink:
    value: str
    url: str | None  # the artifact page, when the subject is an artifact of the entry's namespace


@dataclass
class EntryDetail:
    seq: int
    time: dt.datetime
    type: str
    actor: str | None
    namespace: str | None
    raw: str  # the stored bytes, decoded for display (undecodable bytes replaced)
    doc: dict[str, Any] | None
    leaf_hash: bytes  # computed from the stored bytes
    stored_leaf_hash: bytes
    subjects: list[SubjectLink]
    related: list[EntryRow]
    related_capped: bool
    log_size: int
    proof_size: int | None = None
    proof_hashes: list[str] = field(default_factory=list)
    proof_problem: str | None = None

    @property
    def proof_verified(self) -> bool:
        return self.proof_size is not None and self.proof_problem is None

    @property
    def leaf_matches(self) -> bool:
        return self.leaf_hash == self.stored_leaf_hash


def entry_detail(session: Session, log_: AuditLog, seq: int, *, public_only: bool = False) -> EntryDetail:
    """Entry ``seq`` with its subjects and related entries (three queries; the proof is added
    by :func:`prove_entry` against a checkpoint). ``NotFoundError`` when there is none."""
    row = session.execute(
        select(
            AuditEntry.seq,
            AuditEntry.created_at,
            AuditEntry.type,
            AuditEntry.actor,
            AuditEntry.namespace,
            AuditEntry.entry,
            AuditEntry.leaf_hash,
        ).where(AuditEntry.seq == seq)
    ).first()
    if row is None:
        raise NotFoundError(f"the audit log has no entry {seq}", hint="entries are numbered from 0")
    raw = bytes(row.entry)
    doc = parse_entry(raw)
    subjects_raw = (doc or {}).get("subjects")
    subjects = [str(s) for s in subjects_raw] if isinstance(subjects_raw, list) else []
    digests = [s for s in subjects if _DIGEST.fullmatch(s)]
    for v in (doc or {}).get("old"), (doc or {}).get("new"):
        if isinstance(v, str) and _DIGEST.fullmatch(v) and v not in digests:
            digests.append(v)
    artifacts: set[str] = set()
    if row.namespace and digests:
        artifacts = set(
            session.scalars(
                select(Envelope.manifest_digest)
                .join(Namespace, Namespace.id == Envelope.namespace_id)
                .where(Namespace.name == row.namespace, Envelope.manifest_digest.in_(digests))
            )
        )
    links = [
        SubjectLink(d, f"/ns/{row.namespace}/artifacts/{d}" if d in artifacts else None)
        for d in [*subjects, *[d for d in digests if d not in subjects]]
    ]
    related: list[EntryRow] = []
    capped = False
    if digests:
        rel = session.execute(
            select(*_LIST_COLUMNS[:5])
            .where(
                AuditEntry.seq.in_(
                    select(AuditSubject.seq).where(AuditSubject.digest.in_(digests), AuditSubject.seq != seq)
                ),
                *([AuditEntry.namespace.in_(public_namespaces())] if public_only else []),
            )
            .order_by(AuditEntry.seq.desc())
            .limit(MAX_RELATED + 1)
        ).all()
        capped = len(rel) > MAX_RELATED
        related = [
            EntryRow(int(r.seq), r.created_at, r.type, r.actor, r.namespace, "") for r in rel[:MAX_RELATED]
        ]
    return EntryDetail(
        seq=int(row.seq),
        time=row.created_at,
        type=row.type,
        actor=row.actor,
        namespace=row.namespace,
        raw=raw.decode("utf-8", errors="replace"),
        doc=doc,
        leaf_hash=leaf_hash(raw),
        stored_leaf_hash=bytes(row.leaf_hash),
        subjects=links,
        related=related,
        related_capped=capped,
        log_size=log_.size(session),
    )


def prove_entry(session: Session, log_: AuditLog, detail: EntryDetail, checkpoint: Checkpoint | None) -> None:
    """Add the inclusion proof of ``detail`` in ``checkpoint``, verified against its signed root
    with the leaf hash of the stored bytes; a failure is recorded, not raised."""
    if checkpoint is None:
        detail.proof_problem = "there is no verified checkpoint to prove the entry against"
        return
    if detail.seq >= checkpoint.size:
        detail.proof_problem = f"the latest checkpoint ({checkpoint.size} entries) does not include it yet"
        return
    try:
        proof = log_.inclusion(session, detail.seq, checkpoint.size)
        detail.proof_size = proof.size
        detail.proof_hashes = proof.hashes_b64()
        verify_inclusion(detail.leaf_hash, detail.seq, checkpoint.size, proof.hashes, checkpoint.root)
    except KvregError as e:
        detail.proof_size = detail.proof_size or checkpoint.size
        reason = e.message
        if not detail.leaf_matches:
            reason += " (its stored bytes do not hash to the leaf hash stored with them: it was altered)"
        detail.proof_problem = reason
