"""GSM8K for the flywheel: the shipped data, problems and prompts, and the strict checker.

The checker is tested on real GSM8K lines from the shipped test set: every reference
solution passes but the documented errata, and a real solution with one step corrupted
fails although its final answer is right.
"""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from pathlib import Path

import pytest

from kvreg.app.flywheel.gsm8k import (
    FEW_SHOT_LINES,
    INSTRUCTION,
    Gsm8kProblem,
    few_shot_messages,
    few_shot_problems,
    final_answer_line,
    load_problems,
    question_messages,
    user_content,
)
from kvreg.app.flywheel.gsm8k_arith import claims
from kvreg.app.flywheel.gsm8k_checker import (
    CHECKER,
    REFERENCE_ERRATA,
    CheckResult,
    check_completion,
    check_solution,
)
from kvreg.app.flywheel.gsm8k_numbers import last_number
from kvreg.core.errors import UsageError

TEST_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
TRAIN_1_8_SHA256 = "3f7ee50a459a52ed756683a31829ee9feb74db2b71c5638a09bf31139b8fee14"


@pytest.fixture(scope="module")
def test_set() -> list[Gsm8kProblem]:
    return load_problems("test")


def with_answer(problem: Gsm8kProblem) -> str:
    return f"{problem.reference_solution}\n{final_answer_line(problem.gold)}"


def holds(text: str) -> list[bool]:
    return [c.holds for c in claims(text)]


# --- the shipped data -----------------------------------------------------------------


def test_shipped_data_is_the_published_files_with_their_licence() -> None:
    data = files("kvreg.app.flywheel").joinpath("data", "gsm8k")
    assert hashlib.sha256(data.joinpath("test.jsonl").read_bytes()).hexdigest() == TEST_SHA256
    assert hashlib.sha256(data.joinpath("train-lines-1-8.jsonl").read_bytes()).hexdigest() == TRAIN_1_8_SHA256
    assert "Copyright (c) 2021 OpenAI" in data.joinpath("LICENSE").read_text(encoding="utf-8")
    readme = data.joinpath("README.md").read_text(encoding="utf-8")
    assert "3101c7d5072418e28b9008a6636bde82a006892c" in readme and TEST_SHA256 in readme


def test_load_the_whole_test_set(test_set: list[Gsm8kProblem]) -> None:
    assert len(test_set) == 1319
    assert [p.line for p in test_set] == list(range(1, 1320))
    first = test_set[0]
    assert first.key == "gsm8k-test-0001" and first.split == "test"
    assert first.question.startswith("Janet’s ducks lay 16 eggs per day.")
    assert first.gold == 18
    assert test_set[41].key == "gsm8k-test-0042"


def test_load_lines_in_the_order_given() -> None:
    problems = load_problems("test", [3, 1, 3])
    assert [p.key for p in problems] == ["gsm8k-test-0003", "gsm8k-test-0001", "gsm8k-test-0003"]
    assert problems[0].gold == 70000


def test_few_shot_problems_are_the_first_eight_train_lines() -> None:
    shots = few_shot_problems()
    assert [p.key for p in shots] == [f"gsm8k-train-000{n}" for n in FEW_SHOT_LINES]
    assert shots[0].question.startswith("Natalia sold clips to 48 of her friends")
    assert shots[0].gold == 72


def test_reference_solution_is_cleaned() -> None:
    (problem,) = load_problems("test", [1])
    assert problem.answer_text.endswith("\n#### 18")
    assert problem.reference_solution == (
        "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every day at the farmer’s market."
    )
    odd = Gsm8kProblem("test", 7, "q", "It is 2*3 = <<2*3=6>>6 \nSo 6+1=<<6+1=7>>7.  \n#### 7\n")
    assert odd.reference_solution == "It is 2*3 = 6\nSo 6+1=7."


@pytest.mark.parametrize(
    ("last_line", "gold"), [("#### 1,234", 1234), ("#### 70000", 70000), ("#### -3", -3)]
)
def test_gold_parses_commas_and_signs(last_line: str, gold: int) -> None:
    assert Gsm8kProblem("test", 1, "q", f"Work.\n{last_line}").gold == gold


@pytest.mark.parametrize("answer", ["Work.\n#### 12.5", "Work.\n#### twelve", "Work. 12", "Work.\n#### 1,23"])
def test_malformed_gold_is_a_usage_error(answer: str) -> None:
    with pytest.raises(UsageError, match="gsm8k-test-0009"):
        _ = Gsm8kProblem("test", 9, "q", answer).gold


# --- load errors ------------------------------------------------------------------------


