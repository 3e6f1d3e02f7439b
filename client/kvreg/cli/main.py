"""The ``kvreg`` command: the Typer application, its global options, and ``main()``.

Global options come before the command: ``--home PATH`` (else ``$KVREG_HOME``,
else ``~/.kvreg``), ``--json``, ``-v/--verbose`` (repeat for debug logs) and
``--version``. Every command also accepts ``--json`` after its own arguments.

Nothing here imports torch: the use cases (``kvreg.app``) import the engine when
they run, after the numerics profile's environment is in place, so ``kvreg --help``
and the store commands start fast. Printing and exit codes live in
``kvreg.console``; each command group lives in its own module.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

import kvreg
from kvreg import console as output
from kvreg.app.numerics import allow_reexec
from kvreg.cli import (
    ask,
    audit,
    config,
    demo,
    deposit,
    engine,
    flywheel,
    graft,
    inspect,
    keys,
    maintenance,
    model,
    paging,
    remote,
    route,
    serve,
    trust,
    verify,
)

HELP = (
    "kvreg: a content-addressed, git-like registry for LLM KV-cache states, "
    "grafted back byte-exactly.\n\n"
    "Exit codes: 0 success, 1 error, 2 usage, 3 integrity or signature failure."
)


def _version(value: bool) -> None:
    if value:
        output.Output(output.CliState()).write_text(f"kvreg {kvreg.__version__}\n")
        raise typer.Exit()


def _configure_logging(verbose: int, console_stderr: object) -> None:
    from rich.logging import RichHandler

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = RichHandler(console=console_stderr, show_time=verbose >= 2, show_path=False, markup=False)  # type: ignore[arg-type]
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, RichHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("kvreg").setLevel(level)


def _global_options(
    ctx: typer.Context,
    home: Annotated[
        str | None,
        typer.Option(
            "--home",
            metavar="PATH",
            help="The local store (default: $KVREG_HOME, else ~/.kvreg).",
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Machine-readable output on stdout (logs go to stderr).")
    ] = False,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="More logs on stderr; -vv for debug.")
    ] = 0,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    state = ctx.ensure_object(output.CliState)
    state.home = home
    state.json = state.json or json_output
    state.verbose = verbose
    _configure_logging(verbose, output.Output(state).err)


def build_app() -> typer.Typer:
    """The Typer application with every command group registered."""
    app = typer.Typer(
        name="kvreg",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_global_options)
    keys.register(app)
    trust.register(app)
    deposit.register(app)
    graft.register(app)
    verify.register(app)
    route.register(app)
    ask.register(app)
    flywheel.register(app)
    model.register(app)
    inspect.register(app)
    maintenance.register(app)
    paging.register(app)
    config.register(app)
    remote.register(app)
    audit.register(app)
    serve.register(app)
    engine.register(app)
    demo.register(app)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``kvreg`` script and of ``python -m kvreg``."""
    args = list(sys.argv[1:] if argv is None else argv)
    allow_reexec()  # this process is the kvreg command: it may re-execute itself for the numerics
    command = typer.main.get_command(build_app())
    root, ours = logging.getLogger(), logging.getLogger("kvreg")
    saved = (list(root.handlers), root.level, ours.level)
    try:
        code = output.run(command, args)
    finally:  # leave logging as it was (matters when main() is called in-process)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        ours.setLevel(saved[2])
    output.exit_with(code)


if __name__ == "__main__":  # pragma: no cover
    main()
