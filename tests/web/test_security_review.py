"""Security review of the web UI and API (issue 7, part 6), against the real app in this process.

- CSRF on every form: every POST route outside ``/api`` (found in ``app.routes``, so a new form
  is covered the day it is added) refuses a post without the CSRF token, with a wrong one, and
  with a correct one sent cross-site (``Origin``, ``Sec-Fetch-Site``), and the database is
  unchanged after each refusal; every ``<form method="post">`` of every page (crawled as a
  server admin) carries the session's CSRF token.
- The session cookie's flags; no session id or token in a URL or a page.
- Tokens never logged: all log records at DEBUG of every logger, and uvicorn's access log of a
  real server on loopback, while good and bad tokens are used through the API and sign-in form.
- Constant-time comparisons: ``hmac.compare_digest`` is what decides the token and CSRF checks
  (observed), and no ``==`` compares secrets in ``auth.py`` and ``web/session.py`` (source).
- Security headers (CSP without ``unsafe-inline``, ``nosniff``, ``frame-ancestors``, ``no-store``)
  on every crawled page and on error pages.
- Artifact text, annotations, titles, questions, namespace descriptions and hold reasons holding
  HTML/JS are shown escaped on every page that shows them.

The rate limits on sign-in and token use are in ``tests/registry/test_rate_limit.py``.
"""

from __future__ import annotations

import ast
import hmac
import logging
import re
import socket
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import Request
from sqlalchemy import MetaData, select
from starlette.routing import BaseRoute, Mount

import kvreg_registry.auth as auth_module
import kvreg_registry.web.session as session_module
from kvreg_registry.db.models import ApiToken, WebSession

from .conftest import open_library
from .helpers import csrf_of, sign_in
from .library import Library

PAYLOAD = "<script>alert(\"kvreg-xss\")</script><img src=x onerror=alert('kvreg')>\"'&"
RAW_MARKERS = ("<script>alert", "<img src=x")
ESCAPED_MARKER = "&lt;script&gt;alert("


# --- parsing pages ---------------------------------------------------------------------------------


class PageParser(HTMLParser):
    """The forms, links, scripts and event-handler attributes of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict[str, Any]] = []
        self.links: list[str] = []
        self.inline_scripts = 0
        self.handlers: list[tuple[str, str]] = []
        self.images: list[str] = []
        self._form: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for name in a:
            if name.startswith("on"):
                self.handlers.append((tag, name))
        if tag == "script" and not a.get("src"):
            self.inline_scripts += 1
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag == "form":
            self._form = {
                "method": a.get("method", "get").lower(),
                "action": a.get("action", ""),
                "inputs": {},
            }
            self.forms.append(self._form)
        if tag in ("input", "button", "select", "textarea") and self._form is not None and "name" in a:
            self._form["inputs"].setdefault(a["name"], a.get("value", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None


def parse(html: str) -> PageParser:
    p = PageParser()
    p.feed(html)
    p.close()
    return p


def assert_no_active_content_from_data(html: str, where: str) -> None:
    page = parse(html)
    assert page.inline_scripts == 0, f"{where}: an inline <script>"
    assert not page.handlers, f"{where}: event-handler attributes {page.handlers}"
    assert "x" not in page.images, f"{where}: an <img> made from data"
    for marker in RAW_MARKERS:
        assert marker not in html, f"{where}: {marker!r} unescaped"


def assert_security_headers(r: httpx.Response, where: str, *, signed_in: bool) -> None:
    csp = r.headers.get("content-security-policy", "")
    directives = {d.strip().split(" ")[0]: d.strip() for d in csp.split(";") if d.strip()}
    assert directives.get("default-src") == "default-src 'self'", f"{where}: CSP {csp!r}"
    assert "script-src" in directives and "'self'" in directives["script-src"], where
    assert directives.get("frame-ancestors") == "frame-ancestors 'none'", where
    assert directives.get("object-src") == "object-src 'none'", where
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp and "*" not in csp, where
    assert r.headers.get("x-content-type-options") == "nosniff", where
    assert r.headers.get("x-frame-options") == "DENY", where
    assert r.headers.get("referrer-policy") in ("same-origin", "no-referrer"), where
    if signed_in:
        assert "no-store" in r.headers.get("cache-control", ""), where


# --- a populated registry, an admin signed in ---------------------------------------------------------


class Site:
    """A library with hostile data in every text field a page shows, and an admin signed in."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self.ns = library.namespace()
        created = library.api(
            "POST", "/namespaces", json={"name": "hostile", "public": True, "description": PAYLOAD}
        )
        assert created.status_code == 201, created.text
        r = library.api(
            "POST", "/namespaces/hostile/keys", json={"public_key": library.key.public_key.to_text()}
        )
        assert r.status_code in (200, 201), r.text
        self.a = library.publish(
            "hostile", "alpha", f"the answer is forty two {PAYLOAD}", title=PAYLOAD, question=PAYLOAD
        )
        self.b = library.publish(
            "hostile", "beta", f"the answer is forty three {PAYLOAD}", title=PAYLOAD, question=PAYLOAD
        )
        library.publish(self.ns, "plain", "an ordinary solution", title="plain", question="why")
        hold = library.api("POST", "/namespaces/hostile/holds", json={"ref": "alpha", "reason": PAYLOAD})
        assert hold.status_code == 201, hold.text
        self.hold_id = hold.json()["id"]
        self.user_name = "leaver"  # a user the disable form would disable
        assert library.api("POST", "/users", json={"name": self.user_name}).status_code == 201
        sign_in(library.client, library.admin_token)
        self.session_cookie = library.client.cookies.get("kvreg_session") or ""
        with library.app_state.db.read() as s:
            self.csrf = s.scalars(select(WebSession.csrf_token)).one()
            self.token_id = s.scalars(select(ApiToken.id)).first()

    @property
    def client(self) -> Any:
        return self.library.client

    def artifact_url(self) -> str:
        return f"/ns/hostile/artifacts/{self.a.digest}"

    def compare_url(self) -> str:
        return f"/compare?a=hostile/alpha&b=hostile/{self.b.digest}"


