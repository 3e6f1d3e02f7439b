"""Choosing the next token: masks, logit bias and penalties, then greedy or seeded sampling.

:func:`sampler` returns the ``choose`` function that :func:`kvreg.engine.runtime.decode`
calls with each step's next-token logits, or None for plain greedy decoding (a temperature
below :data:`GREEDY_BELOW`, no adjustment and no mask: the argmax of the model's own logits,
the decoding every byte-exact guarantee is stated for).

What a choice does, in order, on the step's logits converted to float32 on the CPU (vLLM's
order, with OpenAI's and Hugging Face's formulas):

1. **Adjustments** (:class:`Adjustments`): the ``logit_bias`` of a token is added to its
   logit; then the ``repetition_penalty`` ``r`` of every token that the prompt or the
   completion holds divides its logit when it is positive and multiplies it otherwise (the
   form of Hugging Face and vLLM); then a token that the completion holds ``c`` times loses
   ``c * frequency_penalty + presence_penalty`` (OpenAI's formula). The completion so far is
   read from ``history`` at each step, so tokens the caller put in the completion without
   choosing them (a verified answer's, in knowledge mode) count as well.
2. **Masks** (:class:`Masks`): with ``allowed``, every other token is out; while the
   completion holds fewer than ``min_tokens`` tokens, the ``ends`` (the end-of-turn and stop
   token ids) are out too, unless nothing would be left.
3. **The pick**: below :data:`GREEDY_BELOW` the temperature is 0 and the pick is the argmax
   (``top_p``, ``top_k`` and ``min_p`` then change nothing, as in vLLM); otherwise a draw from
   ``softmax(logits / temperature)`` after, in this order, ``min_p`` (tokens less probable than
   ``min_p`` times the most probable one are out), ``top_k`` (only the ``k`` highest logits,
   ties kept; 0 or -1: all) and ``top_p`` (the smallest set of tokens whose probability reaches
   ``top_p``), with a ``torch.Generator`` seeded once per request. The same logits, settings,
   history and seed give the same token on any host; since a graft gives the same logits as a
   run with no cache, a request gives the same text with or without a graft. Different torch
   versions may draw differently.

Every value is checked (:class:`UsageError` out of range), and no setting in range can make a
logit infinite or NaN: a penalised logit is kept within ``±1e30``. This module does not
decode, and keeps no state between requests.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch

from kvreg.core.errors import UsageError
from kvreg.engine.runtime import Chooser

#: OpenAI's bounds: a bias in [-100, 100], a penalty in [-2, 2].
MAX_LOGIT_BIAS = 100.0
MAX_PENALTY = 2.0
#: A temperature below this is 0: the pick is the argmax (vLLM's threshold).
GREEDY_BELOW = 1e-5
#: The largest magnitude a penalised logit keeps (far above any model's logits; divided by the
#: smallest sampling temperature it still fits a float32).
LOGIT_LIMIT = 1e30


def _finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, not {value}")


@dataclass(frozen=True)
class Adjustments:
    """What is done to the logits before the masks and the pick (all neutral by default)."""

    logit_bias: Mapping[int, float] = field(default_factory=dict)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        for token, bias in self.logit_bias.items():
            _finite("a logit bias", bias)
            if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                raise UsageError(f"the logit bias of token {token} is {bias}, outside [-100, 100]")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _finite(name, value)
            if not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise UsageError(f"{name} is {value}, outside [-2, 2]")
        _finite("repetition_penalty", self.repetition_penalty)
        if self.repetition_penalty <= 0:
            raise UsageError(f"repetition_penalty must be greater than 0, not {self.repetition_penalty}")

    @property
    def neutral(self) -> bool:
        return (
            not self.logit_bias
            and not self.presence_penalty
            and not self.frequency_penalty
            and self.repetition_penalty == 1.0
        )

    @cached_property
    def _bias(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.tensor(list(self.logit_bias), dtype=torch.long)
        return ids, torch.tensor(list(self.logit_bias.values()), dtype=torch.float32)

    def apply(
        self, scores: torch.Tensor, seen: Mapping[int, int], prompt: Collection[int] = ()
    ) -> torch.Tensor:
        """``scores`` (float32, one row of logits) adjusted in place for a completion that holds token
        ``t`` ``seen[t]`` times after ``prompt`` (the token ids the repetition penalty counts too)."""
        vocab = scores.numel()
        if self.logit_bias:
            ids, values = self._bias
            inside = ids < vocab  # a token the tokenizer knows but the model has no logit for: none
            scores[ids[inside]] += values[inside]
        if self.repetition_penalty != 1.0:
            present = {t for t in prompt if 0 <= t < vocab}
            present.update(t for t, n in seen.items() if n > 0 and 0 <= t < vocab)
            if present:
                ids = torch.tensor(sorted(present), dtype=torch.long)
                values = scores[ids].to(torch.float64)  # a tiny or huge penalty stays finite here
                r = self.repetition_penalty
                values = torch.where(values > 0, values / r, values * r)
                scores[ids] = values.clamp(-LOGIT_LIMIT, LOGIT_LIMIT).to(torch.float32)
        if seen and (self.presence_penalty or self.frequency_penalty):
            counts = {t: n for t, n in seen.items() if 0 <= t < vocab and n > 0}
            if counts:
                ids = torch.tensor(list(counts), dtype=torch.long)
                times = torch.tensor(list(counts.values()), dtype=torch.float32)
                scores[ids] -= times * self.frequency_penalty + self.presence_penalty
        return scores


NO_ADJUSTMENTS = Adjustments()


@dataclass(frozen=True)
class Masks:
    """The tokens that may not be chosen: all but ``allowed`` (None: no such limit), and the
    ``ends`` while the completion holds fewer than ``min_tokens`` tokens (vLLM's ``min_tokens``:
    its end-of-turn and stop token ids cannot end it earlier)."""

    allowed: frozenset[int] | None = None
    min_tokens: int = 0
    ends: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.min_tokens < 0:
            raise UsageError(f"min_tokens must be at least 0, not {self.min_tokens}")
        if self.allowed is not None and not self.allowed:
            raise UsageError("allowed token ids must not be empty")

    @property
    def neutral(self) -> bool:
        return self.allowed is None and not (self.min_tokens and self.ends)

    def apply(self, scores: torch.Tensor, completion_length: int) -> torch.Tensor:
        """``scores`` with the masked tokens at ``-inf`` (in place), for a completion of
        ``completion_length`` tokens so far. The ends stay in when nothing else would."""
        vocab = scores.numel()
        keep: torch.Tensor | None = None
        if self.allowed is not None:
            keep = torch.zeros(vocab, dtype=torch.bool)
            keep[[t for t in self.allowed if 0 <= t < vocab]] = True
        if completion_length < self.min_tokens and self.ends:
            without = torch.ones(vocab, dtype=torch.bool) if keep is None else keep.clone()
            without[[t for t in self.ends if 0 <= t < vocab]] = False
            if bool(without.any()):
                keep = without
        if keep is not None and bool(keep.any()):
            scores[~keep] = float("-inf")
        return scores


NO_MASKS = Masks()


def sampler(
    temperature: float,
    *,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    seed: int | None = None,
    adjust: Adjustments = NO_ADJUSTMENTS,
    masks: Masks = NO_MASKS,
    history: Callable[[], Sequence[int]] | None = None,
    prompt: Collection[int] = (),
) -> Chooser | None:
    """The ``choose`` function for these settings; None for plain greedy (a temperature below
    :data:`GREEDY_BELOW`, no adjustment, no mask).

    ``history`` returns the completion's tokens so far (the penalties count them, ``min_tokens``
    measures them); without it the completion is the tokens this function chose. ``prompt`` is
    the prompt's token ids, which the repetition penalty counts as well.
    """
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)):
        _finite(name, value)
    if temperature < 0 or not top_p > 0 or top_p > 1:
        raise UsageError(f"temperature must be >= 0 and top_p in (0, 1], not {temperature} and {top_p}")
    if top_k < -1:
        raise UsageError(f"top_k must be -1 or 0 (all tokens) or at least 1, not {top_k}")
    if not 0 <= min_p <= 1:
        raise UsageError(f"min_p must be in [0, 1], not {min_p}")
    greedy = temperature < GREEDY_BELOW
    if greedy and adjust.neutral and masks.neutral:
        return None
    generator: torch.Generator | None = None
    if not greedy:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(secrets.randbits(63) if seed is None else seed % (1 << 64))
    prompt_ids = frozenset(prompt) if adjust.repetition_penalty != 1.0 else frozenset()

    seen: Counter[int] = Counter()  # the completion's tokens, counted as they come (it only grows)
    counted = 0
    chosen: list[int] = []  # without a history: the tokens chosen here

    def choose(logits: torch.Tensor) -> int:
        nonlocal counted
        scores = logits.detach().reshape(-1).to("cpu", torch.float32, copy=True)
        tokens = history() if history is not None else chosen
        if not adjust.neutral:
            seen.update(tokens[counted:])
            counted = len(tokens)
            adjust.apply(scores, seen, prompt_ids)
        if not masks.neutral:
            masks.apply(scores, len(tokens))
        token = _pick(scores, temperature, top_p, top_k, min_p, generator)
        chosen.append(token)
        return token

    return choose


def _pick(
    scores: torch.Tensor,
    temperature: float,
    top_p: float,
    top_k: int,
    min_p: float,
    generator: torch.Generator | None,
) -> int:
    """The argmax without a generator; else a seeded draw after ``min_p``, ``top_k`` and ``top_p``."""
    if generator is None:
        return int(torch.argmax(scores).item())
    scaled = scores / temperature
    if min_p > 0:
        probs = torch.softmax(scaled, dim=-1)
        scaled[probs < min_p * probs.max()] = float("-inf")
    if 0 < top_k < scaled.numel():
        kth = torch.topk(scaled, top_k).values[-1]
        scaled[scaled < kth] = float("-inf")
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1:
        ordered, index = torch.sort(probs, descending=True)
        keep = torch.cumsum(ordered, dim=-1) - ordered < top_p  # the smallest set reaching top_p
        ordered = torch.where(keep, ordered, torch.zeros_like(ordered))
        pick = torch.multinomial(ordered, 1, generator=generator)
        return int(index[pick].item())
    return int(torch.multinomial(probs, 1, generator=generator).item())
