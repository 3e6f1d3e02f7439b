"""The queries and view model of the artifact page (``web.pages_artifact``).

Everything the page shows is read here, in a fixed number of SQL statements
whatever the library's size (the page module only parses the URL and renders):

- the envelope row, its refs, the namespace's signing keys (the signature is
  checked again now, with ``services.envelopes.check_envelope``: a key revoked since
  the push shows as "NOT verified");
- the other artifacts that hold this one's chunks: ONE query over
  ``envelope_objects`` joined to itself, restricted to the namespaces the visitor
  may read (``services.search.visible_condition``), capped at
  :data:`MAX_SHARED_ROWS` rows;
- prefix relations: ONE query for the envelopes that hold this artifact's chunk 0
  at position 0 with the same fingerprints and block size (at most
  :data:`MAX_CANDIDATES`); each relation is shown only if its Merkle consistency
  proof (``kvreg.core.manifest_prefix.prefix_consistency_proof`` + ``verify_prefix``)
  checks;
- graft receipts (``services.receipts``: the newest :data:`MAX_RECEIPTS` and the
  total) and the artifact's audit history in its namespace (``audit_subjects``
  joined with ``audit_entries``: the newest :data:`MAX_HISTORY`).

The solution text and the prompt are read from storage after the database session
is closed, capped at :data:`MAX_TEXT_BYTES` (``web.blobs``). Nothing here escapes
HTML: the templates autoescape everything. The compare page is ``web.views_compare``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, distinct, func, not_, select
from sqlalchemy.orm import Session, aliased

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError
from kvreg.core.manifest import Manifest
from kvreg.core.manifest_prefix import prefix_consistency_proof, verify_prefix
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import (
    AuditEntry,
    AuditSubject,
    EnvelopeObject,
    GraftReceipt,
    Namespace,
    NamespaceObject,
    Ref,
    SigningKey,
)
from kvreg_registry.db.models import Envelope as EnvelopeRow
from kvreg_registry.services import accounts, envelopes, receipts
from kvreg_registry.services.search import visible_condition
from kvreg_registry.storage.base import ObjectStorage
from kvreg_registry.web.blobs import TextView, read_object, text_view
from kvreg_registry.web.lookup import artifact_url, manifest_title, parse_manifest, readable_namespace
from kvreg_registry.web.model_summary import ModelSummary, summarize
from kvreg_registry.web.svg_chunks import ChunkMap, chunk_map

MAX_TEXT_BYTES = 256 * 1024
MAX_SHARED_ROWS = 500
MAX_CANDIDATES = 50
MAX_RECEIPTS = 50
MAX_HISTORY = 50
MAX_RELATED = 50


@dataclass(frozen=True)
class KeyView:
    """A key as the page names it: its label and owner, and the audit entry that registered it."""

    keyid: str
    label: str
    owner: str | None
    log_seq: int | None
    revoked_at: Any
    registered: bool  # a key of the namespace (revoked or not)

    @property
    def name(self) -> str:
        """The label, else the start of the key id."""
        return self.label or f"key {self.keyid[7:23]}…"


def key_view(keys: dict[str, SigningKey], keyid: str) -> KeyView:
    k = keys.get(keyid)
    if k is None:
        return KeyView(keyid, "", None, None, None, False)
    return KeyView(keyid, k.label, k.owner, k.log_seq, k.revoked_at, True)


@dataclass(frozen=True)
class SignatureStatus:
    verified: bool
    keyid: str | None  # the key that verified it now
    signer_keyid: str  # the key that verified it at push time
    reason: str | None
    signer: KeyView | None = None


def signature_status(session: Session, ns: Namespace, row: EnvelopeRow) -> SignatureStatus:
    """The envelope's signature checked again now against the namespace's registered keys."""
    keys = accounts.list_keys(session, ns)
    signer = key_view({k.keyid: k for k in keys}, row.signer_keyid)
    try:
        checked = envelopes.check_envelope(Digest(row.manifest_digest), bytes(row.envelope), keys, ns.name)
    except KvregError as exc:
        reason = exc.message
        for key in keys:
            if key.keyid == row.signer_keyid and key.revoked_at is not None:
                reason = f"the signer's key {key.keyid} was revoked on {key.revoked_at:%Y-%m-%d %H:%M UTC}"
        return SignatureStatus(False, None, row.signer_keyid, reason, signer)
    return SignatureStatus(True, checked.signer.keyid, row.signer_keyid, None, signer)


@dataclass(frozen=True)
class GraftSummary:
    """All the artifact's receipts in numbers (one aggregate query, not capped)."""

    receipts: int
    hosts: int  # distinct host configuration fingerprints
    byte_exact: int  # receipts whose check was byte-exact
    not_byte_exact: int  # receipts whose check was not
    unchecked: int  # receipts without a check
    exact_hosts: int = 0  # distinct host configurations with a byte-exact receipt


