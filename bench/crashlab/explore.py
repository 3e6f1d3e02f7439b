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
workload's checker, which returns the invariants it violates. The checker gets the markers on
both sides of the crash point, as ALICE's checker gets what the workload had printed: what was
acknowledged before the crash must have survived (durability), and an update the workload was
still making (acknowledged only after the crash point) may have reached the disk, whole, before
its acknowledgement (atomicity: the old value or the new one, nothing else).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import random
import shutil
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ops as o
from .fstree import materialize
from .persistence import Analysis
from .replay import replay
from .trace import Trace

#: ``checker(roots, acknowledged, later) -> violations``: ``roots`` maps each root's label to the
#: folder holding the crash state's copy of it; ``acknowledged`` are the markers' payloads before
#: the crash point, ``later`` those after it (what the workload went on to acknowledge: an update
#: in flight at the crash may already be on disk, though not yet acknowledged).
Checker = Callable[[dict[str, Path], list[dict[str, Any]], list[dict[str, Any]]], list[str]]


@dataclass(frozen=True)
class Budget:
    """How many distinct states to check at most, for how long, and on how many processes
    (``jobs`` > 1: worker processes forked at the start of :func:`explore`)."""

    states: int
    seconds: float
    seed: int = 0
    jobs: int = 1


@dataclass(frozen=True)
class Spec:
    """A crash state: crash point ``c``, the units kept, why it was chosen, and what it covers
    (``"fsync 12"``: one of the states of the fsync boundary at operation 12; empty: nothing)."""

    c: int
    mask: int
    why: str
    covers: str = ""


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
    #: Per kind of target (``ack``, ``fsync``, ``rename`` (renames and links), ``entry``, ``write``):
    #: ``[covered, total]``, a target being covered when every state planned for it was checked
    #: (or was the same as a state checked, or is one the model does not allow).
    coverage: dict[str, list[int]] = field(default_factory=dict)


