"""An in-memory file tree: the folders a workload writes, as inodes, for replaying crash states.

A :class:`Tree` holds the watched roots of a workload (absolute folder paths, never nested in
one another) as a graph of :class:`Node` s: folders map names to inode numbers, files hold bytes
and a size. :func:`snapshot` reads the roots from disk before the workload runs;
:func:`materialize` writes a tree (a crash state) back to disk under a fresh folder, one
sub-folder per root. Hard links are kept (a node reached by two names is written once and
linked). Symbolic links and other special files are refused: kvreg's stores have none.

A file node keeps two things apart, as a disk does: ``buf``, the bytes written to its blocks,
and ``size``, what its inode says. Bytes past ``size`` are invisible; a size past the bytes
written shows :data:`GARBAGE` there (a size change that reached the disk before its data, which
some file systems allow: see ``crashlab.persistence``). Truncating up shows zeros.

SQLite's ``-shm`` files are never part of a tree (:func:`ignored`): they are shared memory that
SQLite rebuilds from the write-ahead log when the first connection opens after a crash.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: What a block whose size was persisted but whose data was not holds after a crash (a fixed,
#: non-zero pattern: checksums and digests must not take it for valid data).
GARBAGE = bytes((0xA5 ^ (i * 37)) & 0xFF for i in range(4096))


def garbage(n: int) -> bytes:
    """``n`` bytes of :data:`GARBAGE`."""
    reps = n // len(GARBAGE) + 1
    return (GARBAGE * reps)[:n]


def ignored(path: str) -> bool:
    """Files that are no part of any crash state: SQLite's shared-memory index (``*-shm``)."""
    return path.endswith("-shm")


@dataclass
class Node:
    """A file (``entries`` unused) or a folder (``buf`` and ``size`` unused)."""

    is_dir: bool
    mode: int
    buf: bytearray = field(default_factory=bytearray)
    size: int = 0
    entries: dict[str, int] = field(default_factory=dict)

    def content(self) -> bytes:
        """What a reader sees: ``size`` bytes, garbage where the size outran the data."""
        if self.size <= len(self.buf):
            return bytes(self.buf[: self.size])
        return bytes(self.buf) + garbage(self.size - len(self.buf))

    def copy(self) -> Node:
        return Node(self.is_dir, self.mode, bytearray(self.buf), self.size, dict(self.entries))

    # --- file changes (folders never get these) --------------------------------------------

    def write(self, offset: int, data: bytes, *, grow: bool) -> None:
        """Write ``data`` at ``offset`` into the blocks; with ``grow``, the size follows."""
        end = offset + len(data)
        if len(self.buf) < offset:  # a hole: zeros
            self.buf.extend(b"\0" * (offset - len(self.buf)))
        self.buf[offset:end] = data
        if grow:
            self.size = max(self.size, end)

    def grow_to(self, end: int) -> None:
        """The size reaches ``end`` with no data written yet: garbage until the data lands."""
        if end > self.size:
            if len(self.buf) < end:
                self.buf.extend(garbage(end - len(self.buf)))
            self.size = end

    def truncate(self, size: int) -> None:
        """``ftruncate``: shorter drops the bytes, longer shows zeros."""
        if size < self.size:
            del self.buf[size:]
        else:
            del self.buf[self.size :]
            self.buf.extend(b"\0" * (size - self.size))
        self.size = size


