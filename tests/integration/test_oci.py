"""kvreg push and pull through real OCI registries (CNCF distribution 2.8, Debian's docker-registry).

The acceptance of the OCI issue: push, pull into a fresh home and ``graft --check``
byte-exact; a second push sends no blob bytes; a flipped byte in the registry's blob
storage, a swapped layer, a signature by an untrusted key and a tag moved back to an
older manifest each end in exit 3 with nothing written to the home; basic auth with
credentials from a Docker config file and from a credential helper. Distribution 2.8
has no referrers API, so the referrers tag schema is what these tests exercise. Each
test works under a repository prefix of its own (the registries are shared).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.helpers import BLOCK, SUFFIX, TEXT, kvreg, kvreg_env, snapshot
from services import oci_blob_path, oci_open_registry, oci_registry

from .conftest import object_sizes, staged_files
from .oci_token import SERVICE, token_registry
from .proxy import StallingProxy


@pytest.fixture(autouse=True)
def _no_user_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The developer's own Docker and Podman credentials never reach these tests."""
    empty = tmp_path / "docker-config"
    empty.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(empty))
    for name in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)


def _prefix() -> str:
    return f"kvt{uuid.uuid4().hex[:12]}"


def _host(url: str) -> str:
    return url.removeprefix("http://")


def _home(tmp_path: Path, name: str, url: str, prefix: str, *, source: Path | None = None) -> Path:
    """A store with the OCI remote ``hub``; with ``source``, a copy of that store's artifacts and keys."""
    home = tmp_path / name
    home.mkdir()
    if source is not None:
        for sub in ("objects", "envelopes", "refs", "keys", "trust.json"):
            src = source / sub
            if src.is_dir():
                shutil.copytree(src, home / sub, symlinks=True)
            elif src.is_file():
                shutil.copy2(src, home / sub)
    kvreg(home, "remote", "add", "hub", f"oci://{_host(url)}/{prefix}", "--insecure")
    return home


def _reader(tmp_path: Path, name: str, url: str, prefix: str, ns: str, key: str) -> Path:
    home = _home(tmp_path, name, url, prefix)
    kvreg(home, "trust", "add", ns, key)
    return home


def _manifest(url: str, repo: str, ref: str, auth: tuple[str, str] | None = None) -> tuple[bytes, str]:
    r = httpx.get(
        f"{url}/v2/{repo}/manifests/{ref}",
        headers={
            "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"
        },
        auth=auth,
    )
    r.raise_for_status()
    return r.content, r.headers["Docker-Content-Digest"]


def _put_manifest(url: str, repo: str, ref: str, data: bytes, media: str) -> None:
    r = httpx.put(f"{url}/v2/{repo}/manifests/{ref}", content=data, headers={"Content-Type": media})
    assert r.status_code == 201, r.text


def _refused(home: Path, *args: str) -> Any:
    """Run a pull that must end in exit 3 and leave the store as it was (no file, no staging folder)."""
    before = snapshot(home)
    run = kvreg(home, "--json", "pull", *args, expect=3)
    after = snapshot(home)
    if "tmp" not in before and after.get("tmp", (0, 0))[0] == 0:
        after.pop("tmp", None)  # the (empty) parent folder of pull staging folders
    assert after == before, "a refused pull wrote to the store"
    return run


# --- push, pull, graft ---------------------------------------------------------------------


