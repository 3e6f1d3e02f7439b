from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import StoreError
from kvreg.core.names import RefName
from kvreg.store.gc import collect_garbage

OLD = time.time() - 7200


def json_children(data: bytes) -> list[Digest]:
    """Toy manifests for these tests: a JSON list of digest strings."""
    return [Digest(d) for d in json.loads(data)]


def toy_manifest(children: Iterable[str]) -> bytes:
    return json.dumps(sorted(children)).encode()


def _age(path) -> None:
    os.utime(path, (OLD, OLD))


def _age_all(home) -> None:
    for d in home.objects.iter_digests():
        _age(home.objects.path(d))
    for m in home.envelopes.iter_manifest_digests():
        _age(home.envelopes.path(m))


def _snapshot(home) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), home.root) for d, _, fs in os.walk(home.root) for f in fs
    )


def _deposit(home, name: str, payloads: list[bytes]) -> tuple[Digest, list[Digest]]:
    kids = [home.objects.put_bytes(p).digest for p in payloads]
    m = home.objects.put_bytes(toy_manifest(kids)).digest
    home.envelopes.put(m, b"{}")
    home.refs.set(RefName.parse(name), m)
    return m, kids


def test_keeps_reachable_and_fresh_removes_old_unreachable(home):
    m, kids = _deposit(home, "ns/kept", [b"k1", b"shared"])
    dead_m, dead_kids = _deposit(home, "ns/dead", [b"d1", b"shared"])
    home.refs.delete(RefName.parse("ns/dead"))
    old_loose = home.objects.put_bytes(b"old loose").digest
    _age_all(home)
    fresh_loose = home.objects.put_bytes(b"fresh loose").digest  # a deposit in progress

    report = collect_garbage(home, children=json_children)

    assert sorted(report.removed_objects) == sorted([dead_m, dead_kids[0], old_loose])
    assert report.removed_envelopes == [dead_m]
    assert report.kept_reachable == 3 and report.kept_fresh == 1
    for d in [m, *kids, fresh_loose]:
        assert home.objects.has(d)
    for d in report.removed_objects:
        assert not home.objects.has(d)
    assert home.envelopes.has(m) and not home.envelopes.has(dead_m)
    assert report.bytes_freed == len(b"d1") + len(b"old loose") + len(toy_manifest(dead_kids)) + len(b"{}")
    assert report.to_dict()["dry_run"] is False


def test_tags_are_roots(home):
    kid = home.objects.put_bytes(b"tagged").digest
    m = home.objects.put_bytes(toy_manifest([kid])).digest
    home.refs.tag(RefName.parse("ns/v1"), m)
    _age_all(home)
    report = collect_garbage(home, children=json_children)
    assert report.removed_objects == []
    assert home.objects.has(kid) and home.objects.has(m)


def test_fresh_envelope_protects_its_manifest(home):
    kid = home.objects.put_bytes(b"pulled earlier").digest
    m = home.objects.put_bytes(toy_manifest([kid])).digest
    _age_all(home)
    home.envelopes.put(m, b"{}")  # pull in progress: envelope stored, ref not yet set
    report = collect_garbage(home, children=json_children)
    assert report.removed_objects == []
    assert home.objects.has(kid)


def test_re_put_refreshes_an_old_object(home):
    d = home.objects.put_bytes(b"old but wanted again").digest
    _age_all(home)
    assert not home.objects.put_bytes(b"old but wanted again").new
    report = collect_garbage(home, children=json_children)
    assert report.removed_objects == [] and home.objects.has(d)


def test_dry_run_changes_nothing(home):
    _deposit(home, "ns/kept", [b"a"])
    home.objects.put_bytes(b"garbage")
    home.envelopes.put(Digest.of_bytes(b"x"), b"{}")
    home.tmp_dir.mkdir(exist_ok=True)
    (home.tmp_dir / "abc.incomplete").write_bytes(b"partial")
    _age_all(home)
    _age(home.tmp_dir / "abc.incomplete")
    before = _snapshot(home)
    report = collect_garbage(home, children=json_children, dry_run=True)
    assert report.dry_run
    assert report.removed_objects == [Digest.of_bytes(b"garbage")]
    assert report.removed_envelopes == [Digest.of_bytes(b"x")]
    assert [p.name for p in report.removed_temp] == ["abc.incomplete"]
    assert report.bytes_freed == len(b"garbage") + 2 + len(b"partial")
    assert _snapshot(home) == before


def test_temp_leftovers(home):
    home.tmp_dir.mkdir(parents=True)
    old, new = home.tmp_dir / "old.incomplete", home.tmp_dir / "new.incomplete"
    old.write_bytes(b"x")
    new.write_bytes(b"y")
    _age(old)
    report = collect_garbage(home, children=json_children)
    assert report.removed_temp == [old]
    assert not old.exists() and new.exists()


