"""Building a crash state: the pre-workload snapshot plus the units that reached the disk.

:func:`apply_all` applies a whole operation (the parser's live tree, and the final-state check);
:func:`replay` applies a chosen set of units in the order they were issued, on a copy of the
trace's snapshot. Files and folders the workload created exist from the start, unnamed, so
that a write whose file's name was lost still has somewhere to go (it is unreachable, as an
orphan inode is after ``fsck``). Modes (``chmod``) are applied as issued up to the crash point.
"""

from __future__ import annotations

from . import ops as o
from .fstree import Node, Tree
from .persistence import Analysis, Unit, bits


def _set_entry(tree: Tree, parent: int, name: str, ino: int) -> None:
    tree.nodes[parent].entries[name] = ino


def _drop_entry(tree: Tree, parent: int, name: str, ino: int) -> None:
    entries = tree.nodes[parent].entries
    if entries.get(name) == ino:
        del entries[name]


def apply_entry(tree: Tree, op: o.EntryOp) -> None:
    """A directory operation (the inodes it names exist in ``tree``)."""
    if isinstance(op, o.Create | o.Mkdir | o.Link):
        _set_entry(tree, op.parent, op.name, op.ino)
    elif isinstance(op, o.Unlink | o.Rmdir):
        _drop_entry(tree, op.parent, op.name, op.ino)
    else:
        _drop_entry(tree, op.src_parent, op.src_name, op.ino)
        _set_entry(tree, op.dst_parent, op.dst_name, op.ino)


def _ensure_node(tree: Tree, op: o.Op) -> None:
    if isinstance(op, o.Create | o.Mkdir) and op.ino not in tree.nodes:
        tree.nodes[op.ino] = Node(isinstance(op, o.Mkdir), 0o755 if isinstance(op, o.Mkdir) else 0o644)
        tree.reserve(op.ino + 1)


def apply_all(tree: Tree, op: o.Op) -> None:
    """``op`` as if it reached the disk whole."""
    _ensure_node(tree, op)
    if isinstance(op, o.ENTRY_OPS):
        apply_entry(tree, op)
    elif isinstance(op, o.Write):
        tree.nodes[op.ino].write(op.offset, op.data, grow=True)
    elif isinstance(op, o.Truncate):
        tree.nodes[op.ino].truncate(op.size)
    elif isinstance(op, o.Chmod):
        tree.nodes[op.ino].mode = op.mode


def apply_unit(tree: Tree, op: o.Op, unit: Unit) -> None:
    """One unit of ``op``."""
    if unit.kind == "entry":
        assert isinstance(op, o.ENTRY_OPS)
        apply_entry(tree, op)
    elif unit.kind == "truncate":
        assert isinstance(op, o.Truncate)
        tree.nodes[op.ino].truncate(op.size)
    elif unit.kind == "grow":
        tree.nodes[unit.ino].grow_to(unit.hi)
    else:
        assert isinstance(op, o.Write)
        data = op.data[unit.lo - op.offset : unit.hi - op.offset]
        tree.nodes[unit.ino].write(unit.lo, data, grow=unit.grow)


def replay(analysis: Analysis, base: Tree, c: int, mask: int) -> Tree:
    """The roots after a crash at ``c`` that kept exactly the units in ``mask``."""
    tree = base.copy()
    for op in analysis.ops:
        _ensure_node(tree, op)
    for u in bits(mask):
        unit = analysis.units[u]
        apply_unit(tree, analysis.ops[unit.op], unit)
    for op in analysis.ops[:c]:
        if isinstance(op, o.Chmod):
            tree.nodes[op.ino].mode = op.mode
    return tree
