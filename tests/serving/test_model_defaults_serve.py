"""The model's own stop rules and defaults through ``kvreg engine serve``: every EOS id of its
``generation_config.json`` ends a turn, the sampling defaults it ships apply unless a request sets
them (and ``/v1/models`` shows them), and an unset ``max_tokens`` is the rest of the context (the
server's or the model's default capped there), so a prompt near the limit is answered."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from kvreg.app.engine_options import EngineOptions
from kvreg.app.serving.host import ModelHost
from kvreg.app.serving.server import create_app
from kvreg.engine.router import plain_generate
from kvreg.engine.tiny import CHATML_TEMPLATE, build_model_dir
from kvreg.store.home import Home
from serving.conftest import Served, running

NAME = "tiny-defaults"
DEFAULTS = {"top_k": 1, "repetition_penalty": 1.3}


def _im_end(model: Path) -> int:
    added = json.loads((model / "tokenizer.json").read_text())["added_tokens"]
    return int(next(t["id"] for t in added if t["content"] == "<|im_end|>"))


@pytest.fixture(scope="module")
def served(tiny_models: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The tiny chat model, whose generation config ends a turn at ``</s>`` or ``<|im_end|>`` and
    samples with ``top_k`` 1 and a repetition penalty by default."""
    root = Path(tmp_path_factory.mktemp("defaults"))
    model = Path(shutil.copytree(tiny_models["llama-chat"], root / "model"))
    config = {"bos_token_id": 1, "eos_token_id": [2, _im_end(model)], **DEFAULTS}
    (model / "generation_config.json").write_text(json.dumps(config))
    with running(model, NAME, root) as s:
        yield s


@pytest.fixture
def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=120)


def test_models_show_the_defaults_and_end_ids(client: openai.OpenAI, served: Served) -> None:
    facts = client.models.retrieve(NAME).model_extra["kvreg"]  # type: ignore[index]
    assert facts["sampling_defaults"] == DEFAULTS == served.host.sampling_defaults
    assert facts["end_token_ids"] == sorted({2, _im_end(served.host.lm.path)})


def test_every_end_id_of_the_generation_config_ends_the_turn(client: openai.OpenAI, served: Served) -> None:
    im_end = _im_end(served.host.lm.path)
    messages: Any = [{"role": "user", "content": "End your turn the way the model says."}]
    favour = {"logit_bias": {str(im_end): 100}}
    ended = client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=8, temperature=0, extra_body=favour
    )
    assert ended.choices[0].finish_reason == "stop" and ended.choices[0].message.content == ""
    assert ended.usage is not None and ended.usage.completion_tokens == 1
    later = client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=8, temperature=0, extra_body={**favour, "min_tokens": 2}
    )
    assert later.choices[0].finish_reason == "stop"
    assert later.usage is not None and later.usage.completion_tokens == 3


def test_the_models_sampling_defaults_apply_unless_the_request_sets_them(
    client: openai.OpenAI, served: Served
) -> None:
    from kvreg.engine.sampling import Adjustments, sampler

    prompt = "Defaults from the generation config: top_k 1 and a repetition penalty of 1.3, here."
    lm = served.host.lm
    tokens = served.on_model(served.host.text_tokens, prompt)

    def expected(penalty: float) -> str:
        history: list[int] = []
        choose = sampler(
            0.0, adjust=Adjustments(repetition_penalty=penalty), history=lambda: history, prompt=tokens
        )

        def sink(token: int) -> bool:
            history.append(token)
            return token not in served.host.end_ids

        out = served.on_model(plain_generate, lm, tokens, 10, choose=choose, on_token=sink).tokens
        return str(lm.tokenizer.decode(out, skip_special_tokens=True))

    # No sampling setting: temperature 1, but top_k 1 leaves one token, with the penalty.
    unset = client.completions.create(model=NAME, prompt=prompt, max_tokens=10)
    assert unset.choices[0].text == expected(1.3)
    # What the request sets wins; the rest stays the model's.
    plain = client.completions.create(
        model=NAME, prompt=prompt, max_tokens=10, temperature=0, extra_body={"repetition_penalty": 1.0}
    )
    assert plain.choices[0].text == expected(1.0) != unset.choices[0].text


def _small_app(root: Path, tiny_generation: dict[str, Any] | None, default: int | None) -> TestClient:
    """An in-process server on a tiny chat model with a 48-token context."""
    model = build_model_dir(root / "model", "llama", seed=0, chat_template=CHATML_TEMPLATE, max_positions=48)
    if tiny_generation is not None:
        (model / "generation_config.json").write_text(json.dumps(tiny_generation))
    host = ModelHost(Home(root / "home").ensure(), model, EngineOptions(block_size=8), name="small")
    return TestClient(create_app(host, default_max_tokens=default))  # type: ignore[arg-type]


def _ask(app: TestClient, prompt_tokens: int, **extra: Any) -> Any:
    body = {"model": "small", "prompt": [5] * prompt_tokens, "temperature": 0, **extra}
    body["logit_bias"] = {"2": -100}  # no EOS: the limit ends it
    return app.post("/v1/completions", json=body)


def test_an_unset_max_tokens_is_the_rest_of_the_context(tmp_path: Path) -> None:
    with _small_app(tmp_path, None, None) as app:
        for prompt, room in ((40, 8), (47, 1)):
            answer = _ask(app, prompt)
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] == room
            assert answer.json()["choices"][0]["finish_reason"] == "length"
        full = _ask(app, 48).json()["error"]
        assert (full["param"], full["code"]) == ("prompt", "context_length_exceeded")
        over = _ask(app, 40, max_tokens=9).json()["error"]  # asked for more than fits: refused, as vLLM
        assert (over["param"], over["code"]) == ("max_tokens", "context_length_exceeded")
        assert _ask(app, 40, max_tokens=8).status_code == 200
        chat = app.post(
            "/v1/chat/completions",
            json={"model": "small", "messages": [{"role": "user", "content": "x" * 300}], "max_tokens": 1},
        )
        assert chat.json()["error"]["param"] == "messages"


def test_a_default_limit_is_capped_at_the_rest_of_the_context(tmp_path: Path) -> None:
    with _small_app(tmp_path / "server", None, 4) as app:  # the server's --max-tokens
        assert _ask(app, 40).json()["usage"]["completion_tokens"] == 4
        assert _ask(app, 46).json()["usage"]["completion_tokens"] == 2  # not refused: capped
    generation = {"eos_token_id": 2, "max_new_tokens": 5}  # the model's own default
    with _small_app(tmp_path / "model", generation, None) as app:
        assert _ask(app, 30).json()["usage"]["completion_tokens"] == 5
        assert _ask(app, 45).json()["usage"]["completion_tokens"] == 3
        assert app.get("/v1/models").json()["data"][0]["kvreg"]["sampling_defaults"] == {"max_tokens": 5}
