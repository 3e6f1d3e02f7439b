"""Deliberately broken builds, to show that the explorer can fail: ``python -m crashlab.faults
FAULT kvreg ARGS...`` runs ``kvreg ARGS`` with one of kvreg's durability steps taken out.

The patch is made before anything else of kvreg is imported, so that modules which import the
function by name get the broken one too. The workload driver uses this module when its spec
names a ``fault`` (``bench/crash_states.py --fault NAME``); kvreg itself never imports it.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable
from typing import BinaryIO


def _no_dir_fsync() -> None:
    from kvreg.fileio import atomicfile

    def skipped(directory: str | os.PathLike[str]) -> None:
        del directory

    atomicfile.fsync_dir = skipped


def _no_file_fsync() -> None:
    from kvreg.fileio import atomicfile

    def flush_only(f: BinaryIO) -> None:
        f.flush()

    atomicfile.finish = flush_only


def _sqlite_normal() -> None:
    from typing import Any

    from sqlalchemy import Engine, event

    from kvreg_registry.db import engine

    make = engine.make_engine

    def relaxed(url: str) -> Engine:
        made = make(url)
        if made.dialect.name == "sqlite":

            @event.listens_for(made, "connect")
            def _normal(dbapi_connection: Any, _record: Any) -> None:  # after kvreg's own hook
                dbapi_connection.execute("PRAGMA synchronous=NORMAL")

        return made

    engine.make_engine = relaxed


#: Each fault: what it breaks.
FAULTS: dict[str, tuple[str, Callable[[], None]]] = {
    "no-dir-fsync": (
        "kvreg.fileio.atomicfile.fsync_dir does nothing (renames and links not made durable)",
        _no_dir_fsync,
    ),
    "no-file-fsync": (
        "kvreg.fileio.atomicfile.finish does not fsync (temp files renamed with unsynced bytes)",
        _no_file_fsync,
    ),
    "sqlite-normal": (
        "the registry's SQLite runs with synchronous=NORMAL (the write-ahead log not fsynced at commit)",
        _sqlite_normal,
    ),
}


def main(argv: list[str]) -> None:
    fault, module, *rest = argv
    FAULTS[fault][1]()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
