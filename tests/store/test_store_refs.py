from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
from dataclasses import dataclass

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import InvalidNameError, RefConflictError, RefNotFoundError, StoreError
from kvreg.core.names import RefName
from kvreg.store.refs import ANY, RefEntry, RefStore, decode_ref, encode_ref

A = Digest.of_bytes(b"a")
B = Digest.of_bytes(b"b")
C = Digest.of_bytes(b"c")
R = RefName.parse("aime25/p07")


def test_set_get_file_format(home):
    refs = home.refs
    assert refs.get_or_none(R) is None
    with pytest.raises(RefNotFoundError):
        refs.get(R)
    refs.set(R, A)
    assert refs.get(R) == A
    path = home.refs_dir / "aime25" / "p07"
    assert path.read_bytes() == f"{A}\n".encode()
    assert refs.entry(R) == RefEntry(R, A, tag=False)
    assert os.listdir(home.tmp_dir) == []


def test_cas(home):
    refs = home.refs
    refs.set(R, A, expected=None)
    with pytest.raises(RefConflictError) as ei:
        refs.set(R, B, expected=None)
    assert ei.value.details["current"] == A
    with pytest.raises(RefConflictError, match=f"is at {A}, expected {C}"):
        refs.set(R, B, expected=C)
    assert refs.get(R) == A
    refs.set(R, B, expected=A)
    assert refs.get(R) == B
    refs.set(R, C)  # ANY
    assert refs.get(R) == C
    other = RefName.parse("aime25/p08")
    with pytest.raises(RefConflictError, match="does not exist"):
        refs.set(other, A, expected=B)


def test_delete(home):
    refs = home.refs
    with pytest.raises(RefNotFoundError):
        refs.delete(R)
    refs.set(R, A)
    with pytest.raises(RefConflictError):
        refs.delete(R, expected=B)
    with pytest.raises(RefConflictError):
        refs.delete(R, expected=None)
    refs.delete(R, expected=A)
    assert refs.get_or_none(R) is None
    assert not (home.refs_dir / "aime25").exists()
    assert refs.list() == []


def test_tag_is_immutable(home):
    refs = home.refs
    refs.tag(R, A)
    assert refs.entry(R) == RefEntry(R, A, tag=True)
    assert json.loads((home.refs_dir / "aime25" / "p07").read_bytes()) == {"digest": A, "tag": True}
    assert stat.S_IMODE((home.refs_dir / "aime25" / "p07").stat().st_mode) == 0o444
    refs.tag(R, A)  # idempotent
    for attempt in (
        lambda: refs.set(R, B),
        lambda: refs.set(R, A, expected=A),
        lambda: refs.set(R, B, expected=A),
        lambda: refs.delete(R),
        lambda: refs.delete(R, expected=A),
        lambda: refs.tag(R, B),
        lambda: refs.tag(R, B, expected=ANY),
    ):
        with pytest.raises(RefConflictError, match="immutable tag"):
            attempt()
    assert refs.entry(R) == RefEntry(R, A, tag=True)


def test_freeze_existing_ref(home):
    refs = home.refs
    refs.set(R, A)
    with pytest.raises(RefConflictError):
        refs.tag(R, A)  # default expected=None: must not exist
    refs.tag(R, A, expected=A)
    assert refs.entry(R).tag


def test_list_sorted(home):
    refs = home.refs
    names = ["zeta/b", "alpha/x", "alpha/a", "mid/q"]
    for n in names:
        refs.set(RefName.parse(n), A)
    refs.tag(RefName.parse("mid/t"), B)
    listed = refs.list()
    assert [str(e.ref) for e in listed] == ["alpha/a", "alpha/x", "mid/q", "mid/t", "zeta/b"]
    assert [e.tag for e in listed] == [False, False, False, True, False]


