"""The admin page (/admin) and its form posts: what each visitor sees, that every action goes
through the API's services (same roles, same audit entries), CSRF and origin checks, and a
bounded number of queries."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from kvreg.core.keys import SigningKey as KeyPair
from kvreg_registry.db.models import (
    ApiToken,
    AuditEntry,
    LegalHold,
    Namespace,
    RetentionPolicy,
    Role,
    SigningKey,
    User,
)
from kvreg_registry.web import views_admin

from .library import Library, count_queries

CSRF_INPUT = re.compile(r'name="csrf" value="([^"]+)"')
SECTIONS = ("namespaces", "tokens", "users", "user-tokens", "keys", "retention", "holds", "roles")


# --- helpers -------------------------------------------------------------------------------------


def browser(library: Library, token: str | None = None) -> TestClient:
    """A browser of its own (cookie jar), signed in with ``token`` when given."""
    client = TestClient(library.client.app, base_url="http://testserver")
    if token is not None:
        page = client.get("/signin")
        r = client.post(
            "/signin",
            data={"token": token, "csrf": csrf_of(page.text), "next": "/admin"},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        assert client.cookies.get("kvreg_session")
    return client


def csrf_of(html: str) -> str:
    match = CSRF_INPUT.search(html)
    assert match is not None, "no form with a csrf field on the page"
    return match.group(1)


def admin_page(client: TestClient, **params: Any) -> str:
    r = client.get("/admin", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    return r.text


def post(client: TestClient, path: str, data: dict[str, str], *, csrf: str | None = "page", **kw: Any) -> Any:
    """Post a form as the page would (``csrf="page"``: the token of the admin page)."""
    fields = dict(data)
    if csrf == "page":
        fields["csrf"] = csrf_of(admin_page(client))
    elif csrf is not None:
        fields["csrf"] = csrf
    return client.post(path, data=fields, follow_redirects=False, **kw)


def done(r: Any, section: str, code: str) -> None:
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    assert location.startswith("/admin?") and location.endswith(f"#{section}"), location
    assert f"done={code}" in location, location


def audit(library: Library, type_: str) -> list[dict[str, Any]]:
    with library.app_state.db.read() as s:
        rows = s.scalars(select(AuditEntry.entry).where(AuditEntry.type == type_).order_by(AuditEntry.seq))
        return [json.loads(e) for e in rows]


def log_size(library: Library) -> int:
    with library.app_state.db.read() as s:
        return s.scalar(select(func.count()).select_from(AuditEntry)) or 0


def snapshot(library: Library) -> tuple[Any, ...]:
    """Everything an admin action could change, to prove a refused one changed nothing."""
    with library.app_state.db.read() as s:
        return (
            log_size(library),
            s.execute(select(Namespace.name, Namespace.public).order_by(Namespace.id)).all(),
            s.execute(select(SigningKey.keyid, SigningKey.revoked_at).order_by(SigningKey.id)).all(),
            s.execute(select(LegalHold.id, LegalHold.lifted_at).order_by(LegalHold.id)).all(),
            s.execute(select(RetentionPolicy.namespace_id, RetentionPolicy.keep_versions)).all(),
            s.execute(select(Role.user_id, Role.namespace_id, Role.role).order_by(Role.user_id)).all(),
            s.execute(select(ApiToken.id, ApiToken.revoked_at).order_by(ApiToken.id)).all(),
            s.execute(select(User.name).order_by(User.id)).all(),
        )


def section_ids(html: str) -> set[str]:
    return set(re.findall(r'<section id="([a-z-]+)"', html))


# --- access --------------------------------------------------------------------------------------


def test_anonymous_visitor_is_sent_to_sign_in(library: Library) -> None:
    client = browser(library)
    r = client.get("/admin", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/signin?next=/admin"


def test_server_admin_sees_every_section_and_form(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    client = browser(library, library.admin_token)
    html = admin_page(client)
    assert section_ids(html) == set(SECTIONS)
    for form in (
        "namespace-create",
        "token-create",
        "user-create",
        "user-token-create",
        f"visibility-{ns}",
        f"key-register-{ns}",
        f"retention-set-{ns}",
        f"hold-place-{ns}",
        f"role-set-{ns}",
    ):
        match = re.search(rf'<form id="{form}"[^>]*>', html)
        assert match is not None, form
        assert 'method="post"' in match.group(0)
    # Every form that posts carries the session's CSRF token (the namespace and token filters
    # GET); none carries a token hash.
    forms = len(re.findall(r'<form [^>]*method="post"', html))
    assert forms == html.count("<form") - 2
    assert forms == len(re.findall(r'name="csrf" value="[^"]+"', html))
    with library.app_state.db.read() as s:
        hashes = s.scalars(select(ApiToken.token_hash)).all()
    assert hashes and not any(h in html for h in hashes)
    assert library.admin_token not in html


def test_admin_creates_a_namespace_and_toggles_its_visibility(library: Library) -> None:
    client = browser(library, library.admin_token)
    r = post(client, "/admin/namespaces", {"name": "evals", "description": "<script>x()</script>"})
    done(r, "namespaces", "namespace-created")
    html = admin_page(client, done="namespace-created", subject="evals")
    assert 'id="ns-evals"' in html
    assert "Namespace evals created." in html
    assert "<script>x()</script>" not in html and "&lt;script&gt;x()&lt;/script&gt;" in html
    with library.app_state.db.read() as s:
        ns = s.scalar(select(Namespace).where(Namespace.name == "evals"))
        assert ns is not None and ns.public is False
    [entry] = audit(library, "namespace.created")
    assert entry["actor"] == "root" and entry["namespace"] == "evals"

    done(
        post(client, "/admin/namespaces/evals/visibility", {"public": "1", "confirm": "yes"}),
        "namespaces",
        "namespace-visibility",
    )
    with library.app_state.db.read() as s:
        assert s.scalar(select(Namespace.public).where(Namespace.name == "evals")) is True
    [entry] = audit(library, "namespace.visibility")
    assert entry["old"] is False and entry["new"] is True
    assert "Make private" in admin_page(client)

    # The service's rules apply: an existing name is a 409 page, an invalid one a 400 page.
    r = post(client, "/admin/namespaces", {"name": "evals"})
    assert r.status_code == 409 and "text/html" in r.headers["content-type"]
    r = post(client, "/admin/namespaces", {"name": "Not Valid"})
    assert r.status_code == 400
    assert len(audit(library, "namespace.created")) == 1


def test_a_new_token_is_shown_once_and_works(library: Library) -> None:
    client = browser(library, library.admin_token)
    r = post(client, "/admin/tokens", {"label": "laptop <b>", "expires_in_days": "30"})
    assert r.status_code == 200, r.text
    token = re.search(r'<code id="new-token" data-copy>(kvreg_[A-Za-z0-9_-]+)</code>', r.text)
    assert token is not None
    assert 'id="new-token-warning"' in r.text and "Copy this token now" in r.text
    assert "laptop &lt;b&gt;" in r.text
    assert r.headers["cache-control"] == "no-store"
    # It is a real token of root's...
    who = library.api("GET", "/whoami", token.group(1)).json()
    assert who["user"] == "root"
    # ...listed (label, expiry) on the admin page, which never shows the token again.
    html = admin_page(client)
    assert token.group(1) not in html
    assert "laptop &lt;b&gt;" in html
    [entry] = [e for e in audit(library, "token.created") if e["new"]["label"] == "laptop <b>"]
    assert entry["actor"] == "root" and entry["new"]["user"] == "root"
    with library.app_state.db.read() as s:
        row = s.get(ApiToken, entry["new"]["token_id"])
        assert row is not None and row.expires_at is not None and row.token_hash not in html

    # Revoking it from the page: the API refuses it from then on.
    token_id = entry["new"]["token_id"]
    done(post(client, f"/admin/tokens/{token_id}/revoke", {"confirm": "yes"}), "tokens", "token-revoked")
    assert library.api("GET", "/whoami", token.group(1)).status_code == 401
    [revoked] = audit(library, "token.revoked")
    assert revoked["old"] == {"token_id": token_id} and revoked["actor"] == "root"
    assert f'id="token-revoke-{token_id}"' not in admin_page(client)

    # Bad expiry: a 400 page, no token.
    before = snapshot(library)
    assert post(client, "/admin/tokens", {"expires_in_days": "0"}).status_code == 400
    assert post(client, "/admin/tokens", {"expires_in_days": "abc"}).status_code == 400
    assert snapshot(library) == before


def test_server_admin_creates_a_user_and_a_token_for_them(library: Library) -> None:
    client = browser(library, library.admin_token)
    done(post(client, "/admin/users", {"name": "dana"}), "users", "user-created")
    assert 'id="user-dana"' in admin_page(client)
    [entry] = [e for e in audit(library, "user.created") if e["new"]["user"] == "dana"]
    assert entry["new"] == {"user": "dana", "admin": False} and entry["actor"] == "root"
    r = post(client, "/admin/tokens", {"user": "dana", "label": "ci"})
    assert r.status_code == 200
    token = re.search(r'id="new-token" data-copy>([^<]+)<', r.text)
    assert token is not None
    assert library.api("GET", "/whoami", token.group(1)).json()["user"] == "dana"
    assert 'id="new-token-user">dana<' in r.text
    # Not a user: the service's 404.
    assert post(client, "/admin/tokens", {"user": "nobody"}).status_code == 404


def test_admin_registers_and_revokes_a_signing_key(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    client = browser(library, library.admin_token)
    pair = KeyPair.generate()
    keyid = pair.public_key.keyid
    r = post(client, f"/admin/namespaces/{ns}/keys", {"public_key": pair.public_key.to_text()})
    done(r, "keys", "key-registered")
    html = admin_page(client)
    assert str(keyid)[:19] in html
    with library.app_state.db.read() as s:
        row = s.scalar(select(SigningKey).where(SigningKey.keyid == str(keyid)))
        assert row is not None and row.revoked_at is None
    [entry] = [e for e in audit(library, "key.registered") if e["subjects"] == [str(keyid)]]
    assert entry["actor"] == "root" and entry["namespace"] == ns

    # The same key again: the service's 409; a malformed key: 400.
    assert (
        post(client, f"/admin/namespaces/{ns}/keys", {"public_key": pair.public_key.to_text()}).status_code
        == 409
    )
    assert post(client, f"/admin/namespaces/{ns}/keys", {"public_key": "ed25519:nope"}).status_code == 400

    done(
        post(client, f"/admin/namespaces/{ns}/keys/revoke", {"keyid": str(keyid), "confirm": "yes"}),
        "keys",
        "key-revoked",
    )
    with library.app_state.db.read() as s:
        assert s.scalar(select(SigningKey.revoked_at).where(SigningKey.keyid == str(keyid))) is not None
    [entry] = audit(library, "key.revoked")
    assert entry["subjects"] == [str(keyid)] and entry["namespace"] == ns
    # Revoked keys are listed without a revoke button.
    assert html.count(f'value="{keyid}"') == 1
    assert f'value="{keyid}"' not in admin_page(client)


def test_admin_sets_and_clears_retention(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    client = browser(library, library.admin_token)
    done(
        post(client, f"/admin/namespaces/{ns}/retention", {"keep_versions": "7", "keep_days": ""}),
        "retention",
        "retention-set",
    )
    html = admin_page(client)
    assert "the <strong>7</strong> newest envelopes" in html
    with library.app_state.db.read() as s:
        policy = s.scalar(select(RetentionPolicy))
        assert policy is not None and policy.keep_versions == 7 and policy.keep_days is None
    [entry] = audit(library, "retention.set")
    assert entry["new"] == {"keep_versions": 7, "keep_days": None} and entry["actor"] == "root"
    assert f'id="retention-clear-{ns}"' in html

    # Neither rule: the service refuses (400); out of range: 400.
    assert (
        post(client, f"/admin/namespaces/{ns}/retention", {"keep_versions": "", "keep_days": ""}).status_code
        == 400
    )
    assert post(client, f"/admin/namespaces/{ns}/retention", {"keep_days": "0"}).status_code == 400

    done(post(client, f"/admin/namespaces/{ns}/retention/clear", {}), "retention", "retention-cleared")
    with library.app_state.db.read() as s:
        assert s.scalar(select(RetentionPolicy)) is None
    [entry] = audit(library, "retention.cleared")
    assert entry["old"] == {"keep_versions": 7, "keep_days": None}
    assert "No policy: everything is kept." in admin_page(client)


def test_admin_places_and_lifts_holds(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    published = library.publish(ns, "p07", "the answer is forty two", title="p07")
    client = browser(library, library.admin_token)

    reason = "matter <script>alert(1)</script>"
    done(post(client, f"/admin/namespaces/{ns}/holds", {"ref": "", "reason": reason}), "holds", "hold-placed")
    done(
        post(client, f"/admin/namespaces/{ns}/holds", {"ref": "p07", "reason": "ticket 9"}),
        "holds",
        "hold-placed",
    )
    html = admin_page(client)
    assert "<script>alert(1)</script>" not in html
    assert "matter &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "whole namespace" in html and f"{ns}/p07" in html
    placed = audit(library, "hold.placed")
    assert [(e["actor"], e["namespace"], e["new"]["ref"], e["new"]["reason"]) for e in placed] == [
        ("root", ns, None, reason),
        ("root", ns, "p07", "ticket 9"),
    ]
    assert placed[1]["subjects"] == [str(published.digest)]
    # The hold is the API's: the held ref cannot be moved or deleted.
    etag = library.api("GET", f"/namespaces/{ns}/refs/p07").headers["etag"]
    r = library.api("DELETE", f"/namespaces/{ns}/refs/p07", headers={"If-Match": etag})
    assert r.status_code == 403 and r.json()["error"]["code"] == "LEGAL_HOLD"

    # A reason is required; a missing ref is the service's 404.
    hold_id = placed[0]["new"]["id"]
    before = snapshot(library)
    assert post(client, f"/admin/namespaces/{ns}/holds", {"ref": "", "reason": "  "}).status_code == 400
    assert post(client, f"/admin/namespaces/{ns}/holds", {"ref": "nope", "reason": "x"}).status_code == 404
    assert post(client, f"/admin/namespaces/{ns}/holds/{hold_id}/lift", {"reason": ""}).status_code == 400
    assert snapshot(library) == before

    r = post(client, f"/admin/namespaces/{ns}/holds/{hold_id}/lift", {"reason": "matter closed"})
    done(r, "holds", "hold-lifted")
    with library.app_state.db.read() as s:
        hold = s.get(LegalHold, hold_id)
        assert hold is not None and hold.lifted_at is not None and hold.lifted_by == "root"
    [lifted] = audit(library, "hold.lifted")
    assert lifted["details"]["reason"] == "matter closed" and lifted["actor"] == "root"
    html = admin_page(client)
    assert f'id="hold-{hold_id}"' not in html and f'id="hold-{placed[1]["new"]["id"]}"' in html
    # A hold of another namespace cannot be lifted through this one.
    other = library.namespace("other", public=False)
    r = post(client, f"/admin/namespaces/{other}/holds/{placed[1]['new']['id']}/lift", {"reason": "x"})
    assert r.status_code == 404


def test_admin_grants_and_removes_roles(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    client = browser(library, library.admin_token)
    done(post(client, "/admin/users", {"name": "erin"}), "users", "user-created")
    done(
        post(client, f"/admin/namespaces/{ns}/roles", {"user": "erin", "role": "write"}), "roles", "role-set"
    )
    html = admin_page(client)
    roles_block = html[html.index(f'id="roles-{ns}"') :]
    assert "<code>erin</code>" in roles_block and ">write<" in roles_block
    with library.app_state.db.read() as s:
        assert (
            s.scalar(select(Role.role).join(User, User.id == Role.user_id).where(User.name == "erin"))
            == "write"
        )
    [entry] = audit(library, "role.set")
    assert entry["new"] == {"user": "erin", "role": "write"} and entry["namespace"] == ns

    assert post(client, f"/admin/namespaces/{ns}/roles", {"user": "erin", "role": "owner"}).status_code == 400
    assert post(client, f"/admin/namespaces/{ns}/roles", {"user": "ghost", "role": "read"}).status_code == 404

    done(
        post(client, f"/admin/namespaces/{ns}/roles/remove", {"user": "erin", "confirm": "yes"}),
        "roles",
        "role-removed",
    )
    with library.app_state.db.read() as s:
        assert s.scalar(select(func.count()).select_from(Role)) == 0
    [entry] = audit(library, "role.removed")
    assert entry["old"] == {"user": "erin"}


# --- what other visitors see and may do -------------------------------------------------------------


def test_a_reader_sees_no_admin_forms_and_forged_posts_are_refused(library: Library) -> None:
    ns = library.namespace("readable-lab", public=False)
    library.publish(ns, "p01", "one two three four five")
    reader = library.user({ns: "read"})
    client = browser(library, reader)
    html = admin_page(client)
    assert section_ids(html) == {"namespaces", "tokens"}
    assert 'id="no-namespaces"' in html
    assert ns not in html and '<tr id="ns-' not in html
    assert 'id="namespace-create"' not in html and 'id="user-create"' not in html
    assert 'id="token-create"' in html

    before = snapshot(library)
    pair = KeyPair.generate()
    forged = [
        (f"/admin/namespaces/{ns}/holds", {"ref": "", "reason": "sneaky"}),
        (f"/admin/namespaces/{ns}/keys", {"public_key": pair.public_key.to_text()}),
        (f"/admin/namespaces/{ns}/keys/revoke", {"keyid": str(library.key.public_key.keyid)}),
        (f"/admin/namespaces/{ns}/retention", {"keep_versions": "1"}),
        (f"/admin/namespaces/{ns}/retention/clear", {}),
        (f"/admin/namespaces/{ns}/roles", {"user": "root", "role": "read"}),
        (f"/admin/namespaces/{ns}/roles/remove", {"user": "root"}),
        (f"/admin/namespaces/{ns}/visibility", {"public": "1"}),
        ("/admin/namespaces", {"name": "mine"}),
        ("/admin/users", {"name": "mallory", "admin": "on"}),
        ("/admin/tokens", {"user": "root", "label": "stolen"}),
    ]
    for path, data in forged:
        r = post(client, path, data)
        assert r.status_code == 403, (path, r.status_code, r.text)
        assert "text/html" in r.headers["content-type"]
        assert 'id="error-message"' in r.text
    # Someone else's token: 403 too.
    with library.app_state.db.read() as s:
        root_token = s.scalar(
            select(ApiToken.id).join(User, User.id == ApiToken.user_id).where(User.name == "root")
        )
    assert post(client, f"/admin/tokens/{root_token}/revoke", {}).status_code == 403
    assert snapshot(library) == before

    # A private namespace the visitor cannot read is a 404, as in the API.
    hidden = library.namespace("hidden", public=False)
    before = snapshot(library)
    for path in (f"/admin/namespaces/{hidden}/holds", f"/admin/namespaces/{hidden}/retention/clear"):
        r = post(client, path, {"reason": "x"})
        assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    assert snapshot(library) == before


def test_a_namespace_admin_sees_only_their_namespaces(library: Library) -> None:
    mine = library.namespace("mine", public=False)
    theirs = library.namespace("theirs", public=True)
    token = library.user({mine: "admin", theirs: "write"})
    client = browser(library, token)
    html = admin_page(client)
    assert section_ids(html) == {"namespaces", "tokens", "keys", "retention", "holds", "roles"}
    assert f'id="hold-place-{mine}"' in html and f'id="hold-place-{theirs}"' not in html
    assert f'id="ns-{theirs}"' not in html
    # Server-admin forms are not offered (and visibility is not either).
    assert 'id="namespace-create"' not in html and 'id="users"' not in html
    assert f'id="visibility-{mine}"' not in html
    # They act on their namespace; the log names them.
    done(post(client, f"/admin/namespaces/{mine}/holds", {"reason": "audit"}), "holds", "hold-placed")
    [entry] = audit(library, "hold.placed")
    assert entry["actor"].startswith("u") and entry["namespace"] == mine
    # Write access to another namespace does not make them its admin.
    before = snapshot(library)
    assert post(client, f"/admin/namespaces/{theirs}/holds", {"reason": "x"}).status_code == 403
    assert snapshot(library) == before


# --- CSRF and origin --------------------------------------------------------------------------------


def test_posts_without_the_csrf_token_or_from_another_site_are_refused(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    client = browser(library, library.admin_token)
    good = csrf_of(admin_page(client))
    other = browser(library, library.user(admin=True))
    before = snapshot(library)
    actions = [
        (f"/admin/namespaces/{ns}/holds", {"reason": "csrf"}),
        (f"/admin/namespaces/{ns}/retention", {"keep_versions": "3"}),
        ("/admin/namespaces", {"name": "csrf-ns"}),
        ("/admin/tokens", {"label": "csrf"}),
        (f"/admin/namespaces/{ns}/roles", {"user": "root", "role": "read"}),
    ]
    for path, data in actions:
        for csrf in (None, "", "x" * 43, good[:-1] + ("A" if good[-1] != "A" else "B")):
            r = post(client, path, data, csrf=csrf)
            assert r.status_code == 403, (path, csrf, r.text)
            assert "CSRF" in r.text
        r = post(client, path, data, csrf=good, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "another site" in r.text
        r = post(client, path, data, csrf=good, headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
    # Another signed-in browser's token is not this one's.
    assert (
        post(
            client, f"/admin/namespaces/{ns}/holds", {"reason": "x"}, csrf=csrf_of(admin_page(other))
        ).status_code
        == 403
    )
    assert snapshot(library) == before
    # The same post with the right token and this site's origin goes through.
    r = post(
        client,
        f"/admin/namespaces/{ns}/holds",
        {"reason": "ok"},
        csrf=good,
        headers={"Origin": "http://testserver"},
    )
    done(r, "holds", "hold-placed")


def test_anonymous_posts_change_nothing(library: Library) -> None:
    ns = library.namespace("lab", public=True)
    client = browser(library)
    page = client.get("/signin")
    before = snapshot(library)
    r = client.post(
        f"/admin/namespaces/{ns}/holds",
        data={"reason": "x", "csrf": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert r.status_code == 401
    assert client.post("/admin/namespaces", data={"name": "x"}, follow_redirects=False).status_code == 403
    assert snapshot(library) == before


def test_done_messages_are_fixed_text(library: Library) -> None:
    client = browser(library, library.admin_token)
    html = admin_page(client, done="hold-placed", subject="<script>alert(1)</script>")
    assert "<script>alert(1)</script>" not in html and "alert(1)" not in html
    assert "Legal hold placed in namespace." in html
    html = admin_page(client, done="<b>pwned</b>")
    assert 'id="admin-done"' not in html and "pwned" not in html


# --- bounded queries ----------------------------------------------------------------------------------


def _seed(library: Library, n: int) -> None:
    """``n`` namespaces, each with two keys, a retention policy, two holds and two members."""
    client = browser(library, library.admin_token)
    for _ in range(2):
        library.user()
    with library.app_state.db.read() as s:
        names = s.scalars(select(User.name).order_by(User.id.desc()).limit(2)).all()
    for i in range(n):
        ns = library.namespace(f"ns{i:03d}", public=bool(i % 2))
        extra = KeyPair.generate()
        assert (
            library.api(
                "POST", f"/namespaces/{ns}/keys", json={"public_key": extra.public_key.to_text()}
            ).status_code
            == 201
        )
        assert (
            library.api("PUT", f"/namespaces/{ns}/retention", json={"keep_versions": i + 1}).status_code
            == 200
        )
        for reason in ("a", "b"):
            assert library.api("POST", f"/namespaces/{ns}/holds", json={"reason": reason}).status_code == 201
        for name in names:
            assert (
                library.api("PUT", f"/namespaces/{ns}/roles/{name}", json={"role": "write"}).status_code
                == 204
            )
    post(client, "/admin/tokens", {"label": "extra"})


def _count(library: Library, token: str, **params: Any) -> tuple[int, str]:
    client = browser(library, token)
    admin_page(client, **params)  # warm up (the first request may differ)
    with count_queries(library) as statements:
        html = admin_page(client, **params)
    return len(statements), html


def test_bounded_queries_with_2_and_20_namespaces(tmp_path: Any) -> None:
    from .conftest import open_library

    counts = []
    for n in (2, 20):
        gen = open_library(tmp_path / f"r{n}")
        library = next(gen)
        try:
            _seed(library, n)
            count, html = _count(library, library.admin_token)
            shown = min(n, views_admin.NAMESPACES_PER_PAGE)  # one page of namespaces
            assert html.count('id="hold-place-') == shown
            assert html.count('<tr id="hold-') == 2 * shown
            assert html.count('aria-label="Revoke key') == 2 * shown
            counts.append(count)
            # A namespace admin of every namespace: the same bound.
            admin_of_all = library.user({f"ns{i:03d}": "admin" for i in range(n)})
            count_ns_admin, html = _count(library, admin_of_all)
            assert html.count('id="role-set-') == min(n, views_admin.NAMESPACES_PER_PAGE)
            counts.append(count_ns_admin)
        finally:
            gen.close()
    assert counts[0] == counts[2], counts
    assert counts[1] == counts[3], counts
    assert max(counts) <= 15, counts


def test_namespaces_are_paginated(library: Library) -> None:
    n = views_admin.NAMESPACES_PER_PAGE + 3
    for i in range(n):
        library.namespace(f"p{i:03d}", public=False)
    client = browser(library, library.admin_token)
    first = admin_page(client)
    assert first.count('<tr id="ns-') == views_admin.NAMESPACES_PER_PAGE
    assert 'id="ns-next"' in first and 'id="ns-prev"' not in first
    second = admin_page(client, page=2)
    assert second.count('<tr id="ns-') == 3
    assert f'id="ns-p{n - 1:03d}"' in second and 'id="ns-p000"' not in second
    assert second.count('id="key-register-') == 3
    assert 'id="ns-prev"' in second
    # Out-of-range pages show the last page.
    assert admin_page(client, page=99).count('<tr id="ns-') == 3


# --- confirmation of destructive actions, and the namespace filter (issue 16) ---------------------


def _confirm_page(r: Any) -> str:
    """The confirmation page a first post answers with: nothing done yet, a form to do it."""
    assert r.status_code == 200, r.text
    assert 'id="confirm"' in r.text and 'name="confirm" value="yes"' in r.text
    assert 'id="confirm-cancel"' in r.text
    return str(r.text)


def _confirm(client: TestClient, html: str) -> Any:
    """Submit the confirmation page's form with its fields, as the browser would."""
    form = re.search(r'<form id="confirm"[^>]*action="([^"]+)"[^>]*>(.*?)</form>', html, re.S)
    assert form is not None
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(2)))
    return client.post(form.group(1), data=fields, follow_redirects=False)


