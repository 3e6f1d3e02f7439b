"""Errors on pages: an HTML page with the same status and code as the API would answer.

``kvreg_registry.api.errors`` sends JSON for ``/api/``; for every other path it
calls :func:`html_error` registered here. A 401 on a page (a form that needs a
signed-in user) redirects to ``/signin``. Unexpected errors show "internal error"
only; the traceback goes to the server log.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from kvreg.core.errors import ERROR_CODE_HEADER
from kvreg_registry.api import errors as api_errors
from kvreg_registry.auth import Principal
from kvreg_registry.web.render import SECURITY_HEADERS, render
from kvreg_registry.web.session import Visitor, visitor

HEADINGS = {
    400: "Bad request",
    401: "Sign-in needed",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    413: "Too large",
    422: "Not accepted",
    429: "Too many attempts",
    503: "Unavailable",
}


def _who(request: Request) -> Visitor:
    try:
        with request.app.state.registry.db.read() as s:
            return visitor(s, request)
    except Exception:
        return Visitor(principal=Principal(), csrf_token="")


def html_error(request: Request, status: int, body: dict[str, object]) -> Response:
    if status == 401 and request.method == "GET":
        return RedirectResponse(
            f"/signin?next={quote(request.url.path)}", status_code=303, headers=SECURITY_HEADERS
        )
    who = _who(request)
    response = render(
        request,
        who,
        "error.html",
        {
            "status": status,
            "heading": HEADINGS.get(status, "Error"),
            "message": body.get("message", "error"),
            "hint": body.get("hint"),
            "code": body.get("code"),
        },
        status=status,
        title=HEADINGS.get(status, "Error"),
    )
    response.headers[ERROR_CODE_HEADER] = str(body.get("code", "INTERNAL"))
    return response


def install(app: FastAPI) -> None:
    api_errors.set_html_renderer(app, html_error)
