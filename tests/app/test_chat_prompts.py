"""Chat prompts through the use cases on a tiny ChatML model: a few-shot conversation deposited
alone is grafted whole under the same conversation plus a new question (byte-exact), the
manifest records how the prompt was rendered, ``ask --chat`` finds the knowledge deposited
with ``--chat``, and messages files, templates and empty texts are checked before anything
is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvreg.app import keyring
from kvreg.app.ask import AskRequest, answer
from kvreg.app.deposit import DepositRequest, deposit
from kvreg.app.engine_options import EngineOptions
from kvreg.app.graft import GraftRequest, graft
from kvreg.app.prompts import ChatMessages, chat_turn, load_messages_file
from kvreg.core.canonical import canonical_json
from kvreg.core.errors import ModelError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.fileio.keyfiles import save_signing_key
from kvreg.store.home import Home

from .conftest import TEXT

BLOCK = EngineOptions(block_size=16)
SHOTS = ChatMessages.parse(
    [
        {"role": "system", "content": "Solve the problem; end with the number."},
        {"role": "user", "content": "Q:4821+3967=?"},
        {"role": "assistant", "content": "S:1+7+0=08;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788"},
    ]
)
QUESTION = "Find the number of ordered pairs of positive integers (a, b) such that a + b = 1000."
ANSWER = " Step 1: one-digit numbers contribute 9. The answer is 738."


@pytest.fixture(scope="module")
def chat_dir(tiny_models: Any) -> Path:
    return Path(tiny_models["llama-chat"])


@pytest.fixture
def signer(home: Home, key: SigningKey) -> Home:
    save_signing_key(key, keyring.key_path(home, keyring.DEFAULT_KEY_NAME))
    return home


def test_a_few_shot_conversation_is_grafted_whole_under_a_new_question(signer: Home, chat_dir: Path) -> None:
    ref = RefName.parse("tests/shots")
    report = deposit(signer, DepositRequest(model=chat_dir, ref=ref, text="", prompt=SHOTS, engine=BLOCK))
    m = report.result.manifest
    assert m.prompt is not None and m.prompt.chat is not None
    assert m.prompt.token_count == m.token_count > 16 and m.text.size == 0  # the conversation alone
    assert m.prompt.chat.generation_prompt is False  # it ends with the assistant's turn
    messages = canonical_json(SHOTS.to_list())
    assert signer.objects.read(m.prompt.chat.messages, verify=True) == messages
    assert m.prompt.chat.messages in m.object_digests()
    rendered = signer.objects.read(m.prompt.digest, verify=True).decode()
    assert rendered.startswith("<s><|im_start|>system\n") and rendered.endswith("<|im_end|>\n")

    same = graft(signer, GraftRequest(str(ref), chat_dir, prompt_text=SHOTS, check=True, max_new_tokens=3))
    assert same.error is None and same.check is not None and same.check["byte_exact"]
    assert same.whole_artifact and same.prefill_tokens == 0

    asked = ChatMessages((*SHOTS.turns, *chat_turn(QUESTION).turns))
    more = graft(signer, GraftRequest(str(ref), chat_dir, prompt_text=asked, check=True, max_new_tokens=3))
    assert more.error is None and more.check is not None and more.check["byte_exact"]
    assert more.whole_artifact and more.graft_tokens == m.token_count and more.prefill_tokens > 0


def test_ask_with_chat_finds_the_knowledge_deposited_with_chat(signer: Home, chat_dir: Path) -> None:
    ref = RefName.parse("tests/p07")
    verification = {"verifier": "checker", "verdict": "pass", "evidence": {}}
    request = DepositRequest(
        chat_dir, ref, ANSWER, prompt=chat_turn(QUESTION), verification=verification, engine=BLOCK
    )
    m = deposit(signer, request).result.manifest
    assert m.prompt is not None and m.prompt.chat is not None and m.prompt.chat.generation_prompt

    found = answer(
        signer, AskRequest(chat_dir, chat_turn(QUESTION), mode="knowledge", max_new_tokens=2, engine=BLOCK)
    )
    assert found.result.used_mode == "knowledge"
    assert found.to_dict()["artifact"]["manifest_digest"] == str(m.digest)
    assert found.result.grafted_tokens == m.token_count  # the repeat question is the artifact's prefix

    plain = answer(signer, AskRequest(chat_dir, QUESTION, mode="knowledge", max_new_tokens=2, engine=BLOCK))
    assert plain.result.used_mode == "off"  # the same words without the template are another prompt


def test_a_model_without_a_chat_template_stores_nothing(signer: Home, llama_dir: Path) -> None:
    ref = RefName.parse("tests/no-template")
    with pytest.raises(ModelError, match="no chat template"):
        deposit(signer, DepositRequest(llama_dir, ref, TEXT, prompt=chat_turn(QUESTION), engine=BLOCK))
    with pytest.raises(UsageError, match="nothing to deposit"):
        deposit(signer, DepositRequest(llama_dir, ref, "", prompt=QUESTION, engine=BLOCK))
    assert signer.refs.list() == []


BAD_FILES: list[tuple[str, bytes, str]] = [
    ("not-json", b"[{role: user}]", "is not valid JSON"),
    ("not-utf8", b'[{"role": "user", "content": "\xff"}]', "is not valid UTF-8"),
    ("object", b'{"role": "user", "content": "hi"}', "must be a JSON list of messages"),
    ("empty", b"[]", "holds no messages"),
    ("not-object", b'["hi"]', "message 0 must be an object"),
    ("no-content", b'[{"role": "user"}]', "message 0 has no 'content'"),
    ("role-int", b'[{"role": 1, "content": "hi"}]', "'role' must be a string"),
    ("extra", b'[{"role": "user", "content": "hi", "name": "x"}]', "fields other than role and content"),
    ("duplicate", b'[{"role": "user", "role": "system", "content": "hi"}]', "duplicate key 'role'"),
    ("surrogate", b'[{"role": "user", "content": "\\ud800"}]', "unpaired surrogate"),
]


@pytest.mark.parametrize(
    ("data", "problem"), [(b, p) for _, b, p in BAD_FILES], ids=[i for i, _, _ in BAD_FILES]
)
def test_a_bad_messages_file_is_a_usage_error_naming_it(tmp_path: Path, data: bytes, problem: str) -> None:
    path = tmp_path / "messages.json"
    path.write_bytes(data)
    with pytest.raises(UsageError, match=problem) as info:
        load_messages_file(path)
    assert str(path) in info.value.message


def test_a_messages_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(SHOTS.to_list()), encoding="utf-8")
    assert load_messages_file(path) == SHOTS and len(SHOTS) == 3
    with pytest.raises(UsageError, match="does not exist"):
        load_messages_file(tmp_path / "absent.json")
    assert chat_turn("hi").to_list() == [{"role": "user", "content": "hi"}]
