"""From system calls to logical operations on the watched roots: :func:`parse`.

The parser keeps a live copy of the roots (a ``crashlab.fstree.Tree`` started from the
pre-workload snapshot, every operation applied as it is read) so that each call resolves to
inodes: ``openat(..., O_CREAT)`` of a free name is a :class:`~crashlab.ops.Create`, a ``write``
goes to the inode its descriptor names, at the descriptor's offset (tracked through ``open``,
``write`` and ``lseek``; ``O_APPEND`` writes at the end), ``rename`` knows which inode it
replaced. Calls on paths outside the roots are skipped; a write to the acknowledgement file
(``ack_file``) becomes a :class:`~crashlab.ops.Marker` with the JSON line it wrote.

What the model cannot replay is refused (``Trace.refused``, which ``crashlab.explore`` turns into
an error, never into a silent pass): a shared writable ``mmap`` of a watched file, a
``copy_file_range``/``sendfile``/``splice`` into one, symbolic links, ``RENAME_EXCHANGE``, a
file moved into a root from outside (its bytes are unknown), a write longer than the recorder's
limit. :func:`check_complete` then compares the whole trace, replayed, with the files the
workload left: a change the recorder missed shows up there.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import ops as o
from . import strace
from .fstree import Tree, ignored, snapshot
from .replay import apply_all
from .strace import Fd, Syscall, TruncatedWrite, fd, flags, read, split_args, unhex


@dataclass
class Trace:
    """A workload's operations on its roots, from its pre-workload snapshot."""

    base: Tree
    ops: list[o.Op]
    refused: list[str] = field(default_factory=list)
    syscalls: int = 0

    @property
    def markers(self) -> list[tuple[int, o.Marker]]:
        return [(i, op) for i, op in enumerate(self.ops) if isinstance(op, o.Marker)]


