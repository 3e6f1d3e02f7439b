"""Pure checks of a registry's audit log as a client sees it: checkpoints, proofs, entries, claims.

What a client verifies of a registry's append-only log (RFC 6962 Merkle tree,
C2SP signed checkpoints, ``kvreg.core.checkpoint``), with no I/O:

- :func:`parse_verifier` / :func:`parse_log_key`: a C2SP verifier key from an answer
  or from a person; :func:`note_timestamp`: a signed note's checkpoint and date.
- :func:`verify_advance`: a newer signed checkpoint extends an older one (a shrunk
  log, a fork or a failed consistency proof is ``LogInconsistentError``). The
  proof comes from a callback; this module fetches nothing.
- :func:`parse_entry`, :class:`EntryClaim` (:func:`ref_claim`, :func:`envelope_claim`):
  an audit entry's JSON and whether it records a given change.
- :func:`right_sibling_ranges`, :func:`suffix_problem`, :func:`replay_ref`: the
  entries after a ref's entry are those of the signed tree, and where they leave the ref.

It does not fetch anything (``kvreg.remote.auditlog`` does), read or write files
(``kvreg.store.audit_state`` keeps what a store remembers) or print.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kvreg.core.canonical import parse_json_object
from kvreg.core.checkpoint import (
    Checkpoint,
    NoteVerifier,
    checkpoint_timestamp,
    open_note,
    parse_checkpoint_body,
)
from kvreg.core.errors import LogInconsistentError, MerkleProofError, SignatureError, UsageError
from kvreg.core.merkle import leaf_hash, root_from_leaf_hashes, verify_consistency, verify_inclusion

__all__ = [
    "MAX_ENTRY_BYTES",
    "REF_CHANGE_TYPES",
    "REF_TYPES",
    "ConsistencyProof",
    "EntryClaim",
    "ProofFetcher",
    "b64",
    "envelope_claim",
    "note_timestamp",
    "parse_entry",
    "parse_log_key",
    "parse_verifier",
    "ref_claim",
    "replay_ref",
    "right_sibling_ranges",
    "suffix_problem",
    "verify_advance",
]

MAX_ENTRY_BYTES = 1 << 20
REF_TYPES = frozenset({"ref.created", "ref.moved", "tag.created"})
REF_CHANGE_TYPES = REF_TYPES | {"ref.deleted"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_verifier(text: str) -> NoteVerifier:
    """A C2SP verifier key ``NAME+KEYID+KEY`` from an answer or a file; raises ``SignatureError``."""
    if not isinstance(text, str):
        raise SignatureError("a verifier key is text")
    return NoteVerifier.from_text(text)


def parse_log_key(text: str) -> NoteVerifier:
    """A log key given by a person (``NAME+KEYID+KEY``); ``UsageError`` when malformed."""
    try:
        return parse_verifier(text)
    except SignatureError as e:
        raise UsageError(
            f"invalid log key: {e.message}",
            hint="a log key is NAME+KEYID+KEY, as GET /api/v1/log/key answers in 'verifier_key' "
            "(kvreg audit show REMOTE prints it)",
        ) from e


def note_timestamp(note: str, verifier: NoteVerifier) -> tuple[Checkpoint, int | None]:
    """Verify ``note`` with ``verifier``: its checkpoint and its ``timestamp`` (None: undated)."""
    body = open_note(note, verifier)
    return parse_checkpoint_body(body), checkpoint_timestamp(body)


# --- checkpoints --------------------------------------------------------------------------------


class ConsistencyProof(Protocol):
    """A consistency proof as served: the size it proves to and its hashes (``LogProof`` is one)."""

    @property
    def size(self) -> int: ...

    @property
    def hashes(self) -> list[bytes]: ...


ProofFetcher = Callable[[int, int], ConsistencyProof]


def verify_advance(
    old: Checkpoint | None, new: Checkpoint, fetch_consistency: ProofFetcher, *, where: str = "the registry"
) -> None:
    """Check that the signed checkpoint ``new`` extends the verified ``old``; raise ``LogInconsistentError``.

    ``fetch_consistency(m, n)`` answers the registry's consistency proof from size
    ``m`` to size ``n``; it is verified against the two signed roots.
    """
    if old is None or old.size == 0:
        return  # every log extends the empty one
    if new.origin != old.origin:
        raise LogInconsistentError(
            f"{where}: its checkpoint names the log {new.origin!r}, not {old.origin!r}"
        )
    if new.size < old.size:
        raise LogInconsistentError(
            f"{where}: the audit log shrank from {old.size} to {new.size} entries since this store last saw "
            "it: the registry was reset to an older state, or shows this client a fork of its history",
            old_size=old.size,
            new_size=new.size,
        )
    if new.size == old.size:
        if new.root != old.root:
            raise LogInconsistentError(
                f"{where}: two different logs of {new.size} entries (roots {b64(old.root)} and "
                f"{b64(new.root)}): the registry forked or rewrote its history",
                size=new.size,
            )
        return
    proof = fetch_consistency(old.size, new.size)
    if proof.size != new.size:
        raise LogInconsistentError(
            f"{where}: asked for a consistency proof to size {new.size}, it answered one to size {proof.size}"
        )
    try:
        verify_consistency(old.size, new.size, old.root, new.root, proof.hashes)
    except MerkleProofError as e:
        raise LogInconsistentError(
            f"{where}: its audit log of {new.size} entries does not extend the log of {old.size} entries "
            f"this store verified before: the registry rewrote its history ({e.message})",
            old_size=old.size,
            new_size=new.size,
        ) from e


# --- entries and claims -----------------------------------------------------------------------


def parse_entry(entry: bytes, index: int) -> dict[str, Any]:
    """An audit entry's JSON, checked to be an object whose ``seq`` is its position ``index``."""
    doc = parse_json_object(
        entry, what=f"audit entry {index}", max_bytes=MAX_ENTRY_BYTES, error=LogInconsistentError
    )
    if doc.get("seq") != index or isinstance(doc.get("seq"), bool):
        raise LogInconsistentError(
            f"audit entry at position {index} says it is entry {doc.get('seq')!r}: "
            "the log was reordered or edited",
            index=index,
        )
    if not isinstance(doc.get("type"), str):
        raise LogInconsistentError(f"audit entry {index} has no type")
    return doc


