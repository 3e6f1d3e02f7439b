"""Smoke test of bench/web_pages.py: on the registry ``kvreg demo`` leaves behind, every page
it times answers without a server error, signed out and as the admin (the script exits 1 on
any 5xx). The timings mean nothing on a shared CI host; docs/benchmarks.md has the figures.

The demo is the session's one run (the ``demo_run`` fixture, tests/demo_run.py), which the
end-to-end demo test checks too; the script serves a copy of its registry (``--demo-report``),
since it adds its admin there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from demo_run import DemoRun

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "web_pages.py"


@pytest.mark.slow
def test_every_page_of_the_demo_registry_answers(demo_run: DemoRun, tmp_path: Path) -> None:
    assert demo_run.run.rc == 0, str(demo_run.run)
    report = tmp_path / "demo-report.json"
    report.write_text(json.dumps(demo_run.copy_registry_data(tmp_path / "registry-data")), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--samples", "1", "--demo-report", str(report)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    pages = json.loads(done.stdout.strip().splitlines()[-1])["runs"]["this tree"]
    assert all(p["status"] < 500 for p in pages.values()), pages
    # the pages a visitor lands on answer 200, signed out and signed in
    for key in (
        "signed out /",
        "signed out /audit",
        "admin /",
        "admin /admin",
        "admin /audit",
        "admin /ns/demo",
    ):
        assert pages[key]["status"] == 200, (key, pages[key])
    assert any(k.startswith("admin /ns/demo/refs/p07 -> /ns/demo/artifacts/") for k in pages), sorted(pages)
