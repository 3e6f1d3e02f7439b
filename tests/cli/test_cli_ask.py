"""``kvreg ask`` and ``kvreg flywheel`` from the command line, on the bundled arithmetic model."""

from __future__ import annotations

import pytest

from kvreg.engine.flywheel.model import model_path
from kvreg.engine.flywheel.task import ANSWER_MARK, Problem

from .helpers import kvreg

pytestmark = pytest.mark.slow

SOLVED = Problem(123456, 654329)
UNSEEN = Problem(987654, 123123)
BLOCK = "8"


def _ask(home, prompt, *extra, expect=0):  # type: ignore[no-untyped-def]
    return kvreg(
        home,
        "ask",
        "--model",
        model_path(),
        "--prompt-file",
        prompt,
        "--block-size",
        BLOCK,
        *extra,
        expect=expect,
    )


def test_ask_grafts_a_verified_solution_and_falls_back_for_an_unseen_question(tmp_path):  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    kvreg(home, "keys", "generate")
    question = tmp_path / "q.txt"
    question.write_text(SOLVED.question(), encoding="utf-8")
    solution = tmp_path / "s.txt"
    solution.write_text(SOLVED.solution() + ANSWER_MARK + str(SOLVED.answer), encoding="utf-8")
    kvreg(
        home, "deposit", model_path(), "--prompt-file", question, "--text-file", solution,
        "--block-size", BLOCK, "--verifier", "kvreg.flywheel.checker/v1", "--verdict", "pass",
        "--ref", "fw/add-123456-654329",
    )  # fmt: skip

    answer = _ask(home, question, "--json").json
    assert answer["mode"] == "knowledge" and answer["fallback"] is False
    assert answer["artifact"]["ref"] == "fw/add-123456-654329" and answer["artifact"]["verdict"] == "pass"
    assert answer["decoded_tokens"] == 1 and answer["prefilled_tokens"] == 0
    assert answer["completion"].endswith(f"{ANSWER_MARK}{SOLVED.answer}")
    assert answer["probe"]["kv_equal"] is True and answer["probe"]["witness_equal"] is True
    assert answer["remote"] is None

    # The same question with routing off: plain generation, every token decoded.
    off = _ask(home, question, "--mode", "off", "--json").json
    assert off["mode"] == "off" and off["grafted_tokens"] == 0 and off["decoded_tokens"] > 20

    # An unseen question: no knowledge graft; the reason is given; exit 0.
    unseen = tmp_path / "u.txt"
    unseen.write_text(UNSEEN.question(), encoding="utf-8")
    plain = _ask(home, unseen, "--json").json
    assert plain["mode"] != "knowledge" and plain["refused_modes"][0]["mode"] == "knowledge"
    assert plain["refused_modes"][0]["reason"]

    # People get the completion and a summary.
    human = _ask(home, question)
    assert f"{ANSWER_MARK}{SOLVED.answer}" in human.out
    assert "knowledge" in human.out and "1 decoded" in human.out

    # Usage errors.
    assert _ask(home, question, "--namespace", "fw", "--json", expect=2).json["error"]["code"] == "USAGE"
    assert _ask(home, question, "--mode", "guess", expect=2).rc == 2


def test_flywheel_command_reports_before_and_after(tmp_path):  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    kvreg(home, "keys", "generate")
    args = ["--repeat-easy", "1", "--repeat-hard", "1", "--unseen-easy", "1", "--unseen-hard", "0"]
    report = kvreg(home, "flywheel", *args, "--attempts", "2", "--json", timeout=600).json
    m = report["metrics"]
    assert report["library"]["entries"] == 2
    assert m["knowledge_grafts"] == 2 and m["repeat_accuracy_after"] == 1.0 and m["wrong_grafts"] == 0
    assert m["byte_exact_passed"] == m["byte_exact_checks"] == 3
    assert len(report["answers"]["baseline"]) == len(report["answers"]["after"]) == 3
    listed = kvreg(home, "ls", "--json").json
    assert len([r for r in listed["refs"] if r["ref"].startswith("flywheel/add-")]) == 2
