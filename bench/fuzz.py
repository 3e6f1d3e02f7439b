"""Long fuzz runs: the properties of ``tests/fuzz`` with many more, random examples.

``pytest tests/fuzz`` (part of ``make test``) runs every parser property on a fixed,
derandomized set of a few hundred examples each. This script runs the same tests in
rounds for ``--minutes`` minutes, each round with a fresh random Hypothesis seed and
``--scale`` times the examples (``KVREG_FUZZ_SCALE``, ``KVREG_FUZZ_RANDOM=1``; see
``tests/fuzz/conftest.py``). It stops at the first failing round and prints the seed
and pytest's report (Hypothesis prints the shrunk failing input and a
``@reproduce_failure`` line); a round that runs past its time is reported as a hang.

Usage::

    .venv/bin/python bench/fuzz.py --minutes 30
    .venv/bin/python bench/fuzz.py --minutes 5 --scale 50 -k checkpoint
    .venv/bin/python bench/fuzz.py --seed 1234 --rounds 1      # replay one round

Exit status: 0 when every round passed, 1 on a failure or a hang. What it finds
belongs in ``tests/fuzz/corpus/<parser>/`` (see the README there) once fixed.
This script does not fix, minimize or save anything by itself.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _round(seed: int, scale: int, select: str | None, timeout: float) -> tuple[str, str]:
    """Run one round; return (``"pass"``/``"fail"``/``"hang"``, pytest's output)."""
    cmd = [sys.executable, "-m", "pytest", "tests/fuzz", "-q", "-x", "-p", "no:cacheprovider"]
    cmd += [f"--hypothesis-seed={seed}"]
    if select:
        cmd += ["-k", select]
    env = dict(os.environ, KVREG_FUZZ_SCALE=str(scale), KVREG_FUZZ_RANDOM="1")
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        return "hang", out
    return ("pass" if done.returncode == 0 else "fail"), done.stdout + done.stderr


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="stop starting rounds after this long")
    p.add_argument("--scale", type=int, default=20, help="examples per test, times the suite's count")
    p.add_argument("--rounds", type=int, default=None, help="at most this many rounds")
    p.add_argument("--seed", type=int, default=None, help="seed of the first round (then seed+1, ...)")
    p.add_argument("-k", dest="select", default=None, help="pytest -k expression: only these tests")
    p.add_argument(
        "--round-timeout", type=float, default=None, help="seconds before a round counts as a hang"
    )
    args = p.parse_args(argv)
    if args.scale < 1 or args.minutes <= 0:
        p.error("--scale must be >= 1 and --minutes > 0")
    # The CI suite takes ~30 s at scale 1 on two cores; allow generously for slow hosts.
    round_timeout = args.round_timeout or max(300.0, 60.0 * args.scale)
    deadline = time.monotonic() + 60 * args.minutes
    seed = args.seed if args.seed is not None else secrets.randbelow(2**32)
    n = 0
    while time.monotonic() < deadline and (args.rounds is None or n < args.rounds):
        started = time.monotonic()
        verdict, output = _round(seed, args.scale, args.select, round_timeout)
        n += 1
        print(
            f"round {n}: seed {seed}, scale {args.scale}: {verdict} in {time.monotonic() - started:.0f} s",
            flush=True,
        )
        if verdict != "pass":
            print(output)
            print(f"replay: {sys.executable} bench/fuzz.py --seed {seed} --rounds 1 --scale {args.scale}")
            return 1
        seed += 1
    print(f"{n} rounds passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
