"""Smoke test of bench/push_pull.py: ``--quick`` runs end to end against a real registry.

It deposits a real (small) artifact, starts ``kvreg serve`` and ``python -m
http.server``, pushes, pulls and runs the dedupe check on 10 artifacts. Only the
correctness fields of the report are checked: timings on a shared CI host say
nothing about speed (the real figures are in docs/benchmarks.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "push_pull.py"


@pytest.mark.slow
def test_quick_run_pushes_pulls_and_dedupes_exactly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-4000:]
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    text = "\n".join(lines[:-1])

    assert report["bench"] == "push_pull"
    assert report["quick"] is True
    assert report["backend"] == "sqlite-folder"
    assert report["ok"] is True
    assert report["checks"] and all(report["checks"].values()), report["checks"]
    assert set(report["checks"]) >= {
        "push_sent_everything",
        "pull_complete_and_verified",
        "dedupe_prefix_chunks_identical",
        "dedupe_stored_equals_unique",
        "dedupe_stored_chunks_equal_unique_chunks",
    }

    # A real deposit of 64 MiB of KV: 256 tokens x 256 KiB, 4 chunks of 64 tokens.
    t = report["transfer"]
    assert t["tokens"] == 256
    assert t["chunks"] == 4
    assert t["chunk_bytes"] >= 64 * 1024 * 1024
    assert t["bytes"] > t["chunk_bytes"]
    [pushed] = t["push_reports"]
    assert pushed["objects_sent"] == pushed["objects_total"] == t["objects"]
    assert pushed["bytes_sent"] == t["bytes"]
    [pulled] = t["pull_reports"]
    assert pulled["digest"] == pushed["digest"] == t["manifest_digest"]
    assert pulled["objects_downloaded"] == t["objects"]
    assert pulled["bytes_downloaded"] == t["bytes"]
    assert pulled["signer"] is not None
    for name in ("push", "pull"):
        assert t[name]["seconds"] > 0
        assert t[name]["mib_per_s"] > 0
    assert set(t["measured"]) == set(report["goals"]) == set(t["goals_met"])
    assert set(t["ratios"]) == {"push_over_raw", "pull_over_raw"}
    for name in ("push", "pull"):  # CPU per GiB and peak memory of both sides, for every row
        for side in ("server", "client"):
            assert t[name][f"{side}_cpu_s_per_gib"] > 0
            assert t[name][f"{side}_peak_rss_mib_median"] > 0
    assert report["machine"]["sha256_cpu_s_per_gib"] > 0
    assert report["machine"]["receive_and_hash_cpu_s_per_gib"] > 0
    if t["disk"] is not None:  # a block device under the work folder: push and pull fsync every byte
        for name in ("push", "pull"):
            assert t[name]["disk_written_mib_median"] * 1024 * 1024 >= t["bytes"]
            assert t[name]["disk_busy_seconds_median"] > 0
        assert f"disk {t['disk']}: busy" in text
    assert t["measured"]["push_server_cpu_s_per_gib"] == t["push"]["server_cpu_s_per_gib"]
    assert t["measured"]["pull_client_cpu_s_per_gib"] == t["pull"]["client_cpu_s_per_gib"]
    if shutil.which("curl") is not None:
        assert report["checks"]["raw_copy_identical"] is True
        assert all(value > 0 for value in t["ratios"].values())
        assert all(isinstance(met, bool) for met in t["goals_met"].values())
        assert report["checks"]["curl_get_from_registry_complete"] is True
        assert report["checks"]["curl_put_to_registry_complete"] is True
        for name in ("curl_put_to_registry", "curl_get_from_registry"):
            assert t["diagnostics"][name]["seconds"] > 0

    # Dedupe: stored bytes are exactly the unique objects' bytes.
    d = report["dedupe"]
    assert d["artifacts"] == 10
    assert d["prefix_tokens"] == 1024
    assert d["stored_bytes"] == d["unique_bytes"]
    assert d["stored_objects"] == d["unique_objects"]
    assert d["stored_chunk_bytes"] == d["unique_chunk_bytes"]
    assert d["unique_chunks"] == d["expected_unique_chunks"]
    assert d["stored_other_files"] == {}
    assert d["logical_bytes"] > d["stored_bytes"]
    assert d["ratio"] > 1

    for needle in ("push / raw throughput", "pull / raw throughput", "dedupe ratio", "checks:"):
        assert needle in text
