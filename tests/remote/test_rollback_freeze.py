"""Per-ref rollback and freeze, on the client's side, against the in-memory ``FakeLog``.

A ref's proven entry must be its latest change: a later entry that moves or deletes the
ref (read and authenticated against the signed checkpoint), or a higher entry this store
proved before, is ``RefRollbackError``. A checkpoint signed longer ago than the remote's
maximum age, or undated after dated ones, is ``CheckpointStaleError``. Both exit 3 and
store nothing. The real registry and a lying proxy are
``tests/integration/test_adversarial.py``'s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kvreg.core import logtree, merkle
from kvreg.core.checkpoint import Checkpoint, checkpoint_timestamp, open_note, sign_checkpoint
from kvreg.core.errors import EXIT_INTEGRITY, CheckpointStaleError, LogInconsistentError, RefRollbackError
from kvreg.core.logverify import ref_claim, right_sibling_ranges
from kvreg.core.merkle import leaf_hash, root_from_leaf_hashes
from kvreg.remote import auditlog
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.remotes import DEFAULT_MAX_CHECKPOINT_AGE, RemoteConfig, parse_age
from kvreg.store.audit_state import RemoteLogStore
from kvreg.store.home import Home

from .test_auditlog import URL, FakeLog

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
DAY = 24 * 3600


class DatedLog(FakeLog):
    """``FakeLog`` whose checkpoints carry a ``timestamp`` line (``stamp``; None: undated)."""

    def __init__(self) -> None:
        super().__init__()
        self.stamp: int | None = int(time.time())

    def note(self, size: int | None = None) -> str:
        n = len(self.entries) if size is None else size
        cp = Checkpoint(self.origin, n, self.root(n))
        return sign_checkpoint(cp, self.key, self.origin, timestamp=self.stamp)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    RemoteConfig(h).add("origin", URL)
    return h


@pytest.fixture
def fake() -> DatedLog:
    log = DatedLog()
    for _ in range(3):
        log.append()
    return log


def _state(home: Home) -> bytes | None:
    path = RemoteLogStore(home).path("origin")
    return path.read_bytes() if path.exists() else None


def _ref(fake: FakeLog, type_: str, digest: str | None, old: str | None = None, ref: str = "ns/r") -> int:
    return fake.append(
        type_, "ns", subjects=[digest or old], old=old, new=digest, details={"ref": ref}, actor="alice"
    )


def _prove(home: Home, fake: FakeLog, index: int, digest: str, **options: object) -> dict[str, object]:
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client, **options)  # type: ignore[arg-type]
        report = audit.prove([ref_claim(index, "ns", "r", digest)])
        audit.save()
    return report


# --- freeze ---------------------------------------------------------------------------------------


def test_the_registry_dates_its_checkpoints_and_the_age_is_parsed() -> None:
    fake = DatedLog()
    fake.stamp = 1_700_000_000
    assert checkpoint_timestamp(open_note(fake.note(), fake.verifier)) == 1_700_000_000
    fake.stamp = None
    assert checkpoint_timestamp(open_note(fake.note(), fake.verifier)) is None
    assert [parse_age(t) for t in ("90", "90s", "30m", "24h", "7d", "off", "0")] == [
        90,
        90,
        1800,
        DAY,
        7 * DAY,
        0,
        0,
    ]
    for bad in ("-1", "1y", "", "24 h", "99999999999d"):
        with pytest.raises(Exception, match="invalid age"):
            parse_age(bad)


def test_a_checkpoint_older_than_the_maximum_age_is_refused(home: Home, fake: DatedLog) -> None:
    fake.stamp = int(time.time()) - 2 * DAY
    with fake.client() as client, pytest.raises(CheckpointStaleError) as info:
        RemoteLog(home, "origin", client).check()  # the default: 24 hours
    e = info.value
    assert e.exit_code == EXIT_INTEGRITY and e.code == "CHECKPOINT_STALE"
    assert "freeze" in e.message and e.details["max_age"] == DEFAULT_MAX_CHECKPOINT_AGE
    assert _state(home) is None
    with fake.client() as client:
        assert RemoteLog(home, "origin", client, max_age=3 * DAY).check() is not None
    RemoteConfig(home).add("origin", URL, max_checkpoint_age=0)  # off, as a remote setting
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client)
        audit.check()
        assert audit.summary()["signed_at"] == fake.stamp and audit.summary()["max_checkpoint_age"] == 0


def test_an_undated_checkpoint_after_dated_ones_is_refused(
    home: Home, fake: DatedLog, tmp_path: Path
) -> None:
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client)
        audit.check()
        audit.save()
    before = _state(home)
    fake.stamp = None
    fake.append()
    with fake.client() as client, pytest.raises(CheckpointStaleError, match="not dated"):
        RemoteLog(home, "origin", client).check()
    assert _state(home) == before
    # A store that never saw a dated checkpoint accepts an undated one (older registries).
    other = Home(tmp_path / "other")
    RemoteConfig(other).add("origin", URL)
    with fake.client() as client:
        assert RemoteLog(other, "origin", client).check() is not None


# --- per-ref rollback -------------------------------------------------------------------------------


def test_a_ref_entry_followed_by_a_later_change_is_refused(home: Home, fake: DatedLog) -> None:
    created = _ref(fake, "ref.created", D1)
    fake.append()
    moved = _ref(fake, "ref.moved", D2, old=D1)
    _ref(fake, "ref.created", D1, ref="ns/another")  # other refs do not count
    before = _state(home)
    with fake.client() as client, pytest.raises(RefRollbackError) as info:
        RemoteLog(home, "origin", client).prove([ref_claim(created, "ns", "r", D1)])
    e = info.value
    assert e.code == "REF_ROLLBACK" and e.exit_code == EXIT_INTEGRITY
    assert e.details["later_index"] == moved and e.details["later_value"] == D2
    assert _state(home) == before

    report = _prove(home, fake, moved, D2)
    assert report["entries"][0]["latest"] == "proven"  # type: ignore[index]
    # A deletion after the entry counts as a later change too.
    _ref(fake, "ref.deleted", None, old=D2)
    with fake.client() as client, pytest.raises(RefRollbackError, match="deleted"):
        RemoteLog(home, "origin", client).prove([ref_claim(moved, "ns", "r", D2)])


def test_a_ref_moved_away_and_back_is_its_value(home: Home, fake: DatedLog) -> None:
    """A -> B -> A: the older entry names the ref's current value; accepted, the newest remembered."""
    first = _ref(fake, "ref.created", D1)
    _ref(fake, "ref.moved", D2, old=D1)
    back = _ref(fake, "ref.moved", D1, old=D2)
    assert _prove(home, fake, first, D1)["entries"][0]["latest"] == "proven"  # type: ignore[index]
    stored = json.loads(_state(home) or b"{}")
    assert stored["refs"] == {"ns/r": {"index": back, "digest": D1}}


