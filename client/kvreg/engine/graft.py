"""Graft: put a stored KV state back into the model's cache and continue from it.

Steps (docs/design.md, "Flows"): refuse unless the local model, tokenizer and config have the
artifact's fingerprints (the error names which differ and how); compare the
artifact's tokens with the prompt token by token and pick the graft point — the
exact end of the artifact when the prompt contains all of it, else the last block
boundary inside the common prefix; read the needed chunks, re-hashing them in
parallel threads (or trusting the read-only store when asked); build the cache at
the original positions; optionally run the witness probe; prefill the rest of the
prompt on the grid; decode.

The probe recomputes the last grafted block from the blocks before it and
requires its KV to equal the stored chunk bit for bit, and at the artifact's end
the next-token logits to hash to the manifest's witness.

This module does not resolve refs or verify signatures (``kvreg.store.artifacts``)
and does not compare against a fresh run (``kvreg.engine.check``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from kvreg.core.errors import (
    ChunkInvalidError,
    DigestMismatchError,
    FingerprintMismatchError,
    IntegrityError,
    ObjectNotFoundError,
    TokenMismatchError,
    UsageError,
    WitnessMismatchError,
)
from kvreg.core.manifest import Manifest
from kvreg.core.manifest_schema import ChunkEntry
from kvreg.engine.chunks import ChunkLayout, parse_chunk
from kvreg.engine.pinned import DTYPES, diff_fields
from kvreg.engine.runtime import (
    Chooser,
    Decoded,
    LoadedModel,
    TokenSink,
    cache_from_blocks,
    decode,
    logits_digest,
    new_cache,
    prefill,
)
from kvreg.store import absence, access_log, leases
from kvreg.store.home import Home

log = logging.getLogger(__name__)


# --- compatibility ----------------------------------------------------------------------


def check_compatible(lm: LoadedModel, manifest: Manifest) -> None:
    """Raise ``FingerprintMismatchError`` naming every fingerprint that differs."""
    problems: list[str] = []
    if manifest.model.fingerprint != lm.model_fp:
        problems.append(
            f"model fingerprint: artifact {manifest.model.fingerprint.short()}, local {lm.model_fp.short()}"
        )
    if manifest.tokenizer.fingerprint != lm.tokenizer_fp:
        problems.append(
            f"tokenizer fingerprint: artifact {manifest.tokenizer.fingerprint.short()}, "
            f"local {lm.tokenizer_fp.short()}"
        )
    if manifest.config.fingerprint != lm.config.fingerprint:
        fields = diff_fields(manifest.config_fields, lm.config.fields)
        problems.append("config fingerprint: " + ("; ".join(fields) or "recorded fields do not match"))
    if problems:
        which = [p.split(":", 1)[0].removesuffix(" fingerprint") for p in problems]
        raise FingerprintMismatchError(
            f"refusing to graft: the local {' and '.join(which)} "
            f"{'differs' if len(which) == 1 else 'differ'} from the artifact's\n  " + "\n  ".join(problems),
            hint="graft with the same model directory and the same --dtype/--threads/--attn/--profile "
            "(the artifact's recorded config is the default); the result would not be byte-exact otherwise",
            differs=which,
        )


# --- planning ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GraftPlan:
    prompt: list[int]
    graft_tokens: int  # tokens taken from the artifact
    chunks: int  # chunks grafted
    split_at: int | None  # artifact end off the grid, kept as a segment boundary
    whole: bool  # the whole artifact is grafted

    @property
    def prefill_tokens(self) -> int:
        return len(self.prompt) - self.graft_tokens


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan_graft(
    manifest: Manifest, artifact_tokens: list[int], prompt: list[int], *, blocks: int | None = None
) -> GraftPlan:
    """Where to graft, after comparing the artifact's tokens with the prompt one by one."""
    block = manifest.block_size
    total = len(artifact_tokens)
    shared = common_prefix(artifact_tokens, prompt)
    if blocks is not None:
        if blocks < 1 or blocks * block > min(shared, total):
            raise UsageError(
                f"cannot graft {blocks} blocks: the prompt shares {shared} tokens with the artifact "
                f"({min(shared, total) // block} full blocks)"
            )
        return _plan(manifest, prompt, blocks * block)
    if shared == total:
        return _plan(manifest, prompt, total)
    usable = (shared // block) * block
    if usable == len(prompt):
        usable -= block  # keep at least one token to compute the next-token logits from
    if usable <= 0:
        where = f"token {shared}" if shared < len(prompt) else "the end of the prompt"
        raise TokenMismatchError(
            f"the prompt shares no graftable block with artifact {manifest.digest.short()}: "
            f"first difference at {where} (block size {block})",
            hint="this artifact was computed for another text; it cannot be grafted here",
            shared_tokens=shared,
        )
    return _plan(manifest, prompt, usable)


def _plan(manifest: Manifest, prompt: list[int], graft_tokens: int) -> GraftPlan:
    block = manifest.block_size
    total = manifest.token_count
    chunks = -(-graft_tokens // block)
    split = graft_tokens if graft_tokens == total and total % block and len(prompt) > total else None
    return GraftPlan(prompt, graft_tokens, chunks, split, graft_tokens == total)


# --- reading chunks -------------------------------------------------------------------------


def chunk_layout_of(manifest: Manifest, entry: ChunkEntry) -> ChunkLayout:
    m = manifest.model
    return ChunkLayout(entry.start, entry.end, m.num_layers, m.kv_heads, m.head_dim, DTYPES[m.dtype])


@dataclass
class LoadedChunks:
    keys: list[list[torch.Tensor]]  # keys[b][l]: block b, layer l, [kv_heads, n, head_dim]
    values: list[list[torch.Tensor]]
    bytes_read: int
    verified: bool
    buffers: list[mmap.mmap] = field(repr=False, default_factory=list)


def read_chunks(
    home: Home, manifest: Manifest, count: int, *, verify: bool = True, threads: int = 2
) -> LoadedChunks:
    """Map the first ``count`` chunks, re-hash each unless ``verify`` is off, parse strictly.

    Each chunk file is memory-mapped copy-on-write (``ACCESS_COPY``: the process
    can never write the read-only store file) and its tensors are zero-copy views
    of the mapping, which stays alive with them. With ``verify`` every mapped byte
    is hashed — the very pages the tensors then read — by a pool of ``threads``
    threads (hashlib releases the GIL), while this thread checks each header
    against the manifest (``parse_chunk``, strict, before any view is made); no
    tensor is handed out before every digest has matched. The bytes are copied
    once, by the first forward pass (``runtime.DeferredConcatLayer``).
    """
    entries = manifest.chunks[:count]
    for before, after in itertools.pairwise(entries):
        if after.start != before.end:
            raise IntegrityError(f"chunk {after.index} does not start where chunk {before.index} ends")
    mapped: list[mmap.mmap] = []
    parsed: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
    if verify:
        # Worker threads map (pre-faulting the pages) and hash, without the GIL;
        # this thread parses each chunk once its digest has matched.
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            futures = [pool.submit(_map_and_hash, home, entry) for entry in entries]
            for entry, future in zip(entries, futures, strict=True):
                m, actual = future.result()
                if actual != entry.digest.hex:
                    for f in futures:
                        f.cancel()
                    raise DigestMismatchError(
                        f"chunk {entry.index} hashes to sha256:{actual}, the manifest says {entry.digest}",
                        hint="the local copy is corrupt; run: kvreg fsck",
                    )
                mapped.append(m)
                parsed.append(parse_chunk(m, chunk_layout_of(manifest, entry)))
    else:
        for entry in entries:
            mapped.append(_map_chunk(home, entry, populate=False))
            parsed.append(parse_chunk(mapped[-1], chunk_layout_of(manifest, entry)))
    return LoadedChunks(
        keys=[k for k, _ in parsed],
        values=[v for _, v in parsed],
        bytes_read=sum(e.size for e in entries),
        verified=verify,
        buffers=mapped,
    )


def _map_and_hash(home: Home, entry: ChunkEntry) -> tuple[mmap.mmap, str]:
    mapped = _map_chunk(home, entry, populate=True)
    return mapped, hashlib.sha256(mapped).hexdigest()


def _map_chunk(home: Home, entry: ChunkEntry, *, populate: bool) -> mmap.mmap:
    """A private (copy-on-write) mapping of a chunk file; ``populate`` pre-faults its pages.

    A missing chunk (evicted under the store's size budget, say) is ``ObjectNotFoundError``
    (exit 1, "pull again"), not an integrity failure: a wrong byte is one, a gap is not."""
    try:
        f = home.objects.path(entry.digest).open("rb")
    except (FileNotFoundError, ObjectNotFoundError):
        raise absence.missing_object_error(home, entry.digest, f"chunk {entry.index}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size != entry.size:
            raise ChunkInvalidError(f"chunk {entry.index} is {size} bytes, the manifest says {entry.size}")
        flags = mmap.MAP_PRIVATE
        return mmap.mmap(f.fileno(), entry.size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def read_witness_logits(home: Home, manifest: Manifest) -> torch.Tensor:
    w = manifest.witness
    data = bytearray(home.objects.read(w.logits_digest, verify=True))
    dtype = DTYPES.get(w.dtype)
    if dtype is None:
        raise IntegrityError(f"witness dtype {w.dtype!r} is not supported")
    expected = 1
    for d in w.shape:
        expected *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) != expected * itemsize:
        raise IntegrityError("witness logits object has the wrong size for its shape")
    return torch.frombuffer(data, dtype=dtype).view(tuple(w.shape))


# --- the graft --------------------------------------------------------------------------


@dataclass
class GraftOutcome:
    plan: GraftPlan
    cache: DynamicCache
    logits: torch.Tensor  # next-token logits after the prompt
    chunks: LoadedChunks
    probe: dict[str, Any] | None
    timings: dict[str, float]


def _probe(
    lm: LoadedModel, manifest: Manifest, chunks: LoadedChunks, plan: GraftPlan
) -> tuple[DynamicCache, torch.Tensor, dict[str, Any]]:
    """Recompute the last grafted block from the ones before it and compare bits."""
    last = manifest.chunks[plan.chunks - 1]
    if plan.chunks > 1:
        cache = cache_from_blocks(lm, chunks.keys[:-1], chunks.values[:-1], last.start)
    else:
        cache = new_cache(lm)
    logits, captured = prefill(lm, cache, plan.prompt[: last.end], last.start, capture=True)
    block = captured[0] if len(captured) == 1 else None
    if block is None:
        raise IntegrityError("probe recomputed an unexpected number of segments")
    same_kv = all(
        torch.equal(a.view(torch.uint8), b.reshape(a.shape).view(torch.uint8))
        for a, b in zip(block.keys + block.values, chunks.keys[-1] + chunks.values[-1], strict=True)
    )
    result: dict[str, Any] = {"block": last.index, "kv_equal": same_kv}
    if plan.whole:
        digest = logits_digest(logits)
        result["witness_equal"] = digest == manifest.witness.logits_digest
        result["logits_digest"] = str(digest)
    if not same_kv or not result.get("witness_equal", True):
        raise WitnessMismatchError(
            f"witness probe failed: recomputing block {last.index} on this host gives other bits "
            f"({'KV differs' if not same_kv else 'next-token logits differ from the witness'})",
            hint="this host's numerics differ from the depositor's despite equal fingerprints; "
            "the graft would not be byte-exact",
            **result,
        )
    return cache, logits, result


def graft(
    lm: LoadedModel,
    home: Home,
    manifest: Manifest,
    artifact_tokens: list[int],
    prompt: list[int] | None = None,
    *,
    blocks: int | None = None,
    verify: bool = True,
    probe: bool = True,
) -> GraftOutcome:
    """Graft ``manifest``'s state for ``prompt`` (default: the artifact's own tokens)."""
    timings: dict[str, float] = {}
    check_compatible(lm, manifest)
    plan = plan_graft(
        manifest, artifact_tokens, list(artifact_tokens if prompt is None else prompt), blocks=blocks
    )
    # Only the chunks the plan needs are read (a prefix graft of k blocks reads k chunks);
    # a lease keeps eviction off them while they are mapped, and the access log records
    # the use for the store's LRU order.
    needed = [manifest.digest, manifest.tokens.digest, *(c.digest for c in manifest.chunks[: plan.chunks])]
    ends_prompt = plan.graft_tokens == len(plan.prompt)
    # The witness holds the next-token logits after the artifact's *last* token. When a
    # graft of some blocks covers the whole prompt but not the whole artifact, the only way
    # to the next-token logits is to recompute the last grafted block: the probe does that.
    probe = probe or (ends_prompt and not plan.whole)
    if not probe and ends_prompt:
        needed.append(manifest.witness.logits_digest)
    with leases.lease(home, needed):
        t0 = time.perf_counter()
        chunks = read_chunks(home, manifest, plan.chunks, verify=verify, threads=lm.config.settings.threads)
        timings["read_seconds"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        probe_result: dict[str, Any] | None = None
        logits: torch.Tensor | None = None
        if probe:
            cache, probe_logits, probe_result = _probe(lm, manifest, chunks, plan)
            if ends_prompt:
                logits = probe_logits
        else:
            cache = cache_from_blocks(lm, chunks.keys, chunks.values, plan.graft_tokens)
            if ends_prompt:
                try:
                    logits = read_witness_logits(home, manifest).to(lm.device)
                except ObjectNotFoundError:
                    raise absence.missing_object_error(
                        home, manifest.witness.logits_digest, "the witness logits"
                    ) from None
        timings["graft_seconds"] = time.perf_counter() - t1
    access_log.touch(home, needed)
    t2 = time.perf_counter()
    if plan.graft_tokens < len(plan.prompt):
        logits, _ = prefill(lm, cache, plan.prompt, plan.graft_tokens, split_at=plan.split_at)
    timings["prefill_seconds"] = time.perf_counter() - t2
    if logits is None:
        raise IntegrityError("no next-token logits after the graft")
    return GraftOutcome(plan, cache, logits, chunks, probe_result, timings)


def continue_decoding(
    lm: LoadedModel,
    outcome: GraftOutcome,
    steps: int,
    *,
    stop_at_eos: bool = False,
    choose: Chooser | None = None,
    on_token: TokenSink | None = None,
) -> Decoded:
    t = time.perf_counter()
    out = decode(
        lm, outcome.cache, outcome.logits, steps, stop_at_eos=stop_at_eos, choose=choose, on_token=on_token
    )
    outcome.timings["decode_seconds"] = time.perf_counter() - t
    return out