def test_unknown_split() -> None:
    with pytest.raises(UsageError, match="unknown GSM8K split 'dev'"):
        load_problems("dev")


@pytest.mark.parametrize("line", [0, -1, 1320])
def test_line_out_of_range(line: int) -> None:
    with pytest.raises(UsageError, match=f"line {line} is out of range") as e:
        load_problems("test", [line])
    assert e.value.details["line"] == line


def test_train_lines_beyond_the_shipped_eight_need_a_path(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as e:
        load_problems("train", [9])
    assert e.value.hint is not None and "path=" in e.value.hint
    path = tmp_path / "train.jsonl"
    rows = [
        json.dumps({"question": f"q{n}", "answer": f"{n}+1 = {n + 1}\n#### {n + 1}"}) for n in range(1, 11)
    ]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    (ninth,) = load_problems("train", [9], path=path)
    assert (ninth.key, ninth.question, ninth.gold) == ("gsm8k-train-0009", "q9", 10)
    assert len(load_problems("train", path=path)) == 10


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read GSM8K data"):
        load_problems("test", path=tmp_path / "absent.jsonl")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('{"question": "q", "answer": ', "is not JSON"),
        ('["q", "a"]', "is not a GSM8K problem"),
        ('{"question": "q"}', "is not a GSM8K problem"),
        ('{"question": "q", "answer": 5}', "is not a GSM8K problem"),
        ('{"question": "q", "answer": "no final line"}', "no final line"),
    ],
)
def test_malformed_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"question": "q", "answer": "1+1 = 2\n#### 2"})
    path.write_text(f"{good}\n{row}\n", encoding="utf-8")
    assert load_problems("test", [1], path=path)[0].gold == 2  # only the lines asked for are read
    with pytest.raises(UsageError, match=message):
        load_problems("test", [2], path=path)
    with pytest.raises(UsageError, match=message):
        load_problems("test", path=path)


# --- prompts ------------------------------------------------------------------------------


def test_few_shot_messages() -> None:
    shots = few_shot_problems()
    messages = few_shot_messages(shots, "How many?")
    assert len(messages) == 2 * len(shots) + 1 == 17
    assert [m["role"] for m in messages] == ["user", "assistant"] * 8 + ["user"]
    assert messages[-1:] == question_messages("How many?")
    assert messages[-1]["content"] == f"How many?\n{INSTRUCTION}"
    for problem, user, assistant in zip(shots, messages[0::2], messages[1::2], strict=False):
        assert user["content"] == user_content(problem.question)
        assert assistant["content"] == f"{problem.reference_solution}\nThe answer is {problem.gold}."
        assert "<<" not in assistant["content"] and "####" not in assistant["content"]
        assert check_solution(assistant["content"], problem.gold).passed
    assert few_shot_messages(shots[:3], "How many?")[:6] == messages[:6]  # N shots prefix N+1 shots
    assert few_shot_messages([], "How many?") == question_messages("How many?")


def test_final_answer_line_is_what_the_checker_reads() -> None:
    assert final_answer_line(1234) == "The answer is 1234."
    assert last_number(final_answer_line(1234)) is not None
    assert check_solution("Work.\n" + final_answer_line(-5), -5).passed


# --- the checker on real GSM8K lines ----------------------------------------------------


def test_every_reference_solution_passes_but_the_errata(test_set: list[Gsm8kProblem]) -> None:
    failed = {}
    for problem in test_set:
        result = check_solution(problem.answer_text, problem.gold)
        assert result.final_answer == problem.gold, problem.key
        if not result.passed:
            failed[problem.line] = result.wrong_claims
    assert set(failed) == set(REFERENCE_ERRATA)
    assert failed == {502: ("364 / 4 = 273",), 959: ("48 = 100% + 20%",), 1025: ("$32 - $20 = $300",)}


def test_cleaned_reference_with_the_final_answer_line_passes(test_set: list[Gsm8kProblem]) -> None:
    for problem in test_set[:200]:
        result = check_solution(with_answer(problem), problem.gold)
        assert result.passed == (problem.line not in REFERENCE_ERRATA), (problem.key, result.reason)
        assert result.final_answer == problem.gold


def test_annotations_are_checked_too(test_set: list[Gsm8kProblem]) -> None:
    problem = test_set[0]
    assert check_solution(problem.answer_text, 18).claims_checked == 4  # 2 annotations, 2 prose steps
    wrong = problem.answer_text.replace("<<16-3-4=9>>", "<<16-3-4=10>>")
    result = check_solution(wrong, 18)
    assert not result.passed and result.wrong_claims == ("<<16-3-4=10>>",)


