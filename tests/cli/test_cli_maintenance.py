"""``fsck``, ``gc``, ``cat``, ``verify``, ``ls`` and ``show`` on a real store."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .helpers import BLOCK, REF, TEXT, flip_bit, kvreg, kvreg_env, object_path


def test_cat_writes_the_exact_bytes(deposited):
    home, manifest = deposited["home"], deposited["manifest"]
    assert kvreg(home, "cat", manifest["text"]["digest"]).out == TEXT
    chunk = manifest["chunks"][0]["digest"]
    raw = subprocess.run(
        [sys.executable, "-m", "kvreg", "cat", chunk], env=kvreg_env(home), capture_output=True, check=True
    ).stdout
    assert raw == object_path(home, chunk).read_bytes()
    assert len(raw) == manifest["chunks"][0]["size"]


def test_cat_refuses_a_damaged_object(store_copy, deposited):
    digest = deposited["manifest"]["chunks"][0]["digest"]
    flip_bit(store_copy, digest)
    run = kvreg(store_copy, "cat", digest, expect=3)
    assert run.out == ""
    assert "damaged" in run.err


def test_show_and_ls(deposited):
    home, manifest = deposited["home"], deposited["manifest"]
    assert manifest["schema"] == "kvreg.manifest/v1"
    assert manifest["verification"] == {
        "verifier": "checker",
        "verdict": "pass",
        "evidence": {"answer": "738"},
    }
    by_digest = kvreg(home, "show", deposited["deposit"]["manifest_digest"], "--json").json
    assert by_digest == manifest
    refs = kvreg(home, "ls", "--json").json["refs"]
    assert [r["ref"] for r in refs] == [REF]
    row = refs[0]
    assert row["digest"] == deposited["deposit"]["manifest_digest"]
    assert row["token_count"] == manifest["tokens"]["count"]
    assert row["chunk_count"] == len(manifest["chunks"])
    assert row["verdict"] == "pass"
    assert row["title"] == "p07"
    human = kvreg(home, "ls").out
    assert REF in human and "pass" in human


def test_fsck_finds_a_flipped_bit(store_copy, deposited):
    clean = kvreg(store_copy, "fsck", "--json").json
    assert clean["ok"] is True
    assert clean["objects_checked"] >= len(deposited["manifest"]["chunks"]) + 3
    digest = deposited["manifest"]["chunks"][2]["digest"]
    flip_bit(store_copy, digest)
    run = kvreg(store_copy, "fsck", "--json", expect=3)
    report = run.json
    assert report["ok"] is False
    assert report["error"]["code"] == "INTEGRITY"
    kinds = {(p["kind"], p["subject"]) for p in report["problems"]}
    assert ("object-corrupt", digest) in kinds
    assert not object_path(store_copy, digest).exists()  # moved to quarantine/
    assert len(report["quarantined"]) == 1
    # Now the object is missing: fsck still fails, saying so.
    again = kvreg(store_copy, "fsck", "--json", expect=3).json
    assert ("object-missing", digest) in {(p["kind"], p["subject"]) for p in again["problems"]}


def test_verify_rehashes_every_object(store_copy, deposited):
    ok = kvreg(store_copy, "verify", REF, "--json").json
    assert ok["ok"] is True
    assert ok["merkle_root"] == deposited["manifest"]["merkle_root"]
    assert ok["objects"]["missing"] == [] and ok["objects"]["corrupt"] == []
    assert ok["objects"]["tokens_ok"] is True
    digest = deposited["manifest"]["chunks"][1]["digest"]
    flip_bit(store_copy, digest)
    bad = kvreg(store_copy, "verify", REF, "--json", expect=3).json
    assert bad["ok"] is False
    assert [c["digest"] for c in bad["objects"]["corrupt"]] == [digest]
    assert bad["error"]["code"] == "DIGEST_MISMATCH"


@pytest.mark.slow
def test_verify_recompute(deposited, models):
    home = deposited["home"]
    report = kvreg(home, "verify", REF, "--model", models["llama"], "--recompute", "--json").json
    assert report["ok"] is True
    assert report["compatible"] is True
    assert report["recompute"]["byte_exact"] is True
    assert report["recompute"]["chunks_equal"] == len(deposited["manifest"]["chunks"])
    assert report["recompute"]["witness_equal"] is True
    err = kvreg(home, "verify", REF, "--recompute", "--json", expect=2).json["error"]
    assert "--model" in err["message"]


@pytest.mark.slow
def test_gc_removes_unreferenced_and_keeps_referenced(tmp_path, models, texts):
    home = tmp_path / "home"
    kvreg(home, "keys", "generate")
    common = ["--block-size", BLOCK, "--json"]
    old = kvreg(
        home, "deposit", models["llama"], "--text-file", texts["other"], "--ref", "gc/x", *common
    ).json
    old_manifest = kvreg(home, "show", "gc/x", "--json").json
    new = kvreg(home, "deposit", models["llama"], "--text-file", texts["text"], "--ref", "gc/x", *common).json
    assert new["manifest_digest"] != old["manifest_digest"]
    new_manifest = kvreg(home, "show", "gc/x", "--json").json

    dry = kvreg(home, "gc", "--grace", "0", "--dry-run", "--json").json
    assert dry["dry_run"] is True
    assert old["manifest_digest"] in dry["removed_objects"]
    assert object_path(home, old["manifest_digest"]).exists()

    # With the default grace period nothing this young goes.
    assert kvreg(home, "gc", "--json").json["removed_objects"] == []

    report = kvreg(home, "gc", "--grace", "0", "--json").json
    assert report["dry_run"] is False
    removed = set(report["removed_objects"])
    assert old["manifest_digest"] in removed
    old_chunks = {c["digest"] for c in old_manifest["chunks"]}
    new_chunks = {c["digest"] for c in new_manifest["chunks"]}
    assert old_chunks - new_chunks <= removed
    assert report["removed_envelopes"] == [old["manifest_digest"]]
    for digest in [
        new["manifest_digest"],
        *new_chunks,
        new_manifest["tokens"]["digest"],
        new_manifest["text"]["digest"],
        new_manifest["witness"]["logits_digest"],
    ]:
        assert object_path(home, digest).exists(), digest
    for digest in removed:
        assert not object_path(home, digest).exists()
    assert kvreg(home, "verify", "gc/x", "--json").json["ok"] is True
    assert kvreg(home, "fsck", "--json").json["ok"] is True
    assert kvreg(home, "gc", "--grace", "-1", expect=2).rc == 2
