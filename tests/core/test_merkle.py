"""RFC 6962 / RFC 9162 Merkle trees: every shared vector, a reference model, properties."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.core import merkle
from kvreg.core.digest import Digest
from kvreg.core.errors import MerkleProofError, UsageError


def _inclusion(index: int, leaves: list[bytes]) -> list[bytes]:
    return merkle.inclusion_proof(index, len(leaves), merkle.leaf_range_hash(leaves))


def _consistency(old_size: int, leaves: list[bytes]) -> list[bytes]:
    return merkle.consistency_proof(old_size, len(leaves), merkle.leaf_range_hash(leaves))


VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "rfc6962"
INCLUSION_FILES = sorted((VECTORS / "inclusion").rglob("*.json"))
CONSISTENCY_FILES = sorted((VECTORS / "consistency").rglob("*.json"))

# The eight leaves of the RFC 6962 reference tree used by the vectors' happy paths.
REFERENCE_LEAVES = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]


def _b64(s: str | None) -> bytes:
    return base64.b64decode(s) if s else b""


def _rel(p: Path) -> str:
    return str(p.relative_to(VECTORS))


def test_vectors_are_present() -> None:
    assert len(INCLUSION_FILES) > 80
    assert len(CONSISTENCY_FILES) > 80


@pytest.mark.parametrize("path", INCLUSION_FILES, ids=_rel)
def test_inclusion_vector(path: Path) -> None:
    v = json.loads(path.read_text())
    proof = [_b64(p) for p in v["proof"] or []]
    args = (_b64(v["leafHash"]), v["leafIdx"], v["treeSize"], proof, _b64(v["root"]))
    if v["wantErr"]:
        with pytest.raises(MerkleProofError):
            merkle.verify_inclusion(*args)
    else:
        merkle.verify_inclusion(*args)


@pytest.mark.parametrize("path", CONSISTENCY_FILES, ids=_rel)
def test_consistency_vector(path: Path) -> None:
    v = json.loads(path.read_text())
    proof = [_b64(p) for p in v["proof"] or []]
    args = (v["size1"], v["size2"], _b64(v["root1"]), _b64(v["root2"]), proof)
    if v["wantErr"]:
        with pytest.raises(MerkleProofError):
            merkle.verify_consistency(*args)
    else:
        merkle.verify_consistency(*args)


def _happy(kind: str) -> list[dict]:
    out = []
    for p in sorted((VECTORS / kind).glob("[0-9]*/happy-path.json")):
        out.append(json.loads(p.read_text()))
    return out


def test_prover_reproduces_reference_vectors() -> None:
    hashes = [merkle.leaf_hash(x) for x in REFERENCE_LEAVES]
    happy_inclusion = _happy("inclusion")
    happy_consistency = _happy("consistency")
    assert happy_inclusion and happy_consistency
    for v in happy_inclusion:
        n, i = v["treeSize"], v["leafIdx"]
        if n > len(hashes):
            continue
        assert merkle.root_from_leaf_hashes(hashes[:n]) == _b64(v["root"])
        assert hashes[i] == _b64(v["leafHash"])
        assert _inclusion(i, hashes[:n]) == [_b64(p) for p in v["proof"] or []]
    for v in happy_consistency:
        m, n = v["size1"], v["size2"]
        assert merkle.root_from_leaf_hashes(hashes[:m]) == _b64(v["root1"])
        assert merkle.root_from_leaf_hashes(hashes[:n]) == _b64(v["root2"])
        assert _consistency(m, hashes[:n]) == [_b64(p) for p in v["proof"] or []]


def test_hash_functions() -> None:
    assert merkle.leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    left, right = b"L" * 32, b"R" * 32
    assert merkle.node_hash(left, right) == hashlib.sha256(b"\x01" + left + right).digest()
    assert merkle.root_from_leaf_hashes([]) == hashlib.sha256(b"").digest() == merkle.empty_root()
    one = merkle.leaf_hash(b"x")
    assert merkle.root_from_leaf_hashes([one]) == one


# --- a direct transcription of RFC 9162 §2.1.1, §2.1.3.1, §2.1.4.1 as the reference model ---


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def _ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return d[0]
    k = _k(len(d))
    return merkle.node_hash(_ref_mth(d[:k]), _ref_mth(d[k:]))


def _ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) <= 1:
        return []
    k = _k(len(d))
    if m < k:
        return [*_ref_path(m, d[:k]), _ref_mth(d[k:])]
    return [*_ref_path(m - k, d[k:]), _ref_mth(d[:k])]


def _ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [_ref_mth(d)]
    k = _k(n)
    if m <= k:
        return [*_ref_subproof(m, d[:k], b), _ref_mth(d[k:])]
    return [*_ref_subproof(m - k, d[k:], False), _ref_mth(d[:k])]


def _leaves(n: int) -> list[bytes]:
    return [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def test_against_reference_model_exhaustively_small() -> None:
    for n in range(0, 34):
        d = _leaves(n)
        assert merkle.root_from_leaf_hashes(d) == _ref_mth(d)
        for i in range(n):
            assert _inclusion(i, d) == _ref_path(i, d)
        for m in range(1, n + 1):
            assert _consistency(m, d) == _ref_subproof(m, d, True)


def _flip(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[(bit // 8) % len(b)] ^= 1 << (bit % 8)
    return bytes(b)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))), st.integers(0, 255)
)
def test_inclusion_property(size_index: tuple[int, int], bit: int) -> None:
    n, i = size_index
    d = _leaves(n)
    root = merkle.root_from_leaf_hashes(d)
    proof = _inclusion(i, d)
    merkle.verify_inclusion(d[i], i, n, proof, root)
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(_flip(d[i], bit), i, n, proof, root)
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(d[i], i, n, proof, _flip(root, bit))
    if proof:
        j = bit % len(proof)
        bad = [*proof[:j], _flip(proof[j], bit), *proof[j + 1 :]]
        with pytest.raises(MerkleProofError):
            merkle.verify_inclusion(d[i], i, n, bad, root)
        with pytest.raises(MerkleProofError):
            merkle.verify_inclusion(d[i], i, n, proof[:-1], root)
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(d[i], i, n, [*proof, b"\x00" * 32], root)
    if n > 1:
        with pytest.raises(MerkleProofError):
            merkle.verify_inclusion(d[i], (i + 1) % n, n, proof, root)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(1, n), st.just(n))), st.integers(0, 255))
def test_consistency_property(sizes: tuple[int, int], bit: int) -> None:
    m, n = sizes
    d = _leaves(n)
    old_root = merkle.root_from_leaf_hashes(d[:m])
    new_root = merkle.root_from_leaf_hashes(d)
    proof = _consistency(m, d)
    merkle.verify_consistency(m, n, old_root, new_root, proof)
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(m, n, _flip(old_root, bit), new_root, proof)
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(m, n, old_root, _flip(new_root, bit), proof)
    if proof:
        j = bit % len(proof)
        bad = [*proof[:j], _flip(proof[j], bit), *proof[j + 1 :]]
        with pytest.raises(MerkleProofError):
            merkle.verify_consistency(m, n, old_root, new_root, bad)
        with pytest.raises(MerkleProofError):
            merkle.verify_consistency(m, n, old_root, new_root, proof[:-1])
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(m, n, old_root, new_root, [*proof, b"\x00" * 32])


def test_verifiers_reject_malformed_inputs() -> None:
    d = _leaves(5)
    root = merkle.root_from_leaf_hashes(d)
    proof = _inclusion(2, d)
    with pytest.raises(MerkleProofError, match="not less than tree size"):
        merkle.verify_inclusion(d[2], 5, 5, proof, root)
    with pytest.raises(MerkleProofError, match="invalid"):
        merkle.verify_inclusion(d[2], -1, 5, proof, root)
    with pytest.raises(MerkleProofError, match="expected 32"):
        merkle.verify_inclusion(d[2], 2, 5, [*proof[:-1], proof[-1] + b"\x00"], root)
    with pytest.raises(MerkleProofError, match="larger than"):
        merkle.verify_consistency(5, 4, root, root, [])
    with pytest.raises(MerkleProofError, match="empty tree"):
        merkle.verify_consistency(0, 5, merkle.empty_root(), root, [])


def test_provers_reject_bad_arguments() -> None:
    d = _leaves(4)
    with pytest.raises(UsageError):
        _inclusion(4, d)
    assert _consistency(0, d) == []  # every tree extends the empty one (the registry answers first=0 so)
    with pytest.raises(UsageError):
        _consistency(5, d)
    with pytest.raises(UsageError):
        merkle.root_from_leaf_hashes([b"short"])


def test_chunk_merkle_root() -> None:
    digests = [Digest.of_bytes(bytes([i])) for i in range(5)]
    root = merkle.chunk_merkle_root(digests)
    assert isinstance(root, Digest)
    leaves = [merkle.leaf_hash(x.raw) for x in digests]
    assert root.raw == _ref_mth(leaves)
    assert merkle.chunk_leaf_hashes(digests) == leaves
    assert merkle.chunk_merkle_root([]) == Digest.of_bytes(b"")
    # golden: the leaf data is the 32 raw digest bytes, not the "sha256:..." text
    assert merkle.chunk_merkle_root([digests[0]]).raw == hashlib.sha256(b"\x00" + digests[0].raw).digest()


def test_large_tree_is_linear() -> None:
    n = 100_003
    d = _leaves(n)
    root = merkle.root_from_leaf_hashes(d)
    i = 77_777
    merkle.verify_inclusion(d[i], i, n, _inclusion(i, d), root)
    m = 65_537
    proof = _consistency(m, d)
    merkle.verify_consistency(m, n, merkle.root_from_leaf_hashes(d[:m]), root, proof)


def test_verifiers_raise_typed_errors_for_wrong_types() -> None:
    d = _leaves(2)
    root = merkle.root_from_leaf_hashes(d)
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion(d[0], 0, 2, _inclusion(0, d), root.hex())  # type: ignore[arg-type]
    with pytest.raises(MerkleProofError):
        merkle.verify_inclusion("x", 0, 2, [], root)  # type: ignore[arg-type]
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(2, 2, root.hex(), root, [])  # type: ignore[arg-type]
    with pytest.raises(MerkleProofError):
        merkle.verify_consistency(1, 2, d[0], root, ["x"])  # type: ignore[list-item]
