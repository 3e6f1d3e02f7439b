"""An interrupted pull or push, killed with SIGKILL mid-transfer, resumes without moving
finished objects again: the registry issue's resume acceptance, on both backends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cli.helpers import kvreg, kvreg_env

from .conftest import object_sizes, staged_files
from .proxy import FETCH, PACK, StallingProxy
from .registry_server import Registry
from .test_push_pull import _pusher


def _kill_when_stalled(proc: subprocess.Popen[str], proxy: StallingProxy) -> None:
    try:
        assert proxy.stalled.wait(120), "the transfer never reached the stalled object"
        time.sleep(0.5)  # let the client write what it received
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def _start(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kvreg", *args],
        env=kvreg_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _killed_pull(
    registry: Registry, depositor: dict[str, Any], make_home: Any, **stall: Any
) -> tuple[str, dict[str, int], Path]:
    """Push p07x into a new namespace, then pull it with ``-j 1`` through a :class:`StallingProxy`
    (``stall``: its settings) and kill the pull once the proxy stalls it. Returns the namespace,
    the artifact's object sizes and the puller's home."""
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "write"})
    pusher = _pusher(depositor, make_home(registry, token))
    kvreg(pusher, "push", "origin", "src/p07x", "--as", f"{ns}/p07x")
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07x"])
    proxy = StallingProxy(registry.url, **stall)
    try:
        home = make_home(registry, token, trust={ns: depositor["public_key"]})
        kvreg(home, "remote", "add", "flaky", proxy.url)
        kvreg(home, "login", "flaky", "--token", token)
        proc = _start(home, "pull", "flaky", f"{ns}/p07x", "-j", "1")
        _kill_when_stalled(proc, proxy)
    finally:
        proxy.close()
    assert proc.returncode == -signal.SIGKILL
    return ns, sizes, home


def test_killed_pull_resumes_without_downloading_finished_objects(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    allow = 3
    ns, sizes, home = _killed_pull(
        registry, depositor, make_home, method="GET", allow=allow, hide_fetch_packs=True
    )
    staging = list((home / "tmp").glob("pull-*"))
    assert len(staging) == 1, "the interrupted pull keeps its verified objects in a staging folder"
    complete, partial = staged_files(staging[0], sizes)
    assert len(complete) == allow
    assert len(partial) == 1 and partial[0].stat().st_size > 0
    finished = sum(p.stat().st_size for p in complete)
    partial_size = partial[0].stat().st_size
    # Nothing is visible in the store before the pull completes.
    assert not (home / "refs" / ns).exists()

    report = kvreg(home, "--json", "pull", "origin", f"{ns}/p07x").json
    assert report["objects_staged"] == allow
    assert report["objects_downloaded"] == len(sizes) - allow
    # The partial object resumed with a Range request: fewer bytes than the rest of the artifact.
    assert report["bytes_downloaded"] < sum(sizes.values()) - finished
    assert report["bytes_downloaded"] == sum(sizes.values()) - finished - partial_size
    kvreg(home, "fsck")
    kvreg(home, "verify", f"{ns}/p07x")
    assert not list((home / "tmp").glob("pull-*")), "a completed pull removes its staging folder"


def test_pull_killed_in_a_fetch_pack_resumes_from_what_arrived(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    """Killed while a fetch pack streams: the objects finished before are kept (hashed again, not
    downloaded), the one under way resumes with a range, the rest come in a new pack."""
    ns, sizes, home = _killed_pull(registry, depositor, make_home, method="POST", allow=0, pattern=FETCH)
    staging = list((home / "tmp").glob("pull-*"))
    assert len(staging) == 1
    complete, partial = staged_files(staging[0], sizes)
    assert complete and len(partial) == 1 and partial[0].stat().st_size > 0, (complete, partial)
    received = sum(p.stat().st_size for p in [*complete, *partial])
    assert not (home / "refs" / ns).exists()

    report = kvreg(home, "--json", "pull", "origin", f"{ns}/p07x").json
    assert report["objects_staged"] == len(complete)
    assert report["objects_downloaded"] == len(sizes) - len(complete)
    assert report["bytes_downloaded"] == sum(sizes.values()) - received
    kvreg(home, "fsck")
    kvreg(home, "verify", f"{ns}/p07x")
    assert not list((home / "tmp").glob("pull-*"))


def test_killed_push_resumes_sending_only_what_is_missing(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "write"})
    home = _pusher(depositor, make_home(registry, token))
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07"])

    allow = 2
    proxy = StallingProxy(registry.url, method="PUT", allow=allow, hide_packs=True)  # one PUT per object
    try:
        kvreg(home, "remote", "add", "flaky", proxy.url)
        kvreg(home, "login", "flaky", "--token", token)
        proc = _start(home, "push", "flaky", "src/p07", "--as", f"{ns}/p07", "-j", "1")
        _kill_when_stalled(proc, proxy)
    finally:
        proxy.close()
    with registry.http(token) as c:
        assert c.get(f"/namespaces/{ns}/refs/p07").status_code == 404, (
            "no ref before the objects are all there"
        )

    report = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/p07").json
    assert report["objects_sent"] == len(sizes) - allow
    assert report["ref_changed"] is True
    dst = make_home(registry, token, trust={ns: depositor["public_key"]})
    kvreg(dst, "pull", "origin", f"{ns}/p07")
    kvreg(dst, "verify", f"{ns}/p07")
    os.environ.get("KVREG_HOME")  # the tests never touch the user's own store


def test_killed_push_of_a_pack_stores_nothing_and_resumes(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    """A push killed while its object pack is on the wire leaves nothing: the pack is all or
    nothing, and the next push sends every object again."""
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "write"})
    home = _pusher(depositor, make_home(registry, token))
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07"])
    proxy = StallingProxy(registry.url, method="POST", allow=0, pattern=PACK)
    try:
        kvreg(home, "remote", "add", "flaky", proxy.url)
        kvreg(home, "login", "flaky", "--token", token)
        proc = _start(home, "push", "flaky", "src/p07", "--as", f"{ns}/p07", "-j", "1")
        _kill_when_stalled(proc, proxy)
    finally:
        proxy.close()
    with registry.http(token) as c:
        assert c.get(f"/namespaces/{ns}/refs/p07").status_code == 404
        missing = c.post(f"/namespaces/{ns}/objects/missing", json={"digests": list(sizes)}).json()
        assert sorted(missing["missing"]) == sorted(sizes)

    report = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/p07").json
    assert report["objects_sent"] == len(sizes) and report["ref_changed"] is True
    dst = make_home(registry, token, trust={ns: depositor["public_key"]})
    kvreg(dst, "pull", "origin", f"{ns}/p07")
    kvreg(dst, "verify", f"{ns}/p07")


@pytest.mark.parametrize("packs", [True, False], ids=["packs", "puts"])
def test_transient_failures_are_retried(
    registry: Registry, depositor: dict[str, Any], make_home, packs: bool
) -> None:
    """503s from the registry (or a proxy before it) are retried with backoff, pushes and pulls complete."""
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "write"})
    home = _pusher(depositor, make_home(registry, token))
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07"])
    for method, args in (
        ("PUT", ("push", "flaky", "src/p07", "--as", f"{ns}/p07")),
        ("GET", ("pull", "flaky", f"{ns}/p07", "--as", "local/p07")),
    ):
        if method == "GET" and packs:
            continue  # a pull is the same either way
        if method == "PUT" and packs:
            proxy = StallingProxy(registry.url, method="POST", allow=10_000, fail_first=3, pattern=PACK)
        else:
            proxy = StallingProxy(registry.url, method=method, allow=10_000, fail_first=3, hide_packs=True)
        try:
            if method == "PUT":
                target = home
            else:
                target = make_home(
                    registry, token, trust={ns: depositor["public_key"], "local": depositor["public_key"]}
                )
            kvreg(target, "remote", "add", "flaky", proxy.url)
            kvreg(target, "login", "flaky", "--token", token)
            report = kvreg(target, "--json", *args).json
        finally:
            proxy.close()
        assert proxy.failed == 3
        key = "objects_sent" if method == "PUT" else "objects_downloaded"
        assert report[key] == len(sizes)
