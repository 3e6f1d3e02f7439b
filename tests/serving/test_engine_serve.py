"""``kvreg engine serve`` with the real ``openai`` client: chat and completion, streamed and not,
answers from the store byte-identical to uncached greedy runs, fallbacks with their reason,
concurrent clients, a dropped stream, and OpenAI's error object for bad requests."""

from __future__ import annotations

import json
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.engine import deposit
from kvreg.engine.chat import chat_prompt
from kvreg.engine.router import plain_generate
from serving.conftest import MODEL, Served

PASS = {"verifier": "test.checker", "verdict": "pass", "evidence": {}}


@pytest.fixture
def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=120)


def _greedy(served: Served, prompt: list[int], steps: int) -> str:
    """The text an uncached greedy run gives (stopping at EOS, special tokens skipped)."""
    lm = served.host.lm
    decoded = served.on_model(plain_generate, lm, prompt, steps, stop_at_eos=True)
    return str(lm.tokenizer.decode(decoded.tokens, skip_special_tokens=True))


def _text_prompt(served: Served, text: str) -> list[int]:
    return served.on_model(served.host.text_tokens, text)


def _chat_tokens(served: Served, messages: list[dict[str, str]]) -> list[int]:
    return served.on_model(served.host.chat_tokens, messages)


def _deposit(served: Served, ref: str, prompt: Any, text: str = "", **kw: Any) -> None:
    key = kw.pop("key", served.key)
    served.on_model(
        deposit.deposit,
        served.host.lm,
        served.home,
        text=text,
        prompt=prompt,
        ref=RefName.parse(ref),
        key=key,
        **kw,
    )


def test_models_lists_the_served_model(client: openai.OpenAI, served: Served) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    facts = models[0].model_extra["kvreg"]  # type: ignore[index]
    assert facts["config_fingerprint"] == str(served.host.lm.config.fingerprint)
    assert client.models.retrieve(MODEL).id == MODEL


def test_a_repeat_prompt_is_grafted_and_byte_identical_to_an_uncached_run(
    client: openai.OpenAI, served: Served
) -> None:
    prompt = "The registry keeps verified states of long prompts; a repeat question reads them back."
    tokens = _text_prompt(served, prompt)
    expected = _greedy(served, tokens, 12)
    first = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    facts = first.model_extra["kvreg"]  # type: ignore[index]
    assert first.choices[0].text == expected
    assert facts["fallback"] and facts["reason"] and facts["artifact"] is None
    assert first.usage is not None and first.usage.prompt_tokens == len(tokens)
    assert first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0

    _deposit(served, "serve/repeat", prompt)  # the prompt alone, unverified: a prefix graft
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0
    )
    again = raw.parse()
    facts = again.model_extra["kvreg"]  # type: ignore[index]
    assert again.choices[0].text == expected  # byte-identical to the uncached greedy run
    assert facts["mode"] == "prefix" and not facts["fallback"]
    assert facts["artifact"]["ref"] == "serve/repeat" and facts["artifact"]["signers"]
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == len(tokens) == facts["grafted_tokens"]
    assert raw.headers["x-kvreg-mode"] == "prefix"
    assert raw.headers["x-kvreg-cached-tokens"] == str(len(tokens))
    assert raw.headers["x-kvreg-artifact"] == facts["artifact"]["digest"]
    # The knowledge try was refused first (the artifact is not verified), and said why.
    assert [r["mode"] for r in facts["refused_modes"]] == ["knowledge"]


def test_a_shared_prefix_is_grafted_and_the_rest_prefilled(client: openai.OpenAI, served: Served) -> None:
    shared = "A long shared instruction that many requests begin with, the same words every time. "
    _deposit(served, "serve/shared", shared)
    prompt = shared + "Then a question of its own."
    tokens = _text_prompt(served, prompt)
    expected = _greedy(served, tokens, 10)
    answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0)
    facts = answer.model_extra["kvreg"]  # type: ignore[index]
    assert answer.choices[0].text == expected
    assert facts["mode"] == "prefix" and 0 < facts["grafted_tokens"] < len(tokens)
    assert facts["prefilled_tokens"] == len(tokens) - facts["grafted_tokens"]
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == facts["grafted_tokens"]


