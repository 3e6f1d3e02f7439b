"""Fuzzing Merkle proof verification (``kvreg.core.merkle``, RFC 6962/9162): inclusion
and consistency proofs as a registry serves them, and prefix proofs between manifests.

Arbitrary sizes, indices and proof elements raise only ``MerkleProofError``; huge tree
sizes (2**200) cost nothing but the proof's own length; a valid proof with a bit of a
hash, its leaf or a root changed, or a hash dropped or added, is refused.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.strategies import fuzz, manifest_doc, typed
from kvreg.core import merkle
from kvreg.core.errors import MerkleProofError
from kvreg.core.manifest import Manifest
from kvreg.core.manifest_prefix import prefix_consistency_proof, verify_prefix


def _inclusion(index: int, leaves: list[bytes]) -> list[bytes]:
    return merkle.inclusion_proof(index, len(leaves), merkle.leaf_range_hash(leaves))


def _consistency(old_size: int, leaves: list[bytes]) -> list[bytes]:
    return merkle.consistency_proof(old_size, len(leaves), merkle.leaf_range_hash(leaves))


LEAVES = [merkle.leaf_hash(bytes([i])) for i in range(13)]

sizes = st.integers(-2, 40) | st.integers(0, 2**200)
hashes = st.lists(st.binary(min_size=31, max_size=33) | st.binary(min_size=32, max_size=32), max_size=70)


@fuzz(300)
@given(st.binary(min_size=30, max_size=33), sizes, sizes, hashes, st.binary(min_size=32, max_size=32))
def test_inclusion_arbitrary(leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> None:
    typed(merkle.verify_inclusion, leaf, index, size, proof, root, allowed=MerkleProofError)


@fuzz(300)
@given(sizes, sizes, st.binary(max_size=33), st.binary(max_size=33), hashes)
def test_consistency_arbitrary(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> None:
    typed(merkle.verify_consistency, old, new, old_root, new_root, proof, allowed=MerkleProofError)


@fuzz(300)
@given(st.integers(1, len(LEAVES)), st.data())
def test_inclusion_valid_then_changed(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1))
    tree = LEAVES[:size]
    root = merkle.root_from_leaf_hashes(tree)
    proof = _inclusion(index, tree)
    merkle.verify_inclusion(tree[index], index, size, proof, root)
    change = data.draw(st.sampled_from(("index", "size", "proof", "leaf", "drop", "add")))
    leaf, i, n, p = tree[index], index, size, list(proof)
    if change == "index":
        i = data.draw(st.integers(0, size * 2).filter(lambda x: x != index))
    elif change == "size":
        n = data.draw(st.integers(0, size * 2).filter(lambda x: x != size))
    elif change == "proof" and p:
        k = data.draw(st.integers(0, len(p) - 1))
        p[k] = bytes([p[k][0] ^ 1]) + p[k][1:]
    elif change == "leaf":
        leaf = merkle.leaf_hash(b"other")
    elif change == "drop" and p:
        p.pop()
    else:
        p.append(LEAVES[0])
    if (leaf, i, n, p) == (tree[index], index, size, proof):
        return
    if change in ("index", "size"):
        # RFC 9162 proofs do not bind the tree size by themselves: the root of size 3 with the
        # path of leaf 0 also passes as size 4 (its third element read as a subtree). The size
        # is bound by the signed checkpoint that carries the root; here only typed errors count.
        typed(merkle.verify_inclusion, leaf, i, n, p, root, allowed=MerkleProofError)
        return
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(leaf, i, n, p, root)


@fuzz(300)
@given(st.integers(1, len(LEAVES)), st.data())
def test_consistency_valid_then_changed(new: int, data: st.DataObject) -> None:
    old = data.draw(st.integers(1, new))
    old_root = merkle.root_from_leaf_hashes(LEAVES[:old])
    new_root = merkle.root_from_leaf_hashes(LEAVES[:new])
    proof = _consistency(old, LEAVES[:new])
    merkle.verify_consistency(old, new, old_root, new_root, proof)
    change = data.draw(st.sampled_from(("old_root", "new_root", "proof", "drop", "add")))
    o_root, n_root, p = old_root, new_root, list(proof)
    if change == "old_root":
        o_root = bytes([old_root[0] ^ 0x80]) + old_root[1:]
    elif change == "new_root":
        n_root = new_root[:5] + bytes([new_root[5] ^ 1]) + new_root[6:]
    elif change == "proof" and p:
        k = data.draw(st.integers(0, len(p) - 1))
        p[k] = p[k][:31] + bytes([p[k][31] ^ 1])
    elif change == "drop" and p:
        p.pop(data.draw(st.integers(0, len(p) - 1)))
    else:
        p.append(LEAVES[1])
    if (o_root, n_root, p) == (old_root, new_root, proof):
        return
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(old, new, o_root, n_root, p)


@pytest.mark.parametrize("size", [2**64, 2**200, 2**4000])
def test_huge_sizes_are_bounded_by_the_proof(size: int) -> None:
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(LEAVES[0], size - 1, size, [LEAVES[1]] * 3, LEAVES[2])
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(size // 3, size, LEAVES[0], LEAVES[1], [LEAVES[1]] * 3)


@pytest.mark.parametrize("bad", [None, "x" * 32, 3.0, True, [b"\x00" * 32]])
def test_non_bytes_and_non_int_inputs_are_typed_errors(bad: object) -> None:
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(bad, 0, 1, [], LEAVES[0])  # type: ignore[arg-type]
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(LEAVES[0], 0, 2, [bad], LEAVES[0])  # type: ignore[list-item]
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(1, 2, LEAVES[0], LEAVES[0], [bad])  # type: ignore[list-item]


# --- prefix proofs between manifests --------------------------------------------------------

SHORT = Manifest.from_dict(manifest_doc(8, 4))
LONG = Manifest.from_dict(manifest_doc(21, 4))
PREFIX_PROOF = prefix_consistency_proof(SHORT, LONG)


def test_prefix_proof_round_trip() -> None:
    verify_prefix(SHORT, LONG, PREFIX_PROOF)


@fuzz(200)
@given(st.lists(st.sampled_from(PREFIX_PROOF) | st.binary(min_size=31, max_size=33), max_size=8))
def test_prefix_proof_arbitrary(proof: list[bytes]) -> None:
    typed(verify_prefix, SHORT, LONG, proof, allowed=MerkleProofError)
    if proof != PREFIX_PROOF:
        with pytest.raises(MerkleProofError):
            verify_prefix(SHORT, LONG, proof)
