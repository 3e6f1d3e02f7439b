"""``kvreg-admin fsck`` finds each kind of damage the crash tests rely on it to rule out.

A registry (SQLite + a folder) with an artifact pushed; then, one at a time and undone after:
a held object's bytes removed, an object's bytes changed, an audit entry rewritten, the
newest audit entry removed, a checkpoint's root changed. Each is reported as a problem of
its kind (exit 3 from the command); the leftovers of interrupted work (orphan bytes) are
reported but are not problems. (A ref without its envelope, or an envelope without its
holds, is refused by the database's foreign keys; fsck checks them all the same.)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, select, update

from kvreg_registry.db.models import AuditEntry, LogCheckpoint

from .rig import CrashRig


@pytest.fixture(scope="module")
def pushed(sqlite_rig: CrashRig) -> tuple[CrashRig, str]:
    rig = sqlite_rig
    ns, token = rig.namespace()
    home = rig.home(token, store=True, ns=ns)
    rig.push(home, rig.new.ref, f"{ns}/r")
    rig.audit_verify(home)  # a signed checkpoint of the whole log
    return rig, ns


def _kinds(rig: CrashRig) -> set[str]:
    from kvreg_registry.services.fsck import check_registry

    st = rig._open_state()
    return {p.kind for p in check_registry(st.db, st.storage, st.log).problems}


@contextlib.contextmanager
def _file_replaced(path: Path, data: bytes | None) -> Iterator[None]:
    """``path`` holding ``data`` (None: removed) for the block; restored after."""
    saved = path.read_bytes()
    path.unlink()
    if data is not None:
        path.write_bytes(data)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        path.write_bytes(saved)
        path.chmod(0o444)


def _object_path(rig: CrashRig) -> Path:
    from kvreg.core.digest import Digest

    return Path(rig._open_state().storage.path_for(Digest(rig.new.objects[0])))


def test_clean_registry_passes_and_the_command_exits_0(pushed: tuple[CrashRig, str]) -> None:
    rig, _ns = pushed
    report = rig.fsck_cli()
    assert report["problems"] == [] and report["log_size"] > 0 and report["checkpoint_size"] is not None


def test_missing_bytes_are_a_problem_and_exit_3(pushed: tuple[CrashRig, str]) -> None:
    rig, _ns = pushed
    with _file_replaced(_object_path(rig), None):
        assert "object_missing" in _kinds(rig)
        proc = rig.admin("fsck")
        assert proc.returncode == 3, proc.stderr
        assert {p["kind"] for p in json.loads(proc.stdout)["problems"]} >= {"object_missing"}
    assert _kinds(rig) == set()


def test_changed_bytes_are_a_problem(pushed: tuple[CrashRig, str]) -> None:
    rig, _ns = pushed
    path = _object_path(rig)
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    with _file_replaced(path, bytes(data)):
        assert _kinds(rig) == {"object_corrupt"}


def test_orphan_bytes_are_a_leftover_not_a_problem(pushed: tuple[CrashRig, str]) -> None:
    rig, _ns = pushed
    orphan = rig.orphan_bytes()
    report = rig.fsck()
    assert {"kind": "orphan_bytes", "subject": orphan} in [
        {"kind": f["kind"], "subject": f["subject"]} for f in report["leftovers"]
    ]
    rig.collect_garbage()
    rig.fsck(leftovers=False)


def _db_change(rig: CrashRig, change: Callable[..., object], undo: Callable[..., object]) -> set[str]:
    db = rig._open_state().db
    with db.write() as s:
        change(s)
    try:
        return _kinds(rig)
    finally:
        with db.write() as s:
            undo(s)
        assert _kinds(rig) == set()


def test_rewritten_log_entry_is_a_problem(pushed: tuple[CrashRig, str]) -> None:
    rig, _ns = pushed
    with rig._open_state().db.read() as s:
        entry = bytes(s.scalar(select(AuditEntry.entry).where(AuditEntry.seq == 1)))
    forged = entry.replace(b'"seq":1', b'"seq":1 ')
    kinds = _db_change(
        rig,
        lambda s: s.execute(update(AuditEntry).where(AuditEntry.seq == 1).values(entry=forged)),
        lambda s: s.execute(update(AuditEntry).where(AuditEntry.seq == 1).values(entry=entry)),
    )
    assert "log_leaf" in kinds


def test_removed_log_entry_is_a_problem(pushed: tuple[CrashRig, str]) -> None:
    rig, _ns = pushed
    with rig._open_state().db.read() as s:
        row = s.scalar(select(AuditEntry).order_by(AuditEntry.seq.desc()).limit(1))
        saved = {c.name: getattr(row, c.key) for c in AuditEntry.__table__.columns}
    kinds = _db_change(
        rig,
        lambda s: s.execute(delete(AuditEntry).where(AuditEntry.seq == saved["seq"])),
        lambda s: s.execute(AuditEntry.__table__.insert().values(**saved)),
    )
    assert "log_size" in kinds


def test_changed_checkpoint_is_a_problem(pushed: tuple[CrashRig, str]) -> None:
    rig, _ns = pushed
    with rig._open_state().db.read() as s:
        size, root = s.execute(
            select(LogCheckpoint.size, LogCheckpoint.root).order_by(LogCheckpoint.size.desc()).limit(1)
        ).one()
    root = bytes(root)
    other = bytes([root[0] ^ 1]) + root[1:]
    where = LogCheckpoint.size == size
    kinds = _db_change(
        rig,
        lambda s: s.execute(update(LogCheckpoint).where(where).values(root=other)),
        lambda s: s.execute(update(LogCheckpoint).where(where).values(root=root)),
    )
    assert {"checkpoint_note", "checkpoint_root"} <= kinds


def test_roots_recomputed_in_one_pass_match_rfc9162() -> None:
    from kvreg.core import merkle
    from kvreg_registry.services.fsck import _Frontier

    leaves = [merkle.leaf_hash(bytes([i])) for i in range(40)]
    frontier = _Frontier()
    assert frontier.root() == merkle.root_from_leaf_hashes([])
    for n, leaf in enumerate(leaves, 1):
        frontier.add(leaf)
        assert frontier.root() == merkle.root_from_leaf_hashes(leaves[:n])
