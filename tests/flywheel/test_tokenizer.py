"""The character-level tokenizer: vocabulary, round trips, save and reload."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoTokenizer

from kvreg.engine.flywheel.task import ALPHABET, Problem, random_problem
from kvreg.engine.flywheel.tokenizer import SPECIAL_TOKENS, build_tokenizer

TOKENIZER = build_tokenizer()


def test_vocabulary() -> None:
    assert len(TOKENIZER) == 23 == len(SPECIAL_TOKENS) + len(ALPHABET)
    assert [TOKENIZER.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (TOKENIZER.bos_token_id, TOKENIZER.eos_token_id, TOKENIZER.pad_token_id) == (1, 2, 3)


@given(st.text(alphabet=ALPHABET, max_size=200))
def test_one_token_per_character_round_trip(text: str) -> None:
    ids = TOKENIZER(text)["input_ids"]
    assert ids[0] == TOKENIZER.bos_token_id
    assert len(ids) == len(text) + 1
    assert TOKENIZER.decode(ids, skip_special_tokens=True) == text
    assert TOKENIZER(text, add_special_tokens=False)["input_ids"] == ids[1:]


def test_trace_tokens_are_characters() -> None:
    trace = random_problem(random.Random(0), 7).trace()
    ids = TOKENIZER(trace, add_special_tokens=False)["input_ids"]
    assert TOKENIZER.convert_ids_to_tokens(ids) == list(trace)
    assert TOKENIZER.unk_token_id not in ids
    assert TOKENIZER.decode([*ids, TOKENIZER.eos_token_id], skip_special_tokens=True) == trace


def test_save_and_reload(tmp_path: Path) -> None:
    TOKENIZER.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = Problem(4821, 3967).trace()
    assert reloaded(text)["input_ids"] == TOKENIZER(text)["input_ids"]
    assert reloaded.decode(reloaded(text)["input_ids"], skip_special_tokens=True) == text
