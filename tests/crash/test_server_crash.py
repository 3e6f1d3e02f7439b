"""The registry killed (SIGKILL) at each crash point of a push, and at seeded random times.

For every point, on both backends: a namespace whose ref ``r`` is at an old artifact; a
client (``kvreg push``, a subprocess) pushes a new artifact to ``r``; the server kills
itself at the point and the client is then killed too, wherever it was. With the server
down the registry's fsck passes; the server restarts; the ref is at the old or the new
digest and the log has an entry exactly for what happened (``CrashRig.check_push_atomic``);
the audit log verifies; the same ``kvreg push``, run again, completes; and all of it holds
again after that.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from cli.helpers import kvreg

from .rig import CrashRig, killed_on_exit

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
RANDOM_SEEDS = range(2)


def _prepared(rig: CrashRig) -> tuple[str, Path]:
    """A namespace with ``r`` at the old artifact, and a home that pushes: (ns, home)."""
    rig.ensure_up()
    ns, token = rig.namespace()
    home = rig.home(token, store=True, ns=ns)
    rig.push(home, rig.old.ref, f"{ns}/r")
    return ns, home


def _push_new(rig: CrashRig, home: Path, ns: str):  # type: ignore[no-untyped-def]
    return rig.spawn(home, "--json", "push", "origin", rig.new.ref, "--as", f"{ns}/r")


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
    client = _push_new(rig, home, ns)
    with killed_on_exit(client):
        rig.wait_server_death(client)
    _after_crash(rig, ns, home, cli=False)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_server_killed_at_random_time_during_push(rig: CrashRig, seed: int) -> None:
    ns, home = _prepared(rig)
    rng = random.Random(f"server-{rig.reg.backend}-{seed}")
    entries = len(rig.entries(ns))
    client = _push_new(rig, home, ns)
    with killed_on_exit(client):
        rig.wait_for_entry(ns, "upload.opened", client, after=entries)  # the push has begun
        time.sleep(rng.uniform(0.0, 0.6))
        assert rig.reg.proc is not None
        rig.reg.proc.kill()
        rig.reg.proc.wait(30)
    _after_crash(rig, ns, home, cli=True)
