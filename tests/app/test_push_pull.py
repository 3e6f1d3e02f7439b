"""``kvreg.app.pull``, ``push`` and ``ls_remote`` in process, against ``remote.helpers.FileServer``.

Pushing to a real registry is the integration suite's (tests/integration/test_push_pull.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app.ls_remote import list_remote_refs
from kvreg.app.pull import pull_from_remote
from kvreg.app.push import push_to_remote
from kvreg.app.remotes import add_remote
from kvreg.core.errors import NotFoundError, UntrustedKeyError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.home import Home
from remote.helpers import build_artifact, publish, serve

REF = RefName("ns", "a")


def _home(tmp_path: Path, trusted: SigningKey, url: str) -> Home:
    home = Home(tmp_path / "home").ensure()
    save_trust_policy(
        TrustPolicy({"ns": [trusted.public_key], "mine": [trusted.public_key]}), home.trust_path
    )
    add_remote(home, "origin", url)
    return home


def test_pull_then_pull_again_and_list(tmp_path: Path) -> None:
    key = SigningKey.generate()
    built = build_artifact(key, chunk_bytes=5_000)
    with serve() as srv:
        publish(srv, built, REF, key=key)
        srv.route(
            "/api/v1/namespaces/ns/refs", {"refs": [{"name": "a", "digest": built.digest, "tag": False}]}
        )
        home = _home(tmp_path, key, srv.url)
        report = pull_from_remote(home, "origin", REF, local_ref=RefName("mine", "a"))
        assert report.digest == built.digest and report.local_ref == "mine/a"
        assert report.objects_downloaded == len(built.objects) and report.ref_changed
        again = pull_from_remote(home, "origin", REF, local_ref=RefName("mine", "a"))
        assert not again.ref_changed and again.objects_downloaded == 0
        listed = list_remote_refs(home, "origin", "ns")
    assert listed.to_dict() == {
        "remote": "origin",
        "namespaces": ["ns"],
        "refs": [{"ref": "ns/a", "digest": built.digest, "tag": False, "updated_at": None}],
    }


def test_pull_of_an_untrusted_artifact_is_refused(tmp_path: Path) -> None:
    key = SigningKey.generate()
    built = build_artifact(key)
    with serve() as srv:
        publish(srv, built, REF, key=key)
        home = _home(tmp_path, SigningKey.generate(), srv.url)
        with pytest.raises(UntrustedKeyError):
            pull_from_remote(home, "origin", REF, known_keys=[key.public_key])
    assert not any((home.root / "objects").rglob("*"))


def test_unknown_remote(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    with pytest.raises(NotFoundError):
        push_to_remote(home, "nowhere", REF)
    with pytest.raises(NotFoundError):
        pull_from_remote(home, "nowhere", REF)
