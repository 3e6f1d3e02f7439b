"""Choosing the next token by sampling: temperature and top-p, from a seeded generator.

:func:`sampler` returns the ``choose`` function that :func:`kvreg.engine.runtime.decode`
calls with each step's next-token logits, or None for temperature 0 (greedy: the argmax,
the decoding every byte-exact guarantee is stated for). The logits are converted to
float32 on the CPU and drawn from with a ``torch.Generator`` seeded once per request,
so the same logits and the same seed give the same tokens on any host; since a graft
gives the same logits as a run with no cache, a seeded request gives the same text with
or without a graft (prefix mode). Different torch versions may draw differently.

This module does not decode, and keeps no state between requests.
"""

from __future__ import annotations

import secrets

import torch

from kvreg.core.errors import UsageError
from kvreg.engine.runtime import Chooser


def sampler(temperature: float, *, top_p: float = 1.0, seed: int | None = None) -> Chooser | None:
    """The ``choose`` function for these settings; None for greedy (temperature 0)."""
    if temperature < 0 or not top_p > 0 or top_p > 1:
        raise UsageError(f"temperature must be >= 0 and top_p in (0, 1], not {temperature} and {top_p}")
    if temperature == 0:
        return None
    generator = torch.Generator(device="cpu")
    generator.manual_seed(secrets.randbits(63) if seed is None else seed % (1 << 64))

    def choose(logits: torch.Tensor) -> int:
        scores = logits.detach().reshape(-1).to("cpu", torch.float32) / temperature
        probs = torch.softmax(scores, dim=-1)
        if top_p < 1:
            ordered, index = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, dim=-1) - ordered < top_p  # the smallest set reaching top_p
            ordered = torch.where(keep, ordered, torch.zeros_like(ordered))
            pick = torch.multinomial(ordered, 1, generator=generator)
            return int(index[pick].item())
        return int(torch.multinomial(probs, 1, generator=generator).item())

    return choose
