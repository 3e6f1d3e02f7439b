"""Smoke test of bench/serve.py: ``--quick`` on SmolLM2 serves every request class through the
openai client, grafts where it should, and the shared and unseen answers equal the uncached ones;
its overload run (8 clients, ``--max-queue 2``) gets no 5xx, a Retry-After with every 429 and the
answers of the requests sent alone, and ``/metrics`` counted the 429s and each request's time to
first token.

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
    over = report["overload"]
    assert over["clients"] == 8 and over["max_queue"] == 2 and over["answered"] == 8
    assert over["server_errors"] == 0 and over["other_errors"] == 0
    assert over["every_429_had_retry_after"] and over["same_text_as_alone"]
    assert over["server_counted_the_429s"]
    assert over["server"]["rejected"]["overload"] == over["refusals_429"]
    assert [row["mode"] for row in report["ttft_agreement"]] == ["knowledge", "prefix", "off"]
    assert all(row["server_ttft"] > 0 for row in report["ttft_agreement"])
