"""Run the ``kvreg`` command inside the test process, as ``main()`` would, and capture it.

A ``python -m kvreg`` subprocess costs ~4 s of imports (torch, transformers); running
the Typer app in the test process costs nothing after the first call. What a real
process would get fresh is set up for the call and put back after it: the
environment (``os.environ``), ``sys.argv``, ``sys.stdin``/``stdout``/``stderr`` (byte
buffers, so ``kvreg cat`` can write raw bytes), the working directory, the logging
handlers and levels the CLI installs, and the process-wide torch flags the engine sets
(thread count, deterministic algorithms, oneDNN, float32 matmul precision).

Two things cannot happen in-process, and :func:`run_in_process` returns ``None`` for
them so that the caller runs a real subprocess instead:

- a command that re-executes itself (``kvreg.app.numerics.prepare_numerics`` calls
  ``os.execve`` when torch is already loaded and the numerics profile needs variables
  that torch latches at import, e.g. ``--profile portable``): ``os.execve`` is patched
  for the call to raise :class:`_ReexecRequested`, which nothing in kvreg catches;
- torch loaded with a numerics environment other than this process's own: torch is
  imported here, with the test process's environment, before the first in-process call,
  so that a command setting a profile's variables (which are then restored) can never
  leave torch latched to them for the next command.

This module does not decide when a subprocess is required for other reasons (``host=``,
``kvreg serve``, crash tests): the helpers in ``tests/cli/helpers.py`` do.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

# ``KVREG_TEST_SUBPROCESS=1`` runs every command in a subprocess (to compare the two ways).
FORCE_SUBPROCESS = os.environ.get("KVREG_TEST_SUBPROCESS", "") not in ("", "0")


class _ReexecRequested(BaseException):
    """``os.execve`` was called during an in-process run (BaseException: kvreg catches Exception)."""


def _refuse_execve(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise _ReexecRequested


_torch_loaded_here = False


def _load_torch_natively() -> None:
    """Import torch now, under this process's own environment (see the module docstring)."""
    global _torch_loaded_here
    if _torch_loaded_here:
        return
    importlib.import_module("torch")
    _torch_loaded_here = True


def _torch_state() -> tuple[Any, ...] | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.mkldnn.enabled,
        torch.get_float32_matmul_precision(),
    )


def _restore_torch(state: tuple[Any, ...] | None) -> None:
    if state is None:
        return
    torch = sys.modules["torch"]
    threads, deterministic, warn_only, mkldnn, precision = state
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.mkldnn.enabled = mkldnn
    torch.set_float32_matmul_precision(precision)


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    for name in set(saved) - set(env):
        del os.environ[name]
    os.environ.update(env)
    try:
        yield
    finally:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    root, ours = logging.getLogger(), logging.getLogger("kvreg")
    saved = (list(root.handlers), root.level, ours.level)
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in saved[0]:
                handler.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        ours.setLevel(saved[2])


def _text(raw: bytes) -> str:
    """Decode as ``subprocess.run(text=True)`` does (UTF-8 here, universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", newline=None).read()


def run_in_process(
    argv: list[str], env: Mapping[str, str], stdin: str | None = None
) -> tuple[int, str, str] | None:
    """``kvreg ARGV`` in this process under ``env``: ``(rc, stdout, stderr)``, or None if it
    must run in a subprocess (it asked to re-execute itself)."""
    if FORCE_SUBPROCESS or threading.current_thread() is not threading.main_thread():
        return None  # the process-wide state it swaps is not per thread
    _load_torch_natively()
    import typer

    from kvreg import console
    from kvreg.app import numerics
    from kvreg.cli.main import build_app

    out_raw, err_raw = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_raw, encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(err_raw, encoding="utf-8", write_through=True)
    stdin_stream = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_argv, saved_cwd, saved_execve = sys.argv, os.getcwd(), os.execve
    torch_state = _torch_state()
    saved_may_reexec = numerics.allow_reexec(False)  # put back below
    try:
        with _environment(env), _logging_kept():
            sys.argv = ["kvreg", *argv]
            sys.stdin, sys.stdout, sys.stderr = stdin_stream, out, err
            os.execve = _refuse_execve
            numerics.allow_reexec()  # as kvreg.cli.main.main does: this is the kvreg command
            try:
                code = console.run(typer.main.get_command(build_app()), argv)
            except SystemExit as exc:  # what exit_with() would do, should a command exit itself
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            finally:
                for stream in (out, err):
                    with contextlib.suppress(ValueError):
                        stream.flush()
    except _ReexecRequested:
        return None
    finally:
        os.execve = saved_execve
        numerics.allow_reexec(saved_may_reexec)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        _restore_torch(torch_state)
    return code, _text(out_raw.getvalue()), _text(err_raw.getvalue())
