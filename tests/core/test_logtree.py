"""Proofs from stored perfect subtrees equal the in-memory RFC 6962 proofs and verify."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.core import logtree, merkle
from kvreg.core.errors import UsageError


def _inclusion(index: int, leaves: list[bytes]) -> list[bytes]:
    return merkle.inclusion_proof(index, len(leaves), merkle.leaf_range_hash(leaves))


def _consistency(old_size: int, leaves: list[bytes]) -> list[bytes]:
    return merkle.consistency_proof(old_size, len(leaves), merkle.leaf_range_hash(leaves))


def _leaves(n: int) -> list[bytes]:
    return [merkle.leaf_hash(hashlib.sha256(str(i).encode()).digest()) for i in range(n)]


@pytest.mark.parametrize("n", [*range(1, 40), 64, 65, 127, 128, 129, 1000, 1025])
def test_root_and_proofs_match_the_in_memory_tree(n: int) -> None:
    leaves = _leaves(n)
    nodes = logtree.from_leaves(leaves)
    read = lambda lv, ix: nodes[(lv, ix)]  # noqa: E731
    for size in sorted({1, n // 2 or 1, n - 1 or 1, n}):
        expected_root = merkle.root_from_leaf_hashes(leaves[:size])
        assert logtree.root(size, read) == expected_root
        for index in sorted({0, size // 3, size - 1}):
            proof = merkle.inclusion_proof(index, size, logtree.stored_range_hash(read))
            assert proof == _inclusion(index, leaves[:size])
            merkle.verify_inclusion(leaves[index], index, size, proof, expected_root)
        assert merkle.consistency_proof(0, size, logtree.stored_range_hash(read)) == []
        for old in sorted({1, size // 2 or 1, size}):
            proof = merkle.consistency_proof(old, size, logtree.stored_range_hash(read))
            assert proof == _consistency(old, leaves[:size])
            old_root = merkle.root_from_leaf_hashes(leaves[:old])
            merkle.verify_consistency(old, size, old_root, expected_root, proof)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3000), st.data())
def test_any_size_any_index(n: int, data: st.DataObject) -> None:
    leaves = _leaves(n)
    nodes = logtree.from_leaves(leaves)
    read = lambda lv, ix: nodes[(lv, ix)]  # noqa: E731
    index = data.draw(st.integers(0, n - 1))
    old = data.draw(st.integers(1, n))
    root = logtree.root(n, read)
    merkle.verify_inclusion(
        leaves[index], index, n, merkle.inclusion_proof(index, n, logtree.stored_range_hash(read)), root
    )
    merkle.verify_consistency(
        old,
        n,
        logtree.root(old, read),
        root,
        merkle.consistency_proof(old, n, logtree.stored_range_hash(read)),
    )


def test_proofs_read_few_nodes_whatever_the_size() -> None:
    """O(log^2 n) stored nodes per proof, not the whole log; at most 17 hashes at 100,000 leaves."""
    for n in (1_000, 100_000, 1_000_000):
        needed = logtree.plan(
            lambda read, n=n: merkle.inclusion_proof(n // 3, n, logtree.stored_range_hash(read))
        )
        assert len(needed) <= (n.bit_length()) ** 2
        needed = logtree.plan(
            lambda read, n=n: merkle.consistency_proof(n // 2 + 7, n, logtree.stored_range_hash(read))
        )
        assert len(needed) <= (n.bit_length()) ** 2
    read = lambda lv, ix: b"\x00" * 32  # noqa: E731
    assert len(merkle.inclusion_proof(54_321, 100_000, logtree.stored_range_hash(read))) <= 17
    assert len(merkle.consistency_proof(54_321, 100_000, logtree.stored_range_hash(read))) <= 2 * 17


def test_append_touches_log_n_nodes() -> None:
    nodes: dict[tuple[int, int], bytes] = {}
    for i, leaf in enumerate(_leaves(1024)):
        new = logtree.nodes_after_append(i, leaf, lambda lv, ix: nodes[(lv, ix)])
        assert [(lv, ix) for lv, ix, _ in new][1:] == [
            (lv + 1, ix >> 1) for lv, ix in logtree.siblings_for_append(i)
        ]
        assert len(new) <= 11
        for lv, ix, h in new:
            nodes[(lv, ix)] = h
    assert nodes[(10, 0)] == merkle.root_from_leaf_hashes(_leaves(1024))


def test_bad_arguments() -> None:
    read = lambda lv, ix: b"\x00" * 32  # noqa: E731
    with pytest.raises(UsageError):
        merkle.inclusion_proof(5, 5, logtree.stored_range_hash(read))
    with pytest.raises(UsageError):
        merkle.consistency_proof(6, 5, logtree.stored_range_hash(read))
    with pytest.raises(UsageError):
        logtree.decompose(1, 4)