def test_a_verified_chat_answer_comes_from_the_registry_streamed_and_not(
    client: openai.OpenAI, served: Served
) -> None:
    messages = [{"role": "user", "content": "What is kvreg for?"}]
    rendered = served.on_model(chat_prompt, served.host.lm, messages)
    _deposit(served, "serve/answer", rendered, text=" Grafting verified states.", verification=PASS)
    tokens = _chat_tokens(served, messages)
    answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=40, temperature=0)  # type: ignore[arg-type]
    facts = answer.model_extra["kvreg"]  # type: ignore[index]
    assert facts["mode"] == "knowledge" and facts["artifact"]["verdict"] == "pass"
    assert facts["artifact"]["verifier"] == "test.checker" and facts["probe"] is not None
    assert facts["prefilled_tokens"] == 0
    content = answer.choices[0].message.content
    assert content is not None and content.startswith(" Grafting verified states.")
    assert answer.usage is not None and answer.usage.prompt_tokens == len(tokens)
    assert answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == len(tokens)

    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=40,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [answer.choices[0].finish_reason]
    last = [c for c in chunks if c.choices][-1]
    assert last.model_extra["kvreg"]["mode"] == "knowledge"  # type: ignore[index]
    assert (
        chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == answer.usage.completion_tokens
    )


def test_an_untrusted_artifact_falls_back_with_the_reason(client: openai.OpenAI, served: Served) -> None:
    prompt = "Signed by a key this host does not trust, so it must not be grafted here."
    _deposit(served, "serve/untrusted", prompt, key=SigningKey.generate())
    tokens = _text_prompt(served, prompt)
    expected = _greedy(served, tokens, 8)
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    answer = raw.parse()
    facts = answer.model_extra["kvreg"]  # type: ignore[index]
    assert answer.choices[0].text == expected
    assert facts["fallback"] and facts["mode"] == "off" and facts["artifact"] is None
    said = json.dumps(facts["reason"]) + json.dumps(facts["refused_modes"]) + json.dumps(facts["error"])
    assert "trust" in said.lower()
    assert raw.headers["x-kvreg-fallback-reason"]
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == 0


def test_streamed_completion_is_the_same_text_in_pieces(client: openai.OpenAI, served: Served) -> None:
    prompt = "Streaming sends the completion as it is decoded."
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    chunks = list(
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "length"


def test_raw_stream_ends_with_done(served: Served) -> None:
    body = {
        "model": MODEL,
        "prompt": "Server-sent events.",
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", served.url + "/completions", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_stop_strings_cut_the_text(client: openai.OpenAI, served: Served) -> None:
    prompt = "Stop strings end a completion early."
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0).choices[0].text
    assert len(full) > 6
    stop = full[4:6]
    cut = full[: full.find(stop)]
    answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0, stop=[stop])
    assert answer.choices[0].text == cut and answer.choices[0].finish_reason == "stop"
    chunks = list(
        client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=16, temperature=0, stop=stop, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == cut


def test_sampling_with_a_seed_repeats(client: openai.OpenAI, served: Served) -> None:
    def sample(seed: int) -> str:
        r = client.completions.create(
            model=MODEL, prompt="Sampling with a seed.", max_tokens=12, temperature=1.0, seed=seed
        )
        return r.choices[0].text

    assert sample(7) == sample(7)
    assert len({sample(s) for s in (1, 2, 3, 4)}) > 1


def test_concurrent_clients_all_get_their_answer(client: openai.OpenAI, served: Served) -> None:
    prompt = "Four clients at once, one model."
    expected = _greedy(served, _text_prompt(served, prompt), 10)

    def one(i: int) -> str:
        c = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=120)
        if i % 2:
            stream = c.completions.create(
                model=MODEL, prompt=prompt, max_tokens=10, temperature=0, stream=True
            )
            return "".join(ch.choices[0].text for ch in stream if ch.choices)
        return c.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0).choices[0].text

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(4))) == [expected] * 4


def test_a_dropped_stream_frees_the_model(client: openai.OpenAI, served: Served) -> None:
    stopped_before = served.host.counters.stopped
    body = {"model": MODEL, "prompt": "A long answer nobody waits for.", "max_tokens": 3000, "temperature": 0}
    with httpx.stream("POST", served.url + "/completions", json={**body, "stream": True}, timeout=120) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
    # The next request is answered: the dropped one stopped instead of decoding 3000 tokens.
    answer = client.completions.create(model=MODEL, prompt="Next.", max_tokens=4, temperature=0)
    assert answer.choices[0].finish_reason == "length"
    deadline = time.monotonic() + 60
    while served.host.counters.stopped == stopped_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.host.counters.stopped == stopped_before + 1
    assert served.host.stopped[-1] < 3000


