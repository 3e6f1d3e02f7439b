"""Scale-out through nginx: push and pull throughput to one backend and to two, side by side.

One PostgreSQL database and one SeaweedFS bucket (fresh, from the test services of
``scripts/services.sh``), two ``kvreg serve`` processes on them (A and B), and two Debian
nginx servers configured with docs/deployment.md's load-balancer sample: "one" in front of A
alone, "two" in front of A and B. Object downloads go through the registry (no
``KVREG_S3_REDIRECT``): the servers carry every byte, which is what spreading them out is for.

Each run deposits ``--artifacts`` fresh signed artifacts (``--chunks`` random chunks of
``--chunk-mib`` MiB, untimed; fresh bytes every run, so that every run makes the registry
store what it receives), then times ``--artifacts`` concurrent ``kvreg push -j JOBS`` through
one nginx, then as many concurrent ``kvreg pull -j JOBS`` of them into fresh stores. After an
untimed warm-up run through each nginx (fresh servers pay for imports and first-use work), the
rounds (``--repeat``) alternate which nginx goes first; medians are reported, and the ratio
two / one for push and for pull. Beside the wall time: CPU seconds per GiB of the servers,
nginx, the clients, SeaweedFS, PostgreSQL, the rest and the whole host (from /proc; the host's
load average before each run is printed too: the host may be shared), and how the requests were
shared between the upstreams (nginx's access log, the sample's format). Every push and pull
must succeed and every pull must fetch every object of the pushed manifest (a failed check
exits 1); there is no timing goal.

Run: ``.venv/bin/python bench/scale_out.py [--repeat 3] [--artifacts 3] [--chunks 40]
[--chunk-mib 4] [--jobs 4] [--json FILE]``; ``--quick`` (one round, 2 artifacts of 4 MiB) is
the smoke test's run, its figures mean nothing. The last line of stdout is the report as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from core.manifest_helpers import signed_artifact  # noqa: E402
from integration.load_balancer import documented_load_balancer, read_access_log, traffic  # noqa: E402
from integration.registry_server import Registry, client_home, free_port  # noqa: E402
from integration.test_ops_nginx import nginx  # noqa: E402
from kvreg.core.envelope import Envelope  # noqa: E402
from kvreg.core.keys import SigningKey  # noqa: E402
from kvreg.core.names import RefName  # noqa: E402
from kvreg.store.artifacts import store_artifact  # noqa: E402
from kvreg.store.home import Home  # noqa: E402
from push_pull import process_cpu_seconds, process_tree  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
BLOCK = 4
CONFIGS = ("one", "two")
#: The longest a round of clients may take; then they are killed and the run fails (and the
#: servers and nginx are stopped, as always).
CLIENT_WAIT_S = 300.0
#: Where the CPU goes: the registry processes, nginx, the kvreg clients, the stores, the rest of
#: the host (other tenants of a shared host too), and the whole host.
PARTS = ("servers", "nginx", "clients", "seaweedfs", "postgresql", "other", "host")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def host() -> dict[str, Any]:
    """The CPU by name (``model name`` of /proc/cpuinfo, with its family and model numbers)."""
    info: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    name = info.get("model name", platform.processor() or platform.machine())
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']}, model {info['model']})"
    return {"cpu": name, "cpus": os.cpu_count(), "python": platform.python_version()}


def host_cpu_seconds() -> float:
    """CPU seconds the whole host has been busy (all CPUs, /proc/stat, idle and iowait left out)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def tree_cpu(pids: list[int]) -> float:
    return sum(process_cpu_seconds(p) for pid in pids for p in process_tree(pid))


def named_cpu(name: str) -> float:
    """CPU seconds so far of every process whose command name is ``name`` (``weed``: SeaweedFS;
    ``postgres``: the PostgreSQL cluster's processes)."""
    total = 0.0
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == name:
                total += process_cpu_seconds(int(comm.parent.name))
    return total


def cpu_parts(s: Setup, config: str) -> dict[str, float]:
    """CPU seconds so far of each part of the setup, and of the whole host."""
    return {
        "servers": tree_cpu([p.pid for p in (s.a.proc, s.b.proc) if p is not None]),
        "nginx": tree_cpu([s.nginx_pids[config]]),
        "seaweedfs": named_cpu("weed"),
        "postgresql": named_cpu("postgres"),
        "host": host_cpu_seconds(),
    }


@dataclass
class Setup:
    a: Registry
    b: Registry
    key: SigningKey
    urls: dict[str, str]  # config -> nginx URL
    logs: dict[str, Path]  # config -> its access log
    nginx_pids: dict[str, int]


def registry_env(root: Path, database_url: str, bucket: str) -> dict[str, str]:
    from services import s3_settings

    s3 = s3_settings()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_") or k.startswith("KVREG_TEST_")}
    env.update(
        KVREG_DATA=str(root / "data"),
        KVREG_DATABASE_URL=database_url,
        KVREG_STORAGE=f"s3://{bucket}/kvreg/",
        KVREG_S3_ENDPOINT=s3["endpoint_url"],
        KVREG_S3_ACCESS_KEY=s3["access_key"],
        KVREG_S3_SECRET_KEY=s3["secret_key"],
        KVREG_S3_REGION=s3["region"],
        OMP_WAIT_POLICY="PASSIVE",
    )
    return env


