"""The queries and view models of the artifact page and the compare page.

Everything these pages show is read here, in a fixed number of SQL statements
whatever the library's size (the page modules only parse the URL and render):

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
  proof (``kvreg.core.manifest.prefix_consistency_proof`` + ``verify_prefix``)
  checks;
- graft receipts (``services.receipts``: the newest :data:`MAX_RECEIPTS` and the
  total) and the artifact's audit history in its namespace (``audit_subjects``
  joined with ``audit_entries``: the newest :data:`MAX_HISTORY`).

Object bytes (the solution text, the prompt, the tokens) are read from storage
after the database session is closed, capped (:data:`MAX_TEXT_BYTES`,
:data:`MAX_TOKENS_BYTES`), and checked against their digest when read whole.
Nothing here escapes HTML: the templates autoescape everything.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, not_, select
from sqlalchemy.orm import Session, aliased

from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope
from kvreg.core.errors import KvregError, RequestInvalidError
from kvreg.core.manifest import Manifest, prefix_consistency_proof, verify_prefix
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import (
    AuditEntry,
    AuditSubject,
    EnvelopeObject,
    Namespace,
    NamespaceObject,
    Ref,
)
from kvreg_registry.db.models import Envelope as EnvelopeRow
from kvreg_registry.services import accounts, envelopes, receipts, refs
from kvreg_registry.services.search import visible_condition
from kvreg_registry.storage.base import ObjectStorage

MAX_TEXT_BYTES = 256 * 1024
MAX_TOKENS_BYTES = 4 * 1024 * 1024
MAX_COMPARE_TEXT_BYTES = 1024 * 1024
MAX_SHARED_ROWS = 500
MAX_CANDIDATES = 50
MAX_RECEIPTS = 50
MAX_HISTORY = 50
MAX_RELATED = 50
MAX_SPEC_CHARS = 300
CONTEXT_BEFORE = 200
CONTEXT_AFTER = 300


# --- access -----------------------------------------------------------------------------------


def readable_namespace(session: Session, principal: Principal, name: str) -> Namespace:
    """The namespace if ``principal`` may read it, with the API's answers otherwise: a
    private (or missing) namespace is 401 to an anonymous visitor (the page sends them
    to sign in) and 404 to a signed-in user without a role in it."""
    return accounts.readable_namespace(session, principal, name)


def artifact_url(namespace: str, digest: str) -> str:
    return f"/ns/{namespace}/artifacts/{digest}"


def ref_digest(session: Session, ns: Namespace, name: str) -> Digest:
    """The digest the ref ``ns/name`` points at (``RefNotFoundError`` otherwise)."""
    return Digest(refs.get(session, ns, name).manifest_digest)


def parse_manifest(row: EnvelopeRow) -> tuple[Envelope, Manifest]:
    envelope = Envelope.from_json_bytes(bytes(row.envelope))
    return envelope, Manifest.from_bytes(envelope.payload)


def manifest_title(manifest: Manifest) -> str:
    title = manifest.annotations.get("title")
    return title.strip() if isinstance(title, str) else ""


# --- object contents ----------------------------------------------------------------------------


@dataclass
class Blob:
    """The first bytes of an object read from storage."""

    digest: str
    size: int  # as the manifest declares it
    data: bytes = b""
    cut: bool = False  # only the first ``cap`` bytes were read
    missing: bool = False  # the storage does not have it
    mismatch: bool = False  # read whole, the bytes do not hash to the digest

    @property
    def ok(self) -> bool:
        return not self.missing and not self.mismatch

    def text(self) -> str:
        """The bytes as UTF-8 (invalid sequences replaced; a character cut at the cap dropped)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(self.data, final=not self.cut)


def read_object(storage: ObjectStorage, digest: str, size: int, cap: int) -> Blob:
    """At most ``cap`` bytes of the object ``digest``; checked against the digest when read whole."""
    blob = Blob(digest=str(digest), size=size)
    try:
        blob.data = b"".join(storage.read_range(Digest(digest), 0, cap))
    except KvregError:
        blob.missing = True
        return blob
    blob.cut = size > cap and len(blob.data) >= cap
    if not blob.cut and Digest.of_bytes(blob.data) != digest:
        blob.mismatch = True
        blob.data = b""
    return blob


