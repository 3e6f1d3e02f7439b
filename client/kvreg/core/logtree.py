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

The proofs themselves are ``kvreg.core.merkle.inclusion_proof`` /
``consistency_proof`` (the one RFC 9162 generator) fed by :func:`stored_range_hash`;
verification is ``merkle.verify_inclusion`` / ``verify_consistency``. This module does not store nodes
(the registry's ``services.log`` does) and does not sign anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from kvreg.core.errors import UsageError
from kvreg.core.merkle import RangeHash, empty_root, node_hash

__all__ = [
    "Node",
    "NodeReader",
    "decompose",
    "from_leaves",
    "nodes_after_append",
    "plan",
    "range_hash",
    "root",
    "siblings_for_append",
    "stored_range_hash",
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


def stored_range_hash(node: NodeReader) -> RangeHash:
    """The ``RangeHash`` over stored perfect subtrees that ``kvreg.core.merkle``'s proof
    generators take: ``merkle.inclusion_proof(i, n, stored_range_hash(node))``."""
    return lambda lo, hi: range_hash(lo, hi, node)


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
