"""Smoke test of bench/put_floor.py: the minimal server stores exactly the bytes curl sends
(the script exits non-zero otherwise), and the report has one line per round. The figures
mean nothing on a shared CI host."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "put_floor.py"


NO_CURL = "curl is not installed: bench/put_floor.py needs it (apt-get install curl)"


@pytest.mark.skipif(shutil.which("curl") is None, reason=NO_CURL)
def test_the_floor_server_stores_what_curl_sends() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--objects", "3", "--object-mib", "2", "--rounds", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rounds = done.stdout.strip().splitlines()
    assert len(rounds) == 2
    assert all(re.fullmatch(r"round \d: [0-9.]+ s, server [0-9.]+ CPU s per GiB", line) for line in rounds)