def _error(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_bad_requests_get_openai_error_objects(client: openai.OpenAI, served: Served) -> None:
    with pytest.raises(openai.BadRequestError) as n:
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, n=2)
    assert _error(n.value)["param"] == "n"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    assert _error(unknown.value)["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as long:
        client.completions.create(model=MODEL, prompt="x", max_tokens=served.host.context_length)
    assert _error(long.value)["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as missing:
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=2)
    assert _error(missing.value)["type"] == "invalid_request_error"
    r = httpx.post(
        served.url + "/chat/completions",
        content=b'{"model": "tiny-chat", "messages": [',
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(served.url + "/completions", json={"prompt": "no model"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = httpx.get(served.url + "/nothing-here", timeout=60)
    assert r.status_code == 404 and "error" in r.json()
    # The server still answers after all that.
    assert client.completions.create(model=MODEL, prompt="x", max_tokens=2, temperature=0).choices


def test_seeded_sampling_gives_the_same_text_with_a_graft_as_without(
    client: openai.OpenAI, served: Served
) -> None:
    from kvreg.engine.sampling import sampler

    prompt = "Sampling over a grafted prefix draws from the same logits as a run with no cache."
    _deposit(served, "serve/sampled", prompt)
    tokens = _text_prompt(served, prompt)
    lm = served.host.lm
    plain = served.on_model(plain_generate, lm, tokens, 12, stop_at_eos=True, choose=sampler(0.9, seed=11))
    expected = lm.tokenizer.decode(plain.tokens, skip_special_tokens=True)
    answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0.9, seed=11)
    assert answer.model_extra["kvreg"]["mode"] == "prefix"  # type: ignore[index]
    assert answer.choices[0].text == expected


def test_a_passed_probe_is_remembered_and_a_repeat_graft_skips_it(
    client: openai.OpenAI, served: Served
) -> None:
    prompt = "Probe once per artifact and config, then trust the record in the store."
    _deposit(served, "serve/probed", prompt)
    tokens = _text_prompt(served, prompt)
    expected = _greedy(served, tokens, 8)
    facts = []
    for _ in range(2):
        answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
        assert answer.choices[0].text == expected
        facts.append(answer.model_extra["kvreg"])  # type: ignore[index]
    assert [f["mode"] for f in facts] == ["prefix", "prefix"]
    first, second = facts[0]["probe"], facts[1]["probe"]
    assert first["kv_equal"] is True and "skipped" not in first
    assert second["skipped"] is True and second["remembered"] == first


def test_an_engine_failure_is_an_error_object_streamed_or_not(
    client: openai.OpenAI, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvreg.core.errors import IntegrityError

    def broken(job: Any) -> Any:
        raise IntegrityError("a chunk failed its digest")

    monkeypatch.setattr(served.host, "run", broken)
    with pytest.raises(openai.InternalServerError) as failed:
        client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    assert _error(failed.value)["type"] == "server_error"
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2, "stream": True}
    with httpx.stream("POST", served.url + "/completions", json=body, timeout=120) as r:
        lines = [line for line in r.iter_lines() if line]
    assert json.loads(lines[-2][6:])["error"]["message"] == "a chunk failed its digest"
    assert lines[-1] == "data: [DONE]"
    monkeypatch.undo()
    assert client.completions.create(model=MODEL, prompt="x", max_tokens=2, temperature=0).choices


def test_a_non_streamed_request_whose_client_leaves_stops_and_frees_the_model(
    client: openai.OpenAI, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    stopped_before = served.host.counters.stopped
    body = json.dumps({"model": MODEL, "prompt": "Nobody reads this.", "max_tokens": 3000, "temperature": 0})
    port = int(served.url.split(":")[-1].split("/")[0])
    caplog.set_level(logging.INFO, logger="kvreg.app.serving")
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(
            f"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n{body}".encode()
        )
        deadline = time.monotonic() + 60  # a guard against a hang, not a figure
        while not (served.host.running is not None and served.host.running.stream.tokens):
            assert time.monotonic() < deadline, "the request never reached the model"
            time.sleep(0.01)
    # The client is gone: the next request is answered, the dropped one stopped short of 3000 tokens.
    answer = client.completions.create(model=MODEL, prompt="Next.", max_tokens=4, temperature=0)
    assert answer.choices[0].finish_reason == "length"
    assert served.host.counters.stopped == stopped_before + 1
    assert served.host.stopped[-1] < 3000
    assert served.host.running is None
    assert any("went away" in r.getMessage() for r in caplog.records)


def test_a_request_may_ask_for_a_plain_run_but_no_other_mode(client: openai.OpenAI, served: Served) -> None:
    prompt = "A plain run on request, though the store holds this prompt."
    _deposit(served, "serve/plain-on-request", prompt)
    plain = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=6, temperature=0, extra_body={"kvreg": {"mode": "off"}}
    )
    facts = plain.model_extra["kvreg"]  # type: ignore[index]
    assert facts["mode"] == "off" and facts["requested_mode"] == "off" and facts["cpu_seconds"] > 0
    assert plain.choices[0].text == _greedy(served, _text_prompt(served, prompt), 6)
    cached = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
    assert cached.model_extra["kvreg"]["mode"] == "prefix"  # type: ignore[index]
    assert cached.choices[0].text == plain.choices[0].text
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=2, extra_body={"kvreg": {"mode": "knowledge"}}
        )
    assert _error(refused.value)["code"] == "unsupported_value"


def test_concurrent_mixed_requests_leave_the_store_intact_and_answer_as_alone(
    client: openai.OpenAI, served: Served
) -> None:
    from kvreg.app.maintenance import check_store

    repeat = ["A question asked before, held in the store: what is kept?", "Another stored prompt, twice."]
    unseen = ["A question nobody asked before.", "Nor this one, at the same time."]
    for i, prompt in enumerate(repeat):
        _deposit(served, f"serve/concurrent-{i}", prompt)
    asks = [{"prompt": p, "stream": s} for p in [*repeat, *unseen, *repeat, *unseen] for s in (False,)] + [
        {"messages": [{"role": "user", "content": p}], "stream": True} for p in (repeat[0], unseen[0])
    ]

    def one(req: dict[str, Any]) -> tuple[str, str]:
        c = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=120)
        settings: dict[str, Any] = {"model": MODEL, "max_tokens": 10, "temperature": 0}
        if "messages" in req:
            stream = c.chat.completions.create(messages=req["messages"], stream=True, **settings)
            return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices), "chat"
        answer = c.completions.create(prompt=req["prompt"], **settings)
        return answer.choices[0].text, answer.model_extra["kvreg"]["mode"]  # type: ignore[index]

    alone = [one(req) for req in asks]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(one, asks))
    assert [text for text, _ in together] == [text for text, _ in alone]
    assert {mode for _, mode in alone} >= {"prefix", "off"}  # both classes were in the mix
    report = served.on_model(check_store, served.home, quarantine=False)
    assert report.fsck.ok, report.to_dict()


