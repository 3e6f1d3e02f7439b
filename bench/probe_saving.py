"""What remembering a passed witness probe saves: repeat grafts with ``--probe once`` and ``always``.

One process, one model loaded once in a ``kvreg engine serve`` host (``kvreg.app.serving.host``:
the server's path without the HTTP), one store holding the 8-shot GSM8K chat prefix
(train lines 1-8), deposited and signed before the clock starts. Two request classes, each
answered with ``max_tokens`` 1 so the graft dominates:

- **repeat**: the prefix itself (the artifact grafted whole; with the probe remembered, the
  stored witness logits give the next token);
- **shared**: the prefix and a new question (the prefix grafted, the question prefilled).

The two probe policies alternate request by request (always, once, always, once, ...) over
the same artifact, after one graft that runs and remembers the probe, so the host's noise falls
on both alike. Reported per class and policy: p50 and p95 of the graft phase (read, probe,
cache) and of the whole request, and the saving of ``once`` over ``always``. Every answer's
token must be the same under both policies (the run exits 1 otherwise).

Usage::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/probe_saving.py [--model smollm2] [--rounds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rounds", type=int, default=10, help="requests per class and policy")
    parser.add_argument("--shots", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "probe_saving")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from kvreg.app.engine_options import EngineOptions
    from kvreg.app.flywheel.gsm8k import few_shot_messages, few_shot_problems, load_problems
    from kvreg.app.models import resolve_or_import
    from kvreg.app.serving.host import Job, ModelHost
    from kvreg.core.keys import SigningKey
    from kvreg.core.names import RefName
    from kvreg.core.trust import TrustPolicy
    from kvreg.engine import deposit
    from kvreg.engine.chat import chat_prompt
    from kvreg.fileio.keyfiles import save_trust_policy
    from kvreg.store.home import Home

    shutil.rmtree(args.out, ignore_errors=True)
    home = Home(args.out / "home").ensure()
    key = SigningKey.generate()
    policy = TrustPolicy()
    policy.allow("bench", key.public_key)
    save_trust_policy(policy, home.trust_path)
    host = ModelHost(home, str(resolve_or_import(args.model)), EngineOptions(block_size=args.block_size))
    lm = host.lm
    shots = few_shot_problems()[: args.shots]
    prefix_messages = few_shot_messages(shots, "")[:-1]
    prefix = chat_prompt(lm, prefix_messages)
    deposit.deposit(lm, home, text="", prompt=prefix, ref=RefName("bench", "prefix"), key=key)
    question = load_problems("test", [1])[0].question
    classes = {
        "repeat": host.chat_tokens(prefix_messages),
        "shared": host.chat_tokens(few_shot_messages(shots, question)),
    }

    def answer(prompt: list[int], probe: str) -> dict[str, Any]:
        host.probe = probe
        res = host.run(Job(prompt=prompt, stream=host.new_stream(1, ()), temperature=0.0))
        facts = res.facts()
        assert facts["mode"] == "prefix", facts["reason"]
        t = facts["timings"]
        return {
            "graft": t.get("read_seconds", 0.0) + t.get("graft_seconds", 0.0),
            "total": t["total_seconds"],
            "skipped": bool((facts["probe"] or {}).get("skipped")),
            "tokens": list(res.job.stream.tokens),
        }

    report: dict[str, Any] = {
        "model": args.model,
        "rounds": args.rounds,
        "block_size": lm.config.block_size,
        "threads": lm.config.settings.threads,
    }
    same = True
    for name, prompt in classes.items():
        answer(prompt, "once")  # probes, passes, and is remembered
        runs: dict[str, list[dict[str, Any]]] = {"always": [], "once": []}
        for _ in range(args.rounds):
            for probe in ("always", "once"):
                runs[probe].append(answer(prompt, probe))
        same = same and len({tuple(r["tokens"]) for r in runs["always"] + runs["once"]}) == 1
        part: dict[str, Any] = {"prompt_tokens": len(prompt)}
        for probe, rs in runs.items():
            graft, total = [r["graft"] for r in rs], [r["total"] for r in rs]
            part[probe] = {
                "graft_p50": statistics.median(graft),
                "graft_p95": pct(graft, 0.95),
                "total_p50": statistics.median(total),
                "total_p95": pct(total, 0.95),
                "probes_skipped": sum(r["skipped"] for r in rs),
            }
        part["total_p50_saved"] = part["always"]["total_p50"] - part["once"]["total_p50"]
        part["total_p50_ratio"] = part["always"]["total_p50"] / part["once"]["total_p50"]
        report[name] = part
    host.close()
    report["same_tokens"] = same
    if not args.json:
        head = f"{'class':7} {'probe':7} {'graft p50':>10} {'graft p95':>10}"
        print(head + f" {'total p50':>10} {'total p95':>10}")
        for name in classes:
            for probe in ("always", "once"):
                s = report[name][probe]
                print(
                    f"{name:7} {probe:7} {s['graft_p50']:10.4f} {s['graft_p95']:10.4f} "
                    f"{s['total_p50']:10.4f} {s['total_p95']:10.4f}"
                )
            part = report[name]
            print(
                f"{name}: {part['prompt_tokens']} prompt tokens; --probe once saves "
                f"{part['total_p50_saved']:.4f} s per request ({part['total_p50_ratio']:.2f}x)"
            )
    print(json.dumps(report))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
