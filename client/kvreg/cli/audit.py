"""``kvreg audit verify|export|show``: hold a registry to its append-only audit log.

The commands parse their arguments and render the reports of the use cases in
``kvreg.app.audit`` (over the pinned key and checkpoint of each remote and the
whole logs and export files):

- ``kvreg audit verify REMOTE`` downloads every entry up to a fresh signed
  checkpoint (itself consistent with the one this store saw before) and checks
  them all: contiguous sequence numbers, each entry's bytes against its leaf, the
  root over all leaves against the signed root;
- ``kvreg audit verify --file FILE [--key KEY] [--remote NAME]`` checks an export
  with no network: signature (with the file's key, and with ``--key`` or the key
  pinned for ``--remote``), every inclusion proof, the root, contiguity;
- ``kvreg audit verify REMOTE --file FILE`` does both and checks that the
  registry's log still begins with the exported one;
- ``kvreg audit export REMOTE --out FILE`` writes a verified export (JSON Lines
  with an inclusion proof per entry) atomically;
- ``kvreg audit show REMOTE`` verifies and prints the latest checkpoint and the pin.

Any inconsistency exits 3 and stores nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app.audit import AuditVerifyRequest, export_audit, show_audit, verify_audit
from kvreg.cli import common
from kvreg.console import JsonOpt


def _types_table(console: Console, types: dict[str, int]) -> None:
    if not types:
        return
    table = Table()
    table.add_column("entry type")
    table.add_column("count", justify="right")
    for name, count in sorted(types.items()):
        table.add_row(escape(name), str(count))
    console.print(table)


def verify(
    ctx: typer.Context,
    remote: Annotated[
        str | None,
        typer.Argument(metavar="REMOTE", help="A remote whose whole log to download and verify."),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", metavar="FILE", help="An export (kvreg audit export) to verify offline."),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key", metavar="KEY", help="With --file: the log key (NAME+ID+KEY) it must be signed by."
        ),
    ] = None,
    pinned_remote: Annotated[
        str | None,
        typer.Option(
            "--remote",
            metavar="NAME",
            help="With --file: check it against the key and checkpoint pinned for this remote (offline).",
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Verify a registry's whole audit log, or an export of it offline (exit 3 on any mismatch).

    Examples:

      kvreg audit verify origin

      kvreg audit verify --file audit-2025-06.jsonl --remote origin

      kvreg audit verify origin --file audit-2025-06.jsonl
    """
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    report = verify_audit(home, AuditVerifyRequest(remote, file, key, pinned_remote), out)
    data = report.to_dict()
    export = report.export

    def render(console: Console) -> None:
        if export is not None:
            e = export
            console.print(
                f"[green]export {escape(str(e.path))} verified offline[/green]: {len(e.leaves)} entries, "
                f"every inclusion proof and the root of the checkpoint signed by "
                f"{escape(e.verifier.to_text())} (checked with: {escape(', '.join(e.keys_checked))})"
            )
            for note in e.notes:
                console.print(escape(note))
            if remote is None:
                _types_table(console, e.types)
        if remote is not None:
            before = data["previous_size"]
            history = (
                "first contact: log key pinned"
                if data["first_contact"]
                else f"consistent with the checkpoint of {before} entries seen before"
                if before is not None
                else "key pinned before"
            )
            console.print(
                f"[green]audit log of {escape(remote)} verified[/green]: {data['entries_checked']} entries, "
                f"root {data['root']} signed by {escape(data['verifier_key'])}; {history} "
                f"({data['seconds']:.2f} s)"
            )
            if "extends_file" in data:
                console.print(escape(data["extends_file"]))
            _types_table(console, data["types"])

    out.result(data, render)


def export(
    ctx: typer.Context,
    remote: Annotated[str, typer.Argument(metavar="REMOTE", help="The remote whose audit log to export.")],
    out_file: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="Where to write the JSON Lines export.")
    ],
    json_output: JsonOpt = False,
) -> None:
    """Export a registry's verified audit log with an inclusion proof per entry (JSON Lines).

    The first line holds the signed checkpoint and the log key; each further line
    an entry and its proof. kvreg audit verify --file FILE checks it offline.

    Example:

      kvreg audit export origin --out audit-2025-06.jsonl
    """
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    data = export_audit(home, remote, out_file, out).to_dict()

    def render(console: Console) -> None:
        console.print(
            f"exported {data['entries_checked']} verified entries of {escape(remote)} to "
            f"[bold]{escape(str(out_file))}[/bold] ({data['bytes']} bytes), checkpoint root {data['root']}"
        )
        _types_table(console, data["types"])

    out.result(data, render)


def show(
    ctx: typer.Context,
    remote: Annotated[str, typer.Argument(metavar="REMOTE", help="A remote's name.")],
    json_output: JsonOpt = False,
) -> None:
    """Verify and show a registry's latest checkpoint, its log key and what this store pinned.

    Example:

      kvreg audit show origin
    """
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    data = show_audit(home, remote).to_dict()

    def render(console: Console) -> None:
        if not data["audit_log"]:
            console.print(f"{escape(remote)} publishes no audit log; nothing is pinned")
            return
        console.print(f"remote      {escape(remote)} ({escape(data['url'])})")
        console.print(f"log key     {escape(data['verifier_key'])}")
        pinned = (
            "now (first contact)" if data["first_contact"] else f"{data['pinned_at']} ({data['pinned_by']})"
        )
        console.print(f"pinned      {escape(pinned)}")
        console.print(f"size        {data['size']} entries (before: {data['previous_size']})")
        console.print(f"root        {data['root']}")
        console.print(f"state       {escape(data['state_file'])}")

    out.result(data, render)


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Check a registry's append-only audit log (kvreg audit verify REMOTE).",
        no_args_is_help=True,
    )
    group.command("verify")(verify)
    group.command("export")(export)
    group.command("show")(show)
    app.add_typer(group, name="audit")
