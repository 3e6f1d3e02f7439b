"""Scale-out shown: Debian's nginx, configured as docs/deployment.md's load-balancer sample, in
front of two ``kvreg serve`` processes on one PostgreSQL database and one S3 bucket (fresh
ones), and a backend killed (SIGKILL) in the middle of the transfers.

Three client processes push three signed artifacts of 96 MiB each (24 objects of 4 MiB)
through nginx at once, ``kvreg push -j 4`` each; once backend A has moved a quarter of what
it would move in the phase, with requests of nginx's open on it, it is killed, and restarted
on its port while the pushes go on. Then three ``kvreg pull -j 4`` fetch them into fresh
stores at once, and backend B is killed and restarted the same way. Every push and pull must
end well: a request that a dead server refused, nginx passes to the other one; one that a
kill cut, the client does again (nginx answers 502 for a request whose body it had begun to
send, an object pack is sent again, a fetch pack cut half-way is finished object by object,
resuming with ``Range``). Every object pulled must be byte-identical to the one pushed,
``kvreg-admin fsck`` must find no problem, ``kvreg audit verify`` must verify the whole audit
log through nginx, and each restarted server must answer through nginx again. Last, a server
killed between requests: nginx passes the requests it refuses to the other, and no client
sees an error.

Checked to fail on a broken setup: with the client's retries off (``retries=0``), a push ends
``UNAVAILABLE`` on the first object pack cut by the kill; with ``proxy_next_upstream off`` in
the sample, the server killed between requests makes nginx answer 502s.

Figures, printed and asserted: the requests nginx passed on to the other server and those it
answered with a 5xx (its access log, in the documented format, names every upstream tried),
the upstream errors in its error log, what the clients did again (``kvreg -vv``), the bytes
through nginx and the time of each phase. Every process the test starts is stopped at the
end, and each wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cli.helpers import kvreg_env
from core.manifest_helpers import signed_artifact
from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.store.artifacts import store_artifact
from kvreg.store.home import Home

from .load_balancer import (
    Request,
    Traffic,
    documented_load_balancer,
    open_transfers,
    read_access_log,
    sigkill,
    traffic,
    upstream_errors,
)
from .registry_server import Registry, client_home, free_port, running_registry
from .test_ops_nginx import nginx

ARTIFACTS = 3
CHUNKS = 24
CHUNK_BYTES = 4 << 20
BLOCK = 4
JOBS = "4"
WAIT_S = 300.0
#: Kill the victim once a request open on it has moved this many bytes (an object pack holds 24 MiB).
KILL_AFTER = 6 << 20
#: What the clients log (``-vv``) when they do a request again.
CLIENT_REDOS = {
    "retries": "registry request failed",  # kvreg.remote.retrying: a retry after a wait
    "fetch_packs_cut": "broke off after",  # kvreg.remote.downloads: the rest fetched one by one
    "fetch_packs_refused": "the objects are fetched one by one",  # answered 502: the same
}


@dataclass
class Phase:
    """One round of client processes through nginx, and the backend killed during it."""

    name: str
    seconds: float = 0.0
    killed_after_s: float = 0.0
    open_at_kill: list[int] = field(default_factory=list)
    down_s: float = 0.0
    client_redos: dict[str, int] = field(default_factory=dict)
    upstream_errors: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 2),
            "killed_after_s": round(self.killed_after_s, 2),
            "requests_open_on_the_victim_at_the_kill": len(self.open_at_kill),
            "bytes_they_had_moved": self.open_at_kill,
            "victim_down_s": round(self.down_s, 2),
            "client_redos": self.client_redos,
            "nginx_upstream_errors": self.upstream_errors,
            **traffic(self.requests).to_dict(),
        }


def deposit(root: Path, key: SigningKey, name: str, seed: int) -> dict[Digest, int]:
    """A store at ``root`` holding ``local/name``: random chunks signed by ``key``; returns the
    sizes of the objects a pull fetches (the manifest's objects and the manifest)."""
    home = Home(root)
    home.ensure()
    built = signed_artifact(
        key,
        [(seed * 7919 + i) % 5000 + 1 for i in range(CHUNKS * BLOCK)],
        [os.urandom(CHUNK_BYTES) for _ in range(CHUNKS)],
        text=f"scale-out artifact {name}".encode(),
        logits=bytes(range(128)),
        block_size=BLOCK,
        evidence={"expected": "0"},
        annotations={"title": name},
    )
    envelope = Envelope.from_json_bytes(built.envelope_bytes)
    store_artifact(home, built.objects, built.manifest, envelope, RefName.parse(f"local/{name}"))
    sizes = {d: len(b) for d, b in built.objects.items()}
    return sizes | {built.manifest.digest: len(built.manifest.raw_bytes)}


def spawn(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kvreg", "-vv", "--json", *args],
        env=kvreg_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[dict[str, Any], str]]:
    """Wait for every client; each must succeed: ``(its JSON report, its stderr)``."""
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, f"{proc.args!r} failed ({proc.returncode}):\n{out}\n{err[-6000:]}"
        done.append((json.loads(out), err))
    return done


def run_phase(
    phase: Phase,
    commands: Sequence[tuple[Path, Sequence[str]]],
    victim: Registry,
    nginx_dir: Path,
) -> list[dict[str, Any]]:
    """Start the clients, kill ``victim`` once a request open on it has moved ``KILL_AFTER`` bytes,
    restart it on its port, and wait for the clients."""
    assert victim.proc is not None
    port = int(victim.url.rpartition(":")[2])
    log = nginx_dir / "kvreg.log"
    before, errors_before = len(read_access_log(log)), upstream_errors(nginx_dir / "error.log")
    started = time.monotonic()
    procs = [spawn(home, *args) for home, args in commands]
    try:
        while True:
            if all(p.poll() is not None for p in procs):
                finish(procs)  # says why a client failed
                raise AssertionError("the transfers ended before the kill")
            assert time.monotonic() - started < WAIT_S, "the victim never got its share of the transfers"
            open_now = open_transfers(port)
            if open_now and max(open_now) >= KILL_AFTER:
                break
            time.sleep(0.01)
        assert sigkill(victim.proc) == -9
        phase.killed_after_s, phase.open_at_kill = time.monotonic() - started, sorted(open_now)
        assert any(p.poll() is None for p in procs), "the transfers ended with the kill"
        down = time.monotonic()
        victim.start(port)
        phase.down_s = time.monotonic() - down
        results = finish(procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
    phase.seconds = time.monotonic() - started
    phase.client_redos = {k: sum(err.count(v) for _, err in results) for k, v in CLIENT_REDOS.items()}
    errors_after = upstream_errors(nginx_dir / "error.log")
    phase.upstream_errors = {k: n - errors_before.get(k, 0) for k, n in errors_after.items()}
    phase.requests = read_access_log(log)[before:]
    return [report for report, _ in results]


def died_between_requests(url: str, victim: Registry, log: Path) -> Traffic:
    """Kill ``victim`` while nothing is open on it and send a few requests through nginx: the
    first that nginx sends to the dead server is refused and passed on to the other, so every
    one is answered (``proxy_next_upstream error``); the traffic they made."""
    assert victim.proc is not None and open_transfers(int(victim.url.rpartition(":")[2])) == []
    assert sigkill(victim.proc) == -9
    before = len(read_access_log(log))
    statuses = [httpx.get(f"{url}/api/v1/", timeout=30).status_code for _ in range(4)]
    assert statuses == [200] * 4, statuses
    return traffic(read_access_log(log)[before:])


def back_in_rotation(url: str, backend: Registry, log: Path) -> int:
    """Send ``GET /livez`` through nginx until the restarted ``backend`` answers one (nginx tries a
    server it took out again after ``fail_timeout``); how many it took."""
    address = backend.url.removeprefix("http://")
    deadline = time.monotonic() + 60
    sent = 0
    while time.monotonic() < deadline:
        before = len(read_access_log(log))
        assert httpx.get(f"{url}/livez", timeout=10).status_code == 200
        sent += 1
        if any(r.upstreams[-1:] == (address,) and r.path == "/livez" for r in read_access_log(log)[before:]):
            return sent
        time.sleep(0.2)
    raise AssertionError(f"{address} never answered through nginx again")


@contextlib.contextmanager
def two_backends(root: Path) -> Iterator[tuple[Registry, Registry]]:
    """Two ``kvreg serve`` on one fresh PostgreSQL database and one fresh bucket, migrated once
    (``kvreg-admin`` did it) and started with ``KVREG_MIGRATE_ON_START=0``, as documented."""
    with running_registry("postgres-s3", root) as a:
        a.env["KVREG_MIGRATE_ON_START"] = "0"
        with a.another_process() as b:
            yield a, b


def same_bytes(src: Home, dst: Home, digest: Digest) -> bool:
    with src.objects.open(digest) as x, dst.objects.open(digest) as y:
        while block := x.read(1 << 20):
            if block != y.read(1 << 20):
                return False
        return y.read(1) == b""


def test_scale_out_behind_nginx_survives_a_backend_killed_mid_transfer(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    key = SigningKey.generate()
    sources = [tmp_path / f"src{i}" for i in range(ARTIFACTS)]
    sizes = [deposit(src, key, f"a{i}", seed=i) for i, src in enumerate(sources)]
    phase_bytes = sum(sum(s.values()) for s in sizes)
    push, pull = Phase("push"), Phase("pull")
    with two_backends(tmp_path / "registry") as (a, b):
        ns = a.namespace()
        a.register_key(ns, key.public_key.to_text())
        writer = a.user({ns: "write"})
        port, nginx_dir = free_port(), tmp_path / "nginx"
        log = nginx_dir / "kvreg.log"
        config = documented_load_balancer(
            port, [a.url.removeprefix("http://"), b.url.removeprefix("http://")], log
        )
        with nginx(nginx_dir, config, port) as url:
            for src in sources:
                client_home(src, url, writer, {"local": key.public_key, ns: key.public_key})
            pushes = [
                (src, ("push", "origin", f"local/a{i}", "--as", f"{ns}/a{i}", "-j", JOBS))
                for i, src in enumerate(sources)
            ]
            pushed = run_phase(push, pushes, a, nginx_dir)
            rejoined = {"a": back_in_rotation(url, a, log)}
            dests = [
                client_home(tmp_path / f"dst{i}", url, writer, {ns: key.public_key}) for i in range(ARTIFACTS)
            ]
            pulls = [(dst, ("pull", "origin", f"{ns}/a{i}", "-j", JOBS)) for i, dst in enumerate(dests)]
            pulled = run_phase(pull, pulls, b, nginx_dir)
            rejoined["b"] = back_in_rotation(url, b, log)
            idle = died_between_requests(url, a, log)
            audit = subprocess.run(
                [sys.executable, "-m", "kvreg", "--json", "audit", "verify", "origin"],
                env=kvreg_env(sources[0]),
                capture_output=True,
                text=True,
                timeout=WAIT_S,
                check=False,
            )
            assert audit.returncode == 0, audit.stdout + audit.stderr
        fsck = a.admin_cli("fsck")

    for i in range(ARTIFACTS):
        assert pushed[i]["remote_ref"] == f"{ns}/a{i}" and pushed[i]["bytes_sent"] >= pushed[i]["bytes_total"]
        assert pulled[i]["digest"] == pushed[i]["digest"]
        assert pulled[i]["objects_downloaded"] == pulled[i]["objects_total"] == len(sizes[i]) - 1
        wrong = [d for d in sizes[i] if not same_bytes(Home(sources[i]), Home(dests[i]), d)]
        assert wrong == [], f"objects of a{i} differ after the pull: {wrong}"
    verified = json.loads(audit.stdout)
    assert verified["entries_checked"] == verified["size"] > 0
    assert fsck["ok"] is True and fsck["problems"] == [], fsck["problems"]
    assert fsck["objects_checked"] >= len(set().union(*sizes))  # the logits are the same in all

    figures = {
        "artifacts": ARTIFACTS,
        "bytes_per_phase": phase_bytes,
        "push": push.report(),
        "pull": pull.report(),
        "livez_until_back_in_rotation": rejoined,
        "a_killed_between_requests": idle.to_dict(),
        "audit_entries_verified": verified["size"],
        "fsck_leftovers": len(fsck["leftovers"]),
    }
    print("\nscale-out behind nginx:", json.dumps(figures, indent=1))  # pytest -s shows them
    record_property("scale_out_figures", json.dumps(figures))  # and --junitxml keeps them
    for phase in (push, pull):
        t = traffic(phase.requests)
        assert max(phase.open_at_kill) >= KILL_AFTER, f"{phase.name}: the kill cut no transfer"
        # the kill cut requests or refused them, and every one of them was done again
        assert sum(phase.upstream_errors.values()) >= 1, f"{phase.name}: nginx saw no upstream fail"
        assert t.passed_on + sum(phase.client_redos.values()) >= 1, f"{phase.name}: nothing was done again"
        assert len(t.by_upstream) == 2, t.by_upstream  # both servers answered in the phase
        assert t.bytes_received + t.bytes_sent >= phase_bytes
    assert idle.passed_on >= 1 and idle.answered_5xx == 0, idle
