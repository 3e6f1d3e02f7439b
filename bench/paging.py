"""Disk paging: the peak memory of a graft does not grow with the library; under a budget a
graft pulls and keeps only what it needs.

One run:

1. **The library**: a Llama-shaped model built by ``kvreg.engine.tiny`` with small
   dimensions (2 layers, 1 KV head of 16, float32: 256 bytes of KV per token; seeded
   random weights) deposits distinct seeded texts (random words of the tokenizer's
   corpus, seed ``--seed`` + artifact index) of ``--artifact-tokens`` tokens each, with
   real deposits (``compute_artifact`` → ``build_manifest`` → ``sign_envelope`` →
   ``store_artifact``: the code path of ``kvreg deposit``), until the library holds
   ``--tokens`` tokens (default 2,850,000, the reference's 2.85M).
2. **Peak memory of a graft** when the library holds 10%, 50% and 100% of its tokens:
   ``--grafts`` artifacts chosen at random (seeded) among those deposited so far are
   each grafted whole (every chunk read and hashed, the probe recomputing the last
   block) in a **fresh subprocess**, which reports its RSS high-water mark
   (``VmHWM`` of ``/proc/self/status``) after loading the model and after the graft.
   Goal (issue 6): peak memory flat (within 10%) as the library grows.
3. **A budget below the library**: a real registry (``kvreg serve``, SQLite +
   folder, on loopback) receives ``--remote-artifacts`` artifacts chosen at random;
   a fresh store with ``store.max-bytes`` = ``--budget-fraction`` of their bytes pulls
   them all with ``lazy=True`` (manifests and tokens only), then makes
   ``--budget-grafts`` grafts of artifacts chosen at random, each a prefix of k random
   blocks: ``kvreg.remote.ondemand.ensured`` fetches
   the objects the graft reads, verified, and evicts others to stay under the budget;
   the graft runs in a fresh subprocess as in 2. Checked: only needed objects are
   fetched, the bytes fetched equal the sizes of the needed chunks that were absent,
   and the store is under its budget after every graft.

Prints a table, the exact command, then the report as one JSON line; exits 1 if a
check fails. ``--quick`` is the smoke test's small run; its figures mean nothing.

Usage::

    .venv/bin/python bench/paging.py [--tokens 2850000] [--artifact-tokens 4096]
        [--block-size 256] [--grafts 5] [--remote-artifacts 16] [--budget-grafts 12]
        [--budget-fraction 0.1]
        [--seed 0] [--quick] [--out bench/out]
"""

from __future__ import annotations

import os

# Prefill with torch on a shared host: OpenMP's busy-waiting costs a lot. Set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from kvreg.fileio.keyfiles import save_trust_policy  # noqa: E402
from push_pull import (  # noqa: E402  (bench helpers: model cache, depositor, registry)
    Depositor,
    _cached_model,
    load,
    log,
    running_registry,
)

DEFAULT_OUT = ROOT / "bench" / "out"
NAMESPACE = "paging"
MODEL: dict[str, int] = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
CHECKPOINTS = (0.10, 0.50, 1.00)
FLAT_GOAL = 0.10


def model_dir(out: Path, max_positions: int) -> Path:
    """The small Llama (256 bytes of float32 KV per token), cached under ``out``."""
    spec = {**MODEL, "max_positions": max_positions}

    def build(dest: Path) -> None:
        from kvreg.engine.tiny import build_model_dir

        build_model_dir(dest, "llama", seed=0, **spec)

    return _cached_model(out, f"model-paging-{max_positions}", {"arch": "llama", "seed": 0, **spec}, build)


