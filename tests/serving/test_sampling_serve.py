"""vLLM's sampling parameters through ``kvreg engine serve`` with the ``openai`` client: each gives
the same text over a graft as on a plain run, and does what vLLM's does (``top_k``, ``min_p``,
``repetition_penalty``, ``stop_token_ids``, ``ignore_eos``, ``min_tokens``,
``include_stop_str_in_output``, ``skip_special_tokens``, ``allowed_token_ids``); the knowledge
mode with them; and the requests that were 500s."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from kvreg.core.names import RefName
from kvreg.engine import deposit
from kvreg.engine.chat import chat_prompt
from kvreg.engine.router import plain_generate
from serving.conftest import MODEL, Served

PASS = {"verifier": "test.checker", "verdict": "pass", "evidence": {}}


@pytest.fixture
def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=120)


def _deposit(served: Served, ref: str, prompt: Any, text: str = "", **kw: Any) -> None:
    served.on_model(
        deposit.deposit,
        served.host.lm,
        served.home,
        text=text,
        prompt=prompt,
        ref=RefName.parse(ref),
        key=served.key,
        **kw,
    )


def _greedy_tokens(served: Served, text: str, steps: int) -> list[int]:
    prompt = served.on_model(served.host.text_tokens, text)
    return list(served.on_model(plain_generate, served.host.lm, prompt, steps, stop_at_eos=True).tokens)


def _with_and_without_graft(
    client: openai.OpenAI, served: Served, prompt: str, ref: str, **settings: Any
) -> tuple[Any, Any]:
    """The same request on a plain run and over a graft of its deposited prompt."""
    extra = settings.pop("extra_body", {})
    plain = client.completions.create(
        model=MODEL, prompt=prompt, extra_body={**extra, "kvreg": {"mode": "off"}}, **settings
    )
    _deposit(served, ref, prompt)
    cached = client.completions.create(model=MODEL, prompt=prompt, extra_body=extra, **settings)
    assert plain.model_extra["kvreg"]["mode"] == "off"  # type: ignore[index]
    facts = cached.model_extra["kvreg"]  # type: ignore[index]
    assert facts["mode"] == "prefix" and facts["grafted_tokens"] > 0  # a graft happened
    assert cached.choices[0].text == plain.choices[0].text
    assert cached.choices[0].finish_reason == plain.choices[0].finish_reason
    assert cached.usage is not None and plain.usage is not None
    assert cached.usage.completion_tokens == plain.usage.completion_tokens
    return plain, cached


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("top-k", {"temperature": 0.9, "seed": 5, "extra_body": {"top_k": 4}}),
        ("min-p", {"temperature": 1.2, "seed": 6, "extra_body": {"min_p": 0.1}}),
        ("repetition", {"temperature": 0, "extra_body": {"repetition_penalty": 1.8}}),
        (
            "all",
            {
                "temperature": 0.8,
                "seed": 7,
                "top_p": 0.9,
                "extra_body": {"top_k": 8, "min_p": 0.02, "repetition_penalty": 1.2},
            },
        ),
    ],
)
def test_vllms_sampling_settings_give_the_same_text_over_a_graft(
    client: openai.OpenAI, served: Served, name: str, settings: dict[str, Any]
) -> None:
    prompt = f"Sampling settings ({name}) give the same draws over a grafted prefix as with no cache at all."
    extra = settings["extra_body"]
    expected = _engine_text(
        served,
        prompt,
        12,
        temperature=settings["temperature"],
        seed=settings.get("seed"),
        top_p=settings.get("top_p", 1.0),
        top_k=extra.get("top_k", 0),
        min_p=extra.get("min_p", 0.0),
        repetition_penalty=extra.get("repetition_penalty", 1.0),
    )
    plain, _ = _with_and_without_graft(client, served, prompt, f"sampling/{name}", max_tokens=12, **settings)
    assert plain.choices[0].text == expected  # applied as kvreg.engine.sampling does, seed for seed
    greedy = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    assert plain.choices[0].text != greedy.choices[0].text  # not the plain greedy answer


def _engine_text(served: Served, prompt: str, steps: int, *, repetition_penalty: float, **kw: Any) -> str:
    """The text the engine's sampler gives on a run with no cache, stopping where the server does."""
    from kvreg.engine.sampling import Adjustments, sampler

    tokens = served.on_model(served.host.text_tokens, prompt)
    lm = served.host.lm
    history: list[int] = []
    adjust = Adjustments(repetition_penalty=repetition_penalty)
    choose = sampler(kw.pop("temperature"), adjust=adjust, history=lambda: history, prompt=tokens, **kw)

    def sink(token: int) -> bool:
        history.append(token)
        return token not in served.host.end_ids

    out = served.on_model(plain_generate, lm, tokens, steps, choose=choose, on_token=sink).tokens
    return str(lm.tokenizer.decode(out, skip_special_tokens=True))


