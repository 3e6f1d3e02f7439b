"""Disk paging after writes: ``kvreg deposit`` brings the store back under ``store.max-bytes``,
never evicting what it just wrote or what a pinned ref reaches; ``--pin``; ``cat`` and
``verify`` record their reads for the LRU order; ``verify`` of an evicted artifact says
how to get it back (exit 1), not that it is damaged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreg.core.digest import Digest
from kvreg.store import access_log
from kvreg.store.home import Home

from .helpers import BLOCK, REF, kvreg, object_path


def _children(manifest: dict[str, Any]) -> set[str]:
    out = {c["digest"] for c in manifest["chunks"]}
    out |= {manifest["tokens"]["digest"], manifest["text"]["digest"], manifest["witness"]["logits_digest"]}
    return out


def _deposit(home: Path, model: Path, text: Path, ref: str, *extra: str) -> dict[str, Any]:
    return kvreg(
        home, "--json", "deposit", model, "--text-file", text, "--ref", ref, "--block-size", BLOCK, *extra
    ).json


def test_deposit_evicts_others_never_itself_nor_a_pinned_ref(store_copy, deposited, models, texts):
    p07 = _children(deposited["manifest"])
    kvreg(store_copy, "config", "set", "store.max-bytes", "1")  # everything evictable must go

    other = _deposit(store_copy, models["llama"], texts["other"], "test/other", "--pin")
    assert other["pinned"] is True
    assert kvreg(store_copy, "pins", "--json").json["pins"] == ["test/other"]
    ev = other["eviction"]
    assert ev is not None and ev["max_bytes"] == 1 and ev["over_budget"] is True
    assert {e["digest"] for e in ev["evicted"]} == p07  # the older artifact, all of it
    other_manifest = kvreg(store_copy, "show", "test/other", "--json").json
    mine = _children(other_manifest)
    assert all(object_path(store_copy, d).exists() for d in mine)  # just written: kept

    ext = _deposit(store_copy, models["llama"], texts["extended"], "test/ext")
    assert ext["pinned"] is False
    ext_manifest = kvreg(store_copy, "show", "test/ext", "--json").json
    assert all(object_path(store_copy, d).exists() for d in _children(ext_manifest))  # just written
    assert all(object_path(store_copy, d).exists() for d in mine)  # pinned
    assert not {e["digest"] for e in ext["eviction"]["evicted"]} & (mine | _children(ext_manifest))

    report = kvreg(store_copy, "fsck", "--json").json
    assert report["ok"] is True
    assert {p["subject"] for p in report["evicted"]} == p07 - _children(ext_manifest)

    # verify of the evicted artifact: not damage (exit 1), and it says how to get it back
    err = kvreg(store_copy, "--json", "verify", REF, expect=1).json["error"]
    assert err["code"] == "OBJECT_UNKNOWN"
    assert "evicted" in err["message"] and f"kvreg pull REMOTE {REF}" in err["hint"]


def test_without_a_budget_deposit_evicts_nothing(store_copy, models, texts):
    out = _deposit(store_copy, models["llama"], texts["other"], "test/other")
    assert out["eviction"] is None and out["pinned"] is False


def test_cat_and_verify_record_accesses(store_copy, deposited):
    home = Home(store_copy)
    chunk = deposited["manifest"]["text"]["digest"]  # text: cat writes it to a text pipe here
    # The shared deposited store may have been read by earlier tests (cat, graft): compare times.
    before = access_log.read_access_log(home).get(Digest(chunk).hex)
    kvreg(store_copy, "cat", chunk)
    rec = access_log.read_access_log(home)[Digest(chunk).hex]
    assert rec.last_access is not None
    assert before is None or before.last_access is None or rec.last_access > before.last_access
    kvreg(store_copy, "verify", REF)
    log = access_log.read_access_log(home)
    for d in _children(deposited["manifest"]):
        assert log[Digest(d).hex].last_access is not None
    assert log[Digest(chunk).hex].last_access >= rec.last_access
