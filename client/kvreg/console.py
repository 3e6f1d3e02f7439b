"""Terminal output for the ``kvreg`` and ``kvreg-admin`` commands, and errors turned into exit codes.

It is the one place where either command prints; both CLIs use it, so it sits outside
``kvreg.cli`` (the registry never imports the client's CLI).

Streams (docs/design.md, "Contracts the parts rely on"):

- stdout: the result of a command, either rendered for people with rich, or, with
  ``--json``, exactly one JSON document (``cat`` writes raw object bytes instead);
- stderr: progress, status spinners, warnings, log records and error messages.

Exit codes: 0 success, 1 error, 2 usage, 3 integrity or signature failure. A
``KvregError`` carries its own ``exit_code``; click's parsing errors are usage
errors (2); anything unexpected is an error (1) with a one-line message, and a
traceback only with ``-v``. With ``--json`` a failure prints
``{"error": {"code": ..., "message": ...}}`` on stdout; a command that has a
result *and* a failure (``graft --check`` that is not byte-exact, ``fsck`` that
finds damage) prints its result with the ``error`` object inside it, once.

This module does not parse arguments and does not call the library.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from kvreg.core.errors import EXIT_ERROR, EXIT_USAGE, KvregError, from_missing_module, from_os_error

log = logging.getLogger(__name__)

EXIT_INTERRUPTED = 130
_MIN_WIDTH = 110

Renderer = Callable[[Console], None]

# The ``--json`` option every command takes (machine-readable output on stdout).
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


def _click_exception_classes() -> tuple[type[Exception], type[Exception]]:
    """click's ``ClickException`` and ``UsageError`` as Typer uses them.

    Recent Typer versions vendor click privately; ``typer.BadParameter`` is always
    a subclass of both, so they are found through its MRO rather than by importing
    a private module.
    """
    mro = typer.BadParameter.__mro__
    click_exc = next(c for c in mro if c.__name__ == "ClickException")
    usage = next(c for c in mro if c.__name__ == "UsageError")
    return click_exc, usage


@dataclass
class CliState:
    """Options of the whole invocation, shared with every command through ``ctx.obj``."""

    home: str | None = None
    json: bool = False
    verbose: int = 0

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> CliState:
        """A first guess from the raw arguments, for errors raised before parsing finishes."""
        args = list(argv)
        if "--" in args:
            args = args[: args.index("--")]
        verbose = sum(a.count("v") for a in args if a.startswith("-v") and set(a[1:]) == {"v"})
        verbose += args.count("--verbose")
        return cls(json="--json" in args, verbose=verbose)


class ResultFailure(Exception):
    """Raised by :meth:`Output.result` after printing a result that carries an error."""

    def __init__(self, error: KvregError) -> None:
        super().__init__(error.message)
        self.error = error


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty():
        width = max(_MIN_WIDTH, int(os.environ.get("COLUMNS", "0") or 0))
    return Console(file=stream, width=width, soft_wrap=False, highlight=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def json_text(data: Any) -> str:
    return json.dumps(_jsonable(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


class Output:
    """Printing for one command invocation."""

    def __init__(self, state: CliState) -> None:
        self.state = state
        self._out: Console | None = None
        self._err: Console | None = None

    @property
    def json(self) -> bool:
        return self.state.json

    @property
    def verbose(self) -> int:
        return self.state.verbose

    @property
    def out(self) -> Console:
        if self._out is None:
            self._out = _console(stderr=False)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            self._err = _console(stderr=True)
        return self._err

    # --- results (stdout) -----------------------------------------------------------

    def result(self, data: dict[str, Any], render: Renderer, *, error: KvregError | None = None) -> None:
        """Print a command's result: ``data`` as JSON, or ``render`` for people.

        With ``error`` the result is printed first (with the error inside the JSON
        document) and the command then fails with the error's exit code.
        """
        if self.json:
            doc = dict(data)
            if error is not None:
                doc["error"] = error.to_dict()
            self.write_text(json_text(doc))
        else:
            render(self.out)
        if error is not None:
            raise ResultFailure(error)

    def write_text(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def write_bytes(self, data: bytes) -> None:
        """Raw bytes to stdout (``kvreg cat``)."""
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    # --- progress and messages (stderr) -----------------------------------------------

    def note(self, message: str) -> None:
        """A short informational line on stderr (rich markup allowed)."""
        self.err.print(message)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/yellow] {escape(message)}")

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        """A spinner on stderr while a long step runs (a plain log line when stderr is not a terminal)."""
        started = time.perf_counter()
        if self.err.is_terminal:
            with self.err.status(escape(message), spinner="dots"):
                yield
        else:
            log.info("%s ...", message)
            yield
        log.info("%s: done in %.2f s", message, time.perf_counter() - started)

    # --- failures ---------------------------------------------------------------------

    def error(self, error: KvregError, *, already_printed: bool = False) -> int:
        """Report ``error``; return its exit code."""
        if self.json and not already_printed:
            self.write_text(json_text({"error": error.to_dict()}))
        text = f"[bold red]error:[/bold red] {escape(error.message)}"
        if error.hint:
            text += f"\n[cyan]hint:[/cyan] {escape(error.hint)}"
        self.err.print(text)
        if self.verbose and error.details:
            self.err.print(escape(json.dumps(_jsonable(error.details), indent=2, default=str)))
        if self.verbose >= 2 and error.__traceback__ is not None:
            self.err.print_exception()
        return error.exit_code

    def usage_error(self, exc: Any) -> int:
        message = exc.format_message()
        if not message:  # a group called without a command: click printed its help already
            return EXIT_USAGE
        if self.json:
            self.write_text(json_text({"error": {"code": "USAGE", "message": message}}))
        if exc.ctx is not None:
            self.err.print(escape(exc.ctx.get_usage()), soft_wrap=True)
            hint = f"Try '{exc.ctx.command_path} --help' for help."
            self.err.print(escape(hint))
        self.err.print(f"[bold red]error:[/bold red] {escape(message)}")
        return EXIT_USAGE

    def unexpected(self, exc: BaseException) -> int:
        message = f"unexpected {type(exc).__name__}: {exc}"
        if self.json:
            self.write_text(json_text({"error": {"code": "INTERNAL", "message": message}}))
        self.err.print(f"[bold red]error:[/bold red] {escape(message)}")
        if self.verbose:
            self.err.print_exception()
        else:
            self.err.print("run with -v for the traceback")
        return EXIT_ERROR


def get(ctx: typer.Context, json_flag: bool = False) -> Output:
    """The ``Output`` of the running command; a command's own ``--json`` also switches JSON on."""
    state = ctx.find_object(CliState)
    if state is None:  # invoked without main() (tests with CliRunner)
        state = CliState()
        ctx.obj = state
    if json_flag:
        state.json = True
    return Output(state)


