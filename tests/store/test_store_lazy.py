"""Objects a lazy pull left on the registry: recorded, listed by fsck apart from problems,
named in read errors with the command that fetches them, superseded by later events."""

from __future__ import annotations

import json
import time

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import ObjectNotFoundError, UsageError
from kvreg.core.names import RefName
from kvreg.store import absence, access_log, eviction
from kvreg.store.fsck import ProblemKind, fsck
from kvreg.store.home import Home

OLD = time.time() - 7200


def json_children(data: bytes) -> list[Digest]:
    return [Digest(d) for d in json.loads(data)]


def _lazy(home: Home, name: str, present: list[bytes], absent: list[bytes]) -> list[Digest]:
    """A toy artifact whose ``absent`` objects a lazy pull from ``origin`` did not fetch."""
    kids = [home.objects.put_bytes(p).digest for p in present]
    left = [Digest.of_bytes(a) for a in absent]
    m = home.objects.put_bytes(json.dumps(sorted(map(str, kids + left))).encode()).digest
    home.envelopes.put(m, b"{}")
    access_log.record_deferred(home, left, remote="origin", remote_ref=name, local_ref=name, now=OLD)
    home.refs.set(RefName.parse(name), m)
    return left


def test_fsck_lists_objects_not_fetched_apart_from_problems(home):
    left = _lazy(home, "ns/a", [b"tokens"], [b"chunk 0", b"chunk 1"])
    report = fsck(home, children=json_children)
    assert report.ok, report.problems
    assert {p.subject for p in report.not_fetched} == {str(d) for d in left}
    assert all(p.kind == ProblemKind.OBJECT_NOT_FETCHED for p in report.not_fetched)
    assert "not fetched (lazy pull" in report.not_fetched[0].message
    assert "kvreg pull origin ns/a" in report.not_fetched[0].message
    assert report.evicted == []
    assert [p["kind"] for p in report.to_dict()["not_fetched"]] == ["object-not-fetched"] * 2


def test_reading_an_object_not_fetched_says_how_to_fetch_it(home):
    [chunk] = _lazy(home, "ns/a", [b"tokens"], [b"chunk 0"])
    with pytest.raises(ObjectNotFoundError) as info:
        home.objects.read(chunk)  # what kvreg cat does
    err = info.value
    assert err.exit_code == 1 and err.details["deferred"] is True and err.details["evicted"] is False
    assert "not fetched" in err.message and "--lazy" in err.message
    assert "kvreg pull origin ns/a" in err.hint and "kvreg ask --remote origin" in err.hint
    graft_err = absence.missing_object_error(home, chunk, "chunk 0", ref="ns/a")  # what a graft raises
    assert graft_err.details["deferred"] and "chunk 0" in graft_err.message


def test_local_name_differs_from_the_remote_one(home):
    kids = [Digest.of_bytes(b"chunk")]
    access_log.record_deferred(home, kids, remote=None, remote_ref="up/x", local_ref="mine/x")
    err = absence.absence_error(home, kids[0], "chunk 0")
    assert err is not None and "kvreg pull REMOTE up/x --as mine/x" in (err.hint or "")


def test_the_later_event_explains_the_absence(home):
    [chunk] = _lazy(home, "ns/a", [b"tokens"], [b"chunk 0"])
    # fetched on demand, then evicted: "evicted", no longer "not fetched"
    home.objects.put_bytes(b"chunk 0")
    access_log.touch(home, [chunk], now=OLD + 10)
    assert fsck(home, children=json_children).not_fetched == []
    home.objects.remove(chunk)
    with access_log.locked(home):
        access_log.record_evictions(home, [chunk], when=OLD + 20)
    err = absence.missing_object_error(home, chunk, "chunk 0", ref="ns/a")
    assert err.details["evicted"] is True and "evicted" in err.message
    report = fsck(home, children=json_children)
    assert report.ok and [p.subject for p in report.evicted] == [str(chunk)] and report.not_fetched == []
    # a lazy pull again afterwards: "not fetched" again
    access_log.record_deferred(
        home, [chunk], remote="origin", remote_ref="ns/a", local_ref="ns/a", now=OLD + 30
    )
    assert absence.missing_object_error(home, chunk, "chunk 0").details.get("deferred") is True


def test_a_missing_object_without_a_record_is_still_a_problem(home):
    _lazy(home, "ns/a", [b"tokens"], [b"chunk 0"])
    gone = home.objects.put_bytes(b"other").digest
    m = home.objects.put_bytes(json.dumps([str(gone)]).encode()).digest
    home.envelopes.put(m, b"{}")
    home.refs.set(RefName.parse("ns/b"), m)
    home.objects.remove(gone)
    report = fsck(home, children=json_children)
    assert [p.kind for p in report.problems] == [ProblemKind.OBJECT_MISSING]
    assert len(report.not_fetched) == 1


def test_eviction_compaction_keeps_records_of_objects_still_absent(home):
    left = _lazy(home, "ns/a", [b"tokens"], [b"chunk 0", b"chunk 1"])
    fetched = home.objects.put_bytes(b"chunk 1").digest  # a full pull fetched this one later
    assert fetched == left[1]
    eviction.evict(home, max_bytes=0, children=json_children)
    lines = access_log.deferred_log_path(home).read_text().splitlines()
    assert len(lines) == 1 and left[0].hex in lines[0]  # still absent, still explained
    assert fsck(home, children=json_children).ok


def test_deferral_names_must_not_hold_spaces(home):
    with pytest.raises(UsageError):
        access_log.record_deferred(
            home, [Digest.of_bytes(b"x")], remote="a b", remote_ref="ns/a", local_ref="ns/a"
        )


def test_torn_deferred_lines_are_skipped(home):
    [chunk] = _lazy(home, "ns/a", [b"tokens"], [b"chunk 0"])
    with access_log.deferred_log_path(home).open("ab") as f:
        f.write(b"L 12.0 abc origin\nL nan " + chunk.hex.encode() + b" origin ns/a ns/a\nL 1.0 ")
    rec = access_log.read_access_log(home)[chunk.hex]
    assert rec.deferred is not None and rec.deferred.remote == "origin"
