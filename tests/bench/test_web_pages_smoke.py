"""Smoke test of bench/web_pages.py: on the registry ``kvreg demo`` leaves behind, every page
it times answers without a server error, signed out and as the admin (the script exits 1 on
any 5xx). The timings mean nothing on a shared CI host; docs/benchmarks.md has the figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "web_pages.py"


@pytest.mark.slow
def test_every_page_of_the_demo_registry_answers() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--samples", "1"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    pages = report["runs"]["this tree"]
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
