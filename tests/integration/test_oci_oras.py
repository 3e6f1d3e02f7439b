"""A generic OCI client pulls kvreg artifacts from a live kvreg registry (``/v2/``).

The ``oras`` SDK (the ORAS Python SDK) against ``kvreg serve`` on loopback, on both
backends (SQLite + folder, PostgreSQL + SeaweedFS): an artifact pushed with
``kvreg push`` from a client store is listed (``get_tags``) and pulled (``pull``), and
every file it writes is byte-identical to the store's object of the same digest. A
private namespace is pulled after ``login`` with a kvreg token as the password: oras
answers the registry's 401 challenge with the Docker token flow (``GET /v2/token``).
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from pathlib import Path

import httpx
import oras.client
import pytest

from cli.helpers import kvreg
from core.manifest_helpers import Built
from kvreg.core import oci
from kvreg.core.errors import UnauthenticatedError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.remote.oci.client import connect_oci
from kvreg.remote.oci.pulling import pull
from kvreg.remote.remotes import Credentials, RemoteConfig
from kvreg.store.home import Home
from remote.helpers import build_artifact, store_built

from .registry_server import Registry


def _kvreg_push(registry: Registry, tmp_path: Path, *, public: bool) -> tuple[str, Built, str]:
    """A namespace, an artifact pushed into it at ``answer`` by ``kvreg push``, and a reader's token."""
    key = SigningKey.generate()
    ns = registry.namespace(public=public)
    registry.register_key(ns, key.public_key.to_text())
    writer = registry.user({ns: "write"})
    home = tmp_path / "pusher"
    kvreg(home, "remote", "add", "origin", registry.url)
    kvreg(home, "login", "origin", "--token", writer)
    kvreg(home, "trust", "add", ns, key.public_key.to_text())
    built = build_artifact(key, token_count=12, block_size=4, chunk_bytes=200_000)
    store_built(Home(home), built, RefName.parse(f"{ns}/answer"))
    kvreg(home, "push", "origin", f"{ns}/answer")
    return ns, built, registry.user({ns: "read"})


def _oras(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[oras.client.OrasClient, str]:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))  # never the developer's credentials
    host = urllib.parse.urlsplit(registry.url).netloc
    return oras.client.OrasClient(hostname=host, insecure=True), host


def _check_pulled(files: list[str], built: Built, manifest: bytes) -> None:
    layers = oci.parse_artifact_manifest(manifest).layers
    by_title = {layer.annotations[oci.ANNOTATION_TITLE]: layer for layer in layers}
    assert sorted(Path(f).name for f in files) == sorted(by_title)
    for f in files:
        layer = by_title[Path(f).name]
        data = Path(f).read_bytes()
        assert data == built.objects[layer.digest]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == layer.digest


def test_oras_pulls_a_kvreg_pushed_artifact_from_a_public_namespace(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, built, _reader = _kvreg_push(registry, tmp_path, public=True)
    client, host = _oras(registry, tmp_path, monkeypatch)
    assert client.get_tags(f"{host}/{ns}") == ["answer"]
    files = client.pull(target=f"{host}/{ns}:answer", outdir=str(tmp_path / "out"))
    manifest = httpx.get(f"{registry.url}/v2/{ns}/manifests/answer", timeout=30).content
    _check_pulled(files, built, manifest)
    # what oras read as the manifest is the artifact of the signed kvreg manifest
    fetched = client.get_manifest(f"{host}/{ns}:answer")
    assert fetched["config"]["digest"] == built.digest
    oci.check_artifact(oci.parse_artifact_manifest(manifest), built.manifest)
    assert json.loads(manifest) == fetched
    # the ref's own repository: the same artifact as ns/name:latest
    assert client.get_tags(f"{host}/{ns}/answer") == ["latest"]
    again = client.pull(target=f"{host}/{ns}/answer:latest", outdir=str(tmp_path / "by-ref"))
    _check_pulled(again, built, manifest)
    # through a real HTTP server, HEAD keeps the length of what GET sends, and sends nothing
    head = httpx.head(f"{registry.url}/v2/{ns}/manifests/answer", timeout=30)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(manifest))
    assert head.headers["docker-content-digest"] == "sha256:" + hashlib.sha256(manifest).hexdigest()


