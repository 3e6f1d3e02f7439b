from __future__ import annotations

import os
import stat

import pytest

from kvreg.core.errors import StoreError
from kvreg.fileio import atomicfile as atomic
from kvreg.fileio.atomicfile import append_durable, atomic_write_bytes


def test_write_read_only_by_default(tmp_path):
    p = tmp_path / "d" / "f"
    atomic_write_bytes(p, b"hello")
    assert p.read_bytes() == b"hello"
    assert stat.S_IMODE(p.stat().st_mode) == 0o444
    assert os.listdir(p.parent) == ["f"]


def test_write_mode_and_replace(tmp_path):
    p = tmp_path / "f"
    atomic_write_bytes(p, b"one", mode=0o644)
    atomic_write_bytes(p, b"two", mode=0o600)
    assert p.read_bytes() == b"two"
    assert stat.S_IMODE(p.stat().st_mode) == 0o600


def test_crash_before_rename_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    p = tmp_path / "f"
    tmp = tmp_path / "tmp"
    atomic_write_bytes(p, b"old", mode=0o644, tmp_dir=tmp)

    def boom(fd):
        raise RuntimeError("simulated crash during fsync")

    monkeypatch.setattr(atomic.os, "fsync", boom)
    with pytest.raises(RuntimeError):
        atomic_write_bytes(p, b"new", tmp_dir=tmp)
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp) == []


def test_os_error_becomes_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(StoreError):
        atomic_write_bytes(blocker / "child", b"x", tmp_dir=tmp_path)


def test_append_durable(tmp_path):
    p = tmp_path / "logs" / "x"
    append_durable(p, b"a\n")
    append_durable(p, b"b\n")
    assert p.read_bytes() == b"a\nb\n"


def test_exclusive_writes_never_replace(tmp_path):
    path = tmp_path / "f.json"
    atomic_write_bytes(path, b"one", mode=0o644)
    assert path.read_bytes() == b"one"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    atomic_write_bytes(path, b"two", mode=0o644)
    assert path.read_bytes() == b"two"
    with pytest.raises(FileExistsError):
        atomic_write_bytes(path, b"three", exclusive=True)
    assert path.read_bytes() == b"two"
    assert sorted(os.listdir(tmp_path)) == ["f.json"]


def test_ensure_dir_fsyncs_the_parent_of_each_new_folder(tmp_path, monkeypatch):
    """A new folder is a name in its parent: each parent is fsynced once the folder exists, so
    that a power cut cannot take the folder (and the files fsynced into it) away."""
    synced: list[str] = []
    monkeypatch.setattr(atomic, "fsync_dir", lambda d: synced.append(os.fspath(d)))
    atomic.ensure_dir(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    assert synced == [str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b")]
    synced.clear()
    atomic.ensure_dir(tmp_path / "a" / "b" / "c")
    assert synced == []  # there already: one stat, no fsync


def test_atomic_write_into_new_folders_makes_them_durable(tmp_path, monkeypatch):
    synced: list[str] = []
    real = atomic.fsync_dir
    monkeypatch.setattr(atomic, "fsync_dir", lambda d: (synced.append(os.fspath(d)), real(d)))
    atomic_write_bytes(tmp_path / "new" / "file", b"x")
    assert synced == [str(tmp_path), str(tmp_path / "new")]  # the new folder's name, then the file's


def test_ensure_dir_refuses_a_file_in_the_way(tmp_path):
    (tmp_path / "a").write_bytes(b"not a folder")
    with pytest.raises(OSError):
        atomic.ensure_dir(tmp_path / "a" / "b")
