"""Power loss, one durability step at a time: small programs recorded under strace, every crash
state the persistence model allows checked (``bench/crashlab``; the programs are in
``power_loss_steps.py``).

Each test records one step of kvreg's own code (a file into new folders, a database commit, an
object upload, gc, eviction), builds the states a power cut could leave under ALICE's weak
model and under ext4 ``data=ordered``, and checks what must survive: what the step
acknowledged is there, and the store or database is consistent. The traces are small, so the
budget covers them (every fsync boundary, every directory operation lost alone and kept
alone, partial writes, random subsets). The whole workloads (deposit, pull, push, ...) are in
``test_crash_states.py``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
BENCH = TESTS.parent / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from crashlab import explore, strace  # noqa: E402
from crashlab.trace import record  # noqa: E402

MODELS = ("alice", "ext4-ordered")
Acks = list[dict[str, Any]]
#: ``check(root, acknowledged, later)``: see ``crashlab.explore.Checker``.
Check = Callable[[Path, Acks, Acks], list[str]]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env


def explored(
    tmp_path: Path, step: str, model: str, check: Check, *, setup: str | None = None
) -> explore.Result:
    """Record ``step`` on a fresh folder (after ``setup``) and check its crash states."""
    try:
        strace.strace_path()
    except RuntimeError as e:
        pytest.fail(str(e))
    root = tmp_path / "root"
    root.mkdir()
    steps = [sys.executable, "-m", "crash.power_loss_steps"]
    if setup is not None:
        import subprocess

        subprocess.run([*steps, setup, str(root)], env=_env(), check=True, timeout=120)
    work = tmp_path / "work"
    work.mkdir()
    trace = record(
        [*steps, step, str(root), str(work / "acks.jsonl")], [root], work=work, env=_env(), timeout=120
    )
    names = {os.path.realpath(root): "root"}
    result = explore.explore(
        trace,
        model,
        lambda roots, acked, later: check(roots["root"], acked, later),
        names,
        explore.Budget(300, 90),
    )
    assert result.states_checked >= 3, result
    return result


def _problems(result: explore.Result) -> list[str]:
    return [f"{v.state}: {p}" for v in result.violations for p in v.problems][:10]


@pytest.mark.parametrize("model", MODELS)
def test_a_file_written_into_new_folders_survives(tmp_path: Path, model: str) -> None:
    """``atomic_write_bytes`` into folders it creates: once it returned, the file is there
    (a new folder is a name in its parent, durable only once the parent is fsynced)."""

    def check(root: Path, acked: Acks, later: Acks) -> list[str]:
        path = root / "a" / "b" / "file"
        if path.exists() and path.read_bytes() != b"hello":
            return [f"a half-written file is visible: {path.read_bytes()!r}"]
        if acked and not path.exists():
            return ["the acknowledged file is gone"]
        return []

    assert _problems(explored(tmp_path, "new-folder", model, check)) == []


@pytest.mark.parametrize("model", MODELS)
def test_a_committed_transaction_survives(tmp_path: Path, model: str) -> None:
    """The registry's SQLite database: a transaction that committed is durable (WAL fsynced at
    each commit: ``synchronous=FULL``), and the database is never damaged."""

    def check(root: Path, acked: Acks, later: Acks) -> list[str]:
        db = sqlite3.connect(root / "db.sqlite3")
        try:
            integrity = db.execute("PRAGMA integrity_check").fetchall()
            rows = db.execute("SELECT count(*) FROM t").fetchone()[0]
        finally:
            db.close()
        out = [] if integrity == [("ok",)] else [f"integrity_check: {integrity}"]
        if acked and rows != 1:
            out.append("the acknowledged row is gone")
        return out

    assert _problems(explored(tmp_path, "sqlite-commit", model, check, setup="sqlite-setup")) == []


@pytest.mark.parametrize("model", MODELS)
def test_an_uploaded_object_survives(tmp_path: Path, model: str) -> None:
    """The registry's folder storage: a committed upload is durable under its name (its new
    shard folder too), and nothing under an object's name is ever half-written."""

    def check(root: Path, acked: Acks, later: Acks) -> list[str]:
        out = []
        objects = root / "objects"
        found = {}
        if objects.is_dir():
            for shard in objects.iterdir():
                for f in shard.iterdir():
                    found[f"sha256:{shard.name}{f.name}"] = hashlib.sha256(f.read_bytes()).hexdigest()
        out += [f"{d} does not hash to its name" for d, h in found.items() if d != f"sha256:{h}"]
        out += [f"acknowledged object {a['digest']} is gone" for a in acked if a["digest"] not in found]
        return out

    assert _problems(explored(tmp_path, "registry-object", model, check)) == []


def _fsck(root: Path) -> list[str]:
    from kvreg.store.fsck import fsck
    from kvreg.store.home import Home

    report = fsck(Home(root), quarantine=False)
    return [f"fsck: {p.kind} {p.subject}" for p in report.problems]


@pytest.mark.parametrize("model", MODELS)
def test_gc_leaves_a_consistent_store(tmp_path: Path, model: str) -> None:
    """gc after any crash: the store passes fsck (an envelope never outlives its manifest or
    objects) and the artifact under a ref is whole."""

    def check(root: Path, acked: Acks, later: Acks) -> list[str]:
        from kvreg.core.errors import KvregError
        from kvreg.core.manifest import Manifest
        from kvreg.core.names import RefName
        from kvreg.store.home import Home

        out = _fsck(root)
        home = Home(root)
        try:
            manifest = Manifest.from_bytes(home.objects.read(home.refs.get(RefName.parse("ns/kept"))))
            for d in manifest.object_digests():
                home.objects.read(d)  # re-hashed
        except KvregError as e:
            out.append(f"ns/kept: {e.message}")
        return out

    assert _problems(explored(tmp_path, "gc", model, check, setup="gc-setup")) == []


@pytest.mark.parametrize("model", MODELS)
def test_eviction_leaves_a_consistent_store(tmp_path: Path, model: str) -> None:
    """Disk paging after any crash: every object gone from the store is recorded as evicted
    (fsck reports none missing; ``kvreg pull`` fetches them again)."""
    result = explored(tmp_path, "evict", model, lambda root, acked, later: _fsck(root), setup="evict-setup")
    assert _problems(result) == []


@pytest.mark.parametrize("model", MODELS)
def test_a_moved_ref_is_at_its_old_or_new_value(tmp_path: Path, model: str) -> None:
    """A ref moved by compare-and-swap (``refs.set(expected=old)``): after any crash it is at the
    value acknowledged last, or, before the move is acknowledged, at the value it was being moved
    to (the move may reach the disk before the workload says it is done), and the store passes
    fsck. States of the second kind must be among those checked: a checker that held the ref to
    its last acknowledged value alone reported each of them as a lost acknowledgement."""
    from crashlab.checks import allowed

    early: list[str] = []

    def check(root: Path, acked: Acks, later: Acks) -> list[str]:
        from kvreg.core.names import RefName
        from kvreg.store.home import Home

        out = _fsck(root)
        have = str(Home(root).refs.get_or_none(RefName.parse("ns/moved")))
        for ref, options in allowed(acked, later, "ref", "root", "ref").items():
            digests = [m["digest"] for m in options]
            if have not in digests:
                out.append(f"{ref} is {have}, not one of {digests}")
            elif have != digests[0]:
                early.append(have)
        return out

    result = explored(tmp_path, "ref-move", model, check, setup="ref-move-setup")
    assert _problems(result) == []
    assert early, "no state had the move on disk before its acknowledgement"
