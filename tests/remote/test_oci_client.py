"""The OCI client's pieces without a registry: remote URLs, challenges, error bodies, and
credentials from Docker's and Podman's files and credential helpers (real executables)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from kvreg.core.errors import (
    ConfigError,
    DigestMismatchError,
    ForbiddenError,
    NotFoundError,
    ObjectNotFoundError,
    RateLimitedError,
    UnauthenticatedError,
    UsageError,
)
from kvreg.remote.oci.auth import parse_challenge
from kvreg.remote.oci.dockerconfig import auth_files, find_credentials
from kvreg.remote.oci.errors import CHALLENGE_DETAIL, map_oci_error
from kvreg.remote.remotes import Credentials, RemoteConfig, parse_oci_url
from kvreg.store.home import Home

# --- remote URLs ---------------------------------------------------------------------------------


def test_oci_urls_parse_and_plain_http_stays_on_loopback(tmp_path: Path) -> None:
    loc = parse_oci_url("oci://Registry.Example.org:5000/team/kv/")
    assert (loc.host, loc.prefix, loc.base_url) == (
        "registry.example.org:5000",
        "team/kv",
        "https://registry.example.org:5000",
    )
    assert parse_oci_url("oci://ghcr.io").prefix == ""
    for bad in (
        "https://ghcr.io/x",
        "oci://",
        "oci://ghcr.io/Upper",
        "oci://u@ghcr.io/x",
        "oci://ghcr.io/a//b",
    ):
        with pytest.raises(ConfigError):
            parse_oci_url(bad)
    config = RemoteConfig(Home(tmp_path / "h").ensure())
    local = config.add("local", "oci://127.0.0.1:5000/kv", insecure=True)
    assert local.is_oci and local.oci.base_url == "http://127.0.0.1:5000"
    with pytest.raises(UsageError, match="plain HTTP"):
        config.add("far", "oci://registry.example.org/kv", insecure=True)
    assert config.add("far", "oci://registry.example.org/kv", force_insecure=True).insecure
    with pytest.raises(UsageError):
        config.add("web", "https://example.org", insecure=True)
    assert [r.kind for r in config.list()] == ["oci", "oci"]
    back = config.add("far", "https://registry.example.org", replace=True)
    assert (
        back.kind == "kvreg" and not back.insecure and config.get("far").url == "https://registry.example.org"
    )


def test_basic_credentials_are_stored_private_and_never_shown(tmp_path: Path) -> None:
    home = Home(tmp_path / "h").ensure()
    creds = Credentials(home)
    creds.set_basic("hub", "me", "s3cret\n")
    stored = creds.stored_basic("hub")
    assert stored is not None and (stored.username, stored.password) == ("me", "s3cret")
    assert "s3cret" not in repr(stored)
    assert creds.stored_token("hub") is None
    assert (home.root / "credentials.json").stat().st_mode & 0o777 == 0o600


# --- challenges and errors -----------------------------------------------------------------------


def test_challenges_are_parsed() -> None:
    c = parse_challenge(
        'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"'
    )
    assert c is not None and c.scheme == "bearer"
    assert c.params == {
        "realm": "https://auth.example/token",
        "service": "registry.example",
        "scope": "repository:a/b:pull,push",
    }
    basic = parse_challenge('Basic realm="kvreg \\"test\\""')
    assert basic is not None and basic.scheme == "basic" and basic.realm == 'kvreg "test"'
    assert parse_challenge("Negotiate abc") is None and parse_challenge(None) is None


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (404, "BLOB_UNKNOWN", ObjectNotFoundError),
        (404, "MANIFEST_UNKNOWN", NotFoundError),
        (401, "UNAUTHORIZED", UnauthenticatedError),
        (403, "DENIED", ForbiddenError),
        (400, "DIGEST_INVALID", DigestMismatchError),
        (429, "TOOMANYREQUESTS", RateLimitedError),
        (404, None, NotFoundError),
    ],
)
def test_oci_error_bodies_map_to_typed_errors(status: int, code: str | None, cls: type) -> None:
    body = json.dumps({"errors": [{"code": code, "message": "m", "detail": None}]}).encode() if code else b"x"
    error = map_oci_error(status, {"WWW-Authenticate": 'Basic realm="r"'}, body, remote_name="hub", url="u")
    assert type(error) is cls
    assert error.details["http_status"] == status
    if status == 401:
        assert error.details[CHALLENGE_DETAIL] == 'Basic realm="r"' and "kvreg login hub" in (
            error.hint or ""
        )


# --- Docker and Podman credentials ---------------------------------------------------------------


def _write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def _helper(bin_dir: Path, name: str, answer: dict[str, str] | None, log: Path) -> None:
    """A real ``docker-credential-<name>`` that records the server it was asked for."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / f"docker-credential-{name}"
    reply = (
        f"echo '{json.dumps(answer)}'"
        if answer
        else 'echo "credentials not found in native keychain"; exit 1'
    )
    script.write_text(f'#!/bin/sh\n[ "$1" = get ] || exit 3\nread server\necho "$server" >> {log}\n{reply}\n')
    script.chmod(0o755)


