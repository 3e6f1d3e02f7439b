"""The admin page (``/admin``) and its form posts (``/admin/...``).

``GET /admin`` needs a signed-in visitor (anonymous visitors are sent to
``/signin?next=/admin``) and shows, each only where the visitor's roles allow:
the namespaces they administer (``#namespaces``), their own API tokens and, for a
server admin, the users (``#tokens``), and per administered namespace its signing
keys (``#keys``), retention policy (``#retention``), active legal holds
(``#holds``) and members (``#roles``). What it reads is in
``kvreg_registry.web.views_admin`` (a fixed number of queries).

Every form posts to a route here that checks the CSRF token (and the origin) first,
then calls the same service function as the API with the visitor's principal in one
write transaction — the services check the roles and append the audit entries —
then redirects (303) back to ``/admin#section`` with ``?done=`` naming what was done.
Destructive actions (revoking a token or a key, changing a namespace's visibility,
removing a role) take two posts: the first (after the same CSRF and role checks) answers
with a confirmation page (``admin_confirm.html``) that says what will happen — and when
the token to revoke is the one this session signed in with — and whose form posts the
same fields again with ``confirm=yes``; only that second post acts.
A refused action is an error page with the API's status (403, 404, 409, 400). A new
token is shown once, on the page that answers its form, never in a URL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kvreg.core.digest import Digest
from kvreg.core.errors import KeyFileError, RequestInvalidError, TokenNotFoundError, UnauthenticatedError
from kvreg_registry.api.deps import state
from kvreg_registry.auth import ROLE_RANK, Principal
from kvreg_registry.db.models import ApiToken
from kvreg_registry.services import accounts, holds, retention
from kvreg_registry.state import RegistryState
from kvreg_registry.web.forms import read_form
from kvreg_registry.web.render import SECURITY_HEADERS, render
from kvreg_registry.web.session import CSRF_FIELD, Visitor, check_csrf, visitor
from kvreg_registry.web.views_admin import admin_view

router = APIRouter()

# What ``?done=CODE`` says on the page; ``subject`` (a name or id) is shown as text.
DONE_MESSAGES = {
    "namespace-created": "Namespace {subject} created.",
    "namespace-visibility": "Visibility of namespace {subject} changed.",
    "token-revoked": "Token {subject} revoked.",
    "user-created": "User {subject} created.",
    "key-registered": "Signing key registered for namespace {subject}.",
    "key-revoked": "Signing key revoked in namespace {subject}.",
    "retention-set": "Retention policy of namespace {subject} set.",
    "retention-cleared": "Retention policy of namespace {subject} cleared: everything is kept.",
    "hold-placed": "Legal hold placed in namespace {subject}.",
    "hold-lifted": "Legal hold lifted in namespace {subject}.",
    "role-set": "Role set in namespace {subject}.",
    "role-removed": "Role removed in namespace {subject}.",
}
_SUBJECT_RE = re.compile(r"[A-Za-z0-9._:/-]{1,160}")

MAX_DESCRIPTION = 2000
MAX_LABEL = 200
MAX_TOKEN_DAYS = 3650
MAX_PUBLIC_KEY = 200
MAX_REASON = holds.MAX_REASON_CHARS
MAX_KEEP = retention.MAX_KEEP


def done_message(done: str | None, subject: str | None) -> str | None:
    """The confirmation for ``?done=``; unknown codes and odd subjects show nothing."""
    template = DONE_MESSAGES.get(done or "")
    if template is None:
        return None
    if subject is None or _SUBJECT_RE.fullmatch(subject) is None:
        return template.replace(" {subject}", "")
    return template.format(subject=subject)


# --- the page ----------------------------------------------------------------------------------


@router.get("/admin", response_class=HTMLResponse, include_in_schema=False)
def admin_page(
    request: Request, page: int = 1, done: str | None = None, subject: str | None = None, ns: str = ""
) -> Response:
    st = state(request)
    name_filter = ns.strip()[:64]
    with st.db.read() as s:
        who = visitor(s, request)
        if not who.signed_in:
            raise UnauthenticatedError("sign in to administer the registry")
        view = admin_view(s, who.principal, page=page, name_filter=name_filter)
    return render(
        request,
        who,
        "admin.html",
        {
            "view": view,
            "message": done_message(done, subject),
            "roles": list(ROLE_RANK),
            "session_token_id": who.principal.token_id,
            "ns_filter": name_filter,
        },
        title="Administration",
    )


# --- the confirmation step of destructive actions -----------------------------------------------


@dataclass(frozen=True)
class Confirmation:
    """What the confirmation page of a destructive action says and posts again."""

    heading: str
    message: str
    action: str  # the URL the form posts to (the same as the first post's)
    fields: dict[str, str]
    button: str
    back: str  # where "Cancel" goes
    warning: str | None = None


Confirm = Callable[[Session, Visitor, dict[str, str]], Confirmation]


def _confirmed(form: dict[str, str]) -> bool:
    return form.get("confirm") == "yes"


# --- form posts ----------------------------------------------------------------------------------

Action = Callable[[Session, Principal, dict[str, str]], tuple[str, str | None]]


def _signed_in(st: RegistryState, request: Request, form: dict[str, str]) -> Visitor:
    """The visitor of a form post, after the CSRF check (always first); refused unless signed in."""
    with st.db.read() as s:
        who = visitor(s, request)
    check_csrf(request, who, form.get(CSRF_FIELD))
    if not who.signed_in:
        raise UnauthenticatedError("sign in to administer the registry")
    return who


def _back(section: str, done: str, subject: str | None) -> RedirectResponse:
    params = {"done": done}
    if subject:
        params["subject"] = subject
    return RedirectResponse(
        f"/admin?{urlencode(params)}#{section}", status_code=303, headers=SECURITY_HEADERS
    )


def _run(st: RegistryState, request: Request, form: dict[str, str], section: str, action: Action) -> Response:
    who = _signed_in(st, request, form)
    with st.db.write() as s:
        done, subject = action(s, who.principal, form)
    return _back(section, done, subject)


async def _post(request: Request, section: str, action: Action, confirm: Confirm | None = None) -> Response:
    """Run ``action`` for a form post; with ``confirm``, only once the post says ``confirm=yes``
    (the first post answers with the confirmation page ``confirm`` describes)."""
    st = state(request)
    form = await read_form(request)
    if confirm is None or _confirmed(form):
        return await run_in_threadpool(_run, st, request, form, section, action)

    def ask() -> Response:
        who = _signed_in(st, request, form)
        with st.db.read() as s:
            c = confirm(s, who, form)
        return render(request, who, "admin_confirm.html", {"c": c}, title=c.heading)

    return await run_in_threadpool(ask)


def _text(form: dict[str, str], name: str, *, limit: int, required: bool = False) -> str:
    value = (form.get(name) or "").strip()
    if required and not value:
        raise RequestInvalidError(f"the field {name!r} is required")
    if len(value) > limit:
        raise RequestInvalidError(f"the field {name!r} is longer than {limit} characters")
    return value


def _int(form: dict[str, str], name: str, *, low: int, high: int) -> int | None:
    value = (form.get(name) or "").strip()
    if not value:
        return None
    if not value.isdigit() or not low <= int(value) <= high:
        raise RequestInvalidError(f"the field {name!r} must be a whole number from {low} to {high}")
    return int(value)


def _checked(form: dict[str, str], name: str) -> bool:
    return form.get(name) in ("on", "1", "true", "yes")


# Namespaces ----------------------------------------------------------------------------------


@router.post("/admin/namespaces", include_in_schema=False)
async def create_namespace(request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        name = _text(form, "name", limit=63, required=True)
        description = _text(form, "description", limit=MAX_DESCRIPTION)
        ns = accounts.create_namespace(s, who, name, public=_checked(form, "public"), description=description)
        return "namespace-created", ns.name

    return await _post(request, "namespaces", action)


@router.post("/admin/namespaces/{ns}/visibility", include_in_schema=False)
async def set_visibility(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        value = form.get("public")
        if value not in ("1", "0"):
            raise RequestInvalidError("the field 'public' must be 1 or 0")
        accounts.set_namespace_public(s, who, ns, value == "1")
        return "namespace-visibility", ns

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        namespace = accounts.readable_namespace(s, who.principal, ns, "admin")
        who.principal.require(s, namespace, "admin")
        public = form.get("public") == "1"
        if public:
            message = (
                f"Everyone, signed in or not, will be able to list, read and pull every artifact of {ns}, "
                "its refs, keys and the audit entries about it."
            )
        else:
            message = (
                f"Only users with a role in {ns} (and server admins) will be able to read it; "
                "anyone else, and every link to it that was shared, will get “not found”."
            )
        return Confirmation(
            heading=f"Make {ns} {'public' if public else 'private'}?",
            message=message,
            action=f"/admin/namespaces/{ns}/visibility",
            fields={"public": "1" if public else "0"},
            button=f"Make {ns} {'public' if public else 'private'}",
            back="/admin#namespaces",
        )

    return await _post(request, "namespaces", action, confirm)


# Tokens and users ------------------------------------------------------------------------------


@router.post("/admin/tokens", include_in_schema=False)
async def create_token(request: Request) -> Response:
    """A new token for the visitor (or, for a server admin, for the user named in ``user``),
    shown once on the page this answers with."""
    st = state(request)
    form = await read_form(request)

    def run() -> Response:
        who = _signed_in(st, request, form)
        user = _text(form, "user", limit=64) or (who.principal.name or "")
        label = _text(form, "label", limit=MAX_LABEL)
        days = _int(form, "expires_in_days", low=1, high=MAX_TOKEN_DAYS)
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
        row = s.get(ApiToken, token_id)
        if row is None:
            raise TokenNotFoundError(f"no token {token_id}")
        if who.principal.user_id != row.user_id:
            who.principal.require_admin()
        in_use = who.principal.token_id == token_id
        label = f" ({row.label})" if row.label else ""
        return Confirmation(
            heading=f"Revoke token {token_id}?",
            message=(
                f"Token {token_id}{label} will stop working at once, for every client that uses it "
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
            back="/admin#tokens",
        )

    return await _post(request, "tokens", action, confirm)


@router.post("/admin/users", include_in_schema=False)
async def create_user(request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        name = _text(form, "name", limit=64, required=True)
        user = accounts.create_user(s, who, name, admin=_checked(form, "admin"))
        return "user-created", user.name

    return await _post(request, "users", action)


# Signing keys -----------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/keys", include_in_schema=False)
async def register_key(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        text = _text(form, "public_key", limit=MAX_PUBLIC_KEY, required=True)
        try:
            accounts.register_key(s, who, ns, text)
        except KeyFileError as e:  # a malformed key is the sender's mistake: 400, not 500
            raise RequestInvalidError(e.message, hint="paste the line `kvreg keys export` prints") from e
        return "key-registered", ns

    return await _post(request, "keys", action)


@router.post("/admin/namespaces/{ns}/keys/revoke", include_in_schema=False)
async def revoke_key(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        keyid = Digest(_text(form, "keyid", limit=100, required=True))
        accounts.revoke_key(s, who, ns, keyid)
        return "key-revoked", ns

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        accounts.readable_namespace(s, who.principal, ns, "admin")
        keyid = _text(form, "keyid", limit=100, required=True)
        return Confirmation(
            heading=f"Revoke a signing key of {ns}?",
            message=(
                f"Key {keyid} will no longer be accepted for pushes to {ns}, artifacts it signed will show "
                "their signature as not verified, and a revoked key cannot be registered again."
            ),
            action=f"/admin/namespaces/{ns}/keys/revoke",
            fields={"keyid": keyid},
            button="Revoke the key",
            back=f"/admin?ns={ns}#keys",
        )

    return await _post(request, "keys", action, confirm)


# Retention --------------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/retention", include_in_schema=False)
async def set_retention(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        versions = _int(form, "keep_versions", low=1, high=MAX_KEEP)
        days = _int(form, "keep_days", low=1, high=MAX_KEEP)
        retention.set_policy(s, who, namespace, keep_versions=versions, keep_days=days)
        return "retention-set", ns

    return await _post(request, "retention", action)


@router.post("/admin/namespaces/{ns}/retention/clear", include_in_schema=False)
async def clear_retention(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        retention.clear_policy(s, who, namespace)
        return "retention-cleared", ns

    return await _post(request, "retention", action)


# Legal holds ------------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/holds", include_in_schema=False)
async def place_hold(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        ref = _text(form, "ref", limit=128) or None
        reason = _text(form, "reason", limit=MAX_REASON, required=True)
        holds.place(s, who, namespace, ref=ref, reason=reason)
        return "hold-placed", ns

    return await _post(request, "holds", action)


@router.post("/admin/namespaces/{ns}/holds/{hold_id}/lift", include_in_schema=False)
async def lift_hold(ns: str, hold_id: int, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        reason = _text(form, "reason", limit=MAX_REASON, required=True)
        holds.lift(s, who, namespace, hold_id, reason=reason)
        return "hold-lifted", ns

    return await _post(request, "holds", action)


# Roles ------------------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/roles", include_in_schema=False)
async def set_role(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        user = _text(form, "user", limit=64, required=True)
        role = _text(form, "role", limit=8, required=True)
        accounts.set_role(s, who, ns, user, role)
        return "role-set", ns

    return await _post(request, "roles", action)


@router.post("/admin/namespaces/{ns}/roles/remove", include_in_schema=False)
async def remove_role(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        user = _text(form, "user", limit=64, required=True)
        accounts.remove_role(s, who, ns, user)
        return "role-removed", ns

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        namespace = accounts.readable_namespace(s, who.principal, ns, "admin")
        who.principal.require(s, namespace, "admin")
        user = _text(form, "user", limit=64, required=True)
        yourself = user == who.principal.name
        return Confirmation(
            heading=f"Remove the role of {user} in {ns}?",
            message=(
                f"{user} will lose every right in {ns}"
                + (" (it is private: they will no longer see it)." if not namespace.public else ".")
            ),
            warning="This is your own role: you may lose the right to administer this namespace."
            if yourself
            else None,
            action=f"/admin/namespaces/{ns}/roles/remove",
            fields={"user": user},
            button=f"Remove the role of {user}",
            back=f"/admin?ns={ns}#roles",
        )

    return await _post(request, "roles", action, confirm)
