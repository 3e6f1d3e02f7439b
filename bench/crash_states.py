"""Power loss, explored: every crash state of kvreg's store and registry, as ALICE did for git.

Each workload (``bench/crashlab/workloads.py``: deposit, prefix-sharing deposit, fresh and resumed
pull, gc, eviction, object uploads by PUT and by pack, manifest and ref compare-and-swap, audit
appends and checkpoints, a client pinning a checkpoint) runs once under ``strace -f``; the trace
becomes logical file-system operations on the folders it writes; the explorer builds the on-disk
states a power cut could leave under a persistence model (``alice``: ALICE's weak default model;
``ext4-ordered``: ext4 with ``data=ordered``), chosen to cover every acknowledgement, every
fsync boundary and every directory operation first, within a budget; on a copy of each state it
runs kvreg's own recovery and checks (``bench/crashlab/checks.py``). Expected: zero violations.

Prints a table, or with ``--json`` one JSON object::

    {"workloads": {NAME: {"operations", "states_explored", "states_checked", "violations",
                          "seconds", ...}}, "models": [...], "host": {...}, ...}

``--quick`` (what ``make test`` runs, ``tests/crash/test_crash_states.py``): the ``alice`` model,
30 states per workload, about 3 minutes on 2 cores. The full form (the default): both models,
``--states`` (default 400) per workload and model. ``--fault NAME`` runs a deliberately broken
build (``bench/crashlab/faults.py``), which must be caught. Exits 1 on any violation.

    .venv/bin/python bench/crash_states.py [--quick] [--json] [--model alice|ext4-ordered|all]
        [--workloads deposit-new,gc,...] [--states N] [--seconds S] [--fault NAME] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from crashlab import checks, explore, faults, workloads  # noqa: E402
from crashlab.persistence import MODELS  # noqa: E402


def host() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    strace = subprocess.run(["strace", "-V"], capture_output=True, text=True, check=False).stdout.split("\n")[
        0
    ]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "strace": strace,
    }


def load_base(work: Path) -> workloads.Base:
    """The workloads' starting point under ``work/base``, built once and reused."""
    saved = work / "base.json"
    if saved.is_file():
        data = json.loads(saved.read_text())
        for key in ("root", "model", "keys_home", "depositor", "registry", "puller"):
            data[key] = Path(data[key])
        data["texts"] = {k: Path(v) for k, v in data["texts"].items()}
        return workloads.Base(**data)
    shutil.rmtree(work / "base", ignore_errors=True)
    base = workloads.build_base(work / "base")
    saved.write_text(json.dumps(asdict(base), default=str))
    return base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the alice model, 30 states per workload")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--model", choices=[*MODELS, "all"], help="default: alice with --quick, else all")
    ap.add_argument("--workloads", help=f"comma-separated, of: {', '.join(workloads.WORKLOADS)}")
    ap.add_argument("--states", type=int, help="distinct states per workload and model (30 quick, 400 full)")
    ap.add_argument("--seconds", type=float, help="time per workload and model (120 quick, 1200 full)")
    ap.add_argument("--seed", type=int, default=0, help="of the random states")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes that check states")
    ap.add_argument("--fault", choices=sorted(faults.FAULTS), help="a deliberately broken build")
    ap.add_argument(
        "--work", type=Path, help="keep the work here (the base is reused); default: a temp folder"
    )
    args = ap.parse_args()

    models = (
        [args.model]
        if args.model not in (None, "all")
        else (["alice"] if args.quick and not args.model else list(MODELS))
    )
    names = args.workloads.split(",") if args.workloads else list(workloads.WORKLOADS)
    unknown = [n for n in names if n not in workloads.WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads: {', '.join(unknown)}")
    budget = explore.Budget(
        args.states or (30 if args.quick else 400),
        args.seconds or (120.0 if args.quick else 1200.0),
        args.seed,
        max(1, args.jobs),
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="crash-states-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report: dict[str, Any] = {
        "quick": args.quick,
        "models": models,
        "budget": {
            "states": budget.states,
            "seconds": budget.seconds,
            "seed": budget.seed,
            "jobs": budget.jobs,
        },
        "fault": args.fault,
        "host": host(),
        "workloads": {},
    }
    try:
        base = load_base(work)
        report["base_seconds"] = round(time.monotonic() - started, 1)
        for name in names:
            folder = work / "runs" / (f"{name}-{args.fault}" if args.fault else name)
            shutil.rmtree(folder, ignore_errors=True)
            rec = workloads.record(base, name, folder, fault=args.fault)
            checker = checks.checker_for(rec.kinds)
            entry: dict[str, Any] = {
                "roots": rec.kinds,
                "syscalls": rec.trace.syscalls,
                "operations": 0,
                "states_explored": 0,
                "states_checked": 0,
                "violations": 0,
                "record_seconds": round(rec.seconds, 1),
                "seconds": round(rec.seconds, 1),
                "models": {},
                "findings": [],
            }
            for model in models:
                res = explore.explore(rec.trace, model, checker, rec.names, budget, scratch=work)
                entry["operations"] = res.operations
                entry["states_explored"] += res.states_explored
                entry["states_checked"] += res.states_checked
                entry["violations"] += len(res.violations)
                entry["seconds"] = round(entry["seconds"] + res.seconds, 1)
                entry["models"][model] = {
                    "units": res.units,
                    "states_explored": res.states_explored,
                    "states_checked": res.states_checked,
                    "violations": len(res.violations),
                    "seconds": round(res.seconds, 1),
                    "by_strategy": res.by_strategy,
                    "coverage": res.coverage,
                }
                entry["findings"] += [{"model": model, **v.to_dict()} for v in res.violations[:5]]
            report["workloads"][name] = entry
            if not args.json:
                print(
                    f"{name:16} ops {entry['operations']:5}  explored {entry['states_explored']:5}  "
                    f"checked {entry['states_checked']:5}  violations {entry['violations']:3}  "
                    f"{entry['seconds']:7.1f} s",
                    flush=True,
                )
                for finding in entry["findings"][:3]:
                    print(f"    [{finding['model']}] {finding['state']}: {finding['problems'][0][:200]}")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    table = report["workloads"].values()
    report["totals"] = {
        key: sum(w[key] for w in table)
        for key in ("operations", "states_explored", "states_checked", "violations")
    }
    report["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        t = report["totals"]
        print(
            f"total: {t['states_checked']} states checked ({t['states_explored']} explored), "
            f"{t['violations']} violations, {report['seconds']} s"
        )
    return 1 if report["totals"]["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