def test_docker_config_auths_identity_tokens_and_file_order(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path / "home"),
        "DOCKER_CONFIG": str(tmp_path / "docker"),
        "PATH": os.environ["PATH"],
    }
    assert find_credentials("r.example", environ=env) is None
    auth = base64.b64encode(b"alice:pw:with:colons").decode()
    _write(
        tmp_path / "docker" / "config.json",
        {"auths": {"https://r.example/v1/": {"auth": auth}, "t.example": {"identitytoken": "idt"}}},
    )
    found = find_credentials("r.example", environ=env)
    assert found is not None and (found.username, found.password) == ("alice", "pw:with:colons")
    token = find_credentials("t.example", environ=env)
    assert token is not None and token.username is None and token.password == "idt"
    # Podman's file comes first.
    podman = tmp_path / "run" / "containers" / "auth.json"
    _write(podman, {"auths": {"r.example": {"username": "bob", "password": "pw2"}}})
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    first = find_credentials("r.example", environ=env)
    assert first is not None and first.username == "bob" and first.source == str(podman)
    assert auth_files(env)[0] == podman
    _write(podman, {"auths": {"r.example": {"auth": "!!!"}}})
    with pytest.raises(ConfigError):
        find_credentials("r.example", environ=env)


def test_credential_helpers_are_run_as_docker_runs_them(tmp_path: Path) -> None:
    log = tmp_path / "asked.log"
    bin_dir = tmp_path / "bin"
    _helper(bin_dir, "per-host", {"ServerURL": "h.example", "Username": "carol", "Secret": "s1"}, log)
    _helper(bin_dir, "store", {"ServerURL": "x", "Username": "<token>", "Secret": "refresh"}, log)
    _helper(bin_dir, "empty", None, log)
    env = {
        "HOME": str(tmp_path),
        "DOCKER_CONFIG": str(tmp_path / "d"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    _write(
        tmp_path / "d" / "config.json", {"credHelpers": {"h.example:5000": "per-host"}, "credsStore": "store"}
    )
    per_host = find_credentials("h.example:5000", environ=env)
    assert per_host is not None and (per_host.username, per_host.password) == ("carol", "s1")
    assert "docker-credential-per-host" in per_host.source
    via_store = find_credentials("other.example", environ=env)
    assert via_store is not None and via_store.username is None and via_store.password == "refresh"
    assert log.read_text().split() == ["h.example:5000", "other.example"]
    _write(tmp_path / "d" / "config.json", {"credsStore": "empty"})
    assert find_credentials("h.example", environ=env) is None  # "not found" is not an error
    _write(tmp_path / "d" / "config.json", {"credsStore": "missing"})
    with pytest.raises(ConfigError, match="not on PATH"):
        find_credentials("h.example", environ=env)
