"""Smoke test of bench/paging.py: ``--quick`` builds a small library with real deposits,
grafts in fresh subprocesses at three library sizes, and runs the budget phase against a
real registry. Only correctness fields are checked, never timings or memory figures
(the real figures are in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "paging.py"


@pytest.mark.slow
def test_quick_run_builds_grafts_and_keeps_the_budget(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-4000:]
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    text = "\n".join(lines[:-1])

    assert report["bench"] == "paging" and report["quick"] is True and report["ok"] is True
    assert report["checks"] and all(report["checks"].values()), report["checks"]
    lib = report["library"]
    assert lib["tokens"] >= 40_000
    assert [lv["fraction"] for lv in lib["levels"]] == [0.1, 0.5, 1.0]
    sizes = [lv["bytes_on_disk"] for lv in lib["levels"]]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    for lv in lib["levels"]:
        assert lv["grafts"] == 1 and len(lv["rows"]) == 1  # --quick: one fresh-process graft a size
        for row in lv["rows"]:
            assert row["vm_hwm_kib"] >= row["vm_hwm_before_graft_kib"] > 0
            assert row["graft_tokens"] == 1024 and row["chunks_read"] == 8

    b = report["budget"]
    assert b["budget_bytes"] < b["library_bytes"]
    assert b["max_store_bytes"] <= b["budget_bytes"]
    for row in b["rows"]:
        assert row["only_needed"] is True
        assert row["bytes_fetched"] == row["bytes_needed_absent"]
        assert row["chunks_read"] == row["blocks"]

    for needle in (
        "peak RSS MiB",
        "budget run:",
        "checks:",
        "command: .venv/bin/python bench/paging.py --quick",
    ):
        assert needle in text
    assert not (tmp_path / "paging-quick").exists()  # cleaned up without --keep