def test_entries_edited_or_withheld_after_the_ref_entry_do_not_pass(home: Home, fake: DatedLog) -> None:
    created = _ref(fake, "ref.created", D1)
    moved = _ref(fake, "ref.moved", D2, old=D1)
    # The registry hides the move: it serves that entry as one about another ref.
    doc = json.loads(fake.entries[moved])
    doc["details"]["ref"] = "ns/elsewhere"
    fake.served[moved] = json.dumps(doc).encode()
    with fake.client() as client, pytest.raises(LogInconsistentError, match="not those of its signed log"):
        RemoteLog(home, "origin", client).prove([ref_claim(created, "ns", "r", D1)])
    # Or serves fewer entries than its checkpoint commits to.
    fake.served.clear()
    fake.serve_only = moved
    with fake.client() as client, pytest.raises(LogInconsistentError, match="does not serve audit entry"):
        RemoteLog(home, "origin", client).prove([ref_claim(created, "ns", "r", D1)])


def test_the_highest_proven_entry_is_remembered(home: Home, fake: DatedLog) -> None:
    created = _ref(fake, "ref.created", D1)
    moved = _ref(fake, "ref.moved", D2, old=D1)
    _prove(home, fake, moved, D2)
    assert json.loads(_state(home) or b"{}")["refs"]["ns/r"] == {"index": moved, "digest": D2}
    # Entries unreadable now (no token): only this store's memory catches the rollback.
    fake.private = True
    before = _state(home)
    with fake.client() as client, pytest.raises(RefRollbackError, match="proved entry") as info:
        RemoteLog(home, "origin", client).prove([ref_claim(created, "ns", "r", D1)])
    assert info.value.details["seen_index"] == moved and _state(home) == before


def test_what_is_not_checked_is_said(
    home: Home, fake: DatedLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = _ref(fake, "ref.created", D1)
    for _ in range(5):
        fake.append()
    monkeypatch.setattr(auditlog, "MAX_LATEST_SCAN", 3)
    report = _prove(home, fake, created, D1)
    assert report["entries"][0]["latest"] == "not checked"  # type: ignore[index]
    assert any("more than the 3 read" in n for n in report["notes"])  # type: ignore[attr-defined]
    monkeypatch.undo()
    fake.private = True
    other = Home(tmp_path / "other")
    RemoteConfig(other).add("origin", URL)
    report = _prove(other, fake, created, D1)
    assert report["entries"][0]["latest"] == "not checked"  # type: ignore[index]
    assert any("could not be read without a token" in n for n in report["notes"])  # type: ignore[attr-defined]


def test_the_right_siblings_of_an_inclusion_proof_cover_the_entries_after_it() -> None:
    leaves = [leaf_hash(bytes([i])) for i in range(37)]
    for size in range(1, len(leaves) + 1):
        nodes = logtree.from_leaves(leaves[:size])
        for index in range(size):
            proof = merkle.inclusion_proof(
                index, size, logtree.stored_range_hash(lambda lv, ix, nodes=nodes: nodes[(lv, ix)])
            )
            ranges = right_sibling_ranges(index, size)
            assert len(ranges) == len(proof)
            covered: list[int] = []
            for h, r in zip(proof, ranges, strict=True):
                if r is not None:
                    assert root_from_leaf_hashes(leaves[r[0] : r[1]]) == h
                    covered.extend(range(*r))
            assert sorted(covered) == list(range(index + 1, size))
