"""The remote use cases in process (``kvreg.app.remotes``, ``login``): key pinning, tokens, listing.

The registry side, where one is needed, is ``remote.helpers.FileServer`` (static
answers). The same commands as users run them are in tests/remote/test_remote_cli.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreg.app import login, remotes
from kvreg.core.checkpoint import NoteVerifier
from kvreg.core.errors import AlreadyExistsError, NotFoundError, UnauthenticatedError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.remote.remotes import Credentials
from kvreg.store.audit_state import RemoteLogStore
from kvreg.store.home import Home
from remote.helpers import serve

URL = "https://registry.example.org"
TOKEN = "kvreg_" + "s" * 43


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def _log_key() -> str:
    return NoteVerifier("registry.example.org/log", SigningKey.generate().public_key).to_text()


def test_add_list_remove(home: Home) -> None:
    added = remotes.add_remote(home, "origin", URL + "/")
    assert added.to_dict() == {"name": "origin", "url": URL}
    assert [r.to_dict() for r in remotes.list_remotes(home)] == [
        {"name": "origin", "url": URL, "logged_in": False}
    ]
    with pytest.raises(AlreadyExistsError):
        remotes.add_remote(home, "origin", "https://other.example.org")
    with pytest.raises(UsageError):
        remotes.add_remote(home, "bad name", URL)
    assert remotes.remove_remote(home, "origin").to_dict() == {"name": "origin", "url": URL, "removed": True}
    with pytest.raises(NotFoundError):
        remotes.remove_remote(home, "origin")
    assert remotes.list_remotes(home) == []


def test_max_checkpoint_age_is_reported_only_when_given(home: Home) -> None:
    added = remotes.add_remote(home, "origin", URL, max_checkpoint_age="30m")
    assert added.to_dict() == {"name": "origin", "url": URL, "max_checkpoint_age": 1800}
    with pytest.raises(UsageError):
        remotes.add_remote(home, "other", URL, max_checkpoint_age="soon")


def test_log_key_pinning_policy(home: Home) -> None:
    pins = RemoteLogStore(home)
    first, second = _log_key(), _log_key()
    added = remotes.add_remote(home, "origin", URL, log_key=first)
    assert added.log_key == first and not added.forgot_pinned_log
    assert added.to_dict() == {"name": "origin", "url": URL, "log_key": first}
    state = pins.load("origin")
    assert state is not None and state.verifier.to_text() == first

    # the same key again: accepted (nothing changes); another key: refused without --replace
    assert remotes.add_remote(home, "origin", URL, log_key=first).log_key == first
    with pytest.raises(AlreadyExistsError, match="another audit-log key pinned") as refused:
        remotes.add_remote(home, "origin", URL, log_key=second)
    assert "--replace --log-key" in (refused.value.hint or "")
    state = pins.load("origin")
    assert state is not None and state.verifier.to_text() == first

    # --replace forgets the pin (a human decision), then pins the new key
    replaced = remotes.add_remote(home, "origin", URL, replace=True, log_key=second)
    assert replaced.forgot_pinned_log and replaced.log_key == second
    state = pins.load("origin")
    assert state is not None and state.verifier.to_text() == second

    # --replace without a key only forgets
    forgot = remotes.add_remote(home, "origin", URL, replace=True)
    assert forgot.to_dict() == {"name": "origin", "url": URL, "forgot_pinned_log": True}
    assert pins.load("origin") is None

    with pytest.raises(UsageError):
        remotes.add_remote(home, "origin", URL, replace=True, log_key="not a key")


def test_a_new_remote_forgets_a_stale_pin_and_remove_forgets_the_pin(home: Home) -> None:
    RemoteLogStore(home).pin("origin", URL, _log_key())
    added = remotes.add_remote(home, "origin", URL)
    assert added.forgot_pinned_log
    pinned = remotes.add_remote(home, "origin", URL, replace=True, log_key=_log_key())
    assert pinned.log_key is not None
    remotes.remove_remote(home, "origin")
    assert RemoteLogStore(home).load("origin") is None


def test_login_stores_the_checked_token_and_logout_forgets_it(home: Home) -> None:
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": "alice", "admin": False, "roles": {"ns": "write"}})
        remotes.add_remote(home, "origin", srv.url)
        report = login.login(home, "origin", lambda: TOKEN)
        assert srv.requests()[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert report.to_dict() == {
        "remote": "origin",
        "url": srv.url,
        "user": "alice",
        "admin": False,
        "roles": {"ns": "write"},
    }
    assert TOKEN not in repr(report)
    assert json.loads((home.root / "credentials.json").read_text()) == {"origin": {"token": TOKEN}}
    assert [r.logged_in for r in remotes.list_remotes(home)] == [True]
    assert login.logout(home, "origin") is True
    assert login.logout(home, "origin") is False


def test_login_asks_for_the_token_only_for_a_known_remote_and_refuses_an_unknown_user(home: Home) -> None:
    def no_prompt() -> str:
        raise AssertionError("the token was asked for")

    with pytest.raises(NotFoundError):
        login.login(home, "nowhere", no_prompt)
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": None})
        remotes.add_remote(home, "origin", srv.url)
        with pytest.raises(UsageError):
            login.login(home, "origin", lambda: "not a token")
        with pytest.raises(UnauthenticatedError, match="whoami names no user"):
            login.login(home, "origin", lambda: TOKEN)
    assert not (home.root / "credentials.json").exists()


def test_oci_remotes_are_shown_with_what_they_cannot_give(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker"))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    added = remotes.add_remote(home, "hub", "oci://ghcr.io/acme/kv")
    assert added.to_dict() == {"name": "hub", "url": "oci://ghcr.io/acme/kv", "kind": "oci"}
    with pytest.raises(UsageError):
        remotes.add_remote(home, "hub2", "oci://ghcr.io/acme/kv", log_key=_log_key())
    with pytest.raises(UsageError):
        remotes.add_remote(home, "hub3", "oci://ghcr.io/acme/kv", max_checkpoint_age="1h")
    shown = remotes.show_remote(home, "hub")
    assert shown.kind == "oci" and shown.credentials == "none (anonymous)"
    text = " ".join(shown.limitations)
    for missing in ("transparency log", "receipts", "block keys"):
        assert missing in text
    assert any("tags.json" in line for line in shown.recovered)
    kvreg_remote = remotes.show_remote(home, remotes.add_remote(home, "origin", URL).name)
    assert kvreg_remote.kind == "kvreg" and kvreg_remote.limitations == []
    with pytest.raises(UsageError, match="OCI registry"):
        login.login(home, "hub", lambda: TOKEN)  # a kvreg login needs a kvreg registry


def test_remote_show_names_where_the_credentials_come_from(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker"))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("KVREG_TOKEN", raising=False)
    remotes.add_remote(home, "hub", "oci://ghcr.io/acme/kv")
    Credentials(home).set_basic("hub", "alice", "s3cret")
    shown = remotes.show_remote(home, "hub").credentials
    assert shown == f"user alice (kvreg login, {home.root / 'credentials.json'})" and "s3cret" not in shown
    remotes.add_remote(home, "origin", URL)
    monkeypatch.setenv("KVREG_TOKEN", TOKEN)
    assert remotes.show_remote(home, "origin").credentials == "token ($KVREG_TOKEN)"
