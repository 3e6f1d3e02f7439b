"""The admin page (``/admin``) and the form posts about namespaces (``/admin/namespaces/...``).

``GET /admin`` needs a signed-in visitor (anonymous visitors are sent to
``/signin?next=/admin``) and shows, each only where the visitor's roles allow:
the namespaces they administer (``#namespaces``), their own API tokens (``#tokens``),
for a server admin the users with their state (``#users``) and every user's tokens
(``#user-tokens``, ``?token_user=NAME`` for one user's, ``?token_all=1`` with the revoked
and expired ones), and per administered namespace its signing keys (``#keys``), retention
policy (``#retention``), active legal holds (``#holds``) and members (``#roles``). What it
reads is in ``kvreg_registry.web.views_admin`` (a fixed number of queries).

Every form posts through ``web.admin_forms.post``: the CSRF token (and the origin) first,
then the same service function as the API with the visitor's principal in one write
transaction — the services check the roles and append the audit entries — then a
redirect (303) back to ``/admin#section`` with ``?done=`` naming what was done.
Destructive actions (changing a namespace's visibility, revoking a key, removing a role;
revoking a token, disabling or enabling a user in ``pages_admin_users``) take two posts:
the first answers with a confirmation page that says what will happen, and only the
second, with ``confirm=yes``, acts. A refused action is an error page with the API's
status (403, 404, 409, 400).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import KeyFileError, RequestInvalidError, UnauthenticatedError
from kvreg_registry.api.deps import state
from kvreg_registry.auth import ROLE_RANK, Principal
from kvreg_registry.services import accounts, holds, retention
from kvreg_registry.web.admin_forms import (
    Confirmation,
    checked,
    done_message,
    post,
    text,
    whole_number,
)
from kvreg_registry.web.render import render
from kvreg_registry.web.session import Visitor, visitor
from kvreg_registry.web.views_admin import TokenFilter, admin_view

router = APIRouter()

MAX_DESCRIPTION = 2000
MAX_PUBLIC_KEY = 200
MAX_REASON = holds.MAX_REASON_CHARS
MAX_KEEP = retention.MAX_KEEP


# --- the page ----------------------------------------------------------------------------------


@router.get("/admin", response_class=HTMLResponse, include_in_schema=False)
def admin_page(
    request: Request,
    page: int = 1,
    done: str | None = None,
    subject: str | None = None,
    ns: str = "",
    token_user: str = "",
    token_all: bool = False,
) -> Response:
    st = state(request)
    name_filter = ns.strip()[:64]
    token_filter = TokenFilter(user=token_user.strip()[:64], include_inactive=token_all)
    with st.db.read() as s:
        who = visitor(s, request)
        if not who.signed_in:
            raise UnauthenticatedError("sign in to administer the registry")
        view = admin_view(s, who.principal, page=page, name_filter=name_filter, token_filter=token_filter)
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
            "token_filter": token_filter,
        },
        title="Administration",
    )


# Namespaces ----------------------------------------------------------------------------------


@router.post("/admin/namespaces", include_in_schema=False)
async def create_namespace(request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        name = text(form, "name", limit=63, required=True)
        description = text(form, "description", limit=MAX_DESCRIPTION)
        ns = accounts.create_namespace(s, who, name, public=checked(form, "public"), description=description)
        return "namespace-created", ns.name

    return await post(request, "namespaces", action)


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

    return await post(request, "namespaces", action, confirm)


# Signing keys -----------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/keys", include_in_schema=False)
async def register_key(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        public_key = text(form, "public_key", limit=MAX_PUBLIC_KEY, required=True)
        try:
            accounts.register_key(s, who, ns, public_key)
        except KeyFileError as e:  # a malformed key is the sender's mistake: 400, not 500
            raise RequestInvalidError(e.message, hint="paste the line `kvreg keys export` prints") from e
        return "key-registered", ns

    return await post(request, "keys", action)


@router.post("/admin/namespaces/{ns}/keys/revoke", include_in_schema=False)
async def revoke_key(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        keyid = Digest(text(form, "keyid", limit=100, required=True))
        accounts.revoke_key(s, who, ns, keyid)
        return "key-revoked", ns

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        accounts.readable_namespace(s, who.principal, ns, "admin")
        keyid = text(form, "keyid", limit=100, required=True)
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

    return await post(request, "keys", action, confirm)


# Retention --------------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/retention", include_in_schema=False)
async def set_retention(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        versions = whole_number(form, "keep_versions", low=1, high=MAX_KEEP)
        days = whole_number(form, "keep_days", low=1, high=MAX_KEEP)
        retention.set_policy(s, who, namespace, keep_versions=versions, keep_days=days)
        return "retention-set", ns

    return await post(request, "retention", action)


@router.post("/admin/namespaces/{ns}/retention/clear", include_in_schema=False)
async def clear_retention(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        retention.clear_policy(s, who, namespace)
        return "retention-cleared", ns

    return await post(request, "retention", action)


# Legal holds ------------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/holds", include_in_schema=False)
async def place_hold(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        ref = text(form, "ref", limit=128) or None
        reason = text(form, "reason", limit=MAX_REASON, required=True)
        holds.place(s, who, namespace, ref=ref, reason=reason)
        return "hold-placed", ns

    return await post(request, "holds", action)


@router.post("/admin/namespaces/{ns}/holds/{hold_id}/lift", include_in_schema=False)
async def lift_hold(ns: str, hold_id: int, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        namespace = accounts.readable_namespace(s, who, ns, "admin")
        reason = text(form, "reason", limit=MAX_REASON, required=True)
        holds.lift(s, who, namespace, hold_id, reason=reason)
        return "hold-lifted", ns

    return await post(request, "holds", action)


# Roles ------------------------------------------------------------------------------------------


@router.post("/admin/namespaces/{ns}/roles", include_in_schema=False)
async def set_role(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        user = text(form, "user", limit=64, required=True)
        role = text(form, "role", limit=8, required=True)
        accounts.set_role(s, who, ns, user, role)
        return "role-set", ns

    return await post(request, "roles", action)


@router.post("/admin/namespaces/{ns}/roles/remove", include_in_schema=False)
async def remove_role(ns: str, request: Request) -> Response:
    def action(s: Session, who: Principal, form: dict[str, str]) -> tuple[str, str | None]:
        accounts.readable_namespace(s, who, ns, "admin")
        user = text(form, "user", limit=64, required=True)
        accounts.remove_role(s, who, ns, user)
        return "role-removed", ns

    def confirm(s: Session, who: Visitor, form: dict[str, str]) -> Confirmation:
        namespace = accounts.readable_namespace(s, who.principal, ns, "admin")
        who.principal.require(s, namespace, "admin")
        user = text(form, "user", limit=64, required=True)
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

    return await post(request, "roles", action, confirm)