def test_push_pull_graft_byte_exact_and_second_push_sends_nothing(
    depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    reg, prefix = oci_open_registry(), _prefix()
    pusher = _home(tmp_path, "pusher", reg["url"], prefix, source=depositor["home"])
    push = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07").json
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07"])
    manifest_size = len(depositor["manifests"]["p07"].raw_bytes)
    assert push["objects_total"] == len(sizes) + 1  # the objects and the kvreg manifest (the config)
    assert push["bytes_sent"] == sum(sizes.values()) + manifest_size
    assert push["ref_changed"] is True and push["old"] is None
    assert push["oci"]["repository"] == f"{prefix}/ns"

    again = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07").json
    assert again["bytes_sent"] == 0 and again["objects_sent"] == 0 and again["objects_missing"] == 0
    assert again["ref_changed"] is False

    # The signature is attached with the referrers tag schema (distribution 2.8 has no referrers API).
    fallback = f"sha256-{push['oci']['manifest'].removeprefix('sha256:')}"
    index = json.loads(_manifest(reg["url"], f"{prefix}/ns", fallback)[0])
    assert [m["artifactType"] for m in index["manifests"]] == ["application/vnd.kvreg.signature.v1+json"]

    dst = _reader(tmp_path, "reader", reg["url"], prefix, "ns", depositor["public_key"])
    pull = kvreg(dst, "--json", "pull", "hub", "ns/p07").json
    assert pull["digest"] == push["digest"]
    assert pull["objects_downloaded"] == len(sizes)
    assert pull["bytes_downloaded"] == sum(sizes.values())
    assert pull["audit"]["verified"] is False  # said, not silently dropped
    kvreg(dst, "fsck")
    prompt = tmp_path / "suffix.txt"
    prompt.write_text(SUFFIX, encoding="utf-8")
    graft = kvreg(
        dst, "--json", "graft", "ns/p07", "--model", llama, "--append-file", prompt,
        "--max-new-tokens", "4", "--check",
    ).json  # fmt: skip
    assert graft["check"]["byte_exact"] is True
    assert graft["check"]["sha256_equal_steps"] == graft["check"]["steps"]

    listed = kvreg(dst, "--json", "ls-remote", "hub", "ns").json
    assert [(r["ref"], r["digest"]) for r in listed["refs"]] == [("ns/p07", push["digest"])]
    everywhere = kvreg(dst, "--json", "ls-remote", "hub").json  # the catalog, under the prefix
    assert everywhere["namespaces"] == ["ns"] and everywhere["refs"] == listed["refs"]
    shown = kvreg(dst, "--json", "remote", "show", "hub").json
    assert shown["kind"] == "oci" and any("transparency log" in line for line in shown["limitations"])


def test_tag_immutability_and_mount_from_another_repository(
    depositor: dict[str, Any], tmp_path: Path
) -> None:
    reg, prefix = oci_open_registry(), _prefix()
    pusher = _home(tmp_path, "pusher", reg["url"], prefix, source=depositor["home"])
    kvreg(pusher, "push", "hub", "src/p07", "--as", "a/p07", "--tag")
    moved = kvreg(pusher, "--json", "push", "hub", "src/p07x", "--as", "a/p07", expect=None)
    assert moved.rc != 0 and "TAG_IMMUTABLE" in moved.out + moved.err
    # Another namespace of the same registry: the blobs the two artifacts share are mounted.
    second = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "b/p07").json
    assert second["objects_mounted"] == second["objects_missing"] > 0
    assert second["bytes_sent"] == 0


# --- refusals: exit 3, nothing written ------------------------------------------------------


def _pushed(
    depositor: dict[str, Any], tmp_path: Path, reg: dict[str, str], name: str = "p07"
) -> tuple[str, dict[str, Any]]:
    prefix = _prefix()
    pusher = _home(tmp_path, "pusher", reg["url"], prefix, source=depositor["home"])
    push = kvreg(pusher, "--json", "push", "hub", f"src/{name}", "--as", "ns/p07").json
    return prefix, push


def test_flipped_byte_in_registry_storage_stores_nothing(depositor: dict[str, Any], tmp_path: Path) -> None:
    reg = oci_open_registry()
    prefix, _ = _pushed(depositor, tmp_path, reg)
    chunk = str(depositor["manifests"]["p07"].chunks[1].digest)
    blob = oci_blob_path(reg["root"], chunk)
    original = blob.read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x01
    dst = _reader(tmp_path, "reader", reg["url"], prefix, "ns", depositor["public_key"])
    try:
        blob.write_bytes(bytes(damaged))
        run = _refused(dst, "hub", "ns/p07")
    finally:
        blob.write_bytes(original)  # the registry's storage is shared with other tests
    assert "DIGEST_MISMATCH" in run.out + run.err
    assert not list((dst / "tmp").glob("pull-*")), "nothing of the tampered pull is left staged"
    kvreg(dst, "pull", "hub", "ns/p07")  # the intact blob pulls


