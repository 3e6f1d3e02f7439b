"""``kvreg config``, ``pin``/``unpin``/``pins``, ``evict`` and ``gc --evict`` on a real store,
and grafts after eviction: a prefix graft reads only its chunks; an evicted chunk is
"evicted, pull again" (exit 1), never an integrity failure."""

from __future__ import annotations

import json

import pytest

from .helpers import BLOCK, REF, flip_bit, kvreg, object_path


def _evictable(manifest: dict) -> list[str]:
    return [c["digest"] for c in manifest["chunks"]]


def test_config_set_get_unset_list(tmp_path):
    home = tmp_path / "home"
    assert kvreg(home, "config", "get", "store.max-bytes").out.strip() == "none"
    out = kvreg(home, "config", "set", "store.max-bytes", "20GiB", "--json").json
    assert out == {"key": "store.max-bytes", "value": 20 * 1024**3, "display": "20.0 GiB"}
    assert kvreg(home, "config", "get", "store.max-bytes").out.strip() == str(20 * 1024**3)
    assert json.loads((home / "config.json").read_text()) == {"store": {"max-bytes": 20 * 1024**3}}
    rows = kvreg(home, "config", "list", "--json").json["config"]
    assert {r["key"]: r["display"] for r in rows}["store.max-bytes"] == "20.0 GiB"
    assert kvreg(home, "config", "unset", "store.max-bytes", "--json").json["removed"] is True
    assert kvreg(home, "config", "get", "store.max-bytes", "--json").json["value"] is None


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("set", "store.max-bytes", "12XB"), 2),
        (("set", "store.max-bytes", "-1"), 2),
        (("get", "no.such-key"), 2),
        (("set", "receipts.always", "bad name!"), 2),
    ],
)
def test_config_refusals(tmp_path, args, code):
    run = kvreg(tmp_path / "home", "config", *args, "--json", expect=code)
    assert run.json["error"]["code"] == "USAGE"


def test_evict_under_a_budget_then_fsck_and_graft_say_evicted(store_copy, deposited, models):
    manifest = deposited["manifest"]
    kvreg(store_copy, "config", "set", "store.max-bytes", "1KiB")
    report = kvreg(store_copy, "evict", "--json").json
    evicted = {e["digest"] for e in report["evicted"]}
    assert evicted and evicted <= {
        *_evictable(manifest),
        manifest["tokens"]["digest"],
        manifest["text"]["digest"],
        manifest["witness"]["logits_digest"],
    }
    assert report["over_budget"] is True  # the manifest stays, and it alone is over 1 KiB? either way
    assert report["bytes_after"] < report["bytes_before"]
    for d in evicted:
        assert not object_path(store_copy, d).exists()
    # the ref stays; fsck lists the objects as evicted and passes
    assert kvreg(store_copy, "ls", "--json").json["refs"][0]["ref"] == REF
    fsck = kvreg(store_copy, "fsck", "--json").json
    assert fsck["ok"] is True and {p["subject"] for p in fsck["evicted"]} == evicted
    assert "evicted" in kvreg(store_copy, "fsck").out
    # a graft says "evicted, pull again", exit 1, not an integrity failure (3)
    run = kvreg(store_copy, "graft", REF, "--model", models["llama"], "--json", expect=1)
    err = run.json["error"]
    assert err["code"] == "OBJECT_UNKNOWN", str(run)
    assert "evicted" in err["message"] and "pull" in err["hint"]


def test_a_wrong_byte_is_still_an_integrity_failure_after_eviction(store_copy, deposited):
    manifest = deposited["manifest"]
    kvreg(store_copy, "evict", "--max-bytes", "0", "--dry-run")  # changes nothing
    flip_bit(store_copy, manifest["chunks"][0]["digest"])
    kvreg(store_copy, "fsck", "--json", expect=3)


def test_pinned_ref_is_never_evicted(store_copy, deposited):
    assert kvreg(store_copy, "pin", REF, "--json").json == {"pinned": REF, "new": True}
    assert kvreg(store_copy, "pins", "--json").json["pins"] == [REF]
    report = kvreg(store_copy, "evict", "--max-bytes", "0", "--json").json
    assert report["evicted"] == [] and report["over_budget"] is True
    assert report["protected"]["pinned"] >= len(deposited["manifest"]["chunks"])
    assert "still over budget" in kvreg(store_copy, "evict", "--max-bytes", "0").out
    for d in _evictable(deposited["manifest"]):
        assert object_path(store_copy, d).exists()
    assert kvreg(store_copy, "unpin", REF, "--json").json["was_pinned"] is True
    gc = kvreg(store_copy, "gc", "--evict", "--json").json  # no budget configured: nothing
    assert gc["eviction"]["max_bytes"] is None and gc["eviction"]["evicted"] == []
    kvreg(store_copy, "config", "set", "store.max-bytes", "0")
    gc = kvreg(store_copy, "gc", "--evict", "--json").json
    assert gc["eviction"]["evicted"]


def test_pin_of_an_unknown_ref_fails(tmp_path):
    run = kvreg(tmp_path / "home", "pin", "ns/nothing", "--json", expect=1)
    assert run.json["error"]["code"] == "REF_UNKNOWN"
    assert kvreg(tmp_path / "home", "pin", "bad", "--json", expect=2).json["error"]


@pytest.mark.slow
def test_prefix_graft_reads_only_the_chunks_it_needs(store_copy, deposited, models):
    manifest = deposited["manifest"]
    chunks = manifest["chunks"]
    k = 2
    assert len(chunks) > k + 1
    # later chunks are gone from the store (evicted): a graft of k blocks does not need them
    for c in chunks[k:]:
        object_path(store_copy, c["digest"]).unlink()
    access_log = store_copy / "cache" / "paging" / "access.log"
    access_log.unlink(missing_ok=True)  # the copied store may hold other tests' grafts
    out = kvreg(
        store_copy,
        "graft",
        REF,
        "--model",
        models["llama"],
        "--blocks",
        str(k),
        "--max-new-tokens",
        "4",
        "--json",
    ).json
    assert out["graft_tokens"] == k * int(BLOCK)
    used = access_log.read_text().split()
    read = {"sha256:" + h for h in used[2::3]}
    assert {c["digest"] for c in chunks[:k]} <= read
    assert not read & {c["digest"] for c in chunks[k:]}
    assert not list((store_copy / "cache" / "paging" / "leases").glob("*.lease"))  # released
