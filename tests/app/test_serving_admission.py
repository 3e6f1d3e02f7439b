"""The engine server's bounded queue (``kvreg.app.serving.admission``): how many requests it
holds, the 429 past that, the Retry-After estimate, and the default size from the CPU count."""

from __future__ import annotations

import pytest

from kvreg.app.serving import admission
from kvreg.app.serving.admission import Admission, Overloaded, default_max_queue


def test_at_most_max_queue_plus_one_are_held_and_a_place_is_given_back_once() -> None:
    queue = Admission(2)
    tickets = [queue.admit() for _ in range(3)]  # one on the model, two waiting
    with pytest.raises(Overloaded) as full:
        queue.admit()
    assert full.value.held == 3 and full.value.max_queue == 2 and full.value.retry_after == 1
    assert "retry after 1 s" in str(full.value)
    tickets[0].release()
    tickets[0].release()  # idempotent: the place is given back once
    assert queue.held == 2
    queue.admit()
    assert queue.held == 3


def test_retry_after_is_the_mean_hold_over_the_places(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(admission, "_now", lambda: now[0])
    queue = Admission(1)  # two places
    first = queue.admit()
    now[0] += 9.0  # held 9 s: a place frees about every 9 / 2 s when both are taken
    first.release()
    assert queue.retry_after() == 5  # ceil(4.5)
    second = queue.admit()
    now[0] += 19.0
    second.release()  # the running mean moves a fifth of the way: 9 + 0.2 * (19 - 9) = 11
    assert queue.retry_after() == 6  # ceil(11 / 2)
    slow = queue.admit()
    now[0] += 10_000.0
    slow.release()
    assert queue.retry_after() == 60  # at most a minute


@pytest.mark.parametrize(("cpus", "expected"), [(1, 4), (2, 8), (16, 64)])
def test_the_default_queue_is_four_places_per_usable_cpu(
    monkeypatch: pytest.MonkeyPatch, cpus: int, expected: int
) -> None:
    monkeypatch.setattr(admission, "usable_cpus", lambda: cpus)
    assert default_max_queue() == expected


def test_a_negative_queue_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        Admission(-1)
    assert Admission(0).capacity == 1
