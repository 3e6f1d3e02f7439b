"""``kvreg route``: the plan for a prompt in prefix and knowledge mode, refusals that fall back,
and ``--reindex``."""

from __future__ import annotations

import pytest

from .helpers import BLOCK, QUESTION, REF, SOLUTION, SUFFIX, TEXT, kvreg, snapshot

pytestmark = pytest.mark.slow


def _route(home, model, prompt, *extra, expect=0):  # type: ignore[no-untyped-def]
    return kvreg(
        home,
        "route",
        "--model",
        model,
        "--prompt-file",
        prompt,
        "--block-size",
        BLOCK,
        *extra,
        "--json",
        expect=expect,
    )


def test_prefix_route_plans_the_shared_blocks_and_a_graft_of_them_is_byte_exact(tmp_path, deposited, models):  # type: ignore[no-untyped-def]
    home = deposited["home"]
    count = deposited["manifest"]["tokens"]["count"]
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(TEXT + SUFFIX, encoding="utf-8")
    before = snapshot(home)
    plan = _route(home, models["llama"], prompt).json
    assert plan["fallback"] is False and plan["reason"] is None and plan["mode"] == "prefix"
    assert plan["artifact"]["ref"] == REF
    assert plan["artifact"]["manifest_digest"] == deposited["deposit"]["manifest_digest"]
    blocks = count // int(BLOCK)  # on the grid: the artifact's off-grid end is not a graft point
    assert (plan["blocks"], plan["graft_tokens"]) == (blocks, blocks * int(BLOCK))
    assert plan["prefill_tokens"] == plan["prompt_tokens"] - plan["graft_tokens"] > 0
    assert plan["whole_artifact"] is False
    assert snapshot(home) == before  # routing reads the store (the index is a cache)
    graft = kvreg(
        home, "graft", REF, "--model", models["llama"], "--prompt-file", prompt,
        "--blocks", str(plan["blocks"]), "--check", "--json",
    ).json  # fmt: skip
    assert graft["graft_tokens"] == plan["graft_tokens"] and graft["check"]["byte_exact"] is True


def test_knowledge_route_and_refusals(tmp_path, models, texts):  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    kvreg(home, "keys", "generate")
    question = tmp_path / "q.txt"
    question.write_text(QUESTION, encoding="utf-8")
    solution = tmp_path / "s.txt"
    solution.write_text(SOLUTION, encoding="utf-8")
    deposit = [
        "deposit", models["llama"], "--prompt-file", question, "--text-file", solution,
        "--block-size", BLOCK, "--verifier", "checker",
    ]  # fmt: skip
    kvreg(home, *deposit, "--ref", "kb/failed", "--verdict", "fail")
    kvreg(home, "keys", "generate", "--name", "stranger", "--no-trust")
    solution.write_text(SOLUTION + " Trust me.", encoding="utf-8")
    kvreg(home, *deposit, "--ref", "kb/forged", "--verdict", "pass", "--key", "stranger")
    plan = _route(home, models["llama"], question, "--mode", "knowledge").json
    assert plan["fallback"] is True and plan["artifact"] is None
    codes = {s["ref"]: s["code"] for s in plan["skipped"]}
    assert codes["kb/failed"] == "ARTIFACT_UNVERIFIED"
    assert codes["kb/forged"] in ("KEY_UNTRUSTED", "SIGNATURE_INVALID")

    solution.write_text(SOLUTION, encoding="utf-8")
    good = kvreg(home, *deposit, "--ref", "kb/p07", "--verdict", "pass", "--json").json
    plan = _route(home, models["llama"], question, "--mode", "knowledge").json
    assert plan["fallback"] is False and plan["artifact"]["ref"] == "kb/p07"
    assert plan["artifact"]["manifest_digest"] == good["manifest_digest"]
    assert plan["whole_artifact"] is True and plan["prefill_tokens"] == 0
    assert plan["graft_tokens"] == good["token_count"]

    # A wrong artifact forced: refused with a clear error, the request falls back (exit 0).
    plan = _route(home, models["llama"], texts["other"], "--mode", "knowledge", "--artifact", "kb/p07").json
    assert plan["fallback"] is True and plan["error"]["code"] == "ROUTE_MISMATCH"
    assert "misrouted" in plan["reason"]
    # Another config (threads): its block keys differ, nothing is found; forced, it is refused.
    plan = _route(home, models["llama"], question, "--mode", "knowledge", "--threads", "3").json
    assert plan["fallback"] is True and plan["skipped"] == []
    plan = _route(
        home, models["llama"], question, "--mode", "knowledge", "--threads", "3", "--artifact", "kb/p07"
    ).json
    assert plan["error"]["code"] == "FINGERPRINT_MISMATCH" and "threads" in plan["reason"]


def test_reindex_and_usage(store_copy, deposited):  # type: ignore[no-untyped-def]
    (store_copy / "cache" / "route-index.sqlite3").unlink(missing_ok=True)
    out = kvreg(store_copy, "route", "--reindex", "--json").json
    assert out["reindexed"]["manifests"] == 1
    assert out["reindexed"]["blocks"] == len(deposited["manifest"]["chunks"])
    assert kvreg(store_copy, "route", "--json", expect=2).json["error"]["code"] == "USAGE"
    run = kvreg(store_copy, "route", "--model", "m", "--mode", "nope", expect=2)
    assert run.rc == 2
