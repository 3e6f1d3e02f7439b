"""Chat prompts from the command line on a tiny ChatML model: ``deposit --prompt-file --chat``
then ``ask --chat`` (knowledge found), ``deposit --messages-file`` alone then ``graft
--messages-file --check`` with a new question (byte-exact), ``show`` naming the chat rendering,
and the option mixes and messages files refused before anything is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import BLOCK, kvreg, snapshot

pytestmark = pytest.mark.slow

SHOTS = [
    {"role": "user", "content": "Q:4821+3967=?"},
    {"role": "assistant", "content": "S:1+7+0=08;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788"},
]
QUESTION = "Find the number of ordered pairs of positive integers (a, b) such that a + b = 1000."


def _write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_chat_deposit_graft_ask_and_show(tmp_path: Path, models: Any) -> None:
    home, model = tmp_path / "home", models["llama-chat"]
    kvreg(home, "keys", "generate")
    question = _write(tmp_path, "q.txt", QUESTION)
    answer = _write(tmp_path, "a.txt", " Step 1: one-digit numbers contribute 9. The answer is 738.")
    kvreg(
        home, "deposit", model, "--ref", "chat/p07", "--prompt-file", question, "--chat",
        "--text-file", answer, "--block-size", BLOCK, "--verifier", "checker", "--verdict", "pass",
    )  # fmt: skip
    asked = kvreg(
        home, "--json", "ask", "--model", model, "--prompt-file", question, "--chat", "--mode", "knowledge",
        "--max-new-tokens", "2", "--block-size", BLOCK,
    ).json  # fmt: skip
    assert asked["mode"] == "knowledge" and asked["artifact"]["ref"] == "chat/p07"
    assert asked["prefilled_tokens"] == 0

    shots = _write(tmp_path, "shots.json", SHOTS)
    dep = kvreg(
        home, "deposit", model, "--ref", "chat/shots", "--messages-file", shots, "--block-size", BLOCK
    )
    assert "chat-rendered" in dep.out and "without generation prompt" in dep.out
    shown = kvreg(home, "show", "chat/shots")
    assert "chat-rendered" in shown.out
    assert "chat" in kvreg(home, "show", "chat/shots", "--json").json["prompt"]

    more = _write(tmp_path, "more.json", [*SHOTS, {"role": "user", "content": QUESTION}])
    grafted = kvreg(
        home, "--json", "graft", "chat/shots", "--model", model, "--messages-file", more, "--check",
        "--max-new-tokens", "2",
    ).json  # fmt: skip
    assert grafted["check"]["byte_exact"] and grafted["whole_artifact"] and grafted["prefill_tokens"] > 0


def test_bad_mixes_and_messages_files_store_nothing(tmp_path: Path, models: Any) -> None:
    home, model = tmp_path / "home", models["llama-chat"]
    kvreg(home, "keys", "generate")
    before = snapshot(home)
    text = _write(tmp_path, "t.txt", "text")
    shots = _write(tmp_path, "shots.json", SHOTS)
    bad = _write(tmp_path, "bad.json", [{"role": "user"}])
    refused = {
        "--chat sends --prompt-file": ["deposit", model, "--ref", "c/x", "--text-file", text, "--chat"],
        "drop --chat": ["deposit", model, "--ref", "c/x", "--messages-file", shots, "--chat"],
        "not both": ["deposit", model, "--ref", "c/x", "--messages-file", shots, "--prompt-file", text],
        "give --text-file": ["deposit", model, "--ref", "c/x", "--prompt-file", text],
        "has no 'content'": ["deposit", model, "--ref", "c/x", "--messages-file", bad],
        "or --append-file, not both": [
            "graft",
            "c/x",
            "--model",
            model,
            "--messages-file",
            shots,
            "--append-file",
            text,
        ],
        "give the prompt": ["ask", "--model", model],
    }
    for message, args in refused.items():
        run = kvreg(home, *args, expect=2)
        assert message in run.err, str(run)
    assert snapshot(home) == before
