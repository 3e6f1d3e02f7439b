"""Authentication with real OCI registries: Basic, the Docker token flow, and tokens that expire.

CNCF distribution behind htpasswd (``make services``) and behind the token flow
(``oci_token.token_registry``: its own issuer): credentials from Docker's files, a
credential helper and ``kvreg login``; tokens per scope; an identity token. Then what
registries in the wild do to a long pull: tokens that run out while four workers
download (the pull completes, each token replaced once for all workers), and a host
that a registry redirects a download to asking for credentials (it gets none, and
names no realm for them).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from cli.helpers import kvreg
from services import oci_registry

from .conftest import object_sizes
from .oci_helpers import host_of, new_prefix, oci_home, oci_reader
from .oci_token import SERVICE, ExpiryGate, TokenRegistry, token_registry
from .proxy import LoopbackServer, QuietHandler, forward, read_body, relay


def _docker_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reg: TokenRegistry, *urls: str) -> None:
    """A Docker config file with ``reg``'s user and password for each of ``urls``' hosts."""
    config = tmp_path / "docker-login"
    config.mkdir(exist_ok=True)
    basic = base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()
    auths = {host_of(url): {"auth": basic} for url in urls}
    (config / "config.json").write_text(json.dumps({"auths": auths}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))


# --- credentials -------------------------------------------------------------------------------


def test_basic_auth_from_docker_config_helper_and_login(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, prefix = oci_registry(), new_prefix()
    host = host_of(reg["url"])
    pusher = oci_home(tmp_path, "pusher", reg["url"], prefix, source=depositor["home"])
    denied = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07", expect=None)
    assert denied.rc != 0 and "UNAUTHENTICATED" in denied.out + denied.err

    # docker login's file: auths with base64 user:password.
    config = tmp_path / "docker"
    config.mkdir()
    auth = base64.b64encode(f"{reg['user']}:{reg['password']}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    pushed = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07").json
    assert pushed["ref_changed"] is True
    shown = kvreg(pusher, "--json", "remote", "show", "hub").json
    assert shown["credentials"].startswith(f"user {reg['user']}")
    assert reg["password"] not in json.dumps(shown)

    # A credential helper (a real executable on PATH, run as docker runs it).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-kvtest"
    answer = json.dumps({"ServerURL": host, "Username": reg["user"], "Secret": reg["password"]})
    helper.write_text(
        "#!/bin/sh\n"
        '[ "$1" = get ] || exit 1\n'
        "read server\n"
        f'[ "$server" = "{host}" ] || {{ echo "credentials not found in native keychain"; exit 1; }}\n'
        f"echo '{answer}'\n"
    )
    helper.chmod(0o755)
    (config / "config.json").write_text(json.dumps({"credHelpers": {host: "kvtest"}}))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    dst = oci_reader(tmp_path, "reader", reg["url"], prefix, "ns", depositor["public_key"])
    assert kvreg(dst, "--json", "pull", "hub", "ns/p07").json["digest"] == pushed["digest"]

    # kvreg login: checked with the registry, stored with mode 0600, never printed.
    (config / "config.json").write_text("{}")
    wrong = kvreg(
        dst, "login", "hub", "--username", reg["user"], "--password-stdin", stdin="nope\n", expect=None
    )
    assert wrong.rc == 1 and "refused user" in wrong.err and "Traceback" not in wrong.err
    ok = kvreg(
        dst, "--json", "login", "hub", "-u", reg["user"], "--password-stdin", stdin=reg["password"] + "\n"
    )
    assert ok.json["scheme"] == "basic" and reg["password"] not in ok.out + ok.err
    assert (dst / "credentials.json").stat().st_mode & 0o777 == 0o600
    assert kvreg(dst, "--json", "ls-remote", "hub", "ns").json["refs"][0]["ref"] == "ns/p07"


def test_plain_http_is_refused_off_loopback(tmp_path: Path) -> None:
    run = kvreg(
        tmp_path / "h", "remote", "add", "far", "oci://registry.example.org/kv", "--insecure", expect=2
    )
    assert "plain HTTP" in run.out + run.err
    kvreg(tmp_path / "h", "remote", "add", "far", "oci://registry.example.org/kv", "--force-insecure")


# --- the Docker token flow (Bearer) ---------------------------------------------------------------


def test_bearer_token_flow(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry with ``auth: token``: anonymous requests get tokens without access (refused), Basic
    credentials from a Docker config file get tokens per scope, cached; push and pull work."""
    with token_registry(tmp_path) as reg:
        prefix = new_prefix()
        pusher = oci_home(tmp_path, "pusher", reg.url, prefix, source=depositor["home"])
        denied = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07", expect=None)
        assert denied.rc != 0 and "UNAUTHENTICATED" in denied.out + denied.err
        assert reg.requests and all(r["user"] is None for r in reg.requests)

        config = tmp_path / "docker-bearer"
        config.mkdir()
        basic = base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {host_of(reg.url): {"auth": basic}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(config))
        reg.requests.clear()
        push = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07").json
        assert push["ref_changed"] is True
        scopes = [tuple(r["scopes"]) for r in reg.requests]
        assert all(r["user"] == reg.user and r["service"] == [SERVICE] for r in reg.requests)
        assert (f"repository:{prefix}/ns:pull,push",) in scopes
        assert len(scopes) == len(set(scopes)), "one token per set of scopes, cached"

        dst = oci_reader(tmp_path, "reader", reg.url, prefix, "ns", depositor["public_key"])
        pull = kvreg(dst, "--json", "pull", "hub", "ns/p07").json
        assert pull["digest"] == push["digest"]
        login = kvreg(dst, "--json", "login", "hub", "-u", reg.user, "--password-stdin", stdin=reg.password)
        assert login.json["scheme"] == "bearer"

        # An identity token (what `docker login` keeps for OAuth2 registries such as ACR).
        other = oci_reader(tmp_path, "identity", reg.url, prefix, "ns", depositor["public_key"])
        (config / "config.json").write_text(
            json.dumps({"auths": {host_of(reg.url): {"identitytoken": reg.identity}}})
        )
        reg.requests.clear()
        assert kvreg(other, "--json", "pull", "hub", "ns/p07").json["digest"] == push["digest"]
        assert reg.requests and all(r["user"] == "identity" for r in reg.requests)


