"""``kvreg trust add | list | remove``: which public keys may sign for which namespace.

The policy is ``$KVREG_HOME/trust.json`` (``kvreg.core.trust``). A namespace is a
namespace name or ``*`` (every namespace). Grafts, ``show`` and ``verify`` refuse
manifests that no trusted key signed (exit 3).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app import keyring
from kvreg.cli import common
from kvreg.console import JsonOpt
from kvreg.core.keys import PublicKey
from kvreg.fileio import keyfiles
from kvreg.fileio.keyfiles import load_trust_policy, save_trust_policy

NamespaceArg = Annotated[str, typer.Argument(metavar="NAMESPACE", help="A namespace, or '*' for all.")]


def add(
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
    home = common.home(ctx)
    public = keyfiles.read_public_key(pubkey)
    policy = load_trust_policy(home.trust_path)
    policy.allow(namespace, public)
    home.root.mkdir(parents=True, exist_ok=True)
    save_trust_policy(policy, home.trust_path)
    data = {"namespace": namespace, "keyid": public.keyid, "public_key": public.to_text()}
    out.result(
        data,
        lambda c: c.print(f"[green]trusted[/green] {public.keyid} for {escape(namespace)!r}"),
    )


def list_trust(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the trusted keys per namespace."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    policy = load_trust_policy(home.trust_path)
    local = {p.keyid: name for name, p in keyring.local_public_keys(home).items()}
    rows: list[dict[str, Any]] = [
        {
            "namespace": pattern,
            "keyid": key.keyid,
            "public_key": key.to_text(),
            "local_key": local.get(key.keyid),
        }
        for pattern, keys in policy.namespaces().items()
        for key in keys
    ]

    def render(console: Console) -> None:
        if not rows:
            console.print("no trusted keys; `kvreg keys generate` creates and trusts one")
            return
        table = Table(title=f"trust policy {home.trust_path}")
        for col in ("namespace", "keyid", "public key", "local key"):
            table.add_column(col)
        for r in rows:
            table.add_row(escape(r["namespace"]), r["keyid"], r["public_key"], escape(r["local_key"] or "-"))
        console.print(table)

    out.result({"trust": rows}, render)


def remove(
    ctx: typer.Context,
    namespace: NamespaceArg,
    keyid: Annotated[
        str, typer.Argument(metavar="KEYID", help="The key id (sha256:...) or the 'ed25519:...' key.")
    ],
    json_output: JsonOpt = False,
) -> None:
    """Stop trusting a key for NAMESPACE."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    if keyid.startswith("ed25519:"):
        keyid = PublicKey.from_text(keyid).keyid
    policy = load_trust_policy(home.trust_path)
    policy.remove(namespace, keyid)
    save_trust_policy(policy, home.trust_path)
    out.result(
        {"namespace": namespace, "keyid": keyid, "removed": True},
        lambda c: c.print(f"no longer trusted for {escape(namespace)!r}: {keyid}"),
    )


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Trust policy: which keys may sign for which namespace.", no_args_is_help=True)
    group.command("add")(add)
    group.command("list")(list_trust)
    group.command("remove")(remove)
    app.add_typer(group, name="trust")
