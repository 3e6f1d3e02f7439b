"""``kvreg-admin key``: register, list and revoke the signing keys a namespace accepts envelopes from."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.fileio.keyfiles import read_public_key
from kvreg_registry.admin.common import ACTOR, JsonOpt, read_session, write_session
from kvreg_registry.services import accounts

app = typer.Typer(help="Register and revoke the signing keys a namespace accepts.", no_args_is_help=True)


@app.command("add")
def key_add(
    ctx: typer.Context,
    namespace: str,
    pubkey: Annotated[
        str,
        typer.Argument(metavar="PUBKEY", help="'ed25519:<base64>' (kvreg keys export) or a .pub/PEM file."),
    ],
    label: Annotated[
        str, typer.Option("--label", help="A human name for the key, shown where it signs ('CI signer').")
    ] = "",
    owner: Annotated[
        str | None,
        typer.Option("--owner", help="The user the key belongs to (default: kvreg-admin, who registers it)."),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Accept envelopes signed by PUBKEY in NAMESPACE."""
    out = output.get(ctx, json_output)
    public = read_public_key(pubkey)
    with write_session(ctx) as s:
        row = accounts.register_key(s, ACTOR, namespace, public.to_text(), label=label, owner=owner)
        doc: dict[str, Any] = {
            "namespace": namespace,
            "keyid": public.keyid,
            "public_key": public.to_text(),
            "label": row.label,
            "owner": row.owner,
            "log_index": row.log_seq,
        }
        named = f" ({escape(row.label)})" if row.label else ""
    out.result(
        doc,
        lambda c: c.print(f"[green]registered[/green] {public.keyid}{named} for {escape(namespace)}"),
    )


@app.command("list")
def key_list(ctx: typer.Context, namespace: str, json_output: JsonOpt = False) -> None:
    """List the signing keys of NAMESPACE (revoked ones too)."""
    out = output.get(ctx, json_output)
    with read_session(ctx) as s:
        ns = accounts.get_namespace(s, namespace)
        rows: list[dict[str, Any]] = [
            {
                "keyid": k.keyid,
                "public_key": k.public_key,
                "label": k.label,
                "owner": k.owner,
                "log_index": k.log_seq,
                "revoked": k.revoked_at is not None,
            }
            for k in accounts.list_keys(s, ns)
        ]

    def render(c: Any) -> None:
        table = Table("keyid", "label", "owner", "public key", "state")
        for r in rows:
            table.add_row(
                r["keyid"],
                escape(r["label"]) or "–",
                escape(r["owner"] or "–"),
                r["public_key"],
                "revoked" if r["revoked"] else "active",
            )
        c.print(table)

    out.result({"namespace": namespace, "keys": rows}, render)


@app.command("revoke")
def key_revoke(ctx: typer.Context, namespace: str, keyid: str, json_output: JsonOpt = False) -> None:
    """Stop accepting new envelopes signed by KEYID in NAMESPACE (stored ones stay)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        accounts.revoke_key(s, ACTOR, namespace, keyid)
    out.result(
        {"namespace": namespace, "keyid": keyid, "revoked": True}, lambda c: c.print(f"revoked {keyid}")
    )
