"""``kvreg verify``: check an artifact — signature, Merkle root, every object; with a model, recompute it.

It re-hashes every object of an artifact and checks the signature, the Merkle
root and the token count; with ``--model`` it checks that the model can graft
the artifact, and with ``--recompute`` it also recomputes every chunk and the
witness. Any mismatch exits 3. The command parses its arguments and renders the
report of the use case ``kvreg.app.verify``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app.verify import VerifyReport, VerifyRequest, verify
from kvreg.cli import common
from kvreg.cli.common import RefArg
from kvreg.cli.engine_options import AttnOpt, DeviceOpt, DtypeOpt, ProfileOpt, ThreadsOpt, bundle
from kvreg.console import JsonOpt


def verify_cmd(
    ctx: typer.Context,
    ref: RefArg,
    model: Annotated[
        Path | None,
        typer.Option("--model", metavar="MODEL", help="Also check that this model can graft the artifact."),
    ] = None,
    recompute: Annotated[
        bool, typer.Option("--recompute", help="Recompute every chunk and the witness with --model.")
    ] = False,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Verify an artifact: signature, Merkle root, every object's digest; --recompute with --model."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    request = VerifyRequest(ref, model, recompute, bundle(dtype, threads, attn, profile, device))
    report = verify(home, request, out)
    out.result(report.to_dict(), lambda console: _render_verify(console, report), error=report.error)


def _render_verify(console: Console, report: VerifyReport) -> None:
    objects = report.objects
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("artifact", f"{escape(report.ref or '-')} {report.manifest_digest}")
    table.add_row("signature", "[green]trusted signer[/green]")
    table.add_row("merkle root", f"[green]ok[/green] {report.merkle_root}")
    table.add_row(
        "objects",
        f"{objects.checked} re-hashed ({objects.bytes_hashed} bytes), "
        f"{len(objects.missing)} missing, {len(objects.corrupt)} damaged",
    )
    table.add_row(
        "tokens",
        f"{report.token_count} " + ("[green]ok[/green]" if objects.tokens_ok else "[red]bad[/red]"),
    )
    if report.compatible:
        table.add_row("model", "[green]fingerprints match[/green]")
    if report.recompute is not None:
        r = report.recompute
        state = "[green]byte-exact[/green]" if r["byte_exact"] else "[red]differs[/red]"
        table.add_row(
            "recompute",
            f"{state}: {r['chunks_equal']}/{r['chunks']} chunks equal, witness equal: {r['witness_equal']}",
        )
    console.print(table)
    console.print("[green]verified[/green]" if report.ok else "[red]verification failed[/red]")


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cmd)
