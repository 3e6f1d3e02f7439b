"""``kvreg graft``: put a stored state back into a model and continue decoding from it.

``graft`` opens the artifact (signature against the trust policy), reads its
tokens, loads the model under the artifact's recorded config (options override
it, which the engine then refuses by fingerprint), grafts, decodes, and with
``--check`` compares every decode step with a fresh computation (exit 3 unless
byte-exact).

With ``--receipt REMOTE`` (or ``receipts.always`` in ``config.json``) a signed
graft receipt goes to that registry afterwards (``kvreg.app.graft_receipt``): the
artifact, this host's fingerprints, the witness and check results, the time. The
graft's result is printed whatever happens to the receipt; a receipt that should
have been sent and was not makes the command fail (exit 1, or the error's own
status), except that ``receipts.always`` quietly skips artifacts the remote does
not have (their namespace or envelope is unknown there). A failed witness probe is
reported too (``witness: fail``) before the graft's own error.

The command parses its arguments and renders the report of the use case
``kvreg.app.graft`` (``kvreg.app.shifted`` for ``--shift-after-file``), which reads the
manifest before the engine loads (the recorded profile decides the environment
torch must start with).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from kvreg import console as output
from kvreg.app import keyring
from kvreg.app.graft import GraftReport, GraftRequest, graft
from kvreg.app.shifted import ShiftedGraftReport, ShiftedGraftRequest, shifted_graft
from kvreg.cli import common
from kvreg.cli.common import RefArg
from kvreg.cli.engine_options import (
    AttnOpt,
    DeviceOpt,
    DtypeOpt,
    ProfileOpt,
    ThreadsOpt,
    bundle,
)
from kvreg.console import JsonOpt
from kvreg.core.errors import UsageError


def _check_table(check: dict[str, Any]) -> Table:
    table = Table(title="check against a fresh computation (same schedule)")
    table.add_column("byte-exact")
    table.add_column("steps", justify="right")
    table.add_column("SHA-256-equal steps", justify="right")
    table.add_column("max KL", justify="right")
    table.add_column("argmax agreement", justify="right")
    ok = check["byte_exact"]
    table.add_row(
        "[green]yes[/green]" if ok else "[red]NO[/red]",
        str(check["steps"]),
        str(check["sha256_equal_steps"]),
        f"{check['max_kl']:.3g}",
        f"{100 * check['argmax_agreement']:.1f}%",
    )
    return table


def graft_cmd(
    ctx: typer.Context,
    ref: RefArg,
    model: Annotated[Path, typer.Option("--model", metavar="MODEL", help=common.MODEL_HELP)],
    prompt_file: Annotated[
        Path | None,
        typer.Option(
            "--prompt-file", metavar="FILE", help="The full prompt (UTF-8); must begin with the artifact."
        ),
    ] = None,
    messages_file: Annotated[
        Path | None,
        typer.Option(
            "--messages-file",
            metavar="FILE",
            help=f"The full prompt as chat messages (a JSON list of {{role, content}}), {common.CHAT_RULE}; "
            "must begin with the artifact (e.g. its conversation plus a new question).",
        ),
    ] = None,
    chat: common.ChatOpt = False,
    append_file: Annotated[
        Path | None,
        typer.Option("--append-file", metavar="FILE", help="Text to append after the artifact's own tokens."),
    ] = None,
    blocks: Annotated[
        int | None,
        typer.Option(
            "--blocks", min=1, metavar="K", help="Graft only the first K blocks (a block boundary)."
        ),
    ] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1, help="Tokens to decode.")] = 32,
    check: Annotated[
        bool, typer.Option("--check", help="Compare with a fresh computation; exit 3 unless byte-exact.")
    ] = False,
    no_probe: Annotated[
        bool, typer.Option("--no-probe", help="Skip the witness probe (recomputing the last grafted block).")
    ] = False,
    trust_store: Annotated[
        bool, typer.Option("--trust-store", help="Do not re-hash the chunks (trust the read-only store).")
    ] = False,
    shift_after_file: Annotated[
        Path | None,
        typer.Option(
            "--shift-after-file",
            metavar="FILE",
            help="APPROXIMATE: place the artifact after this text by re-rotating its keys, and report the "
            "residual against a fresh run. Never byte-exact.",
        ),
    ] = None,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    receipt: Annotated[
        str | None,
        typer.Option(
            "--receipt",
            metavar="REMOTE",
            help="Send a signed graft receipt to REMOTE afterwards (default: config.json receipts.always).",
        ),
    ] = None,
    no_receipt: Annotated[
        bool, typer.Option("--no-receipt", help="Send no receipt, whatever config.json says.")
    ] = False,
    receipt_key: Annotated[
        str, typer.Option("--receipt-key", metavar="NAME", help="The signing key for the receipt.")
    ] = keyring.DEFAULT_KEY_NAME,
    json_output: JsonOpt = False,
) -> None:
    """Graft a stored KV state into MODEL and continue decoding from it.

    Every chunk is re-hashed before it is used; --check recomputes from scratch
    under the same schedule and compares every decode step's logits by SHA-256.

    Examples:

      kvreg graft team/q7 --model ./model --check

      kvreg graft team/fewshot --model ./model --messages-file shots-and-question.json --check
    """
    out = output.get(ctx, json_output)
    if (prompt_file is not None or messages_file is not None) and append_file is not None:
        raise UsageError("give --prompt-file (or --messages-file) or --append-file, not both")
    prompt_given = prompt_file is not None or messages_file is not None or chat
    if shift_after_file is not None and (prompt_given or append_file or blocks or check):
        raise UsageError(
            "--shift-after-file cannot be combined with --prompt-file, --messages-file, --chat, "
            "--append-file, --blocks or --check"
        )
    if receipt is not None and no_receipt:
        raise UsageError("give --receipt or --no-receipt, not both")
    if receipt is not None and shift_after_file is not None:
        raise UsageError("a shifted graft is approximate: it sends no receipt (drop --receipt)")
    prompt = common.read_prompt(prompt_file, messages_file, chat)
    append_text = common.read_text_file(append_file, what="append file") if append_file else None
    home = common.home(ctx)
    engine = bundle(dtype, threads, attn, profile, device)
    if shift_after_file is not None:
        prefix_text = common.read_text_file(shift_after_file, what="shift prefix file")
        request = ShiftedGraftRequest(ref, model, prefix_text, max_new_tokens, engine)
        shifted = shifted_graft(home, request, out)
        out.result(shifted.to_dict(), lambda console: _render_shifted(console, shifted))
        return
    report = graft(
        home,
        GraftRequest(
            ref=ref,
            model=model,
            prompt_text=prompt,
            append_text=append_text,
            blocks=blocks,
            max_new_tokens=max_new_tokens,
            check=check,
            probe=not no_probe,
            rehash=not trust_store,
            engine=engine,
            receipt=receipt,
            send_receipt=not no_receipt,
            receipt_key=receipt_key,
        ),
        out,
    )
    out.result(report.to_dict(), lambda console: _render_graft(console, report), error=report.error)


def _render_graft(console: Console, report: GraftReport) -> None:
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("artifact", f"{escape(report.ref or '-')} {report.manifest_digest}")
    summary.add_row(
        "graft point",
        f"token {report.graft_tokens} of {report.artifact_tokens} "
        f"({report.chunks_read} chunk{'s' if report.chunks_read != 1 else ''}"
        f"{', the whole artifact' if report.whole_artifact else ''})",
    )
    summary.add_row(
        "tokens",
        f"{report.graft_tokens} grafted, {report.prefill_tokens} prefilled, {report.decoded_tokens} decoded",
    )
    summary.add_row(
        "chunks",
        f"{report.chunks_read} read, {report.bytes_read} bytes, "
        + ("re-hashed" if report.verified else "[yellow]not re-hashed (--trust-store)[/yellow]"),
    )
    if report.probe is not None:
        what = f"block {report.probe.get('block')} recomputed, KV equal"
        if "witness_equal" in report.probe:
            what += ", next-token logits equal to the witness"
        summary.add_row("probe", f"[green]passed[/green] ({what})")
    else:
        summary.add_row("probe", "skipped")
    summary.add_row(
        "timings", ", ".join(f"{k.removesuffix('_seconds')} {v:.3f} s" for k, v in report.timings.items())
    )
    console.print(summary)
    console.print(Panel(escape(report.output_text), title="decoded text", expand=False))
    if report.check is not None:
        console.print(_check_table(report.check))
    sent = report.receipt
    if sent is not None:
        if sent.get("sent"):
            console.print(
                f"receipt {sent['receipt_digest']} sent to {escape(sent['remote'])} "
                f"(log entry {sent.get('log_index')})"
            )
        elif sent.get("skipped"):
            console.print(f"no receipt sent to {escape(sent['remote'])}: {escape(sent['skipped'])}")
        else:
            console.print(f"[red]receipt NOT sent[/red] to {escape(sent['remote'])}")


def _render_shifted(console: Console, report: ShiftedGraftReport) -> None:
    """The labelled approximate mode: never reported as exact."""
    data = report.to_dict()
    console.print("[bold yellow]APPROXIMATE[/bold yellow] shifted graft — not byte-exact by construction")
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("offset", f"{data['offset']} tokens ({data['shifted_tokens']} re-rotated)")
    table.add_row("max |Δlogits|", f"{data['max_abs_logit_diff']:.3g}")
    table.add_row("max KL", f"{data['max_kl']:.3g}")
    table.add_row("argmax agreement", f"{100 * data['argmax_agreement']:.1f}% over {data['steps']} steps")
    console.print(table)
    console.print(Panel(escape(data["output_text"]), title="decoded text (approximate)", expand=False))


def register(app: typer.Typer) -> None:
    app.command("graft")(graft_cmd)
