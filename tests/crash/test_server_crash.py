"""The registry killed (SIGKILL) at each crash point of a push, and at seeded random times.

For every point, on both backends: a namespace whose ref ``r`` is at an old artifact; a
client pushes a new artifact to ``r`` (``kvreg push``'s function, with no retries, so that
it fails as soon as the server dies); the server kills itself at the point. With the server
down the registry's fsck passes; the server restarts; the ref is at the old or the new
digest and the log has an entry exactly for what happened (``CrashRig.check_push_atomic``);
the audit log verifies; the same push, run again, completes; and all of it holds again
after that. The random-time kills come from the test (``kill -9`` of the server once the
push has opened its upload session, after a seeded random delay), and their retry is
``kvreg push`` itself.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cli.helpers import kvreg
from kvreg.core.errors import KvregError

from .rig import CrashRig

SERVER_POINTS = [
    "registry.object.before_publish",
    "registry.object.after_publish",
    "registry.object.after_commit:3",
    "registry.envelope.after_publish",
    "registry.envelope.after_commit",
    "registry.ref.before_log",
    "registry.log.after_entry:2",
    "registry.ref.after_commit",
    "registry.checkpoint.before_store",
]
# More with KVREG_TEST_CRASH_SEEDS=N (each costs a server restart and two pushes).
RANDOM_SEEDS = range(int(os.environ.get("KVREG_TEST_CRASH_SEEDS", "1")))


def _prepared(rig: CrashRig) -> tuple[str, Path]:
    """A namespace with ``r`` at the old artifact, and a home that pushes: (ns, home)."""
    rig.ensure_up()
    ns, token = rig.namespace()
    home = rig.home(token, store=True, ns=ns)
    rig.push(home, rig.old.ref, f"{ns}/r")
    return ns, home


def _after_crash(rig: CrashRig, ns: str, home: Path, *, cli: bool) -> None:
    """The checks with the server down, then up; then the retry and the checks again. The retry
    is ``kvreg push`` itself with ``cli``, else its function in this process (seconds cheaper)."""
    rig.fsck()  # the database and the storage as the crash left them, the server down
    rig.restart()
    rig.check_push_atomic(ns, "r", rig.old.digest, rig.new)
    rig.audit_verify(home)
    if cli:
        retry = kvreg(home, "--json", "push", "origin", rig.new.ref, "--as", f"{ns}/r").json
    else:
        retry = rig.push(home, rig.new.ref, f"{ns}/r")
    assert retry["new"] == rig.new.digest
    assert rig.check_push_atomic(ns, "r", rig.old.digest, rig.new) == rig.new.digest
    rig.audit_verify(home)
    rig.fsck()


@pytest.mark.parametrize("point", SERVER_POINTS)
def test_server_killed_at_point_during_push(rig: CrashRig, point: str) -> None:
    ns, home = _prepared(rig)
    rig.arm(point)
    with pytest.raises(KvregError):  # the server died under it
        rig.push(home, rig.new.ref, f"{ns}/r", retries=0)
    rig.wait_server_death()
    _after_crash(rig, ns, home, cli=False)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_server_killed_at_random_time_during_push(rig: CrashRig, seed: int) -> None:
    ns, home = _prepared(rig)
    rng = random.Random(f"server-{rig.reg.backend}-{seed}")
    since = rig.log_size()
    outcome: dict[str, Any] = {}

    def push() -> None:
        try:
            outcome["report"] = rig.push(home, rig.new.ref, f"{ns}/r", retries=0)
        except KvregError as e:
            outcome["error"] = e

    pusher = threading.Thread(target=push)
    pusher.start()
    try:
        rig.wait_for_entry(ns, "upload.opened", pusher.is_alive, since=since)  # the push has begun
        time.sleep(rng.uniform(0.0, 0.5))
        assert rig.reg.proc is not None
        rig.reg.proc.kill()
        rig.reg.proc.wait(30)
    finally:
        pusher.join(60)
    assert outcome  # it completed or failed; either way, the checks hold
    _after_crash(rig, ns, home, cli=True)