class _Parser:
    def __init__(self, base: Tree, ack_file: Path | None) -> None:
        self.base = base
        self.live = base.copy()
        self.ack_file = str(ack_file) if ack_file else None
        self.ops: list[o.Op] = []
        self.refused: list[str] = []
        # Offsets per (descriptor, inode), and which descriptors write at the end (O_APPEND).
        self.offsets: dict[tuple[int, int], int] = {}
        self.appending: set[tuple[int, int]] = set()
        # (descriptor, path at open) -> inode: for calls on a descriptor whose name is gone.
        self.opened: dict[tuple[int, str], int] = {}

    # --- helpers ---------------------------------------------------------------------------

    def emit(self, op: o.Op) -> None:
        self.ops.append(op)
        apply_all(self.live, op)

    def refuse(self, call: Syscall, why: str) -> None:
        self.refused.append(f"line {call.line}: {call.name}: {why}")

    def inode_of(self, d: Fd) -> int | None:
        if not d.deleted:
            ino = self.live.lookup(d.path)
            if ino is not None:
                return ino
        return self.opened.get((d.number, d.path))

    def path_arg(self, call: Syscall, dirfd: str | None, text: str) -> str | None:
        """An absolute path from a ``(dirfd, "path")`` pair, or None if it cannot be known."""
        name = unhex(text).decode("utf-8", "surrogateescape")
        if name.startswith("/"):
            return posixpath.normpath(name)
        base = fd(dirfd) if dirfd is not None else None
        if base is None:
            return None  # relative to a working folder strace does not show: check_complete sees a miss
        return posixpath.normpath(posixpath.join(base.path, name))

    def watched(self, path: str | None) -> bool:
        return path is not None and self.live.root_of(path) is not None and not ignored(path)

    def where(self, call: Syscall, path: str) -> str:
        return f"line {call.line} pid {call.pid} {call.name} {path}"

    # --- calls -----------------------------------------------------------------------------

    def handle(self, call: Syscall) -> None:
        if not call.ok:
            return
        handler = getattr(self, "on_" + call.name, None)
        if handler is not None:
            handler(call)

    def on_open(self, call: Syscall) -> None:
        self._open(call, None, call.args[0], flags(call.args[1]))

    def on_openat(self, call: Syscall) -> None:
        self._open(call, call.args[0], call.args[1], flags(call.args[2]))

    def on_openat2(self, call: Syscall) -> None:
        how = call.args[2]
        self._open(call, call.args[0], call.args[1], flags(how.split("flags=", 1)[1].split(",")[0]))

    def on_creat(self, call: Syscall) -> None:
        self._open(call, None, call.args[0], {"O_CREAT", "O_WRONLY", "O_TRUNC"})

    def _open(self, call: Syscall, dirfd: str | None, text: str, mode: set[str]) -> None:
        returned = fd(call.ret)
        path = returned.path if returned else self.path_arg(call, dirfd, text)
        if path is None or returned is None or not self.watched(path):
            return
        if "O_TMPFILE" in mode:
            self.refuse(call, f"O_TMPFILE in {path}")
            return
        ino = self.live.lookup(path)
        if ino is None:
            where = self.live.parent(path)
            if where is None:
                self.refuse(call, f"{path} created in a folder the trace does not know")
                return
            ino = self.live.new_node(is_dir=False, mode=_creation_mode(call))
            self.emit(o.Create(where[0], where[1], ino, self.where(call, path)))
        elif "O_TRUNC" in mode and self.live.nodes[ino].size and not mode & {"O_RDONLY"}:
            self.emit(o.Truncate(ino, 0, self.where(call, path)))
        key = (returned.number, ino)
        self.offsets[key] = 0
        self.opened[(returned.number, path)] = ino
        if "O_APPEND" in mode:
            self.appending.add(key)
        else:
            self.appending.discard(key)

    def _file(self, call: Syscall) -> tuple[Fd, int] | None:
        d = fd(call.args[0])
        if d is None or not self.watched(d.path):
            return None
        ino = self.inode_of(d)
        if ino is None:
            self.refuse(call, f"a descriptor of {d.path} the trace never saw opened")
            return None
        return d, ino

    def _write(self, call: Syscall, data: bytes, offset: int | None) -> None:
        d = fd(call.args[0])
        if d is not None and d.path == self.ack_file:
            for line in data.decode().splitlines():
                if line.strip():
                    self.ops.append(o.Marker(json.loads(line), f"line {call.line} ack"))
            return
        found = self._file(call)
        if found is None:
            return
        d, ino = found
        node = self.live.nodes[ino]
        key = (d.number, ino)
        if offset is None:
            offset = node.size if key in self.appending else self.offsets.get(key, 0)
            self.offsets[key] = offset + len(data)
        if data:
            self.emit(o.Write(ino, offset, data, node.size, self.where(call, d.path)))

    def on_write(self, call: Syscall) -> None:
        self._guarded(call, lambda: self._write(call, unhex(call.args[1])[: call.value], None))

    def on_pwrite64(self, call: Syscall) -> None:
        self._guarded(call, lambda: self._write(call, unhex(call.args[1])[: call.value], int(call.args[3])))

    def _iov_bases(self, text: str) -> bytes:
        out = b""
        for item in split_args(text.strip()[1:-1]):
            for field_ in split_args(item.strip()[1:-1]):
                if field_.startswith("iov_base="):
                    out += unhex(field_[len("iov_base=") :])
        return out

    def on_writev(self, call: Syscall) -> None:
        self._guarded(call, lambda: self._write(call, self._iov_bases(call.args[1])[: call.value], None))

    def on_pwritev(self, call: Syscall) -> None:
        self._guarded(
            call, lambda: self._write(call, self._iov_bases(call.args[1])[: call.value], int(call.args[3]))
        )

    on_pwritev2 = on_pwritev

    def _guarded(self, call: Syscall, action: Callable[[], None]) -> None:
        try:
            action()
        except TruncatedWrite as e:
            self.refuse(call, str(e))

    def on_lseek(self, call: Syscall) -> None:
        found = self._file(call)
        if found is not None:
            self.offsets[(found[0].number, found[1])] = call.value

    def on_ftruncate(self, call: Syscall) -> None:
        found = self._file(call)
        if found is not None:
            self.emit(o.Truncate(found[1], int(call.args[1]), self.where(call, found[0].path)))

    def on_truncate(self, call: Syscall) -> None:
        path = self.path_arg(call, None, call.args[0])
        if self.watched(path):
            assert path is not None
            ino = self.live.lookup(path)
            if ino is not None:
                self.emit(o.Truncate(ino, int(call.args[1]), self.where(call, path)))

    def on_fallocate(self, call: Syscall) -> None:
        found = self._file(call)
        if found is None or call.args[1] != "0":
            return  # FALLOC_FL_KEEP_SIZE and friends change no size
        end = int(call.args[2]) + int(call.args[3])
        if end > self.live.nodes[found[1]].size:
            self.emit(o.Truncate(found[1], end, self.where(call, found[0].path)))

    def on_fsync(self, call: Syscall) -> None:
        found = self._file(call)
        if found is not None:
            d, ino = found
            self.ops.append(o.Fsync(ino, self.live.nodes[ino].is_dir, self.where(call, d.path)))

    on_fdatasync = on_fsync

    def on_sync(self, call: Syscall) -> None:
        self.ops.append(o.Sync(f"line {call.line} {call.name}"))

    on_syncfs = on_sync

    def _entry_path(self, call: Syscall, dirfd: str | None, text: str) -> str | None:
        path = self.path_arg(call, dirfd, text)
        return path if self.watched(path) else None

    def on_mkdir(self, call: Syscall) -> None:
        self._mkdir(call, self._entry_path(call, None, call.args[0]))

    def on_mkdirat(self, call: Syscall) -> None:
        self._mkdir(call, self._entry_path(call, call.args[0], call.args[1]))

    def _mkdir(self, call: Syscall, path: str | None) -> None:
        where = self.live.parent(path) if path else None
        if path is None or where is None:
            return
        ino = self.live.new_node(is_dir=True, mode=0o755)
        self.emit(o.Mkdir(where[0], where[1], ino, self.where(call, path)))

    def on_unlink(self, call: Syscall) -> None:
        self._remove(call, self._entry_path(call, None, call.args[0]), directory=False)

    def on_rmdir(self, call: Syscall) -> None:
        self._remove(call, self._entry_path(call, None, call.args[0]), directory=True)

    def on_unlinkat(self, call: Syscall) -> None:
        path = self._entry_path(call, call.args[0], call.args[1])
        self._remove(call, path, directory="AT_REMOVEDIR" in flags(call.args[2]))

    def _remove(self, call: Syscall, path: str | None, *, directory: bool) -> None:
        where = self.live.parent(path) if path else None
        ino = self.live.lookup(path) if path else None
        if path is None or where is None or ino is None:
            return
        self.opened = {k: v for k, v in self.opened.items() if k[1] != path}
        kind = o.Rmdir if directory else o.Unlink
        self.emit(kind(where[0], where[1], ino, self.where(call, path)))

    def on_rename(self, call: Syscall) -> None:
        self._rename(call, None, call.args[0], None, call.args[1], set())

    def on_renameat(self, call: Syscall) -> None:
        self._rename(call, call.args[0], call.args[1], call.args[2], call.args[3], set())

    def on_renameat2(self, call: Syscall) -> None:
        self._rename(call, call.args[0], call.args[1], call.args[2], call.args[3], flags(call.args[4]))

    def _rename(
        self, call: Syscall, sdir: str | None, src_text: str, ddir: str | None, dst_text: str, how: set[str]
    ) -> None:
        src = self.path_arg(call, sdir, src_text)
        dst = self.path_arg(call, ddir, dst_text)
        if not self.watched(src) and not self.watched(dst):
            return
        if "RENAME_EXCHANGE" in how:
            self.refuse(call, "RENAME_EXCHANGE")
            return
        if not self.watched(src):
            self.refuse(call, f"{dst} moved in from outside the watched roots (its bytes are unknown)")
            return
        assert src is not None
        if not self.watched(dst):
            self._remove(call, src, directory=False)
            return
        assert dst is not None
        s, d, ino = self.live.parent(src), self.live.parent(dst), self.live.lookup(src)
        if s is None or d is None or ino is None:
            self.refuse(call, f"rename of {src} the trace cannot place")
            return
        replaced = self.live.lookup(dst) or 0
        if replaced == ino:
            return  # a rename onto another name of the same file changes nothing
        self.opened = {
            (num, dst if p == src else p): v for (num, p), v in self.opened.items() if p != dst or v == ino
        }
        self.emit(o.Rename(s[0], s[1], d[0], d[1], ino, replaced, self.where(call, f"{src} -> {dst}")))

    def on_link(self, call: Syscall) -> None:
        self._link(call, None, call.args[0], None, call.args[1])

    def on_linkat(self, call: Syscall) -> None:
        self._link(call, call.args[0], call.args[1], call.args[2], call.args[3])

    def _link(self, call: Syscall, sdir: str | None, src_text: str, ddir: str | None, dst_text: str) -> None:
        src = self.path_arg(call, sdir, src_text)
        dst = self.path_arg(call, ddir, dst_text)
        if not self.watched(dst):
            return
        assert dst is not None
        ino = self.live.lookup(src) if self.watched(src) and src else None
        where = self.live.parent(dst)
        if ino is None or where is None:
            self.refuse(call, f"a link to {dst} from a file the trace does not know")
            return
        self.emit(o.Link(where[0], where[1], ino, self.where(call, f"{src} -> {dst}")))

    def on_symlink(self, call: Syscall) -> None:
        if self._entry_path(call, None, call.args[1]):
            self.refuse(call, "symbolic links are not replayed")

    def on_symlinkat(self, call: Syscall) -> None:
        if self._entry_path(call, call.args[1], call.args[2]):
            self.refuse(call, "symbolic links are not replayed")

    def on_chmod(self, call: Syscall) -> None:
        path = self._entry_path(call, None, call.args[0])
        ino = self.live.lookup(path) if path else None
        if path and ino is not None:
            self.emit(o.Chmod(ino, int(call.args[1], 8), self.where(call, path)))

    def on_fchmodat(self, call: Syscall) -> None:
        path = self._entry_path(call, call.args[0], call.args[1])
        ino = self.live.lookup(path) if path else None
        if path and ino is not None:
            self.emit(o.Chmod(ino, int(call.args[2], 8), self.where(call, path)))

    def on_fchmod(self, call: Syscall) -> None:
        found = self._file(call)
        if found is not None:
            self.emit(o.Chmod(found[1], int(call.args[1], 8), self.where(call, found[0].path)))

    def on_mmap(self, call: Syscall) -> None:
        if len(call.args) < 5:
            return
        d = fd(call.args[4])
        if d is None or not self.watched(d.path):
            return
        if "MAP_SHARED" in flags(call.args[3]) and "PROT_WRITE" in flags(call.args[2]):
            self.refuse(call, f"a shared writable mapping of {d.path}: its writes are invisible to strace")

    def on_copy_file_range(self, call: Syscall) -> None:
        self._refuse_into(call, call.args[2])

    def on_sendfile(self, call: Syscall) -> None:
        self._refuse_into(call, call.args[0])

    def on_splice(self, call: Syscall) -> None:
        self._refuse_into(call, call.args[2])

    def _refuse_into(self, call: Syscall, out: str) -> None:
        d = fd(out)
        if d is not None and self.watched(d.path):
            self.refuse(call, f"bytes copied into {d.path} by the kernel are not in the trace")


