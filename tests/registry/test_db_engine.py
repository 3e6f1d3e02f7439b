"""kvreg_registry.db.engine on SQLite: writers of one process take turns on a lock (no busy
waits), and a failed write transaction gives the turn back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from kvreg_registry.db.engine import Database


def counter_db(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with db.write() as s:
        s.execute(text("CREATE TABLE counter (n INTEGER NOT NULL)"))
        s.execute(text("INSERT INTO counter VALUES (0)"))
    return db


def test_concurrent_writers_of_one_process_all_commit(tmp_path: Path) -> None:
    db = counter_db(tmp_path)
    errors: list[BaseException] = []

    def bump(times: int) -> None:
        try:
            for _ in range(times):
                with db.write() as s:
                    n = s.execute(text("SELECT n FROM counter")).scalar_one()
                    time.sleep(0.0005)  # hold the transaction open a little: others must queue
                    s.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=bump, args=(40,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with db.read() as s:
        assert s.execute(text("SELECT n FROM counter")).scalar_one() == 160
    db.dispose()


def test_a_failed_write_gives_the_turn_back(tmp_path: Path) -> None:
    db = counter_db(tmp_path)
    with pytest.raises(RuntimeError, match="boom"), db.write() as s:
        s.execute(text("UPDATE counter SET n = 99"))
        raise RuntimeError("boom")
    done = threading.Event()

    def write() -> None:
        with db.write() as s:
            s.execute(text("UPDATE counter SET n = n + 1"))
        done.set()

    threading.Thread(target=write).start()
    assert done.wait(10), "the next writer never got its turn"
    with db.read() as s:
        assert s.execute(text("SELECT n FROM counter")).scalar_one() == 1  # the failed one rolled back
    db.dispose()


def test_sqlite_commits_are_durable_when_they_return(tmp_path: Path) -> None:
    """``synchronous=FULL``: the write-ahead log is fsynced at every commit, before the registry
    answers (NORMAL loses the last commits in a power cut: tests/crash/test_power_loss.py)."""
    db = counter_db(tmp_path)
    with db.write() as s:
        assert s.execute(text("PRAGMA synchronous")).scalar_one() == 2
        assert s.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
