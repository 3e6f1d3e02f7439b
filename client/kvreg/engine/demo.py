"""The library part of ``kvreg demo``: the whole story on embedded defaults, offline.

In a work folder of its own (its own store, its own key), :func:`run_demo`
builds a small seeded Llama model directory, deposits a verified solution (the
question as prompt), deposits a longer text that shares its prefix (only the new
blocks are stored), grafts the first artifact and checks it against a fresh
computation over 32 decode steps, grafts at a block boundary with a new suffix
and checks that too, shows the refusal of a model with one weight changed,
recomputes the artifact (``verify --recompute``), and compares restore time with
prefill time. It returns a plain dict; the CLI renders it. Nothing here prints.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvreg.core.atomicfile import atomic_write_bytes
from kvreg.core.errors import FingerprintMismatchError, KvregError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import WILDCARD, TrustPolicy
from kvreg.engine.check import check_graft, recompute_artifact
from kvreg.engine.config import EngineSettings
from kvreg.engine.deposit import deposit
from kvreg.engine.graft import continue_decoding, graft
from kvreg.engine.runtime import load_model, new_cache, prefill
from kvreg.engine.tiny import build_model_dir, perturb_one_weight
from kvreg.store.artifacts import open_artifact, read_tokens
from kvreg.store.home import Home

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

ARCH = "llama"
SEED = 0
BLOCK_SIZE = 16
DECODE_STEPS = 32
TIMING_REPEATS = 3

QUESTION = (
    "Problem 7. Find the number of ordered pairs of positive integers (a, b) such that a + b = 1000 "
    "and neither a nor b has a zero digit."
)
SOLUTION = (
    " Solution: count the numbers from 1 to 999 without a zero digit, then subtract the pairs whose "
    "partner contains a zero. Step 1: one-digit numbers contribute 9. Step 2: two-digit numbers without "
    "zero contribute 81. Step 3: three-digit numbers contribute 729. The answer is 738."
)
EXTENSION = (
    " Check: an exhaustive checker enumerated every pair (a, 1000 - a) and counted 738 pairs with no zero "
    "digit. Verified by an exhaustive checker: pass."
)
FOLLOW_UP = " Now the same question for a + b = 2000: Step 1:"
ANSWER = "738"


def _noop(_: str) -> None:
    pass


def _deposit_row(result: Any) -> dict[str, Any]:
    d = result.to_dict()
    return {
        k: d[k]
        for k in (
            "ref",
            "manifest_digest",
            "token_count",
            "chunk_count",
            "new_chunks",
            "bytes_written",
            "bytes_new",
            "prefill_seconds",
        )
    }


def _graft_row(name: str, lm: Any, outcome: Any, decoded: Any, comparison: Any) -> dict[str, Any]:
    plan = outcome.plan
    return {
        "name": name,
        "prompt_tokens": len(plan.prompt),
        "graft_tokens": plan.graft_tokens,
        "prefill_tokens": plan.prefill_tokens,
        "chunks_read": plan.chunks,
        "decoded_tokens": len(decoded.tokens),
        "probe": outcome.probe,
        "timings": {k: round(v, 6) for k, v in outcome.timings.items()},
        "output_text": lm.decode(decoded.tokens),
        "check": comparison.to_dict(),
    }


def run_demo(workdir: str | Path, *, threads: int = 2, progress: Progress | None = None) -> dict[str, Any]:
    """Run the demo in ``workdir`` (which should be empty); return the report."""
    say = progress or _noop
    started = time.perf_counter()
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []

    say(f"building a seeded {ARCH} model directory")
    model_dir = build_model_dir(work / f"tiny-{ARCH}", ARCH, seed=SEED)
    home = Home(work / "home").ensure()
    key = SigningKey.generate()
    key.save(home.keys_dir / "default.key")
    atomic_write_bytes(home.keys_dir / "default.pub", (key.public_key.to_text() + "\n").encode("ascii"))
    policy = TrustPolicy()
    policy.allow(WILDCARD, key.public_key)
    policy.save(home.trust_path)

    settings = EngineSettings(
        dtype="float32", attn_implementation="sdpa", threads=threads, block_size=BLOCK_SIZE
    )
    say("loading the model under the pinned config")
    lm = load_model(model_dir, settings, cache_dir=home.cache_dir)

    say("depositing the verified solution")
    ref = RefName("demo", "p07")
    first = deposit(
        lm,
        home,
        text=SOLUTION,
        prompt=QUESTION,
        ref=ref,
        key=key,
        verification={"verifier": "exhaustive-checker", "verdict": "pass", "evidence": {"answer": ANSWER}},
        annotations={
            "title": "Pairs without zero digits summing to 1000",
            "answer": ANSWER,
            "tags": ["demo"],
        },
    )
    say("depositing a longer text that shares its prefix")
    longer = deposit(
        lm,
        home,
        text=SOLUTION + EXTENSION,
        prompt=QUESTION,
        ref=RefName("demo", "p07-checked"),
        key=key,
        verification={"verifier": "exhaustive-checker", "verdict": "pass", "evidence": {"answer": ANSWER}},
        annotations={"title": "The same solution, with its check"},
    )
    a_chunks = [c.digest for c in first.manifest.chunks]
    b_chunks = [c.digest for c in longer.manifest.chunks]
    shared = 0
    while shared < min(len(a_chunks), len(b_chunks)) and a_chunks[shared] == b_chunks[shared]:
        shared += 1
    new_chunk_bytes = sum(c.size for c in longer.manifest.chunks if c.digest not in set(a_chunks))
    dedupe = {
        "shared_chunks": shared,
        "new_chunks": longer.new_chunks,
        "chunk_count": len(b_chunks),
        "bytes_written": longer.write.bytes_written,
        "bytes_new": longer.write.bytes_new,
        "new_chunk_bytes": new_chunk_bytes,
    }
    if shared == 0 or longer.new_chunks >= len(b_chunks):
        failures.append("the longer artifact shares no stored block with the first")

    artifact = open_artifact(home, str(ref))
    manifest = artifact.manifest
    tokens = read_tokens(home, manifest)

    say(f"grafting {ref} and checking {DECODE_STEPS} decode steps against a fresh computation")
    outcome = graft(lm, home, manifest, tokens)
    decoded = continue_decoding(lm, outcome, DECODE_STEPS)
    whole = _graft_row("whole artifact", lm, outcome, decoded, check_graft(lm, outcome.plan, decoded))

    blocks = max(1, manifest.token_count // BLOCK_SIZE - 1)
    say(f"grafting the first {blocks} blocks and prefilling a new suffix")
    prompt = tokens + lm.encode(FOLLOW_UP, first=False)
    outcome2 = graft(lm, home, manifest, tokens, prompt, blocks=blocks)
    decoded2 = continue_decoding(lm, outcome2, DECODE_STEPS)
    boundary = _graft_row(
        f"first {blocks} blocks + new suffix",
        lm,
        outcome2,
        decoded2,
        check_graft(lm, outcome2.plan, decoded2),
    )
    for row in (whole, boundary):
        if not row["check"]["byte_exact"]:
            failures.append(f"graft '{row['name']}' is not byte-exact")

    say("timing restore against prefill")
    prefill_times: list[float] = []
    restore_times: list[float] = []
    for _ in range(TIMING_REPEATS):
        t = time.perf_counter()
        prefill(lm, new_cache(lm), tokens, 0)
        prefill_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        graft(lm, home, manifest, tokens, probe=False)
        restore_times.append(time.perf_counter() - t)
    timing = {
        "tokens": len(tokens),
        "prefill_seconds": min(prefill_times),
        "restore_seconds": min(restore_times),
        "ratio": min(prefill_times) / max(min(restore_times), 1e-9),
    }

    say("showing a refusal: the same model with one weight changed")
    perturbed_dir = perturb_one_weight(model_dir, work / f"tiny-{ARCH}-one-weight-changed")
    refusal: dict[str, Any] | None = None
    perturbed = load_model(perturbed_dir, settings, cache_dir=home.cache_dir)
    try:
        graft(perturbed, home, manifest, tokens)
    except FingerprintMismatchError as e:
        refusal = {"code": e.code, "message": e.message, "differs": e.details.get("differs")}
    except KvregError as e:
        failures.append(f"the perturbed model failed with {e.code} instead of FINGERPRINT_MISMATCH")
    else:
        failures.append("a model with one weight changed was not refused")
    del perturbed

    say("recomputing the artifact (verify --recompute)")
    recompute = recompute_artifact(lm, manifest, tokens).to_dict()
    if not recompute["byte_exact"]:
        failures.append("recomputing the artifact gave other chunks")

    return {
        "workdir": str(work),
        "home": str(home.root),
        "model": {"dir": str(model_dir), "fingerprint": str(lm.model_fp), **lm.info},
        "config": {
            "fingerprint": str(lm.config.fingerprint),
            "block_size": BLOCK_SIZE,
            "threads": threads,
            "dtype": settings.dtype,
            "attn_implementation": settings.attn_implementation,
            "profile": settings.profile,
        },
        "question": QUESTION,
        "deposits": [_deposit_row(first), _deposit_row(longer)],
        "dedupe": dedupe,
        "grafts": [whole, boundary],
        "timing": timing,
        "refusal": refusal,
        "recompute": recompute,
        "failures": failures,
        "ok": not failures,
        "seconds": round(time.perf_counter() - started, 3),
    }
