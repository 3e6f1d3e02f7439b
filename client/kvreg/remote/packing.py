"""Group the objects a push sends into object packs (one request for several objects), and
those a pull fetches into fetch packs (one answer for several objects).

A registry that publishes ``max_pack_objects`` in its limits takes several objects
of one upload session in one ``POST .../uploads/{id}/objects``
(``kvreg.remote.api.objects.ObjectsApi.put_objects``), which saves the few
milliseconds of server CPU a request costs whatever its size. :func:`plan_packs`
decides the grouping: objects in upload order, cut into a number of packs of about
the same size that is a multiple of the push's parallel jobs (so that the last
round of packs keeps every job busy), each about :data:`PACK_BYTES` or less, and
within the registry's limits; a pack also closes where the upload session changes.
An object of :data:`PACK_BYTES` or more goes alone (a single PUT: it gains nothing
from a pack, and a failure then resends only it).

Measured (bench/push_pull.py, 1 GiB of 16 MiB chunks, 4 jobs): closing a pack at
64 MiB made 22 packs of three chunks, five full rounds and a sixth of two packs;
16 packs of four chunks keep the four jobs busy to the end. Packs of 128 MiB (8 of
eight chunks) then halved what the registry pays per pack (a request, three
transactions, about 12 to 16 ms of CPU on a 2-core Zen 3 host): a push of 1 GiB cost
it about 0.1 CPU s less. A pack that fails is sent again whole, so a larger one costs
more on a flaky link; 128 MiB per job is the compromise (docs/benchmarks.md).

A pull plans its fetch packs (``POST .../objects/fetch``) with the same function, one
"session" for all (``kvreg.remote.staging.fetch_units``): the registry's per-request CPU is
the same whichever way the bytes go.

This module only plans; it sends and fetches nothing (``kvreg.remote.pushing`` and
``kvreg.remote.staging`` do).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kvreg.core.digest import Digest

__all__ = ["PACK_BYTES", "plan_packs"]

#: About the most bytes a push puts in one pack (the registry's ``max_pack_bytes`` may lower it).
PACK_BYTES = 128 << 20
#: A pack's target size may pass :data:`PACK_BYTES` by this factor, so that an amount just over a
#: multiple of it (1 GiB of chunks a little over 16 MiB) is not cut into one more round of packs.
_SLACK = 1.25


def plan_packs(
    digests: Sequence[Digest],
    sizes: Mapping[Digest, int],
    session_of: Mapping[Digest, str],
    *,
    max_objects: int,
    max_bytes: int = PACK_BYTES,
    jobs: int = 1,
) -> list[list[Digest]]:
    """``digests`` cut into runs, in order: each run of one upload session, at most ``max_objects``
    objects and ``max_bytes`` bytes (the registry's limits). Objects under ``min(max_bytes,
    PACK_BYTES)`` are cut into ``n`` packs of about ``total / n`` bytes, ``n`` the smallest
    multiple of ``jobs`` that keeps that within a quarter over :data:`PACK_BYTES`: a pack takes
    the next object unless that would pass the target by more than half the object, and a last
    run of less than half the target joins the one before. Larger objects go alone, each as
    soon as it comes."""
    if max_objects < 1 or max_bytes < 1 or jobs < 1:
        raise ValueError(f"limits must be positive: {max_objects} objects, {max_bytes} bytes, {jobs} jobs")
    alone = min(max_bytes, PACK_BYTES)
    total = sum(sizes[d] for d in digests if sizes[d] < alone)
    rounds = max(1, math.ceil(total / (jobs * PACK_BYTES * _SLACK)))  # rounds of ``jobs`` packs
    target = total / (rounds * jobs)
    packs: list[list[Digest]] = []
    current: list[Digest] = []
    held = 0
    previous: tuple[int, int] | None = None  # the last run closed: its index in packs, its bytes
    for d in digests:
        size = sizes[d]
        if size >= alone:
            packs.append([d])
            continue
        if current and (
            len(current) >= max_objects
            or held + size > max_bytes
            or held + size / 2 > target
            or session_of[current[0]] != session_of[d]
        ):
            previous = (len(packs), held)
            packs.append(current)
            current, held = [], 0
        current.append(d)
        held += size
    if current and previous is not None and held < target / 2:  # a small rest joins the run before
        index, before = previous
        last = packs[index]
        if (
            len(last) + len(current) <= max_objects
            and before + held <= max_bytes
            and session_of[last[0]] == session_of[current[0]]
        ):
            last += current
            current = []
    if current:
        packs.append(current)
    return packs
