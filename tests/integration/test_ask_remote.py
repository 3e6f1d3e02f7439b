"""``kvreg ask --remote`` against a real registry, with the bundled arithmetic model.

A depositor pushes verified solutions; a fresh home that has only a remote and a
trust policy asks the questions: the registry's route endpoint finds the artifact
by block key, the home pulls it lazily (signature first), fetches only the chunks
the graft reads, and answers byte-exactly in one decoded token. Unseen questions,
untrusted signers and another config fall back to plain generation. A home whose
store budget is smaller than the library answers every question, pulling what
each graft needs and staying under budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cli.helpers import kvreg

from .conftest import LIBRARY_BLOCK
from .registry_server import Registry

pytestmark = pytest.mark.slow

BLOCK = LIBRARY_BLOCK  # the blocks of the session's flywheel library (conftest.library)


def _publish(registry: Registry, library: dict[str, Any], make_home) -> str:  # type: ignore[no-untyped-def]
    import shutil

    ns = registry.namespace()
    registry.register_key(ns, library["public_key"])
    pusher = make_home(registry, registry.user({ns: "write"}))
    for sub in ("objects", "envelopes", "refs", "keys", "trust.json"):
        src, dst = library["home"] / sub, pusher / sub
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dst)
    for p in library["problems"]:
        kvreg(pusher, "push", "origin", f"src/add-{p.a}-{p.b}", "--as", f"{ns}/add-{p.a}-{p.b}")
    return ns


def _ask(home: Path, tmp_path: Path, question: str, *extra: str) -> Any:
    from kvreg.engine.flywheel.model import model_path

    prompt = tmp_path / "question.txt"
    prompt.write_text(question, encoding="utf-8")
    return kvreg(
        home, "--json", "ask", "--model", model_path(), "--prompt-file", prompt,
        "--block-size", BLOCK, "--remote", "origin", *extra,
    ).json  # fmt: skip


def test_ask_finds_pulls_and_grafts_through_the_registry(
    registry: Registry, library: dict[str, Any], make_home, tmp_path: Path
) -> None:
    from kvreg.engine.flywheel.task import ANSWER_MARK

    ns = _publish(registry, library, make_home)
    asking = make_home(registry, registry.user({ns: "read"}), trust={ns: library["public_key"]})
    problem, manifest = library["problems"][0], library["manifests"][0]

    first = _ask(asking, tmp_path, problem.question())
    assert first["mode"] == "knowledge" and first["fallback"] is False
    assert first["artifact"]["ref"] == f"{ns}/add-{problem.a}-{problem.b}"
    assert first["artifact"]["manifest_digest"] == str(manifest.digest)
    assert first["completion"].endswith(f"{ANSWER_MARK}{problem.answer}")
    assert first["decoded_tokens"] == 1 and first["probe"]["witness_equal"] is True
    remote = first["remote"]
    assert remote["candidates"] >= 1 and [p["ref"] for p in remote["pulled"]] == [first["artifact"]["ref"]]
    # exactly the chunks the graft reads (the manifest came with the envelope, the tokens with the lazy pull)
    assert remote["fetched_objects"] == len(manifest.chunks)
    assert remote["fetched_bytes"] == sum(c.size for c in manifest.chunks)
    # the witness and the texts stayed on the registry; fsck says so and is content
    fsck = kvreg(asking, "--json", "fsck").json
    assert fsck["ok"] is True and fsck["problems"] == []
    fetched = {manifest.tokens.digest, *(c.digest for c in manifest.chunks)}
    left = {str(d) for d in manifest.object_digests() if d not in fetched}
    assert str(manifest.witness.logits_digest) in left
    assert {p["subject"] for p in fsck["not_fetched"]} == left

    again = _ask(asking, tmp_path, problem.question())
    assert again["mode"] == "knowledge" and again["remote"]["pulled"] == []
    assert again["remote"]["fetched_objects"] == 0

    # An unseen question: nothing is pulled as knowledge, plain generation, exit 0.
    from kvreg.engine.flywheel.exam import hard_exam

    unseen = hard_exam()[10]
    plain = _ask(asking, tmp_path, unseen.question())
    assert plain["mode"] != "knowledge"
    assert all(p["ref"] != f"{ns}/add-{unseen.a}-{unseen.b}" for p in plain["remote"]["pulled"])
    # Another config (threads): other block keys, the registry offers nothing, no graft.
    other = _ask(asking, tmp_path, problem.question(), "--threads", "3")
    assert other["mode"] == "off" and other["remote"]["candidates"] == 0


def test_an_untrusted_signer_is_never_grafted(
    registry: Registry, library: dict[str, Any], make_home, tmp_path: Path
) -> None:
    ns = _publish(registry, library, make_home)
    stranger = make_home(registry, registry.user({ns: "read"}))  # trusts nobody
    problem = library["problems"][1]
    out = _ask(stranger, tmp_path, problem.question())
    assert out["mode"] == "off" and out["fallback"] is True
    assert out["remote"]["pulled"] == []
    assert out["remote"]["skipped"] and out["remote"]["skipped"][0]["code"] in (
        "KEY_UNTRUSTED",
        "SIGNATURE_INVALID",
    )
    listed = kvreg(stranger, "--json", "ls").json
    assert listed["refs"] == []  # nothing entered the store


def test_a_library_larger_than_the_store_budget_answers_every_question(
    registry: Registry, library: dict[str, Any], make_home, tmp_path: Path
) -> None:
    from kvreg.engine.flywheel.task import ANSWER_MARK
    from kvreg.store.home import Home

    ns = _publish(registry, library, make_home)
    asking = make_home(registry, registry.user({ns: "read"}), trust={ns: library["public_key"]})
    library_bytes = sum(sum(c.size for c in m.chunks) for m in library["manifests"])
    budget = max(sum(c.size for c in m.chunks) for m in library["manifests"]) + 64 * 1024
    assert budget < library_bytes  # the library does not fit
    kvreg(asking, "config", "set", "store.max-bytes", str(budget))
    for problem in library["problems"]:
        out = _ask(asking, tmp_path, problem.question())
        assert out["mode"] == "knowledge", out
        assert out["completion"].endswith(f"{ANSWER_MARK}{problem.answer}")
        assert out["remote"]["fetched_objects"] > 0
        assert Home(asking).objects.usage().bytes <= budget
    # The first question again: its chunks were evicted for the others, so they come back.
    problem = library["problems"][0]
    out = _ask(asking, tmp_path, problem.question())
    why = (out["skipped"], out["refused_modes"], out["remote"])
    assert out["mode"] == "knowledge" and out["remote"]["fetched_objects"] > 0, why
    assert kvreg(asking, "--json", "fsck").json["ok"] is True


def test_flywheel_pushes_its_library(registry: Registry, make_home) -> None:  # type: ignore[no-untyped-def]
    ns = registry.namespace()
    home = make_home(registry, registry.user({ns: "write"}))
    kvreg(home, "keys", "generate")
    public_key = kvreg(home, "keys", "export").out.strip()
    registry.register_key(ns, public_key)
    kvreg(home, "trust", "add", ns, public_key)
    sizes = ["--repeat-easy", "2", "--repeat-hard", "0", "--unseen-easy", "1", "--unseen-hard", "0"]
    report = kvreg(home, "--json", "flywheel", "-n", ns, "--push", "origin", *sizes, timeout=600).json
    assert report["push"]["refs"] == 2 and report["push"]["objects_sent"] > 0
    m = report["metrics"]
    assert m["knowledge_grafts"] == 2 and m["wrong_grafts"] == 0
    assert m["byte_exact_passed"] == m["byte_exact_checks"] == 3
    remote_refs = kvreg(home, "--json", "ls-remote", "origin", ns).json
    assert sorted(r["ref"] for r in remote_refs["refs"]) == sorted(report["library"]["refs"])