def test_a_wrong_step_with_the_right_final_answer_fails(test_set: list[Gsm8kProblem]) -> None:
    problem = test_set[2]  # the house flip: 80,000+50,000=$130,000 ... profit $70,000
    text = with_answer(problem).replace("80,000+50,000=$130,000", "80,000+50,000=$140,000")
    result = check_solution(text, problem.gold)
    assert not result.passed
    assert result.final_answer == 70000 == problem.gold
    assert result.wrong_claims == ("80,000+50,000=$140,000",)
    assert result.reason is not None and "1 of 4 arithmetic claims are wrong" in result.reason


def test_a_right_solution_with_a_wrong_final_answer_fails(test_set: list[Gsm8kProblem]) -> None:
    problem = test_set[0]
    result = check_solution(f"{problem.reference_solution}\nThe answer is 19.", problem.gold)
    assert not result.passed and result.wrong_claims == ()
    assert result.final_answer == 19 and result.reason == "the final answer '19' is not the gold answer 18"


def test_no_number_fails() -> None:
    result = check_solution("I do not know.", 18)
    assert not result.passed
    assert result.final_answer is None and result.final_answer_text is None
    assert result.reason == "no number in the text, so no final answer"


def test_no_claim_and_the_right_answer_passes() -> None:
    result = check_solution("She sells the rest, so she makes eighteen dollars.\nThe answer is 18.", 18)
    assert result.passed and result.claims_checked == 0 and result.reason is None


# --- the final answer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("The answer is 1,234.", 1234),
        ("The answer is $1,234.00.", 1234),
        ("The answer is 18.00", 18),
        ("The answer is $18.", 18),
        ("He is down 5 - 8 = -3. The answer is -3.", -3),
        ("The answer is 25%.", 25),
        ("3 + 4 = 7\n#### 7", 7),
        ("The answer is 7,\n", 7),
    ],
)
def test_final_answer_forms_that_pass(text: str, gold: int) -> None:
    result = check_solution(text, gold)
    assert result.passed, result.reason
    assert result.final_answer == gold


@pytest.mark.parametrize(
    ("text", "gold", "final"),
    [
        ("The answer is 18.5.", 18, None),  # not an integer
        ("The answer is 18 dollars for 2 days.", 18, 2),  # the LAST number
        ("The answer is 10-5.", 5, 5),  # "10-5" ends with 5: read, not evaluated
        ("The answer is 10-5.", -5, 5),
        ("The answer is 1,2345.", 12345, 2345),  # not a thousands separator
        ("The answer is 3 1/2.", 3, None),
    ],
)
def test_final_answer_is_the_last_number_strictly(text: str, gold: int, final: int | None) -> None:
    result = check_solution(text, gold)
    assert result.passed == (final == gold)
    assert result.final_answer == final


def test_check_completion_reads_the_answer_from_the_continuation_only(test_set: list[Gsm8kProblem]) -> None:
    problem = test_set[0]
    solution = problem.reference_solution  # ends "... $18 every day at the farmer’s market."
    assert check_completion(solution + "\n", "The answer is 18.", 18).passed
    silent = check_completion(solution + "\n", "That is all.", 18)
    assert not silent.passed and silent.final_answer is None  # the solution's 18 does not count
    wrong_step = check_completion(solution + "\n", "So 9 * 2 = 20 and the answer is 18.", 18)
    assert not wrong_step.passed and wrong_step.wrong_claims == ("9 * 2 = 20",)
    bad_solution = solution.replace("16 - 3 - 4 = 9", "16 - 3 - 4 = 8")
    spoiled = check_completion(bad_solution + "\n", "The answer is 18.", 18)
    assert not spoiled.passed and spoiled.wrong_claims == ("16 - 3 - 4 = 8",)


def test_check_result_to_dict() -> None:
    result = check_solution("2 + 2 = 5\nThe answer is 5.", 5)
    record = result.to_dict()
    assert record == {
        "checker": CHECKER,
        "passed": False,
        "gold": "5",
        "final_answer": "5",
        "final_answer_text": "5",
        "claims_checked": 1,
        "wrong_claims": ["2 + 2 = 5"],
        "reason": "1 of 1 arithmetic claims are wrong: 2 + 2 = 5",
    }
    assert json.loads(json.dumps(record)) == record
    assert isinstance(result, CheckResult)


