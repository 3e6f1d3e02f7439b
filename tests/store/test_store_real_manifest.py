"""fsck and gc with their default ``children``: real ``kvreg.manifest/v1`` manifests."""

from __future__ import annotations

import os
import time

from kvreg.core.digest import Digest
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.store.fsck import ProblemKind, default_children, fsck
from kvreg.store.gc import collect_garbage
from tiny_manifest import tiny_manifest_doc

FP = Digest.of_bytes(b"fingerprint")
R = RefName.parse("ns/real")


def _deposit(home) -> tuple[Digest, list[Digest]]:
    """Store a 2-block artifact (B=4, 6 tokens): two chunks, tokens, text, manifest, ref."""
    chunks = [home.objects.put_bytes(f"chunk {i}".encode()) for i in range(2)]
    tokens = home.objects.put_bytes(b"\x01\x00\x00\x00" * 6)
    text = home.objects.put_bytes(b"hello world")
    logits = home.objects.put_bytes(b"\x00\x00\x80\x3f" * 8)
    doc = tiny_manifest_doc(FP, tokens, text, chunks, logits)
    manifest = Manifest.from_dict(doc)
    m = home.objects.put_bytes(manifest.raw_bytes, expected=manifest.digest).digest
    home.envelopes.put(m, b"{}")
    home.refs.set(R, m)
    return m, [c.digest for c in chunks] + [tokens.digest, text.digest, logits.digest]


def test_default_children_reads_a_real_manifest(home):
    m, kids = _deposit(home)
    assert sorted(default_children(home.objects.read(m))) == sorted(kids)


def test_fsck_with_the_real_default(home):
    _m, kids = _deposit(home)
    assert fsck(home).ok
    home.objects.remove(kids[1])
    report = fsck(home)
    assert [p.subject for p in report.problems] == [kids[1]]
    assert report.problems[0].kind == ProblemKind.OBJECT_MISSING


def test_fsck_reports_a_non_manifest_target(home):
    bogus = home.objects.put_bytes(b'{"schema": "something else"}').digest
    home.refs.set(RefName.parse("ns/bogus"), bogus)
    report = fsck(home)
    assert [(p.kind, p.subject) for p in report.problems] == [(ProblemKind.MANIFEST_INVALID, bogus)]


def test_gc_with_the_real_default(home):
    m, kids = _deposit(home)
    loose = home.objects.put_bytes(b"unreferenced").digest
    old = time.time() - 7200
    for d in home.objects.iter_digests():
        os.utime(home.objects.path(d), (old, old))
    report = collect_garbage(home)
    assert report.removed_objects == [loose]
    for d in [m, *kids]:
        assert home.objects.has(d)