_ANY: Any = object()


@dataclass(frozen=True)
class EntryClaim:
    """What one audit entry must say: its index and the fields of the change it records.

    ``old``/``new`` left at their default are not checked; ``None`` there means the
    entry must say null.
    """

    index: int | None
    what: str
    types: frozenset[str]
    namespace: str
    subject: str | None = None
    ref: str | None = None
    old: Any = _ANY
    new: Any = _ANY
    latest: bool = False  # the entry must be the ref's latest change (see "Per-ref rollback")

    def mismatch(self, doc: dict[str, Any]) -> str | None:
        """Why ``doc`` does not record this change, or None when it does."""
        if doc.get("type") not in self.types:
            return f"it is a {doc.get('type')!r} entry, not {' or '.join(sorted(self.types))}"
        if doc.get("namespace") != self.namespace:
            return f"it is about namespace {doc.get('namespace')!r}, not {self.namespace!r}"
        subjects = doc.get("subjects")
        if self.subject is not None and (not isinstance(subjects, list) or self.subject not in subjects):
            return f"its subjects do not include {self.subject}"
        details = doc.get("details")
        if self.ref is not None and (not isinstance(details, dict) or details.get("ref") != self.ref):
            got = details.get("ref") if isinstance(details, dict) else None
            return f"it is about ref {got!r}, not {self.ref!r}"
        if self.old is not _ANY and doc.get("old") != self.old:
            return f"it says the old value was {doc.get('old')!r}, not {self.old!r}"
        if self.new is not _ANY and doc.get("new") != self.new:
            return f"it says the new value is {doc.get('new')!r}, not {self.new!r}"
        return None


