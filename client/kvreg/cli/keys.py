"""``kvreg keys generate | list | export``: the Ed25519 keys that sign deposits.

Keys live in ``$KVREG_HOME/keys/<name>.key`` (PEM PKCS#8, mode 0600) with the
public half next to it in ``<name>.pub`` (``ed25519:<base64>``). ``generate`` also
trusts the new key for every namespace (``"*"``) in this store's trust policy,
unless ``--no-trust``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app import keyring
from kvreg.app.keys import export_key, generate_key, list_keys
from kvreg.cli import common
from kvreg.console import JsonOpt

NameOpt = Annotated[str, typer.Option("--name", "-n", help="Key name (a file name under keys/).")]


def generate_cmd(
    ctx: typer.Context,
    name: NameOpt = keyring.DEFAULT_KEY_NAME,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing key of that name.")] = False,
    no_trust: Annotated[
        bool, typer.Option("--no-trust", help="Do not add the public key to this store's trust policy.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Generate a signing key (and trust it here for every namespace, unless --no-trust)."""
    out = output.get(ctx, json_output)
    report = generate_key(common.home(ctx), name, force=force, trust=not no_trust)

    def render(console: Console) -> None:
        console.print(f"[green]Generated key[/green] {escape(name)}: {escape(str(report.path))} (mode 0600)")
        console.print(f"  keyid       {report.keyid}")
        console.print(f"  public key  {report.public_key}")
        if report.trusted:
            console.print(
                f"  [green]trusted[/green] for every namespace ('*') in {escape(str(report.trust_path))}"
            )
        else:
            console.print("  [yellow]not trusted[/yellow] here (--no-trust); others add it with:")
            console.print(f"    kvreg trust add NAMESPACE {report.public_key}")

    out.result(report.to_dict(), render)


def list_cmd(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the signing keys in this store."""
    out = output.get(ctx, json_output)
    listing = list_keys(common.home(ctx))

    def render(console: Console) -> None:
        if not listing.keys:
            console.print("no keys; create one with: kvreg keys generate")
            return
        table = Table(title=f"keys in {listing.keys_dir}")
        for col in ("name", "keyid", "public key", "private", "trusted for"):
            table.add_column(col)
        for k in listing.keys:
            table.add_row(
                escape(k.name),
                k.keyid[:19] + "…",
                k.public_key,
                "yes" if k.private else "no",
                ", ".join(k.trusted_for) or "-",
            )
        console.print(table)

    out.result(listing.to_dict(), render)


def export_cmd(
    ctx: typer.Context, name: NameOpt = keyring.DEFAULT_KEY_NAME, json_output: JsonOpt = False
) -> None:
    """Print a key's public half (ed25519:...), for `kvreg trust add` elsewhere."""
    out = output.get(ctx, json_output)
    report = export_key(common.home(ctx), name)
    out.result(report.to_dict(), lambda console: console.print(report.public_key))


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Signing keys: generate, list, export.", no_args_is_help=True)
    group.command("generate")(generate_cmd)
    group.command("list")(list_cmd)
    group.command("export")(export_cmd)
    app.add_typer(group, name="keys")
