"""``kvreg.fileio.faults``: crash points kill at the named hit and only there; every point in the
code is listed in ``POINTS`` and every listed point is in the code (and so in these tests)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from kvreg.fileio.faults import POINTS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
from kvreg.fileio.faults import crash_point
for i in range(3):
    crash_point("a")
    print("after a", i + 1, flush=True)
crash_point("b")
print("done", flush=True)
"""


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_unset_does_nothing() -> None:
    proc = _run()
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "done"


def test_kills_at_the_nth_hit() -> None:
    proc = _run(KVREG_CRASH_AT="a:2")
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.splitlines() == ["after a 1"]
    proc = _run(KVREG_CRASH_AT="x, b")
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.splitlines()[-1] == "after a 3"


def test_crash_file_is_read_at_each_point(tmp_path: Path) -> None:
    control = tmp_path / "crash-at"
    proc = _run(KVREG_CRASH_FILE=str(control))  # missing file: armed with nothing
    assert proc.returncode == 0
    control.write_text("a:3\n")
    proc = _run(KVREG_CRASH_FILE=str(control))
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.splitlines() == ["after a 1", "after a 2"]


def test_every_point_is_listed_and_placed() -> None:
    placed: set[str] = set()
    for base in (ROOT / "client" / "kvreg", ROOT / "registry" / "kvreg_registry"):
        for path in base.rglob("*.py"):
            placed.update(re.findall(r'crash_point\("([a-z_.]+)"\)', path.read_text(encoding="utf-8")))
    assert placed == set(POINTS)
    tested = ""
    for path in Path(__file__).parent.glob("test_*.py"):
        tested += path.read_text(encoding="utf-8")
    assert not [p for p in POINTS if f'"{p}' not in tested], "a crash point no test reaches"
