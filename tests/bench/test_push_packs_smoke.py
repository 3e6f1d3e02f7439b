"""Smoke test of bench/push_packs.py: both modes push and pull every object of both artifacts
(the script fails otherwise) and each run is reported. The figures mean nothing on a shared CI host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "push_packs.py"


def test_push_packs_reports_every_run(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    done = subprocess.run(
        [
            *(sys.executable, str(SCRIPT), "--repeat", "1", "--small", "12"),
            *("--large", "2", "--large-mib", "1", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads(out.read_text())
    assert sorted((r["direction"], r["artifact"], r["mode"]) for r in runs) == [
        (direction, artifact, mode)
        for direction in ("pull", "push")
        for artifact in ("large", "small")
        for mode in ("packs", "single")
    ]
    # 12 chunks, the token ids, the text and the witness, sent and fetched
    assert {r["objects"] for r in runs if r["artifact"] == "small"} == {15}