def test_repetition_penalty_is_hugging_faces_over_the_prompt_too(
    client: openai.OpenAI, served: Served
) -> None:
    prompt = "A repetition penalty counts the prompt's tokens as well as the completion's tokens."
    expected = _engine_text(served, prompt, 10, temperature=0.0, repetition_penalty=1.8)
    answer = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=10, temperature=0, extra_body={"repetition_penalty": 1.8}
    )
    assert answer.choices[0].text == expected


def test_stop_token_ids_end_the_completion_with_and_without_their_text(
    client: openai.OpenAI, served: Served
) -> None:
    prompt = "Stop token ids end a completion at the token, the same over a graft as without one."
    greedy = _greedy_tokens(served, prompt, 12)
    lm = served.host.lm
    stop_at = next(i for i, t in enumerate(greedy) if i >= 2 and t not in greedy[:i])
    stop = greedy[stop_at]
    plain, _ = _with_and_without_graft(
        client,
        served,
        prompt,
        "sampling/stop-ids",
        max_tokens=12,
        temperature=0,
        extra_body={"stop_token_ids": [stop]},
    )
    assert plain.choices[0].text == lm.tokenizer.decode(greedy[:stop_at], skip_special_tokens=True)
    assert plain.choices[0].finish_reason == "stop"
    assert plain.usage is not None and plain.usage.completion_tokens == stop_at + 1  # the stop id counts
    kept = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=12,
        temperature=0,
        extra_body={"stop_token_ids": [stop], "include_stop_str_in_output": True},
    )
    assert kept.choices[0].text == lm.tokenizer.decode(greedy[: stop_at + 1], skip_special_tokens=True)


def test_min_tokens_keeps_eos_out_and_ignore_eos_decodes_past_it(
    client: openai.OpenAI, served: Served
) -> None:
    eos = served.host.lm.tokenizer.eos_token_id
    prompt = "EOS is favoured here, but min_tokens keeps it out of the first tokens, over a graft too."
    favour = {"logit_bias": {str(eos): 100}}
    early = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0, extra_body=favour
    )
    assert early.usage is not None and early.usage.completion_tokens == 1  # EOS at once
    plain, _ = _with_and_without_graft(
        client,
        served,
        prompt,
        "sampling/min-tokens",
        max_tokens=12,
        temperature=0,
        extra_body={**favour, "min_tokens": 5},
    )
    assert plain.usage is not None and plain.usage.completion_tokens == 6  # 5 tokens, then EOS
    assert plain.choices[0].finish_reason == "stop" and plain.choices[0].text
    past = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=5, temperature=0, extra_body={**favour, "ignore_eos": True}
    )
    assert past.usage is not None and past.usage.completion_tokens == 5
    assert past.choices[0].finish_reason == "length" and past.choices[0].text == ""  # EOS is special
    shown = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=3,
        temperature=0,
        extra_body={**favour, "ignore_eos": True, "skip_special_tokens": False},
    )
    assert shown.choices[0].text == served.host.lm.tokenizer.eos_token * 3


def test_allowed_token_ids_limit_the_choice_over_a_graft(client: openai.OpenAI, served: Served) -> None:
    prompt = "Only a few token ids may be chosen, the same ones with a graft as without."
    lm = served.host.lm
    allowed = [
        t for t in served.on_model(served.host.text_tokens, "only these") if t != lm.tokenizer.bos_token_id
    ]
    plain, _ = _with_and_without_graft(
        client,
        served,
        prompt,
        "sampling/allowed",
        max_tokens=8,
        temperature=0.7,
        seed=3,
        extra_body={"allowed_token_ids": allowed},
    )
    assert plain.usage is not None and plain.usage.completion_tokens == 8
    assert set(lm.tokenizer.encode(plain.choices[0].text, add_special_tokens=False)) <= set(allowed)


