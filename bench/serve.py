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

**Overload**: 8 clients at once against a second application over the same model with
``--max-queue 2`` (one request on the model, two waiting): each streams one question (the three
classes in turn) and, when refused, waits the ``Retry-After`` it was given and asks again. The
run checks that no answer was a 5xx, that every 429 carried ``Retry-After``, that every accepted
answer is the text of the same request sent alone, and that the server's
``kvreg_engine_requests_rejected_total{reason="overload"}`` counted exactly the 429s the clients
saw. It reports the figures of ``/metrics`` (time to first token and end to end by mode, tokens,
grafts, probes) beside the clients' own timings, and checks time to first token one request at a
time: the histogram's sum grows by the server's exact figure, and the client's (a little later:
the HTTP and the first text chunk) should fall in the same bucket.

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


def serve(app: Any) -> tuple[Any, Any, str]:
    """``app`` under uvicorn on a free loopback port, in a thread: the server, the thread, its /v1 URL."""
    import uvicorn

    from kvreg.app.serving.server import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def start_server(home: Any, model: str, block_size: int | None) -> tuple[Any, Any, Any, str]:
    from kvreg.app.engine_options import EngineOptions
    from kvreg.app.serving.host import ModelHost
    from kvreg.app.serving.server import create_app

    host = ModelHost(home, model, EngineOptions(block_size=block_size), name=MODEL_ID)
    server, thread, url = serve(create_app(host))
    return host, server, thread, url


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


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
TTFT = "kvreg_engine_time_to_first_token_seconds"
E2E = "kvreg_engine_e2e_request_latency_seconds"
CHAT = "/v1/chat/completions"


def scrape(url: str) -> Samples:
    """Every sample of the server's ``/metrics``: (name, labels) -> value."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=60).text
    return {
        (s.name, frozenset(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def grown(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much the samples named ``name`` that carry ``labels`` grew (summed over other labels)."""
    want = set(labels.items())

    def total(samples: Samples) -> float:
        return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)

    return total(after) - total(before)


def by_label(before: Samples, after: Samples, name: str, label: str) -> dict[str, float]:
    values = {dict(ls)[label] for (n, ls) in after if n == name and label in dict(ls)}
    return {v: grown(before, after, name, **{label: v}) for v in sorted(values)}


def server_figures(before: Samples, after: Samples) -> dict[str, Any]:
    """What ``/metrics`` says about the requests between two scrapes."""
    out: dict[str, Any] = {}
    for mode in ("knowledge", "prefix", "off"):
        n = grown(before, after, f"{TTFT}_count", route=CHAT, mode=mode)
        if n:
            out[f"{mode}_requests"] = n
            out[f"{mode}_ttft_mean"] = grown(before, after, f"{TTFT}_sum", route=CHAT, mode=mode) / n
            out[f"{mode}_e2e_mean"] = grown(before, after, f"{E2E}_sum", route=CHAT, mode=mode) / n
    for name in ("prompt_tokens", "cached_prompt_tokens", "prefilled_tokens", "decoded_tokens"):
        out[name] = grown(before, after, f"kvreg_engine_{name}_total")
    out["grafts"] = by_label(before, after, "kvreg_engine_grafts_total", "mode")
    out["witness_probes"] = by_label(before, after, "kvreg_engine_witness_probes_total", "outcome")
    out["rejected"] = by_label(before, after, "kvreg_engine_requests_rejected_total", "reason")
    return out