def test_swapped_layer_is_refused(depositor: dict[str, Any], tmp_path: Path) -> None:
    """A registry that re-signs nothing but rewrites the artifact manifest (a layer swapped for
    another blob) and attaches the genuine envelope to it is caught by the layer check."""
    reg = oci_open_registry()
    prefix, push = _pushed(depositor, tmp_path, reg)
    repo = f"{prefix}/ns"
    raw, _ = _manifest(reg["url"], repo, "p07")
    doc = json.loads(raw)
    other = depositor["manifests"]["other"].chunks[0]
    doc["layers"][1]["digest"], doc["layers"][1]["size"] = str(other.digest), other.size
    # The swapped-in blob must be in the repository for the registry to take the manifest.
    _upload(reg["url"], repo, depositor["home"], str(other.digest))
    forged = json.dumps(doc).encode()
    _put_manifest(reg["url"], repo, "p07", forged, doc["mediaType"])
    # Attach the genuine signature manifest (same envelope) to the forged manifest.
    fallback = f"sha256-{push['oci']['manifest'].removeprefix('sha256:')}"
    index = json.loads(_manifest(reg["url"], repo, fallback)[0])
    sig_raw, _ = _manifest(reg["url"], repo, index["manifests"][0]["digest"])
    sig = json.loads(sig_raw)
    forged_digest = "sha256:" + hashlib.sha256(forged).hexdigest()
    sig["subject"] = {"mediaType": doc["mediaType"], "digest": forged_digest, "size": len(forged)}
    sig_bytes = json.dumps(sig).encode()
    sig_digest = "sha256:" + hashlib.sha256(sig_bytes).hexdigest()
    _put_manifest(reg["url"], repo, sig_digest, sig_bytes, doc["mediaType"])
    index["manifests"] = [{**index["manifests"][0], "digest": sig_digest, "size": len(sig_bytes)}]
    _put_manifest(
        reg["url"], repo, f"sha256-{forged_digest.removeprefix('sha256:')}", json.dumps(index).encode(),
        "application/vnd.oci.image.index.v1+json",
    )  # fmt: skip
    dst = _reader(tmp_path, "reader", reg["url"], prefix, "ns", depositor["public_key"])
    run = _refused(dst, "hub", "ns/p07")
    assert "DIGEST_MISMATCH" in run.out + run.err and "layers" in run.out + run.err


def _upload(url: str, repo: str, home: Path, digest: str) -> None:
    """Upload object ``digest`` of the store ``home`` as a blob of ``repo`` (plain HTTP, no kvreg)."""
    hexdigest = digest.removeprefix("sha256:")
    data = (home / "objects" / hexdigest[:2] / hexdigest[2:]).read_bytes()
    start = httpx.post(f"{url}/v2/{repo}/blobs/uploads/")
    assert start.status_code == 202, start.text
    location = httpx.URL(url).join(start.headers["Location"])
    done = httpx.put(location.copy_merge_params({"digest": digest}), content=data)
    assert done.status_code == 201, done.text


def test_untrusted_signer_is_refused_before_any_chunk(depositor: dict[str, Any], tmp_path: Path) -> None:
    reg = oci_open_registry()
    prefix, _ = _pushed(depositor, tmp_path, reg)
    stranger = tmp_path / "stranger"
    kvreg(stranger, "keys", "generate")
    key = kvreg(stranger, "keys", "export").out.strip()
    dst = _reader(tmp_path, "reader", reg["url"], prefix, "ns", key)
    run = _refused(dst, "hub", "ns/p07")
    assert "KEY_UNTRUSTED" in run.out + run.err or "SIGNATURE" in run.out + run.err


