"""Refusals: every one exits with its stable code and leaves the store as it was.

The store is compared file by file (names, sizes, modes) before and after, except
``cache/`` (the rebuildable fingerprint cache, which a new model directory adds to).
"""

from __future__ import annotations

import shutil

import pytest

from .helpers import REF, flip_bit, kvreg, object_path, rewrite_object, snapshot


@pytest.mark.slow
def test_model_with_one_weight_changed_is_refused(tmp_path, deposited, models):
    from kvreg.engine.tiny import perturb_one_weight

    other = perturb_one_weight(models["llama"], tmp_path / "perturbed")
    home = deposited["home"]
    before = snapshot(home)
    err = kvreg(home, "graft", REF, "--model", other, "--json", expect=1).json["error"]
    assert err["code"] == "FINGERPRINT_MISMATCH"
    assert err["details"]["differs"] == ["model"]
    assert "model" in err["message"]
    assert snapshot(home) == before


@pytest.mark.slow
def test_another_tokenizer_is_refused(tmp_path, deposited, models):
    from kvreg.engine.tiny import build_tokenizer

    other = tmp_path / "other-tokenizer"
    shutil.copytree(models["llama"], other)
    build_tokenizer(vocab_size=400).save_pretrained(other)
    home = deposited["home"]
    before = snapshot(home)
    err = kvreg(home, "graft", REF, "--model", other, "--json", expect=1).json["error"]
    assert err["code"] == "FINGERPRINT_MISMATCH"
    assert err["details"]["differs"] == ["tokenizer"]
    assert "tokenizer" in err["message"]
    assert snapshot(home) == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("--threads", "1", "threads"),
        ("--dtype", "bfloat16", "dtype"),
        ("--attn", "eager", "attn_implementation"),
    ],
)
def test_another_config_is_refused_naming_the_field(deposited, models, option, value, field):
    home = deposited["home"]
    before = snapshot(home)
    run = kvreg(home, "graft", REF, "--model", models["llama"], option, value, "--json", expect=1)
    err = run.json["error"]
    assert err["code"] == "FINGERPRINT_MISMATCH"
    assert err["details"]["differs"] == ["config"]
    assert field in err["message"]
    assert "error:" in run.err and field in run.err  # the human message on stderr, too
    assert snapshot(home) == before


