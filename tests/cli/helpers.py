"""Helpers for the command-line tests: run the ``kvreg`` command (in this process, or
``python -m kvreg`` in a subprocess), snapshot and damage stores, and the texts the tests
deposit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app.demo.texts import QUESTION, SOLUTION

from .inprocess import run_in_process

# The demo's texts: > 3 blocks of 16 tokens and longer than the tiny models' sliding window (24).
TEXT = QUESTION + SOLUTION
EXTENSION = " Check: an exhaustive checker enumerated every pair and counted 738 of them. Verified: pass."
SUFFIX = " Now the same question for a + b = 2000: Step 1:"
BLOCK = "16"
REF = "test/p07"


@dataclass
class Run:
    args: list[str]
    rc: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.out)
        except ValueError as e:  # pragma: no cover - shown on failure
            raise AssertionError(f"stdout is not JSON: {e}\n{self}") from e

    def __str__(self) -> str:
        return f"$ kvreg {' '.join(self.args)}\nrc={self.rc}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


# Variables that decide a host's numerics; ``host=`` replaces them to emulate another host.
HOST_NUMERICS_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def kvreg_env(home: Path, host: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KVREG_REEXECUTED", None)
    env.pop("KVREG_TOKEN", None)  # a token of the developer's must not log the tests in
    if host is not None:
        for name in HOST_NUMERICS_VARS:
            env.pop(name, None)
        env.update(host)
    env["KVREG_HOME"] = str(home)
    env["COLUMNS"] = "200"
    # CI cores are shared: spinning OpenMP workers slow everything down; the bits do not change.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def kvreg(
    home: Path,
    *args: str | Path,
    expect: int | None = 0,
    timeout: float = 300,
    host: dict[str, str] | None = None,
    stdin: str | None = None,
) -> Run:
    """Run the ``kvreg ARGS`` command with ``KVREG_HOME=home``, in this process when it can.

    The exit code must be ``expect`` unless that is None. ``host`` replaces the
    numerics environment variables, to run as another kind of host would: that needs
    a fresh process (torch latches them at import), and so does a command that would
    re-execute itself (``tests/cli/inprocess.py``); both run ``python -m kvreg``.
    """
    argv = [str(a) for a in args]
    result = None if host is not None else run_in_process(argv, kvreg_env(home), stdin)
    if result is None:
        return kvreg_subprocess(home, *argv, expect=expect, timeout=timeout, host=host, stdin=stdin)
    run = Run(argv, *result)
    if expect is not None:
        assert run.rc == expect, str(run)
    return run


def kvreg_subprocess(
    home: Path,
    *args: str | Path,
    expect: int | None = 0,
    timeout: float = 300,
    host: dict[str, str] | None = None,
    stdin: str | None = None,
) -> Run:
    """Run ``python -m kvreg ARGS`` in a subprocess, as users do (the real entry point)."""
    argv = [str(a) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "kvreg", *argv],
        env=kvreg_env(home, host),
        input="" if stdin is None else stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    run = Run(argv, proc.returncode, proc.stdout, proc.stderr)
    if expect is not None:
        assert run.rc == expect, str(run)
    return run


def snapshot(home: Path) -> dict[str, tuple[int, int]]:
    """Every path under the store (but the rebuildable cache/): size and mode."""
    out: dict[str, tuple[int, int]] = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home)
        if rel.parts[0] == "cache":
            continue
        st = path.lstat()
        out[str(rel)] = (st.st_size if path.is_file() else 0, st.st_mode)
    return out


def object_path(home: Path, digest: str) -> Path:
    hexdigest = digest.removeprefix("sha256:")
    return home / "objects" / hexdigest[:2] / hexdigest[2:]


def rewrite_object(home: Path, digest: str, data: bytes) -> None:
    path = object_path(home, digest)
    path.chmod(0o644)
    path.write_bytes(data)
    path.chmod(0o444)


def flip_bit(home: Path, digest: str, *, offset: int | None = None) -> None:
    data = bytearray(object_path(home, digest).read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    rewrite_object(home, digest, bytes(data))