def _adjusted_greedy(served: Served, prompt: list[int], steps: int, adjust: Any) -> str:
    """An uncached run with ``adjust`` (logit bias, penalties) applied greedily, counting its own tokens."""
    from kvreg.engine.sampling import sampler

    lm = served.host.lm
    history: list[int] = []
    choose = sampler(0.0, adjust=adjust, history=lambda: history)

    def seen(token: int) -> bool:  # the sink decides where the completion ends: at EOS, as the server
        history.append(token)
        return token != lm.tokenizer.eos_token_id

    decoded = served.on_model(
        plain_generate, lm, prompt, steps, stop_at_eos=True, choose=choose, on_token=seen
    )
    return str(lm.tokenizer.decode(decoded.tokens, skip_special_tokens=True))


def test_logit_bias_and_penalties_steer_greedy_answers_and_a_graft_keeps_them(
    client: openai.OpenAI, served: Served
) -> None:
    from kvreg.engine.sampling import Adjustments

    prompt = "Logit bias and repetition penalties reach the model through the OpenAI API."
    tokens = _text_prompt(served, prompt)
    lm = served.host.lm
    plain = served.on_model(plain_generate, lm, tokens, 10, stop_at_eos=True).tokens
    favoured = next(t for t in tokens if t not in lm.tokenizer.all_special_ids)
    settings: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": 10, "temperature": 0}

    every = client.completions.create(**settings, logit_bias={str(favoured): 100})
    assert every.choices[0].text == lm.tokenizer.decode([favoured] * 10, skip_special_tokens=True)
    assert every.usage is not None and every.usage.completion_tokens == 10

    banned = client.completions.create(**settings, logit_bias={str(plain[0]): -100})
    expected = _adjusted_greedy(served, tokens, 10, Adjustments({plain[0]: -100.0}))
    assert banned.choices[0].text == expected
    assert expected != lm.tokenizer.decode(plain, skip_special_tokens=True)

    steer = {"logit_bias": {str(plain[1]): 5}, "frequency_penalty": 1.5, "presence_penalty": 0.5}
    adjusted = Adjustments({plain[1]: 5.0}, presence_penalty=0.5, frequency_penalty=1.5)
    before = client.completions.create(**settings, **steer)
    assert before.model_extra["kvreg"]["fallback"]  # type: ignore[index]
    assert before.choices[0].text == _adjusted_greedy(served, tokens, 10, adjusted)
    _deposit(served, "serve/steered", prompt)
    after = client.completions.create(**settings, **steer)
    assert after.model_extra["kvreg"]["mode"] == "prefix"  # type: ignore[index]
    assert after.choices[0].text == before.choices[0].text


