"""Choosing the next token: logit bias and repetition penalties, then greedy or seeded sampling.

:func:`sampler` returns the ``choose`` function that :func:`kvreg.engine.runtime.decode`
calls with each step's next-token logits, or None for plain greedy decoding (temperature 0
and no adjustment: the argmax of the model's own logits, the decoding every byte-exact
guarantee is stated for).

What a choice does, in order, on the step's logits converted to float32 on the CPU:

1. **Adjustments** (:class:`Adjustments`, OpenAI's ``logit_bias``, ``presence_penalty`` and
   ``frequency_penalty``): the bias of a token is added to its logit; a token that the
   completion already holds ``c`` times loses ``c * frequency_penalty + presence_penalty``
   (the formula of OpenAI's API reference). The completion so far is read from ``history``
   at each step, so tokens the caller put in the completion without choosing them (a
   verified answer's, in knowledge mode) count as well.
2. **The pick**: the argmax at temperature 0; otherwise a draw from ``softmax(logits /
   temperature)``, cut to the smallest set of tokens whose probability reaches ``top_p``,
   with a ``torch.Generator`` seeded once per request. The same logits, settings, history
   and seed give the same token on any host; since a graft gives the same logits as a run
   with no cache, a request gives the same text with or without a graft. Different torch
   versions may draw differently.

This module does not decode, and keeps no state between requests.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch

from kvreg.core.errors import UsageError
from kvreg.engine.runtime import Chooser

#: OpenAI's bounds: a bias in [-100, 100], a penalty in [-2, 2].
MAX_LOGIT_BIAS = 100.0
MAX_PENALTY = 2.0


@dataclass(frozen=True)
class Adjustments:
    """What is done to the logits before the pick (all neutral by default)."""

    logit_bias: Mapping[int, float] = field(default_factory=dict)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        for token, bias in self.logit_bias.items():
            if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                raise UsageError(f"the logit bias of token {token} is {bias}, outside [-100, 100]")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise UsageError(f"{name} is {value}, outside [-2, 2]")

    @property
    def neutral(self) -> bool:
        return not self.logit_bias and not self.presence_penalty and not self.frequency_penalty

    @cached_property
    def _bias(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.tensor(list(self.logit_bias), dtype=torch.long)
        return ids, torch.tensor(list(self.logit_bias.values()), dtype=torch.float32)

    def apply(self, scores: torch.Tensor, seen: Mapping[int, int]) -> torch.Tensor:
        """``scores`` (float32, one row of logits) adjusted in place for a completion that holds token
        ``t`` ``seen[t]`` times."""
        if self.logit_bias:
            ids, values = self._bias
            scores[ids] += values
        if seen and (self.presence_penalty or self.frequency_penalty):
            counts = {t: n for t, n in seen.items() if 0 <= t < scores.numel() and n > 0}
            if counts:
                ids = torch.tensor(list(counts), dtype=torch.long)
                times = torch.tensor(list(counts.values()), dtype=torch.float32)
                scores[ids] -= times * self.frequency_penalty + self.presence_penalty
        return scores


NO_ADJUSTMENTS = Adjustments()


def sampler(
    temperature: float,
    *,
    top_p: float = 1.0,
    seed: int | None = None,
    adjust: Adjustments = NO_ADJUSTMENTS,
    history: Callable[[], Sequence[int]] | None = None,
) -> Chooser | None:
    """The ``choose`` function for these settings; None for plain greedy (temperature 0, no adjustment).

    ``history`` returns the completion's tokens so far (the penalties count them); without it
    the penalties see an empty completion.
    """
    if temperature < 0 or not top_p > 0 or top_p > 1:
        raise UsageError(f"temperature must be >= 0 and top_p in (0, 1], not {temperature} and {top_p}")
    if temperature == 0 and adjust.neutral:
        return None
    generator: torch.Generator | None = None
    if temperature > 0:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(secrets.randbits(63) if seed is None else seed % (1 << 64))

    seen: Counter[int] = Counter()  # the completion's tokens, counted as they come (it only grows)
    counted = 0

    def choose(logits: torch.Tensor) -> int:
        nonlocal counted
        scores = logits.detach().reshape(-1).to("cpu", torch.float32, copy=True)
        if not adjust.neutral:
            if history is not None:
                tokens = history()
                seen.update(tokens[counted:])
                counted = len(tokens)
            adjust.apply(scores, seen)
        if generator is None:
            return int(torch.argmax(scores).item())
        probs = torch.softmax(scores / temperature, dim=-1)
        if top_p < 1:
            ordered, index = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, dim=-1) - ordered < top_p  # the smallest set reaching top_p
            ordered = torch.where(keep, ordered, torch.zeros_like(ordered))
            pick = torch.multinomial(ordered, 1, generator=generator)
            return int(index[pick].item())
        return int(torch.multinomial(probs, 1, generator=generator).item())

    return choose
