"""Editing a namespace's description (``/ns/{ns}/description``): its admins, and server admins.

The description is Markdown, shown on the namespace page rendered by ``web.markdown``
(raw HTML off, then sanitized). ``GET`` shows the form with the current text and how it
renders; a post goes through the same steps as the admin page's forms
(``web.admin_forms``): the CSRF token (and the origin) first, a signed-in visitor, then
``services.accounts.set_namespace_description`` with the visitor's principal in one write
transaction (it checks the role and appends the ``namespace.description`` audit entry),
then a redirect (303) to the namespace page. A post with ``preview`` shows the form again
with the posted text rendered and saves nothing. Removing a description (an empty text
where there was one) takes two posts, like the admin page's destructive actions: the
first answers with a confirmation page, only the second (``confirm=yes``) saves.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from kvreg.core.errors import RequestInvalidError, UnauthenticatedError
from kvreg_registry.api.deps import state
from kvreg_registry.services import accounts
from kvreg_registry.web.admin_forms import Confirmation, signed_in
from kvreg_registry.web.forms import read_form
from kvreg_registry.web.markdown import render_markdown
from kvreg_registry.web.render import SECURITY_HEADERS, render
from kvreg_registry.web.session import Visitor, visitor

router = APIRouter()


def _form_page(request: Request, who: Visitor, ns: str, text: str, *, previewing: bool) -> HTMLResponse:
    context: dict[str, Any] = {
        "ns_name": ns,
        "text": text,
        "preview": render_markdown(text),
        "previewing": previewing,
        "limit": accounts.MAX_DESCRIPTION,
    }
    return render(request, who, "namespace_description.html", context, title=f"Description of {ns}")


@router.get("/ns/{ns}/description", response_class=HTMLResponse, include_in_schema=False)
def description_form(ns: str, request: Request) -> HTMLResponse:
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
        if not who.signed_in:
            raise UnauthenticatedError("sign in to edit a namespace's description")
        namespace = accounts.readable_namespace(s, who.principal, ns, "admin")
        text = namespace.description
    return _form_page(request, who, ns, text, previewing=False)


@router.post("/ns/{ns}/description", include_in_schema=False)
async def description_post(ns: str, request: Request) -> Response:
    st = state(request)
    form = await read_form(request)

    def act() -> Response:
        who = signed_in(st, request, form)  # the CSRF check first
        if "description" not in form:
            raise RequestInvalidError("the field 'description' is required")
        text = accounts.validate_description(form["description"])
        if form.get("preview"):
            with st.db.read() as s:
                accounts.readable_namespace(s, who.principal, ns, "admin")
            return _form_page(request, who, ns, text, previewing=True)
        if not text and form.get("confirm") != "yes":
            with st.db.read() as s:
                old = accounts.readable_namespace(s, who.principal, ns, "admin").description
            if old:
                return render(
                    request, who, "admin_confirm.html", {"c": _removal(ns)}, title=_removal(ns).heading
                )
        with st.db.write() as s:
            accounts.readable_namespace(s, who.principal, ns, "admin")
            accounts.set_namespace_description(s, who.principal, ns, text)
        return RedirectResponse(f"/ns/{quote(ns)}#description", status_code=303, headers=SECURITY_HEADERS)

    return await run_in_threadpool(act)


def _removal(ns: str) -> Confirmation:
    return Confirmation(
        heading=f"Remove the description of {ns}?",
        message=f"The namespace page of {ns} will show no description (the audit log keeps the old text).",
        action=f"/ns/{quote(ns)}/description",
        fields={"description": ""},
        button="Remove the description",
        back=f"/ns/{quote(ns)}/description",
    )
