"""``kvreg-admin token``: create API tokens (printed once, only their hash is stored) and revoke them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from kvreg import console as output
from kvreg_registry.admin.common import ACTOR, JsonOpt, write_session
from kvreg_registry.services import accounts

app = typer.Typer(help="Create and revoke API tokens.", no_args_is_help=True)


@app.command("create")
def token_create(
    ctx: typer.Context,
    user: str,
    label: Annotated[str, typer.Option("--label", help="What the token is for (shown in listings).")] = "",
    expires_in_days: Annotated[
        int | None, typer.Option("--expires-in-days", min=1, help="Expiry; none by default.")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Create an API token for USER and print it once (only its hash is stored)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        t = accounts.create_token(s, ACTOR, user, label=label, expires_in_days=expires_in_days)
    data = {
        "id": t.id,
        "user": t.user,
        "token": t.token,
        "label": t.label,
        "expires_at": t.expires_at.isoformat() if t.expires_at else None,
    }
    out.result(data, lambda c: c.print(f"token {t.id} for {escape(t.user)} (shown once):\n{t.token}"))


@app.command("revoke")
def token_revoke(ctx: typer.Context, token_id: int, json_output: JsonOpt = False) -> None:
    """Revoke token TOKEN_ID (its id, as `token create` printed)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        accounts.revoke_token(s, ACTOR, token_id)
    out.result({"id": token_id, "revoked": True}, lambda c: c.print(f"revoked token {token_id}"))