def _creation_mode(call: Syscall) -> int:
    """The mode ``open``/``creat`` asked for, less a umask of 022 (modes are never checked)."""
    last = call.args[-1] if call.args else ""
    return int(last, 8) & ~0o022 if last.startswith("0") and last.isdigit() else 0o600


def parse(trace_file: Path, base: Tree, *, ack_file: Path | None = None) -> Trace:
    """The operations of ``trace_file`` on ``base``'s roots (``base`` itself is not changed)."""
    parser = _Parser(base, ack_file)
    count = 0
    for call in read(trace_file):
        count += 1
        parser.handle(call)
    return Trace(base=base, ops=parser.ops, refused=parser.refused, syscalls=count)


def replay_everything(trace: Trace) -> Tree:
    """The roots as they are once every operation reached the disk."""
    tree = trace.base.copy()
    for op in trace.ops:
        apply_all(tree, op)
    return tree


def check_complete(trace: Trace, roots: list[Path]) -> list[str]:
    """Differences between the replayed trace and the roots on disk now (empty: nothing was
    missed). File modes are not compared."""
    expected = replay_everything(trace)
    actual = snapshot(roots)
    want = {(r, rel): expected.nodes[i] for r, rel, i in expected.walk()}
    have = {(r, rel): actual.nodes[i] for r, rel, i in actual.walk()}
    out = []
    for key in sorted(set(want) | set(have)):
        w, h = want.get(key), have.get(key)
        path = "/".join(key)
        if w is None or h is None:
            out.append(f"{path}: {'only on disk' if w is None else 'only in the replayed trace'}")
        elif w.is_dir != h.is_dir:
            out.append(f"{path}: a file in one, a folder in the other")
        elif not w.is_dir and w.content() != h.content():
            out.append(f"{path}: {h.size} bytes on disk, {w.size} replayed, contents differ")
    return out


def record(
    argv: list[str], roots: list[Path], *, work: Path, env: dict[str, str], timeout: float = 600
) -> Trace:
    """Snapshot ``roots``, run ``argv`` under strace (in ``work``, whose ``acks.jsonl`` is the
    acknowledgement file), parse the trace and refuse it if it missed a change on disk."""
    roots = [Path(os.path.realpath(r)) for r in roots]  # strace names files by their real paths
    before = snapshot(roots)
    ack_file = Path(os.path.realpath(work / "acks.jsonl"))
    trace_file = work / "trace.txt"
    strace.record(trace_file, argv, env=env, cwd=work, timeout=timeout)
    trace = parse(trace_file, before, ack_file=ack_file)
    missed = check_complete(trace, roots)
    if missed:
        raise RuntimeError("the trace does not account for the files on disk:\n" + "\n".join(missed[:20]))
    return trace
