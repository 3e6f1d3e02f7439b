"""``kvreg-admin namespace``: create, list and change namespaces. Roles and keys live in their own groups."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg_registry.admin.common import ACTOR, JsonOpt, read_session, write_session
from kvreg_registry.services import accounts

app = typer.Typer(help="Create, list and change namespaces.", no_args_is_help=True)


@app.command("create")
def namespace_create(
    ctx: typer.Context,
    name: str,
    public: Annotated[bool, typer.Option("--public", help="Anyone may read it without a token.")] = False,
    description: Annotated[str, typer.Option("--description", help="One line about it.")] = "",
    json_output: JsonOpt = False,
) -> None:
    """Create namespace NAME (private unless --public)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        ns = accounts.create_namespace(s, ACTOR, name, public=public, description=description)
        data = {"namespace": ns.name, "public": ns.public}
    out.result(
        data,
        lambda c: c.print(
            f"[green]created[/green] namespace {escape(name)} ({'public' if public else 'private'})"
        ),
    )


@app.command("list")
def namespace_list(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List every namespace."""
    out = output.get(ctx, json_output)
    with read_session(ctx) as s:
        rows: list[dict[str, Any]] = [
            {"namespace": ns.name, "public": ns.public, "description": ns.description}
            for ns in accounts.list_namespaces(s, ACTOR)
        ]

    def render(c: Any) -> None:
        table = Table("namespace", "visibility", "description")
        for r in rows:
            table.add_row(
                escape(r["namespace"]), "public" if r["public"] else "private", escape(r["description"])
            )
        c.print(table)

    out.result({"namespaces": rows}, render)


@app.command("visibility")
def namespace_visibility(
    ctx: typer.Context,
    name: str,
    visibility: Annotated[str, typer.Argument(metavar="public|private")],
    json_output: JsonOpt = False,
) -> None:
    """Make namespace NAME public (readable without a token) or private."""
    out = output.get(ctx, json_output)
    if visibility not in {"public", "private"}:
        raise typer.BadParameter("must be 'public' or 'private'")
    with write_session(ctx) as s:
        accounts.set_namespace_public(s, ACTOR, name, visibility == "public")
    out.result(
        {"namespace": name, "public": visibility == "public"},
        lambda c: c.print(f"{escape(name)} is now {visibility}"),
    )
