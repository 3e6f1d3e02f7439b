"""Seeded temperature sampling of several attempts per prompt, for the flywheel's library.

``sample`` draws ``attempts`` completions for each prompt at a given temperature,
batched like :func:`kvreg.engine.flywheel.exam.greedy`: prompts are grouped by token
length (no padding, so a batch never needs an attention mask), and each group's
prompts, each repeated ``attempts`` times, run as one batch with one KV cache.

Randomness comes only from seeded ``torch.Generator`` objects, one per prompt,
seeded from ``seed`` and the prompt's text. A call is therefore reproducible,
and a prompt's draws do not depend on the order of the prompts or on which other
prompts share its batch (up to the floating-point effects of a different batch
shape on the logits). The same prompt given twice gets the same draws.

This module only decodes: it does not check answers (see
:mod:`kvreg.app.flywheel.library`), does not use kvreg's store or router, and is not
the engine's byte-exact decoding path (:mod:`kvreg.engine.runtime`), which a
verified deposit recomputes on its own anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel

from kvreg.core.errors import UsageError

__all__ = ["prompt_seed", "sample"]

Completion = tuple[str, int]  # (text without special tokens, decoded tokens incl. EOS)


def prompt_seed(seed: int, prompt: str) -> int:
    """The generator seed of ``prompt`` under the run's ``seed`` (63 bits of SHA-256)."""
    h = hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest()
    return int.from_bytes(h[:8], "big") & ((1 << 63) - 1)


@torch.no_grad()
def _sample_group(
    model: PreTrainedModel,
    tokenizer: Any,
    prompts: Sequence[str],
    ids: Sequence[Sequence[int]],
    *,
    attempts: int,
    temperature: float,
    seed: int,
    max_new_tokens: int,
) -> list[list[Completion]]:
    """Sample prompts that all have the same token length; rows are prompt-major."""
    device = model.device
    eos = tokenizer.eos_token_id
    batch = torch.tensor([list(x) for x in ids for _ in range(attempts)], dtype=torch.long, device=device)
    generators = [torch.Generator(device=device).manual_seed(prompt_seed(seed, p)) for p in prompts]
    rows = batch.shape[0]
    cache = DynamicCache()
    out = model(input_ids=batch, cache=cache, use_cache=True, logits_to_keep=1)
    generated: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    for _ in range(max_new_tokens):
        probs = torch.softmax(out.logits[:, -1, :].float() / temperature, dim=-1)
        picks = [
            torch.multinomial(probs[i * attempts : (i + 1) * attempts], 1, generator=g)
            for i, g in enumerate(generators)
        ]
        nxt = torch.cat(picks, dim=0).squeeze(1)
        for r, t in enumerate(nxt.tolist()):
            if not done[r]:
                generated[r].append(t)
                done[r] = t == eos
        if all(done):
            break
        out = model(input_ids=nxt.unsqueeze(1), cache=cache, use_cache=True, logits_to_keep=1)
    completions = [(str(tokenizer.decode(g, skip_special_tokens=True)), len(g)) for g in generated]
    return [completions[i * attempts : (i + 1) * attempts] for i in range(len(prompts))]


def sample(
    model: PreTrainedModel,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    attempts: int,
    temperature: float,
    seed: int,
    max_new_tokens: int = 160,
    ids: Sequence[Sequence[int]] | None = None,
) -> list[list[Completion]]:
    """``attempts`` sampled completions of each prompt: ``(text, decoded tokens)``.

    The text is decoded without special tokens; the count includes the final EOS
    when one was drawn (a completion that never draws EOS stops at
    ``max_new_tokens``). The result is aligned with ``prompts``. ``ids``, aligned with
    ``prompts``, gives the prompts' tokens when the tokenizer's plain encoding is not
    how they are asked (a chat-rendered prompt); the text still seeds the draws.
    """
    if attempts < 1:
        raise UsageError(f"attempts must be at least 1, got {attempts}")
    if not temperature > 0:
        raise UsageError(
            f"temperature must be positive, got {temperature}", hint="use exam.greedy for greedy decoding"
        )
    if max_new_tokens < 1:
        raise UsageError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if ids is not None and len(ids) != len(prompts):
        raise UsageError(f"{len(prompts)} prompts but {len(ids)} token lists")
    if ids is not None:
        token_ids = [list(x) for x in ids]
    else:
        token_ids = [list(tokenizer(p)["input_ids"]) for p in prompts]
    groups: dict[int, list[int]] = {}
    for index, x in enumerate(token_ids):
        groups.setdefault(len(x), []).append(index)
    results: list[list[Completion]] = [[] for _ in prompts]
    for members in groups.values():
        drawn = _sample_group(
            model,
            tokenizer,
            [prompts[i] for i in members],
            [token_ids[i] for i in members],
            attempts=attempts,
            temperature=temperature,
            seed=seed,
            max_new_tokens=max_new_tokens,
        )
        for index, completions in zip(members, drawn, strict=True):
            results[index] = completions
    return results
