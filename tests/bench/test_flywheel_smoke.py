"""Smoke test of bench/flywheel.py: ``--quick`` runs end to end and reports every figure.

No thresholds on times or ratios: the figures come from a full run (docs/flywheel.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "flywheel.py"


@pytest.mark.slow
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    m = report["metrics"]
    assert report["spec"]["repeat_easy"] == report["spec"]["repeat_hard"] == 2
    assert m["wrong_grafts"] == 0 and m["unseen_knowledge_grafts"] == 0
    assert m["byte_exact_passed"] == m["byte_exact_checks"] == 6
    assert m["knowledge_grafts"] == 4 and m["repeat_accuracy_after"] == 1.0
    for name in (
        "accuracy_before",
        "accuracy_after",
        "repeat_decoded_tokens_ratio",
        "prefill_over_graft",
        "cpu_seconds_per_answer_before",
        "cpu_seconds_per_answer_after",
    ):
        assert m[name] is not None and m[name] > 0, name
    assert "joules_per_answer_before" in m  # None where no RAPL counter is readable
    variant = report["answer_line_variant"]
    assert variant["questions"] == 4 and variant["mean_decoded_tokens"] > 1
    assert "frozen model vs the verified library" in done.stdout


@pytest.mark.slow
def test_quick_gsm8k_run_goes_through_a_registry(tmp_path: Path) -> None:
    """GSM8K on SmolLM2: chat-rendered library pushed to a registry, pulled lazily by a fresh home."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--task", "gsm8k", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    m = report["metrics"]
    assert report["problems"] == {
        "repeat": ["gsm8k-test-0002", "gsm8k-test-0003"],
        "unseen": ["gsm8k-test-0004"],
    }
    assert report["library"]["sources"] == {"reference": 2} and report["push"]["refs"] == 2
    assert m["knowledge_grafts"] == 2 and m["wrong_grafts"] == 0 and m["unseen_knowledge_grafts"] == 0
    assert m["byte_exact_passed"] == m["byte_exact_checks"] == 3
    assert m["fetched_bytes"] > 0  # the asking home had nothing: it pulled what it grafted
    assert report["failures"] == []
    asking = Path(report["registry"]["asking_home"])
    assert sorted(p.name for p in (asking / "refs" / "flywheel").iterdir()) == [
        "gsm8k-test-0002",
        "gsm8k-test-0003",
    ]