class _Generator:
    def __init__(self, trace: Trace, analysis: Analysis, seed: int) -> None:
        self.ops = trace.ops
        self.a = analysis
        self.n = len(trace.ops)
        self.rng = random.Random(seed)

    def minimal(self, c: int, why: str, covers: str) -> Spec:
        return Spec(c, self.a.forced(c), f"minimal {why}", covers)

    def maximal(self, c: int, why: str, covers: str) -> Spec:
        return Spec(c, self.a.issued(c), f"maximal {why}", covers)

    def planned(self) -> Iterator[Spec]:
        """Strategies 1 to 5, most telling first (see the module docstring)."""
        ops, n = self.ops, self.n
        for i, op in enumerate(ops):
            if isinstance(op, o.Marker):
                label = f"after ack {op.payload.get('kind', '?')} ({op.where})"
                yield self.minimal(i + 1, label, f"ack {i}")
                yield self.maximal(i + 1, label, f"ack {i}")
        for i, op in enumerate(ops):
            if isinstance(op, o.Fsync | o.Sync):
                yield self.minimal(i, f"before {o.describe(op)}", f"fsync {i}")
                yield self.minimal(i + 1, f"after {o.describe(op)}", f"fsync {i}")
                yield self.maximal(i, f"before {o.describe(op)}", f"fsync {i}")
        rank = {o.Rename: 0, o.Link: 0, o.Create: 1, o.Unlink: 1, o.Mkdir: 2, o.Rmdir: 2}
        entries = sorted((rank[type(op)], i) for i, op in enumerate(ops) if isinstance(op, o.ENTRY_OPS))
        for r, i in entries:
            yield from self.around(i, f"{'rename' if r == 0 else 'entry'} {i}")
        for i, op in enumerate(ops):
            if isinstance(op, o.Write | o.Truncate):
                yield from self.around(i, f"write {i}")
        step = max(1, n // 64)
        for i in range(0, n, step):
            yield self.maximal(i + 1, f"prefix after {o.describe(ops[i])}", "")

    def random(self) -> Iterator[Spec]:
        """Strategy 6, without end."""
        while True:
            c = self.rng.randint(1, self.n)
            free = self.a.issued(c) & ~self.a.forced(c)
            keep = self.rng.getrandbits(max(1, free.bit_length())) & free
            yield Spec(c, self.a.closure(self.a.forced(c) | keep), f"random at op {c}")

    def around(self, i: int, covers: str) -> Iterator[Spec]:
        """States that lose or keep operation ``i`` alone (strategies 3 and 4)."""
        op, a = self.ops[i], self.a
        mine = a.op_units(i)
        if not mine:
            return
        c = a.exposed(i)
        label = o.describe(op)
        if a.forced(c) & mine != mine:
            lost = a.issued(c)
            for u in range(a.start[i], a.start[i + 1]):
                lost &= ~a.dependents(u)
            yield Spec(c, lost, f"all but {label}, crash at op {c}", covers)
            yield Spec(c, a.closure(a.forced(c) | mine), f"durable + {label}, crash at op {c}", covers)
        yield Spec(i + 1, a.closure(a.forced(i + 1) | mine), f"durable + {label} right after it", covers)
        if isinstance(op, o.Write):
            units = list(range(a.start[i], a.start[i + 1]))
            half = sum(1 << u for u in units[: max(1, len(units) // 2)])
            if len(units) > 1:
                kept = a.closure(a.issued(c) & ~mine | half | a.forced(c))
                yield Spec(c, kept, f"first half of {label}", covers)
            grow = sum(1 << u for u in units if a.units[u].kind == "grow")
            if grow:
                yield Spec(
                    c, a.issued(c) & ~mine | grow | a.forced(c), f"size without data of {label}", covers
                )


def _check(
    checker: Checker,
    roots: dict[str, Path],
    payloads: list[dict[str, Any]],
    later: list[dict[str, Any]],
    folder: Path,
) -> list[str]:
    """Run ``checker`` on one materialized state, then remove it."""
    try:
        return checker(roots, payloads, later)
    except Exception as e:  # a checker that crashes on a state is a finding, not a tool error
        return [f"the checker raised {type(e).__name__}: {e}"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
    planned = list(gen.planned())
    pending = Counter(spec.covers for spec in planned if spec.covers)
    totals = Counter(key.split(" ")[0] for key in pending)
    misses = 0
    work = Path(tempfile.mkdtemp(prefix="crashlab-", dir=scratch))
    pool = ProcessPoolExecutor(budget.jobs, mp_context=mp.get_context("fork")) if budget.jobs > 1 else None
    inflight: deque[tuple[Spec, Future[list[str]]]] = deque()

    def settle(spec: Spec, problems: list[str]) -> None:
        if problems:
            result.violations.append(Violation(f"{spec.why} (crash at op {spec.c})", problems))
        pending[spec.covers] -= 1

    try:
        for spec in itertools.chain(planned, gen.random()):
            if result.states_checked >= budget.states or time.monotonic() - started > budget.seconds:
                break
            acked = sum(1 for m in markers if m < spec.c)
            key = (spec.mask, acked)
            if key in seen_specs or not analysis.legal(spec.c, spec.mask):
                pending[spec.covers] -= 1
                misses += 1
                if spec.why.startswith("random") and misses > 50 * budget.states:
                    break  # the random states are all seen: nothing new to find
                continue
            seen_specs.add(key)
            result.states_explored += 1
            tree = replay(analysis, trace.base, spec.c, spec.mask)
            digest = (tree.digest(), acked)
            if digest in seen_trees:
                pending[spec.covers] -= 1
                continue
            seen_trees.add(digest)
            result.states_checked += 1
            strategy = spec.why.split(" ")[0]
            result.by_strategy[strategy] = result.by_strategy.get(strategy, 0) + 1
            folder = work / f"state-{result.states_checked}"
            roots = {names[r]: p for r, p in materialize(tree, folder, names).items()}
            payloads = [trace.ops[m].payload for m in markers if m < spec.c]  # type: ignore[union-attr]
            later = [trace.ops[m].payload for m in markers if m >= spec.c]  # type: ignore[union-attr]
            if pool is None:
                settle(spec, _check(checker, roots, payloads, later, folder))
                continue
            inflight.append((spec, pool.submit(_check, checker, roots, payloads, later, folder)))
            while len(inflight) > 2 * budget.jobs:
                done, future = inflight.popleft()
                settle(done, future.result())
        while inflight:
            done, future = inflight.popleft()
            settle(done, future.result())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        shutil.rmtree(work, ignore_errors=True)
    covered = Counter(key.split(" ")[0] for key, left in pending.items() if key and left <= 0)
    result.coverage = {kind: [covered[kind], total] for kind, total in sorted(totals.items())}
    result.seconds = time.monotonic() - started
    return result
