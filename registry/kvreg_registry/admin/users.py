"""``kvreg-admin user``: create users and list them with their roles (tokens, roles: own groups)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from sqlalchemy import select

from kvreg import console as output
from kvreg_registry.admin.common import ACTOR, JsonOpt, read_session, write_session
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import User
from kvreg_registry.services import accounts

app = typer.Typer(help="Create and list users.", no_args_is_help=True)


@app.command("create")
def user_create(
    ctx: typer.Context,
    name: str,
    admin: Annotated[
        bool, typer.Option("--admin", help="A server admin: every role in every namespace.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Create user NAME."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        accounts.create_user(s, ACTOR, name, admin=admin)
    out.result(
        {"user": name, "admin": admin}, lambda c: c.print(f"[green]created[/green] user {escape(name)}")
    )


@app.command("list")
def user_list(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List users and their roles."""
    out = output.get(ctx, json_output)
    with read_session(ctx) as s:
        rows: list[dict[str, Any]] = []
        for u in s.scalars(select(User).order_by(User.name)).all():
            roles = accounts.roles_of(s, Principal(user_id=u.id, name=u.name))
            rows.append({"user": u.name, "admin": u.is_admin, "roles": roles})

    def render(c: Any) -> None:
        table = Table("user", "admin", "roles")
        for r in rows:
            table.add_row(
                escape(r["user"]),
                "yes" if r["admin"] else "",
                escape(", ".join(f"{k}:{v}" for k, v in r["roles"].items())),
            )
        c.print(table)

    out.result({"users": rows}, render)