def test_quarantine_is_never_touched(home):
    d = home.objects.put_bytes(b"bad").digest
    target = home.objects.quarantine(d)
    _age(target)
    collect_garbage(home, children=json_children, grace_seconds=0)
    assert target.exists()


def test_zero_grace_and_custom_now(home):
    d = home.objects.put_bytes(b"loose").digest
    report = collect_garbage(home, children=json_children, grace_seconds=0, now=time.time() + 10)
    assert report.removed_objects == [d]
    with pytest.raises(ValueError):
        collect_garbage(home, children=json_children, grace_seconds=-1)


def test_refuses_when_a_ref_is_unreadable(home):
    _deposit(home, "ns/a", [b"a"])
    garbage = home.objects.put_bytes(b"garbage").digest
    (home.refs_dir / "ns" / "broken").write_bytes(b"???\n")
    _age_all(home)
    with pytest.raises(StoreError, match="refusing"):
        collect_garbage(home, children=json_children)
    assert home.objects.has(garbage)


def test_refuses_when_a_reachable_manifest_is_damaged_or_unparseable(home):
    m, kids = _deposit(home, "ns/a", [b"a"])
    _age_all(home)
    p = home.objects.path(m)
    p.chmod(0o644)
    p.write_bytes(b"[]")
    with pytest.raises(StoreError, match="damaged"):
        collect_garbage(home, children=json_children)
    assert home.objects.has(kids[0])

    bad = home.objects.put_bytes(b"not json").digest
    home.refs.set(RefName.parse("ns/a"), bad)
    with pytest.raises(StoreError, match="cannot be parsed"):
        collect_garbage(home, children=json_children)
    assert home.objects.has(kids[0])


def test_missing_manifest_is_not_fatal(home):
    home.refs.set(RefName.parse("ns/a"), Digest.of_bytes(b"absent"))
    loose = home.objects.put_bytes(b"loose").digest
    _age_all(home)
    assert collect_garbage(home, children=json_children).removed_objects == [loose]


def test_abandoned_pull_staging_is_removed_unless_fresh_or_locked(home):
    import fcntl
    import os

    home.tmp_dir.mkdir(parents=True)
    old = home.tmp_dir / ("pull-" + "a" * 64)
    locked = home.tmp_dir / ("pull-" + "b" * 64)
    fresh = home.tmp_dir / ("pull-" + "c" * 64)
    other = home.tmp_dir / "not-a-staging-folder"
    for folder in (old, locked, fresh, other):
        folder.mkdir()
        (folder / "x.incomplete").write_bytes(b"partial")
        (folder / ".lock").write_bytes(b"")
    for folder in (old, locked, other):
        for f in folder.iterdir():
            _age(f)
        _age(folder)
    fd = os.open(locked / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        report = collect_garbage(home, children=json_children)
    finally:
        os.close(fd)
    assert report.removed_temp == [old]
    assert not old.exists() and locked.exists() and fresh.exists() and other.exists()


def test_envelopes_go_and_are_made_durable_before_any_object(home, monkeypatch):
    """An envelope left behind by objects already removed is damage (fsck: envelope-orphan):
    gc removes the envelopes first and fsyncs their folders before the first object goes."""
    from kvreg.store import gc as gc_module

    _deposit(home, "ns/dead", [b"d1", b"d2"])
    home.refs.delete(RefName.parse("ns/dead"))
    _age_all(home)
    events: list[str] = []
    objects_remove, envelopes_remove = home.objects.remove, home.envelopes.remove
    monkeypatch.setattr(home.objects, "remove", lambda d: (events.append("object"), objects_remove(d))[1])
    monkeypatch.setattr(
        home.envelopes, "remove", lambda d: (events.append("envelope"), envelopes_remove(d))[1]
    )
    monkeypatch.setattr(gc_module, "fsync_dir", lambda d: events.append(f"fsync {os.path.basename(d)}"))
    collect_garbage(home, children=json_children)
    first_object = events.index("object")
    assert events[:first_object][0] == "envelope"
    assert any(e.startswith("fsync") for e in events[:first_object]), events


def test_gc_killed_after_its_first_object_leaves_a_store_fsck_accepts(home, monkeypatch):
    from kvreg.store.fsck import fsck

    _deposit(home, "ns/kept", [b"k1"])
    _deposit(home, "ns/dead", [b"d1", b"d2"])
    home.refs.delete(RefName.parse("ns/dead"))
    _age_all(home)
    objects_remove = home.objects.remove

    def killed(d):
        objects_remove(d)
        raise SystemExit("killed")

    monkeypatch.setattr(home.objects, "remove", killed)
    with pytest.raises(SystemExit):
        collect_garbage(home, children=json_children)
    monkeypatch.undo()
    assert fsck(home, children=json_children).ok
