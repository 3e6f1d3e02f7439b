"""The admin page's form posts about users and tokens (``/admin/users...``, ``/admin/tokens...``).

Each goes through ``web.admin_forms.post`` (CSRF first, the service function with the
visitor's principal, which checks the roles and appends the audit entry, then back to the
page). A new token is shown once, on the page that answers its form, never in a URL.
Revoking a token, disabling a user and enabling one take the confirmation step: the first
post answers with a page that says what will happen (and warns when it concerns the
visitor's own session or user), the second, with ``confirm=yes``, acts. Disabling and
enabling are for server admins (``accounts.set_user_disabled``); the last server admin
who is not disabled cannot be disabled (403).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kvreg.core.errors import TokenNotFoundError, UserNotFoundError
from kvreg_registry.api.deps import state
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import ApiToken, User
from kvreg_registry.services import accounts
from kvreg_registry.web.admin_forms import (
    Confirmation,
    checked,
    post,
    signed_in,
    text,
    whole_number,
)
from kvreg_registry.web.forms import read_form
from kvreg_registry.web.render import render
from kvreg_registry.web.session import Visitor

router = APIRouter()

MAX_LABEL = 200
MAX_TOKEN_DAYS = accounts.MAX_TOKEN_DAYS


# Tokens ------------------------------------------------------------------------------------------


@router.post("/admin/tokens", include_in_schema=False)
async def create_token(request: Request) -> Response:
    """A new token for the visitor (or, for a server admin, for the user named in ``user``),
    shown once on the page this answers with."""
    st = state(request)
    form = await read_form(request)

    def run() -> Response:
        who = signed_in(st, request, form)
        user = text(form, "user", limit=64) or (who.principal.name or "")
        label = text(form, "label", limit=MAX_LABEL)
        days = whole_number(form, "expires_in_days", low=1, high=MAX_TOKEN_DAYS)
        with st.db.write() as s:
            new = accounts.create_token(s, who.principal, user, label=label, expires_in_days=days)
        return render(
            request,
            who,
            "admin_token.html",
            {"new": new, "own": new.user == who.principal.name},
            title="New token",
        )

    return await run_in_threadpool(run)


@router.post("/admin/tokens/{token_id}/revoke", include_in_schema=False)
async def revoke_token(token_id: int, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.revoke_token(s, who, token_id)
        return "token-revoked", str(token_id)

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        found = s.execute(
            select(ApiToken, User.name).join(User, User.id == ApiToken.user_id).where(ApiToken.id == token_id)
        ).first()
        if found is None:
            raise TokenNotFoundError(f"no token {token_id}")
        row, owner = found
        if who.principal.user_id != row.user_id:
            who.principal.require_admin()
        in_use = who.principal.token_id == token_id
        label = f" ({row.label})" if row.label else ""
        whose = "" if who.principal.user_id == row.user_id else f" of user {owner}"
        return Confirmation(
            heading=f"Revoke token {token_id}?",
            message=(
                f"Token {token_id}{label}{whose} will stop working at once, for every client that uses it "
                "(kvreg push, pull, graft receipts); this cannot be undone."
            ),
            warning=(
                "This is the token this session signed in with: revoking it signs you out here too."
                if in_use
                else None
            ),
            action=f"/admin/tokens/{token_id}/revoke",
            fields={},
            button=f"Revoke token {token_id}",
            back="/admin#tokens" if not whose else f"/admin?token_user={owner}#user-tokens",
        )

    return await post(request, "tokens", action, confirm)


# Users -------------------------------------------------------------------------------------------


@router.post("/admin/users", include_in_schema=False)
async def create_user(request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        name = text(form, "name", limit=64, required=True)
        user = accounts.create_user(s, who, name, admin=checked(form, "admin"))
        return "user-created", user.name

    return await post(request, "users", action)


def _user(s: Session, who: Visitor, name: str) -> User:
    """User ``name`` for a server admin's confirmation page (the same checks as the action's)."""
    who.principal.require_admin()
    user = s.scalar(select(User).where(User.name == accounts.validate_user_name(name)))
    if user is None:
        raise UserNotFoundError(f"no user {name!r}")
    return user


@router.post("/admin/users/{name}/disable", include_in_schema=False)
async def disable_user(name: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.set_user_disabled(s, who, name, True)
        return "user-disabled", name

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        accounts.refuse_last_admin(s, _user(s, who, name))  # said before asking, not after
        active = len(accounts.list_tokens(s, who.principal, user=name))
        return Confirmation(
            heading=f"Disable user {name}?",
            message=(
                f"Every token of {name} ({active} neither revoked nor expired) will be refused from their "
                "next request on — the API, kvreg push and pull, OCI clients — and their web sessions "
                "end now. Nothing is revoked or deleted: their tokens, roles, signing keys and artifacts "
                "stay, and enabling the user again gives the tokens back. To offboard them for good, "
                "revoke their tokens too (listed under “Every user's tokens”)."
            ),
            warning=(
                "This is your own user: you will be signed out here, and no token of yours will work."
                if who.principal.name == name
                else None
            ),
            action=f"/admin/users/{name}/disable",
            fields={},
            button=f"Disable {name}",
            back="/admin#users",
        )

    return await post(request, "users", action, confirm)


@router.post("/admin/users/{name}/enable", include_in_schema=False)
async def enable_user(name: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.set_user_disabled(s, who, name, False)
        return "user-enabled", name

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        _user(s, who, name)
        active = len(accounts.list_tokens(s, who.principal, user=name))
        return Confirmation(
            heading=f"Enable user {name} again?",
            message=(
                f"{name} will be able to sign in and use the registry again with the roles they hold, and "
                f"their {active} token(s) neither revoked nor expired will be accepted again at once."
            ),
            action=f"/admin/users/{name}/enable",
            fields={},
            button=f"Enable {name}",
            back="/admin#users",
        )

    return await post(request, "users", action, confirm)
