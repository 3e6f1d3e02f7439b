from __future__ import annotations

import stat
from pathlib import Path

from kvreg.store.envelopes import EnvelopeStore
from kvreg.store.home import Home, resolve_root
from kvreg.store.objects import ObjectStore
from kvreg.store.refs import RefStore


def test_explicit_path_wins(tmp_path):
    assert resolve_root(tmp_path / "a", environ={"KVREG_HOME": str(tmp_path / "b")}) == tmp_path / "a"


def test_env_var_then_default(tmp_path, monkeypatch):
    assert resolve_root(environ={"KVREG_HOME": str(tmp_path / "b")}) == tmp_path / "b"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_root(environ={}) == tmp_path / "home" / ".kvreg"
    assert resolve_root(environ={"KVREG_HOME": ""}) == tmp_path / "home" / ".kvreg"


def test_tilde_expanded_and_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_root("~/store") == tmp_path / "store"
    monkeypatch.chdir(tmp_path)
    assert resolve_root("rel") == tmp_path / "rel"
    assert Home(environ={"KVREG_HOME": "~/x"}).root == tmp_path / "x"


def test_construction_touches_nothing(tmp_path):
    h = Home(tmp_path / "kvreg")
    assert isinstance(h.objects, ObjectStore)
    assert isinstance(h.refs, RefStore)
    assert isinstance(h.envelopes, EnvelopeStore)
    assert h.objects is h.objects
    assert list(h.objects.iter_digests()) == []
    assert h.refs.list() == []
    assert not (tmp_path / "kvreg").exists()


def test_ensure_creates_layout(tmp_path):
    h = Home(tmp_path / "kvreg").ensure()
    for name in ("objects", "envelopes", "refs", "logs", "tmp", "quarantine", "keys", "cache"):
        assert (h.root / name).is_dir(), name
    assert stat.S_IMODE(h.keys_dir.stat().st_mode) == 0o700
    assert h.trust_path == h.root / "trust.json"
    assert h.config_path == h.root / "config.json"
    assert h.ensure() is h  # idempotent


def test_first_write_creates_what_it_needs(home):
    home.objects.put_bytes(b"x")
    assert Path(home.objects_dir).is_dir()
