from __future__ import annotations

import json
import os
from collections.abc import Iterable

from kvreg.core.digest import Digest
from kvreg.core.names import RefName
from kvreg.store.fsck import ProblemKind, fsck

R = RefName.parse("ns/art")


def json_children(data: bytes) -> list[Digest]:
    """Toy manifests for these tests: a JSON list of digest strings."""
    return [Digest(d) for d in json.loads(data)]


def toy_manifest(children: Iterable[str]) -> bytes:
    return json.dumps(sorted(children)).encode()


def _deposit(home, payloads: list[bytes], ref: RefName = R) -> tuple[Digest, list[Digest]]:
    kids = [home.objects.put_bytes(p).digest for p in payloads]
    m = home.objects.put_bytes(toy_manifest(kids)).digest
    home.envelopes.put(m, b'{"envelope": true}')
    home.refs.set(ref, m)
    return m, kids


def test_clean_store_is_ok(home):
    _deposit(home, [b"chunk0", b"chunk1" * 1000])
    report = fsck(home, children=json_children)
    assert report.ok, report.problems
    assert report.objects_checked == 3
    assert report.bytes_hashed == sum(home.objects.size(d) for d in home.objects.iter_digests())
    assert report.to_dict()["ok"] is True


def test_empty_store_is_ok(home):
    report = fsck(home, children=json_children)
    assert report.ok and report.objects_checked == 0


def test_flipped_bit_is_quarantined_and_reported(home):
    _, kids = _deposit(home, [b"chunk0", b"chunk1"])
    victim = kids[1]
    p = home.objects.path(victim)
    p.chmod(0o644)
    data = bytearray(p.read_bytes())
    data[3] ^= 0x01
    p.write_bytes(bytes(data))

    report = fsck(home, children=json_children)
    assert not report.ok
    corrupt = report.of_kind(ProblemKind.OBJECT_CORRUPT)
    assert [c.subject for c in corrupt] == [victim]
    assert "hash to" in corrupt[0].message
    # moved, never deleted
    assert not home.objects.has(victim)
    q = os.listdir(home.quarantine_dir)
    assert len(q) == 1 and q[0].startswith(victim.hex + ".")
    assert (home.quarantine_dir / q[0]).read_bytes() == bytes(data)
    assert report.quarantined == [home.quarantine_dir / q[0]]
    # and, with the damaged object out of the way, the manifest now misses a child
    assert [m.subject for m in report.of_kind(ProblemKind.OBJECT_MISSING)] == [victim]

    # the store can be healed by putting the right bytes again
    home.objects.put_bytes(b"chunk1")
    assert fsck(home, children=json_children).ok


def test_report_only_mode_does_not_move(home):
    _, kids = _deposit(home, [b"x"])
    p = home.objects.path(kids[0])
    p.chmod(0o644)
    p.write_bytes(b"y")
    report = fsck(home, children=json_children, quarantine=False)
    assert [c.subject for c in report.of_kind(ProblemKind.OBJECT_CORRUPT)] == [kids[0]]
    assert home.objects.has(kids[0])
    assert not home.quarantine_dir.exists() or os.listdir(home.quarantine_dir) == []


def test_missing_children_target_and_orphans(home):
    m, kids = _deposit(home, [b"a", b"b"])
    home.objects.remove(kids[0])
    gone = Digest.of_bytes(b"never stored")
    home.refs.set(RefName.parse("ns/dangling"), gone)
    orphan = Digest.of_bytes(b"orphan manifest")
    home.envelopes.put(orphan, b"{}")

    report = fsck(home, children=json_children)
    kinds = {(p.kind, p.subject) for p in report.problems}
    assert kinds == {
        (ProblemKind.OBJECT_MISSING, kids[0]),
        (ProblemKind.REF_TARGET_MISSING, "ns/dangling"),
        (ProblemKind.ENVELOPE_ORPHAN, orphan),
    }
    missing = report.of_kind(ProblemKind.OBJECT_MISSING)[0]
    assert m in missing.message


def test_unparseable_ref_and_manifest_are_reported_not_raised(home):
    _deposit(home, [b"a"])
    (home.refs_dir / "ns" / "broken").write_bytes(b"not a digest\n")
    bad = home.objects.put_bytes(b"this is not JSON").digest
    home.refs.set(RefName.parse("ns/badmanifest"), bad)
    report = fsck(home, children=json_children)
    assert [p.subject for p in report.of_kind(ProblemKind.REF_UNPARSEABLE)] == ["ns/broken"]
    invalid = report.of_kind(ProblemKind.MANIFEST_INVALID)
    assert [p.subject for p in invalid] == [bad]
    assert "ref ns/badmanifest" in invalid[0].message


def test_manifest_reached_only_through_an_envelope_is_checked(home):
    kid = home.objects.put_bytes(b"k").digest
    m = home.objects.put_bytes(toy_manifest([kid])).digest
    home.envelopes.put(m, b"{}")
    home.objects.remove(kid)
    report = fsck(home, children=json_children)
    assert [p.subject for p in report.of_kind(ProblemKind.OBJECT_MISSING)] == [kid]


def test_many_objects_in_parallel(home):
    for i in range(200):
        home.objects.put_bytes(os.urandom(100) + bytes([i]))
    report = fsck(home, children=json_children, max_workers=8)
    assert report.ok and report.objects_checked == 200
