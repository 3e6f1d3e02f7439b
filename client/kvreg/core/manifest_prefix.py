"""Prefix relations between manifests: the full blocks of one artifact are the first of another.

``prefix_consistency_proof`` makes, and ``verify_prefix`` checks, an RFC 6962
consistency proof over the two artifacts' chunk leaves (``kvreg.core.merkle``), after
checking that both share the model, tokenizer and config fingerprints and block
size. A shorter artifact's partial last block is not part of the claim. Failures
raise ``MerkleProofError``. This module does not look manifests up or read objects.
"""

from __future__ import annotations

from kvreg.core.errors import MerkleProofError
from kvreg.core.manifest import Manifest
from kvreg.core.merkle import (
    chunk_leaf_hashes,
    consistency_proof,
    leaf_range_hash,
    root_from_leaf_hashes,
    verify_consistency,
)

__all__ = ["prefix_consistency_proof", "verify_prefix"]


def _full_chunks(m: Manifest) -> int:
    return m.token_count // m.block_size


def _check_same_lineage(short: Manifest, long: Manifest) -> int:
    for what, a, b in (
        ("model fingerprint", short.model.fingerprint, long.model.fingerprint),
        ("tokenizer fingerprint", short.tokenizer.fingerprint, long.tokenizer.fingerprint),
        ("config fingerprint", short.config.fingerprint, long.config.fingerprint),
    ):
        if a != b:
            raise MerkleProofError(f"not a prefix: the {what}s differ ({a.short()} vs {b.short()})")
    if short.block_size != long.block_size:
        raise MerkleProofError(f"not a prefix: block sizes differ ({short.block_size} vs {long.block_size})")
    if short.token_count > long.token_count:
        raise MerkleProofError(
            f"not a prefix: the shorter artifact has {short.token_count} tokens, "
            f"the longer {long.token_count}"
        )
    m = _full_chunks(short)
    if m == 0:
        raise MerkleProofError(
            f"the shorter artifact ({short.token_count} tokens) has no full block of {short.block_size} "
            "tokens; there is no prefix to prove"
        )
    return m


def prefix_consistency_proof(short: Manifest, long: Manifest) -> list[bytes]:
    """An RFC 6962 consistency proof that the full blocks of ``short`` are the first
    chunks of ``long``. Raises ``MerkleProofError`` if they are not."""
    m = _check_same_lineage(short, long)
    short_chunks, long_chunks = short.chunks, long.chunks
    for i in range(m):
        if short_chunks[i].digest != long_chunks[i].digest:
            raise MerkleProofError(
                f"not a prefix: chunk {i} differs ({short_chunks[i].digest.short()} vs "
                f"{long_chunks[i].digest.short()})"
            )
    leaves = chunk_leaf_hashes([c.digest for c in long_chunks])
    return consistency_proof(m, len(leaves), leaf_range_hash(leaves))


def verify_prefix(short: Manifest, long: Manifest, proof: list[bytes]) -> None:
    """Check ``proof`` (from ``prefix_consistency_proof``): the tree over the full
    blocks of ``short`` is a prefix of ``long``'s chunk tree. Raises ``MerkleProofError``.

    When ``short`` ends on a block boundary its whole chunk tree (its
    ``merkle_root``) is checked; otherwise its partial last chunk is not part of
    the claim.
    """
    m = _check_same_lineage(short, long)
    short_chunks = short.chunks
    if m == len(short_chunks):
        old_root = short.merkle_root.raw
    else:
        old_root = root_from_leaf_hashes(chunk_leaf_hashes([c.digest for c in short_chunks[:m]]))
    verify_consistency(m, len(long.chunks), old_root, long.merkle_root.raw, proof)
