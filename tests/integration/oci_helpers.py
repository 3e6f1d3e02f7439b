"""Helpers of the OCI tests: client homes with an OCI remote, raw registry requests, refusals.

Each test works under a repository prefix of its own (:func:`new_prefix`): the
registries of ``make services`` are shared by every test and every run.
"""

from __future__ import annotations

import hashlib
import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx

from cli.helpers import SUFFIX, kvreg, snapshot


def new_prefix() -> str:
    return f"kvt{uuid.uuid4().hex[:12]}"


def host_of(url: str) -> str:
    return url.removeprefix("http://")


def oci_home(tmp_path: Path, name: str, url: str, prefix: str, *, source: Path | None = None) -> Path:
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
    kvreg(home, "remote", "add", "hub", f"oci://{host_of(url)}/{prefix}", "--insecure")
    return home


def oci_reader(tmp_path: Path, name: str, url: str, prefix: str, ns: str, key: str) -> Path:
    home = oci_home(tmp_path, name, url, prefix)
    kvreg(home, "trust", "add", ns, key)
    return home


def get_manifest(url: str, repo: str, ref: str, auth: tuple[str, str] | None = None) -> tuple[bytes, str]:
    r = httpx.get(
        f"{url}/v2/{repo}/manifests/{ref}",
        headers={
            "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"
        },
        auth=auth,
    )
    r.raise_for_status()
    return r.content, r.headers["Docker-Content-Digest"]


def put_manifest(url: str, repo: str, ref: str, data: bytes, media: str) -> None:
    r = httpx.put(f"{url}/v2/{repo}/manifests/{ref}", content=data, headers={"Content-Type": media})
    assert r.status_code == 201, r.text


def refused_pull(home: Path, *args: str) -> Any:
    """Run a pull that must end in exit 3 and leave the store as it was (no file, no staging folder)."""
    before = snapshot(home)
    run = kvreg(home, "--json", "pull", *args, expect=3)
    after = snapshot(home)
    if "tmp" not in before and after.get("tmp", (0, 0))[0] == 0:
        after.pop("tmp", None)  # the (empty) parent folder of pull staging folders
    assert after == before, "a refused pull wrote to the store"
    return run


def pushed(
    depositor: dict[str, Any], tmp_path: Path, url: str, name: str = "p07"
) -> tuple[str, dict[str, Any]]:
    prefix = new_prefix()
    pusher = oci_home(tmp_path, "pusher", url, prefix, source=depositor["home"])
    push = kvreg(pusher, "--json", "push", "hub", f"src/{name}", "--as", "ns/p07").json
    return prefix, push


def upload_object(url: str, repo: str, home: Path, digest: str) -> None:
    """Upload object ``digest`` of the store ``home`` as a blob of ``repo`` (plain HTTP, no kvreg)."""
    hexdigest = digest.removeprefix("sha256:")
    upload_blob(url, repo, (home / "objects" / hexdigest[:2] / hexdigest[2:]).read_bytes())


def upload_blob(url: str, repo: str, data: bytes) -> str:
    """Upload ``data`` as a blob of ``repo`` (plain HTTP, no kvreg); its digest."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = httpx.post(f"{url}/v2/{repo}/blobs/uploads/")
    assert start.status_code == 202, start.text
    location = httpx.URL(url).join(start.headers["Location"])
    done = httpx.put(location.copy_merge_params({"digest": digest}), content=data)
    assert done.status_code == 201, done.text
    return digest


def graft_is_byte_exact(home: Path, ref: str, model: Path, tmp_path: Path) -> None:
    """``kvreg graft REF --check`` with the suite's suffix appended: every step byte-exact."""
    prompt = tmp_path / "suffix.txt"
    prompt.write_text(SUFFIX, encoding="utf-8")
    options = ["--append-file", prompt, "--max-new-tokens", "4", "--check"]
    graft = kvreg(home, "--json", "graft", ref, "--model", model, *options).json
    assert graft["check"]["byte_exact"] is True
    assert graft["check"]["sha256_equal_steps"] == graft["check"]["steps"]
