"""Chat rendering (``kvreg.engine.chat``) on a tiny ChatML model: the tokens are transformers'
own ``apply_chat_template(tokenize=True)``, the BOS is written once (by the template), the
generation prompt follows the last role, and a conversation ending with the assistant is a
token prefix of the same conversation continued. A tokenizer without a template is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvreg.core.canonical import canonical_json
from kvreg.core.digest import Digest
from kvreg.core.errors import ModelError
from kvreg.engine.chat import chat_prompt, wants_generation_prompt
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import LoadedModel, load_model

SHOTS = [
    {"role": "system", "content": "Answer with the number."},
    {"role": "user", "content": "Q:4821+3967=?"},
    {"role": "assistant", "content": "8788"},
]
QUESTION = {"role": "user", "content": "Find the number of ordered pairs (a, b) with a + b = 1000."}


@pytest.fixture(scope="module")
def chat_lm(tiny_models: Any) -> LoadedModel:
    return load_model(tiny_models["llama-chat"], EngineSettings(block_size=16))


def test_chat_tokens_are_what_transformers_and_chat_clients_send(chat_lm: LoadedModel) -> None:
    asked = chat_prompt(chat_lm, [*SHOTS, QUESTION])
    expected = chat_lm.tokenizer.apply_chat_template(
        [*SHOTS, QUESTION], tokenize=True, add_generation_prompt=True, return_dict=False
    )
    assert asked.tokens == list(expected)
    bos = chat_lm.tokenizer.bos_token_id
    assert asked.tokens[0] == bos and asked.tokens.count(bos) == 1  # the template's BOS, not a second one
    assert asked.generation_prompt and asked.text.endswith("<|im_start|>assistant\n")
    assert asked.messages_json == canonical_json([*SHOTS, QUESTION])
    template = (Path(chat_lm.path) / "chat_template.jinja").read_bytes()
    assert asked.template_digest == Digest.of_bytes(template)

    shots = chat_prompt(chat_lm, SHOTS)  # ends with the assistant: no generation prompt
    assert not shots.generation_prompt and not wants_generation_prompt(SHOTS)
    assert asked.text.startswith(shots.text)
    assert asked.tokens[: len(shots.tokens)] == shots.tokens and len(asked.tokens) > len(shots.tokens)


def test_a_tokenizer_without_a_chat_template_is_refused(llama: LoadedModel) -> None:
    with pytest.raises(ModelError, match="no chat template") as info:
        chat_prompt(llama, [QUESTION])
    assert info.value.hint is not None and "--chat" in info.value.hint
