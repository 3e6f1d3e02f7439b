"""RFC 6962 / RFC 9162 Merkle trees: roots, inclusion and consistency proofs.

Hashing follows RFC 9162 §2.1.1: a leaf hash is ``SHA-256(0x00 || data)``, an
interior node is ``SHA-256(0x01 || left || right)``, the empty tree hashes to
``SHA-256("")``, and a tree of ``n > 1`` leaves splits at the largest power of two
smaller than ``n``. Proof generation follows the ``PATH`` and ``SUBPROOF``
definitions of §2.1.3.1 and §2.1.4.1, written once for any source of range hashes
(a ``RangeHash``: leaves in memory, or a stored log's perfect subtrees, see
``kvreg.core.logtree``); verification follows the algorithms of §2.1.3.2 and
§2.1.4.2 step by step. Verifiers return ``None`` and raise
``MerkleProofError`` with the precise reason on any failure.

Everything is iterative and linear in the number of leaves (a root over one
million leaves is one pass per level, no recursion over Python lists), so the
same code serves artifact chunk trees (tens of leaves) and the registry's audit
log (millions).

``chunk_merkle_root`` is the artifact tree of docs/design.md, "Objects": each leaf's data is
the 32 raw bytes of a chunk digest.

This module does not store trees, does not know what a manifest or a log entry
is, and does not decide whom to trust: it only computes and checks hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from kvreg.core.digest import Digest
from kvreg.core.errors import MerkleProofError, UsageError

__all__ = [
    "HASH_SIZE",
    "RangeHash",
    "chunk_leaf_hashes",
    "chunk_merkle_root",
    "consistency_proof",
    "empty_root",
    "inclusion_proof",
    "leaf_hash",
    "leaf_range_hash",
    "node_hash",
    "root_from_leaf_hashes",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
_sha256 = hashlib.sha256

RangeHash = Callable[[int, int], bytes]
"""``mth(lo, hi)``: the Merkle Tree Hash of leaves ``[lo, hi)`` (a non-empty range)."""


def leaf_hash(data: bytes | bytearray | memoryview) -> bytes:
    """``SHA-256(0x00 || data)``."""
    h = _sha256(_LEAF_PREFIX)
    h.update(data)
    return h.digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""
    return _sha256(_NODE_PREFIX + left + right).digest()


def empty_root() -> bytes:
    """The root of the empty tree, ``SHA-256("")``."""
    return _sha256(b"").digest()


def _check_hash(value: object, what: str) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise MerkleProofError(f"{what} must be bytes, not {type(value).__name__}")
    if len(value) != HASH_SIZE:
        raise MerkleProofError(f"{what} is {len(value)} bytes, expected {HASH_SIZE}")
    return bytes(value)


def _mth(hashes: Sequence[bytes], lo: int, hi: int) -> bytes:
    """Merkle Tree Hash of the leaf hashes ``hashes[lo:hi]``, level by level.

    Pairing neighbours and carrying an odd last node up unchanged builds exactly
    the left-balanced tree of RFC 9162 (split at the largest power of two < n).
    """
    if hi <= lo:
        return empty_root()
    level = list(hashes[lo:hi])
    sha, prefix = _sha256, _NODE_PREFIX
    while len(level) > 1:
        n = len(level)
        nxt = [sha(prefix + level[i] + level[i + 1]).digest() for i in range(0, n - 1, 2)]
        if n & 1:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _largest_power_of_two_below(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _checked_leaves(leaf_hashes: Sequence[bytes]) -> Sequence[bytes]:
    for i, h in enumerate(leaf_hashes):
        if not isinstance(h, bytes) or len(h) != HASH_SIZE:
            raise UsageError(f"leaf hash {i} is not {HASH_SIZE} bytes")
    return leaf_hashes


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """The Merkle Tree Hash over already-hashed leaves (empty tree: ``SHA-256("")``)."""
    _checked_leaves(hashes)
    return _mth(hashes, 0, len(hashes))


def leaf_range_hash(leaf_hashes: Sequence[bytes]) -> RangeHash:
    """``MTH(D[lo:hi])`` over leaf hashes held in memory, for the proof generators.

    The leaves are checked once here (32 bytes each); a range past the last leaf
    raises ``UsageError``.
    """
    _checked_leaves(leaf_hashes)
    n = len(leaf_hashes)

    def mth(lo: int, hi: int) -> bytes:
        if hi > n:
            raise UsageError(f"leaf range [{lo}, {hi}) is outside a tree of size {n}")
        return _mth(leaf_hashes, lo, hi)

    return mth


def inclusion_proof(index: int, size: int, mth: RangeHash) -> list[bytes]:
    """The audit path ``PATH(index, D[size])`` of RFC 9162 §2.1.3.1, leaf to root.

    ``mth(lo, hi)`` gives the hash of any range the path needs: :func:`leaf_range_hash`
    for leaves in memory, ``kvreg.core.logtree.stored_range_hash`` for a stored log.
    """
    if not 0 <= index < size:
        raise UsageError(f"leaf index {index} is outside a tree of size {size}")
    # PATH(m, D[lo:hi]) = PATH(..) of the half holding m, followed by the MTH of the other half.
    # Unrolled: collect the "other half" hashes top-down, then reverse to get leaf-to-root order.
    lo, hi, m = 0, size, index
    top_down: list[bytes] = []
    while hi - lo > 1:
        k = _largest_power_of_two_below(hi - lo)
        if m < k:
            top_down.append(mth(lo + k, hi))
            hi = lo + k
        else:
            top_down.append(mth(lo, lo + k))
            lo += k
            m -= k
    top_down.reverse()
    return top_down


def consistency_proof(old_size: int, new_size: int, mth: RangeHash) -> list[bytes]:
    """The proof ``PROOF(old_size, D[new_size])`` of RFC 9162 §2.1.4.1 that the first
    ``old_size`` leaves are a prefix of the first ``new_size``; ``mth`` as for
    :func:`inclusion_proof`.

    ``0 <= old_size <= new_size``. RFC 9162 defines the proof for ``0 < old_size``;
    from the empty tree, as for equal sizes, the proof is empty (every tree extends
    the empty one: the registry answers ``first=0`` so, as transparency-dev/merkle
    does). ``verify_consistency`` still refuses ``old_size == 0``, as the RFC 6962
    vectors require: a verifier has nothing to check there and must not call it.
    """
    if not 0 <= old_size <= new_size:
        raise UsageError(f"no consistency proof from size {old_size} to size {new_size}")
    if old_size in (0, new_size):
        return []
    # SUBPROOF(m, D[lo:hi], b), unrolled top-down and reversed at the end.
    lo, hi, m, complete = 0, new_size, old_size, True
    head: list[bytes] = []
    tail: list[bytes] = []
    while True:
        size = hi - lo
        if m == size:
            # SUBPROOF(m, D[m], b): nothing if b (the verifier has this root), else MTH(D[m]).
            if not complete:
                head.append(mth(lo, hi))
            break
        k = _largest_power_of_two_below(size)
        if m <= k:
            tail.append(mth(lo + k, hi))
            hi = lo + k
        else:
            tail.append(mth(lo, lo + k))
            lo += k
            m -= k
            complete = False
    tail.reverse()
    return head + tail


def verify_inclusion(
    leaf_hash: bytes, index: int, tree_size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``tree_size`` leaves
    with root ``root`` (RFC 9162 §2.1.3.2). Raises ``MerkleProofError``."""
    if not isinstance(index, int) or not isinstance(tree_size, int) or index < 0 or tree_size < 0:
        raise MerkleProofError(f"invalid leaf index {index!r} or tree size {tree_size!r}")
    if not isinstance(root, bytes | bytearray):
        raise MerkleProofError(f"root must be bytes, not {type(root).__name__}")
    # Step 1.
    if index >= tree_size:
        raise MerkleProofError(f"leaf index {index} is not less than tree size {tree_size}")
    r = _check_hash(leaf_hash, "leaf hash")
    path = [_check_hash(p, f"inclusion proof element {i}") for i, p in enumerate(proof)]
    # Step 2, 3.
    fn, sn = index, tree_size - 1
    # Step 4.
    for i, p in enumerate(path):
        if sn == 0:
            raise MerkleProofError(
                f"inclusion proof has {len(path)} elements, more than the {i} a tree of size "
                f"{tree_size} needs for leaf {index}"
            )
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    # Step 5.
    if sn != 0:
        raise MerkleProofError(
            f"inclusion proof has {len(path)} elements, too few for leaf {index} "
            f"of a tree of size {tree_size}"
        )
    if r != root:
        raise MerkleProofError(
            f"inclusion proof for leaf {index} of tree size {tree_size} leads to root {r.hex()}, "
            f"not the expected {bytes(root).hex()}"
        )


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``new_size`` leaves with ``new_root`` extends the tree of
    ``old_size`` leaves with ``old_root`` (RFC 9162 §2.1.4.2). Raises ``MerkleProofError``.

    Sizes must satisfy ``0 < old_size <= new_size``; equal sizes need an empty proof
    and equal roots.
    """
    if not isinstance(old_size, int) or not isinstance(new_size, int) or old_size < 0 or new_size < 0:
        raise MerkleProofError(f"invalid tree sizes {old_size!r}, {new_size!r}")
    for name, root in (("old root", old_root), ("new root", new_root)):
        if not isinstance(root, bytes | bytearray):
            raise MerkleProofError(f"{name} must be bytes, not {type(root).__name__}")
    if old_size > new_size:
        raise MerkleProofError(f"old tree size {old_size} is larger than new tree size {new_size}")
    if old_size == 0:
        raise MerkleProofError("a consistency proof from the empty tree proves nothing (old size is 0)")
    if old_size == new_size:
        if len(proof) != 0:
            raise MerkleProofError(f"tree sizes are equal ({old_size}) but the proof is not empty")
        if bytes(old_root) != bytes(new_root):
            raise MerkleProofError(f"tree sizes are equal ({old_size}) but the roots differ")
        return
    # Step 1.
    if len(proof) == 0:
        raise MerkleProofError(f"empty consistency proof between sizes {old_size} and {new_size}")
    path = [_check_hash(c, f"consistency proof element {i}") for i, c in enumerate(proof)]
    # Step 2.
    if old_size & (old_size - 1) == 0:
        path.insert(0, bytes(old_root))
    # Step 3, 4.
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # Step 5.
    fr = sr = path[0]
    # Step 6.
    for c in path[1:]:
        if sn == 0:
            raise MerkleProofError(
                f"consistency proof between sizes {old_size} and {new_size} "
                f"has too many elements ({len(proof)})"
            )
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # Step 7.
    if sn != 0:
        raise MerkleProofError(
            f"consistency proof between sizes {old_size} and {new_size} has too few elements ({len(proof)})"
        )
    if fr != bytes(old_root):
        raise MerkleProofError(
            f"consistency proof does not lead to the old root of size {old_size} "
            f"(computed {fr.hex()}, expected {bytes(old_root).hex()})"
        )
    if sr != bytes(new_root):
        raise MerkleProofError(
            f"consistency proof does not lead to the new root of size {new_size} "
            f"(computed {sr.hex()}, expected {bytes(new_root).hex()})"
        )


def chunk_leaf_hashes(digests: Sequence[Digest]) -> list[bytes]:
    """Leaf hashes of an artifact's chunk tree: ``leaf_hash(raw 32 digest bytes)``."""
    return [leaf_hash(Digest(d).raw) for d in digests]


def chunk_merkle_root(digests: Sequence[Digest]) -> Digest:
    """The Merkle root over chunk digests, as a ``Digest`` (docs/design.md, "Objects")."""
    root = _mth(chunk_leaf_hashes(digests), 0, len(digests))
    return Digest.from_hex(root.hex())
