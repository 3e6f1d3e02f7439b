"""Small programs whose file-system calls ``test_power_loss.py`` records and crashes.

``python -m crash.power_loss_steps STEP ROOT [ACK_FILE]`` (``tests/`` on ``PYTHONPATH``) runs one
step on the folder ``ROOT``: the ``*-setup`` steps prepare it (not recorded), the others are
recorded under strace and write what they acknowledge, one JSON line per ``write(2)``, to
``ACK_FILE`` (``bench/crashlab``'s markers). Each step uses kvreg's own code, nothing else.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OLD = time.time() - 7 * 86400


class Acks:
    def __init__(self, path: str | None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else -1

    def __call__(self, **payload: Any) -> None:
        os.write(self.fd, (json.dumps(payload, sort_keys=True) + "\n").encode())


def synthetic_artifact(home: Any, salt: str, ref: str | None) -> str:
    """A real ``kvreg.manifest/v1`` artifact (two chunks, tokens, text, witness) with an
    (unsigned) envelope, under ``ref`` if given; its manifest digest."""
    from kvreg.core.digest import Digest
    from kvreg.core.manifest import Manifest
    from kvreg.core.names import RefName
    from tiny_manifest import tiny_manifest_doc

    fp = Digest.of_bytes(b"fingerprint")
    put = home.objects.put_bytes
    chunks = [put(f"{salt} chunk {i}".encode() * 100) for i in range(2)]
    tokens = put(b"\x01\x00\x00\x00" * 6)
    text = put(f"{salt} text".encode())
    logits = put(b"\x00\x00\x80\x3f" * 8)
    doc = tiny_manifest_doc(fp, tokens, text, chunks, logits)
    manifest = Manifest.from_dict(doc)
    digest = put(manifest.raw_bytes, expected=manifest.digest).digest
    home.envelopes.put(digest, b"{}")
    if ref is not None:
        home.refs.set(RefName.parse(ref), digest)
    return str(digest)


def _age(root: Path) -> None:
    for path in root.rglob("*"):
        os.utime(path, (OLD, OLD), follow_symlinks=False)


# --- the steps -----------------------------------------------------------------------------


def new_folder(root: Path, ack: Acks) -> None:
    """A file written with ``atomic_write_bytes`` into folders that do not exist yet."""
    from kvreg.fileio.atomicfile import atomic_write_bytes

    atomic_write_bytes(root / "a" / "b" / "file", b"hello")
    ack(kind="file", path="a/b/file")


def sqlite_setup(root: Path, ack: Acks) -> None:
    from sqlalchemy import text

    from kvreg_registry.db.engine import Database

    db = Database(f"sqlite:///{root / 'db.sqlite3'}")
    with db.write() as s:
        s.execute(text("CREATE TABLE t (x INTEGER)"))
    db.dispose()


def sqlite_commit(root: Path, ack: Acks) -> None:
    """One committed transaction of the registry's database engine (SQLite in WAL mode)."""
    from sqlalchemy import text

    from kvreg_registry.db.engine import Database

    db = Database(f"sqlite:///{root / 'db.sqlite3'}")
    with db.write() as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
    ack(kind="row")
    db.dispose()


def registry_object(root: Path, ack: Acks) -> None:
    """One object uploaded into the registry's folder storage (a new shard folder)."""
    from kvreg.core.digest import Digest
    from kvreg_registry.storage.folder import FolderStorage

    storage = FolderStorage(root)
    data = b"an object " * 1000
    digest = Digest.of_bytes(data)
    upload = storage.begin_upload()
    upload.write(data)
    upload.commit(digest)
    upload.close()
    ack(kind="object", digest=str(digest))


def gc_setup(root: Path, ack: Acks) -> None:
    from kvreg.store.home import Home

    home = Home(root)
    synthetic_artifact(home, "kept", "ns/kept")
    synthetic_artifact(home, "garbage", None)
    _age(root)


def gc(root: Path, ack: Acks) -> None:
    """``kvreg gc``: one artifact unreferenced, one under a ref."""
    from kvreg.store.gc import collect_garbage
    from kvreg.store.home import Home

    collect_garbage(Home(root), grace_seconds=0)
    ack(kind="gc")


def evict_setup(root: Path, ack: Acks) -> None:
    from kvreg.store.home import Home

    home = Home(root)
    synthetic_artifact(home, "one", "ns/one")
    synthetic_artifact(home, "two", "ns/two")
    _age(root)


def evict(root: Path, ack: Acks) -> None:
    """Disk paging: evict every object that is not a manifest."""
    from kvreg.store.eviction import evict as run
    from kvreg.store.home import Home

    run(Home(root), max_bytes=1)
    ack(kind="evict")


def ref_move_setup(root: Path, ack: Acks) -> None:
    from kvreg.store.home import Home

    home = Home(root)
    synthetic_artifact(home, "old", "ns/moved")
    synthetic_artifact(home, "new", "ns/next")


def ref_move(root: Path, ack: Acks) -> None:
    """A ref moved by compare-and-swap: acknowledged at its old value (durable before the step),
    moved, then acknowledged at its new value."""
    from kvreg.core.names import RefName
    from kvreg.store.home import Home

    home = Home(root)
    moved = RefName.parse("ns/moved")
    old, new = home.refs.get(moved), home.refs.get(RefName.parse("ns/next"))
    ack(kind="ref", root="root", ref="ns/moved", digest=str(old))
    home.refs.set(moved, new, expected=old)
    ack(kind="ref", root="root", ref="ns/moved", digest=str(new))


STEPS: dict[str, Callable[[Path, Acks], None]] = {
    "new-folder": new_folder,
    "sqlite-setup": sqlite_setup,
    "sqlite-commit": sqlite_commit,
    "registry-object": registry_object,
    "gc-setup": gc_setup,
    "gc": gc,
    "evict-setup": evict_setup,
    "evict": evict,
    "ref-move-setup": ref_move_setup,
    "ref-move": ref_move,
}


if __name__ == "__main__":
    STEPS[sys.argv[1]](Path(sys.argv[2]), Acks(sys.argv[3] if len(sys.argv) > 3 else None))
