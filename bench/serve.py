"""``kvreg engine serve`` under load: latency per request class, cache on and off, 1 and 4 clients.

One process, one model loaded once (``--model``, default ``smollm2``), one real server on
loopback (``kvreg.app.serving``: the FastAPI app under uvicorn in a thread), the real
``openai`` client streaming every request, so the figures come from the path users use.
The store under ``--out`` holds, deposited and signed before the clock starts:

- the 8-shot GSM8K chat prefix (train lines 1-8, ``kvreg.app.flywheel.gsm8k``), unverified;
- for the first ``--problems`` test questions, the full 8-shot prompt with the question and
  its reference solution, verified ``pass`` (what the flywheel deposits for a solved problem).

Request classes (streamed chat completions, ``temperature`` 0, ``--max-tokens``):

- **repeat**: a question whose verified solution is in the store (knowledge: grafted whole);
- **shared**: an 8-shot question that is not (the prefix grafted, the question prefilled);
- **unseen**: a bare question with no few-shot examples (nothing to graft).

The shared class runs once more with ``--probe always`` (the witness probe on every graft)
and with ``--probe once`` (a passed probe remembered per artifact and config), to show
what remembering saves.

Each class runs with the server's cache on (``--mode auto``) and then off (the same server
switched to ``off``: no load between). Reported per class and mode: time to first token
and total latency (p50, p95), and whether the streamed text matched the uncached run
(shared and unseen must). Then requests per second with 1 and 4 concurrent clients over
the shared class, cache on, and the process CPU seconds per answer. Last, one one-shot
``kvreg ask`` process per class, timed whole (imports, model load, answer), beside them.

Usage::

    .venv/bin/python bench/serve.py [--model smollm2] [--problems 4] [--max-tokens 16] [--json] [--quick]

``--quick`` runs 1 problem, 2 shots, 2 tokens and skips the one-shot processes (a smoke
run; its timings mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODEL_ID = "bench"
PASS = {"verifier": "gsm8k.reference", "verdict": "pass", "evidence": {"source": "GSM8K reference solution"}}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def start_server(home: Any, model: str, block_size: int | None) -> tuple[Any, Any, Any, str]:
    import uvicorn

    from kvreg.app.engine_options import EngineOptions
    from kvreg.app.serving.host import ModelHost
    from kvreg.app.serving.server import bind, create_app

    host = ModelHost(home, model, EngineOptions(block_size=block_size), name=MODEL_ID)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(host), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    return host, server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def deposit_all(host: Any, home: Any, shots: list[Any], repeats: list[Any]) -> None:
    from kvreg.app.flywheel.gsm8k import assistant_content, few_shot_messages
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
    lm = host.lm
    prefix = few_shot_messages(shots, "")[:-1]  # the examples alone, ending with the assistant's turn
    deposit.deposit(
        lm, home, text="", prompt=chat_prompt(lm, prefix), ref=RefName("bench", "prefix"), key=key
    )
    for i, p in enumerate(repeats):
        prompt = chat_prompt(lm, few_shot_messages(shots, p.question))
        deposit.deposit(
            lm,
            home,
            text=assistant_content(p),
            prompt=prompt,
            ref=RefName("bench", f"solved-{i}"),
            key=key,
            verification=PASS,
        )


def one_request(url: str, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
    t0 = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    facts: dict[str, Any] = {}
    stream = client.chat.completions.create(
        model=MODEL_ID,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
    )
    for chunk in stream:
        if not chunk.choices:
            continue
        text = chunk.choices[0].delta.content
        if text and first is None:
            first = time.perf_counter() - t0
        pieces.append(text or "")
        extra = chunk.model_extra or {}
        facts = extra.get("kvreg", facts)
    total = time.perf_counter() - t0
    return {
        "ttft": first if first is not None else total,
        "total": total,
        "text": "".join(pieces),
        "mode": facts.get("mode"),
        "cached_tokens": facts.get("cached_tokens"),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ttft = [r["ttft"] for r in runs]
    total = [r["total"] for r in runs]
    return {
        "requests": len(runs),
        "ttft_p50": statistics.median(ttft),
        "ttft_p95": pct(ttft, 0.95),
        "total_p50": statistics.median(total),
        "total_p95": pct(total, 0.95),
        "modes": sorted({str(r["mode"]) for r in runs}),
        "cached_tokens_p50": statistics.median([r["cached_tokens"] or 0 for r in runs]),
    }


def throughput(
    url: str, prompts: list[list[dict[str, str]]], clients: int, max_tokens: int
) -> dict[str, Any]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        runs = list(pool.map(lambda m: one_request(url, m, max_tokens), prompts))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "clients": clients,
        "requests": len(runs),
        "requests_per_second": len(runs) / wall,
        "cpu_seconds_per_answer": cpu / len(runs),
    }


def one_shot(model: str, home: Path, messages: list[dict[str, str]], max_tokens: int, mode: str) -> float:
    """A whole ``kvreg ask --messages-file`` process, timed from start to exit."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(messages, f)
    env = {**os.environ, "KVREG_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, "-m", "kvreg", "ask", "--model", model, "--messages-file", f.name]
    cmd += ["--max-new-tokens", str(max_tokens), "--mode", mode, "--json"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    elapsed = time.perf_counter() - t0
    Path(f.name).unlink()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--problems", type=int, default=4, help="questions per class")
    parser.add_argument("--shots", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "serve")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.problems, args.shots, args.max_tokens = 1, 2, 2

    from kvreg.app.flywheel.gsm8k import (
        few_shot_messages,
        few_shot_problems,
        load_problems,
        question_messages,
    )
    from kvreg.app.models import resolve_or_import
    from kvreg.store.home import Home

    model = str(resolve_or_import(args.model))
    shutil.rmtree(args.out, ignore_errors=True)
    home = Home(args.out / "home").ensure()
    n = args.problems
    tests = load_problems("test", list(range(1, 3 * n + 1)))
    repeats, shared, unseen = tests[:n], tests[n : 2 * n], tests[2 * n :]
    shots = few_shot_problems()[: args.shots]

    log(f"loading {args.model} and starting the server")
    host, server, thread, url = start_server(home, model, args.block_size)
    try:
        log("depositing the few-shot prefix and the verified solutions")
        host.executor.submit(deposit_all, host, home, shots, repeats).result()
        classes = {
            "repeat": [few_shot_messages(shots, p.question) for p in repeats],
            "shared": [few_shot_messages(shots, p.question) for p in shared],
            "unseen": [question_messages(p.question) for p in unseen],
        }
        one_request(url, classes["unseen"][0], 1)  # warm-up
        report: dict[str, Any] = {
            "model": args.model,
            "problems": n,
            "shots": args.shots,
            "quick": args.quick,
        }
        texts: dict[str, dict[str, list[str]]] = {}
        for mode in ("auto", "off"):
            host.mode = mode
            for name, prompts in classes.items():
                log(f"{name}, cache {'on' if mode == 'auto' else 'off'}: {len(prompts)} requests")
                runs = [one_request(url, m, args.max_tokens) for m in prompts]
                report.setdefault(name, {})["cache_on" if mode == "auto" else "cache_off"] = summarize(runs)
                texts.setdefault(name, {})[mode] = [r["text"] for r in runs]
        for name in ("shared", "unseen"):
            report[name]["same_text_as_uncached"] = texts[name]["auto"] == texts[name]["off"]
        host.mode = "auto"
        for probe in ("always", "once"):  # the witness probe on every graft, and remembered
            host.probe = probe
            log(f"shared, cache on, --probe {probe}: {len(classes['shared'])} requests")
            runs = [one_request(url, m, args.max_tokens) for m in classes["shared"]]
            report["shared"][f"cache_on_probe_{probe}"] = summarize(runs)
        load = classes["shared"] * max(1, 8 // max(1, n))
        report["throughput"] = [throughput(url, load, c, args.max_tokens) for c in (1, 4)]
    finally:
        server.should_exit = True
        thread.join(60)
        host.close()
    if not args.quick:
        report["one_shot_cli_seconds"] = {
            name: one_shot(model, args.out / "home", classes[name][0], args.max_tokens, "auto")
            for name in classes
        }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        head = f"{'class':8} {'cache':5} {'ttft p50':>9} {'ttft p95':>9} {'total p50':>10} {'total p95':>10}"
        print(head + "  mode")
        for name in classes:
            for key, label in (("cache_on", "on"), ("cache_off", "off")):
                s = report[name][key]
                print(
                    f"{name:8} {label:5} {s['ttft_p50']:9.3f} {s['ttft_p95']:9.3f} "
                    f"{s['total_p50']:10.3f} {s['total_p95']:10.3f}  {','.join(s['modes'])}"
                )
        for probe in ("always", "once"):
            s = report["shared"][f"cache_on_probe_{probe}"]
            print(
                f"shared, --probe {probe:6}: ttft p50 {s['ttft_p50']:.3f} s, total p50 {s['total_p50']:.3f} s"
            )
        for t in report["throughput"]:
            print(
                f"{t['clients']} client(s): {t['requests_per_second']:.2f} requests/s, "
                f"{t['cpu_seconds_per_answer']:.2f} CPU s per answer"
            )
        for name, seconds in report.get("one_shot_cli_seconds", {}).items():
            print(f"one-shot kvreg ask ({name}): {seconds:.2f} s")
        print(json.dumps(report))
    ok = all(report[name]["same_text_as_uncached"] for name in ("shared", "unseen"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
