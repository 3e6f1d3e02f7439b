"""kvreg push and pull through real OCI registries (CNCF distribution 2.8, Debian's docker-registry).

Every test runs against two registries (``oci_targets``): one that serves blobs from a
folder, and one on S3 storage that answers every blob GET and HEAD with a redirect to
a presigned URL of the store, as registries on object storage do. Push, pull into a
fresh home and ``graft --check`` byte-exact; a second push sends no blob bytes; mounts;
a flipped byte in the registry's blob storage, a swapped layer, a signature by an
untrusted key and a tag moved back to an older manifest each end in exit 3 with
nothing written to the home; a killed pull resumes with ``Range``. Distribution 2.8
has no referrers API, so the referrers tag schema is what these tests exercise.
Authentication is in ``test_oci_auth``, other clients in ``test_oci_interop``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.helpers import BLOCK, SUFFIX, TEXT, kvreg, kvreg_env

from .conftest import OTHER_TEXT, object_sizes, staged_files
from .oci_helpers import (
    get_manifest,
    graft_is_byte_exact,
    host_of,
    new_prefix,
    oci_home,
    oci_reader,
    pushed,
    put_manifest,
    refused_pull,
    upload_blob,
    upload_object,
)
from .oci_targets import KINDS, OciTarget, oci_target
from .proxy import LoopbackServer, QuietHandler, StallingProxy, forward, read_body, relay


@pytest.fixture(params=KINDS)
def oci(request: pytest.FixtureRequest) -> OciTarget:
    """Each OCI registry of ``make services`` without authentication, in turn."""
    return oci_target(request.param)


# --- push, pull, graft ---------------------------------------------------------------------


def test_push_pull_graft_byte_exact_and_second_push_sends_nothing(
    oci: OciTarget, depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    prefix = new_prefix()
    pusher = oci_home(tmp_path, "pusher", oci.url, prefix, source=depositor["home"])
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
    index = json.loads(get_manifest(oci.url, f"{prefix}/ns", fallback)[0])
    assert [m["artifactType"] for m in index["manifests"]] == ["application/vnd.kvreg.signature.v1+json"]

    dst = oci_reader(tmp_path, "reader", oci.url, prefix, "ns", depositor["public_key"])
    pull = kvreg(dst, "--json", "pull", "hub", "ns/p07").json
    assert pull["digest"] == push["digest"]
    assert pull["objects_downloaded"] == len(sizes)
    assert pull["bytes_downloaded"] == sum(sizes.values())
    assert pull["audit"]["verified"] is False  # said, not silently dropped
    kvreg(dst, "fsck")
    graft_is_byte_exact(dst, "ns/p07", llama, tmp_path)

    listed = kvreg(dst, "--json", "ls-remote", "hub", "ns").json
    assert [(r["ref"], r["digest"]) for r in listed["refs"]] == [("ns/p07", push["digest"])]
    everywhere = kvreg(dst, "--json", "ls-remote", "hub").json  # the catalog, under the prefix
    assert everywhere["namespaces"] == ["ns"] and everywhere["refs"] == listed["refs"]
    shown = kvreg(dst, "--json", "remote", "show", "hub").json
    assert shown["kind"] == "oci" and any("transparency log" in line for line in shown["limitations"])


def test_tag_immutability_and_mount_from_another_repository(
    oci: OciTarget, depositor: dict[str, Any], tmp_path: Path
) -> None:
    prefix = new_prefix()
    pusher = oci_home(tmp_path, "pusher", oci.url, prefix, source=depositor["home"])
    kvreg(pusher, "push", "hub", "src/p07", "--as", "a/p07", "--tag")
    moved = kvreg(pusher, "--json", "push", "hub", "src/p07x", "--as", "a/p07", expect=None)
    assert moved.rc != 0 and "TAG_IMMUTABLE" in moved.out + moved.err
    # Another namespace of the same registry: the blobs the two artifacts share are mounted.
    second = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "b/p07").json
    assert second["objects_mounted"] == second["objects_missing"] > 0
    assert second["bytes_sent"] == 0


# --- refusals: exit 3, nothing written ------------------------------------------------------


def test_flipped_byte_in_registry_storage_stores_nothing(
    oci: OciTarget, depositor: dict[str, Any], tmp_path: Path
) -> None:
    prefix, _ = pushed(depositor, tmp_path, oci.url)
    chunk = str(depositor["manifests"]["p07"].chunks[1].digest)
    original = oci.read_blob(chunk)
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x01
    dst = oci_reader(tmp_path, "reader", oci.url, prefix, "ns", depositor["public_key"])
    try:
        oci.write_blob(chunk, bytes(damaged))
        run = refused_pull(dst, "hub", "ns/p07")
    finally:
        oci.write_blob(chunk, original)  # the registry's storage is shared with other tests
    assert "DIGEST_MISMATCH" in run.out + run.err
    assert not list((dst / "tmp").glob("pull-*")), "nothing of the tampered pull is left staged"
    kvreg(dst, "pull", "hub", "ns/p07")  # the intact blob pulls


def test_swapped_layer_is_refused(oci: OciTarget, depositor: dict[str, Any], tmp_path: Path) -> None:
    """A registry that re-signs nothing but rewrites the artifact manifest (a layer swapped for
    another blob) and attaches the genuine envelope to it is caught by the layer check."""
    prefix, push = pushed(depositor, tmp_path, oci.url)
    repo = f"{prefix}/ns"
    raw, _ = get_manifest(oci.url, repo, "p07")
    doc = json.loads(raw)
    other = depositor["manifests"]["other"].chunks[0]
    doc["layers"][1]["digest"], doc["layers"][1]["size"] = str(other.digest), other.size
    # The swapped-in blob must be in the repository for the registry to take the manifest.
    upload_object(oci.url, repo, depositor["home"], str(other.digest))
    forged = json.dumps(doc).encode()
    put_manifest(oci.url, repo, "p07", forged, doc["mediaType"])
    # Attach the genuine signature manifest (same envelope) to the forged manifest.
    fallback = f"sha256-{push['oci']['manifest'].removeprefix('sha256:')}"
    index = json.loads(get_manifest(oci.url, repo, fallback)[0])
    sig_raw, _ = get_manifest(oci.url, repo, index["manifests"][0]["digest"])
    sig = json.loads(sig_raw)
    forged_digest = "sha256:" + hashlib.sha256(forged).hexdigest()
    sig["subject"] = {"mediaType": doc["mediaType"], "digest": forged_digest, "size": len(forged)}
    sig_bytes = json.dumps(sig).encode()
    sig_digest = "sha256:" + hashlib.sha256(sig_bytes).hexdigest()
    put_manifest(oci.url, repo, sig_digest, sig_bytes, doc["mediaType"])
    index["manifests"] = [{**index["manifests"][0], "digest": sig_digest, "size": len(sig_bytes)}]
    put_manifest(
        oci.url, repo, f"sha256-{forged_digest.removeprefix('sha256:')}", json.dumps(index).encode(),
        "application/vnd.oci.image.index.v1+json",
    )  # fmt: skip
    dst = oci_reader(tmp_path, "reader", oci.url, prefix, "ns", depositor["public_key"])
    run = refused_pull(dst, "hub", "ns/p07")
    assert "DIGEST_MISMATCH" in run.out + run.err and "layers" in run.out + run.err


def test_a_missing_or_corrupt_signature_is_passed_over_for_a_good_one(
    oci: OciTarget, depositor: dict[str, Any], tmp_path: Path
) -> None:
    """The referrers list a signature manifest that is not there and one whose envelope blob is
    not an envelope before the genuine one: the pull tries each in turn and lands verified."""
    prefix, push = pushed(depositor, tmp_path, oci.url)
    repo = f"{prefix}/ns"
    fallback = f"sha256-{push['oci']['manifest'].removeprefix('sha256:')}"
    index = json.loads(get_manifest(oci.url, repo, fallback)[0])
    genuine = index["manifests"][0]
    sig = json.loads(get_manifest(oci.url, repo, genuine["digest"])[0])
    garbage = b'{"payload": "not an envelope"}'
    envelope = {**sig["layers"][0], "digest": upload_blob(oci.url, repo, garbage), "size": len(garbage)}
    entries = []
    for layers in ([envelope], [envelope, sig["layers"][0]]):  # the corrupt one, then one to delete
        raw = json.dumps({**sig, "layers": layers}).encode()
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        put_manifest(oci.url, repo, digest, raw, sig["mediaType"])
        entries.append({**genuine, "digest": digest, "size": len(raw)})
    index["manifests"] = [entries[1], entries[0], genuine]
    media = "application/vnd.oci.image.index.v1+json"
    put_manifest(oci.url, repo, fallback, json.dumps(index).encode(), media)
    gone = httpx.delete(f"{oci.url}/v2/{repo}/manifests/{entries[1]['digest']}")
    assert gone.status_code == 202, gone.text
    dst = oci_reader(tmp_path, "reader", oci.url, prefix, "ns", depositor["public_key"])
    assert kvreg(dst, "--json", "pull", "hub", "ns/p07").json["digest"] == push["digest"]
    kvreg(dst, "verify", "ns/p07")


def test_untrusted_signer_is_refused_before_any_chunk(
    oci: OciTarget, depositor: dict[str, Any], tmp_path: Path
) -> None:
    prefix, _ = pushed(depositor, tmp_path, oci.url)
    stranger = tmp_path / "stranger"
    kvreg(stranger, "keys", "generate")
    key = kvreg(stranger, "keys", "export").out.strip()
    dst = oci_reader(tmp_path, "reader", oci.url, prefix, "ns", key)
    run = refused_pull(dst, "hub", "ns/p07")
    assert "KEY_UNTRUSTED" in run.out + run.err or "SIGNATURE" in run.out + run.err


def test_tag_moved_back_to_an_older_manifest_is_refused(
    oci: OciTarget, depositor: dict[str, Any], tmp_path: Path
) -> None:
    prefix = new_prefix()
    pusher = oci_home(tmp_path, "pusher", oci.url, prefix, source=depositor["home"])
    first = kvreg(pusher, "--json", "push", "hub", "src/p07", "--as", "ns/t").json
    dst = oci_reader(tmp_path, "reader", oci.url, prefix, "ns", depositor["public_key"])
    kvreg(dst, "pull", "hub", "ns/t")
    kvreg(pusher, "push", "hub", "src/p07x", "--as", "ns/t")
    kvreg(dst, "pull", "hub", "ns/t")  # moved forward: accepted
    # Whoever can write to the registry puts the first (validly signed) manifest back.
    raw, _ = get_manifest(oci.url, f"{prefix}/ns", first["oci"]["manifest"])
    put_manifest(oci.url, f"{prefix}/ns", "t", raw, "application/vnd.oci.image.manifest.v1+json")
    run = refused_pull(dst, "hub", "ns/t")
    assert "REF_ROLLBACK" in run.out + run.err
    allowed = kvreg(dst, "--json", "pull", "hub", "ns/t", "--allow-rollback").json
    assert allowed["digest"] == first["digest"] and allowed["warnings"]


# --- a killed pull resumes ------------------------------------------------------------------------


def test_killed_pull_resumes_with_range(oci: OciTarget, depositor: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL in the middle of a blob: the next pull keeps the finished blobs and resumes the
    partial one with a Range request (subprocess: the kill must be real). On the registry that
    redirects downloads, the storage's answer is the one cut off, and the resume asks the
    registry again and the storage for the rest."""
    prefix, push = pushed(depositor, tmp_path, oci.url, "p07x")
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07x"])
    dst = oci_reader(tmp_path, "reader", oci.url, prefix, "ns", depositor["public_key"])
    allow = 3  # the envelope, then two objects; the third stalls half way
    proxy = StallingProxy(oci.url, method="GET", allow=allow, pattern=oci.blob_download, storage=oci.storage)
    try:
        kvreg(dst, "remote", "add", "flaky", f"oci://{host_of(proxy.url)}/{prefix}", "--insecure")
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


