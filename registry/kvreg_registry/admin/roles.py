"""``kvreg-admin role``: give a user a role (read, write, admin) in a namespace, or take it away."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from kvreg import console as output
from kvreg_registry.admin.common import ACTOR, JsonOpt, write_session
from kvreg_registry.services import accounts

app = typer.Typer(help="Give and take roles (read, write, admin) in a namespace.", no_args_is_help=True)


@app.command("set")
def role_set(
    ctx: typer.Context,
    namespace: str,
    user: str,
    role: Annotated[str, typer.Argument(metavar="read|write|admin")],
    json_output: JsonOpt = False,
) -> None:
    """Give USER the ROLE in NAMESPACE."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        accounts.set_role(s, ACTOR, namespace, user, role)
    out.result(
        {"namespace": namespace, "user": user, "role": role},
        lambda c: c.print(f"{escape(user)} has {role} in {escape(namespace)}"),
    )


@app.command("remove")
def role_remove(ctx: typer.Context, namespace: str, user: str, json_output: JsonOpt = False) -> None:
    """Take USER's role in NAMESPACE away."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        accounts.remove_role(s, ACTOR, namespace, user)
    out.result(
        {"namespace": namespace, "user": user, "role": None},
        lambda c: c.print(f"{escape(user)} has no role in {escape(namespace)}"),
    )
