"""Smoke test of bench/graft_vs_prefill.py: ``--quick`` runs end to end and reports its ratios,
also with ``--model`` (SmolLM2 on GSM8K text).

No timing thresholds here: a tiny model on a shared CI host says nothing about
speed. The real figures come from a full run (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "graft_vs_prefill.py"


@pytest.mark.slow
def test_quick_run_reports_every_ratio(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dtypes", "float32", "--json", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["quick"] is True
    assert report["machine"]["nproc"] >= 1
    [result] = report["results"]
    assert result["dtype"] == "float32"
    assert result["tokens"] == 128
    assert result["chunks"] == 2
    assert result["kv_bytes"] > 0
    for name in ("prefill", "graft_verified", "graft_trusted", "floor", "floor_resident"):
        assert result[f"{name}_seconds"] > 0
    assert set(result["ratios"]) >= {
        "prefill_over_graft_verified",
        "graft_verified_over_floor",
        "prefill_over_graft_trusted",
        "graft_verified_over_floor_resident",
    }
    assert all(value > 0 for value in result["ratios"].values())
    assert set(result["goals_met"]) == set(report["goals"])
    assert result["byte_exact_after_graft"] is True
    assert result["minor_faults"]["graft_verified"] >= 0
    [portable] = report["portable"]
    assert portable["portable_over_native"] > 0
    assert portable["portable_cpu_capability"] == "AVX2"
    assert portable["portable_mkldnn_enabled"] is False
    assert portable["native_config_fingerprint"] != portable["portable_config_fingerprint"]


@pytest.mark.slow
def test_text_report_names_the_goals(tmp_path: Path) -> None:
    options = ["--quick", "--dtypes", "bfloat16", "--no-portable", "--out", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *options],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for needle in ("prefill / graft verified", "graft verified / floor", "prefill / graft trusted"):
        assert needle in done.stdout
    assert "bfloat16: 128 tokens" in done.stdout


@pytest.mark.slow
def test_a_real_model_reads_gsm8k_text(smollm2: Path, tmp_path: Path) -> None:
    options = ["--quick", "--model", str(smollm2), "--dtypes", "float32", "--no-portable", "--json"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *options, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["model"]["arch"] == "LlamaForCausalLM" and report["model"]["path"] == str(smollm2)
    [result] = report["results"]
    assert result["tokens"] == 128 and result["text"].startswith("GSM8K test lines 1-")
    assert result["model_info"]["num_layers"] == 30
    assert result["byte_exact_after_graft"] is True
