"""``kvreg trust add | list | remove``: which public keys may sign for which namespace.

The policy is ``$KVREG_HOME/trust.json`` (``kvreg.core.trust``). A namespace is a
namespace name or ``*`` (every namespace). Grafts, ``show`` and ``verify`` refuse
manifests that no trusted key signed (exit 3).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app.trust import list_trust, trust_key, untrust
from kvreg.cli import common
from kvreg.console import JsonOpt

NamespaceArg = Annotated[str, typer.Argument(metavar="NAMESPACE", help="A namespace, or '*' for all.")]


def add_cmd(
    ctx: typer.Context,
    namespace: NamespaceArg,
    pubkey: Annotated[
        str,
        typer.Argument(metavar="PUBKEY", help="'ed25519:<base64>', or a .pub or PEM public key file."),
    ],
    json_output: JsonOpt = False,
) -> None:
    """Trust PUBKEY to sign manifests for NAMESPACE."""
    out = output.get(ctx, json_output)
    report = trust_key(common.home(ctx), namespace, pubkey)
    out.result(
        report.to_dict(),
        lambda c: c.print(f"[green]trusted[/green] {report.keyid} for {escape(namespace)!r}"),
    )


def list_cmd(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the trusted keys per namespace."""
    out = output.get(ctx, json_output)
    listing = list_trust(common.home(ctx))

    def render(console: Console) -> None:
        if not listing.entries:
            console.print("no trusted keys; `kvreg keys generate` creates and trusts one")
            return
        table = Table(title=f"trust policy {listing.trust_path}")
        for col in ("namespace", "keyid", "public key", "local key"):
            table.add_column(col)
        for e in listing.entries:
            table.add_row(escape(e.namespace), e.keyid, e.public_key, escape(e.local_key or "-"))
        console.print(table)

    out.result(listing.to_dict(), render)


def remove_cmd(
    ctx: typer.Context,
    namespace: NamespaceArg,
    keyid: Annotated[
        str, typer.Argument(metavar="KEYID", help="The key id (sha256:...) or the 'ed25519:...' key.")
    ],
    json_output: JsonOpt = False,
) -> None:
    """Stop trusting a key for NAMESPACE."""
    out = output.get(ctx, json_output)
    report = untrust(common.home(ctx), namespace, keyid)
    out.result(
        report.to_dict(),
        lambda c: c.print(f"no longer trusted for {escape(namespace)!r}: {report.keyid}"),
    )


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Trust policy: which keys may sign for which namespace.", no_args_is_help=True)
    group.command("add")(add_cmd)
    group.command("list")(list_cmd)
    group.command("remove")(remove_cmd)
    app.add_typer(group, name="trust")