@dataclass(frozen=True)
class TextView:
    """A text shown in a ``<pre>``: the text, how many bytes it has, and whether it was cut."""

    text: str
    size: int
    cut: bool
    cap: int
    problem: str | None = None  # why it cannot be shown


def text_view(blob: Blob, cap: int) -> TextView:
    if blob.missing:
        return TextView("", blob.size, False, cap, f"the object {blob.digest} is not in storage")
    if blob.mismatch:
        return TextView(
            "", blob.size, False, cap, f"the stored bytes of {blob.digest} do not hash to it: not shown"
        )
    return TextView(blob.text(), blob.size, blob.cut, cap)


def common_prefix_len(a: Any, b: Any) -> int:
    """The length of the common prefix of two str/bytes (binary search over slice comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --- the artifact page --------------------------------------------------------------------------


@dataclass(frozen=True)
class SignatureStatus:
    verified: bool
    keyid: str | None  # the key that verified it now
    signer_keyid: str  # the key that verified it at push time
    reason: str | None


def signature_status(session: Session, ns: Namespace, row: EnvelopeRow) -> SignatureStatus:
    """The envelope's signature checked again now against the namespace's registered keys."""
    keys = accounts.list_keys(session, ns)
    try:
        checked = envelopes.check_envelope(Digest(row.manifest_digest), bytes(row.envelope), keys, ns.name)
    except KvregError as exc:
        reason = exc.message
        for key in keys:
            if key.keyid == row.signer_keyid and key.revoked_at is not None:
                reason = f"the signer's key {key.keyid} was revoked on {key.revoked_at:%Y-%m-%d %H:%M UTC}"
        return SignatureStatus(False, None, row.signer_keyid, reason)
    return SignatureStatus(True, checked.signer.keyid, row.signer_keyid, None)


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
        shared=shared_chunks(session, principal, ns, digest, manifest),
        relations=relations,
        relations_capped=relations_capped,
        receipts=receipts.view(session, ns, receipt_rows),
        receipts_total=receipts_total,
        history=entries,
        history_capped=history_capped,
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


# --- the compare page ---------------------------------------------------------------------------


@dataclass
class Side:
    """One artifact of a comparison."""

    namespace: str
    digest: str
    row: EnvelopeRow
    manifest: Manifest
    title: str
    given: str  # what the visitor typed (ns/ref or ns/digest)
    tokens: Blob | None = None
    text: Blob | None = None

    @property
    def url(self) -> str:
        return artifact_url(self.namespace, self.digest)

    @property
    def full_blocks(self) -> int:
        return self.manifest.token_count // self.manifest.block_size


def parse_spec(value: str, what: str) -> tuple[str, str]:
    """``ns/ref`` or ``ns/sha256:…`` → (namespace, ref-or-digest)."""
    text = value.strip()
    ns, sep, rest = text.partition("/")
    if not sep or not ns or not rest or len(text) > MAX_SPEC_CHARS:
        raise RequestInvalidError(
            f"{what} must be NAMESPACE/REF or NAMESPACE/sha256:DIGEST, not {value[:200]!r}",
            hint="e.g. aime25/p07",
        )
    return ns, rest


def load_side(session: Session, principal: Principal, value: str, what: str) -> Side:
    ns_name, rest = parse_spec(value, what)
    ns = readable_namespace(session, principal, ns_name)
    digest = Digest(rest) if rest.startswith("sha256:") else ref_digest(session, ns, rest)
    row = envelopes.get(session, ns, digest)
    _, manifest = parse_manifest(row)
    title = manifest_title(manifest) or f"{ns.name}/{rest if not rest.startswith('sha256:') else digest}"
    return Side(ns.name, str(digest), row, manifest, title, value.strip())


@dataclass(frozen=True)
class Divergence:
    identical: bool
    at: int  # characters in common
    before: str
    after_a: str
    after_b: str
    partial: bool  # a text was cut at the cap: "identical" means identical as far as read


@dataclass
class Comparison:
    a: Side
    b: Side
    same_model: bool
    same_tokenizer: bool
    same_config: bool
    same_block_size: bool
    shared_blocks: int
    comparable_blocks: int  # min of the two full-block counts
    proof_checked: bool | None  # None: no proof possible (fingerprints/block sizes differ)
    proof_problem: str | None
    shared_tokens: int
    tokens_partial: bool
    tokens_problem: str | None
    divergence: Divergence | None
    text_problem: str | None

    @property
    def kv_shareable(self) -> bool:
        return self.same_model and self.same_tokenizer and self.same_config and self.same_block_size


def load_sides(session: Session, principal: Principal, a: str, b: str) -> tuple[Side, Side]:
    return load_side(session, principal, a, "a"), load_side(session, principal, b, "b")


def compare(storage: ObjectStorage, a: Side, b: Side) -> Comparison:
    """Compare two loaded artifacts: blocks, tokens (read from storage) and texts."""
    ma, mb = a.manifest, b.manifest
    same_model = ma.model.fingerprint == mb.model.fingerprint
    same_tokenizer = ma.tokenizer.fingerprint == mb.tokenizer.fingerprint
    same_config = ma.config.fingerprint == mb.config.fingerprint
    same_block = ma.block_size == mb.block_size
    comparable = min(a.full_blocks, b.full_blocks) if same_block else 0
    shared = 0
    while shared < comparable and ma.chunks[shared].digest == mb.chunks[shared].digest:
        shared += 1
    proof: bool | None = None
    problem: str | None = None
    if same_model and same_tokenizer and same_config and same_block:
        short, long = (ma, mb) if ma.token_count <= mb.token_count else (mb, ma)
        try:
            verify_prefix(short, long, prefix_consistency_proof(short, long))
            proof = True
        except KvregError as exc:
            proof, problem = False, exc.message

    a.tokens = tokens_a = read_object(storage, ma.tokens.digest, 4 * ma.token_count, MAX_TOKENS_BYTES)
    b.tokens = tokens_b = read_object(storage, mb.tokens.digest, 4 * mb.token_count, MAX_TOKENS_BYTES)
    tokens_problem = next(
        (
            f"the tokens of {s.title} cannot be read ({_why(blob)})"
            for s, blob in ((a, tokens_a), (b, tokens_b))
            if not blob.ok
        ),
        None,
    )
    shared_tokens = 0
    tokens_partial = False
    if tokens_problem is None:
        # Little-endian uint32 ids: equal ids are equal 4-byte groups, so the common byte
        # prefix, floored to whole ids, is the common prefix of the id sequences.
        da, db = tokens_a.data, tokens_b.data
        da, db = da[: len(da) // 4 * 4], db[: len(db) // 4 * 4]
        shared_tokens = common_prefix_len(da, db) // 4
        # Both read up to the cap and equal that far: the common prefix may go on.
        tokens_partial = (tokens_a.cut or tokens_b.cut) and shared_tokens * 4 == min(len(da), len(db))

    a.text = text_a = read_object(storage, ma.text.digest, ma.text.size, MAX_COMPARE_TEXT_BYTES)
    b.text = text_b = read_object(storage, mb.text.digest, mb.text.size, MAX_COMPARE_TEXT_BYTES)
    text_problem = next(
        (
            f"the text of {s.title} cannot be read ({_why(blob)})"
            for s, blob in ((a, text_a), (b, text_b))
            if not blob.ok
        ),
        None,
    )
    divergence = None
    if text_problem is None:
        ta, tb = a.text.text(), b.text.text()
        at = common_prefix_len(ta, tb)
        partial = a.text.cut or b.text.cut
        divergence = Divergence(
            identical=ta == tb,
            at=at,
            before=ta[max(0, at - CONTEXT_BEFORE) : at],
            after_a=ta[at : at + CONTEXT_AFTER],
            after_b=tb[at : at + CONTEXT_AFTER],
            partial=partial,
        )
    return Comparison(
        a=a,
        b=b,
        same_model=same_model,
        same_tokenizer=same_tokenizer,
        same_config=same_config,
        same_block_size=same_block,
        shared_blocks=shared,
        comparable_blocks=comparable,
        proof_checked=proof,
        proof_problem=problem,
        shared_tokens=shared_tokens,
        tokens_partial=tokens_partial,
        tokens_problem=tokens_problem,
        divergence=divergence,
        text_problem=text_problem,
    )


def _why(blob: Blob | None) -> str:
    if blob is None or blob.missing:
        return "not in storage"
    return "its bytes do not match its digest"