def test_a_conversation_ending_with_the_assistant_gets_a_new_turn_or_is_continued(
    client: openai.OpenAI, served: Served
) -> None:
    messages = [
        {"role": "user", "content": "Name a verified state."},
        {"role": "assistant", "content": "One that was"},
    ]
    lm = served.host.lm
    for extra, ending in (
        ({}, "generation"),  # OpenAI's behaviour: the assistant answers in a new turn
        ({"continue_final_message": True}, "continue"),
        ({"continue_final_message": True, "add_generation_prompt": False}, "continue"),
        ({"add_generation_prompt": False}, "closed"),
    ):
        tokens = served.on_model(served.host.chat_tokens, messages, ending)
        answer = client.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
            extra_body=extra,
        )
        assert answer.usage is not None and answer.usage.prompt_tokens == len(tokens), extra
        assert answer.choices[0].message.content == _greedy(served, tokens, 8), extra
    rendered = {
        ending: lm.tokenizer.decode(served.on_model(served.host.chat_tokens, messages, ending))
        for ending in ("generation", "continue", "closed")
    }
    assert rendered["continue"].endswith("One that was")
    assert rendered["generation"].startswith(rendered["closed"])
    assert len(rendered["generation"]) > len(rendered["closed"]) > len(rendered["continue"])


def test_what_the_server_cannot_honour_is_refused_not_ignored(client: openai.OpenAI, served: Served) -> None:
    messages: Any = [{"role": "user", "content": "Refusals name their parameter."}]
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    refused: list[tuple[dict[str, Any], str]] = [
        ({"tools": [tool]}, "tools"),
        ({"tools": [tool], "tool_choice": "auto"}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logit_bias": {"not-a-token": 1}}, "logit_bias"),
        ({"logit_bias": {"99999999": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 101}}, "logit_bias"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"extra_body": {"continue_final_message": True}}, "messages"),
    ]
    for extra, param in refused:
        with pytest.raises(openai.BadRequestError) as refusal:
            client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, **extra)
        assert _error(refusal.value)["param"] == param, extra
    with pytest.raises(openai.BadRequestError) as best_of:
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, best_of=2)
    assert _error(best_of.value)["code"] == "unsupported_value"
    r = httpx.post(served.url + "/chat/completions", timeout=60)
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    # Tools the model may not call, and a plain-text format, change nothing.
    plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    for extra in ({"tools": [tool], "tool_choice": "none"}, {"response_format": {"type": "text"}}):
        same = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=4, temperature=0, **extra
        )
        assert same.choices[0].message.content == plain.choices[0].message.content


def test_a_request_body_over_the_limit_is_refused_413_declared_or_streamed(served: Served) -> None:
    from kvreg.app.serving.server import MAX_REQUEST_BYTES

    body = json.dumps({"model": MODEL, "prompt": "x" * (MAX_REQUEST_BYTES + 1), "max_tokens": 1}).encode()
    url = served.url + "/completions"
    declared = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=120)
    assert declared.status_code == 413

    def pieces() -> Any:
        for at in range(0, len(body), 1 << 20):
            yield body[at : at + (1 << 20)]

    streamed = httpx.post(url, content=pieces(), headers={"content-type": "application/json"}, timeout=120)
    assert streamed.status_code == 413 and streamed.json()["error"]["type"] == "invalid_request_error"
    ok = httpx.post(url, json={"model": MODEL, "prompt": "x", "max_tokens": 1, "temperature": 0}, timeout=120)
    assert ok.status_code == 200  # the server goes on


def test_with_an_api_key_every_route_wants_it_as_a_bearer_token(served: Served) -> None:
    from fastapi.testclient import TestClient

    from kvreg.app.serving.server import create_app

    with TestClient(create_app(served.host, api_key="s3cret-key")) as app:
        ask = {"model": MODEL, "prompt": "x", "max_tokens": 1, "temperature": 0}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-key"}):
            for answer in (
                app.get("/v1/models", headers=headers),
                app.post("/v1/completions", json=ask, headers=headers),
            ):
                assert answer.status_code == 401, headers
                assert answer.json()["error"]["code"] == "invalid_api_key"
        good = {"Authorization": "Bearer s3cret-key"}
        assert app.get("/v1/models", headers=good).json()["data"][0]["id"] == MODEL
        assert app.post("/v1/completions", json=ask, headers=good).status_code == 200
    # The shared server has no key: nothing is asked of its clients.
    assert httpx.get(served.url + "/models", timeout=60).status_code == 200