def test_destructive_actions_ask_for_confirmation_first(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    library.api("POST", f"/namespaces/{ns}/keys", json={"public_key": library.key.public_key.to_text()})
    erin = library.user({ns: "read"})
    assert erin
    client = browser(library, library.admin_token)
    with library.app_state.db.read() as s:
        session_token = s.scalar(select(ApiToken.id).order_by(ApiToken.id))
        erins = s.scalar(select(ApiToken.id).order_by(ApiToken.id.desc()))
    keyid = str(library.key.public_key.keyid)
    steps = [
        (f"/admin/namespaces/{ns}/visibility", {"public": "1"}, "namespace.visibility", "Make lab public?"),
        (f"/admin/namespaces/{ns}/keys/revoke", {"keyid": keyid}, "key.revoked", "Revoke a signing key"),
        (f"/admin/tokens/{erins}/revoke", {}, "token.revoked", f"Revoke token {erins}?"),
    ]
    with library.app_state.db.read() as s:
        member = s.scalar(select(User.name).join(Role, Role.user_id == User.id))
    steps.append(
        (f"/admin/namespaces/{ns}/roles/remove", {"user": str(member)}, "role.removed", "Remove the role")
    )
    for path, data, kind, heading in steps:
        before = snapshot(library)
        html = _confirm_page(post(client, path, data))
        assert heading in html, (path, heading)
        assert snapshot(library) == before, f"{path} acted before it was confirmed"
        assert 'id="confirm-warning"' not in html
        r = _confirm(client, html)
        assert r.status_code == 303 and "done=" in r.headers["location"], r.text
        assert len(audit(library, kind)) == 1, kind

    # The token in use: the confirmation says so; confirming signs this browser out.
    html = _confirm_page(post(client, f"/admin/tokens/{session_token}/revoke", {}))
    assert "This is the token this session signed in with" in html
    _confirm(client, html)
    assert client.get("/admin", follow_redirects=False).status_code == 303  # back to sign-in

    # A confirmation still needs the CSRF token.
    other = browser(library, library.user(admin=True))
    r = post(other, f"/admin/namespaces/{ns}/visibility", {"public": "0", "confirm": "yes"}, csrf=None)
    assert r.status_code == 403


def test_the_namespace_filter_narrows_every_section(library: Library) -> None:
    for name in ("alpha-lab", "beta-lab", "gamma"):
        library.namespace(name, public=False)
    client = browser(library, library.admin_token)
    html = admin_page(client, ns="lab")
    assert html.count('<tr id="ns-') == 2 and 'id="ns-gamma"' not in html
    assert html.count('id="key-register-') == 2 and 'id="role-set-gamma"' not in html
    assert 'value="lab"' in html and 'id="admin-ns-clear"' in html
    html = admin_page(client, ns="nothing-like-it")
    assert 'id="no-namespaces"' in html and "nothing-like-it" in html
    assert 'href="/admin?ns=gamma#keys"' in admin_page(client)
