"""``kvreg.engine.sampling``'s vLLM parameters: the greedy threshold, ``top_k``, ``min_p``, the
repetition penalty (Hugging Face's form, checked against transformers' own processor), the masks
(``allowed_token_ids``, ``min_tokens``), extreme values that must stay finite; and the decode
loop, whose token sink decides where a completion ends."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

from kvreg.core.errors import UsageError
from kvreg.engine.router import plain_generate
from kvreg.engine.runtime import LoadedModel
from kvreg.engine.sampling import GREEDY_BELOW, Adjustments, Masks, sampler


def _draws(choose: object, logits: torch.Tensor, n: int = 200) -> set[int]:
    assert callable(choose)
    return {choose(logits) for _ in range(n)}


def test_a_temperature_below_the_threshold_is_greedy_and_never_overflows() -> None:
    for t in (0.0, 1e-300, 5e-324, GREEDY_BELOW / 2):
        assert sampler(t) is None
    choose = sampler(1e-300, adjust=Adjustments({1: 1.0}))
    assert choose is not None and choose(torch.tensor([0.0, 3.0, 3.5])) == 1  # the adjusted argmax
    tiny = sampler(GREEDY_BELOW, seed=1)  # the smallest sampled temperature: finite, all but greedy
    logits = torch.tensor([80.0, -80.0, 79.9, 0.0])
    assert tiny is not None and _draws(tiny, logits, 50) == {0}


def test_top_k_draws_from_the_k_highest_only() -> None:
    logits = torch.linspace(0.0, 2.0, 40)
    assert _draws(sampler(1.0, seed=2, top_k=3), logits) <= {37, 38, 39}
    assert len(_draws(sampler(1.0, seed=2, top_k=0), logits)) > 10  # 0: all tokens
    assert len(_draws(sampler(1.0, seed=2, top_k=-1), logits)) > 10  # -1: all tokens too
    assert len(_draws(sampler(1.0, seed=2, top_k=10**9), logits)) > 10  # more than the vocabulary
    assert _draws(sampler(1.0, seed=2, top_k=1), logits, 20) == {39}


def test_min_p_keeps_tokens_at_least_that_fraction_of_the_most_probable() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert _draws(sampler(1.0, seed=3, min_p=0.4), logits) == {0, 1}  # 0.3 >= 0.4 * 0.5 > 0.15
    assert _draws(sampler(1.0, seed=3, min_p=1.0), logits, 20) == {0}
    assert _draws(sampler(1.0, seed=3, min_p=0.0), logits) == {0, 1, 2, 3}


def test_the_repetition_penalty_is_hugging_faces_over_prompt_and_completion() -> None:
    logits = torch.tensor([2.0, -1.0, 0.5, 3.0, -2.0, 1.0])
    prompt, completion = [0, 1], [4]
    adjust = Adjustments(repetition_penalty=1.3)
    ours = adjust.apply(logits.clone(), {4: 1}, prompt)
    theirs = RepetitionPenaltyLogitsProcessor(1.3)(
        torch.tensor([prompt + completion]), logits.clone().unsqueeze(0)
    )[0]
    assert torch.equal(ours, theirs)  # 2/1.3, -1*1.3, -2*1.3; the others unchanged
    history: list[int] = []
    choose = sampler(0.0, adjust=Adjustments(repetition_penalty=2.0), history=lambda: history, prompt=[3])
    assert choose is not None and choose(logits) == 0  # 3.0 is in the prompt: 1.5 < 2.0
    history.append(0)
    assert choose(logits) == 3  # now both are seen: 1.0 against 1.5


@pytest.mark.parametrize("penalty", [1e-300, 5e-324, 1e-45, 1e300, 1.7e308])
def test_an_extreme_repetition_penalty_keeps_every_logit_finite(penalty: float) -> None:
    logits = torch.tensor([0.0, 5.0, -5.0, 1.0])
    scores = Adjustments(repetition_penalty=penalty).apply(logits.clone(), {}, [0, 1, 2])
    assert all(math.isfinite(v) for v in scores.tolist())
    choose = sampler(0.7, seed=4, adjust=Adjustments(repetition_penalty=penalty), prompt=[0, 1, 2])
    assert choose is not None and 0 <= choose(logits) < 4


def test_allowed_token_ids_and_min_tokens_mask_the_pick() -> None:
    logits = torch.tensor([5.0, 4.0, 3.0, 2.0])
    only = sampler(0.0, masks=Masks(allowed=frozenset({2, 3})))
    assert only is not None and only(logits) == 2
    assert _draws(sampler(1.0, seed=5, masks=Masks(allowed=frozenset({1, 3}))), logits) <= {1, 3}
    history: list[int] = []
    early = sampler(0.0, masks=Masks(min_tokens=2, ends=frozenset({0})), history=lambda: history)
    assert early is not None
    assert early(logits) == 1  # the end id waits for two tokens
    history.append(1)
    assert early(logits) == 1
    history.append(1)
    assert early(logits) == 0
    # Without a history the chooser counts its own picks.
    own = sampler(0.0, masks=Masks(min_tokens=1, ends=frozenset({0})))
    assert own is not None and [own(logits), own(logits)] == [1, 0]
    # When the ends are all that is allowed, they stay: nothing else could be chosen.
    stuck = sampler(0.0, masks=Masks(allowed=frozenset({0}), min_tokens=5, ends=frozenset({0})))
    assert stuck is not None and stuck(logits) == 0


@pytest.mark.parametrize(
    ("kwargs", "adjust"),
    [
        ({"top_k": -2}, {}),
        ({"min_p": 1.5}, {}),
        ({"min_p": -0.1}, {}),
        ({"top_p": 0.0}, {}),
        ({}, {"repetition_penalty": 0.0}),
        ({}, {"repetition_penalty": -1.0}),
        ({}, {"repetition_penalty": math.inf}),
        ({}, {"logit_bias": {1: math.nan}}),
    ],
)
def test_out_of_range_settings_are_refused(kwargs: dict[str, float], adjust: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        sampler(1.0, adjust=Adjustments(**adjust), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        sampler(math.nan)
    with pytest.raises(UsageError):
        Masks(min_tokens=-1)


def test_a_sink_decides_where_the_completion_ends_past_eos(llama: LoadedModel) -> None:
    prompt = llama.encode("Decoding goes on past EOS when its sink says so.", first=True)
    eos = llama.tokenizer.eos_token_id
    always_eos = sampler(0.0, adjust=Adjustments({eos: 100.0}))
    alone = plain_generate(llama, prompt, 4, stop_at_eos=True, choose=always_eos)
    assert alone.tokens == [eos]  # without a sink: EOS ends it
    sunk = plain_generate(llama, prompt, 4, stop_at_eos=True, choose=always_eos, on_token=lambda t: True)
    assert sunk.tokens == [eos] * 4  # the sink goes on (ignore_eos), to the step limit
    cut = plain_generate(llama, prompt, 4, stop_at_eos=True, choose=always_eos, on_token=lambda t: False)
    assert cut.tokens == [eos]