def graft_summary(session: Session, ns: Namespace, digest: str) -> GraftSummary:
    cond = [GraftReceipt.namespace_id == ns.id, GraftReceipt.manifest_digest == digest]
    total, hosts, exact, inexact, exact_hosts = session.execute(
        select(
            func.count(),
            func.count(distinct(GraftReceipt.host_fingerprint)),
            func.count().filter(GraftReceipt.byte_exact.is_(True)),
            func.count().filter(GraftReceipt.byte_exact.is_(False)),
            func.count(distinct(GraftReceipt.host_fingerprint)).filter(GraftReceipt.byte_exact.is_(True)),
        ).where(*cond)
    ).one()
    return GraftSummary(total, hosts, exact, inexact, total - exact - inexact, exact_hosts)


@dataclass(frozen=True)
class OtherArtifact:
    namespace: str
    digest: str
    title: str

    @property
    def url(self) -> str:
        return artifact_url(self.namespace, self.digest)

    @property
    def spec(self) -> str:
        """``ns/digest``, as the compare page takes it."""
        return f"{self.namespace}/{self.digest}"

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.title}" if self.title else f"{self.namespace}/{self.digest[:19]}…"


@dataclass
class SharedChunks:
    by_digest: dict[str, list[OtherArtifact]]
    capped: bool
    shared: int  # chunks of this artifact held by another artifact
    total: int
    artifacts: list[OtherArtifact]  # the distinct others, in order of first shared chunk


def shared_chunks(
    session: Session, principal: Principal, ns: Namespace, digest: str, manifest: Manifest
) -> SharedChunks:
    """The other artifacts (that ``principal`` may read) holding each chunk of this one: one query."""
    chunks = manifest.chunks
    if not chunks:
        return SharedChunks({}, False, 0, 0, [])
    unique_chunks = len({c.digest for c in chunks})  # chunks come first in envelope_objects
    mine = aliased(EnvelopeObject)
    other = aliased(EnvelopeObject)
    # Through namespace_objects (indexed by digest) to the namespaces holding each chunk, then
    # ix_envelope_objects_holder (namespace_id, digest): index lookups, never a scan of
    # envelope_objects (which has no index on the digest alone).
    stmt = (
        select(mine.digest, Namespace.name, EnvelopeRow.manifest_digest, EnvelopeRow.title)
        .select_from(mine)
        .join(NamespaceObject, NamespaceObject.digest == mine.digest)
        .join(
            other,
            and_(other.namespace_id == NamespaceObject.namespace_id, other.digest == NamespaceObject.digest),
        )
        .join(Namespace, Namespace.id == other.namespace_id)
        .join(
            EnvelopeRow,
            and_(
                EnvelopeRow.namespace_id == other.namespace_id,
                EnvelopeRow.manifest_digest == other.manifest_digest,
            ),
        )
        .where(
            mine.namespace_id == ns.id,
            mine.manifest_digest == digest,
            mine.position < unique_chunks,
            other.position < EnvelopeRow.chunk_count,
            not_(and_(other.namespace_id == ns.id, other.manifest_digest == digest)),
        )
    )
    visible = visible_condition(principal)
    if visible is not True:
        stmt = stmt.where(visible)
    stmt = stmt.order_by(mine.position, Namespace.name, EnvelopeRow.title, EnvelopeRow.manifest_digest)
    rows = session.execute(stmt.limit(MAX_SHARED_ROWS + 1)).all()
    capped = len(rows) > MAX_SHARED_ROWS
    by_digest: dict[str, list[OtherArtifact]] = {}
    distinct: dict[tuple[str, str], OtherArtifact] = {}
    for chunk_digest, ns_name, other_digest, title in rows[:MAX_SHARED_ROWS]:
        a = distinct.setdefault((ns_name, other_digest), OtherArtifact(ns_name, other_digest, title or ""))
        by_digest.setdefault(chunk_digest, []).append(a)
    shared = sum(1 for c in chunks if c.digest in by_digest)
    return SharedChunks(by_digest, capped, shared, len(chunks), list(distinct.values()))