def _truncate(home, digest):
    data = object_path(home, digest).read_bytes()
    rewrite_object(home, digest, data[: len(data) // 2])


def _malform(home, digest):
    data = bytearray(object_path(home, digest).read_bytes())
    data[0:8] = b"\xff" * 8  # the safetensors header length: far beyond the file
    rewrite_object(home, digest, bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "trust_store", "code"),
    [
        ("flip", False, "DIGEST_MISMATCH"),
        ("truncate", False, "CHUNK_INVALID"),
        ("truncate", True, "CHUNK_INVALID"),
        ("malform", False, "DIGEST_MISMATCH"),
        ("malform", True, "CHUNK_INVALID"),
    ],
)
def test_damaged_chunk_is_refused(store_copy, deposited, models, damage, trust_store, code):
    digest = deposited["manifest"]["chunks"][1]["digest"]
    {"flip": flip_bit, "truncate": _truncate, "malform": _malform}[damage](store_copy, digest)
    before = snapshot(store_copy)
    extra = ["--trust-store"] if trust_store else []
    run = kvreg(store_copy, "graft", REF, "--model", models["llama"], *extra, "--json", expect=3)
    assert run.json["error"]["code"] == code, str(run)
    assert snapshot(store_copy) == before


def test_manifest_signed_by_a_key_trusted_elsewhere_is_refused(store_copy):
    keyid = kvreg(store_copy, "keys", "export", "--json").json["keyid"]
    public = kvreg(store_copy, "keys", "export").out.strip()
    kvreg(store_copy, "trust", "remove", "*", keyid)
    kvreg(store_copy, "trust", "add", "elsewhere", public)
    before = snapshot(store_copy)
    for args in (["graft", REF, "--model", "unused-model-dir"], ["verify", REF], ["show", REF]):
        run = kvreg(store_copy, *args, "--json", expect=3)
        err = run.json["error"]
        assert err["code"] == "KEY_UNTRUSTED", str(run)
        assert "kvreg trust add test" in err["hint"]
    assert snapshot(store_copy) == before


def test_manifest_whose_signer_is_no_longer_trusted_is_refused(store_copy):
    exported = kvreg(store_copy, "keys", "export", "--json").json
    kvreg(store_copy, "trust", "remove", "*", exported["keyid"])
    before = snapshot(store_copy)
    err = kvreg(store_copy, "graft", REF, "--model", "unused", "--json", expect=3).json["error"]
    assert err["code"] == "KEY_UNTRUSTED"  # the signer is a local key: named, with the command to trust it
    assert f"kvreg trust add test {exported['public_key']}" in err["hint"]
    # With the key gone from this store too, nothing identifies the signer.
    for f in (store_copy / "keys").iterdir():
        f.unlink()
    err = kvreg(store_copy, "graft", REF, "--model", "unused", "--json", expect=3).json["error"]
    assert err["code"] == "SIGNATURE_INVALID"
    assert snapshot(store_copy) == {k: v for k, v in before.items() if not k.startswith("keys/")}


def test_untrusted_key_deposit_is_refused_at_graft(store_copy, models, texts):
    kvreg(store_copy, "keys", "generate", "--name", "other", "--no-trust")
    dep = kvreg(
        store_copy,
        "deposit",
        models["llama"],
        "--text-file",
        texts["other"],
        "--ref",
        "other/ruling",
        "--key",
        "other",
        "--block-size",
        "16",
        "--json",
    )
    assert "not trusted" in dep.err
    before = snapshot(store_copy)
    run = kvreg(store_copy, "graft", "other/ruling", "--model", models["llama"], "--json", expect=3)
    err = run.json["error"]
    assert err["code"] == "KEY_UNTRUSTED"
    assert snapshot(store_copy) == before


@pytest.mark.parametrize("name", ["../x", "a/../../b", "a/b/c", "/etc", "a\\b", "A/b", "a/.."])
def test_bad_ref_names_are_usage_errors(tmp_path, deposited, texts, name):
    home = deposited["home"]
    before = snapshot(home)
    for args in (
        ["deposit", tmp_path / "no-model", "--text-file", texts["text"], "--ref", name],
        ["graft", name, "--model", tmp_path / "no-model"],
        ["show", name],
        ["verify", name],
    ):
        err = kvreg(home, *args, "--json", expect=2).json["error"]
        assert err["code"] == "NAME_INVALID", err
    assert snapshot(home) == before


def test_unknown_ref_and_unknown_option(deposited):
    home = deposited["home"]
    err = kvreg(home, "show", "test/nothing-here", "--json", expect=1).json["error"]
    assert err["code"] == "REF_UNKNOWN"
    run = kvreg(home, "graft", REF, "--no-such-option", expect=2)
    assert "No such option" in run.err
    assert kvreg(home, "--json", "graft", REF, expect=2).json["error"]["code"] == "USAGE"  # --model missing


def test_input_errors_are_usage_errors(tmp_path, deposited, texts):
    home = deposited["home"]
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9".encode("latin-1"))
    cases = [
        (["--text-file", latin1], "not valid UTF-8"),
        (["--text-file", tmp_path / "missing.txt"], "does not exist"),
        (["--text-file", texts["text"], "--verifier", "v", "--evidence", "{not json"], "not valid JSON"),
        (["--text-file", texts["text"], "--verifier", "v", "--evidence", "[1, 2]"], "JSON object"),
        (["--text-file", texts["text"], "--verdict", "pass"], "--verifier"),
    ]
    for extra, phrase in cases:
        err = kvreg(home, "deposit", tmp_path, "--ref", "a/b", *extra, "--json", expect=2).json["error"]
        assert err["code"] == "USAGE"
        assert phrase in err["message"], err
    bad_choice = ["--text-file", texts["text"], "--verdict", "maybe"]
    assert "maybe" in kvreg(home, "deposit", tmp_path, "--ref", "a/b", *bad_choice, expect=2).err


def test_missing_signing_key_says_how_to_make_one(tmp_path, texts):
    args = ["deposit", tmp_path, "--text-file", texts["text"], "--ref", "a/b", "--json"]
    err = kvreg(tmp_path / "empty", *args, expect=1).json["error"]
    assert err["code"] == "KEY_INVALID"
    assert "kvreg keys generate" in err["hint"]