@contextlib.contextmanager
def setup(root: Path) -> Iterator[Setup]:
    """The database, the bucket, A and B, and both nginx; everything stopped and dropped after."""
    from services import fresh_bucket, fresh_pg_database

    with contextlib.ExitStack() as stack:
        env = registry_env(
            root, stack.enter_context(fresh_pg_database()), stack.enter_context(fresh_bucket())
        )
        a = Registry("postgres-s3", root, env)
        a.bootstrap()  # kvreg-admin migrates the database once
        a.env["KVREG_MIGRATE_ON_START"] = "0"
        a.start()
        stack.callback(a.stop)
        b = stack.enter_context(a.another_process())
        urls, logs, pids = {}, {}, {}
        for config, backends in (("one", [a]), ("two", [a, b])):
            port, folder = free_port(), root / f"nginx-{config}"
            logs[config] = folder / "kvreg.log"
            sample = documented_load_balancer(
                port, [r.url.removeprefix("http://") for r in backends], logs[config]
            )
            urls[config] = stack.enter_context(nginx(folder, sample, port))
            pids[config] = int((folder / "nginx.pid").read_text())
        yield Setup(a, b, SigningKey.generate(), urls, logs, pids)


def deposit(root: Path, key: SigningKey, name: str, chunks: int, chunk_bytes: int) -> int:
    """A store at ``root`` holding ``local/name`` (random chunks signed by ``key``); its bytes."""
    home = Home(root)
    home.ensure()
    built = signed_artifact(
        key,
        [int.from_bytes(os.urandom(2)) % 5000 + 1 for _ in range(chunks * BLOCK)],
        [os.urandom(chunk_bytes) for _ in range(chunks)],
        text=f"scale-out bench {name}".encode(),
        logits=os.urandom(128),
        block_size=BLOCK,
        evidence={"expected": "0"},
        annotations={"title": name},
    )
    envelope = Envelope.from_json_bytes(built.envelope_bytes)
    store_artifact(home, built.objects, built.manifest, envelope, RefName.parse(f"local/{name}"))
    return sum(len(b) for b in built.objects.values()) + len(built.manifest.raw_bytes)


def run_clients(commands: list[tuple[Path, list[str]]]) -> tuple[float, float, list[dict[str, Any]]]:
    """Run the ``kvreg`` commands at once, each with its own home; (wall seconds, their CPU
    seconds, their JSON reports). A failure raises."""
    from cli.helpers import kvreg_env

    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "kvreg", "--json", *args],
            env=kvreg_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for home, args in commands
    ]
    reports, cpu, waiting = [], 0.0, list(procs)
    while waiting:
        if time.perf_counter() - started > CLIENT_WAIT_S:
            for proc in waiting:
                proc.kill()
                proc.wait(30)
            raise RuntimeError(f"{len(waiting)} client(s) still running after {CLIENT_WAIT_S:.0f} s, killed")
        for proc in list(waiting):
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                cpu += usage.ru_utime + usage.ru_stime
                waiting.remove(proc)
        time.sleep(0.005)
    wall = time.perf_counter() - started
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"{proc.args!r} failed ({proc.returncode}):\n{out}\n{err[-4000:]}")
        reports.append(json.loads(out))
    return wall, cpu, reports


def timed(s: Setup, config: str, commands: list[tuple[Path, list[str]]], size: int) -> dict[str, Any]:
    """One direction of one run: the clients' wall time and everyone's CPU, and the requests."""
    before = len(read_access_log(s.logs[config]))
    os.sync()
    load = os.getloadavg()[0]
    start = cpu_parts(s, config)
    wall, clients, reports = run_clients(commands)
    cpu = {part: seconds - start[part] for part, seconds in cpu_parts(s, config).items()}
    cpu["clients"] = clients
    cpu["other"] = cpu["host"] - sum(v for k, v in cpu.items() if k != "host")
    t = traffic(read_access_log(s.logs[config])[before:])
    gib = size / GIB
    return {
        "seconds": round(wall, 3),
        "mib_per_s": round(size / MIB / wall, 1),
        "cpu_s_per_gib": {part: round(seconds / gib, 2) for part, seconds in cpu.items()},
        "host_busy": round(cpu["host"] / wall / (os.cpu_count() or 1), 2),
        "load_average_before": round(load, 2),
        "requests": t.requests,
        "object_requests": t.object_requests,
        "answered_by": {
            ("A" if u == s.a.url.removeprefix("http://") else "B"): n for u, n in t.by_upstream.items()
        },
        "answered_5xx": t.answered_5xx,
        "reports": reports,
    }


