"""Smoke test of bench/prefix_share.py: ``--quick`` on SmolLM2 grafts the shared prefix for every
problem and every output is byte-identical to the run with no cache.

No thresholds on times or ratios: two problems on a shared CI host say nothing about
speed. The real figures come from a full run (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "prefix_share.py"


@pytest.mark.slow
def test_quick_run_grafts_the_prefix_and_every_output_is_identical(smollm2: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", "--model", str(smollm2), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["quick"] is True and report["max_new_tokens"] == 4
    result = report["result"]
    assert result["shots"] == [1, 2] and result["lines"] == [1, 2]
    summary = result["summary"]
    assert summary["problems"] == summary["prefix_grafts"] == summary["identical_outputs"] == 2
    block = report["block_size"]
    for row in result["problems"]:
        assert row["mode"] == "prefix" and row["identical_tokens"] and row["identical_logits"]
        # every full block of the prefix is grafted; the rest of the prompt is prefilled
        assert row["grafted_tokens"] == result["prefix_tokens"] // block * block
        assert row["grafted_tokens"] + row["prefilled_tokens"] == row["prompt_tokens"]
        assert row["decoded_tokens"] == 4
        assert row["prefill_seconds_graft"] > 0 and row["prefill_seconds_no_cache"] > 0
    assert 0 < summary["total_prefilled_tokens"] < summary["total_prompt_tokens"]
