"""``kvreg ask``: answer a prompt, grafting the best stored state when one fits.

It loads MODEL under the engine options given (the artifacts it can use are
those computed under the same config, block size included), tokenizes the prompt
as ``graft --prompt-file`` does (``--chat``/``--messages-file``: rendered with the
model's chat template, as ``deposit`` renders them) and calls :func:`kvreg.app.ask.ask`: route
over the local store (and, with ``--remote``, over the registry's route endpoint,
pulling lazily and fetching only the chunks the graft reads), graft, decode.

The completion is printed on stdout with a summary (mode used, artifact,
grafted, prefilled and decoded tokens, time); ``--json`` prints everything as
one object. Falling back to plain generation is an answer, not a failure: the
exit status is 0 and the summary says why nothing was grafted.
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
from kvreg.app.ask import AskRequest, answer
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


class AskMode(enum.StrEnum):
    auto = "auto"
    knowledge = "knowledge"
    prefix = "prefix"
    off = "off"


def ask_cmd(
    ctx: typer.Context,
    model: Annotated[Path, typer.Option("--model", metavar="MODEL", help=common.MODEL_HELP)],
    prompt_file: Annotated[
        Path | None, typer.Option("--prompt-file", metavar="FILE", help="The prompt (UTF-8).")
    ] = None,
    messages_file: common.MessagesFileOpt = None,
    chat: common.ChatOpt = False,
    remote: common.RouteRemoteOpt = None,
    namespace: common.RouteNamespaceOpt = None,
    mode: Annotated[
        AskMode,
        typer.Option(
            "--mode",
            help="auto: knowledge, else prefix, else none; knowledge: a verified, trusted artifact that "
            "begins with the prompt, grafted whole; prefix: the longest shared block-aligned prefix "
            "(output as with no cache); off: no cache.",
        ),
    ] = AskMode.auto,
    max_new_tokens: Annotated[
        int,
        typer.Option("--max-new-tokens", min=1, max=1 << 20, help="Decode at most N tokens (stops at EOS)."),
    ] = 128,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    block_size: BlockSizeOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Answer a prompt with the best stored KV state that fits it (or none, and why).

    Knowledge: a verified artifact whose tokens begin with the prompt, grafted
    whole. Prefix: the longest shared block-aligned prefix, the rest prefilled
    (output identical to no cache). With --remote the registry is asked too
    (block keys only).

    Examples:

      kvreg ask --model ./model --prompt-file q.txt

      kvreg ask --model ./model --prompt-file q.txt --remote origin --mode knowledge --json

      kvreg ask --model ./instruct-model --prompt-file q.txt --chat
    """
    out = output.get(ctx, json_output)
    if namespace and remote is None:
        raise UsageError("--namespace needs --remote")
    prompt = common.read_prompt(prompt_file, messages_file, chat)
    if prompt is None:
        raise UsageError(
            "give the prompt: --prompt-file FILE (with --chat for a chat model) or --messages-file FILE"
        )
    home = common.home(ctx)
    request = AskRequest(
        model=model,
        prompt_text=prompt,
        mode=str(mode),
        remote=remote,
        namespaces=tuple(namespace or ()),
        max_new_tokens=max_new_tokens,
        engine=bundle(dtype, threads, attn, profile, device, block_size),
    )
    report = answer(home, request, out)
    data = report.to_dict()

    def render(console: Console) -> None:
        console.print(escape(report.completion), soft_wrap=True)
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        art = data["artifact"]
        if art is None:
            table.add_row("mode", f"{mode} → [yellow]no graft[/yellow]: " + escape(str(data["reason"])))
        else:
            table.add_row("mode", f"{mode} → {data['mode']}")
            table.add_row("artifact", f"{escape(art['ref'] or '-')} {art['manifest_digest']}")
            if art["verdict"] is not None:
                table.add_row("verified", f"{escape(str(art['verdict']))} ({escape(str(art['verifier']))})")
        table.add_row(
            "tokens",
            f"{data['grafted_tokens']} grafted, {data['prefilled_tokens']} prefilled, "
            f"{data['decoded_tokens']} decoded",
        )
        rem = data["remote"]
        if rem is not None:
            table.add_row(
                "registry",
                f"{rem['candidates']} candidates, {len(rem['pulled'])} pulled lazily, "
                f"{rem['fetched_objects']} objects fetched ({rem['fetched_bytes']} bytes)",
            )
        table.add_row("time", f"{data['timings']['total_seconds'] * 1000:.1f} ms")
        console.print(table)

    out.result(data, render)


def register(app: typer.Typer) -> None:
    app.command("ask")(ask_cmd)
