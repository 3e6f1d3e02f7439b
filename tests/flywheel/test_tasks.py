"""The flywheel's tasks without a model: how GSM8K answers are judged and what its library keeps."""

from __future__ import annotations

import pytest

from kvreg.app.flywheel.gsm8k import load_problems
from kvreg.app.flywheel.gsm8k_checker import REFERENCE_ERRATA
from kvreg.app.flywheel.library import choose_entries
from kvreg.app.flywheel.tasks import AdditionTask, ExamSize, Gsm8kTask, task_named
from kvreg.app.prompts import ChatMessages
from kvreg.core.errors import UsageError

GSM8K = Gsm8kTask()
JANET = load_problems("test", [1])[0]  # 16 - 3 - 4 = 9 eggs, 9 * 2 = $18
RIGHT = "She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\nThe answer is 18."


def test_split_names_the_lines_and_keeps_the_sets_apart() -> None:
    repeat, unseen = GSM8K.split(ExamSize(repeat=3, unseen=2, first_line=10))
    assert [p.line for p in repeat] == [10, 11, 12] and [p.line for p in unseen] == [13, 14]
    assert GSM8K.key(repeat[0]) == "gsm8k-test-0010"
    with pytest.raises(UsageError):
        GSM8K.split(ExamSize(repeat=1, unseen=0, first_line=0))


def test_the_question_is_one_chat_turn() -> None:
    prompt = GSM8K.prompt(JANET)
    assert isinstance(prompt, ChatMessages)
    assert [t["role"] for t in prompt.turns] == ["user"] and JANET.question in prompt.turns[0]["content"]


def test_the_final_answer_must_come_from_the_model() -> None:
    solution = "She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n"
    # After a graft the completion is the stored solution plus what the model decoded.
    assert GSM8K.judge(JANET, solution + "The answer is 18.", "The answer is 18.", ended=True)
    assert not GSM8K.judge(JANET, solution + "Done.", "Done.", ended=True)  # 18 is only in the solution
    assert not GSM8K.judge(JANET, solution + "The answer is 18.", "The answer is 18.", ended=False)
    assert not GSM8K.judge(
        JANET, solution + "So 2 + 2 = 5. The answer is 18.", "So 2 + 2 = 5. The answer is 18.", ended=True
    )


def test_the_library_keeps_a_passing_solution_without_its_answer_line() -> None:
    kept = GSM8K.library_text(JANET, RIGHT, "model-greedy")
    assert kept is not None
    assert kept.text == "She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n"
    assert (
        kept.verification["verdict"] == "pass" and kept.verification["evidence"]["source"] == "model-greedy"
    )
    wrong_step = RIGHT.replace("9 * 2 = $18", "9 * 2 = $19")
    assert GSM8K.library_text(JANET, wrong_step, "model-greedy") is None
    assert GSM8K.library_text(JANET, "The answer is 18.", "model-greedy") is None  # nothing would remain


def test_reference_entries_and_the_errata() -> None:
    made = GSM8K.reference_text(JANET)
    assert made is not None and made.text == JANET.reference_solution + "\n"
    assert (
        made.verification["verifier"] == "gsm8k-gold"
        and made.verification["evidence"]["source"] == "reference"
    )
    errata = load_problems("test", [next(iter(REFERENCE_ERRATA))])[0]
    assert GSM8K.reference_text(errata) is None
    entries = choose_entries([JANET, errata], [None, None], [[], []], GSM8K)
    assert [(e.problem.line, e.source) for e in entries] == [(1, "reference")]


def test_task_names() -> None:
    assert isinstance(task_named("addition"), AdditionTask) and isinstance(task_named("gsm8k"), Gsm8kTask)
    with pytest.raises(UsageError):
        task_named("chess")
    with pytest.raises(UsageError):
        task_named("addition", "data.jsonl")
