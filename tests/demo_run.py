"""One real ``python -m kvreg demo`` run per session, shared by the tests that read what it leaves.

``kvreg demo`` takes about a minute on 2 cores (two model acts, a registry act with a real
``kvreg serve``, the flywheel act). Two suites need a finished run: the end-to-end demo test
(``tests/cli/test_cli_commands.py``), which checks the report, the homes and the registry's
pages, and the web-pages bench smoke test (``tests/bench/test_web_pages_smoke.py``), which
times every page of the registry it leaves. ``run_demo`` runs it once, the way a user does;
the ``demo_run`` fixture (``tests/conftest.py``) shares the result for the session.

What is checked at once, because it holds only right after the demo returns, is recorded
here (``server_stopped``) and asserted by the tests; this module asserts nothing itself.
Tests must not change the work folder: copy the registry's data folder first
(``DemoRun.copy_registry_data``) to write to it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.helpers import Run, kvreg_env

# The demo's registry uses the embedded defaults and the tokens it logged in with, whatever
# these say: the run is made with them set, and the test checks that nothing used them.
OUTSIDE_ENV = {
    "KVREG_TOKEN": "kvreg_not-the-demo-token",
    "KVREG_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/nothing",
    "KVREG_STORAGE": "s3://nothing/here",
}
# --task addition: seconds; the GSM8K act on SmolLM2 is tests/flywheel/test_gsm8k_flywheel.py.
DEMO_ARGS = ["--json", "--task", "addition", "--repeat", "2", "--unseen", "1"]


@dataclass(frozen=True)
class DemoRun:
    root: Path  # the run's own folder: ``unused-home`` (KVREG_HOME, never created) and ``demo``
    workdir: Path  # what ``--workdir`` named
    run: Run  # exit code, stdout (the JSON report) and stderr (progress)
    server_stopped: bool  # nothing listened on the registry's port any more when the demo returned

    @property
    def unused_home(self) -> Path:
        return self.root / "unused-home"

    @property
    def report(self) -> dict[str, Any]:
        report: dict[str, Any] = self.run.json
        return report

    def copy_registry_data(self, dest: Path) -> dict[str, Any]:
        """Copy the registry's data folder (SQLite + objects) to ``dest``; the report, pointing at it."""
        report = json.loads(self.run.out)
        shutil.copytree(report["registry"]["data"], dest)
        report["registry"]["data"] = str(dest)
        return dict(report)


def _port_closed(url: str) -> bool:
    port = int(url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except OSError:
        return True


def run_demo(root: Path) -> DemoRun:
    """``python -m kvreg demo --workdir ROOT/demo`` with the test arguments; the result, unchecked."""
    workdir = root / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "kvreg", "demo", "--workdir", str(workdir), *DEMO_ARGS],
        env={**kvreg_env(root / "unused-home"), **OUTSIDE_ENV},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    run = Run(["demo"], proc.returncode, proc.stdout, proc.stderr)
    stopped = False
    if proc.returncode == 0:
        try:
            stopped = _port_closed(json.loads(proc.stdout)["registry"]["url"])
        except (ValueError, KeyError):
            stopped = False  # the test's own checks of the report say what is wrong
    return DemoRun(root, workdir, run, stopped)
