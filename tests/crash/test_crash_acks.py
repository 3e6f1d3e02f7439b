"""What a crash state is checked against: the acknowledgements on both sides of the crash point.

``crashlab.explore`` hands the checker the markers before the crash point (what must have
survived) and those after it (what the workload went on to acknowledge); ``crashlab.checks.allowed``
turns them into the values an acknowledged ref may hold: the value acknowledged last, or the one
it was being moved to when the power went. Tiny synthetic traces (no strace): a file ``ref`` moved
by write-to-temporary-and-rename, as kvreg's refs are.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from crashlab import explore  # noqa: E402
from crashlab import ops as o  # noqa: E402
from crashlab.checks import allowed  # noqa: E402
from crashlab.fstree import snapshot  # noqa: E402
from crashlab.trace import Trace  # noqa: E402

Acks = list[dict[str, Any]]


def ack(value: str, ref: str = "r", root: str = "root", kind: str = "ref") -> dict[str, Any]:
    return {"kind": kind, "root": root, "ref": ref, "digest": value}


def test_allowed_is_the_last_acknowledged_value_then_the_next_one() -> None:
    acked = [ack("a"), ack("b"), ack("x", ref="other")]
    later = [ack("y", root="client"), ack("z", kind="artifact"), ack("c"), ack("d")]
    assert allowed(acked, later, "ref", "root", "ref") == {
        "r": [ack("b"), ack("c")],
        "other": [ack("x", ref="other")],
    }


def test_a_ref_acknowledged_only_later_is_not_checked_yet() -> None:
    assert allowed([], [ack("a")], "ref", "root", "ref") == {}


def _moves(tmp_path: Path, values: list[str], acks: list[int]) -> Trace:
    """``ref`` (``old`` before the trace, acknowledged first) moved to each of ``values`` by a
    temporary file, fsync, rename and fsync of the folder; a marker after the moves in ``acks``."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "ref").write_bytes(b"old")
    base = snapshot([root])
    top = base.roots[str(root.resolve())]
    current = base.nodes[top].entries["ref"]
    ops: list[o.Op] = [o.Marker(ack("old"), "ack old")]
    ino = base._next
    for i, value in enumerate(values):
        ops += [
            o.Create(top, "ref.tmp", ino, f"create {value}"),
            o.Write(ino, 0, value.encode(), 0, f"write {value}"),
            o.Fsync(ino, False, f"fsync {value}"),
            o.Rename(top, "ref.tmp", top, "ref", ino, current, f"rename {value}"),
            o.Fsync(top, True, f"fsync folder {value}"),
        ]
        if i in acks:
            ops.append(o.Marker(ack(value), f"ack {value}"))
        current, ino = ino, ino + 1
    return Trace(base=base, ops=ops)


def _explore(tmp_path: Path, trace: Trace, seen: list[tuple[str, Acks, Acks]]) -> explore.Result:
    root = next(iter(trace.base.roots))

    def check(roots: dict[str, Path], acked: Acks, later: Acks) -> list[str]:
        path = roots["root"] / "ref"
        have = path.read_bytes().decode() if path.exists() else None
        seen.append((str(have), acked, later))
        options = [m["digest"] for m in allowed(acked, later, "ref", "root", "ref").get("r", [])]
        return [f"ref is {have}, not one of {options}"] if options and have not in options else []

    return explore.explore(trace, "alice", check, {root: "root"}, explore.Budget(200, 60), scratch=tmp_path)


def test_a_move_on_disk_before_its_acknowledgement_is_no_violation(tmp_path: Path) -> None:
    seen: list[tuple[str, Acks, Acks]] = []
    result = _explore(tmp_path, _moves(tmp_path, ["new"], acks=[0]), seen)
    assert result.violations == []
    early = [later for have, acked, later in seen if have == "new" and acked == [ack("old")]]
    assert early, "no state had the move on disk before its acknowledgement"
    assert all(later == [ack("new")] for later in early)
    assert all(have == "new" for have, acked, _ in seen if acked == [ack("old"), ack("new")])


def test_a_value_never_acknowledged_after_an_acknowledged_one_is_a_violation(tmp_path: Path) -> None:
    """Moved to ``mid`` (never acknowledged), then to ``new`` (acknowledged): a state at ``mid``
    is neither what was acknowledged nor the move under way that the workload acknowledged next."""
    seen: list[tuple[str, Acks, Acks]] = []
    result = _explore(tmp_path, _moves(tmp_path, ["mid", "new"], acks=[1]), seen)
    assert result.violations
    assert all("ref is mid" in v.problems[0] for v in result.violations)
