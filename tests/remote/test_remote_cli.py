"""The remote commands as users run them (``cli.helpers.kvreg``: in the test process).

The registry side is ``helpers.FileServer`` (static answers), enough for login,
pull and ls-remote; push against the real registry is the integration suite's.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli.helpers import Run
from cli.helpers import kvreg as run_kvreg
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.home import Home

from .helpers import build_artifact, publish, serve

TOKEN = "kvreg_" + "s" * 43
REF = RefName("ns", "a")


def kvreg(home: Path, *args: str, expect: int = 0, stdin: str | None = None) -> Run:
    return run_kvreg(home, *args, expect=expect, stdin=stdin, timeout=120)


def test_remote_add_list_remove(tmp_path):
    home = tmp_path / "home"
    out = kvreg(home, "remote", "add", "origin", "https://registry.example.org/", "--json").out
    assert json.loads(out) == {"name": "origin", "url": "https://registry.example.org"}
    listed = json.loads(kvreg(home, "remote", "list", "--json").out)
    assert listed == {
        "remotes": [{"name": "origin", "url": "https://registry.example.org", "logged_in": False}]
    }
    assert "origin" in kvreg(home, "remote", "list").out
    kvreg(home, "remote", "add", "bad", "ftp://x", expect=1)
    kvreg(home, "remote", "add", "bad name", "https://x", expect=2)
    err = kvreg(home, "--json", "remote", "add", "origin", "https://other.example.org", expect=1)
    assert json.loads(err.out)["error"]["code"] == "ALREADY_EXISTS"
    kvreg(home, "remote", "remove", "origin")
    kvreg(home, "remote", "remove", "origin", expect=1)
    assert json.loads(kvreg(home, "remote", "list", "--json").out) == {"remotes": []}


def test_login_checks_the_token_and_never_prints_it(tmp_path):
    home = tmp_path / "home"
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": "alice", "admin": False, "roles": {"ns": "write"}})
        kvreg(home, "remote", "add", "origin", srv.url)
        run = kvreg(home, "login", "origin", "--token", TOKEN, "--json")
        assert json.loads(run.out) == {
            "remote": "origin",
            "url": srv.url,
            "user": "alice",
            "admin": False,
            "roles": {"ns": "write"},
        }
        assert TOKEN not in run.out + run.err
        assert srv.requests()[0].headers["Authorization"] == f"Bearer {TOKEN}"
    creds = home / "credentials.json"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert json.loads(creds.read_text()) == {"origin": {"token": TOKEN}}
    listed = json.loads(kvreg(home, "remote", "list", "--json").out)
    assert listed["remotes"][0]["logged_in"] is True
    kvreg(home, "logout", "origin")
    assert json.loads(creds.read_text()) == {}


def test_login_from_stdin(tmp_path):
    home = tmp_path / "home"
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": "bob"})
        kvreg(home, "remote", "add", "origin", srv.url)
        run = kvreg(home, "login", "origin", "--token-stdin", stdin=TOKEN + "\n")
        assert "bob" in run.out
    assert json.loads((home / "credentials.json").read_text())["origin"]["token"] == TOKEN


def test_refused_token_is_not_saved(tmp_path):
    home = tmp_path / "home"
    with serve() as srv:
        srv.route(
            "/api/v1/whoami", {"error": {"code": "UNAUTHENTICATED", "message": "unknown token"}}, status=401
        )
        kvreg(home, "remote", "add", "origin", srv.url)
        run = kvreg(home, "login", "origin", "--token", TOKEN, expect=1)
        assert "kvreg login origin --token" in run.err
        assert TOKEN not in run.out + run.err
    assert not (home / "credentials.json").exists()


def test_login_usage_errors(tmp_path):
    home = tmp_path / "home"
    kvreg(home, "remote", "add", "origin", "http://127.0.0.1:9")
    kvreg(home, "login", "origin", "--token", TOKEN, "--token-stdin", expect=2, stdin="")
    kvreg(home, "login", "origin", expect=2, stdin="")  # no token and stdin is not a terminal
    kvreg(home, "login", "nowhere", "--token", TOKEN, expect=1)


@pytest.fixture
def published():
    key = SigningKey.generate()
    built = build_artifact(key, chunk_bytes=50_000)
    with serve() as srv:
        publish(srv, built, REF, key=key)
        srv.route(
            "/api/v1/namespaces/ns/refs", {"refs": [{"name": "a", "digest": built.digest, "tag": False}]}
        )
        srv.route("/api/v1/namespaces", b'[{"name": "ns"}]')
        yield srv, built, key


def _home_trusting(tmp_path: Path, key: SigningKey, url: str) -> Path:
    home = Home(tmp_path / "home").ensure()
    save_trust_policy(TrustPolicy({"ns": [key.public_key]}), home.trust_path)
    kvreg(home.root, "remote", "add", "origin", url)
    return home.root


def test_pull_and_ls_remote(tmp_path, published):
    srv, built, key = published
    home = _home_trusting(tmp_path, key, srv.url)
    report = json.loads(kvreg(home, "pull", "origin", "ns/a", "--json").out)
    assert report["digest"] == built.digest and report["objects_downloaded"] == len(built.objects)
    again = kvreg(home, "pull", "origin", "ns/a")
    assert "already up to date" in again.out
    listed = json.loads(kvreg(home, "ls-remote", "origin", "--json").out)
    assert listed["refs"] == [{"ref": "ns/a", "digest": built.digest, "tag": False, "updated_at": None}]
    assert json.loads(kvreg(home, "ls-remote", "origin", "ns", "--json").out)["namespaces"] == ["ns"]
    assert "ns/a" in kvreg(home, "ls", "--json").out


def test_pull_of_a_tampered_object_exits_3_and_stores_nothing(tmp_path, published):
    srv, built, key = published
    home = _home_trusting(tmp_path, key, srv.url)
    victim = built.manifest.chunks[0].digest
    srv.route(f"/api/v1/namespaces/ns/objects/{victim}", b"\x00" * len(built.objects[victim]), ranges=True)
    run = kvreg(home, "--json", "pull", "origin", "ns/a", expect=3)
    assert json.loads(run.out)["error"]["code"] == "DIGEST_MISMATCH"
    assert not any((home / "objects").rglob("*"))
    assert not any((home / "tmp").rglob("*"))


def test_pull_of_an_untrusted_artifact_exits_3(tmp_path, published):
    srv, _, _ = published
    home = _home_trusting(tmp_path, SigningKey.generate(), srv.url)
    run = kvreg(home, "pull", "origin", "ns/a", expect=3)
    assert "kvreg trust add ns ed25519:" in run.err


def test_push_and_pull_usage_errors(tmp_path):
    home = tmp_path / "home"
    kvreg(home, "remote", "add", "origin", "http://127.0.0.1:9")
    kvreg(home, "push", "origin", "not-a-ref", expect=2)
    kvreg(home, "pull", "origin", "ns/a", "--as", "a/b/c", expect=2)
    kvreg(home, "push", "origin", "ns/a", "-j", "0", expect=2)
    run = kvreg(home, "--json", "push", "origin", "ns/a", expect=1)
    assert json.loads(run.out)["error"]["code"] == "REF_UNKNOWN"


@pytest.mark.parametrize(
    "command",
    [["remote"], ["remote", "add"], ["remote", "list"], ["remote", "remove"], ["login"], ["logout"],
     ["push"], ["pull"], ["ls-remote"]],
    ids=" ".join,
)  # fmt: skip
def test_help(tmp_path, command):
    out = kvreg(tmp_path, *command, "--help").out
    assert f"kvreg {' '.join(command)}" in out


def test_the_client_does_not_import_torch():
    heavy = ("torch", "transformers", "numpy", "sqlalchemy", "fastapi")
    code = (
        "import sys, kvreg.cli.remote, kvreg.remote; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
