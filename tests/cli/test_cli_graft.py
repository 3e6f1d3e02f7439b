"""``graft`` with a prompt of its own: full prompts, misrouted prompts, bad combinations."""

from __future__ import annotations

import pytest

from .helpers import REF, SUFFIX, TEXT, kvreg, snapshot


@pytest.mark.slow
def test_prompt_that_extends_the_artifact_grafts_it_whole_then_prefills(tmp_path, deposited, models):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(TEXT + SUFFIX, encoding="utf-8")
    out = kvreg(
        deposited["home"],
        "graft",
        REF,
        "--model",
        models["llama"],
        "--prompt-file",
        prompt,
        "--check",
        "--json",
    ).json
    assert out["graft_tokens"] == deposited["manifest"]["tokens"]["count"]
    assert out["whole_artifact"] is True
    assert out["prefill_tokens"] > 0
    assert out["check"]["byte_exact"] is True
    assert out["check"]["sha256_equal_steps"] == 32


@pytest.mark.slow
def test_misrouted_prompt_is_refused(tmp_path, deposited, models, texts):
    home = deposited["home"]
    before = snapshot(home)
    err = kvreg(
        home, "graft", REF, "--model", models["llama"], "--prompt-file", texts["other"], "--json", expect=1
    ).json["error"]
    assert err["code"] == "TOKENS_MISMATCH"
    assert snapshot(home) == before


@pytest.mark.slow
def test_too_many_blocks_is_a_usage_error(deposited, models):
    run = kvreg(
        deposited["home"], "graft", REF, "--model", models["llama"], "--blocks", "99", "--json", expect=2
    )
    assert run.json["error"]["code"] == "USAGE"


def test_prompt_and_append_together_is_a_usage_error(deposited, texts):
    args = ["--model", "m", "--prompt-file", texts["text"], "--append-file", texts["suffix"], "--json"]
    err = kvreg(deposited["home"], "graft", REF, *args, expect=2).json["error"]
    assert "not both" in err["message"]
    assert kvreg(deposited["home"], "graft", REF, "--model", "m", "--max-new-tokens", "0", expect=2).rc == 2


@pytest.mark.slow
def test_shifted_graft_is_labelled_approximate_and_changes_nothing(tmp_path, deposited, models):
    prefix = tmp_path / "prefix.txt"
    prefix.write_text("An unrelated preamble.", encoding="utf-8")
    home = deposited["home"]
    before = snapshot(home)
    out = kvreg(
        home,
        "graft",
        REF,
        "--model",
        models["llama"],
        "--shift-after-file",
        prefix,
        "--max-new-tokens",
        "8",
        "--json",
    ).json
    assert out["mode"] == "shifted-approximate" and out["exact"] is False
    assert "byte_exact" not in out and "check" not in out
    assert out["steps"] == 8 and out["max_kl"] > 0.0
    assert snapshot(home) == before


def test_shifted_graft_refuses_an_exactness_check(deposited, texts):
    args = ["--model", "m", "--shift-after-file", texts["suffix"], "--check", "--json"]
    assert (
        "cannot be combined"
        in kvreg(deposited["home"], "graft", REF, *args, expect=2).json["error"]["message"]
    )
