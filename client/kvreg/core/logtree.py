"""RFC 6962 proofs computed from stored perfect subtrees, for an append-only log.

A log of ``n`` leaves is kept as the hashes of its *perfect subtrees*: node
``(level, index)`` is the Merkle Tree Hash of leaves ``[index * 2**level,
(index + 1) * 2**level)``; level 0 holds the leaf hashes. Appending leaf ``i``
adds node ``(0, i)`` and then, while the new node closes a pair, its parent:
at most ``log2(n) + 1`` nodes (:func:`nodes_after_append`).

Every range that RFC 9162's ``MTH``, ``PATH`` and ``SUBPROOF`` need is a
left-aligned range whose hash is the right fold of at most ``log2(n)`` stored
perfect subtrees (:func:`decompose`). So a root, an inclusion proof or a
consistency proof reads O(log² n) stored nodes, never the whole log:
:func:`plan` lists the nodes a computation needs (so a database can fetch them in
one query), and the computation then runs against a ``NodeReader``.

Verification is ``kvreg.core.merkle.verify_inclusion`` / ``verify_consistency``:
proofs made here are ordinary RFC 6962 proofs. This module does not store nodes
(the registry's ``services.log`` does) and does not sign anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from kvreg.core.errors import UsageError
from kvreg.core.merkle import empty_root, node_hash

__all__ = [
    "Node",
    "NodeReader",
    "consistency_proof",
    "decompose",
    "inclusion_proof",
    "nodes_after_append",
    "plan",
    "range_hash",
    "root",
]

Node = tuple[int, int]  # (level, index)
NodeReader = Callable[[int, int], bytes]
T = TypeVar("T")

_PLACEHOLDER = b"\x00" * 32


def decompose(lo: int, hi: int) -> list[Node]:
    """The perfect subtrees whose right fold is ``MTH(D[lo:hi])``, largest first.

    ``lo`` must be aligned to the largest power of two not above ``hi - lo``, which
    holds for every range of the RFC 9162 recursions over ``[0, n)``.
    """
    if not 0 <= lo < hi:
        raise UsageError(f"empty or negative leaf range [{lo}, {hi})")
    out: list[Node] = []
    start, remaining = lo, hi - lo
    while remaining:
        level = remaining.bit_length() - 1
        size = 1 << level
        if start % size:
            raise UsageError(f"leaf range [{lo}, {hi}) is not aligned as RFC 6962 subtrees are")
        out.append((level, start >> level))
        start += size
        remaining -= size
    return out


def range_hash(lo: int, hi: int, node: NodeReader) -> bytes:
    """``MTH(D[lo:hi])`` from stored perfect subtrees."""
    if hi <= lo:
        return empty_root()
    parts = [node(level, index) for level, index in decompose(lo, hi)]
    acc = parts[-1]
    for h in reversed(parts[:-1]):
        acc = node_hash(h, acc)
    return acc


def root(size: int, node: NodeReader) -> bytes:
    """The root of the first ``size`` leaves."""
    return range_hash(0, size, node)


def _split(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def inclusion_proof(index: int, size: int, node: NodeReader) -> list[bytes]:
    """``PATH(index, D[0:size])`` (RFC 9162 §2.1.3.1), leaf to root."""
    if not 0 <= index < size:
        raise UsageError(f"leaf index {index} is outside a tree of size {size}")
    lo, hi, m = 0, size, index
    top_down: list[bytes] = []
    while hi - lo > 1:
        k = _split(hi - lo)
        if m < k:
            top_down.append(range_hash(lo + k, hi, node))
            hi = lo + k
        else:
            top_down.append(range_hash(lo, lo + k, node))
            lo, m = lo + k, m - k
    return top_down[::-1]


def consistency_proof(old_size: int, new_size: int, node: NodeReader) -> list[bytes]:
    """``PROOF(old_size, D[0:new_size])`` (RFC 9162 §2.1.4.1)."""
    if not 0 <= old_size <= new_size:
        raise UsageError(f"no consistency proof from size {old_size} to size {new_size}")
    if old_size in (0, new_size):
        return []
    # SUBPROOF(m, D[lo:hi], b), unrolled top-down and reversed at the end.
    lo, hi, m, complete = 0, new_size, old_size, True
    top_down: list[bytes] = []
    while True:
        n = hi - lo
        if m == n:
            if not complete:
                top_down.append(range_hash(lo, hi, node))
            break
        k = _split(n)
        if m <= k:
            top_down.append(range_hash(lo + k, hi, node))
            hi = lo + k
        else:
            top_down.append(range_hash(lo, lo + k, node))
            lo, m, complete = lo + k, m - k, False
    return top_down[::-1]


def plan(compute: Callable[[NodeReader], T]) -> set[Node]:
    """The stored nodes ``compute`` reads (it is run once against placeholders).

    The nodes a root or proof needs depend only on the sizes and indices, never on
    hash values, so a caller can fetch exactly these in one query, then run
    ``compute`` for real.
    """
    needed: set[Node] = set()

    def record(level: int, index: int) -> bytes:
        needed.add((level, index))
        return _PLACEHOLDER

    compute(record)
    return needed


def nodes_after_append(index: int, leaf: bytes, node: NodeReader) -> list[tuple[int, int, bytes]]:
    """The nodes ``(level, index, hash)`` to store when leaf ``index`` is appended.

    ``node`` must answer for the left siblings on the way up (all stored already).
    """
    out = [(0, index, leaf)]
    level, i, h = 0, index, leaf
    while i & 1:
        h = node_hash(node(level, i - 1), h)
        level, i = level + 1, i >> 1
        out.append((level, i, h))
    return out


def siblings_for_append(index: int) -> list[Node]:
    """The stored nodes :func:`nodes_after_append` reads for leaf ``index``."""
    out: list[Node] = []
    level, i = 0, index
    while i & 1:
        out.append((level, i - 1))
        level, i = level + 1, i >> 1
    return out


def from_leaves(leaf_hashes: Iterable[bytes]) -> dict[Node, bytes]:
    """Every perfect subtree of a list of leaf hashes (for tests and offline tools)."""
    nodes: dict[Node, bytes] = {}
    for i, leaf in enumerate(leaf_hashes):
        for level, index, h in nodes_after_append(i, leaf, lambda lv, ix: nodes[(lv, ix)]):
            nodes[(level, index)] = h
    return nodes
