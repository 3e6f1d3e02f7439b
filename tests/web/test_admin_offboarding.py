"""Offboarding on the admin page: users with their state and a disable/enable action, every user's
tokens with revoke, each through the confirmation step, the CSRF check and the services (the
same roles, the same audit entries as ``kvreg-admin``)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select

from kvreg_registry.db.models import ApiToken, User
from kvreg_registry.services import accounts

from .library import OPERATOR, Library
from .test_admin_pages import _confirm, _confirm_page, admin_page, audit, browser, done, post, snapshot


def _name_of(library: Library, token: str) -> str:
    r = library.api("GET", "/whoami", token)
    assert r.status_code == 200, r.text
    return str(r.json()["user"])


def _token_ids(library: Library, user: str) -> list[int]:
    with library.app_state.db.read() as s:
        return list(
            s.scalars(select(ApiToken.id).join(User, User.id == ApiToken.user_id).where(User.name == user))
        )


def _signed_in(client: TestClient) -> bool:
    return client.get("/admin", follow_redirects=False).status_code == 200


def test_a_server_admin_disables_and_enables_a_user(library: Library) -> None:
    token = library.user()
    name = _name_of(library, token)
    theirs = browser(library, token)
    assert _signed_in(theirs)
    client = browser(library, library.admin_token)
    html = admin_page(client)
    row = re.search(rf'<tr id="user-{name}">.*?</tr>', html, re.S)
    assert row is not None and "active" in row.group(0)
    assert f'id="user-disable-{name}"' in row.group(
        0
    ) and f'action="/admin/users/{name}/disable"' in row.group(0)
    assert 'id="user-disable-root"' in html  # offered, and refused (below)

    # The first post only asks, naming what happens; nothing changes until it is confirmed.
    before = snapshot(library)
    page = _confirm_page(post(client, f"/admin/users/{name}/disable", {}))
    assert f"Disable user {name}?" in page and "1 neither revoked nor expired" in page
    assert "Nothing is revoked" in page and 'id="confirm-warning"' not in page
    assert snapshot(library) == before and _signed_in(theirs)
    r = _confirm(client, page)
    done(r, "users", "user-disabled")
    assert library.api("GET", "/whoami", token).headers["x-kvreg-error-code"] == "USER_DISABLED"
    assert not _signed_in(theirs)  # their web session ended
    [entry] = audit(library, "user.disabled")
    assert entry["actor"] == "root" and entry["new"] == {"user": name}
    assert entry["details"] == {"active_tokens": 1, "web_sessions_ended": 1}
    html = admin_page(client, done="user-disabled", subject=name)
    assert f"User {name} disabled" in html
    row = re.search(rf'<tr id="user-{name}">.*?</tr>', html, re.S)
    assert row is not None and f'id="user-enable-{name}"' in row.group(0)
    # a "disabled" badge (red), its exact time on hover
    assert re.search(r'data-status="disabled" class="badge bad" title="20\d\d-\d\d-\d\d ', row.group(0))

    # Enabling, confirmed the same way: the token works again (the old web session stays ended).
    page = _confirm_page(post(client, f"/admin/users/{name}/enable", {}))
    assert f"Enable user {name} again?" in page and "1 token(s)" in page
    assert library.api("GET", "/whoami", token).status_code == 401
    done(_confirm(client, page), "users", "user-enabled")
    assert _name_of(library, token) == name and not _signed_in(theirs)
    [entry] = audit(library, "user.enabled")
    assert entry["actor"] == "root" and entry["new"] == {"user": name}
    assert _signed_in(browser(library, token))


def test_disabling_yourself_warns_and_the_last_admin_is_refused(library: Library) -> None:
    client = browser(library, library.admin_token)
    before = snapshot(library)
    # The last server admin: refused at the first post already, and when confirmed directly.
    for data in ({}, {"confirm": "yes"}):
        r = post(client, "/admin/users/root/disable", data)
        assert r.status_code == 403 and "last server admin" in r.text, r.text
    assert snapshot(library) == before and _signed_in(client)
    # With a second admin, an admin may disable themself: the page says what it means for them.
    other = library.user(admin=True)
    page = _confirm_page(post(client, "/admin/users/root/disable", {}))
    assert "This is your own user" in page
    done(_confirm(client, page), "users", "user-disabled")
    assert not _signed_in(client)
    # The other admin cannot be disabled now: the last one enabled.
    second = browser(library, other)
    r = post(second, f"/admin/users/{_name_of(library, other)}/disable", {"confirm": "yes"})
    assert r.status_code == 403 and "last server admin" in r.text
    done(
        _confirm(second, _confirm_page(post(second, "/admin/users/root/enable", {}))), "users", "user-enabled"
    )
    assert library.api("GET", "/whoami").status_code == 200


def test_only_server_admins_disable_users_or_see_every_token(library: Library) -> None:
    ns = library.namespace("lab", public=False)
    ns_admin = library.user({ns: "admin"})
    target = library.user({ns: "read"})
    name = _name_of(library, target)
    client = browser(library, ns_admin)
    html = admin_page(client)
    assert 'id="user-tokens"' not in html and "/disable" not in html and 'id="users"' not in html
    before = snapshot(library)
    for path in (f"/admin/users/{name}/disable", f"/admin/users/{name}/enable"):
        for data in ({}, {"confirm": "yes"}):
            assert post(client, path, data).status_code == 403, (path, data)
    [theirs] = _token_ids(library, name)
    assert post(client, f"/admin/tokens/{theirs}/revoke", {}).status_code == 403
    assert admin_page(client, token_user=name).count(f"token-{theirs}") == 0
    assert snapshot(library) == before
    # A server admin: no such user is a 404, a bad name a 400.
    admin = browser(library, library.admin_token)
    assert post(admin, "/admin/users/nobody/disable", {}).status_code == 404
    assert post(admin, "/admin/users/nobody/disable", {"confirm": "yes"}).status_code == 404
    assert post(admin, "/admin/users/Bad..Name/disable", {}).status_code in (400, 404)


def test_every_users_tokens_are_listed_and_revoked_with_confirmation(library: Library) -> None:
    token = library.user()
    name = _name_of(library, token)
    with library.app_state.db.write() as s:
        accounts.create_token(s, OPERATOR, name, label="ci <runner>")
    old, ci = _token_ids(library, name)
    client = browser(library, library.admin_token)
    html = admin_page(client)
    section = html.split('id="user-tokens"', 1)[1].split("</section>", 1)[0]
    for tid in (old, ci):
        row = re.search(rf'<tr id="user-token-{tid}">.*?</tr>', section, re.S)
        assert row is not None and f"<code>{name}</code>" in row.group(0)
        assert f'id="user-token-revoke-{tid}"' in row.group(0)
    assert "ci &lt;runner&gt;" in section and "<code>root</code>" in section
    with library.app_state.db.read() as s:
        hashes = s.scalars(select(ApiToken.token_hash)).all()
    assert not any(h in html for h in hashes) and token not in html

    # One user's only, by the link in the users table.
    assert f'href="/admin?token_user={name}#user-tokens"' in html
    mine = admin_page(client, token_user=name)
    listed = mine.split('id="user-tokens"', 1)[1].split("</section>", 1)[0]
    assert "<code>root</code>" not in listed and listed.count('<tr id="user-token-') == 2
    assert "There is no user" in admin_page(client, token_user="nobody")

    # Revoking another user's token: the confirmation names its owner; then it is refused.
    before = snapshot(library)
    page = _confirm_page(post(client, f"/admin/tokens/{old}/revoke", {}))
    assert f"Token {old} (web tests) of user {name} will stop working" in page
    assert f'href="/admin?token_user={name}#user-tokens"' in page  # Cancel goes back to the list
    assert snapshot(library) == before
    done(_confirm(client, page), "tokens", "token-revoked")
    assert library.api("GET", "/whoami", token).status_code == 401
    [entry] = audit(library, "token.revoked")
    assert entry["old"] == {"token_id": old} and entry["actor"] == "root"
    # Active ones by default; revoked and expired ones too when asked.
    listed = admin_page(client, token_user=name).split('id="user-tokens"', 1)[1]
    assert f'id="user-token-{old}"' not in listed and f'id="user-token-{ci}"' in listed
    every = admin_page(client, token_user=name, token_all="1").split('id="user-tokens"', 1)[1]
    row = re.search(rf'<tr id="user-token-{old}">.*?</tr>', every, re.S)
    assert row is not None and "user-token-revoke" not in row.group(0)
    assert re.search(r'data-status="revoked" class="badge bad" title="20\d\d-\d\d-\d\d ', row.group(0))


def test_the_admin_page_stays_within_its_query_bound_with_many_tokens(library: Library) -> None:
    from .library import count_queries

    for _ in range(3):
        library.user()
    client = browser(library, library.admin_token)
    admin_page(client)
    counts = []
    for params in ({}, {"token_user": "root"}, {"token_all": "1"}):
        with count_queries(library) as statements:
            admin_page(client, **params)
        counts.append(len(statements))
    with library.app_state.db.write() as s:
        for i in range(30):
            accounts.create_token(s, OPERATOR, "root", label=f"extra {i}")
    with count_queries(library) as statements:
        html = admin_page(client)
    assert len(statements) == counts[0], statements
    assert max(counts) <= 16, counts
    assert html.count('<tr id="user-token-') == min(30 + 4, 100)
