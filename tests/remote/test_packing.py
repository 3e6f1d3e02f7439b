"""kvreg.remote.packing: how push cuts the missing objects into object packs."""

from __future__ import annotations

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
    digests, sizes = _objects(30 * MIB, 30 * MIB, 30 * MIB, 1)
    session = dict.fromkeys(digests, "u")
    assert plan_packs(digests, sizes, session, max_objects=256) == [digests[:2], digests[2:]]
    # The registry's max_pack_bytes lowers the cap; PACK_BYTES bounds it from above.
    lowered = plan_packs(digests, sizes, session, max_objects=256, max_bytes=40 * MIB)
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
