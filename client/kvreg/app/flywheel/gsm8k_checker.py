"""The strict GSM8K checker: the right final answer, reached without a wrong arithmetic step.

A worked solution passes :func:`check_solution` only if BOTH hold:

(a) its final answer, the LAST number in the text (calculator annotations aside),
    equals the gold answer. Thousands commas (``1,234``), a leading ``$`` and a ``%``
    suffix are allowed; a period after the number ends the sentence; a decimal counts
    only if it equals an integer (``18.00``); ``-5`` is negative. Nothing else is
    interpreted: "The answer is 18 (2 days)" answers 2.
(b) every arithmetic claim the text states holds (``16 - 3 - 4 = 9``, each step of a
    chain, each annotation ``<<9*2=18>>``), evaluated exactly: see :mod:`.gsm8k_arith`
    for what a claim is and which are skipped. A text that states no claim passes on
    its final answer alone (``claims_checked == 0``).

:func:`check_completion` is the variant for a graft: the model continues a stored
solution that has no final-answer line, so the final answer is read from the model's
continuation only (the solution's last number does not count: the model must write the
answer itself), while the claims are checked over the solution and the continuation
together (a wrong step the model adds fails it too).

The GSM8K reference solutions themselves pass, but for the few test lines in
:data:`REFERENCE_ERRATA`, whose worked solutions state a false equation.

This module reads no file and knows nothing of prompts (:mod:`.gsm8k` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreg.app.flywheel.gsm8k_arith import claims
from kvreg.app.flywheel.gsm8k_numbers import last_number

__all__ = ["CHECKER", "REFERENCE_ERRATA", "CheckResult", "check_completion", "check_solution"]

#: The checker's name and version, for a manifest's ``verification`` record.
CHECKER = "kvreg.flywheel.gsm8k-checker/v1"

#: Test-set lines (1-based) whose reference solution states a false equation, so that
#: ``check_solution(answer_text, gold)`` fails them although the final answer is right.
#: The checker is right about each; the flywheel cannot use these references as they are.
#: (The full train set, not shipped, has 31 such lines in 7,473: wrong products or sums
#: such as line 7445's ``14*20=140``, typos such as line 6813's ``50-8 = 44``, and clock
#: arithmetic in line 658's ``0900-0130 = 0730``; none among the 8-shot lines 1-8.)
REFERENCE_ERRATA: dict[int, str] = {
    502: "'364 / 4 = 273' (meant 3/4 * 364 = 273; the annotation has it right)",
    959: "'48 = 100% + 20%' (a proportion written as an equation)",
    1025: "'$32 - $20 = $300' (meant $320 - $20)",
}


@dataclass(frozen=True)
class CheckResult:
    """The checker's verdict, with the evidence a manifest's ``verification`` records."""

    passed: bool
    final_answer: int | None  # the last number if it is an integer, else None
    gold: int
    claims_checked: int
    wrong_claims: tuple[str, ...] = ()
    reason: str | None = None  # why it failed; None when it passed
    final_answer_text: str | None = None  # the last number as written ("$1,234.00")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready evidence; numbers as decimal strings, so that any size fits canonical JSON."""
        return {
            "checker": CHECKER,
            "passed": self.passed,
            "gold": str(self.gold),
            "final_answer": None if self.final_answer is None else str(self.final_answer),
            "final_answer_text": self.final_answer_text,
            "claims_checked": self.claims_checked,
            "wrong_claims": list(self.wrong_claims),
            "reason": self.reason,
        }


def check_solution(text: str, gold: int) -> CheckResult:
    """Check a whole worked solution: its last number is the answer, and every claim must hold."""
    return _verdict(text, text, gold)


def check_completion(solution: str, continuation: str, gold: int) -> CheckResult:
    """Check a model's ``continuation`` of a grafted ``solution``.

    The final answer is the last number of ``continuation`` only; the claims are those of
    ``solution + continuation`` (the text the model saw and wrote, joined as is)."""
    return _verdict(solution + continuation, continuation, gold)


def _verdict(claims_text: str, answer_text: str, gold: int) -> CheckResult:
    found = claims(claims_text)
    wrong = tuple(c.text for c in found if not c.holds)
    last = last_number(answer_text)
    answer = last[0].numerator if last is not None and last[0].denominator == 1 else None
    reasons = []
    if last is None:
        reasons.append("no number in the text, so no final answer")
    elif answer is None:
        reasons.append(f"the final answer {last[1]!r} is not an integer")
    elif answer != gold:
        reasons.append(f"the final answer {last[1]!r} is not the gold answer {gold}")
    if wrong:
        reasons.append(f"{len(wrong)} of {len(found)} arithmetic claims are wrong: {'; '.join(wrong)}")
    return CheckResult(
        passed=not reasons,
        final_answer=answer,
        gold=gold,
        claims_checked=len(found),
        wrong_claims=wrong,
        reason="; ".join(reasons) or None,
        final_answer_text=None if last is None else last[1],
    )
