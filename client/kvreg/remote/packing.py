"""Group the objects a push sends into object packs (one request for several objects).

A registry that publishes ``max_pack_objects`` in its limits takes several objects
of one upload session in one ``POST .../uploads/{id}/objects``
(``kvreg.remote.api.objects.ObjectsApi.put_objects``), which saves the few
milliseconds of server CPU a request costs whatever its size. :func:`plan_packs`
decides the grouping: objects in upload order, a pack closed at :data:`PACK_BYTES`
or at the registry's limits, or where the upload session changes; an object of
:data:`PACK_BYTES` or more goes alone (a single PUT: it gains nothing from a
pack, and a failure then resends only it).

This module only plans; it sends nothing (``kvreg.remote.pushing`` does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvreg.core.digest import Digest

__all__ = ["PACK_BYTES", "plan_packs"]

#: The most bytes a push puts in one pack (the registry's ``max_pack_bytes`` may lower it).
PACK_BYTES = 64 << 20


def plan_packs(
    digests: Sequence[Digest],
    sizes: Mapping[Digest, int],
    session_of: Mapping[Digest, str],
    *,
    max_objects: int,
    max_bytes: int = PACK_BYTES,
) -> list[list[Digest]]:
    """``digests`` cut into runs, in order: each run of one upload session, at most ``max_objects``
    objects and ``min(max_bytes, PACK_BYTES)`` bytes; an object of that size or more alone."""
    cap = min(max_bytes, PACK_BYTES)
    packs: list[list[Digest]] = []
    current: list[Digest] = []
    held = 0
    for d in digests:
        size = sizes[d]
        if size >= cap:
            packs.append([d])
            continue
        if current and (
            len(current) >= max_objects or held + size > cap or session_of[current[0]] != session_of[d]
        ):
            packs.append(current)
            current, held = [], 0
        current.append(d)
        held += size
    if current:
        packs.append(current)
    return packs