def test_tag_moved_back_to_an_older_manifest_is_refused(depositor: dict[str, Any], tmp_path: Path) -> None:
    reg, prefix = oci_open_registry(), _prefix()
    pusher = _home(tmp_path, "pusher", reg["url"], prefix, source=depositor["home"])
    first = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/t").json
    dst = _reader(tmp_path, "reader", reg["url"], prefix, "ns", depositor["public_key"])
    kvreg(dst, "pull", "hub", "ns/t")
    kvreg(pusher, "push", "hub", "src/p07x", "--as", "ns/t")
    kvreg(dst, "pull", "hub", "ns/t")  # moved forward: accepted
    # Whoever can write to the registry puts the first (validly signed) manifest back.
    raw, _ = _manifest(reg["url"], f"{prefix}/ns", first["oci"]["manifest"])
    _put_manifest(reg["url"], f"{prefix}/ns", "t", raw, "application/vnd.oci.image.manifest.v1+json")
    run = _refused(dst, "hub", "ns/t")
    assert "REF_ROLLBACK" in run.out + run.err
    allowed = kvreg(dst, "--json", "pull", "hub", "ns/t", "--allow-rollback").json
    assert allowed["digest"] == first["digest"] and allowed["warnings"]


# --- credentials -------------------------------------------------------------------------------


