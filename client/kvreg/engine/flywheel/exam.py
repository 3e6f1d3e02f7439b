"""The held-out exam and greedy decoding for the flywheel model.

The exam is a fixed, seeded set of problems: *easy* (2–4 digits) and *hard*
(6–8 digits). Training skips every exam problem, so the exam is held out by
construction. Decoding is greedy and batched over prompts of the same length
(one token per character, so no padding is needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from kvreg.engine.flywheel.task import ANSWER_MARK, Problem, check_answer, problems

EASY_DIGITS = (2, 4)
HARD_DIGITS = (6, 8)
EASY_SEED = 1001
HARD_SEED = 1002
EXAM_SIZE = 200  # per part; training excludes all of them


def easy_exam(count: int = EXAM_SIZE) -> list[Problem]:
    return problems(EASY_SEED, EASY_DIGITS, EXAM_SIZE)[:count]


def hard_exam(count: int = EXAM_SIZE) -> list[Problem]:
    return problems(HARD_SEED, HARD_DIGITS, EXAM_SIZE)[:count]


def exam_problems() -> list[Problem]:
    return easy_exam() + hard_exam()


@dataclass
class Attempt:
    problem: Problem
    prompt: str
    completion: str  # decoded text after the prompt, without special tokens
    tokens: int  # decoded tokens, including the final EOS if one was emitted
    correct: bool


@torch.no_grad()
def greedy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 160,
) -> list[tuple[str, int]]:
    """Greedy completions of prompts that all have the same token length: (text, decoded tokens)."""
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    if len({len(x) for x in ids}) != 1:
        raise ValueError("greedy() batches prompts of one length only")
    eos = tokenizer.eos_token_id
    batch = torch.tensor(ids, dtype=torch.long)
    cache = DynamicCache()
    out = model(input_ids=batch, cache=cache, use_cache=True, logits_to_keep=1)
    generated: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    for _ in range(max_new_tokens):
        nxt = torch.argmax(out.logits[:, -1, :], dim=-1)
        for i, t in enumerate(nxt.tolist()):
            if not done[i]:
                generated[i].append(t)
                done[i] = t == eos
        if all(done):
            break
        out = model(input_ids=nxt.unsqueeze(1), cache=cache, use_cache=True, logits_to_keep=1)
    texts = [str(tokenizer.decode(g, skip_special_tokens=True)) for g in generated]  # one sequence: a str
    return [(t, len(g)) for t, g in zip(texts, generated, strict=True)]


def _prompt(problem: Problem, with_solution: bool) -> str:
    return problem.question() + (problem.solution() if with_solution else "")


def attempt(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[Problem],
    *,
    with_solution: bool = False,
) -> list[Attempt]:
    """Greedy attempts at ``items``; with ``with_solution`` the exact solution is in the prompt."""
    groups: dict[int, list[Problem]] = {}
    for p in items:
        groups.setdefault(len(_prompt(p, with_solution)), []).append(p)  # one token per character
    results: dict[Problem, Attempt] = {}
    for group in groups.values():
        prompts = [_prompt(p, with_solution) for p in group]
        for p, prompt, (text, n) in zip(group, prompts, greedy(model, tokenizer, prompts), strict=True):
            full = prompt + text
            results[p] = Attempt(p, prompt, text, n, check_answer(p, full) and ANSWER_MARK in text)
    return [results[p] for p in items]


def summary(attempts: Sequence[Attempt]) -> dict[str, float]:
    n = len(attempts)
    return {
        "problems": n,
        "accuracy": sum(a.correct for a in attempts) / n,
        "mean_decoded_tokens": sum(a.tokens for a in attempts) / n,
    }
