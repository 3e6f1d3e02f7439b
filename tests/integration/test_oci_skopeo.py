"""Debian's skopeo (containers/image, the library under podman, buildah and CRI-O) against a live
kvreg registry's ``/v2/``, on both backends.

skopeo learns how to authenticate from ``GET /v2/``: it must answer ``401`` with the Bearer
challenge, then ``/v2/token`` gives skopeo a token scoped to what it asked for. With a
kvreg token as the password (``--creds any:TOKEN``), skopeo lists the tags of a private
namespace and copies an artifact into an OCI layout; anonymously it does the same for a
public namespace and is refused a private one. The copied blobs are the artifact's
objects, byte for byte. Then skopeo copies an artifact and its signature manifest from
kvreg into CNCF distribution, and kvreg pulls it from there and grafts it byte-exactly.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from cli.helpers import kvreg
from kvreg.core import oci
from kvreg.core.digest import Digest
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.store.home import Home
from remote.helpers import build_artifact, store_built
from services import oci_open_registry

from .oci_helpers import graft_is_byte_exact, host_of, new_prefix, oci_reader, put_manifest
from .registry_server import Registry

SKOPEO = shutil.which("skopeo")


def _skopeo(tmp_path: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """skopeo with plain HTTP to loopback, and no credentials but those given on its command line."""
    assert SKOPEO is not None, "skopeo is not installed: run `make services` (scripts/services.sh)"
    auth = tmp_path / "skopeo-auth.json"
    if not auth.exists():
        auth.write_text("{}")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "REGISTRY_AUTH_FILE": str(auth)}
    done = subprocess.run(
        [SKOPEO, "--insecure-policy", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if ok:
        assert done.returncode == 0, f"skopeo {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def _layout_blobs(layout: Path) -> tuple[str, dict[str, bytes]]:
    """The manifest digest an OCI layout's index names, and every blob of the layout by digest."""
    index = json.loads((layout / "index.json").read_text())
    [entry] = index["manifests"]
    blobs = {f"sha256:{p.name}": p.read_bytes() for p in (layout / "blobs" / "sha256").iterdir()}
    for digest, data in blobs.items():
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return entry["digest"], blobs


def _published(registry: Registry, tmp_path: Path, *, public: bool) -> tuple[str, Any, str]:
    """A namespace holding ``answer`` (a synthetic artifact pushed by kvreg), and a reader's token."""
    key = SigningKey.generate()
    ns = registry.namespace(public=public)
    registry.register_key(ns, key.public_key.to_text())
    home = tmp_path / f"pusher-{ns}"
    kvreg(home, "remote", "add", "origin", registry.url)
    kvreg(home, "login", "origin", "--token", registry.user({ns: "write"}))
    kvreg(home, "trust", "add", ns, key.public_key.to_text())
    built = build_artifact(key, token_count=12, block_size=4, chunk_bytes=150_000)
    store_built(Home(home), built, RefName.parse(f"{ns}/answer"))
    kvreg(home, "push", "origin", f"{ns}/answer")
    return ns, built, registry.user({ns: "read"})


@pytest.mark.parametrize("public", [False, True], ids=["private", "public"])
def test_skopeo_lists_and_copies_an_artifact(registry: Registry, tmp_path: Path, public: bool) -> None:
    ns, built, reader = _published(registry, tmp_path, public=public)
    host = urlsplit(registry.url).netloc
    creds = [] if public else ["--creds", f"any:{reader}"]
    source = f"docker://{host}/{ns}"

    if not public:
        denied = _skopeo(tmp_path, "list-tags", "--tls-verify=false", source, ok=False)
        assert denied.returncode != 0 and "unauthorized" in denied.stderr.lower(), denied.stderr
    tags = json.loads(_skopeo(tmp_path, "list-tags", "--tls-verify=false", *creds, source).stdout)
    assert tags["Tags"] == ["answer"]

    layout = tmp_path / "layout"
    src_creds = [] if public else ["--src-creds", f"any:{reader}"]
    _skopeo(
        tmp_path, "copy", "--src-tls-verify=false", *src_creds, f"{source}:answer", f"oci:{layout}:answer"
    )
    digest, blobs = _layout_blobs(layout)
    manifest = blobs[digest]
    art = oci.parse_artifact_manifest(manifest)  # kvreg's artifact manifest, unchanged by the copy
    assert str(art.kvreg_manifest) == built.digest
    oci.check_artifact(art, built.manifest)
    for layer in art.layers:
        assert blobs[str(layer.digest)] == built.objects[layer.digest]
    assert blobs[built.digest] == built.manifest.raw_bytes  # the config: the signed kvreg manifest


def test_skopeo_copies_from_kvreg_into_distribution_and_kvreg_grafts_from_there(
    registry: Registry, depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    """A real deposit pushed to a private namespace of kvreg; skopeo copies the artifact and its
    signature manifest into CNCF distribution (the referrers tag's index, which skopeo does
    not copy, is written by the test); kvreg pulls it from there and grafts it byte-exactly."""
    ns = registry.namespace(public=False)
    registry.register_key(ns, depositor["public_key"])
    pusher = tmp_path / "pusher"
    shutil.copytree(depositor["home"], pusher, symlinks=True)
    kvreg(pusher, "remote", "add", "origin", registry.url)
    kvreg(pusher, "login", "origin", "--token", registry.user({ns: "write"}))
    kvreg(pusher, "push", "origin", "src/p07", "--as", f"{ns}/p07")
    reader = registry.user({ns: "read"})

    kv_host = urlsplit(registry.url).netloc
    dist, prefix = oci_open_registry(), new_prefix()
    target = f"docker://{host_of(dist['url'])}/{prefix}/{ns}"
    copy = ["copy", "--src-tls-verify=false", "--dest-tls-verify=false", "--src-creds", f"any:{reader}"]
    _skopeo(tmp_path, *copy, f"docker://{kv_host}/{ns}:p07", f"{target}:p07")

    basic = ("any", reader)
    art = httpx.get(f"{registry.url}/v2/{ns}/manifests/p07", auth=basic, timeout=30)
    art_digest = art.headers["docker-content-digest"]
    referrers = httpx.get(f"{registry.url}/v2/{ns}/referrers/{art_digest}", auth=basic, timeout=30).json()
    [signature] = referrers["manifests"]
    _skopeo(
        tmp_path, *copy, f"docker://{kv_host}/{ns}@{signature['digest']}", f"{target}@{signature['digest']}"
    )
    index = json.dumps(referrers).encode()
    put_manifest(dist["url"], f"{prefix}/{ns}", oci.referrers_tag(Digest(art_digest)), index, oci.OCI_INDEX)
    copied = httpx.get(f"{dist['url']}/v2/{prefix}/{ns}/manifests/p07", headers={"Accept": oci.OCI_MANIFEST})
    assert copied.headers["docker-content-digest"] == art_digest  # byte for byte

    dst = oci_reader(tmp_path, "reader", dist["url"], prefix, ns, depositor["public_key"])
    pulled = kvreg(dst, "--json", "pull", "hub", f"{ns}/p07").json
    assert pulled["digest"] == str(depositor["manifests"]["p07"].digest)
    graft_is_byte_exact(dst, f"{ns}/p07", llama, tmp_path)
