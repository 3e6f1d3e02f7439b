"""The local store's use cases in process: keys, trust, settings, show/ls/cat, opening the home.

The same commands as users run them (``kvreg keys``, ``trust``, ``config``,
``show``, ``ls``, ``cat``) are in tests/cli/. Artifacts here are synthetic
(``remote.helpers.build_artifact``): no engine, no torch work.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app import inspect, keys, settings, trust
from kvreg.app.home import open_home
from kvreg.core.digest import Digest
from kvreg.core.errors import KeyFileError, ObjectNotFoundError, SignatureError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.store import access_log
from kvreg.store.home import Home
from remote.helpers import build_artifact, store_built


@pytest.fixture
def store(tmp_path: Path) -> Home:
    return Home(tmp_path / "home")


def test_open_home_option_else_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVREG_HOME", str(tmp_path / "env"))
    assert open_home(str(tmp_path / "opt")).root == tmp_path / "opt"
    assert open_home(None).root == tmp_path / "env"
    assert not (tmp_path / "opt").exists() and not (tmp_path / "env").exists()


def test_generate_list_export(store: Home) -> None:
    made = keys.generate_key(store, "alice")
    assert made.trusted and made.trusted_for == ["*"]
    assert made.path == store.keys_dir / "alice.key" and (store.keys_dir / "alice.pub").is_file()
    assert made.to_dict() == {
        "name": "alice",
        "keyid": made.keyid,
        "public_key": made.public_key,
        "path": str(made.path),
        "trusted_for": ["*"],
    }
    with pytest.raises(KeyFileError, match="exists already"):
        keys.generate_key(store, "alice")
    other = keys.generate_key(store, "bob", trust=False)
    assert not other.trusted
    listing = keys.list_keys(store)
    assert [(k.name, k.private, k.trusted_for) for k in listing.keys] == [
        ("alice", True, ["*"]),
        ("bob", True, []),
    ]
    assert listing.to_dict()["keys"][0]["keyid"] == made.keyid
    assert keys.export_key(store, "bob").to_dict() == {
        "name": "bob",
        "keyid": other.keyid,
        "public_key": other.public_key,
    }
    with pytest.raises(KeyFileError, match="no key named"):
        keys.export_key(store, "carol")
    with pytest.raises(UsageError, match="invalid key name"):
        keys.export_key(store, "../x")
    replaced = keys.generate_key(store, "alice", force=True)
    assert replaced.keyid != made.keyid


def test_trust_add_list_remove(store: Home, tmp_path: Path) -> None:
    public = SigningKey.generate().public_key
    added = trust.trust_key(store, "team", public.to_text())
    assert added.to_dict() == {"namespace": "team", "keyid": public.keyid, "public_key": public.to_text()}
    pub_file = tmp_path / "k.pub"
    pub_file.write_text(public.to_text() + "\n")
    trust.trust_key(store, "*", str(pub_file))
    local = keys.generate_key(store, "mine", trust=False)
    trust.trust_key(store, "mine-ns", local.public_key)
    rows = trust.list_trust(store).to_dict()["trust"]
    assert {(r["namespace"], r["keyid"], r["local_key"]) for r in rows} == {
        ("team", public.keyid, None),
        ("*", public.keyid, None),
        ("mine-ns", local.keyid, "mine"),
    }
    assert trust.untrust(store, "team", public.to_text()).to_dict() == {
        "namespace": "team",
        "keyid": public.keyid,
        "removed": True,
    }
    assert "team" not in {e.namespace for e in trust.list_trust(store).entries}
    with pytest.raises(UsageError):
        trust.trust_key(store, "team", "not-a-key")


def test_settings_get_set_unset_list(store: Home) -> None:
    assert settings.get_setting(store, "store.max-bytes").to_dict() == {
        "key": "store.max-bytes",
        "value": None,
        "display": "none",
    }
    stored = settings.set_setting(store, "store.max-bytes", "1KiB")
    assert (stored.value, stored.display) == (1024, settings.get_setting(store, "store.max-bytes").display)
    assert settings.unset_setting(store, "store.max-bytes").to_dict() == {
        "key": "store.max-bytes",
        "removed": True,
    }
    assert not settings.unset_setting(store, "store.max-bytes").removed
    listing = settings.list_settings(store)
    assert listing.config_path == store.config_path
    assert [row["key"] for row in listing.to_dict()["config"]] == ["receipts.always", "store.max-bytes"]
    assert all(row["help"] for row in listing.to_dict()["config"])
    with pytest.raises(UsageError):
        settings.get_setting(store, "no.such-key")


def test_show_ls_cat(store: Home) -> None:
    key = SigningKey.generate()
    built = build_artifact(key)
    store_built(store, built, RefName.parse("team/doc"))
    with pytest.raises(SignatureError, match="no signature"):
        inspect.show_artifact(store, "team/doc")
    unverified = inspect.show_artifact(store, "team/doc", unverified=True)
    assert not unverified.signature_checked and unverified.signers == [key.public_key.keyid]
    trust.trust_key(store, "team", key.public_key.to_text())
    shown = inspect.show_artifact(store, "team/doc")
    assert shown.signature_checked and shown.ref == "team/doc" and shown.text == "text 0"
    assert shown.to_dict() == built.manifest.to_dict()
    assert inspect.show_artifact(store, str(built.digest), with_text=False).text is None

    listing = inspect.list_refs(store)
    assert listing.root == store.root
    [row] = listing.to_dict()["refs"]
    assert row["ref"] == "team/doc" and row["digest"] == str(built.digest)
    assert row["token_count"] == 10 and row["title"] == "t0" and "error" not in row

    chunk = built.manifest.chunks[0].digest
    assert inspect.read_object(store, str(chunk)) == built.objects[chunk]
    assert chunk.hex in access_log.read_access_log(store)
    with pytest.raises(ObjectNotFoundError):
        inspect.read_object(store, str(Digest.of_bytes(b"absent")))