@pytest.fixture
def site(library: Library) -> Site:
    return Site(library)


def crawl(site: Site, limit: int = 80) -> dict[str, httpx.Response]:
    """Every HTML page reachable by links from the start pages (same site, not /api or /static)."""
    starts = ["/", "/admin", "/audit", "/signin", site.artifact_url(), site.compare_url(), "/ns/hostile"]
    seen: dict[str, httpx.Response] = {}
    queue = deque(starts)
    while queue and len(seen) < limit:
        url = queue.popleft()
        if url in seen:
            continue
        r = site.client.get(url)
        seen[url] = r
        if not r.headers.get("content-type", "").startswith("text/html"):
            continue
        for href in parse(r.text).links:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.path.startswith("/"):
                continue
            if parts.path.startswith(("/api", "/static")):
                continue
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            if target not in seen:
                queue.append(target)
    return seen


# --- CSRF on every form -------------------------------------------------------------------------------


def all_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, set[str]]]:
    """``(path, methods)`` of every route, through included routers (FastAPI keeps an included
    router as one entry holding the original router since 0.16x; older versions flatten it)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from all_routes(inner.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif isinstance(route, Mount):
            yield from all_routes(getattr(route, "routes", []) or [], prefix + route.path)
        elif isinstance(route, BaseRoute) and getattr(route, "methods", None):
            yield prefix + route.path, set(route.methods)  # type: ignore[attr-defined]


def post_routes(site: Site) -> list[str]:
    """Every POST route of the app outside the API, path parameters filled in (``/v2/``, the OCI
    pull API, answers every POST 405 without reading it: ``tests/registry/test_oci_pull.py``)."""
    fill = {
        "ns": "hostile",
        "token_id": str(site.token_id),
        "hold_id": str(site.hold_id),
        "name": site.user_name,
    }
    out = []
    for path, methods in all_routes(site.client.app.routes):
        if "POST" not in methods or path.startswith(("/api", "/v2")):
            continue
        for name in re.findall(r"{(\w+)(?::\w+)?}", path):
            assert name in fill, f"a new form route {path}: teach this test its {name!r}"
            path = re.sub("{" + name + r"(?::\w+)?}", fill[name], path)
        out.append(path)
    return out


# Fields that would make each form's action succeed, so a refusal can only be the CSRF check.
PLAUSIBLE_FIELDS = {
    "name": "brand-new",
    "description": "d",
    "public": "1",
    "user": "root",
    "label": "l",
    "expires_in_days": "1",
    "public_key": "k",
    "keyid": "sha256:" + "0" * 64,
    "keep_versions": "3",
    "reason": "r",
    "role": "read",
    "ref": "alpha",
    "next": "/",
}


def snapshot(library: Library) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table."""
    engine = library.app_state.db.engine
    meta = MetaData()
    meta.reflect(engine)
    with engine.connect() as conn:
        return {
            name: sorted(map(tuple, conn.execute(table.select()).all()), key=repr)
            for name, table in meta.tables.items()
        }


