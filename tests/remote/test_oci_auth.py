"""The OCI client's authentication against scripted servers: tokens that expire, workers that
need one at once, challenges from hosts that are not the registry, token answers that never
end, redirects that must not carry credentials, and Docker Hub's names."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import RemoteError, UnauthenticatedError
from kvreg.remote.oci import tokens
from kvreg.remote.oci.auth import Authenticator, refresh_margin
from kvreg.remote.oci.client import OciClient
from kvreg.remote.oci.dockerconfig import find_credentials
from kvreg.remote.remotes import BasicCredentials, parse_oci_url

from .helpers import FileServer, serve

CREDS = BasicCredentials("alice", "s3cret-password", "test")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _token_route(server: FileServer, *, expires_in: Any = None, path: str = "/token") -> None:
    """The token service answers a new token (``t1``, ``t2``...) to every request."""
    doc: dict[str, Any] = {"token": "placeholder"}
    if expires_in is not None:
        doc["expires_in"] = expires_in
    server.route(path, doc)


def _authenticator(server: FileServer, clock: Clock | None = None) -> Authenticator:
    auth = Authenticator(
        CREDS,
        http=httpx.Client(timeout=10),
        registry_url=server.url,
        remote_name="hub",
        clock=clock or Clock(),
    )
    assert auth.learn(f'Bearer realm="{server.url}/token",service="reg"', server.url + "/v2/")
    return auth


# --- the lifetime of a token ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stated", "life"), [(300, 300.0), (2, 2.0), (None, 60.0), ("soon", 60.0), (-5, 60.0)]
)
def test_a_token_is_asked_again_a_little_before_its_stated_expiry(stated: Any, life: float) -> None:
    clock = Clock()
    with serve() as server:
        _token_route(server, expires_in=stated)
        auth = _authenticator(server, clock)
        scopes = ["repository:a/b:pull"]
        assert auth.header(scopes) == "Bearer placeholder"
        clock.now += life - refresh_margin(life) - 0.01
        auth.header(scopes)
        assert len(server.requests("GET", "/token")) == 1, "replaced while still good"
        clock.now += 0.02
        auth.header(scopes)
        assert len(server.requests("GET", "/token")) == 2, "used past its stated expiry"
    assert refresh_margin(300) == 30 and refresh_margin(2) == pytest.approx(0.2)


def test_one_token_request_serves_every_worker_that_needs_it() -> None:
    release = threading.Event()
    with serve() as server:
        _token_route(server, expires_in=300)
        server.pause["/token?service=reg&scope=repository%3Aa%2Fb%3Apull"] = (
            0,
            lambda: bool(release.wait(10)),
        )
        auth = _authenticator(server)
        got: list[str | None] = []
        workers = [
            threading.Thread(target=lambda: got.append(auth.header(["repository:a/b:pull"])))
            for _ in range(8)
        ]
        for w in workers:
            w.start()
        time.sleep(0.3)  # every worker is waiting on the one request in flight
        release.set()
        for w in workers:
            w.join(10)
        assert got == ["Bearer placeholder"] * 8
        assert len(server.requests("GET", "/token")) == 1


def test_a_refused_token_is_replaced_once_for_all_the_workers_it_failed() -> None:
    """Four workers sent the same token and were refused: each may retry, one new token serves
    them all, and a worker refused with a token already replaced does not drop the new one."""
    with serve() as server:
        _token_route(server, expires_in=300)
        auth = _authenticator(server)
        scopes = ["repository:a/b:pull"]
        old = auth.header(scopes)
        server.route("/token", {"token": "second", "expires_in": 300})
        challenge = f'Bearer realm="{server.url}/token",service="reg",error="invalid_token"'
        assert all(auth.refused(scopes, old, challenge, server.url + "/v2/a/b/blobs/x") for _ in range(4))
        new = auth.header(scopes)
        assert new == "Bearer second"
        assert len(server.requests("GET", "/token")) == 2
        assert auth.refused(scopes, old, challenge, server.url + "/v2/a/b/blobs/x")  # late: keeps the new one
        assert auth.header(scopes) == new and len(server.requests("GET", "/token")) == 2
        assert not auth.refused(scopes, None, challenge, server.url + "/v2/")  # nothing sent, nothing new


def test_a_challenge_from_another_host_names_no_realm() -> None:
    with serve() as server, serve() as stranger:
        _token_route(server, expires_in=300)
        _token_route(stranger, expires_in=300)
        auth = _authenticator(server)
        scopes = ["repository:a/b:pull"]
        sent = auth.header(scopes)
        evil = f'Bearer realm="{stranger.url}/token",service="evil"'
        with pytest.raises(RemoteError, match="not the registry"):
            auth.refused(scopes, sent, evil, stranger.url + "/storage/blob")
        with pytest.raises(RemoteError, match="not the registry"):
            auth.learn(evil, stranger.url + "/v2/")
        auth.header(["repository:a/c:pull"])
        assert not stranger.seen, "the stranger's token service was asked"


# --- token answers bounded in size and time -------------------------------------------------------


@contextmanager
def _endless_token_service(*, piece: bytes, every: float, total: int) -> Iterator[dict[str, Any]]:
    """A token service whose answer (chunked) is ``total`` bytes of ``piece`` sent every ``every``
    seconds, then the end of a JSON document; ``sent`` counts what the client took."""
    state: dict[str, Any] = {"sent": 0, "url": ""}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                head = b'{"token": "abc", "pad": "'
                self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
                while state["sent"] < total:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    state["sent"] += len(piece)
                    if every:
                        time.sleep(every)
                tail = b'"}'
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
            except OSError:
                pass  # the client hung up: what the test wants

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def _fetch(url: str) -> tokens.Grant:
    from kvreg.remote.oci.challenges import parse_challenge

    challenge = parse_challenge(f'Bearer realm="{url}/token",service="reg"')
    assert challenge is not None
    with httpx.Client(timeout=30) as http:
        return tokens.fetch_token(http, challenge, ["repository:a:pull"], None, remote_name="hub")


def test_a_token_answer_is_refused_past_its_cap_without_reading_the_rest() -> None:
    with _endless_token_service(piece=b"x" * 65536, every=0, total=256 << 20) as service:
        with pytest.raises(RemoteError, match="more than"):
            _fetch(service["url"])
        time.sleep(0.2)
        assert service["sent"] < 64 << 20, "the whole answer was read before the cap was applied"


def test_a_token_answer_that_never_ends_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "TOKEN_DEADLINE", 0.5)
    with (
        _endless_token_service(piece=b"x", every=0.05, total=400) as service,
        pytest.raises(RemoteError, match="took longer"),
    ):
        _fetch(service["url"])


# --- redirects carry no credentials ----------------------------------------------------------------

BLOB = b"blob bytes " * 1000
DIGEST = Digest.of_bytes(BLOB)


def _registry_with_storage(registry: FileServer, storage: FileServer, repo: str) -> None:
    """``registry`` wants a token from itself and sends blob GETs and HEADs to ``storage``."""
    registry.route(
        "/v2/", b"{}", status=401, headers={"WWW-Authenticate": f'Bearer realm="{registry.url}/token"'}
    )
    _token_route(registry, expires_in=300, path="/token?scope=repository%3Akv%2Fns%3Apull")
    for method in ("GET", "HEAD"):
        registry.route(
            f"/v2/{repo}/blobs/{DIGEST}",
            method=method,
            status=307,
            headers={"Location": f"{storage.url}/bucket/blob?X-Amz-Signature=abc"},
        )
        storage.route("/bucket/blob?X-Amz-Signature=abc", BLOB, method=method, ranges=True)


def test_blob_reads_follow_redirects_without_the_registry_credentials(tmp_path: Path) -> None:
    with serve() as registry, serve() as storage:
        location = parse_oci_url(f"oci://{registry.url.removeprefix('http://')}/kv", insecure=True)
        _registry_with_storage(registry, storage, "kv/ns")
        with OciClient(location, CREDS, remote_name="hub") as client:
            assert client.blob_size("kv/ns", DIGEST) == len(BLOB)
            assert client.get_blob_bytes("kv/ns", DIGEST, limit=1 << 20) == BLOB
            partial = tmp_path / "blob"
            partial.write_bytes(BLOB[:1000])
            got = client.get_object_to("ns", DIGEST, partial, start=1000)
            assert got.digest == DIGEST and got.resumed_from == 1000
        to_registry = registry.requests(prefix="/v2/kv/")
        assert to_registry and all(
            s.headers.get("Authorization") == "Bearer placeholder" for s in to_registry
        )
        seen = storage.requests()
        assert {s.method for s in seen} == {"GET", "HEAD"}
        for s in seen:
            assert not {k.lower() for k in s.headers} & {"authorization", "cookie"}, s.headers
        assert [s.headers.get("Range") for s in seen if s.method == "GET"][-1] == "bytes=1000-"


def test_a_storage_host_asking_for_credentials_is_an_error_of_that_host(tmp_path: Path) -> None:
    with serve() as registry, serve() as storage:
        location = parse_oci_url(f"oci://{registry.url.removeprefix('http://')}/kv", insecure=True)
        _registry_with_storage(registry, storage, "kv/ns")
        trap = f'Bearer realm="{storage.url}/token",service="trap"'
        for method in ("GET", "HEAD"):
            storage.route(
                "/bucket/blob?X-Amz-Signature=abc",
                b"",
                method=method,
                status=401,
                headers={"WWW-Authenticate": trap},
            )
        _token_route(storage, expires_in=300)
        with OciClient(location, CREDS, remote_name="hub") as client:
            with pytest.raises(RemoteError, match="storage host") as e:
                client.get_object_to("ns", DIGEST, tmp_path / "blob")
            assert not isinstance(e.value, UnauthenticatedError)
            with pytest.raises(RemoteError, match="storage host"):
                client.get_blob_bytes("kv/ns", DIGEST, limit=1 << 20)
        assert not storage.requests(prefix="/token"), "the storage host's token service was asked"
        assert not any("authorization" in {k.lower() for k in s.headers} for s in storage.requests())


# --- Docker Hub's names ------------------------------------------------------------------------------


def test_docker_hub_is_reached_at_its_api_host_with_its_library_prefix() -> None:
    for name in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        hub = parse_oci_url(f"oci://{name}/myorg")
        assert hub.is_docker_hub and hub.base_url == "https://registry-1.docker.io"
        assert hub.repository("kv") == "myorg/kv"
        assert parse_oci_url(f"oci://{name}").repository("kv") == "library/kv"
    other = parse_oci_url("oci://ghcr.io")
    assert not other.is_docker_hub and other.repository("kv") == "kv"


@pytest.mark.parametrize("key", ["https://index.docker.io/v1/", "docker.io", "index.docker.io"])
def test_docker_hub_credentials_are_found_under_any_of_its_names(tmp_path: Path, key: str) -> None:
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"auths": {key: {"username": "me", "password": "pw"}}}))
    env = {"DOCKER_CONFIG": str(config), "HOME": str(tmp_path)}
    for host in ("docker.io", "registry-1.docker.io", "index.docker.io"):
        found = find_credentials(host, environ=env)
        assert found is not None and (found.username, found.password) == ("me", "pw")
    assert find_credentials("ghcr.io", environ=env) is None


def test_docker_hub_credential_helpers_are_asked_for_its_v1_server(tmp_path: Path) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "asked"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-hubtest"
    helper.write_text(
        "#!/bin/sh\nread server\n"
        f'echo "$server" >> {log}\n'
        '[ "$server" = "https://index.docker.io/v1/" ] || { echo "credentials not found"; exit 1; }\n'
        'echo \'{"ServerURL": "https://index.docker.io/v1/", "Username": "me", "Secret": "pw"}\'\n'
    )
    helper.chmod(0o755)
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"credsStore": "hubtest"}))
    env = {"DOCKER_CONFIG": str(config), "HOME": str(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    found = find_credentials("docker.io", environ=env)
    assert found is not None and found.username == "me"
    assert log.read_text().split() == ["https://index.docker.io/v1/"]


# --- referrers over several pages ---------------------------------------------------------------------


def test_referrers_are_read_page_after_page() -> None:
    from kvreg.core.oci import OCI_INDEX, OCI_MANIFEST, SIGNATURE_TYPE, Descriptor, referrers_index

    subject = Digest.of_bytes(b"subject")
    first, second = (Descriptor(OCI_MANIFEST, Digest.of_bytes(x), 10, SIGNATURE_TYPE) for x in (b"a", b"b"))
    path = f"/v2/kv/ns/referrers/{subject}"
    with serve() as registry:
        registry.route("/v2/", b"{}")
        registry.route(
            path + "?" + urlencode({"artifactType": SIGNATURE_TYPE}),
            referrers_index([first]),
            headers={"Content-Type": OCI_INDEX, "Link": f'<{path}?last=a&artifactType=x>; rel="next"'},
        )
        registry.route(
            path + "?last=a&artifactType=x", referrers_index([second]), headers={"Content-Type": OCI_INDEX}
        )
        location = parse_oci_url(f"oci://{registry.url.removeprefix('http://')}/kv", insecure=True)
        with OciClient(location) as client:
            found = client.referrers("kv/ns", subject, SIGNATURE_TYPE)
    assert [d.digest for d in found] == [first.digest, second.digest]