def overload(
    host: Any, prompts: list[list[dict[str, str]]], max_tokens: int, clients: int = 8, max_queue: int = 2
) -> dict[str, Any]:
    """``clients`` at once against ``--max-queue max_queue``, each retrying after its Retry-After."""
    import openai

    from kvreg.app.serving.server import create_app

    server, thread, url = serve(create_app(host, max_queue=max_queue))
    asks = [prompts[i % len(prompts)] for i in range(clients)]
    try:
        alone = [one_request(url, m, max_tokens)["text"] for m in asks]  # one at a time
        before = scrape(url)
        start = threading.Barrier(clients)

        def client(i: int) -> dict[str, Any]:
            refusals: list[str | None] = []
            start.wait()
            while True:
                try:
                    run = one_request(url, asks[i], max_tokens)
                except openai.RateLimitError as exc:
                    retry = exc.response.headers.get("retry-after")
                    refusals.append(retry)
                    time.sleep(float(retry or 1))
                    continue
                except openai.APIStatusError as exc:
                    return {"status": exc.status_code, "refusals": refusals}
                return {**run, "status": 200, "refusals": refusals}

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(client, range(clients)))
        wall = time.perf_counter() - t0
        after = scrape(url)
    finally:
        server.should_exit = True
        thread.join(60)
    refusals = [r for res in results for r in res["refusals"]]
    accepted = [res for res in results if res["status"] == 200]
    figures = server_figures(before, after)
    return {
        "clients": clients,
        "max_queue": max_queue,
        "answered": len(accepted),
        "refusals_429": len(refusals),
        "retry_after_seconds": sorted({int(r) for r in refusals if r is not None}),
        "every_429_had_retry_after": all(r is not None for r in refusals),
        "server_errors": sum(1 for res in results if res["status"] >= 500),
        "other_errors": sum(1 for res in results if res["status"] not in (200, *range(500, 600))),
        "same_text_as_alone": [res.get("text") for res in results] == alone,
        "wall_seconds": wall,
        "client": summarize(accepted) if accepted else None,
        "server": figures,
        "server_counted_the_429s": figures["rejected"].get("overload") == len(refusals),
    }


def ttft_agreement(url: str, prompts: list[list[dict[str, str]]], max_tokens: int) -> list[dict[str, Any]]:
    """One request at a time between two scrapes: the server's time to first token (the growth of
    the histogram's sum), its bucket, and the client's figure beside them."""
    rows = []
    for messages in prompts:
        before = scrape(url)
        run = one_request(url, messages, max_tokens)
        after = scrape(url)
        server_ttft = grown(before, after, f"{TTFT}_sum", route=CHAT)
        counts: dict[float, float] = {}  # cumulative: the requests at or under each bound
        for (name, labels), value in after.items():
            tags = dict(labels)
            if name == f"{TTFT}_bucket" and tags.get("route") == CHAT:
                bound = float(tags["le"])
                counts[bound] = counts.get(bound, 0.0) + value - before.get((name, labels), 0.0)
        upper = min(b for b, n in counts.items() if n >= 1)
        lower = max([b for b in counts if b < upper], default=0.0)
        rows.append(
            {
                "mode": run["mode"],
                "server_ttft": server_ttft,
                "client_ttft": run["ttft"],
                "bucket": [lower, upper],
                "client_in_bucket": lower < run["ttft"] <= upper,
            }
        )
    return rows


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
        before = scrape(url)
        report["throughput"] = [throughput(url, load, c, args.max_tokens) for c in (1, 4)]
        report["throughput_server"] = server_figures(before, scrape(url))
        # the classes in turn: repeat, shared, unseen, repeat, ...
        mixed = [
            m
            for trio in zip(classes["repeat"], classes["shared"], classes["unseen"], strict=True)
            for m in trio
        ]
        log(f"time to first token, client and /metrics: {len(mixed)} requests one at a time")
        report["ttft_agreement"] = ttft_agreement(url, mixed, args.max_tokens)
        log("overload: 8 clients at once, --max-queue 2")
        report["overload"] = overload(host, mixed, args.max_tokens)
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
        for row in report["ttft_agreement"]:
            lo, hi = row["bucket"]
            both = "holds both" if row["client_in_bucket"] else "holds the server's only"
            print(
                f"ttft ({row['mode']}): server {row['server_ttft']:.3f} s, "
                f"client {row['client_ttft']:.3f} s, bucket ({lo:g}, {hi:g}] {both}"
            )
        o = report["overload"]
        print(
            f"overload ({o['clients']} clients, --max-queue {o['max_queue']}): {o['answered']} answered, "
            f"{o['refusals_429']} x 429 (Retry-After {o['retry_after_seconds']}), "
            f"{o['server_errors']} x 5xx, same text as alone: {o['same_text_as_alone']}, "
            f"server counted the 429s: {o['server_counted_the_429s']}, {o['wall_seconds']:.2f} s"
        )
        print(json.dumps(report))
    o = report["overload"]
    ok = all(report[name]["same_text_as_uncached"] for name in ("shared", "unseen")) and (
        o["server_errors"] == 0
        and o["other_errors"] == 0
        and o["every_429_had_retry_after"]
        and o["same_text_as_alone"]
        and o["server_counted_the_429s"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
