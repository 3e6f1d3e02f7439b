"""``kvreg.engine.sampling``: logit bias and OpenAI's penalties, then greedy or a seeded draw."""

from __future__ import annotations

import pytest
import torch

from kvreg.core.errors import UsageError
from kvreg.engine.sampling import Adjustments, sampler


def _logits(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_plain_greedy_is_no_chooser_at_all() -> None:
    assert sampler(0.0) is None
    assert sampler(0.0, adjust=Adjustments({}, 0.0, 0.0)) is None


def test_a_logit_bias_moves_the_argmax() -> None:
    logits = _logits(0.0, 3.0, 2.5, 1.0)
    choose = sampler(0.0, adjust=Adjustments({2: 1.0}))
    assert choose is not None and choose(logits) == 2
    banned = sampler(0.0, adjust=Adjustments({1: -100.0, 2: -100.0}))
    assert banned is not None and banned(logits) == 3
    assert logits.tolist() == [0.0, 3.0, 2.5, 1.0]  # the model's logits are not changed


def test_penalties_follow_openais_formula_over_the_history() -> None:
    history: list[int] = []
    adjust = Adjustments(presence_penalty=0.5, frequency_penalty=0.25)
    scores = adjust.apply(_logits(1.0, 1.0, 1.0, 1.0), {1: 3, 3: 1, 2: 0})
    # token 1: 3 times -> 1 - (3 * 0.25 + 0.5); token 3: once -> 1 - (0.25 + 0.5); others unchanged
    assert scores.tolist() == [1.0, -0.25, 1.0, 0.25]
    choose = sampler(0.0, adjust=Adjustments(frequency_penalty=2.0), history=lambda: history)
    assert choose is not None
    logits = _logits(0.0, 3.0, 2.0)
    assert choose(logits) == 1
    history.append(1)
    assert choose(logits) == 2  # 3 - 2 < 2: the repeat is penalised
    history.append(2)
    assert choose(logits) == 1  # both seen once: 1 against 0, token 1 again


def test_a_negative_penalty_favours_repeats() -> None:
    choose = sampler(0.0, adjust=Adjustments(presence_penalty=-2.0), history=lambda: [0])
    assert choose is not None and choose(_logits(1.0, 2.5)) == 0


def test_seeded_draws_repeat_and_the_bias_applies_to_them() -> None:
    logits = torch.linspace(-1.0, 1.0, 50)
    a = sampler(1.0, seed=3)
    b = sampler(1.0, seed=3)
    assert a is not None and b is not None
    assert [a(logits) for _ in range(20)] == [b(logits) for _ in range(20)]
    forced = sampler(1.0, seed=3, adjust=Adjustments({7: 100.0}))
    assert forced is not None and {forced(logits) for _ in range(20)} == {7}


@pytest.mark.parametrize(
    "adjust",
    [
        {"logit_bias": {1: 100.5}},
        {"presence_penalty": 2.5},
        {"frequency_penalty": -3.0},
    ],
)
def test_out_of_range_adjustments_are_refused(adjust: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        Adjustments(**adjust)  # type: ignore[arg-type]