def test_reflog(home):
    refs = home.refs
    refs.set(R, A)
    refs.set(R, A)  # no move, no line
    refs.set(R, B, expected=A)
    refs.delete(R)
    refs.tag(R, C)
    log = refs.reflog(R)
    assert [(e.op, e.old, e.new) for e in log] == [
        ("create", None, A),
        ("update", A, B),
        ("delete", B, None),
        ("tag", None, C),
    ]
    assert all(e.time.endswith("Z") for e in log)
    assert (home.logs_dir / "refs" / "aime25" / "p07").is_file()
    assert refs.reflog(RefName.parse("x/never")) == []


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage\n", f"{A}".encode(), f"{A}\n{B}\n".encode(), b'{"digest":"x","tag":true}\n', b"\xff\n"],
)
def test_corrupted_ref_file(home, content):
    home.refs.set(R, A)
    p = home.refs_dir / "aime25" / "p07"
    p.write_bytes(content)
    with pytest.raises(StoreError, match="corrupted"):
        home.refs.get(R)
    with pytest.raises(StoreError):
        home.refs.list()
    with pytest.raises(StoreError):
        home.refs.set(R, B)
    entries, problems = home.refs.scan()
    assert entries == [] and [pr.name for pr in problems] == ["aime25/p07"]


def test_scan_reports_bad_names_and_stray_entries(home):
    home.refs.set(R, A)
    (home.refs_dir / "UPPER").mkdir()
    (home.refs_dir / "UPPER" / "x").write_bytes(f"{A}\n".encode())
    (home.refs_dir / "stray-file").write_bytes(b"")
    (home.refs_dir / "aime25" / "nested").mkdir()
    entries, problems = home.refs.scan()
    assert [str(e.ref) for e in entries] == ["aime25/p07"]
    assert sorted(p.name for p in problems) == ["UPPER/x", "aime25/nested", "stray-file"]


def test_encode_decode_roundtrip():
    for tag in (False, True):
        assert decode_ref(encode_ref(A, tag=tag)) == (A, tag)


@dataclass(frozen=True)
class _Sneaky:
    """Bypasses RefName's validation, to prove the store checks again."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@pytest.mark.parametrize(
    ("ns", "name"),
    [
        ("..", "x"),
        ("ns", ".."),
        ("ns", "a/../../b"),
        ("", "x"),
        ("ns", ""),
        ("ns", ".lock"),
        ("a\\b", "c"),
        ("ns", "x\x00y"),
        ("/abs", "x"),
    ],
)
def test_traversal_refused(home, ns, name):
    with pytest.raises(InvalidNameError):
        home.refs.set(_Sneaky(ns, name), A)  # type: ignore[arg-type]
    with pytest.raises(InvalidNameError):
        home.refs.get_or_none(_Sneaky(ns, name))  # type: ignore[arg-type]
    assert not any(home.root.parent.glob("x*"))


def test_symlinked_namespace_refused(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    home.refs_dir.mkdir(parents=True)
    (home.refs_dir / "evil").symlink_to(outside)
    with pytest.raises(InvalidNameError, match="outside"):
        home.refs.set(RefName.parse("evil/x"), A)
    assert list(outside.iterdir()) == []


def test_cas_is_atomic_across_threads(home):
    """8 threads each do 10 read-then-CAS increments; no update may be lost."""
    counter = [Digest.of_bytes(str(i).encode()) for i in range(81)]
    index = {d: i for i, d in enumerate(counter)}
    home.refs.set(R, counter[0])

    def worker() -> None:
        done = 0
        while done < 10:
            cur = home.refs.get(R)
            try:
                home.refs.set(R, counter[index[cur] + 1], expected=cur)
            except RefConflictError:
                continue
            done += 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert home.refs.get(R) == counter[80]
    assert len(home.refs.reflog(R)) == 81


def _proc_create(root: str, digest: str, barrier, queue) -> None:
    barrier.wait()
    try:
        RefStore(root).set(RefName.parse("aime25/p07"), Digest(digest), expected=None)
        queue.put("won")
    except RefConflictError:
        queue.put("conflict")


def test_create_race_between_processes(home):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    queue = ctx.Queue()
    digests = [Digest.of_bytes(bytes([i])) for i in range(4)]
    procs = [ctx.Process(target=_proc_create, args=(str(home.root), d, barrier, queue)) for d in digests]
    for p in procs:
        p.start()
    out = sorted(queue.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert out == ["conflict", "conflict", "conflict", "won"]
    assert home.refs.get(R) in digests
