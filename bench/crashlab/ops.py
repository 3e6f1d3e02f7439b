"""The logical file-system operations of a recorded workload, in the order they happened.

``crashlab.trace`` turns system calls into these; ``crashlab.persistence`` splits them into the
units a crash may keep or lose; ``crashlab.replay`` applies a chosen subset to a snapshot.
Inodes are the numbers of a ``crashlab.fstree.Tree``: the snapshot's, then new ones for files
and folders the workload creates. Every operation keeps ``where`` (the trace line and the path,
for reports).

Directory operations (:class:`Create`, :class:`Mkdir`, :class:`Link`, :class:`Unlink`,
:class:`Rmdir`, :class:`Rename`) change entries of folders; :class:`Write` and
:class:`Truncate` change a file; :class:`Fsync` and :class:`Sync` ask for durability;
:class:`Chmod` changes a mode (modes are replayed as issued, never lost: no check reads them);
:class:`Marker` is the workload telling the explorer that something was acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Create:
    """A new empty file ``ino`` named ``name`` in folder ``parent``."""

    parent: int
    name: str
    ino: int
    where: str


@dataclass(frozen=True)
class Mkdir:
    parent: int
    name: str
    ino: int
    where: str


@dataclass(frozen=True)
class Link:
    """A second name for the existing file ``ino`` (``link(2)``)."""

    parent: int
    name: str
    ino: int
    where: str


@dataclass(frozen=True)
class Unlink:
    parent: int
    name: str
    ino: int
    where: str


@dataclass(frozen=True)
class Rmdir:
    parent: int
    name: str
    ino: int
    where: str


@dataclass(frozen=True)
class Rename:
    """``ino`` moves from ``src_parent/src_name`` to ``dst_parent/dst_name``, replacing
    ``replaced`` there (0: the name was free). Atomic in every model (see ``persistence``)."""

    src_parent: int
    src_name: str
    dst_parent: int
    dst_name: str
    ino: int
    replaced: int
    where: str


@dataclass(frozen=True)
class Write:
    """``data`` at ``offset`` of file ``ino``, whose size was ``size_before`` when it was written."""

    ino: int
    offset: int
    data: bytes
    size_before: int
    where: str

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True)
class Truncate:
    ino: int
    size: int
    where: str


@dataclass(frozen=True)
class Chmod:
    ino: int
    mode: int
    where: str


@dataclass(frozen=True)
class Fsync:
    """``fsync``/``fdatasync`` of file or folder ``ino``."""

    ino: int
    is_dir: bool
    where: str


@dataclass(frozen=True)
class Sync:
    """``sync(2)`` or ``syncfs(2)``: everything before it is durable."""

    where: str


@dataclass(frozen=True)
class Marker:
    """A line the workload wrote to its acknowledgement file (a JSON object)."""

    payload: dict[str, Any]
    where: str


EntryOp = Create | Mkdir | Link | Unlink | Rmdir | Rename
Op = Create | Mkdir | Link | Unlink | Rmdir | Rename | Write | Truncate | Chmod | Fsync | Sync | Marker
ENTRY_OPS = (Create, Mkdir, Link, Unlink, Rmdir, Rename)


def entry_parents(op: EntryOp) -> tuple[int, ...]:
    """The folders whose entries ``op`` changes (a rename: both)."""
    if isinstance(op, Rename):
        return (op.src_parent, op.dst_parent)
    return (op.parent,)


def describe(op: Op) -> str:
    """One line for reports: the operation's kind and where it came from."""
    return f"{type(op).__name__.lower()} {op.where}"
