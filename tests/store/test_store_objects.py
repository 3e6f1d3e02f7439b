from __future__ import annotations

import io
import multiprocessing
import os
import stat
import threading

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, InvalidDigestError, ObjectNotFoundError
from kvreg.store.home import Home
from kvreg.store.objects import ObjectStore


def _tree(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def _objects_files(home: Home) -> list[str]:
    return _tree(home.objects_dir) if home.objects_dir.exists() else []


def test_put_bytes_layout_and_roundtrip(home):
    r = home.objects.put_bytes(b"hello")
    assert r.digest == Digest.of_bytes(b"hello") and r.size == 5 and r.new
    p = home.objects.path(r.digest)
    assert p == home.objects_dir / r.digest.hex[:2] / r.digest.hex[2:]
    assert len(p.name) == 62
    assert home.objects.read(r.digest) == b"hello"
    with home.objects.open(r.digest) as f:
        assert f.read() == b"hello"
    assert home.objects.has(r.digest)
    assert home.objects.size(r.digest) == 5
    assert home.objects.stat(r.digest).st_size == 5
    assert list(home.objects.iter_digests()) == [r.digest]
    assert home.objects.usage().objects == 1 and home.objects.usage().bytes == 5


def test_stored_files_are_read_only(home):
    for put in (
        lambda: home.objects.put_bytes(b"a"),
        lambda: home.objects.put_stream(io.BytesIO(b"b")),
    ):
        d = put().digest
        assert stat.S_IMODE(home.objects.path(d).stat().st_mode) == 0o444


def test_put_existing_is_not_rewritten(home):
    first = home.objects.put_bytes(b"same")
    p = home.objects.path(first.digest)
    ino = p.stat().st_ino
    os.utime(p, (1000, 1000))
    again = home.objects.put_stream(io.BytesIO(b"same"))
    assert again.digest == first.digest and not again.new
    assert p.stat().st_ino == ino
    assert p.stat().st_mtime > 1000  # refreshed so that gc's grace period protects it
    assert os.listdir(home.tmp_dir) == []


def test_put_file(home, tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"x" * 3_000_000)
    r = home.objects.put_file(src, expected=Digest.of_bytes(b"x" * 3_000_000))
    assert r.new and r.size == 3_000_000
    assert src.exists()  # copied, not moved
    assert not home.objects.put_file(src).new


@pytest.mark.parametrize("how", ["bytes", "stream", "file"])
def test_digest_mismatch_leaves_store_unchanged(home, tmp_path, how):
    home.objects.put_bytes(b"existing")
    before = _objects_files(home)
    wrong = Digest.of_bytes(b"something else")
    src = tmp_path / "src"
    src.write_bytes(b"payload")
    with pytest.raises(DigestMismatchError) as ei:
        if how == "bytes":
            home.objects.put_bytes(b"payload", expected=wrong)
        elif how == "stream":
            home.objects.put_stream(io.BytesIO(b"payload"), expected=wrong)
        else:
            home.objects.put_file(src, expected=wrong)
    assert ei.value.details["expected"] == wrong
    assert _objects_files(home) == before
    assert os.listdir(home.tmp_dir) == []
    assert not home.objects.has(Digest.of_bytes(b"payload"))


class _FailingStream(io.RawIOBase):
    """Yields some bytes, then dies like a dropped connection."""

    def __init__(self) -> None:
        self.calls = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        self.calls += 1
        if self.calls > 2:
            raise ConnectionError("simulated crash mid-transfer")
        return b"z" * 1000


def test_exception_mid_stream_leaves_no_partial_object(home):
    with pytest.raises(ConnectionError):
        home.objects.put_stream(_FailingStream())
    assert _objects_files(home) == []
    assert os.listdir(home.tmp_dir) == []


def test_hard_crash_leaves_only_a_temp_file(home, monkeypatch):
    # os._exit-like crash: the temp file's cleanup never runs.
    from kvreg.store import objects as objects_mod

    def crash(*a, **k):
        raise SystemExit("power loss")

    monkeypatch.setattr(objects_mod.ObjectStore, "_install", lambda self, tmp, d: crash())
    monkeypatch.setattr("kvreg.fileio.atomicfile.remove_quietly", lambda p: None)
    with pytest.raises(SystemExit):
        home.objects.put_bytes(b"data")
    assert _objects_files(home) == []
    leftovers = os.listdir(home.tmp_dir)
    assert len(leftovers) == 1 and leftovers[0].endswith(".incomplete")


def test_read_verifies(home):
    d = home.objects.put_bytes(b"good bytes").digest
    p = home.objects.path(d)
    p.chmod(0o644)
    p.write_bytes(b"evil bytes")
    with pytest.raises(DigestMismatchError):
        home.objects.read(d)
    assert home.objects.read(d, verify=False) == b"evil bytes"


def test_missing_object(home):
    d = Digest.of_bytes(b"nope")
    assert not home.objects.has(d)
    for call in (
        home.objects.path,
        home.objects.open,
        home.objects.read,
        home.objects.size,
        home.objects.remove,
    ):
        with pytest.raises(ObjectNotFoundError):
            call(d)


def test_plain_strings_are_validated(home):
    with pytest.raises(InvalidDigestError):
        home.objects.has("sha256:../../etc/passwd")  # type: ignore[arg-type]
    with pytest.raises(InvalidDigestError):
        home.objects.put_bytes(b"x", expected="sha256:" + "A" * 64)  # type: ignore[arg-type]


def test_iter_digests_skips_garbage(home):
    d = home.objects.put_bytes(b"real").digest
    shard = home.objects_dir / d.hex[:2]
    (shard / (d.hex[2:] + ".incomplete")).write_bytes(b"")
    (shard / "short").write_bytes(b"")
    (shard / ("A" * 62)).write_bytes(b"")
    (home.objects_dir / "zz").mkdir()
    (home.objects_dir / "zz" / ("0" * 62)).write_bytes(b"")
    (home.objects_dir / "README").write_bytes(b"")
    (shard / ("0" * 62 + "x")).mkdir()
    assert list(home.objects.iter_digests()) == [d]


def test_wrong_size_existing_file_is_quarantined_and_replaced(home):
    d = home.objects.put_bytes(b"original").digest
    p = home.objects.path(d)
    p.chmod(0o644)
    p.write_bytes(b"trunc")
    r = home.objects.put_bytes(b"original")
    assert r.new
    assert home.objects.read(d) == b"original"
    q = os.listdir(home.quarantine_dir)
    assert len(q) == 1 and q[0].startswith(d.hex + ".")


def test_remove_and_quarantine(home):
    a = home.objects.put_bytes(b"a").digest
    b = home.objects.put_bytes(b"b").digest
    assert home.objects.remove(a) == 1
    assert not home.objects.has(a)
    target = home.objects.quarantine(b)
    assert target.parent == home.quarantine_dir and target.read_bytes() == b"b"
    assert not home.objects.has(b)


def test_concurrent_puts_from_threads(home):
    data = os.urandom(1 << 20)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            if i % 2:
                results.append(home.objects.put_bytes(data))
            else:
                results.append(home.objects.put_stream(io.BytesIO(data)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({r.digest for r in results}) == 1
    assert sum(r.new for r in results) == 1  # exactly one writer placed it
    assert home.objects.read(results[0].digest) == data
    assert os.listdir(home.tmp_dir) == []


def _proc_put(root: str, blobs: list[bytes], barrier, queue) -> None:
    store = ObjectStore(root)
    for data in blobs:
        barrier.wait()  # all processes race on the same object, one object at a time
        try:
            r = store.put_stream(io.BytesIO(data))
            queue.put(("ok", str(r.digest), r.new))
        except Exception as exc:  # pragma: no cover - reported to the parent
            queue.put(("error", repr(exc), False))


def test_concurrent_puts_from_processes(home):
    ctx = multiprocessing.get_context("spawn")
    n = 3
    blobs = [os.urandom(1 << 20) + bytes([i]) for i in range(3)]
    barrier = ctx.Barrier(n)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_proc_put, args=(str(home.root), blobs, barrier, queue)) for _ in range(n)]
    for p in procs:
        p.start()
    out = [queue.get(timeout=60) for _ in range(n * len(blobs))]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(o[0] == "ok" for o in out), out
    for data in blobs:
        d = Digest.of_bytes(data)
        mine = [o for o in out if o[1] == d]
        assert len(mine) == n
        assert sum(o[2] for o in mine) == 1  # exactly one process placed it
        assert home.objects.read(d) == data
    assert os.listdir(home.tmp_dir) == []


def test_adopt_file_moves_a_verified_file_in(tmp_path) -> None:
    store = ObjectStore(tmp_path)
    (tmp_path / "tmp").mkdir()
    staged = tmp_path / "tmp" / "x"
    staged.write_bytes(b"verified bytes")
    d = Digest.of_bytes(b"verified bytes")
    with pytest.raises(DigestMismatchError):
        store.adopt_file(staged, Digest.of_bytes(b"other"))
    assert staged.exists() and not store.has(d)
    result = store.adopt_file(staged, d)
    assert result.new and not staged.exists()
    assert store.read(d) == b"verified bytes"
    assert (store.path(d).stat().st_mode & 0o777) == 0o444
    again = tmp_path / "tmp" / "y"
    again.write_bytes(b"verified bytes")
    assert store.adopt_file(again, d).new is False and not again.exists()
