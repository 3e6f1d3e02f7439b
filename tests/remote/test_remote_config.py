"""Remotes in config.json and tokens in credentials.json."""

from __future__ import annotations

import json
import stat

import pytest

from kvreg.core.errors import AlreadyExistsError, ConfigError, NotFoundError, UsageError
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.http import connect
from kvreg.remote.remotes import (
    Credentials,
    RemoteConfig,
    normalize_url,
    validate_token,
)
from kvreg.store.home import Home

from .helpers import serve

TOKEN = "kvreg_" + "A" * 43


@pytest.fixture
def home(tmp_path) -> Home:
    return Home(tmp_path / "home")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("https://Registry.Example.org/", "https://registry.example.org"),
        ("https://example.org/kvreg/api/v1/", "https://example.org/kvreg"),
        ("http://example.org/api/v1", "http://example.org"),
        ("  https://example.org  ", "https://example.org"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
    ],
)
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://example.org",
        "file:///etc/passwd",
        "example.org",
        "http://",
        "https://user:pw@example.org",
        "https://example.org/?a=1",
        "https://example.org/#x",
        "http://example.org:99999",
        "http://exa mple.org",
    ],
)
def test_bad_urls_are_config_errors(url):
    with pytest.raises(ConfigError):
        normalize_url(url)


@pytest.mark.parametrize("name", ["origin", "a", "A.b_c-1", "x" * 64])
def test_good_remote_names(name):
    assert validate_remote_name(name) == name


@pytest.mark.parametrize("name", ["", "-x", ".x", "a/b", "a b", "x" * 65, "a..b", "é"])
def test_bad_remote_names(name):
    with pytest.raises(UsageError):
        validate_remote_name(name)


def test_add_list_get_remove_keep_other_keys(home):
    home.root.mkdir(parents=True)
    home.config_path.write_text(json.dumps({"other": {"x": 1}, "remotes": {}}))
    config = RemoteConfig(home)
    assert config.add("origin", "http://127.0.0.1:8080/").url == "http://127.0.0.1:8080"
    config.add("backup", "https://b.example.org")
    assert [r.name for r in config.list()] == ["backup", "origin"]
    assert config.get("origin").api_url == "http://127.0.0.1:8080/api/v1"
    doc = json.loads(home.config_path.read_text())
    assert doc["other"] == {"x": 1}
    assert doc["remotes"]["origin"] == {"url": "http://127.0.0.1:8080"}
    config.remove("backup")
    assert [r.name for r in config.list()] == ["origin"]
    assert json.loads(home.config_path.read_text())["other"] == {"x": 1}


def test_add_existing_remote(home):
    config = RemoteConfig(home)
    config.add("origin", "http://a.example.org")
    config.add("origin", "http://a.example.org/")  # same URL: fine
    with pytest.raises(AlreadyExistsError) as e:
        config.add("origin", "http://b.example.org")
    assert "kvreg remote remove origin" in (e.value.hint or "")
    assert config.add("origin", "http://b.example.org", replace=True).url == "http://b.example.org"


def test_unknown_remote(home):
    with pytest.raises(NotFoundError) as e:
        RemoteConfig(home).get("origin")
    assert "kvreg remote add origin" in (e.value.hint or "")
    with pytest.raises(NotFoundError):
        RemoteConfig(home).remove("origin")


def test_malformed_config_is_an_error(home):
    home.root.mkdir(parents=True)
    home.config_path.write_text("{not json")
    with pytest.raises(ConfigError):
        RemoteConfig(home).list()
    home.config_path.write_text(json.dumps({"remotes": {"origin": {"url": "ftp://x"}}}))
    with pytest.raises(ConfigError):
        RemoteConfig(home).get("origin")
    home.config_path.write_text(json.dumps({"remotes": []}))
    with pytest.raises(ConfigError):
        RemoteConfig(home).list()


def test_credentials_file_is_private(home):
    creds = Credentials(home, environ={})
    creds.set("origin", TOKEN)
    mode = stat.S_IMODE(creds.path.stat().st_mode)
    assert mode == 0o600
    assert creds.stored_token("origin") == TOKEN
    auth = creds.auth_for("origin")
    assert auth is not None and auth.token == TOKEN and auth.source == "credentials"
    assert TOKEN not in repr(auth) and TOKEN not in repr(creds)
    assert creds.names() == ["origin"]
    assert creds.auth_for("other") is None


def test_credentials_readable_by_others_are_refused(home):
    creds = Credentials(home, environ={})
    creds.set("origin", TOKEN)
    creds.path.chmod(0o644)
    with pytest.raises(ConfigError) as e:
        creds.auth_for("origin")
    assert f"chmod 600 {creds.path}" in (e.value.hint or "")
    assert TOKEN not in str(e.value) + (e.value.hint or "")


def test_env_token_takes_precedence(home):
    Credentials(home, environ={}).set("origin", TOKEN)
    creds = Credentials(home, environ={"KVREG_TOKEN": "kvreg_envtoken"})
    auth = creds.auth_for("origin")
    assert auth is not None and auth.token == "kvreg_envtoken" and auth.source == "env"
    with pytest.raises(ConfigError):
        Credentials(home, environ={"KVREG_TOKEN": "bad token"}).auth_for("origin")


def test_remove_remote_removes_its_token(home):
    RemoteConfig(home).add("origin", "http://127.0.0.1:1")
    creds = Credentials(home, environ={})
    creds.set("origin", TOKEN)
    creds.set("other", TOKEN)
    RemoteConfig(home).remove("origin")
    assert creds.names() == ["other"]
    assert creds.remove("other") is True
    assert creds.remove("other") is False


@pytest.mark.parametrize("token", ["", "   ", "secret value", 'se"cret', "sec\n\nret", "sécret"])
def test_bad_tokens(token):
    with pytest.raises(UsageError) as e:
        validate_token(token)
    assert token.strip() == "" or token not in e.value.message


def test_token_is_stripped():
    assert validate_token(f"  {TOKEN}\n") == TOKEN


def test_connect_builds_a_client_with_the_token(home, monkeypatch):
    monkeypatch.delenv("KVREG_TOKEN", raising=False)
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": "alice"})
        RemoteConfig(home).add("origin", srv.url + "/")
        Credentials(home).set("origin", TOKEN)
        with connect(home, "origin") as client:
            assert client.base_url == srv.url
            assert client.remote_name == "origin"
            assert TOKEN not in repr(client)
            assert client.whoami() == {"user": "alice"}
        assert srv.requests()[0].headers["Authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("url", ["oci:/127.0.0.1:5000/kv", "oci:127.0.0.1:5000/kv"])
@pytest.mark.parametrize("insecure", [False, True])
def test_mistyped_oci_url_is_named_as_such(home, url, insecure):
    with pytest.raises(ConfigError) as e:
        RemoteConfig(home).add("local", url, insecure=insecure)
    assert "must start with oci://" in str(e.value)
    assert "oci://HOST[:PORT]/REPOSITORY-PREFIX" in (e.value.hint or "")


def test_bad_scheme_names_every_accepted_scheme(home):
    with pytest.raises(ConfigError) as e:
        RemoteConfig(home).add("local", "docker://127.0.0.1:5000/kv")
    assert "http://, https:// or oci://" in str(e.value) and "not docker://" in str(e.value)
    assert "oci://" in (e.value.hint or "")
