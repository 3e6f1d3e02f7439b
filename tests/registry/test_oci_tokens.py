"""The scoped tokens of the ``/v2/`` token flow: what is granted, where a token is accepted, its realm.

In process (``TestClient`` of the real app) on SQLite and PostgreSQL (``conftest.lib``).
``GET /v2/token`` must hand out a short-lived JWT that covers only the repositories asked
for and only ``pull`` of those the caller may read (the Docker registry token
specification), never the caller's API token; every ``/v2/`` route must accept it on those
repositories only, refuse it once expired, forged or its API token revoked, and name the
token endpoint with a realm that never sends credentials in clear off loopback.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from kvreg.core.errors import ConfigError
from kvreg.core.keys import SigningKey
from kvreg_registry.api import oci_errors, oci_tokens
from kvreg_registry.app import create_app
from kvreg_registry.db.models import ApiToken, User
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings
from remote.helpers import build_artifact
from web.library import OPERATOR, Library

from .test_oci_pull import basic, get, oci_error


def publish(lib: Library, *, public: bool) -> str:
    """A namespace with one artifact at ref ``answer``."""
    ns = lib.namespace(public=public)
    lib.push(ns, "answer", build_artifact(lib.key, token_count=8, block_size=4, chunk_bytes=500))
    return ns


def token_answer(lib: Library, *scopes: str, auth: str | None = None, **params: Any) -> dict[str, Any]:
    query: dict[str, Any] = {"service": "kvreg", **params}
    if scopes:
        query["scope"] = list(scopes)
    r = get(lib, "/v2/token", params=query, auth=auth)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    answer: dict[str, Any] = r.json()
    assert set(answer) == {"token", "access_token", "expires_in", "issued_at"}
    assert answer["token"] == answer["access_token"]
    return answer


def token_of(lib: Library, *scopes: str, auth: str | None = None) -> str:
    token: str = token_answer(lib, *scopes, auth=auth)["token"]
    return token


def access_of(token: str) -> dict[str, list[str]]:
    """The token's ``access`` as ``{"type:name": actions}`` (read without checking the signature)."""
    claims = jwt.decode(token, options={"verify_signature": False})
    return {f"{a['type']}:{a['name']}": a["actions"] for a in claims["access"]}


def bearer(token: str) -> str:
    return f"Bearer {token}"


def pull(repository: str) -> str:
    return f"repository:{repository}:pull"


def user_token(lib: Library, roles: dict[str, str] | None = None) -> tuple[str, int]:
    """A new user's API token and its id."""
    token = lib.user(roles)
    with lib.app_state.db.read() as s:
        rows = s.execute(select(ApiToken.id, ApiToken.token_hash)).all()
    from kvreg_registry.auth import hash_token

    return token, next(i for i, h in rows if h == hash_token(token))


def www_authenticate(r: Any) -> dict[str, str]:
    scheme, _, rest = r.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    params = {}
    for part in rest.split('",'):
        key, _, value = part.partition("=")
        params[key] = value.strip('"')
    return params


# --- what the token endpoint grants ------------------------------------------------------------


def test_the_token_grants_only_pull_of_what_the_caller_may_read(lib: Library) -> None:
    public, private = lib.namespace(public=True), lib.namespace(public=False)
    reader, _ = user_token(lib, {private: "read"})
    writer, _ = user_token(lib, {private: "write"})
    asked = (
        f"repository:{public}:pull,push,delete,*",
        pull(private),
        f"repository:{public}/answer:pull",  # the per-ref repository
        f"repository:{public}/a/b:pull",  # not a repository kvreg serves
        pull("no-such-ns"),
        "registry:catalog:*",
    )
    # anonymous: pull of the public namespace and its per-ref repositories, nothing else
    anonymous = token_of(lib, *asked)
    assert access_of(anonymous) == {
        f"repository:{public}": ["pull"],
        f"repository:{private}": [],
        f"repository:{public}/answer": ["pull"],
        f"repository:{public}/a/b": [],
        "repository:no-such-ns": [],
        "registry:catalog": [],
    }
    # the read role adds the private namespace; write or admin never adds push, delete or *
    assert access_of(token_of(lib, *asked, auth=basic(reader)))[f"repository:{private}"] == ["pull"]
    for auth in (basic(writer), basic(lib.admin_token), bearer(lib.admin_token)):
        access = access_of(
            token_of(lib, f"repository:{private}:push,pull,*", "registry:catalog:*", auth=auth)
        )
        assert access == {f"repository:{private}": ["pull"], "registry:catalog": []}
    assert access_of(token_of(lib, f"repository:{private}:push,*", auth=basic(writer))) == {
        f"repository:{private}": []
    }
    # scope may repeat, a value may hold several, the same resource twice is merged
    both = token_of(lib, f"{pull(public)} {pull(private)}", f"repository:{public}:push", auth=basic(reader))
    assert access_of(both) == {f"repository:{public}": ["pull"], f"repository:{private}": ["pull"]}
    # what docker login asks: no scope, and account, client_id, offline_token (ignored)
    login = token_answer(
        lib, auth=basic(reader, "me"), account="me", client_id="docker", offline_token="true"
    )
    assert access_of(login["token"]) == {}


