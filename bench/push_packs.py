"""Packs against one request per object: the registry's CPU per push and per pull, small and large.

Two synthetic signed artifacts (random chunk bytes, no model): ``--small`` chunks of
``--small-bytes`` (default 400 of 4 KiB, the shape of a real model's dedupe chunks) and
``--large`` chunks of ``--large-mib`` (default 64 of 16 MiB, the shape of
``bench/push_pull.py``'s 1 GiB deposit). Both go into one local store; a real ``kvreg
serve`` (SQLite + folder, from ``bench/push_pull.py``) receives them. Each round pushes
each artifact with ``kvreg.remote.push`` into a fresh namespace (every object missing)
twice, alternating: with object packs (the registry publishes ``max_pack_objects``) and
with single PUTs forced (the client's copy of the limits loses ``max_pack_objects``, as
against an older registry). The wall time of the push, the server's CPU seconds (its
processes, from ``/proc``) and the client's (this process, ``getrusage``) are printed per
run, then the medians. Every push must send every object.

The storage holds the objects after the first round, so later pushes of the same bytes
hash, write and fsync them again and then drop the copy (``stored: false``): the same
work for both modes.

Then the pulls, the same way: each round pulls each artifact (from the namespace of its
first push) into a fresh local store twice, alternating: with fetch packs (the registry
publishes ``max_fetch_objects``) and with one GET per object forced (the client's copy of
the limits loses it). Every pull must download every object. The JSON runs carry
``"direction": "push"`` or ``"pull"``; the modes are ``packs`` and ``single``.

Run: ``.venv/bin/python bench/push_packs.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from core.manifest_helpers import signed_artifact  # noqa: E402
from kvreg.core.envelope import Envelope  # noqa: E402
from kvreg.core.keys import SigningKey  # noqa: E402
from kvreg.core.names import RefName  # noqa: E402
from kvreg.core.trust import TrustPolicy  # noqa: E402
from kvreg.fileio.keyfiles import save_trust_policy  # noqa: E402
from kvreg.remote.pulling import pull  # noqa: E402
from kvreg.remote.pushing import push  # noqa: E402
from kvreg.store.artifacts import store_artifact  # noqa: E402
from kvreg.store.home import Home  # noqa: E402
from push_pull import running_registry, trusting_home  # noqa: E402

BLOCK = 4


def build(home: Home, key: SigningKey, name: str, count: int, size: int, seed: int) -> RefName:
    """A signed artifact of ``count`` random chunks of ``size`` bytes, stored as ``local/name``."""
    rng = random.Random(seed)
    chunks = [rng.randbytes(size) for _ in range(count)]
    tokens = [(seed * 7919 + i) % 5000 + 1 for i in range(count * BLOCK)]
    built = signed_artifact(
        key,
        tokens,
        chunks,
        text=f"text {name}".encode(),
        logits=bytes(range(128)),
        block_size=BLOCK,
        evidence={"expected": "0"},
        annotations={"title": name},
    )
    ref = RefName.parse(f"local/{name}")
    store_artifact(home, built.objects, built.manifest, Envelope.from_json_bytes(built.envelope_bytes), ref)
    return ref


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_push(
    registry: Any, home: Home, ref: RefName, key: SigningKey, *, packs: bool, n: int
) -> dict[str, Any]:
    ns = registry.namespace(f"b{n}-{'packs' if packs else 'puts'}-{ref.name}", key.public_key)
    with registry.client() as client:
        if not packs:
            client.info()["limits"].pop("max_pack_objects", None)
        os.sync()
        server, mine, start = registry.cpu_seconds(), cpu_self(), time.perf_counter()
        report = push(home, client, ref, remote_ref=RefName.parse(f"{ns}/{ref.name}"))
        wall = time.perf_counter() - start
        server, mine = registry.cpu_seconds() - server, cpu_self() - mine
    assert report.objects_sent == report.objects_total, report
    run = measured("push", ref, packs, report.objects_sent, report.bytes_sent, wall, server, mine)
    return {**run, "namespace": ns}


def measured(
    direction: str,
    ref: RefName,
    packs: bool,
    objects: int,
    size: int,
    wall: float,
    server: float,
    mine: float,
) -> dict[str, Any]:
    """One run as the JSON output and the medians read it."""
    return {
        "direction": direction,
        "artifact": ref.name,
        "mode": "packs" if packs else "single",
        "objects": objects,
        "mib": round(size / (1 << 20), 1),
        "seconds": round(wall, 3),
        "server_cpu_s": round(server, 3),
        "client_cpu_s": round(mine, 3),
    }


def one_pull(
    registry: Any, dest: Path, ns: str, ref: RefName, key: SigningKey, *, packs: bool
) -> dict[str, Any]:
    home = trusting_home(dest, ns, key.public_key)
    with registry.client() as client:
        if not packs:
            client.info()["limits"].pop("max_fetch_objects", None)
        os.sync()
        server, mine, start = registry.cpu_seconds(), cpu_self(), time.perf_counter()
        report = pull(home, client, RefName.parse(f"{ns}/{ref.name}"))
        wall = time.perf_counter() - start
        server, mine = registry.cpu_seconds() - server, cpu_self() - mine
    assert report.objects_downloaded == report.objects_total, report
    shutil.rmtree(dest)
    return measured(
        "pull", ref, packs, report.objects_downloaded, report.bytes_downloaded, wall, server, mine
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--small", type=int, default=400)
    parser.add_argument("--small-bytes", type=int, default=4096)
    parser.add_argument("--large", type=int, default=64)
    parser.add_argument("--large-mib", type=int, default=16)
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kvreg-packs-") as tmp:
        root = Path(tmp)
        home = Home(root / "home")
        key = SigningKey.generate()
        save_trust_policy(TrustPolicy({"local": [key.public_key]}), home.trust_path)
        refs = [
            build(home, key, "small", args.small, args.small_bytes, 1),
            build(home, key, "large", args.large, args.large_mib << 20, 2),
        ]
        with running_registry(root / "registry", "sqlite-folder") as registry:
            n = 0
            for round_ in range(args.repeat):
                for ref in refs:
                    for packs in (True, False) if round_ % 2 == 0 else (False, True):
                        n += 1
                        run = one_push(registry, home, ref, key, packs=packs, n=n)
                        runs.append(run)
                        print(json.dumps(run), flush=True)
            source = {r["artifact"]: r["namespace"] for r in runs}  # each artifact's first push
            for round_ in range(args.repeat):
                for ref in refs:
                    for packs in (True, False) if round_ % 2 == 0 else (False, True):
                        n += 1
                        run = one_pull(registry, root / f"pull-{n}", source[ref.name], ref, key, packs=packs)
                        runs.append(run)
                        print(json.dumps(run), flush=True)
    print("\nmedians (server CPU s, client CPU s, seconds):")
    for direction, name, mode in itertools.product(("push", "pull"), ("small", "large"), ("packs", "single")):
        mine = [r for r in runs if (r["direction"], r["artifact"], r["mode"]) == (direction, name, mode)]
        if mine:
            server = statistics.median(r["server_cpu_s"] for r in mine)
            client = statistics.median(r["client_cpu_s"] for r in mine)
            print(
                f"  {direction} {name:5} {mode:6}  server {server:6.3f}  client {client:6.3f}"
                f"  wall {statistics.median(r['seconds'] for r in mine):6.3f}"
                f"  (server: {', '.join(str(r['server_cpu_s']) for r in mine)})"
            )
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
