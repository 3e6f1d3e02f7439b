"""Check: recompute from scratch under the same schedule and compare bit for bit.

``check_graft`` runs the prompt through a fresh cache with exactly the segments
the graft used (the grid, plus the artifact's end when it was grafted there),
feeds the graft's own decoded tokens, and compares the logits of every step:
SHA-256 equality, KL divergence and argmax agreement. ``recompute_artifact``
(``kvreg verify --recompute``) recomputes every chunk and the witness and
compares their digests with the manifest's.

Nothing here writes to the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kvreg.core.manifest import Manifest
from kvreg.engine.deposit import compute_artifact
from kvreg.engine.graft import GraftPlan
from kvreg.engine.runtime import Decoded, LoadedModel, decode, logits_digest, new_cache, prefill


def kl_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """KL(P || Q) of the softmax distributions, computed in float64."""
    p = torch.log_softmax(p_logits.to(torch.float64), dim=-1)
    q = torch.log_softmax(q_logits.to(torch.float64), dim=-1)
    return float(torch.sum(torch.exp(p) * (p - q)).clamp_min(0.0).item())


@dataclass
class StepComparison:
    steps: int = 0
    sha256_equal_steps: int = 0
    argmax_equal_steps: int = 0
    max_kl: float = 0.0
    max_abs_diff: float = 0.0
    first_divergent_step: int | None = None
    digests: list[tuple[str, str]] = field(default_factory=list)

    @property
    def byte_exact(self) -> bool:
        return self.steps > 0 and self.sha256_equal_steps == self.steps

    def to_dict(self) -> dict[str, Any]:
        return {
            "byte_exact": self.byte_exact,
            "steps": self.steps,
            "sha256_equal_steps": self.sha256_equal_steps,
            "max_kl": self.max_kl,
            "max_abs_logit_diff": self.max_abs_diff,
            "argmax_agreement": self.argmax_equal_steps / self.steps if self.steps else 0.0,
            "first_divergent_step": self.first_divergent_step,
        }


def compare_steps(candidate: list[torch.Tensor], reference: list[torch.Tensor]) -> StepComparison:
    result = StepComparison()
    for step, (a, b) in enumerate(zip(candidate, reference, strict=True)):
        da, db = logits_digest(a), logits_digest(b)
        result.steps += 1
        result.digests.append((str(da), str(db)))
        if da == db:
            result.sha256_equal_steps += 1
        elif result.first_divergent_step is None:
            result.first_divergent_step = step
        if int(torch.argmax(a)) == int(torch.argmax(b)):
            result.argmax_equal_steps += 1
        result.max_kl = max(result.max_kl, kl_divergence(b, a))
        diff = (a.to(torch.float64) - b.to(torch.float64)).abs().max().item()
        result.max_abs_diff = max(result.max_abs_diff, float(diff))
    return result


def fresh_run(lm: LoadedModel, plan: GraftPlan, decoded: Decoded) -> Decoded:
    """The same prompt and tokens, computed from nothing, on the graft's segments."""
    cache = new_cache(lm)
    logits, _ = prefill(lm, cache, plan.prompt, 0, split_at=plan.split_at)
    return decode(lm, cache, logits, len(decoded.tokens), forced=decoded.tokens)


def check_graft(lm: LoadedModel, plan: GraftPlan, decoded: Decoded) -> StepComparison:
    reference = fresh_run(lm, plan, decoded)
    return compare_steps(decoded.logits, reference.logits)


@dataclass
class RecomputeReport:
    chunks: int
    chunks_equal: int
    witness_equal: bool
    mismatched: list[int]

    @property
    def byte_exact(self) -> bool:
        return self.chunks_equal == self.chunks and self.witness_equal

    def to_dict(self) -> dict[str, Any]:
        return {
            "byte_exact": self.byte_exact,
            "chunks": self.chunks,
            "chunks_equal": self.chunks_equal,
            "mismatched_chunks": self.mismatched,
            "witness_equal": self.witness_equal,
        }


def recompute_artifact(lm: LoadedModel, manifest: Manifest, tokens: list[int]) -> RecomputeReport:
    """Recompute every chunk and the witness; compare digests with the manifest."""
    prompt_count = manifest.prompt.token_count if manifest.prompt else None
    computed = compute_artifact(lm, tokens, prompt_count)
    mismatched = [
        entry.index
        for entry, fresh in zip(manifest.chunks, computed.chunks, strict=True)
        if str(entry.digest) != fresh["digest"]
    ]
    return RecomputeReport(
        chunks=len(manifest.chunks),
        chunks_equal=len(manifest.chunks) - len(mismatched),
        witness_equal=computed.witness["logits_digest"] == str(manifest.witness.logits_digest),
        mismatched=mismatched,
    )