def test_the_token_is_a_short_lived_jwt_not_the_api_token(lib: Library) -> None:
    ns = lib.namespace(public=False)
    reader, token_id = user_token(lib, {ns: "read"})
    before = int(time.time())
    answer = token_answer(lib, pull(ns), auth=basic(reader))
    token = answer["token"]
    assert reader not in token and token != reader
    assert answer["expires_in"] == 300
    issued = dt.datetime.strptime(answer["issued_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    assert abs(issued.timestamp() - time.time()) < 60
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "HS256"
    claims = jwt.decode(token, options={"verify_signature": False})
    with lib.app_state.db.read() as s:
        user = s.scalar(
            select(User.name).join(ApiToken, ApiToken.user_id == User.id).where(ApiToken.id == token_id)
        )
    assert claims["iss"] == lib.app_state.log.origin and claims["aud"] == "kvreg"
    assert claims["sub"] == user and claims["token_id"] == token_id
    assert claims["access"] == [{"type": "repository", "name": ns, "actions": ["pull"]}]
    assert before - 1 <= claims["iat"] == claims["nbf"] <= time.time() + 1
    assert claims["exp"] == claims["iat"] + 300
    again = jwt.decode(token_of(lib, pull(ns), auth=basic(reader)), options={"verify_signature": False})
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16 and claims["jti"] != again["jti"]
    # signed with a key derived from the log key, not the log key's own signature scheme
    secret = oci_tokens.signing_secret(lib.app_state.log.key)
    assert jwt.decode(token, secret, algorithms=["HS256"], audience="kvreg")["sub"] == user
    # an anonymous token names nobody
    anonymous = jwt.decode(token_of(lib, pull(ns)), options={"verify_signature": False})
    assert (
        anonymous["sub"] == "" and anonymous["token_id"] is None and anonymous["access"][0]["actions"] == []
    )


def test_the_lifetime_is_the_setting_capped_by_the_api_token(lib: Library) -> None:
    ns = lib.namespace()
    reader, token_id = user_token(lib)
    with lib.app_state.db.write() as s:  # the API token has 100 s left
        s.execute(update(ApiToken).where(ApiToken.id == token_id).values(
            expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=100)))  # fmt: skip
    answer = token_answer(lib, pull(ns), auth=basic(reader))
    assert 90 <= answer["expires_in"] <= 100
    claims = jwt.decode(answer["token"], options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == answer["expires_in"]


def test_the_lifetime_setting(tmp_path: Path) -> None:
    assert Settings().oci_token_seconds == 300
    assert Settings.from_env({"KVREG_OCI_TOKEN_SECONDS": "60"}).oci_token_seconds == 60
    assert Settings.from_env({"KVREG_OCI_TOKEN_SECONDS": "3600"}).oci_token_seconds == 3600
    for bad in ("59", "3601", "0", "five"):
        with pytest.raises(ConfigError, match="KVREG_OCI_TOKEN_SECONDS"):
            Settings.from_env({"KVREG_OCI_TOKEN_SECONDS": bad})
    with pytest.raises(ConfigError, match="KVREG_OCI_TOKEN_SECONDS"):
        Settings(oci_token_seconds=30)
    for library in _library(tmp_path, oci_token_seconds=120):
        answer = token_answer(library, pull(library.namespace()))
        assert answer["expires_in"] == 120


def test_malformed_scope_or_service_is_400_naming_the_field_and_changes_nothing(lib: Library) -> None:
    ns = lib.namespace()
    reader, token_id = user_token(lib)
    malformed = (
        "nonsense",
        f"repository:{ns}",
        f"Repository:{ns}:pull",
        "repository::pull",
        f"repository:{ns}:Pull",
        f'repository:{ns}":pull',
        "repository:n s:pull",
        "repository:" + "a" * 400 + ":pull",
    )
    for scope in malformed:
        r = get(lib, "/v2/token", params={"service": "kvreg", "scope": scope}, auth=basic(reader))
        error = oci_error(r, 400, "UNSUPPORTED")
        assert error["message"].startswith("scope: ") and error["detail"] == {"field": "scope"}, error
    many = [pull(f"ns{i}") for i in range(33)]
    error = oci_error(get(lib, "/v2/token", params={"scope": many}), 400, "UNSUPPORTED")
    assert error["detail"] == {"field": "scope"} and "32" in error["message"]
    assert token_of(lib, *many[:32])  # 32 is fine
    for service in (["registry.docker.io"], ["kvreg", "other"], [""]):
        r = get(lib, "/v2/token", params={"service": service, "scope": pull(ns)}, auth=basic(reader))
        error = oci_error(r, 400, "UNSUPPORTED")
        assert error["message"].startswith("service: ") and error["detail"] == {"field": "service"}
    # no token was used (its last-used time is untouched); bad credentials with a bad scope: 400 too
    with lib.app_state.db.read() as s:
        assert s.scalar(select(ApiToken.last_used_at).where(ApiToken.id == token_id)) is None
    oci_error(get(lib, "/v2/token", params={"scope": "x"}, auth=basic("kvreg_wrong")), 400, "UNSUPPORTED")
    # a service-less request is fine (the challenge always names it, but nothing requires it)
    assert access_of(token_of(lib, pull(ns)))


# --- where a token is accepted -----------------------------------------------------------------


def test_the_token_is_accepted_on_its_repositories_only(lib: Library) -> None:
    ns, other = publish(lib, public=False), publish(lib, public=True)
    reader, _ = user_token(lib, {ns: "read"})
    token = token_of(lib, pull(ns), auth=basic(reader))
    for path in (f"/v2/{ns}/manifests/answer", f"/v2/{ns}/tags/list", "/v2/"):
        assert get(lib, path, auth=bearer(token)).status_code == 200, path
    manifest = get(lib, f"/v2/{ns}/manifests/answer", auth=bearer(token))
    digest = manifest.headers["docker-content-digest"]
    assert get(lib, f"/v2/{ns}/blobs/{digest}", auth=bearer(token)).content == manifest.content
    # another repository, even a public one or the per-ref repository of the same namespace: a new
    # token is needed, and the challenge names its scope
    for repository, path in (
        (other, f"/v2/{other}/manifests/answer"),
        (f"{ns}/answer", f"/v2/{ns}/answer/manifests/latest"),
        (f"{ns}/answer", f"/v2/{ns}/answer/tags/list"),
    ):
        r = get(lib, path, auth=bearer(token))
        oci_error(r, 401, "UNAUTHORIZED")
        assert www_authenticate(r) == {
            "realm": "https://testserver/v2/token",
            "service": "kvreg",
            "scope": pull(repository),
            "error": "insufficient_scope",
        }
    ref_token = token_of(lib, pull(f"{ns}/answer"), auth=basic(reader))
    r = get(lib, f"/v2/{ns}/answer/manifests/latest", auth=bearer(ref_token))
    assert r.status_code == 200 and r.content == manifest.content
    oci_error(get(lib, f"/v2/{ns}/manifests/answer", auth=bearer(ref_token)), 401, "UNAUTHORIZED")


def test_rights_are_the_tokens_and_the_users_now(lib: Library) -> None:
    ns = publish(lib, public=False)
    path = f"/v2/{ns}/manifests/answer"
    reader, _ = user_token(lib, {ns: "read"})
    stranger, _ = user_token(lib)
    stranger_name = jwt.decode(token_of(lib, auth=basic(stranger)), options={"verify_signature": False})[
        "sub"
    ]
    reader_name = jwt.decode(token_of(lib, auth=basic(reader)), options={"verify_signature": False})["sub"]
    # asked for and refused: answered as the caller's rights say (404 with a user, 401 anonymous)
    refused = token_of(lib, pull(ns), auth=basic(stranger))
    oci_error(get(lib, path, auth=bearer(refused)), 404, "NAME_UNKNOWN")
    r = get(lib, path, auth=bearer(token_of(lib, pull(ns))))
    oci_error(r, 401, "UNAUTHORIZED")
    assert "error" not in www_authenticate(r)
    # the user gains the role: the refusing token says to get a new one, which reads
    with lib.app_state.db.write() as s:
        accounts.set_role(s, OPERATOR, ns, stranger_name, "read")
    r = get(lib, path, auth=bearer(refused))
    oci_error(r, 401, "UNAUTHORIZED")
    assert www_authenticate(r)["error"] == "insufficient_scope"
    assert get(lib, path, auth=bearer(token_of(lib, pull(ns), auth=basic(stranger)))).status_code == 200
    # the user loses the role: a token that granted pull no longer reads
    granted = token_of(lib, pull(ns), auth=basic(reader))
    assert get(lib, path, auth=bearer(granted)).status_code == 200
    with lib.app_state.db.write() as s:
        accounts.remove_role(s, OPERATOR, ns, reader_name)
    oci_error(get(lib, path, auth=bearer(granted)), 404, "NAME_UNKNOWN")
    # a public namespace made private: an anonymous token that granted pull no longer reads
    public = publish(lib, public=True)
    anonymous = token_of(lib, pull(public))
    assert get(lib, f"/v2/{public}/tags/list", auth=bearer(anonymous)).status_code == 200
    with lib.app_state.db.write() as s:
        accounts.set_namespace_public(s, OPERATOR, public, False)
    oci_error(get(lib, f"/v2/{public}/tags/list", auth=bearer(anonymous)), 401, "UNAUTHORIZED")


def _invalid_token(r: Any) -> None:
    oci_error(r, 401, "UNAUTHORIZED")
    assert www_authenticate(r)["error"] == "invalid_token"


def test_expired_forged_and_revoked_tokens_are_refused(lib: Library) -> None:
    ns = publish(lib, public=False)
    path = f"/v2/{ns}/tags/list"
    reader, token_id = user_token(lib, {ns: "read"})
    name = jwt.decode(token_of(lib, auth=basic(reader)), options={"verify_signature": False})["sub"]
    st = lib.app_state
    with st.db.write() as s:  # made an hour ago, so that tokens "issued" minutes ago may name it
        s.execute(update(ApiToken).where(ApiToken.id == token_id).values(
            created_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)))  # fmt: skip
    secret = oci_tokens.signing_secret(st.log.key)
    access = [oci_tokens.Access("repository", ns, ("pull",))]

    def made(key: bytes = secret, *, issuer: str = st.log.origin, ago: float = 0, tid: int = token_id) -> str:
        return oci_tokens.issue(
            key, issuer=issuer, subject=name, token_id=tid, access=access, lifetime=300, now=time.time() - ago
        )

    assert get(lib, path, auth=bearer(made())).status_code == 200
    assert get(lib, path, auth=bearer(made(ago=310))).status_code == 200  # within the clock-skew leeway
    _invalid_token(get(lib, path, auth=bearer(made(ago=400))))  # expired
    # an API token made after the OCI token (its id reused, after a restore) is another token
    with st.db.write() as s:
        s.execute(update(ApiToken).where(ApiToken.id == token_id).values(created_at=dt.datetime.now(dt.UTC)))
    _invalid_token(get(lib, path, auth=bearer(made(ago=120))))
    with st.db.write() as s:
        s.execute(update(ApiToken).where(ApiToken.id == token_id).values(
            created_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)))  # fmt: skip
    _invalid_token(get(lib, path, auth=bearer(made(oci_tokens.signing_secret(SigningKey.generate())))))
    _invalid_token(get(lib, path, auth=bearer(made(issuer="another-registry"))))
    _invalid_token(get(lib, path, auth=bearer(made(tid=token_id + 1000))))  # no such API token
    unsigned = jwt.encode(jwt.decode(made(), options={"verify_signature": False}), key=None, algorithm="none")
    _invalid_token(get(lib, path, auth=bearer(unsigned)))
    _invalid_token(get(lib, path, auth=bearer("a.b.c")))
    # the same failures, many times, are not counted as guesses of API tokens (no 429)
    for _ in range(25):
        _invalid_token(get(lib, path, auth=bearer(made(ago=400))))
    # revoking the API token refuses its OCI tokens at once, as does disabling the user
    token = token_of(lib, pull(ns), auth=basic(reader))
    assert get(lib, path, auth=bearer(token)).status_code == 200
    with st.db.write() as s:
        accounts.revoke_token(s, OPERATOR, token_id)
    _invalid_token(get(lib, path, auth=bearer(token)))
    oci_error(get(lib, "/v2/token", params={"scope": pull(ns)}, auth=basic(reader)), 401, "UNAUTHORIZED")
    other, other_id = user_token(lib, {ns: "read"})
    token = token_of(lib, pull(ns), auth=basic(other))
    with st.db.write() as s:
        owner = select(ApiToken.user_id).where(ApiToken.id == other_id).scalar_subquery()
        s.execute(update(User).where(User.id == owner).values(disabled_at=dt.datetime.now(dt.UTC)))
    _invalid_token(get(lib, path, auth=bearer(token)))
    # an OCI token cannot ask for another (it would outlive its scope)
    token = token_of(lib, pull(ns), auth=basic(lib.admin_token))
    for auth in (bearer(token), basic(token)):
        oci_error(get(lib, "/v2/token", params={"scope": pull(ns)}, auth=auth), 401, "UNAUTHORIZED")


