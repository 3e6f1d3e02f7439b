"""The queries and view model of the compare page (``web.pages_compare``): two artifacts side by side.

Each side is ``NAMESPACE/REF`` or ``NAMESPACE/sha256:DIGEST``, readable by the visitor
(``web.lookup``). :func:`compare` counts the leading full blocks the two share (with
their Merkle consistency proof checked), the common prefix of their token ids and
where their texts diverge, from the tokens and text objects read from storage
(capped at :data:`MAX_TOKENS_BYTES` and :data:`MAX_COMPARE_TEXT_BYTES`, ``web.blobs``).
Nothing here escapes HTML: the templates autoescape everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, RequestInvalidError
from kvreg.core.manifest import Manifest
from kvreg.core.manifest_prefix import prefix_consistency_proof, verify_prefix
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope as EnvelopeRow
from kvreg_registry.services import envelopes
from kvreg_registry.storage.base import ObjectStorage
from kvreg_registry.web.blobs import Blob, common_prefix_len, read_object
from kvreg_registry.web.lookup import (
    artifact_url,
    manifest_title,
    parse_manifest,
    readable_namespace,
    ref_digest,
)
from kvreg_registry.web.model_summary import ModelSummary, summarize

MAX_TOKENS_BYTES = 4 * 1024 * 1024
MAX_COMPARE_TEXT_BYTES = 1024 * 1024
MAX_SPEC_CHARS = 300
CONTEXT_BEFORE = 200
CONTEXT_AFTER = 300


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

    @property
    def model(self) -> ModelSummary:
        return summarize(self.manifest.model)


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
    diverging_block: int | None  # the first full block that differs (None: no proof, or a prefix)
    shared_tokens: int  # 0 when the tokenizers differ (their ids are not comparable)
    tokens_partial: bool
    tokens_problem: str | None
    divergence: Divergence | None
    text_problem: str | None

    @property
    def kv_shareable(self) -> bool:
        return self.same_model and self.same_tokenizer and self.same_config and self.same_block_size

    @property
    def differing(self) -> list[str]:
        """What differs of the four things KV sharing needs equal (empty: nothing)."""
        pairs = (
            ("models", self.same_model),
            ("tokenizers", self.same_tokenizer),
            ("configurations", self.same_config),
            ("block sizes", self.same_block_size),
        )
        return [name for name, same in pairs if not same]

    @property
    def answer(self) -> tuple[str, str]:
        """The page's question — can a host reuse one's KV cache for the other? — answered in one
        sentence, with its kind: ``yes``, ``partly`` or ``no``."""
        if not self.kv_shareable:
            names = self.differing
            what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            return (
                "no",
                f"No: the {what} differ, so no KV block of one can serve the other, whatever their texts.",
            )
        plural = "" if self.comparable_blocks == 1 else "s"
        blocks = f"{self.shared_blocks} of {self.comparable_blocks} block{plural}"
        tokens = self.shared_blocks * self.a.manifest.block_size
        if self.shared_blocks == 0:
            if self.comparable_blocks == 0:
                return "no", "No: the shorter artifact has no full block, so there is no KV block to reuse."
            return "no", "No: their first blocks already differ, so no KV block is reusable."
        if self.proof_checked:
            return "yes", f"Yes: {blocks} ({tokens} tokens) reusable; proof checked."
        return (
            "partly",
            f"Partly: the first {blocks} ({tokens} tokens) are the same KV cache, "
            "but neither artifact is a prefix of the other.",
        )


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

    shared_tokens = 0
    tokens_partial = False
    tokens_problem: str | None = None
    if same_tokenizer:  # ids of two tokenizers mean different things: nothing to count
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
    if same_tokenizer and tokens_problem is None:
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
        diverging_block=shared if proof is False and shared < comparable else None,
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
