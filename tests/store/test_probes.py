"""``kvreg.store.probes``: a passed probe remembered per (artifact, config), read back only for
the same pair; an unreadable or mismatched record counts as none."""

from __future__ import annotations

from pathlib import Path

from kvreg.core.digest import Digest
from kvreg.store import probes
from kvreg.store.home import Home

A = Digest.of_bytes(b"artifact a")
B = Digest.of_bytes(b"artifact b")
CONFIG = Digest.of_bytes(b"config")
OTHER = Digest.of_bytes(b"another config")


def test_a_remembered_probe_is_read_back_for_the_same_artifact_and_config(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    assert probes.remembered(home, A, CONFIG) is None
    probes.remember(home, A, CONFIG, {"block": 3, "kv_equal": True}, when="2026-01-01T00:00:00+00:00")
    record = probes.remembered(home, A, CONFIG)
    assert record is not None and record["probe"] == {"block": 3, "kv_equal": True}
    assert record["passed_at"] == "2026-01-01T00:00:00+00:00"
    assert probes.remembered(home, A, OTHER) is None
    assert probes.remembered(home, B, CONFIG) is None


def test_an_unreadable_or_mismatched_record_is_none(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    path = probes.record_path(home, A, CONFIG)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert probes.remembered(home, A, CONFIG) is None
    probes.remember(home, B, CONFIG, {"block": 0, "kv_equal": True}, when="t")
    path.write_bytes(probes.record_path(home, B, CONFIG).read_bytes())  # B's record under A's name
    assert probes.remembered(home, A, CONFIG) is None
