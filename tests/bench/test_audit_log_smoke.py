"""Smoke test of bench/audit_log.py: ``--quick`` (5,000 entries) runs end to end on SQLite.

Only the correctness fields of the report are checked: proof sizes within RFC 9162's
bounds (an inclusion proof has at most ceil(log2 n) hashes; a consistency proof at
most ceil(log2 n) + 1, which an odd old size whose last leaf sits at full depth
needs), stored rows per proof within log² n, roots and checkpoints equal to those
recomputed from the entries. No timing thresholds: a shared CI host says nothing
about speed (the real figures are in docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "audit_log.py"


def test_quick_run_proves_and_verifies_the_log(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-4000:]
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    text = "\n".join(lines[:-1])

    assert report["bench"] == "audit_log"
    assert report["quick"] is True
    assert report["database"] == "sqlite"
    assert report["entries"] == 5000
    assert report["stages"] == [1000, 5000]
    assert report["ok"] is True
    assert report["checks"] and all(report["checks"].values()), report["checks"]
    assert set(report["checks"]) >= {
        "seqs_dense",
        "stored_leaf_hashes_equal_recomputed",
        "stored_nodes_equal_recomputed",
        "checkpoints_signed_and_equal",
        "inclusion_proofs_verified",
        "consistency_proofs_verified",
        "root_equals_checkpoint",
    }

    a = report["append"]
    assert a["batched_entries"] + a["single_entries"] == 5000
    assert a["single_entries"] == 200
    assert a["batched_per_second"] > 0 and a["single_per_second"] > 0

    for group in ("proofs_by_stage", "proofs_side_by_side"):
        assert [r["size"] for r in report[group]] == [1000, 5000]
        for r in report[group]:
            n = r["size"]
            bound = math.ceil(math.log2(n))
            inclusion, consistency = r["inclusion"], r["consistency"]
            assert inclusion["count"] == consistency["count"] == 30
            assert inclusion["all_verified"] and consistency["all_verified"]
            assert inclusion["max_hashes"] <= bound
            assert consistency["max_hashes"] <= bound + 1
            # The stored nodes a proof and its root read: O(log n) here, never the log.
            assert inclusion["max_rows"] <= bound**2
            assert consistency["max_rows"] <= bound**2
            # One BEGIN, the log size, the proof's nodes, the root's nodes: whatever n is.
            assert inclusion["statements"] == consistency["statements"] == [4]
    for r in report["proofs_by_stage"]:
        assert r["checkpoint_ok"] is True

    shapes = report["longest_proofs"]
    assert shapes["inclusion_max_hashes"] == 13  # ceil(log2 5000)
    assert shapes["consistency_max_hashes"] == 14

    v = report["verification"]
    assert v["entries"] == 5000
    assert v["root_equals_checkpoint"] is True
    assert v["inclusion_proofs_checked"] == 30
    assert all(seconds > 0 for seconds in v["seconds"].values())
    assert set(v["ratios"]) == {"verify", "verify_streaming", "verify_parsing"}
    assert set(report["goals_met"]) == {
        "inclusion_max_hashes",
        "consistency_max_hashes",
        "proof_time_flat",
        "verify_over_plain_sha256",
    }

    for needle in ("entries per transaction", "1 entry per transaction", "plain SHA-256", "checks: all"):
        assert needle in text
