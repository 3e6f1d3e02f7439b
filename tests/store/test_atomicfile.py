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
