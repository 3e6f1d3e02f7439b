"""Other OCI clients on kvreg's artifacts: the ORAS SDK between registries, and Debian's skopeo.

kvreg pushes to CNCF distribution; the ORAS Python SDK lists the tags, pulls the layers
(byte-identical to the store's objects) and copies the artifact with its signature to
a second registry, from which kvreg pulls and grafts byte-exactly.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from cli.helpers import kvreg
from services import oci_open_registry, oci_registry

from .oci_helpers import get_manifest, graft_is_byte_exact, host_of, new_prefix, oci_reader, pushed

# --- the ORAS SDK between two distributions --------------------------------------------------

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
    prefix, push = pushed(depositor, tmp_path, reg["url"])
    repo, host = f"{prefix}/ns", host_of(reg["url"])

    # oras lists the tags and pulls the layers as files: byte-identical to the store's objects.
    client = oras.client.OrasClient(hostname=host, insecure=True)
    tags = client.get_tags(f"{host}/{repo}")
    assert "p07" in tags
    out = tmp_path / "oras-out"
    files = client.pull(target=f"{host}/{repo}:p07", outdir=str(out))
    manifest = depositor["manifests"]["p07"]
    layers = json.loads(get_manifest(reg["url"], repo, "p07")[0])["layers"]
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
    dst = oras.provider.Registry(hostname=host_of(auth["url"]), insecure=True, auth_backend="basic")
    dst.login(auth["user"], auth["password"], hostname=host_of(auth["url"]))
    copy = tmp_path / "copy"
    copy.mkdir()
    other = new_prefix()
    fallback = f"sha256-{push['oci']['manifest'].removeprefix('sha256:')}"
    index = json.loads(get_manifest(reg["url"], repo, fallback)[0])
    for sig in index["manifests"]:
        _oras_copy(src, dst, repo, f"{other}/ns", sig["digest"], copy)
    _oras_copy(src, dst, repo, f"{other}/ns", fallback, copy)
    assert _oras_copy(src, dst, repo, f"{other}/ns", "p07", copy) == push["oci"]["manifest"]

    config = tmp_path / "docker-auth"
    config.mkdir()
    basic = base64.b64encode(f"{auth['user']}:{auth['password']}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {host_of(auth["url"]): {"auth": basic}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    dst_home = oci_reader(tmp_path, "copied", auth["url"], other, "ns", depositor["public_key"])
    pulled = kvreg(dst_home, "--json", "pull", "hub", "ns/p07").json
    assert pulled["digest"] == push["digest"]
    graft_is_byte_exact(dst_home, "ns/p07", llama, tmp_path)
