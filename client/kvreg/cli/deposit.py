"""``kvreg deposit``: compute a text's KV state under a pinned config, sign it, store it.

Arguments are checked before anything slow happens (ref name, files, evidence
JSON); then the use case ``kvreg.app.deposit`` loads the signing key and the
engine and does the work: prefill on the block grid, one chunk per block (chunks
already in the store are not written again), manifest, signature, objects,
envelope, ref. This module parses and renders.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app import keyring
from kvreg.app.deposit import DepositReport, DepositRequest, deposit
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
from kvreg.cli.inspect import prompt_line
from kvreg.console import JsonOpt
from kvreg.core.errors import UsageError
from kvreg.core.names import RefName

_VERIFY_PANEL = "Verification and annotations"


class VerdictChoice(enum.StrEnum):
    verified = "pass"
    fail = "fail"
    unknown = "unknown"


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def deposit_cmd(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(metavar="MODEL", help=common.MODEL_HELP)],
    ref: Annotated[str, typer.Option("--ref", metavar="NS/NAME", help="The ref to point at the artifact.")],
    text_file: Annotated[
        Path | None,
        typer.Option(
            "--text-file",
            metavar="FILE",
            help="The text to deposit (UTF-8), e.g. the answer after the prompt. "
            "Optional with --messages-file or --chat (the artifact is then the conversation alone).",
        ),
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option(
            "--prompt-file",
            metavar="FILE",
            help="A prompt (the question) that precedes the text; its tokens are the artifact's prefix.",
        ),
    ] = None,
    messages_file: Annotated[
        Path | None,
        typer.Option(
            "--messages-file",
            metavar="FILE",
            help="Chat messages in place of --prompt-file: a JSON list of {role, content}, "
            f"{common.CHAT_RULE}; their tokens are the artifact's prefix. A conversation ending "
            "with an assistant turn (e.g. few-shot examples) may be deposited alone, without --text-file.",
        ),
    ] = None,
    chat: common.ChatOpt = False,
    verifier: Annotated[
        str | None,
        typer.Option(
            "--verifier", metavar="NAME", help="Who or what verified the text.", rich_help_panel=_VERIFY_PANEL
        ),
    ] = None,
    verdict: Annotated[
        VerdictChoice | None,
        typer.Option(
            "--verdict", help="The verifier's verdict (default unknown).", rich_help_panel=_VERIFY_PANEL
        ),
    ] = None,
    evidence: Annotated[
        str | None,
        typer.Option(
            "--evidence",
            metavar="JSON",
            help='A JSON object (or @FILE), e.g. \'{"answer": "738"}\'.',
            rich_help_panel=_VERIFY_PANEL,
        ),
    ] = None,
    title: Annotated[
        str | None, typer.Option("--title", help="A title for people.", rich_help_panel=_VERIFY_PANEL)
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="A free tag (repeatable).", rich_help_panel=_VERIFY_PANEL),
    ] = None,
    key: Annotated[str, typer.Option("--key", metavar="NAME", help="The signing key's name.")] = (
        keyring.DEFAULT_KEY_NAME
    ),
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    block_size: BlockSizeOpt = None,
    pin: Annotated[
        bool, typer.Option("--pin", help="Pin NS/NAME: eviction never removes what it reaches.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Deposit the KV state of a text: compute, sign and store it under NS/NAME.

    With store.max-bytes set, the store is then brought back under its budget
    (never evicting this artifact or a pinned ref's objects).

    Examples:

      kvreg deposit ./model --ref team/q7 --prompt-file q.txt --text-file answer.txt --chat

      kvreg deposit ./model --ref team/fewshot --messages-file shots.json
    """
    out = output.get(ctx, json_output)
    ref_name = RefName.parse(ref)
    prompt = common.read_prompt(prompt_file, messages_file, chat)
    if text_file is None:
        if prompt is None or isinstance(prompt, str):
            raise UsageError(
                "give --text-file FILE (the text to deposit)",
                hint="or --messages-file FILE (or --prompt-file FILE --chat) to deposit a conversation alone",
            )
        text = ""
    else:
        text = common.read_text_file(text_file, what="text file")
        if not text:
            raise UsageError(f"text file {text_file} is empty")
    verification: dict[str, Any] | None = None
    if verifier is not None:
        verification = {
            "verifier": verifier,
            "verdict": str(verdict) if verdict is not None else "unknown",
            "evidence": common.parse_json_object(evidence, option="--evidence") if evidence else {},
        }
    elif verdict is not None or evidence is not None:
        raise UsageError("--verdict and --evidence need --verifier NAME (who or what verified the text)")
    annotations: dict[str, Any] = {}
    if title is not None:
        annotations["title"] = title
    if tag:
        annotations["tags"] = list(tag)

    home = common.home(ctx)
    request = DepositRequest(
        model=model,
        ref=ref_name,
        text=text,
        prompt=prompt,
        verification=verification,
        annotations=annotations,
        key=key,
        engine=bundle(dtype, threads, attn, profile, device, block_size),
        pin=pin,
    )
    report = deposit(home, request, out)
    out.result(report.to_dict(), lambda console: _render(console, report))


def _render(console: Console, report: DepositReport) -> None:
    result = report.result
    m = result.manifest
    console.print(f"[green]Deposited[/green] {escape(str(result.ref))} -> {m.digest}")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("model", f"{escape(m.model.name)} ({m.model.architecture}, {m.model.dtype})")
    table.add_row("config", f"{m.config.fingerprint.short()} (profile {m.config.profile})")
    table.add_row("tokens", f"{m.token_count} in blocks of {m.block_size}")
    if m.prompt is not None:
        table.add_row("prompt", prompt_line(m))
    table.add_row(
        "chunks", f"{len(m.chunks)} ({result.new_chunks} new, {len(m.chunks) - result.new_chunks} shared)"
    )
    table.add_row(
        "bytes",
        f"{_human_size(result.write.bytes_new)} new of {_human_size(result.write.bytes_written)} written",
    )
    table.add_row("merkle root", str(m.merkle_root))
    table.add_row("prefill", f"{result.prefill_seconds:.3f} s (model load {report.load_seconds:.2f} s)")
    if report.verification is not None:
        verification = report.verification
        table.add_row("verification", f"{escape(verification['verifier'])}: {verification['verdict']}")
    table.add_row("signed by", report.signer_keyid)
    if report.pinned:
        table.add_row("pinned", "yes (never evicted)")
    ev = result.write.eviction
    if ev is not None and ev["evicted"]:
        table.add_row(
            "evicted",
            f"{len(ev['evicted'])} other object(s), {_human_size(ev['bytes_freed'])}, "
            "to stay under store.max-bytes",
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("deposit")(deposit_cmd)