def csrf_problems(site: Site, routes: list[str]) -> list[str]:
    """What is wrong with the CSRF refusals of ``routes`` (empty: every post refused, nothing changed)."""
    fields = {**PLAUSIBLE_FIELDS, "token": site.library.admin_token}
    other = site.csrf[:-1] + ("A" if site.csrf[-1] != "A" else "B")
    attempts: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("no csrf field", {}, {}),
        ("an empty csrf field", {"csrf": ""}, {}),
        ("a wrong csrf token", {"csrf": "x" * len(site.csrf)}, {}),
        ("a token one character off", {"csrf": other}, {}),
        ("a cross-site Origin", {"csrf": site.csrf}, {"Origin": "https://evil.example"}),
        ("an opaque Origin", {"csrf": site.csrf}, {"Origin": "null"}),
        ("Sec-Fetch-Site: cross-site", {"csrf": site.csrf}, {"Sec-Fetch-Site": "cross-site"}),
    ]
    problems = []
    before = snapshot(site.library)
    for path in routes:
        for what, extra, headers in attempts:
            r = site.client.post(path, data={**fields, **extra}, headers=headers, follow_redirects=False)
            if r.status_code != 403 or r.headers.get("x-kvreg-error-code") != "FORBIDDEN":
                problems.append(f"POST {path} with {what}: {r.status_code}")
            else:
                assert_security_headers(r, f"POST {path} with {what}", signed_in=True)
        r = site.client.post(path, follow_redirects=False)  # no body at all
        if r.status_code != 403:
            problems.append(f"POST {path} with no body: {r.status_code}")
    if snapshot(site.library) != before:
        problems.append("a refused form post changed the database")
    if site.client.cookies.get("kvreg_session") != site.session_cookie:
        problems.append("a refused form post changed the session cookie")
    return problems


