"""Recording: run a command under ``strace`` and read its output back as system calls.

Why system calls, and why strace: a crash state is made of what reached the kernel, and only
the kernel's view is complete. An interposition layer in ``kvreg.fileio`` would see kvreg's own
writes but not SQLite's (the registry's database and its write-ahead log are written by the
SQLite library in C, with ``pwrite`` and ``fdatasync``), nor ``tempfile``'s, ``pathlib``'s
``mkdir`` or the ``O_DIRECT`` writes of ``kvreg.fileio.directio``'s disk threads; each would
need a hook, and a write that went around the hooks would go unseen. ``strace -f`` follows every
process and thread of the workload (the registry server and the client commands it starts) and
prints every call in one order. ALICE (Pillai et al., OSDI 2014) records with a modified strace
for the same reason. Whatever strace cannot show (a write through a shared ``mmap``) is refused
by the parser, and the replay of the whole trace is compared with the files the workload left
(``crashlab.trace.check_complete``): a write that went around the recorder fails the run.

The options: ``-f`` (children and threads), ``--seccomp-bpf`` (only the listed calls stop the
tracee: imports stay fast), ``-y`` (each descriptor with its path, as ``5</path>``), ``-xx`` (every
string and path in hexadecimal: unambiguous to parse, no quoting), ``-s`` large enough for the
biggest write (a longer one is refused, not silently cut), ``-qq`` (no attach/exit chatter).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The calls recorded: everything that changes files or folders, asks for durability, moves a
#: descriptor's offset or could write around the recorder (``mmap``, ``copy_file_range``, ...).
SYSCALLS = (
    "open,openat,openat2,creat,write,pwrite64,writev,pwritev,pwritev2,lseek,"
    "truncate,ftruncate,fallocate,fsync,fdatasync,sync,syncfs,"
    "rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,rmdir,link,linkat,symlink,symlinkat,"
    "chmod,fchmod,fchmodat,mmap,copy_file_range,sendfile,splice,msync"
)
#: Longest write that can be recorded (strace's -s); a longer one makes the trace refuse.
MAX_WRITE = 32 << 20


def strace_path() -> str:
    """The strace binary, or an error that says how to install it."""
    path = shutil.which("strace")
    if path is None:
        raise RuntimeError("strace is not installed: apt-get install strace (scripts/services.sh does)")
    return path


def command(trace_file: Path, argv: Sequence[str]) -> list[str]:
    """The strace command line that records ``argv`` into ``trace_file``."""
    return [
        strace_path(),
        "-f",
        "--seccomp-bpf",
        "-qq",
        "-y",
        "-xx",
        "-s",
        str(MAX_WRITE),
        "-e",
        "signal=none",
        "-e",
        f"trace={SYSCALLS}",
        "-o",
        str(trace_file),
        "--",
        *argv,
    ]


def record(
    trace_file: Path, argv: Sequence[str], *, env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` under strace; raise with its output if it fails."""
    done = subprocess.run(
        command(trace_file, argv),
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the recorded workload failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


# --- reading strace's output -----------------------------------------------------------------


@dataclass(frozen=True)
class Syscall:
    """One finished call: its process or thread, name, raw arguments and raw return value."""

    pid: int
    name: str
    args: list[str]
    ret: str
    line: int

    @property
    def ok(self) -> bool:
        """Whether it returned without an error (``-1 E...`` or ``?`` are failures)."""
        return not (self.ret.startswith("-1") or self.ret.startswith("?"))

    @property
    def value(self) -> int:
        """The return value as a number (the descriptor of an ``open``, the count of a ``write``)."""
        return int(re.match(r"-?\d+", self.ret).group(0))  # type: ignore[union-attr]


_PID = re.compile(r"^(\d+) +")
_CALL = re.compile(r"^(\w+)\((.*)\) += (.*)$", re.S)
_UNFINISHED = " <unfinished ...>"
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$", re.S)


def read(trace_file: Path) -> Iterator[Syscall]:
    """The finished calls of a trace, in the order they returned (an interrupted call, split
    over two lines by strace, is joined at its ``resumed`` line)."""
    pending: dict[int, str] = {}
    with trace_file.open(encoding="ascii", errors="replace") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            m = _PID.match(line)
            pid = int(m.group(1)) if m else 0
            text = line[m.end() :] if m else line
            if text.startswith(("+++", "---")):
                continue
            if text.endswith(_UNFINISHED):
                pending[pid] = text[: -len(_UNFINISHED)]
                continue
            resumed = _RESUMED.match(text)
            if resumed:
                start = pending.pop(pid, None)
                if start is None:
                    continue  # attached in the middle of a call: nothing to join it to
                text = start + resumed.group(2)
            call = _CALL.match(text)
            if call is None:
                continue  # "exited with", an interrupted call without a return, ...
            yield Syscall(pid, call.group(1), split_args(call.group(2)), call.group(3).strip(), number)


def split_args(text: str) -> list[str]:
    """Top-level arguments (commas inside ``{}``, ``[]``, ``<>`` and strings do not split)."""
    out: list[str] = []
    depth = 0
    quoted = False
    start = 0
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "{[<":
            depth += 1
        elif ch in "}]>":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    if text.strip():
        out.append(text[start:].strip())
    return out


class TruncatedWrite(ValueError):
    """A string longer than strace's ``-s``: its bytes are not all in the trace."""


def unhex(text: str) -> bytes:
    """The bytes of a ``-xx`` string argument ``"\\x41\\x42"``."""
    if not text.startswith('"'):
        raise ValueError(f"not a string argument: {text[:40]}")
    end = text.index('"', 1)
    if text[end + 1 :].startswith("..."):
        raise TruncatedWrite(f"a string longer than {MAX_WRITE} bytes")
    body = text[1:end]
    return bytes.fromhex(body.replace("\\x", ""))


@dataclass(frozen=True)
class Fd:
    """A descriptor argument: its number (``AT_FDCWD`` is -100) and path; ``deleted`` if the file
    had no name left when the call was made."""

    number: int
    path: str
    deleted: bool


_FD = re.compile(r"^(-?\d+|AT_FDCWD)<(.*)>$", re.S)
_DELETED = " (deleted)"


def fd(text: str) -> Fd | None:
    """Parse ``5<\\x2f...>`` (None for a descriptor strace could not name, or a socket)."""
    m = _FD.match(text.strip())
    if m is None:
        return None
    number = -100 if m.group(1) == "AT_FDCWD" else int(m.group(1))
    inner = m.group(2)
    if not inner.startswith("\\x"):
        return None  # socket:[1234], pipe:[..], anon_inode:...
    try:
        path = bytes.fromhex(inner.replace("\\x", "")).decode("utf-8", "surrogateescape")
    except ValueError:
        return None
    deleted = path.endswith(_DELETED)
    return Fd(number, path.removesuffix(_DELETED), deleted)


def flags(text: str) -> set[str]:
    """``O_WRONLY|O_CREAT`` -> ``{"O_WRONLY", "O_CREAT"}``."""
    return {f.strip() for f in text.split("|")}
