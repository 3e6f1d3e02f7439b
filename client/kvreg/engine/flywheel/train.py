"""Train the bundled flywheel model (DESIGN §8): ``python -m kvreg.engine.flywheel.train --out DIR``.

A ``LlamaForCausalLM`` of about 1.05M parameters learns multi-digit addition
written as a per-digit trace. Each step draws one batch kind from a seeded RNG:

* 75%: 2–5-digit problems, fully trained (loss on solution, answer and EOS);
* 20%: 6–8-digit problems, only `` #### <answer>`` and EOS trained, with the exact
  solution given as input (this teaches copying the result to the answer);
* 5%: 6–8-digit problems, fully trained (partial skill on hard problems).

The exam's problems are skipped by the data stream. With the same seed and
thread count, runs are reproducible. The output is a model directory plus
``TRAINING.json`` (command, seed, steps, time, losses, held-out results).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from kvreg.engine.flywheel import exam
from kvreg.engine.flywheel.task import ANSWER_MARK, Problem, stream
from kvreg.engine.flywheel.tokenizer import build_tokenizer

EASY_TRAIN_DIGITS = (2, 5)
HARD_TRAIN_DIGITS = (6, 8)
ANSWER_ONLY_SHARE = 0.20
HARD_FULL_SHARE = 0.05
IGNORE = -100


def model_config(vocab_size: int) -> LlamaConfig:
    """LlamaForCausalLM, hidden 128, 4 layers, 4 heads: about 1.05M parameters."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        architectures=["LlamaForCausalLM"],
    )


def encode_example(
    tokenizer: PreTrainedTokenizerBase, problem: Problem, *, answer_only: bool
) -> tuple[list[int], list[int]]:
    """Token ids (BOS … EOS) and labels: the trained positions keep their id, others IGNORE."""
    head = problem.question() if not answer_only else problem.question() + problem.solution()
    tail = (problem.solution() if not answer_only else "") + f"{ANSWER_MARK}{problem.answer}"
    head_ids = tokenizer(head)["input_ids"]  # with BOS
    tail_ids = tokenizer(tail, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return head_ids + tail_ids, [IGNORE] * len(head_ids) + tail_ids


def make_batch(examples: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and labels; padding is never trained and (causal) never attended to."""
    width = max(len(ids) for ids, _ in examples)
    ids = [x + [pad_id] * (width - len(x)) for x, _ in examples]
    labels = [y + [IGNORE] * (width - len(y)) for _, y in examples]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def evaluate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, count: int) -> dict[str, Any]:
    model.eval()
    easy, hard = exam.easy_exam(count), exam.hard_exam(count)
    return {
        "easy_greedy": exam.summary(exam.attempt(model, tokenizer, easy)),
        "hard_greedy": exam.summary(exam.attempt(model, tokenizer, hard)),
        "hard_with_solution": exam.summary(exam.attempt(model, tokenizer, hard, with_solution=True)),
        "easy_digits": list(exam.EASY_DIGITS),
        "hard_digits": list(exam.HARD_DIGITS),
        "easy_seed": exam.EASY_SEED,
        "hard_seed": exam.HARD_SEED,
    }


def train(
    out: Path,
    *,
    steps: int = 3000,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    threads: int = 2,
    warmup: int = 100,
    eval_count: int = exam.EXAM_SIZE,
    log_every: int = 100,
    command: str | None = None,
) -> dict[str, Any]:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = random.Random(seed)  # noqa: S311 - seeded data, not secrets
    tokenizer = build_tokenizer()
    model = LlamaForCausalLM(model_config(len(tokenizer)))
    model.train()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    held_out = exam.exam_problems()
    easy_stream = stream(random.Random(rng.getrandbits(64)), EASY_TRAIN_DIGITS, exclude=held_out)  # noqa: S311
    hard_stream = stream(random.Random(rng.getrandbits(64)), HARD_TRAIN_DIGITS, exclude=held_out)  # noqa: S311
    losses: list[dict[str, float]] = []
    started = time.perf_counter()
    running, running_n = 0.0, 0
    for step in range(steps):
        r = rng.random()
        if r < ANSWER_ONLY_SHARE:
            examples = [
                encode_example(tokenizer, next(hard_stream), answer_only=True) for _ in range(batch_size)
            ]
        elif r < ANSWER_ONLY_SHARE + HARD_FULL_SHARE:
            examples = [
                encode_example(tokenizer, next(hard_stream), answer_only=False) for _ in range(batch_size)
            ]
        else:
            examples = [
                encode_example(tokenizer, next(easy_stream), answer_only=False) for _ in range(batch_size)
            ]
        ids, labels = make_batch(examples, tokenizer.pad_token_id)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running += float(loss.item())
        running_n += 1
        if (step + 1) % log_every == 0 or step + 1 == steps:
            elapsed = time.perf_counter() - started
            losses.append({"step": step + 1, "loss": running / running_n, "seconds": round(elapsed, 1)})
            print(f"step {step + 1}/{steps} loss {running / running_n:.4f} {elapsed:.0f}s", flush=True)
            running, running_n = 0.0, 0
    train_seconds = time.perf_counter() - started
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    eval_started = time.perf_counter()
    results = evaluate(model, tokenizer, eval_count)
    record = {
        "command": command or "python -m kvreg.engine.flywheel.train " + " ".join(sys.argv[1:]),
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "warmup": warmup,
        "schedule": "linear warmup, cosine decay to 5%",
        "optimizer": "AdamW betas (0.9, 0.98), weight_decay 0.01, grad clip 1.0",
        "threads": threads,
        "parameters": params,
        "batch_mix": {
            "easy_full": [list(EASY_TRAIN_DIGITS), 1 - ANSWER_ONLY_SHARE - HARD_FULL_SHARE],
            "hard_answer_only": [list(HARD_TRAIN_DIGITS), ANSWER_ONLY_SHARE],
            "hard_full": [list(HARD_TRAIN_DIGITS), HARD_FULL_SHARE],
        },
        "train_seconds": round(train_seconds, 1),
        "eval_seconds": round(time.perf_counter() - eval_started, 1),
        "losses": losses,
        "held_out": results,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }
    (out / "TRAINING.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(results, indent=2), flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvreg.engine.flywheel.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="model directory to write")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-count", type=int, default=exam.EXAM_SIZE)
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    train(
        args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        threads=args.threads,
        eval_count=args.eval_count,
        log_every=min(100, max(1, args.steps // 10)),
        command="python -m kvreg.engine.flywheel.train " + " ".join(given),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