# --- tokens that expire during a pull ----------------------------------------------------------------


def _pull_through_gate(
    depositor: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    lifetime: int,
    expires_in: float,
    delay: float,
) -> tuple[int, int]:
    """Push ``src/p07x`` to a token registry whose tokens last ``lifetime`` s and are said to
    last ``expires_in`` s, pull it with four jobs through an :class:`ExpiryGate` holding each
    download back ``delay`` s; the tokens the pull asked for, and the requests the gate refused."""
    with token_registry(tmp_path, lifetime=lifetime, expires_in=expires_in) as reg:
        gate = ExpiryGate(reg, delay=delay)
        try:
            prefix = new_prefix()
            _docker_login(tmp_path, monkeypatch, reg, reg.url, gate.url)
            pusher = oci_home(tmp_path, "pusher", reg.url, prefix, source=depositor["home"])
            push = kvreg(pusher, "--json", "push", "hub", "src/p07x", "--as", "ns/p07").json
            dst = oci_reader(tmp_path, "reader", gate.url, prefix, "ns", depositor["public_key"])
            reg.requests.clear()
            pull = kvreg(dst, "--json", "pull", "hub", "ns/p07", "-j", "4").json
        finally:
            gate.close()
    assert pull["digest"] == push["digest"]
    assert pull["objects_downloaded"] == len(object_sizes(depositor["home"], depositor["manifests"]["p07x"]))
    kvreg(dst, "verify", "ns/p07")
    asked = [r for r in reg.requests if any(str(s).endswith(":pull") for s in list(r["scopes"]))]
    return len(asked), gate.refused


def test_tokens_are_replaced_before_their_stated_expiry(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens that say they last 2 s (and are refused after 3 to 4 s): a four-job pull that lasts
    several times that asks for new ones in time, and never sends an expired one."""
    asked, refused = _pull_through_gate(depositor, tmp_path, monkeypatch, lifetime=4, expires_in=2, delay=1.0)
    assert refused == 0, "a token was used past the expiry its token service stated"
    assert asked >= 2, "the pull outlived its first token without asking for another"


def test_tokens_refused_early_are_replaced_once_for_all_workers(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens said to last 300 s but refused after 1 to 2 s (revoked, or a registry without
    leeway): the four workers that meet the 401 together replace the token and go on."""
    gated = _pull_through_gate(depositor, tmp_path, monkeypatch, lifetime=2, expires_in=300, delay=0.6)
    asked, refused = gated
    assert refused >= 1, "no token expired during the pull: the test proves nothing"
    assert asked >= 2


# --- a redirect to a host that wants credentials ----------------------------------------------------


class _Trap:
    """A host that answers everything ``401`` with a Bearer challenge naming its own token
    service, and records what it was sent."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()
        trap = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                read_body(self)
                with trap._lock:
                    trap.requests.append((self.command, self.path, dict(self.headers.items())))
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="{trap.url}/token",service="trap"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_HEAD = do_POST = _answer

        self._server = LoopbackServer(Handler)
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()


class _RedirectingProxy:
    """The registry, but for the blobs ``digests``, whose GETs are redirected to ``target``."""

    def __init__(self, upstream: str, target: str, digests: set[str]) -> None:
        import httpx

        self._http = httpx.Client(timeout=60)
        proxy = self

        class Handler(QuietHandler):
            def _pass(self) -> None:
                body = read_body(self)
                digest = self.path.rpartition("/blobs/")[2]
                if self.command == "GET" and digest in digests:
                    self.send_response(307)
                    self.send_header("Location", f"{target}/storage/{digest}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                relay(self, forward(self, upstream, body, proxy._http))

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _pass

        self._server = LoopbackServer(Handler)
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()
        self._http.close()


def test_a_host_the_registry_redirects_to_never_gets_credentials(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry sends the chunk downloads to a host that answers 401 and names its own token
    service: the pull stops with that host's error; neither it nor its "token service" ever sees
    the registry's password or token."""
    trap = _Trap()
    with token_registry(tmp_path) as reg:
        chunks = {str(c.digest) for c in depositor["manifests"]["p07"].chunks}
        proxy = _RedirectingProxy(reg.url, trap.url, chunks)
        try:
            prefix = new_prefix()
            _docker_login(tmp_path, monkeypatch, reg, reg.url, proxy.url)
            pusher = oci_home(tmp_path, "pusher", reg.url, prefix, source=depositor["home"])
            kvreg(pusher, "push", "hub", "src/p07", "--as", "ns/p07")
            dst = oci_reader(tmp_path, "reader", proxy.url, prefix, "ns", depositor["public_key"])
            run = kvreg(dst, "--json", "pull", "hub", "ns/p07", "-j", "1", expect=None)
        finally:
            proxy.close()
            trap.close()
    assert run.rc == 1, run.out + run.err
    assert "storage host 127.0.0.1" in run.out + run.err
    assert trap.requests, "the redirect was not followed: the test proves nothing"
    for _method, path, headers in trap.requests:
        assert not path.startswith("/token"), "the trap's token service was asked for a token"
        assert not {k.lower() for k in headers} & {"authorization", "cookie"}, headers
        assert reg.password not in json.dumps(headers)
    assert not (dst / "refs" / "ns").exists()
