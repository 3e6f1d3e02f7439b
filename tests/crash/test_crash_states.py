"""Power loss over whole workloads: ``bench/crash_states.py --quick`` finds no violation, and
finds them in a deliberately broken build.

The quick form records each workload (deposit, prefix-sharing deposit, fresh and resumed pull,
gc, eviction, pushes by PUT and by pack, a ref moved by compare-and-swap, a client pinning the
audit log's checkpoint) under strace and checks 30 crash states of each under ALICE's weak
persistence model, acknowledgements and fsync boundaries first (a few minutes on two cores).
The broken builds take one durability step out of ``kvreg.fileio.atomicfile``, or the
registry database's fsync at commit (``bench/crashlab/faults.py``), in the recorded processes:
the same exploration must report violations, or it could not fail at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "crash_states.py"
WORKLOADS = (
    "deposit-new",
    "deposit-shared",
    "pull-fresh",
    "pull-resumed",
    "gc",
    "evict",
    "push-put",
    "push-packs",
    "ref-cas",
    "audit-pin",
)


def run(work: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", "--work", str(work), *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done.returncode, report, done.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One work folder for the module: the workloads' base (model, stores, registry) is built once."""
    return tmp_path_factory.mktemp("crash-states")


def test_quick_form_checks_every_workload_and_finds_no_violation(work: Path) -> None:
    rc, report, err = run(work)
    assert set(report["workloads"]) == set(WORKLOADS)
    problems = {n: w["findings"] for n, w in report["workloads"].items() if w["violations"]}
    assert problems == {}, json.dumps(problems, indent=1)[:4000]
    assert rc == 0, err[-2000:]
    for name, w in report["workloads"].items():
        assert w["operations"] > 0 and w["states_checked"] > 0, name
        assert w["states_explored"] >= w["states_checked"], name
        assert w["models"]["alice"]["coverage"]["ack"][0] == w["models"]["alice"]["coverage"]["ack"][1], name
    assert report["totals"]["states_checked"] >= 200
    assert report["totals"]["violations"] == 0


@pytest.mark.parametrize("fault", ["no-dir-fsync", "no-file-fsync"])
def test_a_broken_build_is_caught(work: Path, fault: str) -> None:
    """``kvreg deposit`` with a durability step removed: an acknowledged ref or object is lost,
    or an object is visible under its digest with bytes that never reached the disk."""
    rc, report, _ = run(work, "--workloads", "deposit-new", "--fault", fault)
    entry = report["workloads"]["deposit-new"]
    assert entry["states_checked"] > 0
    assert entry["violations"] > 0, entry
    assert rc == 1
    problems = " ".join(p for f in entry["findings"] for p in f["problems"])
    assert "acknowledged ref src/new" in problems or "fsck" in problems, problems


def test_a_registry_that_acknowledges_before_its_commit_is_durable_is_caught(work: Path) -> None:
    """The registry's SQLite with ``synchronous=NORMAL``: ``kvreg push`` moves ``team/base`` and
    is told so before the commit reaches the disk. A crash after the acknowledgement gives the
    old value back: caught, although a ref being moved may hold either value until then."""
    rc, report, _ = run(work, "--workloads", "ref-cas", "--fault", "sqlite-normal")
    entry = report["workloads"]["ref-cas"]
    assert entry["violations"] > 0, entry
    assert rc == 1
    problems = " ".join(p for f in entry["findings"] for p in f["problems"])
    assert "acknowledged ref team/base is" in problems, problems