class Tree:
    """Inodes and the roots they hang from; inode numbers are the tree's own."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self.roots: dict[str, int] = {}
        self._next = 1

    def copy(self) -> Tree:
        t = Tree()
        t.nodes = {i: n.copy() for i, n in self.nodes.items()}
        t.roots = dict(self.roots)
        t._next = self._next
        return t

    def new_node(self, *, is_dir: bool, mode: int) -> int:
        ino = self._next
        self._next += 1
        self.nodes[ino] = Node(is_dir, mode)
        return ino

    def reserve(self, ino: int) -> None:
        """Inode numbers below ``ino`` are taken (a replay adds the workload's own inodes)."""
        self._next = max(self._next, ino)

    # --- paths ---------------------------------------------------------------------------

    def root_of(self, path: str) -> str | None:
        for root in self.roots:
            if path == root or path.startswith(root + "/"):
                return root
        return None

    def lookup(self, path: str) -> int | None:
        """The inode at absolute ``path``, or None (outside the roots, or no such name)."""
        root = self.root_of(path)
        if root is None:
            return None
        ino = self.roots[root]
        for part in path[len(root) :].split("/"):
            if not part:
                continue
            node = self.nodes[ino]
            if not node.is_dir or part not in node.entries:
                return None
            ino = node.entries[part]
        return ino

    def parent(self, path: str) -> tuple[int, str] | None:
        """``(folder inode, name)`` of ``path``'s entry, or None if its folder is not here."""
        head, _, name = path.rpartition("/")
        if self.root_of(path) is None or path in self.roots or not name:
            return None
        folder = self.lookup(head or "/")
        if folder is None or not self.nodes[folder].is_dir:
            return None
        return folder, name

    def walk(self) -> Iterator[tuple[str, str, int]]:
        """``(root, relative path, inode)`` of every reachable entry, folders before their content."""
        for root, top in sorted(self.roots.items()):
            stack: list[tuple[str, int]] = [("", top)]
            seen = {top}
            while stack:
                rel, ino = stack.pop()
                node = self.nodes[ino]
                for name in sorted(node.entries, reverse=True):
                    child = node.entries[name]
                    sub = f"{rel}/{name}" if rel else name
                    yield root, sub, child
                    if self.nodes[child].is_dir and child not in seen:
                        seen.add(child)
                        stack.append((sub, child))

    def digest(self) -> str:
        """A digest of what a reader of the roots would see (names, kinds, bytes; not modes)."""
        h = hashlib.sha256()
        for root, rel, ino in sorted(self.walk(), key=lambda e: (e[0], e[1])):
            node = self.nodes[ino]
            kind = "d" if node.is_dir else "f" + hashlib.sha256(node.content()).hexdigest()
            h.update(f"{root}\0{rel}\0{kind}\n".encode())
        return h.hexdigest()


def snapshot(roots: list[Path]) -> Tree:
    """Read ``roots`` (existing folders) from disk into a tree."""
    tree = Tree()
    inodes: dict[tuple[int, int], int] = {}
    for root in roots:
        path = Path(os.path.realpath(root))
        for other in tree.roots:
            if str(path).startswith(other + "/") or other.startswith(str(path) + "/"):
                raise ValueError(f"roots must not nest: {other} and {path}")
        top = tree.new_node(is_dir=True, mode=stat.S_IMODE(path.stat().st_mode))
        tree.roots[str(path)] = top
        _read_folder(tree, path, top, inodes)
    return tree


def _read_folder(tree: Tree, folder: Path, ino: int, inodes: dict[tuple[int, int], int]) -> None:
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if ignored(entry.path):
            continue
        st = entry.stat(follow_symlinks=False)
        key = (st.st_dev, st.st_ino)
        if stat.S_ISDIR(st.st_mode):
            child = tree.new_node(is_dir=True, mode=stat.S_IMODE(st.st_mode))
            tree.nodes[ino].entries[entry.name] = child
            _read_folder(tree, Path(entry.path), child, inodes)
        elif stat.S_ISREG(st.st_mode):
            if key not in inodes:
                inodes[key] = tree.new_node(is_dir=False, mode=stat.S_IMODE(st.st_mode))
                node = tree.nodes[inodes[key]]
                node.buf = bytearray(Path(entry.path).read_bytes())
                node.size = len(node.buf)
            tree.nodes[ino].entries[entry.name] = inodes[key]
        else:
            raise ValueError(f"{entry.path}: only files and folders can be replayed")


def materialize(tree: Tree, target: Path, names: dict[str, str]) -> dict[str, Path]:
    """Write ``tree`` under ``target`` (a missing or empty folder): root ``r`` goes to
    ``target/names[r]``. Returns each root's new path."""
    target.mkdir(parents=True, exist_ok=True)
    out = {root: target / names[root] for root in tree.roots}
    for root, path in out.items():
        path.mkdir()
        path.chmod(tree.nodes[tree.roots[root]].mode | 0o700)
    written: dict[int, Path] = {}
    folders: list[tuple[Path, int]] = []
    for root, rel, ino in tree.walk():
        path = out[root] / rel
        node = tree.nodes[ino]
        if node.is_dir:
            path.mkdir()
            folders.append((path, node.mode))
        elif ino in written:
            os.link(written[ino], path)
        else:
            path.write_bytes(node.content())
            path.chmod(node.mode)
            written[ino] = path
    for path, mode in reversed(folders):
        path.chmod(mode | 0o700)  # readable and writable by the checker, whatever the mode was
    return out