def ref_claim(
    index: int | None,
    namespace: str,
    name: str,
    digest: str,
    *,
    created: bool | None = None,
    tag: bool = False,
    old: str | None = None,
) -> EntryClaim:
    """The entry of a ref change to ``digest``: exactly this change when ``created`` is given
    (True: created, ``tag.created`` for a tag; False: moved from ``old``), else the ref's latest change."""
    ref = f"{namespace}/{name}"
    if created is None:
        return EntryClaim(
            index, f"ref {ref} -> {digest}", REF_TYPES, namespace, digest, ref, new=digest, latest=True
        )
    if created:
        types = frozenset({"tag.created" if tag else "ref.created"})
        return EntryClaim(
            index, f"ref {ref} created at {digest}", types, namespace, digest, ref, None, digest
        )
    return EntryClaim(
        index,
        f"ref {ref} moved {old} -> {digest}",
        frozenset({"ref.moved"}),
        namespace,
        digest,
        ref,
        old,
        digest,
    )


def envelope_claim(index: int | None, namespace: str, digest: str) -> EntryClaim:
    """The entry that logged the envelope of manifest ``digest`` in ``namespace``."""
    return EntryClaim(
        index, f"envelope {namespace}@{digest}", frozenset({"envelope.stored"}), namespace, digest
    )


# --- the entries after a ref's entry -------------------------------------------------------------


def right_sibling_ranges(index: int, size: int) -> list[tuple[int, int] | None]:
    """For each element of ``PATH(index, D[0:size])`` (leaf to root): the leaf range ``[lo, hi)``
    it hashes when it is a right-hand sibling (it covers entries after ``index``), None when left."""
    lo, hi, m = 0, size, index
    top_down: list[tuple[int, int] | None] = []
    while hi - lo > 1:
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        if m < k:
            top_down.append((lo + k, hi))
            hi = lo + k
        else:
            top_down.append(None)
            lo, m = lo + k, m - k
    return top_down[::-1]


def suffix_problem(
    i: int, size: int, served: Sequence[bytes], proof_hashes: Sequence[bytes], root: bytes
) -> str | None:
    """Why ``served`` are not entries ``[i, size)`` of the tree of ``size`` leaves with ``root``, or None.

    Entry ``i``'s inclusion proof (``proof_hashes``) must verify against ``root`` and
    each of its right-hand siblings must be the hash of the served entries it covers.
    """
    ranges = right_sibling_ranges(i, size)
    leaves = [leaf_hash(e) for e in served]
    problem = None
    try:
        verify_inclusion(leaves[0], i, size, list(proof_hashes), root)
    except MerkleProofError as e:
        problem = e.message
    if problem is None and len(proof_hashes) != len(ranges):
        problem = f"a proof of {len(proof_hashes)} hashes, not {len(ranges)}"
    for h, r in zip(proof_hashes, ranges, strict=False):
        if problem is None and r is not None and root_from_leaf_hashes(leaves[r[0] - i : r[1] - i]) != h:
            problem = f"entries {r[0]}..{r[1] - 1} as served do not hash to the signed tree"
    return problem


def replay_ref(
    served: Sequence[bytes], i: int, namespace: str, ref: str, value: str | None
) -> tuple[str | None, int]:
    """Where the entries after entry ``i`` (``served[1:]`` are entries ``i + 1``...) leave ``ref``
    of ``namespace``, starting at ``value``: the ref's last value (None: deleted) and the index
    of its last change (``i`` when none follows). Entries are checked by :func:`parse_entry`."""
    last = i
    for k, raw in enumerate(served[1:], start=i + 1):
        doc = parse_entry(raw, k)
        details = doc.get("details")
        if doc.get("type") not in REF_CHANGE_TYPES or doc.get("namespace") != namespace:
            continue
        if not isinstance(details, dict) or details.get("ref") != ref:
            continue
        new = doc.get("new")
        value, last = (new if isinstance(new, str) else None), k
    return value, last
