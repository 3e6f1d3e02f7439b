"""Disk paging: config, access log, LRU eviction under a budget, pins and leases."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Iterable

import pytest

from kvreg.core import sizes
from kvreg.core.digest import Digest
from kvreg.core.errors import ConfigError, ObjectNotFoundError, RefNotFoundError, UsageError
from kvreg.core.names import RefName
from kvreg.store import absence, access_log, eviction, leases, pins, settings_file
from kvreg.store.fsck import ProblemKind, fsck
from kvreg.store.home import Home

OLD = time.time() - 7200
KB = 1000


def json_children(data: bytes) -> list[Digest]:
    """Toy manifests: a JSON list of digest strings."""
    return [Digest(d) for d in json.loads(data)]


def _deposit(
    home: Home, name: str, payloads: Iterable[bytes], *, at: float = OLD
) -> tuple[Digest, list[Digest]]:
    kids = [home.objects.put_bytes(p).digest for p in payloads]
    m = home.objects.put_bytes(json.dumps(sorted(kids)).encode()).digest
    home.envelopes.put(m, b"{}")
    home.refs.set(RefName.parse(name), m)
    for d in [*kids, m]:
        os.utime(home.objects.path(d), (at, at))
    os.utime(home.envelopes.path(m), (at, at))
    return m, kids


def _blob(tag: str, n: int = 10 * KB) -> bytes:
    return (tag.encode() * n)[:n]


def _evict(home: Home, budget: int | None, **kw):
    return eviction.evict(home, max_bytes=budget, children=json_children, **kw)


# --- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20GiB", 20 * 1024**3),
        ("500MB", 500 * 1000**2),
        ("1.5KiB", 1536),
        ("123", 123),
        ("2 G", 2 * 1024**3),
        ("none", None),
        ("NONE", None),
    ],
)
def test_parse_size(text, expected):
    assert sizes.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1GB", "12XB", "GiB", "1e9", "lots"])
def test_parse_size_refuses(text):
    with pytest.raises(UsageError):
        sizes.parse_size(text)


def test_config_set_get_unset_keeps_other_sections(home):
    home.root.mkdir(parents=True)
    home.config_path.write_text(json.dumps({"remotes": {"origin": {"url": "http://x"}}}))
    assert settings_file.max_bytes(home) is None
    assert settings_file.set_text(home, "store.max-bytes", "500MB") == 500_000_000
    assert settings_file.max_bytes(home) == 500_000_000
    doc = json.loads(home.config_path.read_text())
    assert doc == {"remotes": {"origin": {"url": "http://x"}}, "store": {"max-bytes": 500_000_000}}
    assert settings_file.unset(home, "store.max-bytes") is True
    assert settings_file.unset(home, "store.max-bytes") is False
    assert json.loads(home.config_path.read_text()) == {"remotes": {"origin": {"url": "http://x"}}}
    settings_file.set_text(home, "store.max-bytes", "1GiB")
    settings_file.set_text(home, "store.max-bytes", "none")
    assert settings_file.max_bytes(home) is None


def test_config_unknown_key_and_bad_file(home):
    with pytest.raises(UsageError, match="unknown configuration key") as exc:
        settings_file.get(home, "store.nope")
    assert "store.max-bytes" in exc.value.hint
    home.root.mkdir(parents=True)
    home.config_path.write_text('{"store": {"max-bytes": "lots"}}')
    with pytest.raises(ConfigError):
        settings_file.max_bytes(home)
    home.config_path.write_text("{not json")
    with pytest.raises(ConfigError):
        settings_file.max_bytes(home)


# --- access log ----------------------------------------------------------------------------


def test_access_log_tolerates_torn_lines(home):
    a, b = Digest.of_bytes(b"a"), Digest.of_bytes(b"b")
    access_log.touch(home, [a], now=100.0)
    log_path = access_log.access_log_path(home)
    with log_path.open("ab") as f:
        f.write(b"A 200.000000 " + b.hex[:20].encode())  # a crash mid-write: torn, no newline
    access_log.touch(home, [b], now=300.0)  # lands on the torn line: that one line is lost
    access_log.touch(home, [a], now=400.0)
    with log_path.open("ab") as f:
        f.write(b"garbage\n\xff\xfe\nA notanumber " + a.hex.encode() + b"\n")
        f.write(b"A inf " + a.hex.encode() + b"\nA nan " + a.hex.encode() + b"\n")
    records = access_log.read_access_log(home)
    assert records[a.hex].last_access == 400.0
    assert b.hex not in records  # its line was glued to the torn one


def _toucher(root: str, tag: int, n: int) -> None:
    home = Home(root)
    for i in range(n):
        access_log.touch(home, [Digest.of_bytes(f"{tag}-{i}-{j}".encode()) for j in range(5)])


def test_concurrent_touches_are_all_recorded(home):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_toucher, args=(str(home.root), t, 200)) for t in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    records = access_log.read_access_log(home)
    assert len(records) == 4 * 200 * 5
    lines = access_log.access_log_path(home).read_bytes().split(b"\n")
    assert all(len(line) == 0 or len(line.split(b" ")) == 3 for line in lines)


# --- eviction ---------------------------------------------------------------------------------


def test_no_budget_or_under_budget_evicts_nothing(home):
    _deposit(home, "ns/a", [_blob("a")])
    assert _evict(home, None).evicted == []
    report = _evict(home, 10**9)
    assert report.evicted == [] and not report.over_budget
    assert eviction.evict(home, children=json_children).max_bytes is None  # config: none


def test_lru_order_and_budget(home):
    _, a = _deposit(home, "ns/a", [_blob("a1"), _blob("a2")], at=OLD)
    _, b = _deposit(home, "ns/b", [_blob("b1"), _blob("b2")], at=OLD + 10)
    _, c = _deposit(home, "ns/c", [_blob("c1"), _blob("c2")], at=OLD + 20)
    access_log.touch(home, a, now=OLD + 100)  # a is now the most recently used
    total = home.objects.usage().bytes
    budget = total - 25 * KB  # three 10 kB objects must go

    report = _evict(home, budget)

    evicted = [Digest(e["digest"]) for e in report.evicted]
    assert set(evicted[:2]) == set(b)  # least recently used first
    assert evicted[2] == min(c, key=lambda d: d.hex)  # equal times: a stable order
    assert home.objects.usage().bytes <= budget
    assert report.bytes_after == home.objects.usage().bytes and not report.over_budget
    assert report.bytes_freed == 30 * KB
    assert all(home.objects.has(d) for d in a)
    for name in ("ns/a", "ns/b", "ns/c"):  # refs and manifests stay
        assert home.objects.has(home.refs.get(RefName.parse(name)))


def test_dry_run_changes_nothing(home):
    _deposit(home, "ns/a", [_blob("a1"), _blob("a2")])
    before = home.objects.usage()
    report = _evict(home, 0, dry_run=True)
    assert len(report.evicted) == 2 and report.dry_run
    assert home.objects.usage() == before


def test_pinned_never_evicted(home):
    _, a = _deposit(home, "ns/a", [_blob("a1"), _blob("shared")], at=OLD)
    _, b = _deposit(home, "ns/b", [_blob("b1"), _blob("shared")], at=OLD + 10)
    assert pins.pin(home, "ns/a") is True
    assert pins.pin(home, "ns/a") is False
    assert pins.pinned(home) == ["ns/a"]

    report = _evict(home, 0)

    assert all(home.objects.has(d) for d in a)  # a's objects, the shared one included
    assert not home.objects.has(b[0])
    assert report.over_budget and report.protected_pinned >= 1
    assert pins.unpin(home, "ns/a") is True and pins.unpin(home, "ns/a") is False
    _evict(home, 0)
    assert not any(home.objects.has(d) for d in a)


def test_pin_follows_the_ref_and_pins_digests(home):
    _deposit(home, "ns/a", [_blob("old")])
    pins.pin(home, "ns/a")
    _m2, new = _deposit(home, "ns/a", [_blob("new")])  # the ref moves
    m3, other = _deposit(home, "ns/other", [_blob("other")])
    pins.pin(home, str(m3))
    _evict(home, 0)
    assert home.objects.has(new[0]) and home.objects.has(other[0])
    with pytest.raises(RefNotFoundError):
        pins.pin(home, "ns/missing")


def test_deposit_in_progress_and_unreachable_objects_are_not_evicted(home):
    _, old = _deposit(home, "ns/old", [_blob("o1"), _blob("o2")], at=OLD)
    _, fresh = _deposit(home, "ns/fresh", [_blob("f1")], at=time.time())
    # a deposit or pull in progress, its ref not moved yet, reuses ns/old's o1 (found present)
    pending = home.objects.put_bytes(_blob("pending")).digest
    pm = home.objects.put_bytes(json.dumps(sorted([str(pending), str(old[0])])).encode()).digest
    home.envelopes.put(pm, b"{}")
    loose = home.objects.put_bytes(_blob("loose")).digest
    os.utime(home.objects.path(loose), (OLD, OLD))
    report = _evict(home, 0)
    assert home.objects.has(pending) and home.objects.has(loose)  # gc's job, not eviction's
    assert home.objects.has(old[0]) and not home.objects.has(old[1])
    assert not home.objects.has(fresh[0])  # a fresh artifact whose ref moved is fair game
    assert report.over_budget


def _hold_lease(root: str, digests: list[str], ready, release) -> None:
    home = Home(root)
    with leases.lease(home, [Digest(d) for d in digests]):
        ready.set()
        release.wait(60)


def test_leased_objects_are_not_evicted_until_released(home):
    _, a = _deposit(home, "ns/a", [_blob("a1"), _blob("a2")])
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lease, args=(str(home.root), [str(a[0])], ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        report = _evict(home, 0)
        assert home.objects.has(a[0]) and not home.objects.has(a[1])
        assert report.protected_leased == 1
    finally:
        release.set()
        holder.join(60)
    _evict(home, 0)
    assert not home.objects.has(a[0])
    assert list((leases.leases_dir(home)).glob("*.lease")) == []


def _die_holding_lease(root: str, digest: str) -> None:
    home = Home(root)
    cm = leases.lease(home, [Digest(digest)])
    cm.__enter__()
    os._exit(0)  # killed mid-graft: the kernel drops the lock, the file stays


def test_stale_lease_of_a_dead_process_is_ignored_and_removed(home):
    _, a = _deposit(home, "ns/a", [_blob("a1")])
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_die_holding_lease, args=(str(home.root), str(a[0])))
    p.start()
    p.join(60)
    folder = leases.leases_dir(home)
    assert len(list(folder.glob("*.lease"))) == 1
    _evict(home, 0)
    assert not home.objects.has(a[0])
    assert list(folder.glob("*.lease")) == []


def test_lease_in_this_process_protects(home):
    _, a = _deposit(home, "ns/a", [_blob("a1")])
    with leases.lease(home, a):
        _evict(home, 0)
        assert home.objects.has(a[0])
    _evict(home, 0)
    assert not home.objects.has(a[0])


# --- after eviction: fsck and errors say "evicted", not "corrupt" ----------------------------


def test_fsck_reports_evicted_objects_as_evicted_not_as_problems(home):
    _, a = _deposit(home, "ns/a", [_blob("a1"), _blob("a2")])
    _evict(home, 0)
    report = fsck(home, children=json_children)
    assert report.ok
    assert {p.subject for p in report.evicted} == {str(d) for d in a}
    assert all(p.kind == ProblemKind.OBJECT_EVICTED for p in report.evicted)
    assert "pull" in report.evicted[0].message
    assert report.to_dict()["evicted"]

    # a missing object that was never evicted is still a problem
    _m, b = _deposit(home, "ns/b", [_blob("b1")])
    home.objects.remove(b[0])
    report = fsck(home, children=json_children)
    assert not report.ok and [p.kind for p in report.problems] == [ProblemKind.OBJECT_MISSING]


def test_missing_object_error_names_eviction(home):
    _, a = _deposit(home, "ns/a", [_blob("a1")])
    err = absence.missing_object_error(home, a[0], "chunk 0", ref="ns/a")
    assert not err.details["evicted"] and "not in the local store" in err.message
    _evict(home, 0)
    err = absence.missing_object_error(home, a[0], "chunk 0", ref="ns/a")
    assert isinstance(err, ObjectNotFoundError) and err.exit_code == 1
    assert err.details["evicted"] and "evicted" in err.message and "kvreg pull REMOTE ns/a" in err.hint


def test_re_stored_object_is_not_reported_evicted(home):
    _, a = _deposit(home, "ns/a", [_blob("a1")])
    _evict(home, 0)
    home.objects.put_bytes(_blob("a1"))  # pulled again
    access_log.touch(home, a)
    assert access_log.eviction_time(home, a[0]) is None
    assert fsck(home, children=json_children).evicted == []


def test_eviction_compacts_the_access_log(home):
    _, a = _deposit(home, "ns/a", [_blob("a1"), _blob("a2")])
    for i in range(50):
        access_log.touch(home, a, now=OLD + i)
    _evict(home, home.objects.usage().bytes - 1)
    used = access_log.access_log_path(home).read_text().splitlines()
    gone = access_log.eviction_log_path(home).read_text().splitlines()
    assert len(used) == 1 and used[0].startswith("A ")  # one line for the survivor
    assert len(gone) == 1 and gone[0].startswith("E ")  # one for the evicted


def test_pins_file_and_logs_live_where_documented(home):
    _, a = _deposit(home, "ns/a", [_blob("a1"), _blob("a2")])
    pins.pin(home, "ns/a")
    access_log.touch(home, a)
    pins.unpin(home, "ns/a")
    _evict(home, 0)
    assert json.loads((home.root / "pins.json").read_text()) == {"pins": []}
    assert (home.cache_dir / "paging" / "access.log").is_file()
    assert (home.logs_dir / "evictions").is_file()


def test_evictions_are_recorded_before_the_objects_go(home, monkeypatch):
    """An object removed without its record is reported missing by fsck: a crash between the
    two must leave the record, so it is written (fsynced) first."""
    _deposit(home, "ns/a", [_blob("a1"), _blob("a2")])
    objects_remove = home.objects.remove

    def killed(d):
        objects_remove(d)
        raise SystemExit("killed")

    monkeypatch.setattr(home.objects, "remove", killed)
    with pytest.raises(SystemExit):
        _evict(home, 1)
    monkeypatch.undo()
    report = fsck(home, children=json_children)
    assert report.ok, report.problems
    assert len(report.evicted) == 1
