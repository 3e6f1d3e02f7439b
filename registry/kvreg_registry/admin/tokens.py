"""``kvreg-admin token``: create API tokens (printed once, only their hash is kept), list and revoke them."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.core.timestamps import rfc3339
from kvreg_registry.admin.common import ACTOR, JsonOpt, read_session, write_session
from kvreg_registry.db.models import utcnow
from kvreg_registry.services import accounts

app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)


@app.command("create")
def token_create(
    ctx: typer.Context,
    user: str,
    label: Annotated[str, typer.Option("--label", help="What the token is for (shown in listings).")] = "",
    expires_in_days: Annotated[
        int | None,
        typer.Option(
            "--expires-in-days", min=1, max=accounts.MAX_TOKEN_DAYS, help="Expiry; none by default."
        ),
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


def _when(value: Any) -> str | None:
    return None if value is None else rfc3339(value)


@app.command("list")
def token_list(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's tokens.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Also the revoked and expired tokens.")] = False,
    json_output: JsonOpt = False,
) -> None:
    """List API tokens (every user's, or --user's): id, user, label, dates and state; never the
    token or its hash. Without --all, only the tokens neither revoked nor expired."""
    out = output.get(ctx, json_output)
    now = utcnow()
    with read_session(ctx) as s:
        tokens = accounts.list_tokens(s, ACTOR, user=user, include_inactive=show_all)
    rows: list[dict[str, Any]] = [
        {
            "id": t.id,
            "user": t.user,
            "label": t.label,
            "created_at": rfc3339(t.created_at),
            "last_used_at": _when(t.last_used_at),
            "expires_at": _when(t.expires_at),
            "revoked_at": _when(t.revoked_at),
            "state": t.state(now),
        }
        for t in tokens
    ]

    def render(c: Any) -> None:
        if not rows:
            c.print("no tokens" + ("" if show_all else " (neither revoked nor expired; --all for every one)"))
            return
        table = Table("id", "user", "label", "created", "last used", "expires", "state")
        for r in rows:
            state = r["state"] if r["revoked_at"] is None else f"revoked {r['revoked_at']}"
            table.add_row(
                str(r["id"]),
                escape(r["user"]),
                escape(r["label"]),
                r["created_at"],
                r["last_used_at"] or "never",
                r["expires_at"] or "never",
                escape(state),
            )
        c.print(table)

    out.result({"tokens": rows}, render)


@app.command("revoke")
def token_revoke(ctx: typer.Context, token_id: int, json_output: JsonOpt = False) -> None:
    """Revoke token TOKEN_ID (its id, as `token create` or `token list` print it)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        changed = accounts.revoke_token(s, ACTOR, token_id)
    out.result(
        {"id": token_id, "revoked": True, "changed": changed},
        lambda c: c.print(
            f"revoked token {token_id}" if changed else f"token {token_id} was revoked already"
        ),
    )
