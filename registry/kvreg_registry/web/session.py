"""Browser sign-in with an API token, the session cookie, and CSRF protection.

Signing in checks the API token exactly as the API does (``auth.authenticate``) and
opens a ``web_sessions`` row: the cookie ``kvreg_session`` holds 256 random bits,
the database only their SHA-256, so a database leak reveals no usable cookie. The
session acts with the token it was opened with: revoking or expiring the token,
or disabling its user, ends the session at the next request. The cookie is
``HttpOnly`` and ``SameSite=Strict``, ``Secure`` over https (or with
``KVREG_WEB_SECURE_COOKIES=1`` behind a TLS proxy); the token itself is never put
in a cookie or a page.

CSRF: every form carries a synchroniser token in a hidden field ``csrf``. For a
signed-in browser it is the session's own random ``csrf_token``; before sign-in
(the sign-in form itself: login CSRF) it is the value of a separate random
``kvreg_csrf`` cookie (double submit). :func:`check_csrf` compares in constant
time and also refuses a request whose ``Origin`` names another site or whose
``Sec-Fetch-Site`` is ``cross-site``. It raises ``ForbiddenError``; it never returns
a bool to be ignored.

This module does not render pages (``kvreg_registry.web.render`` does).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request, Response
from sqlalchemy import delete
from sqlalchemy.orm import Session

from kvreg.core.errors import ForbiddenError, UnauthenticatedError
from kvreg_registry.auth import Principal, authenticate, principal_for_token_id
from kvreg_registry.db.models import ApiToken, WebSession, utcnow
from kvreg_registry.settings import Settings

SESSION_COOKIE = "kvreg_session"
CSRF_COOKIE = "kvreg_csrf"
CSRF_FIELD = "csrf"


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Visitor:
    """Who is looking at a page: the principal, the CSRF token its forms carry, and cookies to set."""

    principal: Principal
    csrf_token: str
    session_id_hash: str | None = None
    # A fresh anonymous CSRF cookie to set on the response (None: the browser has one).
    new_csrf_cookie: str | None = None
    # The session cookie was stale (expired, token revoked): clear it on the response.
    clear_session_cookie: bool = False

    @property
    def signed_in(self) -> bool:
        return self.session_id_hash is not None


def visitor(session: Session, request: Request) -> Visitor:
    """The visitor of ``request``: its live web session, or anonymous with a CSRF cookie."""
    cookie = request.cookies.get(SESSION_COOKIE)
    stale = False
    if cookie:
        id_hash = _hash(cookie)
        row = session.get(WebSession, id_hash)
        if row is not None and row.expires_at > utcnow():
            try:
                principal = principal_for_token_id(session, row.token_id)
            except UnauthenticatedError:
                principal = None
            if principal is not None:
                return Visitor(principal=principal, csrf_token=row.csrf_token, session_id_hash=id_hash)
        stale = True
    csrf = request.cookies.get(CSRF_COOKIE)
    if csrf and 20 <= len(csrf) <= 64:
        return Visitor(principal=Principal(), csrf_token=csrf, clear_session_cookie=stale)
    fresh = secrets.token_urlsafe(32)
    return Visitor(principal=Principal(), csrf_token=fresh, new_csrf_cookie=fresh, clear_session_cookie=stale)


def secure_cookies(request: Request, settings: Settings) -> bool:
    return settings.web_secure_cookies or request.url.scheme == "https"


def apply_cookies(response: Response, who: Visitor, request: Request, settings: Settings) -> None:
    """Set or clear the cookies ``who`` needs on ``response``."""
    secure = secure_cookies(request, settings)
    if who.new_csrf_cookie is not None:
        response.set_cookie(
            CSRF_COOKIE, who.new_csrf_cookie, httponly=True, samesite="strict", secure=secure, path="/"
        )
    if who.clear_session_cookie:
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=secure)


def check_csrf(request: Request, who: Visitor, submitted: str | None) -> None:
    """Refuse (``ForbiddenError``) a form post that does not carry ``who``'s CSRF token or that
    comes from another site."""
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        parts = urlsplit(origin)
        if parts.netloc != request.headers.get("host", ""):
            raise ForbiddenError(
                "this form was posted from another site", hint="reload the page and try again"
            )
    elif origin == "null":
        raise ForbiddenError("this form was posted from an opaque origin")
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise ForbiddenError("this form was posted from another site", hint="reload the page and try again")
    if not submitted or not hmac.compare_digest(submitted.encode("utf-8"), who.csrf_token.encode("utf-8")):
        raise ForbiddenError(
            "the form's CSRF token is missing or stale", hint="reload the page and submit the form again"
        )


def sign_in(session: Session, token: str, settings: Settings) -> tuple[str, Principal]:
    """Open a web session for ``token``; returns the cookie value and the principal.

    Raises ``UnauthenticatedError`` for an unknown, revoked or expired token. The
    session ends after ``settings.web_session_hours`` or when the token expires."""
    principal = authenticate(session, token.strip())
    assert principal.token_id is not None
    token_row = session.get(ApiToken, principal.token_id)
    expires = utcnow() + dt.timedelta(hours=settings.web_session_hours)
    if token_row is not None and token_row.expires_at is not None:
        expires = min(expires, token_row.expires_at)
    cookie = secrets.token_urlsafe(32)
    session.add(
        WebSession(
            id_hash=_hash(cookie),
            token_id=principal.token_id,
            csrf_token=secrets.token_urlsafe(32),
            expires_at=expires,
        )
    )
    # Expired sessions of anyone go at each sign-in: the table stays small without a job.
    session.execute(delete(WebSession).where(WebSession.expires_at <= utcnow()))
    return cookie, principal


def set_session_cookie(response: Response, cookie: str, request: Request, settings: Settings) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=settings.web_session_hours * 3600,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request, settings),
        path="/",
    )


def sign_out(session: Session, who: Visitor) -> None:
    if who.session_id_hash is not None:
        session.execute(delete(WebSession).where(WebSession.id_hash == who.session_id_hash))


def clear_session_cookie(response: Response, request: Request, settings: Settings) -> None:
    response.delete_cookie(
        SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=secure_cookies(request, settings)
    )