def test_every_post_route_outside_the_api_refuses_missing_wrong_and_cross_site_csrf(site: Site) -> None:
    routes = post_routes(site)
    # The known forms are all there (the list is found, not written down).
    assert {"/signin", "/signout", "/admin/namespaces", "/admin/tokens", "/admin/users"} <= set(routes)
    assert len(routes) >= 15
    assert csrf_problems(site, routes) == []
    # The harness is sound: the same post with the right token and no foreign origin works.
    r = site.client.post(
        "/admin/namespaces",
        data={**PLAUSIBLE_FIELDS, "csrf": site.csrf},
        headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text


def test_a_new_form_route_without_the_csrf_check_is_caught(site: Site) -> None:
    """A form added without ``check_csrf`` shows up in ``post_routes`` and fails the check."""
    from kvreg_registry.services import accounts
    from kvreg_registry.web.forms import read_form

    from .library import OPERATOR

    app = site.client.app

    async def careless(request: Request) -> dict[str, bool]:
        await read_form(request)
        name = f"careless-{uuid.uuid4().hex[:8]}"
        with site.library.app_state.db.write() as s:
            accounts.create_namespace(s, OPERATOR, name, public=True, description="")
        return {"ok": True}

    app.add_api_route("/admin/careless", careless, methods=["POST"], include_in_schema=False)
    assert "/admin/careless" in post_routes(site)
    problems = csrf_problems(site, ["/admin/careless"])
    assert any("POST /admin/careless with no csrf field: 200" in p for p in problems), problems
    assert "a refused form post changed the database" in problems


def test_every_post_form_on_every_page_carries_the_session_csrf_token(site: Site) -> None:
    pages = crawl(site)
    html_pages = {u: r for u, r in pages.items() if r.headers.get("content-type", "").startswith("text/html")}
    assert len(html_pages) >= 8, sorted(html_pages)
    post_forms = 0
    actions = set()
    for url, r in html_pages.items():
        for form in parse(r.text).forms:
            if form["method"] != "post":
                continue
            post_forms += 1
            actions.add(form["action"])
            assert form["inputs"].get("csrf") == site.csrf, f"{url}: form to {form['action']} lacks the csrf"
            assert form["action"].startswith("/") and not form["action"].startswith("//"), form["action"]
    # The admin page alone has a dozen forms; sign-out is on every signed-in page.
    assert post_forms >= 12 and "/signout" in actions, actions


# --- cookies, URLs -----------------------------------------------------------------------------------


def test_session_and_csrf_cookies_flags(library: Library) -> None:
    page = library.client.get("/signin")
    csrf_cookie = page.headers["set-cookie"]
    assert csrf_cookie.startswith("kvreg_csrf=")
    assert "HttpOnly" in csrf_cookie and "SameSite=strict" in csrf_cookie and "Path=/" in csrf_cookie
    assert "Secure" not in csrf_cookie  # plain http, not configured
    r = library.client.post(
        "/signin", data={"token": library.admin_token, "csrf": csrf_of(page.text)}, follow_redirects=False
    )
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("kvreg_session=")
    assert (
        "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie and "Max-Age=" in cookie
    )
    assert "Domain=" not in cookie and library.admin_token not in cookie
    assert "kvreg_session" not in r.headers["location"]


@pytest.mark.parametrize("how", ["setting", "https"])
def test_cookies_are_secure_when_configured_or_over_https(tmp_path: Path, how: str) -> None:
    settings = {"web_secure_cookies": True} if how == "setting" else {}
    for library in open_library(tmp_path / "reg", **settings):
        if how == "https":
            library.client.base_url = "https://testserver"  # type: ignore[assignment]
        page = library.client.get("/signin")
        assert "Secure" in page.headers["set-cookie"]
        # Behind a TLS proxy the app sees http: the test client would not send a Secure cookie
        # back over http, the browser (on https) does; send it by hand.
        match = re.match(r"kvreg_csrf=([^;]+)", page.headers["set-cookie"])
        assert match is not None
        r = library.client.post(
            "/signin",
            data={"token": library.admin_token, "csrf": csrf_of(page.text)},
            headers={"Cookie": f"kvreg_csrf={match.group(1)}"},
            follow_redirects=False,
        )
        assert r.status_code == 303
        assert "Secure" in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]


def test_no_session_id_csrf_token_or_api_token_in_any_url_or_page(site: Site) -> None:
    pages = crawl(site)
    for url, r in pages.items():
        assert site.session_cookie not in url and site.library.admin_token not in url
        assert site.session_cookie not in r.text, f"{url} shows the session id"
        assert site.library.admin_token not in r.text, f"{url} shows the API token"
        for link in parse(r.text).links:
            assert site.session_cookie not in link and site.csrf not in link, f"{url}: {link}"
        assert site.session_cookie not in r.headers.get("location", "")


# --- tokens never logged -----------------------------------------------------------------------------


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.formatter_ = logging.Formatter("%(name)s %(levelname)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.formatter_.format(record))
        self.lines.append(repr(record.args))
        self.lines.append(repr(getattr(record, "scope", "")))


@contextmanager
def every_log_record() -> Iterator[Collect]:
    """A handler on the root and on every logger that does not propagate, everything at DEBUG."""
    collect = Collect()
    loggers = [logging.getLogger()] + [
        logging.getLogger(name) for name in list(logging.root.manager.loggerDict) if name
    ]
    saved = [(lg, lg.level, lg.disabled) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
        lg.disabled = False
        lg.addHandler(collect)
    try:
        yield collect
    finally:
        for lg, level, disabled in saved:
            lg.setLevel(level)
            lg.disabled = disabled
            lg.removeHandler(collect)


def _secrets_of(token: str) -> list[str]:
    return [token, token.removeprefix("kvreg_"), token[6:20], token[-20:]]


def _exercise(base: str, client: httpx.Client, good: str, bad: str) -> None:
    """Good and bad tokens through the API and the sign-in form."""
    for token in (good, bad):
        client.get(f"{base}/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"})
        client.post(
            f"{base}/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"}, json={"name": 7}
        )
        client.get(f"{base}/api/v1/namespaces", headers={"Authorization": f"Token {token}"})
        page = client.get(f"{base}/signin")
        r = client.post(
            f"{base}/signin", data={"token": token, "csrf": csrf_of(page.text)}, follow_redirects=False
        )
        assert token not in r.text  # a refused sign-in does not echo the token back either
        client.cookies.clear()


