"""Keep the local store under its size budget: pin, unpin, list the pins, evict.

:func:`pin`, :func:`unpin` and :func:`list_pins` change or read the store's pins
(``kvreg.store.pins``: what a pinned ref reaches is never evicted); :func:`evict`
deletes least recently used unpinned objects until the store fits its budget
(``kvreg.store.eviction``), ``store.max-bytes`` unless the request gives one. This
module renders and prints nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreg.core.errors import UsageError
from kvreg.core.sizes import parse_size
from kvreg.store import eviction, pins
from kvreg.store.eviction import EvictReport
from kvreg.store.gc import DEFAULT_GRACE_SECONDS
from kvreg.store.home import Home

__all__ = ["EvictReport", "PinReport", "PinsReport", "UnpinReport", "evict", "list_pins", "pin", "unpin"]


@dataclass(frozen=True)
class PinReport:
    target: str
    new: bool  # False: it was pinned already

    def to_dict(self) -> dict[str, Any]:
        return {"pinned": self.target, "new": self.new}


@dataclass(frozen=True)
class UnpinReport:
    target: str
    was_pinned: bool

    def to_dict(self) -> dict[str, Any]:
        return {"unpinned": self.target, "was_pinned": self.was_pinned}


@dataclass(frozen=True)
class PinsReport:
    pins: list[str]  # the pinned refs and digests, sorted

    def to_dict(self) -> dict[str, Any]:
        return {"pins": self.pins}


def pin(home: Home, target: str) -> PinReport:
    """Pin a ref (``ns/name``) or a manifest digest; ``NotFoundError`` if it does not exist."""
    return PinReport(target, pins.pin(home, target))


def unpin(home: Home, target: str) -> UnpinReport:
    return UnpinReport(target, pins.unpin(home, target))


def list_pins(home: Home) -> PinsReport:
    return PinsReport(pins.pinned(home))


def evict(
    home: Home,
    *,
    max_bytes: str | None = None,
    dry_run: bool = False,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
) -> EvictReport:
    """Evict down to ``max_bytes`` (a size as typed, e.g. ``20GiB``) or, without it, to
    ``store.max-bytes``; objects younger than ``grace_seconds`` stay."""
    if max_bytes is None:
        return eviction.evict(home, dry_run=dry_run, grace_seconds=grace_seconds)
    budget = parse_size(max_bytes)
    if budget is None:
        raise UsageError("--max-bytes needs a size, e.g. 20GiB")
    return eviction.evict(home, max_bytes=budget, dry_run=dry_run, grace_seconds=grace_seconds)
