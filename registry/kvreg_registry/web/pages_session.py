"""Sign-in and sign-out pages (``/signin``, ``/signout``); see ``kvreg_registry.web.session``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from kvreg.core.errors import UnauthenticatedError
from kvreg_registry.api.deps import state
from kvreg_registry.api.ratelimit import auth_attempt
from kvreg_registry.web.forms import read_form
from kvreg_registry.web.render import SECURITY_HEADERS, render
from kvreg_registry.web.session import (
    CSRF_FIELD,
    check_csrf,
    clear_session_cookie,
    set_session_cookie,
    sign_in,
    sign_out,
    visitor,
)

router = APIRouter()


def safe_next(value: str | None) -> str:
    """A local path to go back to after signing in; anything else (another site) becomes ``/``."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


@router.get("/signin", response_class=HTMLResponse, include_in_schema=False)
def signin_page(request: Request, next: str = "/") -> HTMLResponse:
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
    return render(request, who, "signin.html", {"next": safe_next(next), "message": None}, title="Sign in")


@router.post("/signin", include_in_schema=False)
async def signin_submit(request: Request) -> Response:
    st = state(request)
    form = await read_form(request)
    with st.db.read() as s:
        who = visitor(s, request)
    check_csrf(request, who, form.get(CSRF_FIELD))
    target = safe_next(form.get("next"))
    token = form.get("token") or ""
    try:
        if not token.strip():
            raise UnauthenticatedError("paste an API token")
        with auth_attempt(request, token.strip()), st.db.write() as s:
            cookie, _principal = sign_in(s, token, st.settings)
    except UnauthenticatedError as exc:
        return render(
            request, who, "signin.html", {"next": target, "message": exc.message}, status=401, title="Sign in"
        )
    response = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
    set_session_cookie(response, cookie, request, st.settings)
    return response


@router.post("/signout", include_in_schema=False)
async def signout_submit(request: Request) -> Response:
    st = state(request)
    form = await read_form(request)
    with st.db.read() as s:
        who = visitor(s, request)
    check_csrf(request, who, form.get(CSRF_FIELD))
    with st.db.write() as s:
        sign_out(s, who)
    response = RedirectResponse("/", status_code=303, headers=SECURITY_HEADERS)
    clear_session_cookie(response, request, st.settings)
    return response