def test_basic_auth_from_docker_config_helper_and_login(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, prefix = oci_registry(), _prefix()
    host = _host(reg["url"])
    pusher = _home(tmp_path, "pusher", reg["url"], prefix, source=depositor["home"])
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
    dst = _reader(tmp_path, "reader", reg["url"], prefix, "ns", depositor["public_key"])
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


# --- a killed pull resumes ------------------------------------------------------------------------

_OCI_BLOB = re.compile(r"/v2/.+/blobs/sha256:[0-9a-f]{64}$")


def test_killed_pull_resumes_with_range(depositor: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL in the middle of a blob: the next pull keeps the finished blobs and resumes the
    partial one with a Range request (subprocess: the kill must be real)."""
    reg = oci_open_registry()
    prefix, push = _pushed(depositor, tmp_path, reg, "p07x")
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07x"])
    dst = _reader(tmp_path, "reader", reg["url"], prefix, "ns", depositor["public_key"])
    allow = 3  # the envelope, then two objects; the third stalls half way
    proxy = StallingProxy(reg["url"], method="GET", allow=allow, pattern=_OCI_BLOB)
    try:
        kvreg(dst, "remote", "add", "flaky", f"oci://{_host(proxy.url)}/{prefix}", "--insecure")
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvreg", "pull", "flaky", "ns/p07", "-j", "1"],
            env=kvreg_env(dst),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proxy.stalled.wait(120), "the pull never reached the stalled blob"
            time.sleep(0.5)  # let the client write what it received
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    finally:
        proxy.close()
    staging = list((dst / "tmp").glob("pull-*"))
    assert len(staging) == 1
    complete, partial = staged_files(staging[0], sizes)
    assert len(complete) == allow - 1
    assert len(partial) == 1 and partial[0].stat().st_size > 0
    finished = sum(p.stat().st_size for p in complete) + partial[0].stat().st_size
    assert not (dst / "refs" / "ns").exists(), "nothing is visible before the pull completes"

    report = kvreg(dst, "--json", "pull", "hub", "ns/p07").json
    assert report["digest"] == push["digest"]
    assert report["objects_staged"] == allow - 1
    assert report["bytes_downloaded"] == sum(sizes.values()) - finished
    kvreg(dst, "verify", "ns/p07")
    assert not list((dst / "tmp").glob("pull-*"))


# --- interoperability with the ORAS SDK -------------------------------------------------------

_ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"


def _oras_copy(src: Any, dst: Any, src_repo: str, dst_repo: str, reference: str, tmp: Path) -> str:
    """Copy manifest ``reference`` of ``src_repo`` with every blob it names, byte for byte, using
    the ORAS SDK's blob and request calls (as ``oras cp`` does); its digest."""
    s_base, d_base = f"{src.prefix}://{src.hostname}/v2", f"{dst.prefix}://{dst.hostname}/v2"
    got = src.do_request(f"{s_base}/{src_repo}/manifests/{reference}", headers={"Accept": _ACCEPT})
    assert got.status_code == 200, got.text
    raw, media = got.content, got.headers["Content-Type"]
    doc = json.loads(raw)
    src_container = src.get_container(f"{src.hostname}/{src_repo}:latest")  # blobs: only the path counts
    dst_container = dst.get_container(f"{dst.hostname}/{dst_repo}:latest")
    for blob in [doc["config"], *doc.get("layers", [])] if "config" in doc else []:
        path = tmp / blob["digest"].replace(":", "-")
        src.download_blob(src_container, blob["digest"], str(path))
        if not dst.blob_exists(blob, dst_container):
            r = dst.upload_blob(str(path), dst_container, blob)
            assert r.status_code in (200, 201), r.text
    put = dst.do_request(
        f"{d_base}/{dst_repo}/manifests/{reference}", "PUT", data=raw, headers={"Content-Type": media}
    )
    assert put.status_code == 201, put.text
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def test_oras_lists_pulls_and_copies_a_kvreg_artifact(
    depositor: dict[str, Any], llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import oras.client
    import oras.provider

    reg, auth = oci_open_registry(), oci_registry()
    prefix, push = _pushed(depositor, tmp_path, reg)
    repo, host = f"{prefix}/ns", _host(reg["url"])

    # oras lists the tags and pulls the layers as files: byte-identical to the store's objects.
    client = oras.client.OrasClient(hostname=host, insecure=True)
    tags = client.get_tags(f"{host}/{repo}")
    assert "p07" in tags
    out = tmp_path / "oras-out"
    files = client.pull(target=f"{host}/{repo}:p07", outdir=str(out))
    manifest = depositor["manifests"]["p07"]
    layers = json.loads(_manifest(reg["url"], repo, "p07")[0])["layers"]
    assert sorted(Path(f).name for f in files) == sorted(
        layer["annotations"]["org.opencontainers.image.title"] for layer in layers
    )
    store = depositor["home"] / "objects"
    for layer in layers:
        hexdigest = layer["digest"].removeprefix("sha256:")
        pulled = (out / layer["annotations"]["org.opencontainers.image.title"]).read_bytes()
        assert pulled == (store / hexdigest[:2] / hexdigest[2:]).read_bytes()
    assert [layer["digest"] for layer in layers] == [str(d) for d in manifest.object_digests()]

    # A generic copy to the other registry (the artifact, its signature and the referrers tag).
    src = oras.provider.Registry(hostname=host, insecure=True)
    dst = oras.provider.Registry(hostname=_host(auth["url"]), insecure=True, auth_backend="basic")
    dst.login(auth["user"], auth["password"], hostname=_host(auth["url"]))
    copy = tmp_path / "copy"
    copy.mkdir()
    other = _prefix()
    fallback = f"sha256-{push['oci']['manifest'].removeprefix('sha256:')}"
    index = json.loads(_manifest(reg["url"], repo, fallback)[0])
    for sig in index["manifests"]:
        _oras_copy(src, dst, repo, f"{other}/ns", sig["digest"], copy)
    _oras_copy(src, dst, repo, f"{other}/ns", fallback, copy)
    assert _oras_copy(src, dst, repo, f"{other}/ns", "p07", copy) == push["oci"]["manifest"]

    config = tmp_path / "docker-auth"
    config.mkdir()
    basic = base64.b64encode(f"{auth['user']}:{auth['password']}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {_host(auth["url"]): {"auth": basic}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    dst_home = _reader(tmp_path, "copied", auth["url"], other, "ns", depositor["public_key"])
    pulled = kvreg(dst_home, "--json", "pull", "hub", "ns/p07").json
    assert pulled["digest"] == push["digest"]
    prompt = tmp_path / "suffix.txt"
    prompt.write_text(SUFFIX, encoding="utf-8")
    graft = kvreg(
        dst_home, "--json", "graft", "ns/p07", "--model", llama, "--append-file", prompt,
        "--max-new-tokens", "4", "--check",
    ).json  # fmt: skip
    assert graft["check"]["byte_exact"] is True


# --- the Docker token flow (Bearer) ---------------------------------------------------------------


def test_bearer_token_flow(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry with ``auth: token``: anonymous requests get tokens without access (refused), Basic
    credentials from a Docker config file get tokens per scope, cached; push and pull work."""
    with token_registry(tmp_path) as reg:
        prefix = _prefix()
        pusher = _home(tmp_path, "pusher", reg.url, prefix, source=depositor["home"])
        denied = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07", expect=None)
        assert denied.rc != 0 and "UNAUTHENTICATED" in denied.out + denied.err
        assert reg.requests and all(r["user"] is None for r in reg.requests)

        config = tmp_path / "docker-bearer"
        config.mkdir()
        basic = base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {_host(reg.url): {"auth": basic}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(config))
        reg.requests.clear()
        push = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/p07").json
        assert push["ref_changed"] is True
        scopes = [tuple(r["scopes"]) for r in reg.requests]
        assert all(r["user"] == reg.user and r["service"] == [SERVICE] for r in reg.requests)
        assert (f"repository:{prefix}/ns:pull,push",) in scopes
        assert len(scopes) == len(set(scopes)), "one token per set of scopes, cached"

        dst = _reader(tmp_path, "reader", reg.url, prefix, "ns", depositor["public_key"])
        pull = kvreg(dst, "--json", "pull", "hub", "ns/p07").json
        assert pull["digest"] == push["digest"]
        login = kvreg(dst, "--json", "login", "hub", "-u", reg.user, "--password-stdin", stdin=reg.password)
        assert login.json["scheme"] == "bearer"

        # An identity token (what `docker login` keeps for OAuth2 registries such as ACR).
        other = _reader(tmp_path, "identity", reg.url, prefix, "ns", depositor["public_key"])
        (config / "config.json").write_text(
            json.dumps({"auths": {_host(reg.url): {"identitytoken": reg.identity}}})
        )
        reg.requests.clear()
        assert kvreg(other, "--json", "pull", "hub", "ns/p07").json["digest"] == push["digest"]
        assert reg.requests and all(r["user"] == "identity" for r in reg.requests)


# --- kvreg ask: lazy pull and on-demand chunks from an OCI registry -------------------------------


def test_ask_pulls_lazily_and_fetches_chunks_on_demand(
    depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    """No routing by block keys on an OCI registry: ``--namespace`` names where to look; the
    artifacts there are pulled lazily (signature checked, tokens only), routed locally, and the
    chunks the graft reads are fetched on demand from the repository they were pulled from."""
    reg = oci_open_registry()
    prefix, push = _pushed(depositor, tmp_path, reg)
    dst = _reader(tmp_path, "asker", reg["url"], prefix, "ns", depositor["public_key"])
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(TEXT + SUFFIX, encoding="utf-8")
    answer = kvreg(
        dst, "--json", "ask", "--model", llama, "--prompt-file", prompt, "--block-size", BLOCK,
        "--mode", "prefix", "--max-new-tokens", "2", "--remote", "hub", "--namespace", "ns",
    ).json  # fmt: skip
    assert answer["remote"]["pulled"] == [{"ref": "ns/p07", "manifest_digest": push["digest"]}]
    assert answer["mode"] == "prefix" and answer["fallback"] is False
    assert answer["remote"]["fetched_objects"] > 0 and answer["remote"]["fetched_bytes"] > 0
    chunks = depositor["manifests"]["p07"].chunks
    assert answer["remote"]["fetched_objects"] < len(chunks) + 2  # only what the graft reads


def test_chunks_of_a_lazy_pull_under_another_name_come_from_its_repository(
    depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    """``pull --lazy --as mine/p07`` records where the chunks stayed (repository PREFIX/ns); ``ask``
    over the OCI remote routes locally and fetches them from there, not from PREFIX/mine."""
    reg = oci_open_registry()
    prefix, push = _pushed(depositor, tmp_path, reg)
    dst = _reader(tmp_path, "asker", reg["url"], prefix, "mine", depositor["public_key"])
    lazy = kvreg(dst, "--json", "pull", "hub", "ns/p07", "--lazy", "--as", "mine/p07").json
    assert lazy["objects_deferred"] > 0 and lazy["digest"] == push["digest"]
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(TEXT + SUFFIX, encoding="utf-8")
    answer = kvreg(
        dst, "--json", "ask", "--model", llama, "--prompt-file", prompt, "--block-size", BLOCK,
        "--mode", "prefix", "--max-new-tokens", "2", "--remote", "hub",
    ).json  # fmt: skip
    assert answer["mode"] == "prefix" and answer["fallback"] is False, answer
    assert answer["artifact"]["ref"] == "mine/p07"
    assert answer["remote"]["pulled"] == [] and answer["remote"]["fetched_objects"] > 0


def test_tag_lists_are_paginated_and_manifests_verified(
    depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client follows ``Link: <...>; rel="next"`` page by page, and a manifest whose bytes
    do not hash to the digest asked for is refused."""
    from kvreg.core.errors import DigestMismatchError
    from kvreg.remote.oci import manifests
    from kvreg.remote.oci.client import OciClient
    from kvreg.remote.remotes import parse_oci_url

    reg = oci_open_registry()
    prefix, push = _pushed(depositor, tmp_path, reg)
    pusher = tmp_path / "pusher"
    for name in ("p07-b", "p07-c"):
        kvreg(pusher, "push", "hub", "src/p07", "--as", f"ns/{name}")
    monkeypatch.setattr(manifests, "_PAGE", 1)
    with OciClient(parse_oci_url(f"oci://{_host(reg['url'])}/{prefix}", insecure=True)) as client:
        repo = client.repository("ns")
        tags = client.list_tags(repo)
        assert sorted(t for t in tags if not t.startswith("sha256-")) == ["p07", "p07-b", "p07-c"]
        assert client.list_tags(client.repository("absent")) == []
        wrong = "sha256:" + "0" * 64
        raw = client.get_manifest(repo, push["oci"]["manifest"])
        assert raw is not None and hashlib.sha256(raw).hexdigest() == push["oci"]["manifest"][7:]
        monkeypatch.setattr(client, "url", lambda r, *parts: f"{reg['url']}/v2/{repo}/manifests/p07")
        with pytest.raises(DigestMismatchError):
            client.get_manifest(repo, wrong)


def test_large_blobs_go_in_chunks_and_mounts_fall_back_to_uploads(tmp_path: Path) -> None:
    """Above the threshold a blob is sent in PATCH pieces with Content-Range; a mount from a
    repository that lacks the blob falls back to an upload in the location the registry opened."""
    from kvreg.core.digest import Digest
    from kvreg.remote.oci.client import OciClient
    from kvreg.remote.remotes import parse_oci_url

    reg = oci_open_registry()
    data = os.urandom(10_000)
    path = tmp_path / "blob"
    path.write_bytes(data)
    digest = Digest.of_bytes(data)
    location = parse_oci_url(f"oci://{_host(reg['url'])}/{_prefix()}", insecure=True)
    sent: list[int] = []
    with OciClient(location, chunk_threshold=4096) as client:
        repo = client.repository("ns")
        client.upload_blob(repo, digest, path, len(data), progress_cb=sent.append)
        assert sum(sent) == len(data) and len(sent) >= 3  # three pieces: 4096 + 4096 + 1808
        assert client.blob_size(repo, digest) == len(data)
        got = client.get_object_to("ns", digest, tmp_path / "back")
        assert got.digest == digest and (tmp_path / "back").read_bytes() == data
        fresh = os.urandom(100)
        (tmp_path / "fresh").write_bytes(fresh)
        opened = client.mount_blob(client.repository("other"), Digest.of_bytes(fresh), repo)
        assert opened is not None  # not there to mount: an upload location instead
        client.upload_blob(
            client.repository("other"), Digest.of_bytes(fresh), tmp_path / "fresh", 100, location=opened
        )
        assert client.blob_size(client.repository("other"), Digest.of_bytes(fresh)) == 100
        assert client.mount_blob(client.repository("third"), digest, repo) is None  # mounted