# --- kvreg ask: lazy pull and on-demand chunks from an OCI registry -------------------------------


def test_ask_pulls_lazily_and_fetches_chunks_on_demand(
    oci: OciTarget, depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    """No routing by block keys on an OCI registry: ``--namespace`` names where to look; the
    artifacts there are pulled lazily (signature checked, tokens only), routed locally, and the
    chunks the graft reads are fetched on demand from the repository they were pulled from."""
    prefix, push = pushed(depositor, tmp_path, oci.url)
    dst = oci_reader(tmp_path, "asker", oci.url, prefix, "ns", depositor["public_key"])
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
    oci: OciTarget, depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    """``pull --lazy --as mine/p07`` records where the chunks stayed (repository PREFIX/ns); ``ask``
    over the OCI remote routes locally and fetches them from there, not from PREFIX/mine."""
    prefix, push = pushed(depositor, tmp_path, oci.url)
    dst = oci_reader(tmp_path, "asker", oci.url, prefix, "mine", depositor["public_key"])
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
    oci: OciTarget, depositor: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client follows ``Link: <...>; rel="next"`` page by page, and a manifest whose bytes
    do not hash to the digest asked for is refused."""
    from kvreg.core.errors import DigestMismatchError
    from kvreg.remote.oci import manifests
    from kvreg.remote.oci.client import OciClient
    from kvreg.remote.remotes import parse_oci_url

    prefix, push = pushed(depositor, tmp_path, oci.url)
    pusher = tmp_path / "pusher"
    for name in ("p07-b", "p07-c"):
        kvreg(pusher, "push", "hub", "src/p07", "--as", f"ns/{name}")
    monkeypatch.setattr(manifests, "_PAGE", 1)
    with OciClient(parse_oci_url(f"oci://{host_of(oci.url)}/{prefix}", insecure=True)) as client:
        repo = client.repository("ns")
        tags = client.list_tags(repo)
        assert sorted(t for t in tags if not t.startswith("sha256-")) == ["p07", "p07-b", "p07-c"]
        assert client.list_tags(client.repository("absent")) == []
        wrong = "sha256:" + "0" * 64
        raw = client.get_manifest(repo, push["oci"]["manifest"])
        assert raw is not None and hashlib.sha256(raw).hexdigest() == push["oci"]["manifest"][7:]
        monkeypatch.setattr(client, "url", lambda r, *parts: f"{oci.url}/v2/{repo}/manifests/p07")
        with pytest.raises(DigestMismatchError):
            client.get_manifest(repo, wrong)


def test_large_blobs_go_in_chunks_and_mounts_fall_back_to_uploads(oci: OciTarget, tmp_path: Path) -> None:
    """Above the threshold a blob is sent in PATCH pieces with Content-Range; a mount from a
    repository that lacks the blob falls back to an upload in the location the registry opened."""
    from kvreg.core.digest import Digest
    from kvreg.remote.oci.client import OciClient
    from kvreg.remote.remotes import parse_oci_url

    data = os.urandom(10_000)
    path = tmp_path / "blob"
    path.write_bytes(data)
    digest = Digest.of_bytes(data)
    location = parse_oci_url(f"oci://{host_of(oci.url)}/{new_prefix()}", insecure=True)
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


class _CountingProxy:
    """The registry, counting the tag listings it is asked for."""

    def __init__(self, upstream: str) -> None:
        self.listings = 0
        self._http = httpx.Client(timeout=60)
        proxy = self

        class Handler(QuietHandler):
            def _pass(self) -> None:
                body = read_body(self)
                if self.command == "GET" and "/tags/list" in self.path:
                    proxy.listings += 1
                relay(self, forward(self, upstream, body, proxy._http))

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _pass

        self._server = LoopbackServer(Handler)
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()
        self._http.close()


def test_a_server_lists_an_oci_namespace_once_then_on_age_or_after_a_miss(
    oci: OciTarget, depositor: dict[str, Any], llama: Path, tmp_path: Path
) -> None:
    """A long-running source (``kvreg engine serve``) keeps a namespace's listing: repeat asks
    do not list its tags again; an aged listing is listed again; a prompt that finds nothing
    lists again (once the listing is a few seconds old) and finds what was tagged since."""
    from kvreg.app.ask import ask
    from kvreg.app.discovery import RemoteSource
    from kvreg.app.engine_options import EngineOptions
    from kvreg.app.feedback import Silent
    from kvreg.app.loader import load_engine
    from kvreg.app.prompts import encode_prompt
    from kvreg.remote.oci.client import OciClient
    from kvreg.remote.oci.listing import RefListings
    from kvreg.remote.remotes import parse_oci_url
    from kvreg.store.home import Home

    prefix, _ = pushed(depositor, tmp_path, oci.url)
    home = Home(oci_reader(tmp_path, "server", oci.url, prefix, "ns", depositor["public_key"]))
    lm, _ = load_engine(Silent(), llama, EngineOptions(block_size=int(BLOCK)).for_new(), home)
    now = [0.0]
    listings = RefListings(ttl=60, miss_after=5, clock=lambda: now[0])
    proxy = _CountingProxy(oci.url)
    try:
        location = parse_oci_url(f"oci://{host_of(proxy.url)}/{prefix}", insecure=True)
        with OciClient(location) as client:
            source = RemoteSource(client=client, namespaces=["ns"], listings=listings)

            def asked(text: str) -> Any:
                return ask(lm, home, encode_prompt(lm, text), mode="prefix", remote=source, max_new_tokens=1)

            for _ in range(3):
                assert not asked(TEXT + SUFFIX).generation.fallback
            assert proxy.listings == 1, "each request listed the namespace again"
            now[0] += 61
            asked(TEXT + SUFFIX)
            assert proxy.listings == 2, "an aged listing was used"

            kvreg(tmp_path / "pusher", "push", "hub", "src/other", "--as", "ns/other")  # tagged since
            fresh = asked(OTHER_TEXT)
            assert fresh.generation.fallback and proxy.listings == 2  # the listing is brand new
            now[0] += 6
            found = asked(OTHER_TEXT)
            assert proxy.listings == 3 and not found.generation.fallback
            assert found.remote is not None and [p["ref"] for p in found.remote.pulled] == ["ns/other"]
    finally:
        proxy.close()
