"""The tags an OCI remote was seen at (``kvreg.store.tag_history``): a tag moved back is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import ConfigError, RefRollbackError
from kvreg.store.home import Home
from kvreg.store.tag_history import TagHistory

A, B, C = (Digest.of_bytes(x) for x in (b"a", b"b", b"c"))
T1, T2, T3 = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"


@pytest.fixture
def history(tmp_path: Path) -> TagHistory:
    return TagHistory(Home(tmp_path / "home").ensure(), "hub")


def test_first_sight_and_moving_forward_are_accepted(history: TagHistory) -> None:
    history.check("kv/ns", "t", A, T1)  # nothing seen yet: trust on first use
    history.record("kv/ns", "t", A, T1)
    history.check("kv/ns", "t", A, T1)  # unchanged
    history.check("kv/ns", "t", B, T2)
    history.record("kv/ns", "t", B, T2)
    assert [e["digest"] for e in history.seen("kv/ns", "t")] == [str(A), str(B)]
    assert history.repositories() == {"kv/ns": [A, B]}
    assert history.path.stat().st_mode & 0o777 == 0o644


def test_a_digest_seen_and_replaced_is_a_rollback(history: TagHistory) -> None:
    history.record("kv/ns", "t", A, None)
    history.record("kv/ns", "t", B, None)
    with pytest.raises(RefRollbackError) as e:
        history.check("kv/ns", "t", A, None)
    assert e.value.exit_code == 3 and str(B) in e.value.message
    history.check("kv/other", "t", A, None)  # per repository and tag
    history.check("kv/ns", "u", A, None)


def test_an_artifact_older_than_the_newest_seen_is_a_rollback(history: TagHistory) -> None:
    history.record("kv/ns", "t", B, T2)
    with pytest.raises(RefRollbackError):
        history.check("kv/ns", "t", C, T1)
    history.check("kv/ns", "t", C, T3)
    history.check("kv/ns", "t", C, None)  # no creation time: only the digest rule applies


def test_accepting_an_older_artifact_forgets_the_newer_ones(history: TagHistory) -> None:
    history.record("kv/ns", "t", B, T2)
    history.record("kv/ns", "t", A, T1)  # --allow-rollback, or a push of the older artifact
    history.check("kv/ns", "t", A, T1)
    assert [e["digest"] for e in history.seen("kv/ns", "t")] == [str(A)]


def test_a_damaged_file_is_a_config_error(history: TagHistory) -> None:
    history.path.parent.mkdir(parents=True, exist_ok=True)
    history.path.write_text('{"format": "other"}')
    with pytest.raises(ConfigError):
        history.check("kv/ns", "t", A, None)
    assert history.forget() is True and history.forget() is False
