"""Smoke test of bench/serve.py: ``--quick`` on SmolLM2 serves every request class through the
openai client, grafts where it should, and the shared and unseen answers equal the uncached ones.

No thresholds on times: one problem on a shared CI host says nothing about speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "serve.py"


@pytest.mark.slow
def test_quick_run_serves_every_class_and_matches_the_uncached_answers(smollm2: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", "--model", str(smollm2), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["quick"] is True and report["problems"] == 1
    assert report["repeat"]["cache_on"]["modes"] == ["knowledge"]
    assert report["shared"]["cache_on"]["modes"] == ["prefix"]
    assert report["unseen"]["cache_on"]["modes"] == ["off"]
    for name in ("repeat", "shared", "unseen"):
        assert report[name]["cache_off"]["modes"] == ["off"]
    assert report["shared"]["same_text_as_uncached"] and report["unseen"]["same_text_as_uncached"]
    assert report["repeat"]["cache_on"]["cached_tokens_p50"] > 0
    assert [t["clients"] for t in report["throughput"]] == [1, 4]
