"""``kvreg engine serve`` on SmolLM2-135M-Instruct with the ``openai`` client: a chat question
asked again after its prompt was deposited is answered with the prompt grafted, byte-identical
to the first (uncached) answer, streamed and not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvreg.core.names import RefName
from kvreg.engine import deposit
from kvreg.engine.chat import chat_prompt
from serving.conftest import Served, running

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "Name three primary colors."}]


@pytest.fixture(scope="module")
def served(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with running(smollm2, "smollm2", Path(tmp_path_factory.mktemp("smol")), block_size=16) as s:
        yield s


def test_a_repeat_chat_question_is_grafted_and_byte_identical(served: Served) -> None:
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=300)
    first = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=12, temperature=0)  # type: ignore[arg-type]
    assert first.model_extra["kvreg"]["mode"] == "off"  # type: ignore[index]
    lm = served.host.lm

    def put() -> None:
        prompt = chat_prompt(lm, QUESTION)
        deposit.deposit(
            lm, served.home, text="", prompt=prompt, ref=RefName("smol", "colors"), key=served.key
        )

    served.on_model(put)
    again = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=12, temperature=0)  # type: ignore[arg-type]
    facts = again.model_extra["kvreg"]  # type: ignore[index]
    assert facts["mode"] == "prefix" and facts["artifact"]["ref"] == "smol/colors"
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens > 0
    assert again.choices[0].message.content == first.choices[0].message.content
    stream = client.chat.completions.create(
        model="smollm2",
        messages=QUESTION,  # type: ignore[arg-type]
        max_tokens=12,
        temperature=0,
        stream=True,
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        == first.choices[0].message.content
    )