def test_tokens_never_reach_a_log_record_in_process(library: Library) -> None:
    good = library.user(admin=True)
    bad = "kvreg_" + "Q" * 43
    with every_log_record() as logs:
        _exercise("", library.client, good, bad)  # type: ignore[arg-type]
        # A bad token's 401 answer does not echo it.
        r = library.client.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {bad}"})
        assert r.status_code == 401 and bad not in r.text
    text = "\n".join(logs.lines)
    for secret in _secrets_of(good) + _secrets_of(bad):
        assert secret not in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tokens_never_reach_uvicorns_access_log(tmp_path: Path) -> None:
    import uvicorn

    from kvreg_registry.app import create_app
    from kvreg_registry.services import accounts
    from kvreg_registry.settings import Settings

    from .library import OPERATOR

    app = create_app(Settings(data_dir=tmp_path / "reg"))
    port = _free_port()
    # uvicorn's own access-log format (the default config), its records captured below.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="debug", access_log=True)
    server = uvicorn.Server(config)
    with every_log_record() as logs:
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            with httpx.Client(timeout=10) as client:
                for _ in range(200):
                    try:
                        client.get(f"http://127.0.0.1:{port}/signin")
                        break
                    except httpx.TransportError:
                        threading.Event().wait(0.05)
                with app.state.registry.db.write() as s:
                    accounts.create_user(s, OPERATOR, "root", admin=True)
                    good = accounts.create_token(s, OPERATOR, "root", label="t").token
                bad = "kvreg_" + "Z" * 43
                _exercise(f"http://127.0.0.1:{port}", client, good, bad)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
    access = [line for line in logs.lines if line.startswith("uvicorn.access")]
    assert any("POST /signin" in line for line in access), "uvicorn's access log was not captured"
    assert any("GET /api/v1/namespaces" in line for line in access)
    text = "\n".join(logs.lines)
    for secret in _secrets_of(good) + _secrets_of(bad):
        assert secret not in text


# --- constant-time comparison --------------------------------------------------------------------------