# --- arithmetic claims ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "48/2 = 24",
        "7 / 2 = 3.5",
        "80,000+50,000=$130,000",
        "1,234 + 1 = 1,235",
        "$10 x 1.2 = $12",
        "6 × $2.50 = $15",
        "18 ÷ 3 = 6",
        "54 − 37 = 17",
        "120 – 80 - 15 = 25",  # an en dash between numbers is a minus
        "3 * (16.50 + 22.50 + 42) = 243",
        "(2 + 3) * 4 = 20",
        "2(3+4) = 14",
        "5 - 8 = -3",
        "2^3 + 1 = 9",
        "2**10 = 1024",
        "10/3 = 3.33",  # rounded to the decimals stated
        "2/3 = 0.67",
        "2/3 = .667",
        "3.33 = 10/3",
        "1/4 = 25%",  # % read as /100
        "$80 x 30% = $24",
        "12/20 x 100% = 60%",  # % as a plain suffix
        "5 - 1 - 1/2 = 3 1/2",  # mixed numbers
        "1 1/2 / 1/2 = 3",  # a tight fraction binds first
        "¾ x 12 = 9",
        "$1 / 2 = 50 cents",
        "5 x 1.5 = 7.50",
        "(2 + 3 = 5)",  # parentheses of the prose around the claim
    ],
)
def test_right_claims(text: str) -> None:
    assert holds(text) == [True], claims(text)


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("48/2 = 25", "48/2 = 25"),
        ("10/3 = 3", "10/3 = 3"),  # an integer must be exact
        ("10/3 = 3.34", "10/3 = 3.34"),
        ("2/3 = 0.66", "2/3 = 0.66"),  # truncated, not rounded
        ("2 + 3 * 4 = 20", "2 + 3 * 4 = 20"),  # precedence
        ("$80 x 30% = $25", "$80 x 30% = $25"),
        ("5/0 = 0", "5/0 = 0"),
        ("So 1,234 + 1 = 1,236 in all", "1,234 + 1 = 1,236"),
        ("It costs 6 × $2.50 = $16.", "6 × $2.50 = $16"),
        ("(2 + 3) * 4 = 14", "(2 + 3) * 4 = 14"),
    ],
)
def test_wrong_claims(text: str, wrong: str) -> None:
    found = claims(text)
    assert [(c.text, c.holds) for c in found] == [(wrong, False)]


def test_chains_are_checked_step_by_step() -> None:
    assert holds("2 + 3 = 4 + 1 = 5") == [True, True]
    assert holds("3/2 = $1.50+$3.00=$4.50") == [True, True]  # a running total
    assert holds("2 * 3 = 6 + 1 = 8") == [True, False]  # the running total goes wrong at its second step
    assert holds("2 + 2 = 6 - 1 = 5") == [False, True]  # not a running total either: 2 + 2 is not 6
    assert holds("2 + 3 = 5 + 4") == [False]  # no next step: an equation, and a false one
    assert holds("Let T = 3 + 4 = 7") == [True]
    assert holds("Day 2 = 3 * 4 = 12") == [True]  # "Day 2" is a label: only 3 * 4 = 12 is a claim
    assert holds("so she has 20 = 4 * 6") == [False]


def test_what_is_not_a_claim() -> None:
    for text in [
        "x + 5 = 10",  # a variable
        "3x = 12, so 2x + 1 = 7",
        "2 * x = 10",
        "250=(5/2)x",
        "8/3 = 24/Y",
        "It takes 10–15 minutes = a quarter hour",
        "She starts at 2:00 pm and ends at 5:00 pm.",
        "15 pages x 1/3 = 5 pages",  # the run does not hold the whole expression
        "3 times 4 + 1 = 13",
        "5 apples + 3 apples = 8 apples",
        "- 3 + 4 = 7",  # a bullet, not a minus
        "5 = 5",  # no operation
        "17/3 = 5 and 2/3 loads",
        "21 x (1 and 1/3) = 28",
        "10% of 150 = 15",
        "Week 2 = 35 + 35",  # a label
    ]:
        assert claims(text) == [], (text, claims(text))


def test_hostile_input_is_skipped_not_evaluated() -> None:
    deep = "(" * 5000 + "1" + ")" * 5000
    minuses = "-" * 5000 + "1"
    powers = "^".join(["2"] * 5000)
    huge = "9" * 5000
    for text in [
        f"{deep} = 1",
        f"{minuses} = 1",
        f"{powers} = 2",
        "2^100000 = 1",
        "9**9**9 = 1",
        f"{huge} + 1 = 1",
    ]:
        assert claims(text) == [], text[:40]
    assert holds("(((1 + 1))) = 2; 2^10 = 1024; --1 + 1 = 2") == [True, True, True]
    result = check_solution(f"{huge} and then {deep} = 1\nThe answer is 1.", 1)
    assert result.passed and result.claims_checked == 0
    assert check_solution(f"The answer is {huge}", 1).final_answer is None
