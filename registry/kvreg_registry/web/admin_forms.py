"""What every form post of the admin page (``/admin/...``) shares: CSRF first, then the action, then
back to the page; the confirmation step of destructive actions; reading the fields.

:func:`post` runs an :data:`Action` for a form post: it checks the CSRF token (and the
origin) first, refuses an anonymous visitor, calls the action with the visitor's principal
in one write transaction (the action calls the same service function as the API, which
checks the roles and appends the audit entry), then redirects (303) back to
``/admin#section`` with ``?done=`` naming what was done (:data:`DONE_MESSAGES`; a
``subject``, a name or id, is shown as text). Given a :data:`Confirm`, the first post
(after the same CSRF and role checks) answers with the confirmation page
(``admin_confirm.html``) that says what will happen, whose form posts the same fields
again with ``confirm=yes``; only that second post acts. Routes are in ``pages_admin``
(namespaces, keys, retention, holds, roles) and ``pages_admin_users`` (users, tokens).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kvreg.core.errors import RequestInvalidError, UnauthenticatedError
from kvreg_registry.api.deps import state
from kvreg_registry.auth import Principal
from kvreg_registry.state import RegistryState
from kvreg_registry.web.forms import read_form
from kvreg_registry.web.render import SECURITY_HEADERS, render
from kvreg_registry.web.session import CSRF_FIELD, Visitor, check_csrf, visitor

# What ``?done=CODE`` says on the page; ``subject`` (a name or id) is shown as text.
DONE_MESSAGES = {
    "namespace-created": "Namespace {subject} created.",
    "namespace-visibility": "Visibility of namespace {subject} changed.",
    "token-revoked": "Token {subject} revoked.",
    "user-created": "User {subject} created.",
    "user-disabled": "User {subject} disabled: every token and web session of theirs is refused.",
    "user-enabled": "User {subject} enabled: their tokens neither revoked nor expired work again.",
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


def done_message(done: str | None, subject: str | None) -> str | None:
    """The confirmation for ``?done=``; unknown codes and odd subjects show nothing."""
    template = DONE_MESSAGES.get(done or "")
    if template is None:
        return None
    if subject is None or _SUBJECT_RE.fullmatch(subject) is None:
        return template.replace(" {subject}", "")
    return template.format(subject=subject)


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
Action = Callable[[Session, Principal, dict[str, str]], tuple[str, str | None]]


def signed_in(st: RegistryState, request: Request, form: dict[str, str]) -> Visitor:
    """The visitor of a form post, after the CSRF check (always first); refused unless signed in."""
    with st.db.read() as s:
        who = visitor(s, request)
    check_csrf(request, who, form.get(CSRF_FIELD))
    if not who.signed_in:
        raise UnauthenticatedError("sign in to administer the registry")
    return who


def back(section: str, done: str, subject: str | None) -> RedirectResponse:
    params = {"done": done}
    if subject:
        params["subject"] = subject
    return RedirectResponse(
        f"/admin?{urlencode(params)}#{section}", status_code=303, headers=SECURITY_HEADERS
    )


def _run(st: RegistryState, request: Request, form: dict[str, str], section: str, action: Action) -> Response:
    who = signed_in(st, request, form)
    with st.db.write() as s:
        done, subject = action(s, who.principal, form)
    return back(section, done, subject)


async def post(request: Request, section: str, action: Action, confirm: Confirm | None = None) -> Response:
    """Run ``action`` for a form post; with ``confirm``, only once the post says ``confirm=yes``
    (the first post answers with the confirmation page ``confirm`` describes)."""
    st = state(request)
    form = await read_form(request)
    if confirm is None or form.get("confirm") == "yes":
        return await run_in_threadpool(_run, st, request, form, section, action)

    def ask() -> Response:
        who = signed_in(st, request, form)
        with st.db.read() as s:
            c = confirm(s, who, form)
        return render(request, who, "admin_confirm.html", {"c": c}, title=c.heading)

    return await run_in_threadpool(ask)


def text(form: dict[str, str], name: str, *, limit: int, required: bool = False) -> str:
    value = (form.get(name) or "").strip()
    if required and not value:
        raise RequestInvalidError(f"the field {name!r} is required")
    if len(value) > limit:
        raise RequestInvalidError(f"the field {name!r} is longer than {limit} characters")
    return value


def whole_number(form: dict[str, str], name: str, *, low: int, high: int) -> int | None:
    value = (form.get(name) or "").strip()
    if not value:
        return None
    if not value.isdigit() or not low <= int(value) <= high:
        raise RequestInvalidError(f"the field {name!r} must be a whole number from {low} to {high}")
    return int(value)


def checked(form: dict[str, str], name: str) -> bool:
    return form.get(name) in ("on", "1", "true", "yes")
