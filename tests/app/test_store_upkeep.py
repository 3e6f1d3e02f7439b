"""The store-upkeep use cases in process: ``kvreg.app.paging`` (pins, eviction) and
``kvreg.app.maintenance`` (fsck, gc). The commands as users run them are in
tests/cli/test_cli_paging.py and tests/cli/test_cli_maintenance.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from kvreg.app import maintenance, paging
from kvreg.core.digest import Digest
from kvreg.core.errors import IntegrityError, NotFoundError, UsageError
from kvreg.core.names import RefName
from kvreg.store.home import Home

OLD = time.time() - 7200


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def _ref(home: Home, name: str) -> Digest:
    """A ref to a stored object (pins only need the ref to exist)."""
    m = home.objects.put_bytes(json.dumps([name]).encode()).digest
    home.envelopes.put(m, b"{}")
    home.refs.set(RefName.parse(name), m)
    return m


def test_pin_unpin_and_list(home: Home) -> None:
    _ref(home, "ns/a")
    assert paging.pin(home, "ns/a").to_dict() == {"pinned": "ns/a", "new": True}
    assert paging.pin(home, "ns/a").to_dict() == {"pinned": "ns/a", "new": False}
    assert paging.list_pins(home).to_dict() == {"pins": ["ns/a"]}
    assert paging.unpin(home, "ns/a").to_dict() == {"unpinned": "ns/a", "was_pinned": True}
    assert paging.unpin(home, "ns/a").was_pinned is False
    assert paging.list_pins(home).pins == []
    with pytest.raises(NotFoundError):
        paging.pin(home, "ns/absent")


def test_evict_budget_from_config_or_request(home: Home) -> None:
    report = paging.evict(home)  # no store.max-bytes: nothing to do
    assert report.max_bytes is None and report.evicted == []
    report = paging.evict(home, max_bytes="1KiB", dry_run=True)
    assert report.max_bytes == 1024 and report.dry_run and not report.over_budget
    assert report.to_dict()["max_bytes"] == 1024
    with pytest.raises(UsageError, match="--max-bytes needs a size"):
        paging.evict(home, max_bytes="none")
    with pytest.raises(UsageError, match="invalid size"):
        paging.evict(home, max_bytes="lots")


def test_check_store_clean_and_damaged(home: Home) -> None:
    clean = maintenance.check_store(home)
    assert clean.error is None and clean.to_dict() == clean.fsck.to_dict() and clean.to_dict()["ok"]
    digest = home.objects.put_bytes(b"payload").digest
    path = home.objects.path(digest)
    os.chmod(path, 0o644)
    path.write_bytes(b"damaged")
    kept = maintenance.check_store(home, quarantine=False)
    assert isinstance(kept.error, IntegrityError)
    assert kept.error.message == f"fsck found {len(kept.fsck.problems)} problem(s) in {home.root}"
    assert kept.fsck.quarantined == [] and path.exists()
    moved = maintenance.check_store(home)
    assert not moved.fsck.ok and moved.fsck.quarantined and not path.exists()


def test_collect_garbage_with_and_without_eviction(home: Home) -> None:
    digest = home.objects.put_bytes(b"unreferenced").digest
    os.utime(home.objects.path(digest), (OLD, OLD))
    dry = maintenance.collect_garbage(home, dry_run=True)
    assert dry.eviction is None and "eviction" not in dry.to_dict()
    assert dry.gc.removed_objects == [digest] and home.objects.has(digest)
    fresh = maintenance.collect_garbage(home, grace_seconds=3 * 3600)
    assert fresh.gc.removed_objects == [] and fresh.gc.kept_fresh == 1
    done = maintenance.collect_garbage(home, evict=True)
    assert done.gc.removed_objects == [digest] and not home.objects.has(digest)
    assert done.eviction is not None and done.to_dict()["eviction"] == done.eviction.to_dict()
