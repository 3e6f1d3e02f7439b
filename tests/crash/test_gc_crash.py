"""Garbage collection killed (SIGKILL) at each of its crash points and at seeded random times,
on both backends, and GC running while a push is stopped between its objects and its manifest.

The GC is ``kvreg-admin gc --grace-seconds 0`` (a subprocess, as an operator runs it). Before
it: a namespace whose ref ``r`` is at an artifact, objects that no envelope references (their
upload session closed) and bytes that no row claims. After the kill: the registry's fsck
passes (leftovers allowed), the ref's artifact is whole, the log verifies; the retried GC
completes, after which no garbage and no leftover remains and the artifact still pulls.

The GC-during-push race (distribution #3045): a push frozen (``KVREG_STOP_AT``) after its
objects are uploaded and before its envelope; a GC with no grace period runs; the namespace
must still hold every object (the push's upload session protects them), and the push, once
resumed, completes. A push *killed* there leaves its session open: GC keeps the objects and
the retried push sends none of them again.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from .rig import CrashRig, killed_on_exit, wait_stopped

# Each point, and the leftover the registry's fsck must report (not as a problem) after it.
GC_POINTS = {
    "registry.gc.after_mark": "orphan_bytes",
    "registry.gc.mid_sweep:2": "row_without_bytes",
    "registry.gc.before_orphans": "orphan_bytes",
}
RANDOM_SEEDS = range(int(os.environ.get("KVREG_TEST_CRASH_SEEDS", "1")))


def _with_garbage(rig: CrashRig) -> tuple[str, Path, list[str], str]:
    """(ns, home, garbage digests, orphan digest): ``r`` at the new artifact, plus garbage."""
    rig.ensure_up()
    ns, token = rig.namespace()
    home = rig.home(token, store=True, ns=ns)
    rig.push(home, rig.new.ref, f"{ns}/r")
    garbage = rig.upload_garbage(ns, token, 4)
    orphan = rig.orphan_bytes()
    return ns, home, garbage, orphan


def _after_gc_crash(
    rig: CrashRig, ns: str, home: Path, garbage: list[str], orphan: str, leftover: str | None = None
) -> None:
    report = rig.fsck()
    if leftover is not None:
        assert leftover in {f["kind"] for f in report["leftovers"]}, report["leftovers"]
    rig.audit_verify(home)
    assert rig.remote_ref(ns, "r") == rig.new.digest
    assert rig.held(ns, rig.new.objects) == set(rig.new.objects)
    gc_runs = sum(1 for e in rig.entries() if e["type"] == "gc.run")
    rig.collect_garbage()  # the retry
    rig.fsck(leftovers=False)
    stored = rig.stored()
    assert not stored & {*garbage, orphan}
    assert set(rig.new.objects) <= stored
    assert sum(1 for e in rig.entries() if e["type"] == "gc.run") == gc_runs + 1
    assert rig.audit_verify(home) > 0
    reader = rig.home(rig.reg.user({ns: "read"}), store=False, ns=ns)
    assert rig.pull(reader, f"{ns}/r")["digest"] == rig.new.digest
    rig.client_fsck(reader)


@pytest.mark.parametrize("point", sorted(GC_POINTS))
def test_gc_killed_at_point(rig: CrashRig, point: str) -> None:
    ns, home, garbage, orphan = _with_garbage(rig)
    proc = rig.gc(extra_env={"KVREG_CRASH_AT": point})
    assert proc.returncode == -signal.SIGKILL, f"{proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    _after_gc_crash(rig, ns, home, garbage, orphan, GC_POINTS[point])


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_gc_killed_at_random_time(rig: CrashRig, seed: int) -> None:
    """Frozen as it begins (so that the kill falls in the GC, not in the imports), then killed
    at a random time after it resumes."""
    ns, home, garbage, orphan = _with_garbage(rig)
    rng = random.Random(f"gc-{rig.reg.backend}-{seed}")
    proc = rig.spawn_gc_stopped_at("registry.gc.begin")
    with killed_on_exit(proc):
        wait_stopped(proc)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(rng.uniform(0.0, 0.3))
    _after_gc_crash(rig, ns, home, garbage, orphan)


def test_gc_leaves_orphan_bytes_alone_once_an_upload_claims_them(rig: CrashRig) -> None:
    """Bytes with no row, listed by GC as an orphan; before GC claims them, an upload of the
    same digest commits its row and the namespace's hold. GC must leave the bytes: the
    namespace has been told it holds the object. (Found by ``bench/soak.py`` on PostgreSQL:
    GC locked the upload's row, deleted the bytes, then failed on the hold's foreign key.)"""
    rig.ensure_up()
    ns, token = rig.namespace()
    rig.collect_garbage()  # no other orphan: the first one GC lists is this test's
    data = os.urandom(100)
    orphan = rig.orphan_bytes(data)
    gc = rig.spawn_gc_stopped_at("registry.gc.orphan_listed")
    with killed_on_exit(gc):
        wait_stopped(gc)
        with rig.reg.http(token) as c:
            r = c.put(f"/namespaces/{ns}/objects/{orphan}", content=data)
            assert r.status_code in (200, 201), r.text
        os.kill(gc.pid, signal.SIGCONT)
        rc, out, err = rig.finish(gc)
    assert rc == 0, f"{out}\n{err}"
    assert json.loads(out)["orphans_removed"] == 0
    assert orphan in rig.stored()
    assert rig.held(ns, (orphan,)) == {orphan}
    with rig.reg.http(token) as c:
        r = c.get(f"/namespaces/{ns}/objects/{orphan}")
        assert r.status_code == 200 and r.content == data
    rig.fsck(leftovers=False)


def test_gc_during_push_keeps_the_objects(rig: CrashRig) -> None:
    rig.ensure_up()
    ns, token = rig.namespace()
    home = rig.home(token, store=True, ns=ns)
    push = rig.spawn(
        home,
        "--json",
        "push",
        "origin",
        rig.new.ref,
        "--as",
        f"{ns}/r",
        KVREG_STOP_AT="client.push.after_objects",
    )
    with killed_on_exit(push):
        wait_stopped(push)
        assert rig.held(ns, rig.new.objects) == set(rig.new.objects)
        rig.collect_garbage()
        assert rig.held(ns, rig.new.objects) == set(rig.new.objects)
        assert set(rig.new.objects) <= rig.stored()
        os.kill(push.pid, signal.SIGCONT)
        rc, out, err = rig.finish(push)
    assert rc == 0, f"{out}\n{err}"
    report = json.loads(out)
    assert report["objects_sent"] == report["objects_missing"]  # nothing had to be sent again
    assert rig.check_push_atomic(ns, "r", None, rig.new) == rig.new.digest
    rig.fsck()


def test_push_killed_before_its_manifest_keeps_its_objects_through_gc(rig: CrashRig) -> None:
    rig.ensure_up()
    ns, token = rig.namespace()
    home = rig.home(token, store=True, ns=ns)
    push = rig.spawn(
        home,
        "--json",
        "push",
        "origin",
        rig.new.ref,
        "--as",
        f"{ns}/r",
        KVREG_CRASH_AT="client.push.after_objects",
    )
    rc, out, err = rig.finish(push)
    assert rc == -signal.SIGKILL, f"{rc}\n{out}\n{err}"
    rig.collect_garbage()
    rig.fsck()
    assert rig.check_push_atomic(ns, "r", None, rig.new) is None
    assert rig.held(ns, rig.new.objects) == set(rig.new.objects)
    retry = rig.push(home, rig.new.ref, f"{ns}/r")
    assert retry["objects_missing"] == 0 and retry["objects_sent"] == 0
    assert rig.check_push_atomic(ns, "r", None, rig.new) == rig.new.digest
    rig.fsck()