def run(command: Any, argv: Sequence[str], *, prog_name: str = "kvreg") -> int:
    """Run the click command and turn every outcome into an exit code."""
    state = CliState.from_argv(argv)
    output = Output(state)
    click_exception, usage_error = _click_exception_classes()
    try:
        rv = command.main(args=list(argv), prog_name=prog_name, standalone_mode=False, obj=state)
    except ResultFailure as failure:
        return output.error(failure.error, already_printed=True)
    except KvregError as error:
        return output.error(error)
    except usage_error as exc:
        return output.usage_error(exc)
    except click_exception as exc:
        output.err.print(f"[bold red]error:[/bold red] {escape(exc.format_message())}")  # type: ignore[attr-defined]
        return int(getattr(exc, "exit_code", EXIT_ERROR))
    except typer.Abort:
        output.err.print("aborted")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        output.err.print("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (kvreg cat ... | head): stop quietly.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as exc:  # a full disk or a refused write is the machine's answer, not a bug
        refusal = from_os_error(exc)
        return output.unexpected(exc) if refusal is None else output.error(refusal)
    except ModuleNotFoundError as exc:  # a client or registry install without the engine extra
        missing = from_missing_module(exc)
        return output.unexpected(exc) if missing is None else output.error(missing)
    except Exception as exc:
        return output.unexpected(exc)
    if isinstance(rv, int) and not isinstance(rv, bool):
        return rv
    return 0


def exit_with(code: int) -> NoReturn:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    sys.exit(code)
