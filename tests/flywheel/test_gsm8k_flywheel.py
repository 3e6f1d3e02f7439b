"""The flywheel on GSM8K with SmolLM2-135M-Instruct, in one home, kept short (24 tokens an answer).

Two repeat problems and one unseen: the frozen model's greedy answers do not pass the strict
checker in 24 tokens, so the library holds the GSM8K reference solutions (``source: reference``,
verifier ``gsm8k-gold``), each deposited after the chat-rendered question without its final-answer
line; the second exam grafts them whole (knowledge), every decode step SHA-256-equal to a fresh
computation, and leaves the unseen problem to plain generation with the baseline's exact output.
The demo's rendering of the same report names the GSM8K lines.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from kvreg.app.flywheel.gsm8k import load_problems
from kvreg.app.flywheel.loop import FlywheelSpec, run_flywheel
from kvreg.app.prompts import encode_prompt
from kvreg.core.keys import SigningKey
from kvreg.core.trust import TrustPolicy
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import load_model
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.artifacts import open_artifact, read_tokens
from kvreg.store.home import Home

SPEC = FlywheelSpec(task="gsm8k", repeat=2, unseen=1, first_line=2, attempts=0, max_new_tokens=24)


def test_gsm8k_library_is_grafted_byte_exact_and_unseen_is_unchanged(smollm2: Path, tmp_path: Path) -> None:
    key = SigningKey.generate()
    home = Home(tmp_path / "home").ensure()
    policy = TrustPolicy()
    policy.allow(SPEC.namespace, key.public_key)
    save_trust_policy(policy, home.trust_path)
    lm = load_model(smollm2, EngineSettings(block_size=32), cache_dir=home.cache_dir)

    report = run_flywheel(lm, home, key, SPEC)
    data = report.to_dict()
    m = data["metrics"]
    assert data["problems"] == {
        "repeat": ["gsm8k-test-0002", "gsm8k-test-0003"],
        "unseen": ["gsm8k-test-0004"],
    }
    assert [a["line"] for a in data["answers"]["baseline"]] == [2, 3, 4]
    assert data["library"]["entries"] == 2 and data["library"]["sources"] == {"reference": 2}
    assert m["knowledge_grafts"] == 2 and m["unseen_knowledge_grafts"] == 0 and m["wrong_grafts"] == 0
    assert m["byte_exact_checks"] == m["byte_exact_passed"] == 3  # two grafts, one unchanged fallback

    for line, answer in zip([2, 3], data["answers"]["after"], strict=False):
        problem = load_problems("test", [line])[0]
        artifact = open_artifact(home, f"{SPEC.namespace}/{problem.key}")
        manifest = artifact.manifest
        assert manifest.verification is not None and manifest.verification.verdict == "pass"
        assert manifest.verification.verifier == "gsm8k-gold"
        assert manifest.verification.evidence["source"] == "reference"
        assert manifest.prompt is not None and manifest.prompt.chat is not None
        # The repeat question's tokens, as a chat client sends them, begin the artifact.
        asked = encode_prompt(lm, SPEC.the_task().prompt(problem))
        assert read_tokens(home, manifest)[: len(asked)] == asked
        text = home.objects.read(manifest.text.digest, verify=True).decode()
        assert text == problem.reference_solution + "\n"  # no final-answer line: the model writes it
        assert answer["mode"] == "knowledge" and answer["grafted_tokens"] == manifest.token_count

    from kvreg.cli.demo import _render_flywheel

    data["model"] = {"dir": str(smollm2), "name": "smollm2", **lm.info}
    console = Console(record=True, width=200, force_terminal=False)
    _render_flywheel(console, {"flywheel": data})
    text = console.export_text()
    assert "the verified-knowledge flywheel on GSM8K" in text and "gsm8k-test-0004" in text
    assert "3/3 passed" in text
