"""``kvreg engine serve`` on SmolLM2-135M-Instruct: its end of turn (``<|im_end|>``, id 2, its
generation config's and tokenizer's EOS) ends a chat answer with ``stop``; it ships no sampling
defaults; and vLLM's sampling parameters give the same text over a graft of the chat prompt as on
a plain run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from kvreg.core.names import RefName
from kvreg.engine import deposit
from kvreg.engine.chat import chat_prompt
from serving.conftest import Served, running

pytestmark = pytest.mark.slow

QUESTION: Any = [{"role": "user", "content": "Name three primary colors."}]


@pytest.fixture(scope="module")
def served(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with running(smollm2, "smollm2", Path(tmp_path_factory.mktemp("smol-sampling")), block_size=16) as s:
        yield s


@pytest.fixture
def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=300)


def test_smollm2_ends_its_turn_and_ships_no_sampling_defaults(client: openai.OpenAI, served: Served) -> None:
    facts = client.models.retrieve("smollm2").model_extra["kvreg"]  # type: ignore[index]
    assert facts["end_token_ids"] == [2] and served.host.lm.tokenizer.convert_ids_to_tokens(2) == "<|im_end|>"
    assert facts["sampling_defaults"] == {}
    answer = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=64, temperature=0)
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens < 64
    assert "<|im_end|>" not in (answer.choices[0].message.content or "")


def test_vllms_parameters_give_the_same_text_over_a_graft(client: openai.OpenAI, served: Served) -> None:
    settings: dict[str, Any] = {"model": "smollm2", "messages": QUESTION, "max_tokens": 24}
    extra = {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 4}
    sampled = {**settings, "temperature": 0.7, "seed": 3}
    plain = client.chat.completions.create(**sampled, extra_body={**extra, "kvreg": {"mode": "off"}})
    greedy_plain = client.chat.completions.create(
        **settings, temperature=0, extra_body={"stop_token_ids": [28], "kvreg": {"mode": "off"}}
    )

    def put() -> None:
        prompt = chat_prompt(served.host.lm, QUESTION)
        deposit.deposit(
            served.host.lm,
            served.home,
            text="",
            prompt=prompt,
            ref=RefName("smol", "sampling"),
            key=served.key,
        )

    served.on_model(put)
    cached = client.chat.completions.create(**sampled, extra_body=extra)
    assert cached.model_extra["kvreg"]["mode"] == "prefix"  # type: ignore[index]
    assert cached.choices[0].message.content == plain.choices[0].message.content
    greedy = client.chat.completions.create(**settings, temperature=0, extra_body={"stop_token_ids": [28]})
    assert greedy.model_extra["kvreg"]["mode"] == "prefix"  # type: ignore[index]
    assert greedy.choices[0].message.content == greedy_plain.choices[0].message.content
    assert greedy.choices[0].finish_reason == greedy_plain.choices[0].finish_reason == "stop"
    text = greedy.choices[0].message.content or ""
    assert text and "," not in text  # cut at the first comma (token 28), which is left out
