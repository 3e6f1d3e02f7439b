"""Every page of the web UI, at 1280 px and 390 px, light and dark, signed out, as a reader and
as an admin: no sideways scroll, no short word split over two lines, no console error, no 5xx,
WCAG AA contrast of every piece of text (``contrast.CHECK``: each text element's colour
against its effective background), with every ``<details>`` opened, and every status badge in
its meaning's colour (``BADGE_CHECK``: the tone ``kvreg_registry.web.status`` gives its status).

Only the combinations that render differently are visited (``PLAN``), one context each, signed
in once, in the session's one browser against the session's one seeded server:

- signed out, every page at both widths in light, and every page once in dark (desktop): the
  colour scheme changes colours, not layout, so the dark pass is each page's contrast check;
- a reader and an admin, at both widths in light, the pages whose ``<main>`` differs from the
  signed-out one (``visitor_pages``: fetched first with the context's cookies and compared),
  and the home page for the signed-in header; the admin again in dark (phone), for the
  signed-in colours;
- the dark phone run of a signed-out visitor opens only the pages it photographs.

Every check runs on every page a combination visits. The desktop and phone runs also take the
screenshots of docs/web-ui.md (``scripts/refresh-screenshots.sh`` runs this module and copies
them). The confirmation step of each destructive admin action is checked here too (cancelled,
so the shared registry is unchanged).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from kvreg_registry.web.status import STATUS_TONES, TONE_COLOURS

from .conftest import DESKTOP, PHONE, _context, _watch
from .contrast import CHECK as CONTRAST_CHECK
from .helpers import sign_in
from .seed import Seeded

VISITORS = ("anonymous", "reader", "admin")
SCHEMES = ("light", "dark")
WIDTHS = {"desktop": DESKTOP, "phone": PHONE}
MISSING_ENTRY = 987_654_321

# Screenshots for docs/web-ui.md: (visitor, scheme, width) -> {page name: file name}.
DOC_SHOTS = {
    ("anonymous", "light", "desktop"): {
        "home": "home",
        "search": "search",
        "namespaces": "namespaces",
        "namespace": "namespace",
        "artifact": "artifact",
        "compare": "compare",
        "audit": "audit",
        "audit-entry": "audit-entry",
        "signin": "signin",
        "flywheel": "flywheel",
        "gsm8k-artifact": "artifact-gsm8k",
        "error-digest": "error",
    },
    ("anonymous", "dark", "desktop"): {
        "home": "home-dark",
        "artifact": "artifact-dark",
        "audit": "audit-dark",
    },
    ("anonymous", "light", "phone"): {
        "home": "phone-home",
        "artifact": "phone-artifact",
        "namespace": "phone-namespace",
        "audit": "phone-audit",
    },
    ("anonymous", "dark", "phone"): {"artifact": "phone-artifact-dark", "audit": "phone-audit-dark"},
    ("admin", "light", "desktop"): {"admin": "admin"},
    ("admin", "light", "phone"): {"admin": "phone-admin"},
    ("admin", "dark", "phone"): {"admin": "phone-admin-dark"},
}


def pages(server: Seeded, visitor: str) -> list[tuple[str, str, int]]:
    """(name, path, final status) of every page, for ``visitor``."""
    ns = server.public_ns
    entry = next(
        e["index"] for e in server.audit_entries if e["type"] == "envelope.stored" and e["ref"] == f"{ns}/p07"
    )
    private = next(e["index"] for e in server.audit_entries if e["ref"].startswith(f"{server.private_ns}/"))
    compare = urlencode({"a": f"{ns}/{server.digests['p07']}", "b": f"{ns}/{server.digests['p07x']}"})
    return [
        ("home", "/", 200),
        ("search", "/?q=problem", 200),
        ("search-empty", "/?q=%F0%9F%99%82", 200),
        ("namespaces", "/ns", 200),
        ("namespace", f"/ns/{ns}", 200),
        ("private-namespace", f"/ns/{server.private_ns}", 200),  # anonymous: the sign-in page
        ("artifact", server.artifact_path("p07"), 200),
        ("flywheel", f"/ns/{server.flywheel_ns}", 200),
        ("gsm8k-artifact", server.artifact_path("gsm8k-test-0001"), 200),
        ("compare", f"/compare?{compare}", 200),
        ("audit", "/audit", 200),
        ("audit-all", "/audit?all=1", 200),
        ("audit-entry", f"/audit/entries/{entry}", 200),
        ("admin", "/admin", 200),  # anonymous: the sign-in page
        ("signin", "/signin", 200),
        ("glossary", "/glossary", 200),
        ("error", f"/audit/entries/{MISSING_ENTRY}", 404),
        # a not-found message holding a whole digest must wrap on a phone
        ("error-digest", f"/ns/{ns}/artifacts/sha256:{'0' * 64}", 404),
        ("error-bad-request", "/audit/entries/abc", 400),
        # an entry of a private namespace: signed out, the 401 page with its sign-in link
        ("error-sign-in", f"/audit/entries/{private}", 401 if visitor == "anonymous" else 200),
    ]


def _scheme_context(browser: Any, server: Seeded, scheme: str, width: str) -> Any:
    options: dict[str, Any] = {"viewport": WIDTHS[width], "color_scheme": scheme}
    if width == "phone":
        options.update(device_scale_factor=1, is_mobile=True, has_touch=True)
    return _context(browser, server, **options)


@pytest.fixture
def visit_as(browser: Any, server: Seeded, request: pytest.FixtureRequest) -> Iterator[Any]:
    visitor, scheme, width = request.param
    ctx = _scheme_context(browser, server, scheme, width)
    page = _watch(ctx.new_page())
    page.console_errors = []
    page.server_errors = []
    page.on("console", lambda m: page.console_errors.append(m.text) if m.type == "error" else None)
    page.on(
        "response", lambda r: page.server_errors.append(f"{r.status} {r.url}") if r.status >= 500 else None
    )
    token = {"reader": server.reader_token, "admin": server.admin_token}.get(visitor)
    if token:
        sign_in(page, token)
    try:
        yield page, visitor, scheme, width
    finally:
        ctx.close()


# Short single words (a verdict, a model name, a count) that the browser split over two lines:
# what "break-word on a normal word" looks like ("mo del", "pa ss").
SPLIT_WORDS = r"""
() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    // Identifiers (code, digests, keys) may wrap anywhere; prose and labels may not.
    if (n.parentElement.closest("code, pre, .digest, svg")) continue;
    for (const m of n.textContent.matchAll(/(?<=^|[\s(“"'])[A-Za-z]{2,16}(?=$|[\s.,;:!?)”"'])/g)) {
      const r = document.createRange();
      r.setStart(n, m.index);
      r.setEnd(n, m.index + m[0].length);
      const tops = new Set([...r.getClientRects()].filter((b) => b.width > 0).map((b) => Math.round(b.top)));
      if (tops.size > 1) out.push(m[0]);
    }
  }
  return out.slice(0, 5);
}
"""


# Every .badge in the colour of its status's tone: the status is its data-status (drawn by the
# components macro) or, for a badge drawn by hand, its first word when that is a known status
# ("unknown", "public", "revoked ..."). Its text colour must be the tone's custom property.
BADGE_CHECK = r"""
({tones, colours}) => {
  const probe = document.createElement("span");
  document.body.appendChild(probe);
  const colourOf = (prop) => { probe.style.color = `var(${prop})`; return getComputedStyle(probe).color; };
  const out = [];
  for (const el of document.querySelectorAll(".badge")) {
    const word = (el.textContent.trim().split(/\s+/)[0] || "").toLowerCase();
    const status = el.dataset.status || (word in tones ? word : null);
    if (!status) continue;
    if (!(status in tones)) {
      out.push({status, text: el.textContent.trim(), problem: "status not in the map"});
      continue;
    }
    const want = colourOf(colours[tones[status]]);
    const got = getComputedStyle(el).color;
    const text = el.textContent.trim().slice(0, 40);
    if (got !== want) out.push({status, text, tone: tones[status], want, got});
  }
  probe.remove();
  return out;
}
"""


def badge_failures(page: Any) -> list[dict[str, Any]]:
    return list(page.evaluate(BADGE_CHECK, {"tones": STATUS_TONES, "colours": TONE_COLOURS}))


def contrast_failures(page: Any) -> list[dict[str, Any]]:
    return list(page.evaluate(CONTRAST_CHECK))


# (visitor, scheme, width) -> which pages it visits: "all", "differs" (``visitor_pages``) or "shots"
# (only those of DOC_SHOTS). The combinations left out render nothing that these do not.
PLAN = {
    ("anonymous", "light", "desktop"): "all",
    ("anonymous", "light", "phone"): "all",
    ("anonymous", "dark", "desktop"): "all",
    ("anonymous", "dark", "phone"): "shots",
    ("reader", "light", "desktop"): "differs",
    ("reader", "light", "phone"): "differs",
    ("admin", "light", "desktop"): "differs",
    ("admin", "light", "phone"): "differs",
    ("admin", "dark", "phone"): "differs",
}
assert set(PLAN) <= {(v, s, w) for v in VISITORS for s in SCHEMES for w in WIDTHS}
assert set(DOC_SHOTS) <= set(PLAN), "every screenshot's combination must be visited"
# What a signed-in visitor sees differently from the signed-out one; ``visitor_pages`` fails if
# its comparison finds any of these equal (the fetch lost the session).
MUST_DIFFER = {"private-namespace", "admin"}
_MAIN = re.compile(r"<main\b.*?</main>", re.S)
_CSRF = re.compile(r'(name="csrf" value=")[^"]*"')


def _main_of(html: str) -> str:
    """The ``<main>`` element of a page, the per-session CSRF token masked."""
    found = _MAIN.search(html)
    return _CSRF.sub(r'\1"', found.group(0) if found else html)


def visitor_pages(page: Any, server: Seeded, visitor: str) -> list[tuple[str, str, int]]:
    """The pages ``visitor`` (signed in on ``page``'s context) sees differently from a signed-out
    visitor: another status or another ``<main>``; and the home page, for the signed-in header."""
    chosen = []
    with httpx.Client(base_url=server.url, follow_redirects=True, timeout=60) as anonymous:
        for name, path, status in pages(server, visitor):
            mine = page.context.request.get(path)
            theirs = anonymous.get(path)
            differs = mine.status != theirs.status_code or _main_of(mine.text()) != _main_of(theirs.text)
            if differs or name == "home":
                chosen.append((name, path, status))
    missing = MUST_DIFFER - {name for name, _, _ in chosen}
    assert not missing, f"{visitor}: pages that must differ from the signed-out ones did not: {missing}"
    return chosen


@pytest.mark.parametrize("visit_as", list(PLAN), ids=["-".join(c) for c in PLAN], indirect=True)
def test_every_page_fits_works_and_reads(visit_as: Any, server: Seeded, shot: Any) -> None:
    page, visitor, scheme, width = visit_as
    wanted_shots = DOC_SHOTS.get((visitor, scheme, width), {})
    chosen = {
        "all": lambda: pages(server, visitor),
        "differs": lambda: visitor_pages(page, server, visitor),
        "shots": lambda: [p for p in pages(server, visitor) if p[0] in wanted_shots],
    }[PLAN[(visitor, scheme, width)]]()
    assert set(wanted_shots) <= {name for name, _, _ in chosen}, "a screenshot's page is not visited"
    problems: list[str] = []
    for name, path, status in chosen:
        seen = len(page.console_errors)
        response = page.goto(path)
        assert response is not None, path
        if response.status != status:
            problems.append(f"{name} {path}: status {response.status}, wanted {status}")
        if name in wanted_shots:
            if name == "audit":  # the entries, below the checkpoint
                page.evaluate("document.getElementById('audit-entries').scrollIntoView()")
            shot(page, wanted_shots[name], full_page=False)
        # What is folded must fit and read as well: open every <details> before checking.
        page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
        is_dark = page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
        assert is_dark == (scheme == "dark")
        sw, iw = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
        if sw > iw:
            wide = page.evaluate(
                """() => [...document.querySelectorAll('body *')]
                  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
                               && !e.closest('.table-wrap'))
                  .slice(0, 3).map(e => e.tagName + '.' + e.className + ' ' + (e.id || ''))"""
            )
            problems.append(f"{name} {path}: scrolls sideways ({sw} > {iw}): {wide}")
        split = page.evaluate(SPLIT_WORDS)
        if split:
            problems.append(f"{name} {path}: words split over two lines: {split}")
        for failure in contrast_failures(page):
            problems.append(f"{name} {path}: contrast {failure}")
        for failure in badge_failures(page):
            problems.append(f"{name} {path}: badge colour {failure}")
        # The browser logs the status of an error page it was sent to on purpose; nothing else.
        expected = f"the server responded with a status of {status}"
        problems += [
            f"{name} {path}: console error: {e}"
            for e in page.console_errors[seen:]
            if status < 400 or expected not in e
        ]
    problems += [f"server error: {e}" for e in page.server_errors]
    problems += [f"script error: {e}" for e in page.errors]
    assert not problems, f"{visitor}, {scheme}, {width}:\n" + "\n".join(problems)


@pytest.mark.parametrize("visit_as", [("admin", "light", "desktop")], indirect=True)
def test_the_checks_fail_on_a_bad_colour_and_on_split_words(visit_as: Any, server: Seeded) -> None:
    page = visit_as[0]
    page.goto("/")
    assert contrast_failures(page) == [] and page.evaluate(SPLIT_WORDS) == [] and badge_failures(page) == []
    # A badge whose colour is not its meaning's (what hand-written markup did: "unknown" in red).
    page.evaluate(
        """document.querySelector('main').insertAdjacentHTML('beforeend',
             '<span class="badge bad">unknown</span>'
             + '<span data-status="public" class="badge warn">public</span>')"""
    )
    wrong = badge_failures(page)
    assert [(f["status"], f["tone"]) for f in wrong] == [("unknown", "warn"), ("public", "neutral")], wrong
    page.evaluate("document.documentElement.style.setProperty('--muted', '#b0b0b0')")
    failures = contrast_failures(page)
    assert failures and all(f["ratio"] < 4.5 for f in failures), failures
    page.evaluate("document.querySelector('main').style.cssText = 'width: 3rem; overflow-wrap: anywhere'")
    assert page.evaluate(SPLIT_WORDS), "a column 3rem wide with overflow-wrap: anywhere splits words"


@pytest.mark.parametrize("visit_as", [("admin", "dark", "phone")], indirect=True)
def test_each_destructive_admin_action_asks_first(visit_as: Any, server: Seeded) -> None:
    page = visit_as[0]
    ns = server.private_ns
    buttons = [
        (f"form#visibility-{ns} button", f"Make {ns} public?"),
        (f"#keys-{ns} form[action$='/keys/revoke'] button", f"Revoke a signing key of {ns}?"),
        (f"#roles-{ns} form[action$='/roles/remove'] button", "Remove the role of"),
        ("#token-list tr:has([data-status=this-session]) form button", "Revoke token"),
        (
            "#user-list tr:not(:has([data-status=server-admin])) form[action$='/disable'] button",
            "Disable user",
        ),
    ]
    for selector, heading in buttons:
        page.goto(f"/admin?ns={ns}")
        with page.expect_navigation():
            page.locator(selector).first.click()
        assert heading in (page.locator("#confirm-heading").text_content() or ""), selector
        assert page.locator("form#confirm input[name=confirm][value=yes]").count() == 1
        if "token" in heading.lower():
            assert "signed in with" in (page.locator("#confirm-warning").text_content() or "")
        sw, iw = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
        assert sw <= iw
        assert contrast_failures(page) == []
        with page.expect_navigation():
            page.click("#confirm-cancel")
        assert "/admin" in page.url
    assert page.console_errors == [] and page.server_errors == [] and page.errors == []
