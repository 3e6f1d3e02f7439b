"""Lazy pull against a real registry, and disk paging after a pull.

``kvreg pull --lazy`` checks the signature and downloads only the manifest and the
tokens; the route index learns it; fsck lists the rest as "not fetched (lazy pull)",
reads of it (cat, verify, graft, push) say how to fetch it (exit 1), a full pull
fetches exactly the rest. The path ``kvreg ask
--remote`` takes (lazy pull, then ``ondemand.ensured`` for a 1-block prefix graft)
grafts byte-exactly against no cache having fetched one chunk. A pull under a budget
evicts others, never itself or a pinned ref.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli.helpers import BLOCK, SUFFIX, kvreg
from kvreg.fileio.keyfiles import load_trust_policy

from .registry_server import Registry
from .test_push_pull import _pusher, _writer


def _pushed(registry: Registry, depositor: dict[str, Any], make_home, *names: str) -> tuple[str, Path]:
    """Push ``src/<name>`` as ``<ns>/<name>``; return the namespace and a fresh reader home."""
    ns, token = _writer(registry, depositor)
    src = _pusher(depositor, make_home(registry, token))
    for name in names:
        kvreg(src, "push", "origin", f"src/{name}", "--as", f"{ns}/{name}")
    reader = make_home(registry, registry.user({ns: "read"}), trust={ns: depositor["public_key"]})
    return ns, reader


def _deferred(manifest: Any) -> set[str]:
    return {str(d) for d in manifest.object_digests()} - {str(manifest.tokens.digest)}


def test_lazy_pull_then_route_fsck_reads_and_a_full_pull(
    registry: Registry, depositor: dict[str, Any], make_home, llama: Path
) -> None:
    ns, dst = _pushed(registry, depositor, make_home, "p07")
    manifest = depositor["manifests"]["p07"]
    ref = f"{ns}/p07"
    lazy = kvreg(dst, "--json", "pull", "origin", ref, "--lazy").json
    assert lazy["lazy"] is True and lazy["digest"] == str(manifest.digest)
    assert lazy["objects_downloaded"] == 1  # the tokens; the manifest comes in the envelope
    assert lazy["objects_deferred"] == len(_deferred(manifest)) == lazy["objects_total"] - 1
    assert lazy["eviction"] is None

    fsck = kvreg(dst, "--json", "fsck").json
    assert fsck["ok"] is True and fsck["problems"] == []
    assert {p["subject"] for p in fsck["not_fetched"]} == _deferred(manifest)
    assert all("not fetched (lazy pull" in p["message"] for p in fsck["not_fetched"])
    assert "not fetched (lazy pull" in kvreg(dst, "fsck").out
    kvreg(dst, "show", ref)  # the manifest is here, signature checked
    # the route index learned the artifact, as after a full pull (the router then needs the
    # chunks: kvreg ask --remote fetches them on demand)
    from kvreg.store.home import Home
    from kvreg.store.router_index import RouteIndex

    with RouteIndex(Home(dst)) as index:
        indexed = index.manifest(manifest.digest)
        hits = index.lookup([manifest.chunks[0].block_key])
    assert indexed is not None and indexed.token_count == manifest.token_count
    assert [str(h.digest) for h in hits] == [str(manifest.digest)]

    chunk = str(manifest.chunks[0].digest)
    for args in (
        ["cat", chunk],
        ["verify", ref],
        ["graft", ref, "--model", llama, "--max-new-tokens", "2"],
        ["push", "origin", ref, "--as", f"{ns}/copy"],
    ):
        err = kvreg(dst, "--json", *args, expect=1).json["error"]
        assert err["code"] == "OBJECT_UNKNOWN", (args, err)
        assert "not fetched" in err["message"] and "--lazy" in err["message"], (args, err)
        assert f"kvreg pull origin {ref}" in err["hint"] and "kvreg ask --remote origin" in err["hint"]

    full = kvreg(dst, "--json", "pull", "origin", ref).json
    assert full["lazy"] is False and full["objects_deferred"] == 0
    assert full["objects_downloaded"] == len(_deferred(manifest))
    assert full["objects_local"] == 1
    fsck = kvreg(dst, "--json", "fsck").json
    assert fsck["ok"] is True and fsck["not_fetched"] == []
    assert kvreg(dst, "--json", "verify", ref).json["ok"] is True


def test_lazy_pull_and_on_demand_chunks_graft_byte_exact(
    registry: Registry, depositor: dict[str, Any], make_home, llama: Path, tmp_path: Path
) -> None:
    """The path of ``kvreg ask --remote``: lazy pull, ensure a 1-block prefix graft's objects,
    graft; the output equals running with no cache."""
    from kvreg.core.names import RefName
    from kvreg.remote.http import connect
    from kvreg.remote.ondemand import ensured, needed_for_graft
    from kvreg.remote.progress import NullProgress
    from kvreg.remote.pulling import pull
    from kvreg.store.artifacts import open_artifact
    from kvreg.store.home import Home

    ns, dst = _pushed(registry, depositor, make_home, "p07")
    home = Home(dst)
    ref = RefName.parse(f"{ns}/p07")
    with connect(home, "origin") as client:
        report = pull(
            home, client, ref, lazy=True, trust=load_trust_policy(home.trust_path), progress=NullProgress()
        )
        assert report.lazy and report.objects_downloaded == 1
        manifest = open_artifact(home, str(ref)).manifest
        assert not any(home.objects.has(c.digest) for c in manifest.chunks)
        needed = needed_for_graft(manifest, 1)
        with ensured(home, client, ns, manifest, needed) as got:
            assert got.fetched == [str(manifest.chunks[0].digest)]
            assert got.bytes_fetched == manifest.chunks[0].size

    prompt = tmp_path / "suffix.txt"
    prompt.write_text(SUFFIX, encoding="utf-8")
    graft = kvreg(
        dst,
        "--json",
        "graft",
        str(ref),
        "--model",
        llama,
        "--blocks",
        "1",
        "--append-file",
        prompt,
        "--max-new-tokens",
        "4",
        "--check",
    ).json
    assert graft["graft_tokens"] == int(BLOCK)
    assert graft["check"]["byte_exact"] is True
    assert graft["check"]["sha256_equal_steps"] == graft["check"]["steps"]
    # only the one chunk was fetched; the rest is still on the registry, and fsck says so
    assert [c.index for c in manifest.chunks if home.objects.has(c.digest)] == [0]
    fsck = kvreg(dst, "--json", "fsck").json
    assert fsck["ok"] is True
    assert {p["subject"] for p in fsck["not_fetched"]} == _deferred(manifest) - {
        str(manifest.chunks[0].digest)
    }


def test_pull_under_a_budget_evicts_others_never_itself_nor_a_pinned_ref(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns, dst = _pushed(registry, depositor, make_home, "p07", "other", "p07x")
    m = depositor["manifests"]
    kvreg(dst, "config", "set", "store.max-bytes", "1")  # everything evictable must go

    first = kvreg(dst, "--json", "pull", "origin", f"{ns}/other", "--pin").json
    assert first["pinned"] is True and first["eviction"]["evicted"] == []  # itself: never
    assert kvreg(dst, "--json", "pins").json["pins"] == [f"{ns}/other"]

    second = kvreg(dst, "--json", "pull", "origin", f"{ns}/p07").json
    assert second["eviction"]["over_budget"] is True
    assert second["eviction"]["evicted"] == []  # the other is pinned, this one was just pulled

    third = kvreg(dst, "--json", "pull", "origin", f"{ns}/p07x").json
    evicted = {e["digest"] for e in third["eviction"]["evicted"]}
    mine = {str(d) for d in m["p07x"].object_digests()}
    assert evicted == {str(d) for d in m["p07"].object_digests()} - mine  # p07's own, not shared ones
    assert not evicted & {str(d) for d in m["other"].object_digests()}
    fsck = kvreg(dst, "--json", "fsck").json
    assert fsck["ok"] is True and {p["subject"] for p in fsck["evicted"]} == evicted
