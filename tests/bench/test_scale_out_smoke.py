"""Smoke test of bench/scale_out.py: ``--quick`` pushes and pulls through nginx to one backend
and to two, on PostgreSQL and SeaweedFS, and reports both side by side. Only what the report
holds is checked (every transfer complete, each nginx's requests answered by its backends):
timings on a shared host say nothing (the real figures are in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scale_out.py"


def test_quick_run_reports_one_and_two_backends(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == json.loads(out.read_text())
    assert report["bench"] == "scale_out" and report["quick"] is True and report["ok"] is True
    assert report["host"]["cpu"] and report["host"]["cpus"] >= 1
    runs = report["runs"]
    assert sorted(r["config"] for r in runs) == ["one", "two"]
    for run in runs:
        assert all(run["checks"].values()), run["checks"]
        for direction in ("push", "pull"):
            side = run[direction]
            assert side["seconds"] > 0 and side["mib_per_s"] > 0
            assert side["object_requests"] >= 1 and side["answered_5xx"] == 0
            assert set(side["answered_by"]) == ({"A"} if run["config"] == "one" else {"A", "B"})
    figures = report["figures"]
    assert set(figures["ratio_two_over_one"]) == {"push", "pull"}
    assert all(value > 0 for value in figures["ratio_two_over_one"].values())
    assert "two / one: push" in done.stdout and "host:" in done.stdout
