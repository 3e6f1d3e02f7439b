"""The demo report's rows for a deposit and for a checked graft (plain dicts, as in ``--json``)."""

from __future__ import annotations

from typing import Any

from kvreg.engine.check import StepComparison
from kvreg.engine.deposit import DepositResult
from kvreg.engine.graft import GraftOutcome
from kvreg.engine.runtime import Decoded, LoadedModel


def deposit_row(result: DepositResult) -> dict[str, Any]:
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


def graft_row(
    name: str, lm: LoadedModel, outcome: GraftOutcome, decoded: Decoded, comparison: StepComparison
) -> dict[str, Any]:
    plan = outcome.plan
    return {
        "name": name,
        "prompt_tokens": len(plan.prompt),
        "graft_tokens": plan.graft_tokens,
        "prefill_tokens": plan.prefill_tokens,
        "chunks_read": plan.chunks,
        "whole": plan.whole,
        "decoded_tokens": len(decoded.tokens),
        "probe": outcome.probe,
        "timings": {k: round(v, 6) for k, v in outcome.timings.items()},
        "output_text": lm.decode(decoded.tokens),
        "check": comparison.to_dict(),
    }
