"""The web UI: server-rendered pages (Jinja2) for browsing and searching verified solutions,
artifacts, comparisons, the audit trail, sign-in and administration.

Served by the same app as the API (``create_app`` calls :func:`install`): pages at
``/``, static files at ``/static``. Every page enforces the API's access rules with
the same services (a private namespace is a 404 to whoever cannot read it), runs a
bounded number of database queries whatever the library's size, and escapes
everything that came from an artifact. See docs/web-ui.md.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from kvreg_registry.web import (
    errors,
    pages_admin,
    pages_admin_users,
    pages_artifact,
    pages_audit,
    pages_compare,
    pages_glossary,
    pages_library,
    pages_namespace,
    pages_session,
)
from kvreg_registry.web.render import STATIC_DIR

# The static files (one stylesheet, one script, the icon) are public and immutable per release.
STATIC_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "public, max-age=3600"}


class _StaticFiles(StaticFiles):
    """``StaticFiles`` whose answers say ``nosniff`` (the pages' other headers are for HTML)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(STATIC_HEADERS)
        return response


# Page modules, in the order their routes are matched.
PAGE_MODULES = [
    pages_session,
    pages_library,
    pages_admin,
    pages_admin_users,
    pages_namespace,
    pages_artifact,
    pages_compare,
    pages_audit,
    pages_glossary,
]


def favicon() -> RedirectResponse:
    """``/favicon.ico``, which browsers ask for whatever the page links: the SVG icon."""
    return RedirectResponse("/static/favicon.svg", status_code=301, headers=STATIC_HEADERS)


def install(app: FastAPI) -> list[APIRouter]:
    """Add the pages and the static files to ``app``; return the routers of the pages (included
    without a prefix; the static files and the icon are the app's own routes)."""
    routers = [module.router for module in PAGE_MODULES]
    for router in routers:
        app.include_router(router)
    app.mount("/static", _StaticFiles(directory=STATIC_DIR), name="static")
    app.add_api_route("/favicon.ico", favicon, methods=["GET", "HEAD"], include_in_schema=False)
    errors.install(app)
    return routers
