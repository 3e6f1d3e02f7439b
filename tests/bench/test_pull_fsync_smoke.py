"""Smoke test of bench/pull_fsync.py: both ways download every object (the script exits non-zero
on a download that does not hash to its object) and each round is reported. The figures mean
nothing on a shared CI host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "pull_fsync.py"


def test_pull_fsync_reports_both_ways(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--objects", "3", "--object-mib", "1", "--rounds", "1", "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "round 1 each " in done.stdout and "round 1 after" in done.stdout
    assert "after / each" in done.stdout
