"""Check and clean the local store: ``kvreg fsck`` and ``kvreg gc [--evict]``.

:func:`check_store` re-hashes every object, quarantines damaged ones (unless told
not to) and checks refs, envelopes and manifests (``kvreg.store.fsck``); its
report's ``error`` is set when it found a problem. :func:`collect_garbage`
deletes what no ref reaches and is older than the grace period
(``kvreg.store.gc``) and, when asked, then evicts down to the store's budget
(:func:`kvreg.app.paging.evict`). This module renders and prints nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app import paging
from kvreg.core.errors import IntegrityError, KvregError
from kvreg.store import gc
from kvreg.store.eviction import EvictReport
from kvreg.store.fsck import FsckReport, fsck
from kvreg.store.gc import DEFAULT_GRACE_SECONDS, GcReport
from kvreg.store.home import Home

__all__ = ["DEFAULT_GRACE_SECONDS", "CheckReport", "CollectReport", "check_store", "collect_garbage"]


@dataclass(frozen=True)
class CheckReport:
    root: Path  # the store checked
    fsck: FsckReport

    @property
    def error(self) -> KvregError | None:
        if self.fsck.ok:
            return None
        return IntegrityError(
            f"fsck found {len(self.fsck.problems)} problem(s) in {self.root}",
            hint="damaged objects are in quarantine/; pull or deposit them again",
        )

    def to_dict(self) -> dict[str, Any]:
        return self.fsck.to_dict()


@dataclass(frozen=True)
class CollectReport:
    gc: GcReport
    eviction: EvictReport | None = None  # with evict: what the eviction after gc did

    def to_dict(self) -> dict[str, Any]:
        data = self.gc.to_dict()
        if self.eviction is not None:
            data["eviction"] = self.eviction.to_dict()
        return data


def check_store(home: Home, *, quarantine: bool = True) -> CheckReport:
    """Check the whole store; damaged objects move to ``quarantine/`` unless ``quarantine`` is False."""
    return CheckReport(home.root, fsck(home, quarantine=quarantine))


def collect_garbage(
    home: Home, *, grace_seconds: float = DEFAULT_GRACE_SECONDS, dry_run: bool = False, evict: bool = False
) -> CollectReport:
    """Remove (or, ``dry_run``, list) what no ref reaches and is older than ``grace_seconds``; with
    ``evict``, then evict least recently used unpinned objects down to ``store.max-bytes``."""
    report = gc.collect_garbage(home, grace_seconds=grace_seconds, dry_run=dry_run)
    evicted = paging.evict(home, dry_run=dry_run, grace_seconds=grace_seconds) if evict else None
    return CollectReport(report, evicted)
