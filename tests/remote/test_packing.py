"""kvreg.remote.packing: how push cuts the missing objects into object packs."""

from __future__ import annotations

import math

from kvreg.core.digest import Digest
from kvreg.remote.packing import PACK_BYTES, plan_packs

MIB = 1 << 20


def _objects(*sizes: int) -> tuple[list[Digest], dict[Digest, int]]:
    digests = [Digest.of_bytes(b"%d" % i) for i in range(len(sizes))]
    return digests, dict(zip(digests, sizes, strict=True))


def test_packs_keep_the_order_and_close_at_the_count_and_the_bytes() -> None:
    digests, sizes = _objects(*[4096] * 7)
    session = dict.fromkeys(digests, "u")
    assert plan_packs(digests, sizes, session, max_objects=3) == [digests[:3], digests[3:6], digests[6:]]
    part = PACK_BYTES * 15 // 32  # three of them: more than PACK_BYTES and its slack, two fit
    digests, sizes = _objects(part, part, part, 1)
    session = dict.fromkeys(digests, "u")
    assert plan_packs(digests, sizes, session, max_objects=256) == [digests[:2], digests[2:]]
    # The registry's max_pack_bytes lowers the cap; PACK_BYTES bounds it from above.
    lowered = plan_packs(digests, sizes, session, max_objects=256, max_bytes=PACK_BYTES * 5 // 8)
    assert lowered == [digests[:1], digests[1:2], digests[2:]]
    bounded = plan_packs(digests, sizes, session, max_objects=256, max_bytes=1 << 40)
    assert bounded == [digests[:2], digests[2:]]


def test_a_large_object_goes_alone_and_a_session_change_closes_a_pack() -> None:
    digests, sizes = _objects(1, PACK_BYTES, 2, 3, 4)
    session = {d: ("a" if i < 4 else "b") for i, d in enumerate(digests)}
    assert plan_packs(digests, sizes, session, max_objects=256) == [
        [digests[1]],
        [digests[0], digests[2], digests[3]],
        [digests[4]],
    ]
    assert plan_packs([], {}, {}, max_objects=256) == []


def test_packs_come_in_full_rounds_of_the_jobs() -> None:
    # bench/push_pull.py's 1 GiB deposit: 64 chunks a little over 16 MiB, and three small objects.
    digests, sizes = _objects(*[16 * MIB + 300] * 64, 40_000, 900, 2_000_000)
    session = dict.fromkeys(digests, "u")
    packs = plan_packs(digests, sizes, session, max_objects=256, max_bytes=256 * MIB, jobs=4)
    # Full rounds of four packs of at most a quarter over PACK_BYTES: 16 of 64 MiB, or 8 of 128.
    rounds = math.ceil(sum(sizes.values()) / (4 * PACK_BYTES * 1.25))
    assert len(packs) == 4 * rounds
    assert [d for pack in packs for d in pack] == digests
    per_pack = 64 / len(packs)
    assert all(per_pack - 1 <= len(pack) <= per_pack + 3 for pack in packs)
    # Small objects are spread over the jobs too, not sent as one pack by one job.
    digests, sizes = _objects(*[20_000] * 630)
    session = dict.fromkeys(digests, "u")
    packs = plan_packs(digests, sizes, session, max_objects=256, jobs=4)
    assert len(packs) == 4 and max(map(len, packs)) - min(map(len, packs)) <= 3


def test_any_plan_keeps_every_object_once_in_order_within_the_limits() -> None:
    import random

    rng = random.Random(15)
    for _ in range(300):
        n = rng.randrange(0, 60)
        digests, sizes = _objects(*[rng.choice([0, 1, 4096, MIB, 10 * MIB, 70 * MIB]) for _ in range(n)])
        session = {d: rng.choice("ab") for d in digests}
        max_objects, max_bytes = rng.randrange(1, 9), rng.choice([MIB, 32 * MIB, 256 * MIB])
        packs = plan_packs(
            digests, sizes, session, max_objects=max_objects, max_bytes=max_bytes, jobs=rng.randrange(1, 9)
        )
        assert sorted(d for pack in packs for d in pack) == sorted(digests)
        for pack in packs:
            assert sorted(pack, key=digests.index) == pack  # upload order within a pack
            assert pack and len({session[d] for d in pack}) == 1
            if len(pack) > 1:
                assert len(pack) <= max_objects and sum(sizes[d] for d in pack) <= max_bytes
                assert all(sizes[d] < min(max_bytes, PACK_BYTES) for d in pack)


def test_limits_must_be_positive() -> None:
    import pytest

    with pytest.raises(ValueError, match="positive"):
        plan_packs([], {}, {}, max_objects=256, jobs=0)
