"""``kvreg-admin user``: create users, list them with their roles and state, disable and enable them
(tokens, roles: own groups)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from sqlalchemy import select

from kvreg import console as output
from kvreg.core.timestamps import rfc3339
from kvreg_registry.admin.common import ACTOR, JsonOpt, read_session, write_session
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import User
from kvreg_registry.services import accounts

app = typer.Typer(help="Create, list, disable and enable users.", no_args_is_help=True)


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
    """List users, their roles, and since when the disabled ones are disabled."""
    out = output.get(ctx, json_output)
    with read_session(ctx) as s:
        rows: list[dict[str, Any]] = []
        for u in s.scalars(select(User).order_by(User.name)).all():
            roles = accounts.roles_of(s, Principal(user_id=u.id, name=u.name))
            disabled_at = None if u.disabled_at is None else rfc3339(u.disabled_at)
            rows.append({"user": u.name, "admin": u.is_admin, "roles": roles, "disabled_at": disabled_at})

    def render(c: Any) -> None:
        table = Table("user", "admin", "disabled", "roles")
        for r in rows:
            table.add_row(
                escape(r["user"]),
                "yes" if r["admin"] else "",
                f"[red]since {r['disabled_at']}[/red]" if r["disabled_at"] else "",
                escape(", ".join(f"{k}:{v}" for k, v in r["roles"].items())),
            )
        c.print(table)

    out.result({"users": rows}, render)


def _state_data(state: accounts.UserState) -> dict[str, Any]:
    return {
        "user": state.user,
        "disabled": state.disabled,
        "disabled_at": None if state.disabled_at is None else rfc3339(state.disabled_at),
        "changed": state.changed,
        "active_tokens": state.active_tokens,
        "web_sessions_ended": state.web_sessions_ended,
    }


@app.command("disable")
def user_disable(ctx: typer.Context, name: str, json_output: JsonOpt = False) -> None:
    """Disable user NAME: every token and web session of theirs is refused at once (401
    USER_DISABLED). Revokes nothing: `token list --user NAME`, then `token revoke ID`."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        state = accounts.set_user_disabled(s, ACTOR, name, True)
    data = _state_data(state)

    def render(c: Any) -> None:
        if not state.changed:
            c.print(f"user {escape(name)} is disabled already (since {data['disabled_at']})")
            return
        c.print(
            f"[red]disabled[/red] user {escape(name)}: {state.active_tokens} active token(s) refused, "
            f"{state.web_sessions_ended} web session(s) ended"
        )
        if state.active_tokens:
            c.print(
                f"revoke them for good: kvreg-admin token list --user {escape(name)}, then token revoke ID"
            )

    out.result(data, render)


@app.command("enable")
def user_enable(ctx: typer.Context, name: str, json_output: JsonOpt = False) -> None:
    """Enable user NAME again: their tokens that are neither revoked nor expired work again."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        state = accounts.set_user_disabled(s, ACTOR, name, False)
    data = _state_data(state)

    def render(c: Any) -> None:
        if not state.changed:
            c.print(f"user {escape(name)} is not disabled: nothing to do")
            return
        c.print(
            f"[green]enabled[/green] user {escape(name)}: "
            f"{state.active_tokens} token(s) neither revoked nor expired work again"
        )

    out.result(data, render)