def one_run(s: Setup, config: str, args: argparse.Namespace, work: Path, n: int) -> dict[str, Any]:
    """Deposit fresh artifacts (untimed), push them all at once through ``config``, pull them all."""
    ns = s.a.namespace()
    s.a.register_key(ns, s.key.public_key.to_text())
    token = s.a.user({ns: "write"})
    url = s.urls[config]
    size = 0
    pushes, pulls = [], []
    for i in range(args.artifacts):
        src = work / f"run{n}-src{i}"
        size += deposit(src, s.key, f"a{i}", args.chunks, int(args.chunk_mib * MIB))
        client_home(src, url, token, {"local": s.key.public_key})
        pushes.append((src, ["push", "origin", f"local/a{i}", "--as", f"{ns}/a{i}", "-j", str(args.jobs)]))
        dst = client_home(work / f"run{n}-dst{i}", url, token, {ns: s.key.public_key})
        pulls.append((dst, ["pull", "origin", f"{ns}/a{i}", "-j", str(args.jobs)]))
    push = timed(s, config, pushes, size)
    pull = timed(s, config, pulls, size)
    checks = {
        "pushes_sent_everything": all(r["objects_sent"] == r["objects_total"] for r in push["reports"]),
        "pulls_fetched_everything": all(
            r["objects_downloaded"] == r["objects_total"] for r in pull["reports"]
        ),
        "pulled_what_was_pushed": [r["digest"] for r in pull["reports"]]
        == [r["digest"] for r in push["reports"]],
        "only_A_behind_one": config == "two" or set(push["answered_by"]) | set(pull["answered_by"]) == {"A"},
        "both_behind_two": config == "one"
        or set(push["answered_by"]) & set(pull["answered_by"]) == {"A", "B"},
    }
    for folder in work.glob(f"run{n}-*"):
        shutil.rmtree(folder)
    for side in (push, pull):
        side.pop("reports")
    run = {"config": config, "round": n, "bytes": size, "push": push, "pull": pull, "checks": checks}
    log(
        f"[{config}] push {push['mib_per_s']:7.1f} MiB/s ({push['seconds']:.2f} s)   "
        f"pull {pull['mib_per_s']:7.1f} MiB/s ({pull['seconds']:.2f} s)   "
        f"requests answered push {push['answered_by']} pull {pull['answered_by']}"
    )
    return run


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per configuration and direction, and the ratios two / one."""
    out: dict[str, Any] = {}
    for config in CONFIGS:
        mine = [r for r in runs if r["config"] == config]
        out[config] = {
            direction: {
                "mib_per_s_median": round(statistics.median(r[direction]["mib_per_s"] for r in mine), 1),
                "seconds_median": round(statistics.median(r[direction]["seconds"] for r in mine), 3),
                "host_busy_median": round(statistics.median(r[direction]["host_busy"] for r in mine), 2),
                "cpu_s_per_gib_median": {
                    part: round(statistics.median(r[direction]["cpu_s_per_gib"][part] for r in mine), 2)
                    for part in PARTS
                },
            }
            for direction in ("push", "pull")
        }
    out["ratio_two_over_one"] = {
        d: round(out["two"][d]["mib_per_s_median"] / out["one"][d]["mib_per_s_median"], 2)
        for d in ("push", "pull")
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--artifacts", type=int, default=3, help="client processes at once, one artifact each"
    )
    parser.add_argument("--chunks", type=int, default=40)
    parser.add_argument("--chunk-mib", type=float, default=4.0)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument(
        "--quick", action="store_true", help="one round of 2 artifacts of 4 MiB (the smoke test)"
    )
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.artifacts, args.chunks, args.chunk_mib = 1, 2, 4, 1.0
    machine = host()
    log(f"host: {machine['cpu']}, {machine['cpus']} CPUs")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kvreg-scale-out-") as tmp, setup(Path(tmp)) as s:
        work = Path(tmp) / "work"
        work.mkdir()
        log("warm-up (untimed): one run through each nginx, so that every timed run meets warm servers")
        for config in CONFIGS:
            one_run(s, config, argparse.Namespace(**{**vars(args), "chunks": 2}), work, -1)
        n = 0
        for round_ in range(args.repeat):
            for config in CONFIGS if round_ % 2 == 0 else tuple(reversed(CONFIGS)):
                runs.append(one_run(s, config, args, work, n))
                n += 1
    figures = summary(runs)
    ok = all(all(r["checks"].values()) for r in runs)
    for config in CONFIGS:
        f = figures[config]
        print(
            f"{config} backend{'s' if config == 'two' else ''}: push {f['push']['mib_per_s_median']} MiB/s, "
            f"pull {f['pull']['mib_per_s_median']} MiB/s (medians of {args.repeat})"
        )
    ratio = figures["ratio_two_over_one"]
    print(f"two / one: push {ratio['push']}, pull {ratio['pull']}")
    print(f"host: {machine['cpu']}, {machine['cpus']} CPUs")
    print(f"checks: {'all passed' if ok else 'FAILED'}")
    report = {
        "bench": "scale_out",
        "quick": args.quick,
        "ok": ok,
        "host": machine,
        "settings": {k: v for k, v in vars(args).items() if k != "json"} | {"json": None},
        "figures": figures,
        "runs": runs,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