def seeded_tokens(lm: Any, n: int, seed: int) -> list[int]:
    """Exactly ``n`` token ids of a text of random corpus words (distinct per seed)."""
    from kvreg.engine.tiny import CORPUS

    words = sorted(set(CORPUS.split()))
    rng = random.Random(seed)
    text = f"[{seed}]"
    while True:
        text += " " + " ".join(rng.choice(words) for _ in range(max(64, n // 2)))
        tokens = lm.encode(text, first=True)
        if len(tokens) >= n:
            return list(tokens[:n])


def vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


# --- the child: one graft in a fresh process -------------------------------------------------


def child_graft(home_dir: str, model: str, ref: str, blocks: int, block_size: int) -> None:
    """Graft ``ref`` (its first ``blocks`` chunks; 0: all) and print memory figures as JSON."""
    from kvreg.engine.graft import graft
    from kvreg.store.artifacts import open_artifact, read_tokens
    from kvreg.store.home import Home

    home = Home(home_dir)
    lm = load(Path(model), block_size, home.cache_dir)
    artifact = open_artifact(home, ref)
    tokens = read_tokens(home, artifact.manifest)
    before = vm_hwm_kib()
    t = time.perf_counter()
    outcome = graft(lm, home, artifact.manifest, tokens, blocks=blocks or None)
    seconds = time.perf_counter() - t
    after = vm_hwm_kib()
    print(
        json.dumps(
            {
                "ref": ref,
                "chunks_read": outcome.plan.chunks,
                "bytes_read": outcome.chunks.bytes_read,
                "graft_tokens": outcome.plan.graft_tokens,
                "vm_hwm_before_graft_kib": before,
                "vm_hwm_kib": after,
                "graft_seconds": round(seconds, 6),
            }
        )
    )


def run_child(home: Path, model: Path, ref: str, blocks: int, block_size: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child-graft",
        str(home),
        str(model),
        ref,
        str(blocks),
        str(block_size),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"graft of {ref} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# --- the bench ---------------------------------------------------------------------------------


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    peaks = [r["vm_hwm_kib"] for r in rows]
    deltas = [r["vm_hwm_kib"] - r["vm_hwm_before_graft_kib"] for r in rows]
    return {
        "grafts": len(rows),
        "peak_kib_median": statistics.median(peaks),
        "peak_kib_max": max(peaks),
        "graft_delta_kib_median": statistics.median(deltas),
        "bytes_read_median": statistics.median(r["bytes_read"] for r in rows),
    }


def build_and_measure(args: argparse.Namespace, work: Path, checks: dict[str, bool]) -> dict[str, Any]:
    from kvreg.core.names import RefName

    model = model_dir(args.out, max(args.artifact_tokens, 256))
    depositor = Depositor.create(work / "library", NAMESPACE)
    lm = load(model, args.block_size, depositor.home.cache_dir)
    rng = random.Random(args.seed)
    targets = [int(f * args.tokens) for f in CHECKPOINTS]
    refs: list[str] = []
    tokens_total = 0
    deposit_seconds = 0.0
    levels: list[dict[str, Any]] = []
    for fraction, target in zip(CHECKPOINTS, targets, strict=True):
        t = time.perf_counter()
        while tokens_total < target:
            i = len(refs)
            tokens = seeded_tokens(lm, args.artifact_tokens, args.seed * 1_000_003 + i)
            depositor.deposit(lm, tokens, f"a{i:05d}", f"seeded text {i}")
            refs.append(f"{NAMESPACE}/a{i:05d}")
            tokens_total += len(tokens)
        deposit_seconds += time.perf_counter() - t
        usage = depositor.home.objects.usage()
        log(f"library at {fraction:.0%}: {len(refs)} artifacts, {tokens_total:,} tokens, {usage.bytes:,} B")
        rows = [
            run_child(depositor.home.root, model, ref, 0, args.block_size)
            for ref in rng.sample(refs, min(args.grafts, len(refs)))
        ]
        levels.append(
            {
                "fraction": fraction,
                "artifacts": len(refs),
                "tokens": tokens_total,
                "bytes_on_disk": usage.bytes,
                "objects": usage.objects,
                **summarize(rows),
                "rows": rows,
            }
        )
    peaks = [lv["peak_kib_median"] for lv in levels]
    spread = (max(peaks) - min(peaks)) / min(peaks)
    checks["library_reached_target_tokens"] = tokens_total >= args.tokens
    checks["every_graft_read_its_whole_artifact"] = all(
        r["graft_tokens"] == args.artifact_tokens for lv in levels for r in lv["rows"]
    )
    first = RefName.parse(refs[0])
    checks["library_refs_resolve"] = depositor.home.refs.get(first) is not None
    return {
        "model": {**MODEL, "kv_bytes_per_token": 2 * MODEL["num_layers"] * MODEL["num_kv_heads"] * 16 * 4},
        "model_dir": str(model),
        "artifacts": len(refs),
        "tokens": tokens_total,
        "deposit_seconds": round(deposit_seconds, 3),
        "levels": levels,
        "peak_spread": round(spread, 4),
        "peak_flat_within_goal": spread <= FLAT_GOAL,
        "depositor": depositor,
        "refs": refs,
        "lm": lm,
    }


def budget_run(
    args: argparse.Namespace, work: Path, lib: dict[str, Any], checks: dict[str, bool]
) -> dict[str, Any]:
    from kvreg.core.names import RefName
    from kvreg.core.trust import TrustPolicy
    from kvreg.remote import push
    from kvreg.remote.ondemand import ensured, needed_for_graft
    from kvreg.remote.pulling import pull
    from kvreg.store import settings_file
    from kvreg.store.artifacts import open_artifact
    from kvreg.store.home import Home

    depositor: Depositor = lib["depositor"]
    rng = random.Random(args.seed + 1)
    chosen = sorted(rng.sample(lib["refs"], min(args.remote_artifacts, len(lib["refs"]))))
    with running_registry(work / "registry", "sqlite-folder") as registry:
        registry.namespace(NAMESPACE, depositor.key.public_key)
        with registry.client() as client:
            for ref in chosen:
                push(depositor.home, client, RefName.parse(ref), trust=None)
            home = Home(work / "budget-home")
            home.ensure()
            policy = TrustPolicy()
            policy.allow(NAMESPACE, depositor.key.public_key)
            save_trust_policy(policy, home.trust_path)
            library_bytes = sum(
                depositor.home.objects.size(d)
                for ref in chosen
                for d in open_artifact(depositor.home, ref).manifest.object_digests()
            )
            budget = int(library_bytes * args.budget_fraction)
            settings_file.set_value(home, settings_file.MAX_BYTES_KEY, budget)
            t = time.perf_counter()
            for ref in chosen:
                pull(home, client, RefName.parse(ref), lazy=True, trust=policy)
            lazy_seconds = time.perf_counter() - t
            after_lazy = home.objects.usage().bytes
            rows: list[dict[str, Any]] = []
            for _ in range(args.budget_grafts):
                ref = rng.choice(chosen)
                manifest = open_artifact(home, ref).manifest
                k = rng.randint(1, len(manifest.chunks))
                needed = needed_for_graft(manifest, k)
                absent = [d for d in needed if not home.objects.has(d)]
                with ensured(home, client, NAMESPACE, manifest, needed) as got:
                    fetched, bytes_fetched, evicted = list(got.fetched), got.bytes_fetched, len(got.evicted)
                store_after = home.objects.usage().bytes
                child = run_child(home.root, lib["model_dir_path"], ref, k, args.block_size)
                rows.append(
                    {
                        "ref": ref,
                        "blocks": k,
                        "chunks": len(manifest.chunks),
                        "fetched": len(fetched),
                        "bytes_fetched": bytes_fetched,
                        "bytes_needed_absent": sum(home.objects.size(d) for d in absent),
                        "only_needed": set(fetched) <= {str(d) for d in needed},
                        "evicted": evicted,
                        "store_bytes": store_after,
                        **child,
                    }
                )
    checks["budget_only_needed_objects_fetched"] = all(r["only_needed"] for r in rows)
    checks["budget_bytes_fetched_equal_needed_absent"] = all(
        r["bytes_fetched"] == r["bytes_needed_absent"] for r in rows
    )
    checks["budget_store_under_budget_after_every_graft"] = all(r["store_bytes"] <= budget for r in rows)
    checks["budget_graft_read_only_its_blocks"] = all(r["chunks_read"] == r["blocks"] for r in rows)
    return {
        "artifacts": len(chosen),
        "library_bytes": library_bytes,
        "budget_bytes": budget,
        "store_bytes_after_lazy_pulls": after_lazy,
        "lazy_pull_seconds": round(lazy_seconds, 3),
        "max_store_bytes": max(r["store_bytes"] for r in rows),
        "evicted_total": sum(r["evicted"] for r in rows),
        "bytes_fetched_total": sum(r["bytes_fetched"] for r in rows),
        **summarize(rows),
        "rows": rows,
    }


def render(report: dict[str, Any]) -> str:
    def mib(kib: float) -> str:
        return f"{kib / 1024:.1f}"

    lines = [
        f"library: {report['library']['artifacts']} artifacts, {report['library']['tokens']:,} tokens of KV "
        f"({report['library']['model']['kv_bytes_per_token']} B/token), deposited in "
        f"{report['library']['deposit_seconds']:.0f} s",
        "",
        f"{'library':>8} {'artifacts':>9} {'tokens':>11} {'on disk MiB':>11} {'grafts':>6} "
        f"{'peak RSS MiB (med/max)':>22} {'graft +RSS MiB':>14}",
    ]
    for lv in report["library"]["levels"]:
        on_disk = lv["bytes_on_disk"] / 2**20
        lines.append(
            f"{lv['fraction']:>8.0%} {lv['artifacts']:>9} {lv['tokens']:>11,} {on_disk:>11.1f} "
            f"{lv['grafts']:>6} {mib(lv['peak_kib_median']) + ' / ' + mib(lv['peak_kib_max']):>22} "
            f"{mib(lv['graft_delta_kib_median']):>14}"
        )
    lines.append(
        f"peak spread across sizes: {report['library']['peak_spread']:.1%} "
        f"(goal <= {FLAT_GOAL:.0%}: {'met' if report['library']['peak_flat_within_goal'] else 'missed'})"
    )
    b = report.get("budget")
    if b is not None:
        lines += [
            "",
            f"budget run: {b['artifacts']} artifacts ({b['library_bytes'] / 2**20:.1f} MiB) on a registry, "
            f"store.max-bytes {b['budget_bytes'] / 2**20:.2f} MiB; lazy pulls left "
            f"{b['store_bytes_after_lazy_pulls'] / 2**20:.2f} MiB in the store",
            f"{'artifact':>14} {'blocks':>9} {'fetched':>7} {'KiB fetched':>11} {'evicted':>7} "
            f"{'store MiB':>9} {'peak RSS MiB':>12}",
        ]
        for r in b["rows"]:
            lines.append(
                f"{r['ref']:>14} {str(r['blocks']) + '/' + str(r['chunks']):>9} {r['fetched']:>7} "
                f"{r['bytes_fetched'] / 1024:>11.1f} {r['evicted']:>7} {r['store_bytes'] / 2**20:>9.2f} "
                f"{mib(r['vm_hwm_kib']):>12}"
            )
        lines.append(
            f"fetched {b['bytes_fetched_total']:,} B in all, evicted {b['evicted_total']} objects; "
            f"max store bytes {b['max_store_bytes']:,} (budget {b['budget_bytes']:,})"
        )
    lines += ["", "checks: " + ", ".join(f"{k}={v}" for k, v in report["checks"].items())]
    lines.append(f"command: {report['command']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--tokens", type=int, default=2_850_000, help="Library size in tokens.")
    p.add_argument("--artifact-tokens", type=int, default=4096)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--grafts", type=int, default=5, help="Grafts per library size.")
    p.add_argument("--remote-artifacts", type=int, default=16)
    p.add_argument("--budget-grafts", type=int, default=12, help="Grafts in the budget run.")
    p.add_argument("--budget-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-budget", action="store_true", help="Skip the budget run (no registry).")
    p.add_argument("--quick", action="store_true", help="A small run for the smoke test.")
    p.add_argument("--keep", action="store_true", help="Keep the library and stores under --out.")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--json", action="store_true", help="Only the JSON report on stdout.")
    args = p.parse_args(argv)
    if args.quick:
        args.tokens, args.artifact_tokens, args.block_size = 40_000, 1024, 128
        # one graft a library size: each is a fresh process (torch import + model load, seconds)
        args.grafts, args.remote_artifacts, args.budget_grafts, args.budget_fraction = 1, 4, 3, 0.6
    if args.tokens <= 0 or args.artifact_tokens <= 0 or args.block_size <= 0:
        p.error("sizes must be positive")
    if not 0 < args.budget_fraction < 1:
        p.error("--budget-fraction must be between 0 and 1")
    return args


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["--child-graft"]:
        home, model, ref, blocks, block_size = raw[1:6]
        child_graft(home, model, ref, int(blocks), int(block_size))
        return 0
    args = parse_args(raw)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / ("paging-quick" if args.quick else "paging")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    checks: dict[str, bool] = {}
    started = time.perf_counter()
    try:
        lib = build_and_measure(args, work, checks)
        lib["model_dir_path"] = Path(lib["model_dir"])
        budget = None if args.no_budget else budget_run(args, work, lib, checks)
        for key in ("depositor", "refs", "lm", "model_dir_path"):
            lib.pop(key)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "bench": "paging",
        "quick": args.quick,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds": round(time.perf_counter() - started, 1),
        "library": lib,
        "budget": budget,
        "checks": checks,
        "ok": all(checks.values()),
        "command": shlex.join([".venv/bin/python", "bench/paging.py", *raw]),
    }
    if not args.json:
        print(render(report))
    print(json.dumps(report, sort_keys=True))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
