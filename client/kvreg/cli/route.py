"""``kvreg route``: which stored state would be grafted for a prompt, and why.

It loads MODEL under the engine options given (the same options as ``deposit``:
the artifacts it can find are those computed under the same config, block size
included), tokenizes the prompt as ``graft --prompt-file`` does, and asks the
router (``kvreg.app.router``) for a plan in ``--mode prefix`` (the longest
block-aligned shared prefix; the rest prefilled) or ``--mode knowledge`` (a
verified, trusted artifact that begins with the prompt, grafted whole).
``--artifact REF`` forces one artifact: it is checked like any other (signature,
fingerprints, every token) and refused if it does not fit.

The plan is printed, with ``"fallback": true`` and the reason when nothing would
be grafted (the request would run with no cache): that is an answer, not a
failure, so the exit status is 0. ``--reindex`` rebuilds the route index from
the store first (and is all the command does without ``--model``). Nothing is
grafted or decoded here.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app.router import RouteRequest, route_prompt
from kvreg.cli import common
from kvreg.cli.engine_options import (
    AttnOpt,
    BlockSizeOpt,
    DeviceOpt,
    DtypeOpt,
    ProfileOpt,
    ThreadsOpt,
    bundle,
)
from kvreg.console import JsonOpt
from kvreg.core.errors import UsageError


class RouteMode(enum.StrEnum):
    prefix = "prefix"
    knowledge = "knowledge"


def route_cmd(
    ctx: typer.Context,
    model: Annotated[Path | None, typer.Option("--model", metavar="MODEL", help=common.MODEL_HELP)] = None,
    prompt_file: Annotated[
        Path | None, typer.Option("--prompt-file", metavar="FILE", help="The prompt (UTF-8).")
    ] = None,
    messages_file: common.MessagesFileOpt = None,
    chat: common.ChatOpt = False,
    mode: Annotated[
        RouteMode,
        typer.Option(
            "--mode",
            help="prefix: longest shared block-aligned prefix (output as with no cache); "
            "knowledge: a verified, trusted artifact that begins with the prompt, grafted whole.",
        ),
    ] = RouteMode.prefix,
    artifact: Annotated[
        str | None,
        typer.Option(
            "--artifact", metavar="REF", help="Route to this artifact (NS/NAME or sha256:…), checked."
        ),
    ] = None,
    reindex: Annotated[
        bool, typer.Option("--reindex", help="Rebuild the route index from the store first.")
    ] = False,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    block_size: BlockSizeOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Show which stored KV state the router would graft for a prompt (or none, and why)."""
    out = output.get(ctx, json_output)
    if model is None and not reindex:
        raise UsageError("give --model MODEL --prompt-file FILE (or --reindex)")
    prompt_text = common.read_prompt(prompt_file, messages_file, chat)
    if (model is None) != (prompt_text is None):
        raise UsageError("--model and --prompt-file (or --messages-file) go together")
    home = common.home(ctx)
    request = RouteRequest(
        model=model,
        prompt_text=prompt_text,
        mode=str(mode),
        artifact=artifact,
        reindex=reindex,
        engine=bundle(dtype, threads, attn, profile, device, block_size),
    )
    report = route_prompt(home, request, out)
    data = report.to_dict()
    if report.plan is None:
        out.result(data, lambda console: _render_index(console, data["reindexed"]))
        return

    def render(console: Console) -> None:
        if "reindexed" in data:
            _render_index(console, data["reindexed"])
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("mode", str(mode))
        art = data["artifact"]
        if art is None:
            table.add_row("artifact", "[yellow]none[/yellow]: " + escape(str(data["reason"])))
            table.add_row("fallback", f"plain generation, {data['prompt_tokens']} tokens prefilled")
        else:
            table.add_row("artifact", f"{escape(art['ref'] or '-')} {art['manifest_digest']}")
            table.add_row("verdict", escape(str(art["verdict"])))
            table.add_row(
                "graft",
                f"{data['blocks']} block{'s' if data['blocks'] != 1 else ''}, {data['graft_tokens']} tokens"
                + (" (the whole artifact)" if data["whole_artifact"] else ""),
            )
            table.add_row("prefill", f"{data['prefill_tokens']} of {data['prompt_tokens']} prompt tokens")
        for s in data["skipped"]:
            table.add_row("passed over", f"{escape(s['ref'] or s['manifest_digest'])}: {escape(s['reason'])}")
        console.print(table)

    out.result(data, render)


def _render_index(console: Console, report: dict[str, int]) -> None:
    console.print(
        f"route index rebuilt: {report['manifests']} artifacts, {report['blocks']} blocks"
        + (f", {report['skipped']} unreadable manifests skipped" if report["skipped"] else "")
    )


def register(app: typer.Typer) -> None:
    app.command("route")(route_cmd)