def test_the_token_and_csrf_checks_are_decided_by_compare_digest(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    r = site.library.api("GET", "/namespaces")
    assert r.status_code == 200
    assert any(a == auth_module.hash_token(site.library.admin_token) for a, _ in calls)
    calls.clear()
    r = site.client.post(
        "/admin/namespaces", data={"name": "viaform", "csrf": site.csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    assert (site.csrf.encode(), site.csrf.encode()) in calls
    # With the comparison answering False, a correct CSRF token is refused: it is what decides.
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: False)
    r = site.client.post(
        "/admin/namespaces", data={"name": "viaform2", "csrf": site.csrf}, follow_redirects=False
    )
    assert r.status_code == 403
    r = site.library.api("GET", "/namespaces")
    assert r.status_code == 401


SECRET_WORDS = re.compile(r"token|csrf|secret|hash|digest|cookie|password", re.IGNORECASE)


def _plain_comparisons_of_secrets(path: Path) -> list[str]:
    """``==``/``!=`` in Python (not SQLAlchemy column expressions) where an operand names a secret."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not any(
            isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
        ):
            continue
        left = node.left
        # ``Model.column == value`` builds SQL (a lookup by hash), it compares nothing in Python.
        if (
            isinstance(left, ast.Attribute)
            and isinstance(left.value, ast.Name)
            and left.value.id[:1].isupper()
        ):
            continue
        text = ast.unparse(node)
        if SECRET_WORDS.search(text):
            found.append(f"{path.name}:{node.lineno}: {text}")
    return found


def test_no_plain_equality_compares_secrets_in_auth_and_session() -> None:
    files = [Path(auth_module.__file__), Path(session_module.__file__)]
    problems = [p for f in files for p in _plain_comparisons_of_secrets(f)]
    assert problems == []
    for f in files:
        assert "compare_digest" in f.read_text(encoding="utf-8")


def test_the_source_check_finds_a_plain_comparison(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(token, stored_hash):\n    return hash_token(token) == stored_hash\n")
    assert len(_plain_comparisons_of_secrets(bad)) == 1


# --- security headers ------------------------------------------------------------------------------


def test_every_page_has_the_security_headers(site: Site) -> None:
    for url, r in crawl(site).items():
        if r.headers.get("content-type", "").startswith("text/html"):
            assert_security_headers(r, url, signed_in=True)


def test_error_pages_have_the_security_headers(library: Library) -> None:
    ns = library.namespace()  # public: its errors are not hidden behind a sign-in
    anon = [
        ("GET", "/no-such-page", 404),
        ("GET", f"/ns/{ns}/artifacts/sha256:{'0' * 64}", 404),
        ("GET", f"/ns/{ns}/artifacts/not-a-digest", 400),
        ("GET", "/signout", 405),
        ("POST", "/admin/namespaces", 403),
    ]
    for method, url, status in anon:
        r = library.client.request(method, url, follow_redirects=False)
        assert r.status_code == status, (url, r.status_code)
        assert r.headers["content-type"].startswith("text/html"), url
        assert_security_headers(r, url, signed_in=False)
        assert "no-store" in r.headers["cache-control"]
    sign_in(library.client, library.admin_token)
    for method, url, status in anon:
        r = library.client.request(method, url, follow_redirects=False)
        assert r.status_code == status
        assert_security_headers(r, url, signed_in=True)
    # An anonymous page that needs a sign-in redirects, with the headers too.
    library.client.cookies.clear()
    r = library.client.get("/admin", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/signin")
    assert r.headers["x-content-type-options"] == "nosniff"


# --- hostile artifact text ------------------------------------------------------------------------


def test_hostile_text_is_escaped_on_every_page_that_shows_it(site: Site) -> None:
    audit = site.client.get("/audit?namespace=hostile").text
    seqs = sorted({int(s) for s in re.findall(r'href="/audit/entries/(\d+)"', audit)})
    assert seqs
    must_show = {
        "search results": "/?q=answer",
        "home": "/",
        "artifact page": site.artifact_url(),
        "compare": site.compare_url(),
        "namespace": "/ns/hostile",
        "admin (hold reasons)": "/admin",
    }
    for what, url in must_show.items():
        r = site.client.get(url)
        assert r.status_code == 200, (what, r.status_code)
        assert_no_active_content_from_data(r.text, what)
        assert ESCAPED_MARKER in r.text, f"{what} ({url}) does not show the hostile text at all"
    shown = 0
    for seq in seqs:
        r = site.client.get(f"/audit/entries/{seq}")
        assert r.status_code == 200
        assert_no_active_content_from_data(r.text, f"audit entry {seq}")
        shown += ESCAPED_MARKER in r.text
    assert shown >= 1, "no audit entry shows the hostile hold reason"
    # Hostile text in a request is echoed escaped too (search box, compare fields, a next= target).
    for url in (
        "/?q=" + httpx.QueryParams({"q": PAYLOAD})["q"],
        "/compare?" + str(httpx.QueryParams({"a": PAYLOAD, "b": PAYLOAD})),
        "/signin?" + str(httpx.QueryParams({"next": "/" + PAYLOAD})),
        "/ns/hostile?" + str(httpx.QueryParams({"q": PAYLOAD})),
    ):
        r = site.client.get(url)
        assert_no_active_content_from_data(r.text, url)
    # Every other page reachable from these, too.
    for url, r in crawl(site).items():
        if r.headers.get("content-type", "").startswith("text/html"):
            assert_no_active_content_from_data(r.text, url)


def test_static_files_say_nosniff(library: Library) -> None:
    for path, kind in (("/static/kvreg.css", "text/css"), ("/static/kvreg.js", "text/javascript")):
        r = library.client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith(kind), (path, r.headers["content-type"])
        assert r.headers["x-content-type-options"] == "nosniff", path
    assert library.client.get("/static/../settings.py").status_code == 404