def test_stop_strings_and_options_keep_the_knowledge_mode(client: openai.OpenAI, served: Served) -> None:
    messages = [{"role": "user", "content": "What does the knowledge mode answer with options?"}]
    answer = " The verified answer, then what the model decodes."
    rendered = served.on_model(chat_prompt, served.host.lm, messages)
    _deposit(served, "sampling/knowledge", rendered, text=answer, verification=PASS)
    lm = served.host.lm
    after = lm.tokenizer.encode(" then", add_special_tokens=False)[0]
    for extra in (
        {"stop_token_ids": [after]},  # a stop id inside the verified answer: cut there
        {"min_tokens": 30, "repetition_penalty": 1.3, "top_k": 3},
        {"stop": ["decodes."], "include_stop_str_in_output": True},
        {"skip_special_tokens": False, "ignore_eos": True},
    ):
        got = client.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=40,
            temperature=0,
            extra_body=extra,
        )
        facts = got.model_extra["kvreg"]  # type: ignore[index]
        text = got.choices[0].message.content or ""
        assert facts["mode"] == "knowledge", extra
        known = facts["knowledge_text"]
        assert text.startswith(known) and answer.startswith(known) and known, (extra, text, known)
        if "stop_token_ids" in extra:
            assert text == " The verified answer," and got.choices[0].finish_reason == "stop"
        elif "stop" in extra:
            assert text == answer and got.choices[0].finish_reason == "stop"
        else:
            assert text.startswith(answer)
            if "min_tokens" in extra:
                assert got.usage is not None and got.usage.completion_tokens >= 30


def test_the_requests_that_were_server_errors_are_answered(served: Served) -> None:
    url = served.url + "/completions"
    base = {"model": MODEL, "prompt": "Odd values get a 400 or an answer.", "max_tokens": 4}
    unicode_digit = httpx.post(url, json={**base, "logit_bias": {"²": 1}}, timeout=60)
    assert unicode_digit.status_code == 400 and unicode_digit.json()["error"]["param"] == "logit_bias"
    greedy = httpx.post(url, json={**base, "temperature": 0}, timeout=60).json()["choices"][0]["text"]
    tiny = httpx.post(url, json={**base, "temperature": 1e-300}, timeout=60)
    assert tiny.status_code == 200 and tiny.json()["choices"][0]["text"] == greedy  # below 1e-5: greedy
    for body, param in (
        ('{"model": "tiny-chat", "prompt": "x", "temperature": NaN}', "temperature"),
        ('{"model": "tiny-chat", "prompt": "x", "top_p": Infinity}', "top_p"),
        ('{"model": "tiny-chat", "prompt": "x", "max_tokens": 100000000000000000000}', "max_tokens"),
        ('{"model": "tiny-chat", "prompt": "x", "seed": 100000000000000000000}', "seed"),
        ('{"model": "tiny-chat", "prompt": "x", "repetition_penalty": 1e-400}', "repetition_penalty"),
        ('{"model": "tiny-chat", "prompt": "x", "min_tokens": 99, "max_tokens": 4}', "min_tokens"),
        ('{"model": "tiny-chat", "prompt": "x", "stop_token_ids": [99999]}', "stop_token_ids"),
        ('{"model": "tiny-chat", "prompt": "x", "guided_json": {}}', "guided_json"),
        ('{"model": "tiny-chat", "prompt": "x", "frobnicate": 1}', "frobnicate"),
    ):
        r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.text)


def test_a_stop_id_after_the_verified_answer_leaves_the_knowledge_text_whole(
    client: openai.OpenAI, served: Served
) -> None:
    messages = [{"role": "user", "content": "Where does the verified part of an answer end?"}]
    answer = " Where the artifact ends."
    lm = served.host.lm
    rendered = served.on_model(chat_prompt, lm, messages)
    _deposit(served, "sampling/knowledge-end", rendered, text=answer, verification=PASS)
    read = served.on_model(served.host.chat_tokens, messages) + lm.tokenizer.encode(
        answer, add_special_tokens=False
    )
    decoded = served.on_model(plain_generate, lm, read, 8).tokens  # what the model decodes after it
    at = next(i for i, t in enumerate(decoded) if i >= 1 and t not in decoded[:i] and t not in read)
    got = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=20,
        temperature=0,
        extra_body={"stop_token_ids": [decoded[at]]},
    )
    facts = got.model_extra["kvreg"]  # type: ignore[index]
    assert facts["mode"] == "knowledge" and got.choices[0].finish_reason == "stop"
    assert got.choices[0].message.content == answer + lm.tokenizer.decode(
        decoded[:at], skip_special_tokens=True
    )
    assert facts["knowledge_text"] == answer
