"""Persistence models: which subsets of a trace's operations a crash may leave on disk.

Each operation is split into *units*, the pieces a crash keeps or loses whole
(:class:`Unit`): a directory operation is one unit (``rename`` included: atomic on every
journaling file system, as ALICE's file-system study found); a write is one unit per 4 KiB
block it touches (a block is never torn); a ``truncate`` is one unit. A crash state is a crash
point ``c`` (operations ``0..c-1`` were issued, the rest never happened) and a set ``S`` of their
units that reached the disk. :class:`Analysis` answers, for a model, which units every state at
``c`` must hold (:meth:`Analysis.forced`: what completed ``fsync`` calls made durable) and which
others a unit drags along (:meth:`Analysis.closure`, the model's ordering rules), so that any
closed ``S`` between ``forced(c)`` and everything issued is a legal state.

Two models (``MODELS``):

``alice``
    ALICE's default abstract persistence model (Pillai et al., OSDI 2014, the weakest of the
    file systems it studied and the one its tool checks by default). ``fsync`` of a file makes
    that file's earlier writes and truncates durable; ``fsync`` of a folder makes its earlier
    entry changes durable (creations, links, unlinks, renames in or out of it). Nothing else is
    ordered: any unsynced operation may be lost while later ones survive. An append is two units
    per block, the size and the data: the size may land first, leaving garbage (ext4 in
    ``data=writeback``, ext2, ALICE's "append content" atomicity). A new file's or folder's name
    is durable only once its parent folder is fsynced, whatever was fsynced inside it.

``ext4-ordered``
    ext4 with ``data=ordered`` (its default): metadata goes through the journal in order, so the
    directory operations and truncates that reached the disk are a prefix of those issued, and
    an ``fsync`` of anything commits the journal (every earlier metadata change becomes
    durable). Appended data is written before the size that exposes it (no garbage), a file's
    appends land in order, a block at a time; with delayed allocation they may land after later
    metadata, except that a rename over an existing file first flushes the renamed file's
    appends (``auto_da_alloc``). Overwrites of existing blocks are not ordered at all.

Every state ``ext4-ordered`` allows, ``alice`` allows too. Neither models torn 4 KiB blocks,
lost ``chmod`` s, or a disk that lies about its cache flushes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from . import ops as o

BLOCK = 4096
UnitKind = Literal["entry", "truncate", "write", "grow"]


@dataclass(frozen=True)
class Unit:
    """Part of operation ``op``: a directory operation or truncate (whole), bytes ``lo:hi`` of a
    write (``grow``: the size follows them), or a size reaching ``hi`` with no data (``grow``)."""

    op: int
    kind: UnitKind
    ino: int
    lo: int = 0
    hi: int = 0
    grow: bool = False


def bits(mask: int) -> list[int]:
    """The set bits of ``mask``, lowest first."""
    text = bin(mask)[:1:-1]
    return [i for i, ch in enumerate(text) if ch == "1"]


def _pieces(w: o.Write) -> list[tuple[int, int, bool]]:
    """``(lo, hi, append)``: the write cut at block boundaries and at the old end of the file."""
    cuts = {w.offset, w.end}
    cuts.update(range((w.offset // BLOCK + 1) * BLOCK, w.end, BLOCK))
    if w.offset < w.size_before < w.end:
        cuts.add(w.size_before)
    edges = sorted(cuts)
    return [(lo, hi, lo >= w.size_before) for lo, hi in itertools.pairwise(edges)]


class Analysis:
    """A trace's units under one model, with the forced sets and the ordering rules."""

    def __init__(self, ops: list[o.Op], model: str) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown persistence model {model!r}: one of {', '.join(MODELS)}")
        self.model = model
        self.ops = ops
        self.units: list[Unit] = []
        self.start: list[int] = []  # first unit of each operation; start[len(ops)] == len(units)
        self.meta = 0  # ext4: journaled units (entries, truncates)
        self.appends: dict[int, int] = {}  # ext4: append units per inode
        self.renames_over: dict[int, int] = {}  # ext4: rename unit -> the renamed inode (auto_da_alloc)
        for i, op in enumerate(ops):
            self.start.append(len(self.units))
            self._split(i, op)
        self.start.append(len(self.units))
        self._forced = self._compute_forced()
        self._first_forced: dict[int, int] | None = None

    # --- units -----------------------------------------------------------------------------

    def _add(self, unit: Unit) -> int:
        self.units.append(unit)
        return len(self.units) - 1

    def _split(self, i: int, op: o.Op) -> None:
        ext4 = self.model == "ext4-ordered"
        if isinstance(op, o.ENTRY_OPS):
            u = self._add(Unit(i, "entry", op.ino))
            if ext4:
                self.meta |= 1 << u
                if isinstance(op, o.Rename) and op.replaced:
                    self.renames_over[u] = op.ino
        elif isinstance(op, o.Truncate):
            u = self._add(Unit(i, "truncate", op.ino))
            if ext4:
                self.meta |= 1 << u
        elif isinstance(op, o.Write):
            for lo, hi, append in _pieces(op):
                if append and not ext4:
                    self._add(Unit(i, "grow", op.ino, lo, hi))
                u = self._add(Unit(i, "write", op.ino, lo, hi, grow=append))
                if append and ext4:
                    self.appends[op.ino] = self.appends.get(op.ino, 0) | 1 << u

    def issued(self, c: int) -> int:
        """Every unit of operations ``0..c-1``."""
        return (1 << self.start[c]) - 1

    def op_units(self, i: int) -> int:
        return ((1 << self.start[i + 1]) - 1) ^ ((1 << self.start[i]) - 1)

    # --- what an fsync makes durable -------------------------------------------------------

    def _compute_forced(self) -> list[int]:
        forced = 0
        out: list[int] = []
        file_units: dict[int, int] = {}
        dir_units: dict[int, int] = {}
        for i, op in enumerate(self.ops):
            out.append(forced)
            mine = self.op_units(i)
            if isinstance(op, o.ENTRY_OPS):
                for parent in o.entry_parents(op):
                    dir_units[parent] = dir_units.get(parent, 0) | mine
            elif isinstance(op, o.Write | o.Truncate):
                file_units[op.ino] = file_units.get(op.ino, 0) | mine
            elif isinstance(op, o.Fsync):
                table = dir_units if op.is_dir else file_units
                forced |= table.pop(op.ino, 0)
                forced |= self.meta & self.issued(i)  # ext4: the journal commits (0 for alice)
                forced = self.closure(forced)
            elif isinstance(op, o.Sync):
                forced = self.issued(i)
        out.append(forced)
        return out

    def forced(self, c: int) -> int:
        """The units every state at crash point ``c`` holds."""
        return self._forced[c]

    def exposed(self, i: int) -> int:
        """The last crash point at which operation ``i``'s first unit is not yet durable."""
        if self._first_forced is None:
            first: dict[int, int] = {}
            for c in range(1, len(self._forced)):
                for u in bits(self._forced[c] & ~self._forced[c - 1]):
                    first[u] = c
            self._first_forced = first
        return self._first_forced.get(self.start[i], len(self.ops) + 1) - 1

    # --- ordering rules --------------------------------------------------------------------

    def closure(self, mask: int) -> int:
        """``mask`` and every unit the model makes land before one of them."""
        if self.model != "ext4-ordered":
            return mask
        journaled = mask & self.meta
        if journaled:
            mask |= self.meta & ((1 << journaled.bit_length()) - 1)
        for u, ino in self.renames_over.items():
            if mask >> u & 1:
                mask |= self.appends.get(ino, 0) & ((1 << u) - 1)
        for chain in self.appends.values():
            mine = mask & chain
            if mine:
                mask |= chain & ((1 << mine.bit_length()) - 1)
        return mask

    def dependents(self, u: int) -> int:
        """``u`` and every unit that cannot land without it (what losing ``u`` also loses)."""
        if self.model != "ext4-ordered":
            return 1 << u
        out = 1 << u
        while True:
            before = out
            journaled = out & self.meta
            if journaled:
                lowest = (journaled & -journaled).bit_length() - 1
                out |= self.meta & ~((1 << lowest) - 1)
            for chain in self.appends.values():
                mine = out & chain
                if mine:
                    lowest = (mine & -mine).bit_length() - 1
                    out |= chain & ~((1 << lowest) - 1)
            for r, ino in self.renames_over.items():
                earlier = self.appends.get(ino, 0) & ((1 << r) - 1)
                if earlier & out:
                    out |= 1 << r
            if out == before:
                return out

    def legal(self, c: int, mask: int) -> bool:
        """Whether ``mask`` is a state the model allows at crash point ``c``."""
        f = self.forced(c)
        return mask & f == f and mask & ~self.issued(c) == 0 and self.closure(mask) == mask


MODELS: dict[str, str] = {
    "alice": "ALICE's default persistence model: only fsync orders anything; appends may show garbage",
    "ext4-ordered": "ext4 data=ordered: journaled metadata in order, fsync commits the journal",
}
