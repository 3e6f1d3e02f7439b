"""Choosing crash states within a budget, and checking each one: :func:`explore`.

The states a model allows are far too many to check (every subset of the unsynced units at
every crash point), so, as ALICE does, the explorer enumerates the states that test one thing
each, most telling first, and stops at the budget (a count of distinct states checked, and a
time limit):

1. **acknowledgements**: right after each marker, the *minimal* state (only what fsync made
   durable: the strongest test that what was acknowledged survives) and the *maximal* one
   (everything issued reached the disk: what a ``kill -9`` leaves);
2. **fsync boundaries**: just before and just after each ``fsync``/``fdatasync``, minimal and
   maximal;
3. **directory operations** (renames and links first, then creations, unlinks, folders): for each
   one, at the last crash point where it is still not durable, everything issued *but* it (and
   what the model makes depend on it), and only what is durable *plus* it (with what it drags
   along); and right after it, what is durable plus it alone (a rename that reached the disk
   before the data of the file it names);
4. **writes**: each one lost while everything else landed, its first half only, and (``alice``)
   its size without its data (garbage);
5. **prefixes**: the maximal state after each operation, spread evenly over the trace;
6. **random** states: a random crash point, a random subset of its unsynced units (seeded).

States are deduplicated by what a reader of the roots would see (``Tree.digest``) together with
what had been acknowledged; each distinct one is written to a scratch folder and handed to the
workload's checker, which returns the invariants it violates.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ops as o
from .fstree import materialize
from .persistence import Analysis
from .replay import replay
from .trace import Trace

#: ``checker(roots, acknowledged) -> violations``: ``roots`` maps each root's label to the folder
#: holding the crash state's copy of it; ``acknowledged`` are the markers' payloads before the crash.
Checker = Callable[[dict[str, Path], list[dict[str, Any]]], list[str]]


@dataclass(frozen=True)
class Budget:
    """How many distinct states to check at most, and for how long."""

    states: int
    seconds: float
    seed: int = 0


@dataclass(frozen=True)
class Spec:
    """A crash state: crash point ``c``, the units kept, and why it was chosen."""

    c: int
    mask: int
    why: str


@dataclass
class Violation:
    state: str
    problems: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "problems": self.problems}


@dataclass
class Result:
    """What one exploration found."""

    model: str
    operations: int
    units: int
    states_explored: int = 0
    states_checked: int = 0
    seconds: float = 0.0
    violations: list[Violation] = field(default_factory=list)
    by_strategy: dict[str, int] = field(default_factory=dict)


class _Generator:
    def __init__(self, trace: Trace, analysis: Analysis, seed: int) -> None:
        self.ops = trace.ops
        self.a = analysis
        self.n = len(trace.ops)
        self.rng = random.Random(seed)

    def minimal(self, c: int, why: str) -> Spec:
        return Spec(c, self.a.forced(c), f"minimal {why}")

    def maximal(self, c: int, why: str) -> Spec:
        return Spec(c, self.a.issued(c), f"maximal {why}")

    def exposed(self, i: int) -> int:
        """The last crash point at which operation ``i``'s first unit is still not durable."""
        first = self.a.start[i]
        for c in range(i + 1, self.n + 1):
            if self.a.forced(c) >> first & 1:
                return c - 1
        return self.n

    def all(self) -> Iterator[Spec]:
        ops, n = self.ops, self.n
        for i, op in enumerate(ops):
            if isinstance(op, o.Marker):
                label = f"after ack {op.payload.get('kind', '?')} ({op.where})"
                yield self.minimal(i + 1, label)
                yield self.maximal(i + 1, label)
        for i, op in enumerate(ops):
            if isinstance(op, o.Fsync | o.Sync):
                yield self.minimal(i, f"before {o.describe(op)}")
                yield self.maximal(i, f"before {o.describe(op)}")
                yield self.minimal(i + 1, f"after {o.describe(op)}")
        rank = {o.Rename: 0, o.Link: 0, o.Create: 1, o.Unlink: 1, o.Mkdir: 2, o.Rmdir: 2}
        entries = sorted((rank[type(op)], i) for i, op in enumerate(ops) if isinstance(op, o.ENTRY_OPS))
        for _, i in entries:
            yield from self.around(i)
        for i, op in enumerate(ops):
            if isinstance(op, o.Write | o.Truncate):
                yield from self.around(i)
        step = max(1, n // 64)
        for i in range(0, n, step):
            yield self.maximal(i + 1, f"prefix after {o.describe(ops[i])}")
        while True:
            c = self.rng.randint(1, n)
            free = self.a.issued(c) & ~self.a.forced(c)
            keep = self.rng.getrandbits(max(1, free.bit_length())) & free
            yield Spec(c, self.a.closure(self.a.forced(c) | keep), f"random at op {c}")

    def around(self, i: int) -> Iterator[Spec]:
        """States that lose or keep operation ``i`` alone (strategies 3 and 4)."""
        op, a = self.ops[i], self.a
        mine = a.op_units(i)
        if not mine:
            return
        c = self.exposed(i)
        label = o.describe(op)
        if a.forced(c) & mine != mine:
            lost = a.issued(c)
            for u in range(a.start[i], a.start[i + 1]):
                lost &= ~a.dependents(u)
            if lost & a.forced(c) == a.forced(c):
                yield Spec(c, lost, f"all but {label}, crash at op {c}")
            yield Spec(c, a.closure(a.forced(c) | mine), f"durable + {label}, crash at op {c}")
        yield Spec(i + 1, a.closure(a.forced(i + 1) | mine), f"durable + {label} right after it")
        if isinstance(op, o.Write):
            units = [u for u in range(a.start[i], a.start[i + 1])]
            half = sum(1 << u for u in units[: max(1, len(units) // 2)])
            if len(units) > 1:
                yield Spec(c, a.closure(a.issued(c) & ~mine | half | a.forced(c)), f"first half of {label}")
            grow = sum(1 << u for u in units if a.units[u].kind == "grow")
            if grow:
                yield Spec(c, a.issued(c) & ~mine | grow | a.forced(c), f"size without data of {label}")


def explore(
    trace: Trace,
    model: str,
    checker: Checker,
    names: dict[str, str],
    budget: Budget,
    *,
    scratch: Path | None = None,
) -> Result:
    """Check up to ``budget`` distinct crash states of ``trace`` under ``model``. ``names`` maps
    each root (absolute path) to the label the checker knows it by."""
    if trace.refused:
        raise ValueError("the trace has calls the replay cannot model:\n" + "\n".join(trace.refused[:20]))
    started = time.monotonic()
    analysis = Analysis(trace.ops, model)
    result = Result(model, sum(not isinstance(op, o.Marker) for op in trace.ops), len(analysis.units))
    markers = [i for i, op in enumerate(trace.ops) if isinstance(op, o.Marker)]
    seen_specs: set[tuple[int, int]] = set()
    seen_trees: set[tuple[str, int]] = set()
    gen = _Generator(trace, analysis, budget.seed)
    misses = 0
    work = Path(tempfile.mkdtemp(prefix="crashlab-", dir=scratch))
    try:
        for spec in gen.all():
            if result.states_checked >= budget.states or time.monotonic() - started > budget.seconds:
                break
            acked = sum(1 for m in markers if m < spec.c)
            key = (spec.mask, acked)
            if key in seen_specs or not analysis.legal(spec.c, spec.mask):
                misses += 1
                if spec.why.startswith("random") and misses > 50 * budget.states:
                    break  # the random states are all seen: nothing new to find
                continue
            seen_specs.add(key)
            result.states_explored += 1
            tree = replay(analysis, trace.base, spec.c, spec.mask)
            digest = (tree.digest(), acked)
            if digest in seen_trees:
                continue
            seen_trees.add(digest)
            result.states_checked += 1
            strategy = spec.why.split(" ")[0]
            result.by_strategy[strategy] = result.by_strategy.get(strategy, 0) + 1
            folder = work / f"state-{result.states_checked}"
            roots = materialize(tree, folder, names)
            payloads = [trace.ops[m].payload for m in markers if m < spec.c]  # type: ignore[union-attr]
            try:
                problems = checker({names[r]: p for r, p in roots.items()}, payloads)
            except Exception as e:  # a checker that crashes on a state is a finding, not a tool error
                problems = [f"the checker raised {type(e).__name__}: {e}"]
            if problems:
                result.violations.append(Violation(f"{spec.why} (crash at op {spec.c})", problems))
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.seconds = time.monotonic() - started
    return result
