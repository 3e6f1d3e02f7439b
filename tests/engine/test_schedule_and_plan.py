"""The prefill schedule on the absolute grid, and where a graft is placed."""

from __future__ import annotations

import pytest

from kvreg.core.errors import TokenMismatchError, UsageError
from kvreg.engine.graft import common_prefix, plan_graft
from kvreg.engine.runtime import schedule


def test_schedule_follows_the_absolute_grid() -> None:
    assert schedule(0, 40, 16) == [(0, 16), (16, 32), (32, 40)]
    assert schedule(16, 40, 16) == [(16, 32), (32, 40)]
    assert schedule(0, 16, 16) == [(0, 16)]
    # a segment that starts off the grid first returns to it
    assert schedule(20, 50, 16) == [(20, 32), (32, 48), (48, 50)]


def test_schedule_keeps_an_artifact_end_as_a_boundary() -> None:
    assert schedule(0, 40, 16, split_at=21) == [(0, 16), (16, 21), (21, 32), (32, 40)]
    assert schedule(0, 40, 16, split_at=32) == [(0, 16), (16, 32), (32, 40)]
    assert schedule(0, 40, 16, split_at=40) == [(0, 16), (16, 32), (32, 40)]


class _Manifest:
    """Just what plan_graft reads."""

    def __init__(self, tokens: int, block: int) -> None:
        self.token_count = tokens
        self.block_size = block
        from kvreg.core.digest import Digest

        self.digest = Digest.of_bytes(b"m")


def test_whole_artifact_when_the_prompt_is_the_artifact() -> None:
    art = list(range(40))
    plan = plan_graft(_Manifest(40, 16), art, art)  # type: ignore[arg-type]
    assert (plan.graft_tokens, plan.chunks, plan.whole, plan.prefill_tokens, plan.split_at) == (
        40,
        3,
        True,
        0,
        None,
    )


def test_artifact_end_off_grid_then_suffix_keeps_the_split() -> None:
    art = list(range(40))
    plan = plan_graft(_Manifest(40, 16), art, [*art, 100, 101])  # type: ignore[arg-type]
    assert (plan.graft_tokens, plan.split_at, plan.prefill_tokens) == (40, 40, 2)


def test_prefix_graft_at_the_last_shared_block_boundary() -> None:
    art = list(range(40))
    prompt = [*list(range(35)), 999, 998]
    plan = plan_graft(_Manifest(40, 16), art, prompt)  # type: ignore[arg-type]
    assert (plan.graft_tokens, plan.chunks, plan.whole, plan.split_at) == (32, 2, False, None)


def test_prompt_ending_on_a_boundary_leaves_one_block_to_compute() -> None:
    art = list(range(40))
    plan = plan_graft(_Manifest(40, 16), art, list(range(32)))  # type: ignore[arg-type]
    assert plan.graft_tokens == 16 and plan.prefill_tokens == 16


def test_forced_block_count() -> None:
    art = list(range(40))
    plan = plan_graft(_Manifest(40, 16), art, [*art, 7], blocks=1)  # type: ignore[arg-type]
    assert plan.graft_tokens == 16
    with pytest.raises(UsageError):
        plan_graft(_Manifest(40, 16), art, [0, 1, 2, 99], blocks=1)  # type: ignore[arg-type]


def test_a_prompt_that_shares_no_block_is_refused() -> None:
    art = list(range(40))
    with pytest.raises(TokenMismatchError) as err:
        plan_graft(_Manifest(40, 16), art, [0, 1, 2, 3, 77, 5])  # type: ignore[arg-type]
    assert err.value.details["shared_tokens"] == 4
    assert common_prefix([1, 2, 3], [1, 2]) == 2