@dataclass(frozen=True)
class Relation:
    other: OtherArtifact
    kind: str  # "extends" (the other is a prefix of this one), "extended-by", "same-blocks"
    shared_blocks: int


def prefix_relations(
    session: Session, principal: Principal, ns: Namespace, digest: str, manifest: Manifest
) -> tuple[list[Relation], bool]:
    """Artifacts this one extends and that extend it, each checked with a consistency proof.

    Candidates (one query, at most :data:`MAX_CANDIDATES`): the envelopes the visitor
    may read that hold this artifact's chunk 0 at position 0 with the same model,
    tokenizer and config fingerprints and block size. Returns the relations whose
    proof verifies and whether the candidates were capped."""
    if not manifest.chunks or manifest.token_count < manifest.block_size:
        return [], False  # no full block: there is no prefix to prove
    stmt = (
        select(EnvelopeRow, Namespace.name)
        .select_from(NamespaceObject)
        .join(
            EnvelopeObject,
            and_(
                EnvelopeObject.namespace_id == NamespaceObject.namespace_id,
                EnvelopeObject.digest == NamespaceObject.digest,
            ),
        )
        .join(
            EnvelopeRow,
            and_(
                EnvelopeRow.namespace_id == EnvelopeObject.namespace_id,
                EnvelopeRow.manifest_digest == EnvelopeObject.manifest_digest,
            ),
        )
        .join(Namespace, Namespace.id == EnvelopeRow.namespace_id)
        .where(
            NamespaceObject.digest == manifest.chunks[0].digest,
            EnvelopeObject.position == 0,
            # ``|| ''`` keeps planners without statistics (SQLite) off ix_envelopes_model_fingerprint,
            # which may hold the whole library: the chunk digest is far more selective.
            EnvelopeRow.model_fingerprint.concat("") == manifest.model.fingerprint,
            EnvelopeRow.tokenizer_fingerprint == manifest.tokenizer.fingerprint,
            EnvelopeRow.config_fingerprint == manifest.config.fingerprint,
            EnvelopeRow.block_size == manifest.block_size,
            not_(and_(EnvelopeRow.namespace_id == ns.id, EnvelopeRow.manifest_digest == digest)),
        )
    )
    visible = visible_condition(principal)
    if visible is not True:
        stmt = stmt.where(visible)
    stmt = stmt.order_by(EnvelopeRow.created_at.desc(), EnvelopeRow.manifest_digest)
    rows = session.execute(stmt.limit(MAX_CANDIDATES + 1)).all()
    out: list[Relation] = []
    for row, ns_name in rows[:MAX_CANDIDATES]:
        try:
            _, theirs = parse_manifest(row)
        except KvregError:
            continue
        short, long = (theirs, manifest) if theirs.token_count <= manifest.token_count else (manifest, theirs)
        try:
            verify_prefix(short, long, prefix_consistency_proof(short, long))
        except KvregError:
            continue
        if theirs.token_count < manifest.token_count:
            kind = "extends"
        elif theirs.token_count > manifest.token_count:
            kind = "extended-by"
        else:
            kind = "same-blocks"
        other = OtherArtifact(ns_name, row.manifest_digest, row.title or "")
        out.append(Relation(other, kind, short.token_count // short.block_size))
    order = {"extends": 0, "same-blocks": 1, "extended-by": 2}
    out.sort(key=lambda r: (order[r.kind], -r.shared_blocks, r.other.namespace, r.other.digest))
    return out, len(rows) > MAX_CANDIDATES


@dataclass(frozen=True)
class HistoryEntry:
    seq: int
    time: Any
    type: str
    actor: str | None
    ref: str | None
    old: Any
    new: Any


def history(session: Session, ns: Namespace, digest: str) -> tuple[list[HistoryEntry], bool]:
    """The audit entries about ``digest`` in ``ns``, newest first (one query); and whether capped."""
    rows = session.execute(
        select(AuditEntry.seq, AuditEntry.created_at, AuditEntry.type, AuditEntry.actor, AuditEntry.entry)
        .join(AuditSubject, AuditSubject.seq == AuditEntry.seq)
        .where(AuditSubject.digest == digest, AuditEntry.namespace == ns.name)
        .order_by(AuditEntry.seq.desc())
        .limit(MAX_HISTORY + 1)
    ).all()
    out: list[HistoryEntry] = []
    for seq, created_at, type_, actor, entry in rows[:MAX_HISTORY]:
        ref = old = new = None
        try:
            body = json.loads(bytes(entry))
        except ValueError:
            body = {}
        details = body.get("details") if isinstance(body, dict) else None
        if isinstance(details, dict) and isinstance(details.get("ref"), str):
            ref, old, new = details["ref"], body.get("old"), body.get("new")
        out.append(HistoryEntry(seq, created_at, type_, actor, ref, old, new))
    return out, len(rows) > MAX_HISTORY


@dataclass
class ArtifactView:
    """Everything the artifact page shows (object contents are added by :func:`add_contents`)."""

    namespace: Namespace
    row: EnvelopeRow
    manifest: Manifest
    digest: str
    title: str
    refs: list[Ref]
    signature: SignatureStatus
    shared: SharedChunks
    relations: list[Relation]
    relations_capped: bool
    receipts: list[receipts.ReceiptView]
    receipts_total: int
    history: list[HistoryEntry]
    history_capped: bool
    grafts: GraftSummary
    model: ModelSummary
    chunk_map: ChunkMap
    receipt_signers: dict[str, KeyView] = field(default_factory=dict)
    question: TextView | None = None
    solution: TextView | None = None
    config_fields: list[tuple[str, str]] = field(default_factory=list)

    @property
    def related(self) -> list[OtherArtifact]:
        """The artifacts to compare with: prefix relations first, then those sharing chunks."""
        seen: dict[tuple[str, str], OtherArtifact] = {}
        for r in self.relations:
            seen.setdefault((r.other.namespace, r.other.digest), r.other)
        for a in self.shared.artifacts:
            seen.setdefault((a.namespace, a.digest), a)
        return list(seen.values())[:MAX_RELATED]

    @property
    def spec(self) -> str:
        return f"{self.namespace.name}/{self.digest}"


def artifact_view(session: Session, principal: Principal, ns_name: str, digest_text: str) -> ArtifactView:
    """Load the artifact ``ns_name/digest_text`` for ``principal`` (404 if it may not read it)."""
    ns = readable_namespace(session, principal, ns_name)
    digest = Digest(digest_text)
    row = envelopes.get(session, ns, digest)
    _, manifest = parse_manifest(row)
    ref_rows = list(
        session.scalars(
            select(Ref).where(Ref.namespace_id == ns.id, Ref.manifest_digest == digest).order_by(Ref.name)
        ).all()
    )
    title = manifest_title(manifest) or (f"{ns.name}/{ref_rows[0].name}" if ref_rows else str(digest))
    relations, relations_capped = prefix_relations(session, principal, ns, digest, manifest)
    receipt_rows, receipts_total = receipts.list_receipts(
        session, ns, digest=digest, limit=MAX_RECEIPTS, offset=0
    )
    entries, history_capped = history(session, ns, digest)
    receipt_views = receipts.view(session, ns, receipt_rows)
    shared = shared_chunks(session, principal, ns, digest, manifest)
    keys = {k.keyid: k for k in accounts.list_keys(session, ns)}
    fields = [
        (k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True))
        for k, v in sorted(manifest.config_fields.items())
    ]
    return ArtifactView(
        namespace=ns,
        row=row,
        manifest=manifest,
        digest=str(digest),
        title=title,
        refs=ref_rows,
        signature=signature_status(session, ns, row),
        shared=shared,
        relations=relations,
        relations_capped=relations_capped,
        receipts=receipt_views,
        receipts_total=receipts_total,
        history=entries,
        history_capped=history_capped,
        grafts=graft_summary(session, ns, str(digest)),
        model=summarize(manifest.model),
        chunk_map=chunk_map(manifest.chunks, shared.by_digest, title),
        receipt_signers={v.row.signer_keyid: key_view(keys, v.row.signer_keyid) for v in receipt_views},
        config_fields=fields,
    )


def add_contents(storage: ObjectStorage, view: ArtifactView) -> None:
    """Read the solution text and the question (the annotation, else the prompt object)."""
    m = view.manifest
    view.solution = text_view(
        read_object(storage, m.text.digest, m.text.size, MAX_TEXT_BYTES), MAX_TEXT_BYTES
    )
    question = m.annotations.get("question")
    if isinstance(question, str) and question.strip():
        data = question.encode("utf-8")
        view.question = TextView(question, len(data), False, MAX_TEXT_BYTES)
    elif m.prompt is not None:
        blob = read_object(storage, m.prompt.digest, m.prompt.size, MAX_TEXT_BYTES)
        view.question = text_view(blob, MAX_TEXT_BYTES)
