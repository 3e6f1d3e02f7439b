"""Would continuous batching keep ``kvreg engine serve``'s byte-exact guarantee? Measured, not assumed.

The server answers one request at a time (a queue): each prompt is prefilled on kvreg's block
grid and decoded greedily alone, and a graft gives exactly the bits of that run. Batching puts
several requests through the model in one forward pass, padded to a common length with an
attention mask. This script runs, on the same loaded model under its pinned config
(``kvreg.app.loader``), greedy decoding of two prompts of different lengths:

- **queue**: each alone, the server's path (``kvreg.engine.router.plain_generate``);
- **batch of 1**: each alone through the batched code below (the whole prompt in one pass, no
  padding): what changes with the prefill schedule alone;
- **batch of 2, equal length**: the shorter prompt twice (no padding): what the batch size alone changes;
- **batch of 2, padded**: both prompts together, left-padded, with the attention mask and
  per-row positions: continuous batching's case.

For each, every decode step's logits are hashed (SHA-256 of the raw bytes, as kvreg's checks do)
and compared with the queue's; reported: the steps whose logits are bit-identical, and whether
the tokens are. The exit status is 0 whatever the outcome: the figures are the result.

Usage::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/batching_exactness.py [--models tiny,smollm2] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

PROMPTS = (
    "The capital of France is",
    "Question: A farmer has 17 sheep and buys 23 more, then sells 9. How many sheep are left? Answer:",
)


Run = tuple[list[int], list[str], list[Any]]  # tokens, logits digests, logits


def batched_greedy(lm: Any, prompts: list[list[int]], steps: int) -> list[Run]:
    """Greedy decoding of ``prompts`` together: left padding, attention mask, per-row positions."""
    import torch

    from kvreg.engine.runtime import logits_digest, new_cache

    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=lm.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=lm.device)
    cache = new_cache(lm)
    out: list[Run] = [([], [], []) for _ in prompts]
    start = 0
    with torch.inference_mode():
        for _ in range(steps):
            n = ids.shape[1]
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -n:]
            result = lm.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                cache_position=torch.arange(start, start + n, device=lm.device),
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            start += n
            logits = result.logits[:, -1]
            tokens = [int(torch.argmax(row).item()) for row in logits]
            for i, token in enumerate(tokens):
                out[i][0].append(token)
                row = logits[i].detach().clone()
                out[i][1].append(str(logits_digest(row)))
                out[i][2].append(row)
            ids = torch.tensor([[t] for t in tokens], device=lm.device)
            mask = torch.cat([mask, torch.ones((len(prompts), 1), dtype=mask.dtype, device=lm.device)], dim=1)
    return out


def compare(reference: Run, other: Run) -> dict[str, Any]:
    same_steps = sum(a == b for a, b in zip(reference[1], other[1], strict=True))
    diff = max(float((a - b).abs().max()) for a, b in zip(reference[2], other[2], strict=True))
    return {
        "logits_identical_steps": f"{same_steps}/{len(reference[1])}",
        "max_abs_logit_difference": diff,
        "tokens_identical": reference[0] == other[0],
    }


def measure(model: Path, name: str, steps: int, home: Any) -> dict[str, Any]:
    from kvreg.app.engine_options import EngineOptions
    from kvreg.app.feedback import Silent
    from kvreg.app.loader import load_engine
    from kvreg.app.prompts import encode_prompt
    from kvreg.engine.router import plain_generate
    from kvreg.engine.runtime import logits_digest

    lm, _ = load_engine(Silent(), model, EngineOptions().for_new(), home)
    short, long = (encode_prompt(lm, p) for p in PROMPTS)
    queue: dict[str, Run] = {}
    for key, p in (("short", short), ("long", long)):
        d = plain_generate(lm, p, steps)
        queue[key] = (list(d.tokens), [str(logits_digest(x)) for x in d.logits], list(d.logits))
    alone = {key: batched_greedy(lm, [p], steps)[0] for key, p in (("short", short), ("long", long))}
    twice = batched_greedy(lm, [short, short], steps)
    padded = batched_greedy(lm, [short, long], steps)
    return {
        "model": name,
        "config": {
            "dtype": lm.config.settings.dtype,
            "threads": lm.config.settings.threads,
            "attn": lm.config.settings.attn_implementation,
            "block_size": lm.config.block_size,
        },
        "prompt_tokens": {"short": len(short), "long": len(long)},
        "batch_of_1_vs_queue": {k: compare(queue[k], alone[k]) for k in queue},
        "batch_of_2_equal_length_vs_queue": compare(queue["short"], twice[0]),
        "batch_of_2_equal_length_vs_batch_of_1": compare(alone["short"], twice[0]),
        "batch_of_2_padded_vs_queue": {
            "short": compare(queue["short"], padded[0]),
            "long": compare(queue["long"], padded[1]),
        },
        "batch_of_2_padded_vs_batch_of_1": {
            "short": compare(alone["short"], padded[0]),
            "long": compare(alone["long"], padded[1]),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    from kvreg.app.models import resolve_or_import
    from kvreg.store.home import Home

    work = Path(tempfile.mkdtemp(prefix="kvreg-batching-"))
    home = Home(work / "home").ensure()
    reports = []
    for name in args.models.split(","):
        if name == "tiny":
            from kvreg.engine.tiny import build_model_dir

            model = build_model_dir(work / "tiny", "llama", seed=0)
        else:
            model = resolve_or_import(name)
        reports.append(measure(Path(model), name, args.steps, home))
    print(json.dumps(reports, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