# --- the realm ----------------------------------------------------------------------------------


def _library(tmp_path: Path, **settings: Any) -> Iterator[Library]:
    app = create_app(
        Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'r.db'}", **settings)
    )
    with TestClient(app, base_url="http://testserver") as client:
        with app.state.registry.db.write() as s:
            accounts.create_user(s, OPERATOR, "root", admin=True)
            token = accounts.create_token(s, OPERATOR, "root", label="realm tests").token
        yield Library(client=client, admin_token=token)


def _realm(lib: Library, url: str, **headers: str) -> str:
    r = lib.client.get(url, headers=headers)
    assert r.status_code == 401, r.text
    return www_authenticate(r)["realm"]


def test_the_realm_is_loopback_http_or_https(
    lib: Library, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ns = lib.namespace(public=False)
    for base in ("http://127.0.0.1:8080", "http://localhost:5000", "http://[::1]:8080", "http://127.0.0.2"):
        assert _realm(lib, f"{base}/v2/") == f"{base}/v2/token"
        assert _realm(lib, f"{base}/v2/{ns}/tags/list") == f"{base}/v2/token"
    # off loopback without KVREG_PUBLIC_URL: https, and one warning per process that says to set it
    monkeypatch.setattr(oci_errors, "_warned_realm", False)
    with caplog.at_level(logging.WARNING, logger="kvreg_registry.api.oci_errors"):
        for base in ("http://registry.example.org", "http://10.0.0.5:8080"):
            host = urllib.parse.urlsplit(base).netloc
            assert _realm(lib, f"{base}/v2/") == f"https://{host}/v2/token"
            assert _realm(lib, f"{base}/v2/{ns}/manifests/answer") == f"https://{host}/v2/token"
    warnings = [r for r in caplog.records if "KVREG_PUBLIC_URL" in r.message]
    assert len(warnings) == 1
    # a proxy that forwards https keeps it
    assert _realm(lib, "https://registry.example.org/v2/") == "https://registry.example.org/v2/token"


def test_the_realm_comes_from_the_public_url(tmp_path: Path) -> None:
    for library in _library(tmp_path, public_url="https://registry.example.org/kv/"):
        for url in (
            "http://127.0.0.1:8080/v2/",
            "http://internal:8080/v2/",
            "https://registry.example.org/v2/",
        ):
            assert _realm(library, url) == "https://registry.example.org/kv/v2/token"
    assert (
        Settings.from_env({"KVREG_PUBLIC_URL": "http://10.1.2.3:8080"}).public_url == "http://10.1.2.3:8080"
    )
    assert Settings.from_env({}).public_url is None
    for bad in (
        "registry.example.org",
        "ftp://registry.example.org",
        "https://",
        "https://user:pass@registry.example.org",
        "https://registry.example.org/?x=1",
        "https://registry.example.org/#top",
        'https://registry.example.org/"',
        "https://registry.example.org:99999",
    ):
        with pytest.raises(ConfigError, match="KVREG_PUBLIC_URL"):
            Settings.from_env({"KVREG_PUBLIC_URL": bad})


def test_a_client_follows_the_challenge_to_a_private_namespace(lib: Library) -> None:
    """What containers/image (skopeo, podman) does: ``GET /v2/``, the challenge, the token
    with Basic credentials and the scope of the next request's challenge, then that request."""
    ns = publish(lib, public=False)
    reader, _ = user_token(lib, {ns: "read"})
    base = "http://127.0.0.1:8080"
    ping = lib.client.get(f"{base}/v2/")
    assert ping.status_code == 401
    first = lib.client.get(f"{base}/v2/{ns}/tags/list")
    challenge = www_authenticate(first)
    assert challenge == {"realm": f"{base}/v2/token", "service": "kvreg", "scope": pull(ns)}
    r = lib.client.get(
        challenge["realm"],
        params={"account": "any", "service": challenge["service"], "scope": challenge["scope"]},
        headers={"Authorization": basic(reader, "any")},
    )
    assert r.status_code == 200, r.text
    tags = lib.client.get(f"{base}/v2/{ns}/tags/list", headers={"Authorization": bearer(r.json()["token"])})
    assert tags.status_code == 200 and tags.json() == {"name": ns, "tags": ["answer"]}
