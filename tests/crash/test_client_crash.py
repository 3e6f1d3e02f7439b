"""The client (``kvreg push`` / ``kvreg pull``, subprocesses) killed at each of its crash points
and at seeded random times.

A pull is killed while it moves the ref of a home from an old artifact to a new one: after
the kill the store passes ``kvreg fsck`` (every object hashes to its name: no temp file was
promoted), the local ref is at the old or the new digest and, when new, the whole artifact
is there; the pinned audit log still verifies; the same pull, run again, completes and
leaves no staging folder. A push is killed between its steps: the registry's fsck passes,
the remote ref is old or new with the log entries to match, and the retried push completes.

The registry's backend does not matter to these (its crashes are ``test_server_crash``):
they run on SQLite + a folder only.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from cli.helpers import kvreg

from .rig import CrashRig, kill

PULL_POINTS = [
    "client.pull.after_fetch",
    "client.pull.install:2",
    "client.object.before_install",
    "client.pull.after_objects",
    "client.pull.after_manifest",
    "client.pull.before_ref",
    "client.ref.after_write",
]
PUSH_POINTS = ["client.push.after_envelope", "client.push.after_ref"]
RANDOM_SEEDS = range(int(os.environ.get("KVREG_TEST_CRASH_SEEDS", "1")) + 1)


def _moved(rig: CrashRig) -> tuple[str, Path]:
    """(ns, puller home): the puller has ``ns/r`` at the old artifact; the registry's is new."""
    ns, token = rig.namespace()
    pusher = rig.home(token, store=True, ns=ns)
    rig.push(pusher, rig.old.ref, f"{ns}/r")
    puller = rig.home(token, store=False, ns=ns)
    rig.pull(puller, f"{ns}/r")
    rig.push(pusher, rig.new.ref, f"{ns}/r")
    return ns, puller


def _after_pull_crash(rig: CrashRig, ns: str, home: Path, *, cli: bool) -> None:
    """The checks after the kill; then the same pull (``kvreg pull`` itself with ``cli``, else
    its function in this process: seconds cheaper), and the checks again."""
    from kvreg.store.home import Home

    rig.client_fsck(home)
    at = rig.local_ref(home, f"{ns}/r")
    assert at in (rig.old.digest, rig.new.digest)
    objects = Home(home).objects
    if at == rig.new.digest:
        assert all(objects.has(d) for d in rig.new.objects)  # type: ignore[arg-type]
    rig.audit_verify(home)
    pulled = kvreg(home, "--json", "pull", "origin", f"{ns}/r").json if cli else rig.pull(home, f"{ns}/r")
    assert pulled["digest"] == rig.new.digest
    assert rig.local_ref(home, f"{ns}/r") == rig.new.digest
    assert all(objects.has(d) for d in rig.new.objects)  # type: ignore[arg-type]
    assert not list((home / "tmp").glob("pull-*"))
    rig.client_fsck(home)


@pytest.mark.parametrize("point", PULL_POINTS)
def test_pull_killed_at_point(sqlite_rig: CrashRig, point: str) -> None:
    rig = sqlite_rig
    ns, home = _moved(rig)
    rc, out, err = rig.finish(rig.spawn(home, "--json", "pull", "origin", f"{ns}/r", KVREG_CRASH_AT=point))
    assert rc == -signal.SIGKILL, f"{rc}\n{out}\n{err}"
    _after_pull_crash(rig, ns, home, cli=False)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_pull_killed_at_random_time(sqlite_rig: CrashRig, seed: int) -> None:
    rig = sqlite_rig
    ns, home = _moved(rig)
    rng = random.Random(f"pull-{seed}")
    proc = rig.spawn(home, "--json", "pull", "origin", f"{ns}/r")
    try:
        deadline = time.monotonic() + 60
        while not list((home / "tmp").glob("pull-*")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the pull has begun to download
        time.sleep(rng.uniform(0.0, 0.2))
    finally:
        kill(proc)
    _after_pull_crash(rig, ns, home, cli=True)


@pytest.mark.parametrize("point", PUSH_POINTS)
def test_push_killed_at_point(sqlite_rig: CrashRig, point: str) -> None:
    rig = sqlite_rig
    ns, token = rig.namespace()
    home = rig.home(token, store=True, ns=ns)
    rig.push(home, rig.old.ref, f"{ns}/r")
    proc = rig.spawn(home, "--json", "push", "origin", rig.new.ref, "--as", f"{ns}/r", KVREG_CRASH_AT=point)
    rc, out, err = rig.finish(proc)
    assert rc == -signal.SIGKILL, f"{rc}\n{out}\n{err}"
    rig.fsck()
    rig.check_push_atomic(ns, "r", rig.old.digest, rig.new)
    rig.client_fsck(home)
    rig.audit_verify(home)
    retry = rig.push(home, rig.new.ref, f"{ns}/r")
    assert retry["new"] == rig.new.digest
    assert rig.check_push_atomic(ns, "r", rig.old.digest, rig.new) == rig.new.digest
    rig.audit_verify(home)
    rig.fsck()