def test_oras_logs_in_with_a_kvreg_token_and_pulls_a_private_artifact(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, built, reader = _kvreg_push(registry, tmp_path, public=False)
    client, host = _oras(registry, tmp_path, monkeypatch)
    # without credentials: the challenge, and oras gives up (the anonymous token reads nothing)
    anonymous = httpx.get(f"{registry.url}/v2/{ns}/tags/list", timeout=30)
    assert anonymous.status_code == 401
    assert f'scope="repository:{ns}:pull"' in anonymous.headers["www-authenticate"]
    with pytest.raises(ValueError, match="Unauthorized"):
        client.pull(target=f"{host}/{ns}:answer", outdir=str(tmp_path / "denied"))
    assert not (tmp_path / "denied").exists() or not any((tmp_path / "denied").iterdir())

    client, host = _oras(registry, tmp_path, monkeypatch)
    config = tmp_path / "docker" / "config.json"
    client.login(username="reader", password=reader, hostname=host, config_path=str(config))
    assert client.get_tags(f"{host}/{ns}") == ["answer"]
    files = client.pull(target=f"{host}/{ns}:answer", outdir=str(tmp_path / "out"))
    manifest = httpx.get(
        f"{registry.url}/v2/{ns}/manifests/answer", headers={"Authorization": f"Bearer {reader}"}, timeout=30
    ).content
    _check_pulled(files, built, manifest)


def test_the_kvreg_client_pulls_from_a_kvreg_registry_as_an_oci_remote(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kvreg's own OCI client against kvreg's /v2/: the Bearer token flow (a 401 challenge, then
    ``GET /v2/token`` with the stored user name and token) and the referrers API (which
    distribution 2.8 lacks), end to end; an anonymous pull of the private namespace is refused."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))  # never the developer's credentials
    key = SigningKey.generate()
    ns = registry.namespace(public=False)
    registry.register_key(ns, key.public_key.to_text())
    source = Home(tmp_path / "source")
    built = build_artifact(key, token_count=12, block_size=4, chunk_bytes=100_000)
    store_built(source, built, RefName.parse(f"{ns}/answer"))
    writer = registry.user({ns: "write"})
    kvreg(source.root, "remote", "add", "origin", registry.url)
    kvreg(source.root, "login", "origin", "--token", writer)
    kvreg(source.root, "trust", "add", ns, key.public_key.to_text())
    kvreg(source.root, "push", "origin", f"{ns}/answer")

    home = Home(tmp_path / "reader")
    home.root.mkdir()
    RemoteConfig(home).add("hub", f"oci://{urllib.parse.urlsplit(registry.url).netloc}", insecure=True)
    policy = TrustPolicy({ns: [key.public_key]})
    ref = RefName.parse(f"{ns}/answer")
    with connect_oci(home, "hub") as client, pytest.raises(UnauthenticatedError):
        pull(home, client, ref, trust=policy)
    assert not home.objects.has(built.digest)

    reader = registry.user({ns: "read"})
    wrong = kvreg(home.root, "login", "hub", "-u", "reader", "--password-stdin", stdin="kvreg_nope", expect=1)
    assert "refused" in wrong.err and "Traceback" not in wrong.err
    login = kvreg(home.root, "--json", "login", "hub", "-u", "reader", "--password-stdin", stdin=reader)
    assert login.json["scheme"] == "bearer"  # checked against /v2/ with a token from /v2/token
    assert Credentials(home).stored_basic("hub") is not None
    with connect_oci(home, "hub") as client:
        report = pull(home, client, ref, trust=policy)
        assert client.auth.scheme == "bearer"
    assert report.digest == built.digest and report.oci is not None
    assert report.oci["repository"] == ns
    for d, data in built.objects.items():
        assert home.objects.path(d).read_bytes() == data
    assert home.refs.get(ref) == built.digest
