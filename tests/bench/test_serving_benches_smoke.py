"""Smoke tests of bench/probe_saving.py and bench/batching_exactness.py: each runs end to end and
reports every figure. No thresholds on times; the batching outcome (whether two rows keep the
bits) is the experiment's finding, not asserted: only that its reference runs agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(*args: str) -> object:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1] if args[-1] == "--json" else done.stdout)


@pytest.mark.slow
def test_probe_saving_compares_both_policies(smollm2: Path, tmp_path: Path) -> None:
    script = str(BENCH / "probe_saving.py")
    out = str(tmp_path)
    report = _run(script, "--model", str(smollm2), "--rounds", "1", "--shots", "1", "--out", out, "--json")
    assert isinstance(report, dict) and report["same_tokens"] is True
    for name in ("repeat", "shared"):
        assert report[name]["always"]["probes_skipped"] == 0
        assert report[name]["once"]["probes_skipped"] == 1
        assert report[name]["once"]["total_p50"] > 0 and report[name]["always"]["graft_p50"] > 0


def test_batching_exactness_reports_each_run_against_the_queue() -> None:
    reports = _run(str(BENCH / "batching_exactness.py"), "--models", "tiny", "--steps", "2")
    assert isinstance(reports, list) and [r["model"] for r in reports] == ["tiny"]
    tiny = reports[0]
    # the batched code with one row is the queue's run, bit for bit: the comparison is sound
    assert tiny["batch_of_1_vs_queue"]["short"]["logits_identical_steps"] == "2/2"
    assert tiny["batch_of_1_vs_queue"]["long"]["logits_identical_steps"] == "2/2"
    for key in ("batch_of_2_equal_length_vs_queue", "batch_of_2_padded_vs_batch_of_1"):
        assert key in tiny
