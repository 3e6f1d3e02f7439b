"""When a pull fsyncs its objects: after each download, or all after the last one.

A real ``kvreg serve`` (SQLite + folder, from ``bench/push_pull.py``) holds ``--objects``
random objects of ``--object-mib`` (PUT with curl). The kvreg client then downloads them
all with ``RegistryClient.get_object_to`` on ``--jobs`` threads into a fresh folder, two
ways, alternating, ``--rounds`` times each:

- **each**: every download fsyncs its file before the thread takes the next object (what
  a pull did before ``kvreg.remote.staging.Staging.settle``);
- **after**: downloads with ``fsync=False``, then every file is fsynced, one after the
  other, once the last download is done (what ``Staging.settle`` does).

Every file must hash to its object. Prints the wall time and the client's CPU seconds of
each round, the medians, and after / each. Timing only: docs/benchmarks.md § Push and pull
(item 14) has the figures.

    .venv/bin/python bench/pull_fsync.py [--objects 64] [--object-mib 16] [--rounds 3] [--jobs 4]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import push_pull as pp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=64)
    ap.add_argument("--object-mib", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=4)
    args = ap.parse_args()
    curl = shutil.which("curl")
    if curl is None:
        sys.exit("curl is needed (apt-get install curl)")

    from kvreg.core.digest import Digest
    from kvreg.core.keys import SigningKey

    out = ROOT / "bench" / "out"
    work = Path(tempfile.mkdtemp(prefix="pull-fsync-", dir=out if out.is_dir() else None))
    try:
        objects: list[tuple[Digest, Path]] = []
        for _ in range(args.objects):
            data = os.urandom(args.object_mib << 20)
            digest = Digest.from_hex(hashlib.sha256(data).hexdigest())
            path = work / digest.hex
            path.write_bytes(data)
            objects.append((digest, path))
        with pp.running_registry(work / "registry", "sqlite-folder") as registry:
            ns = registry.namespace("bench", SigningKey.generate().public_key)
            base = f"{registry.url}/api/v1/namespaces/{ns}/objects"
            pp.curl_registry(curl, registry, work, 4, [(f"{base}/{d}", p) for d, p in objects], upload=True)
            results: dict[str, list[tuple[float, float]]] = {"each": [], "after": []}
            for r in range(args.rounds):
                for mode in ("each", "after"):
                    got = work / "got"
                    shutil.rmtree(got, ignore_errors=True)
                    got.mkdir()
                    pp.settle()
                    with registry.client() as client:
                        cpu, started = time.process_time(), time.perf_counter()

                        def fetch(item: tuple[Digest, Path], client=client, got=got, mode=mode) -> None:
                            digest = item[0]
                            done = client.get_object_to(ns, digest, got / digest.hex, fsync=mode == "each")
                            if done.digest != digest:
                                sys.exit(f"{digest}: the download hashes to {done.digest}")

                        with ThreadPoolExecutor(args.jobs) as pool:
                            list(pool.map(fetch, objects))
                        if mode == "after":
                            for digest, _ in objects:
                                fd = os.open(got / digest.hex, os.O_RDONLY)
                                try:
                                    os.fsync(fd)
                                finally:
                                    os.close(fd)
                        seconds, used = time.perf_counter() - started, time.process_time() - cpu
                    results[mode].append((seconds, used))
                    print(f"round {r + 1} {mode:5}: {seconds:.2f} s, client {used:.2f} CPU s", flush=True)
        medians = {mode: statistics.median(s for s, _ in runs) for mode, runs in results.items()}
        print(
            f"medians: fsync after each download {medians['each']:.2f} s, all after the last "
            f"{medians['after']:.2f} s; after / each {medians['after'] / medians['each']:.2f}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
