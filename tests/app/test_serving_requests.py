"""``kvreg.app.serving.protocol`` and ``.fields``: every declared field is applied, accepted as
changing nothing, or refused unless neutral; an undeclared field is refused by name; odd values
(NaN, unicode digits, strings for numbers, out of range) are 400s naming the field; the sampling
settings come from the request, then the model's defaults."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from kvreg.app.serving import fields
from kvreg.app.serving.protocol import ApiError, ChatRequest, CompletionRequest

MESSAGES = [{"role": "user", "content": "hi"}]


def _chat(**kw: Any) -> ChatRequest:
    return ChatRequest.model_validate({"model": "m", "messages": MESSAGES, **kw})


def _completion(**kw: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "x", **kw})


def _refusal(build: Any, **kw: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        build(**kw).check()
    return refused.value


def _invalid(build: Any, **kw: Any) -> str:
    """The field a validation error names (what the server answers as ``param``)."""
    with pytest.raises(ValidationError) as invalid:
        build(**kw)
    return str(invalid.value.errors()[0]["loc"][0])


def test_every_declared_field_has_one_policy_and_every_listed_field_is_declared() -> None:
    declared = set(ChatRequest.model_fields) | set(CompletionRequest.model_fields)
    listed = fields.APPLIED | set(fields.IGNORED) | set(fields.REFUSED)
    assert declared == listed
    assert not fields.APPLIED & set(fields.IGNORED) and not fields.APPLIED & set(fields.REFUSED)
    assert not set(fields.IGNORED) & set(fields.REFUSED)


@pytest.mark.parametrize("name", ["frobnicate", "guided_json", "guided_choice", "logits_processors", "Model"])
def test_an_undeclared_field_is_refused_by_name(name: str) -> None:
    for build in (_chat, _completion):
        refusal = _refusal(build, **{name: 1})
        assert refusal.param == name and refusal.status == 400
        assert refusal.code in ("unknown_parameter", "unsupported_value")
    assert "guided decoding" in _refusal(_chat, guided_regex="a+").message


def test_fields_that_change_nothing_are_accepted() -> None:
    changes_nothing = {
        "user": "u1",
        "metadata": {"k": "v"},
        "store": False,
        "service_tier": "auto",
        "parallel_tool_calls": True,
        "session_id": "s",
        "stream_interval": 4,
        "length_penalty": 0.5,
        "prediction": {"type": "content", "content": "x"},
        "return_token_offsets": True,
    }
    _chat(**changes_nothing).check()
    _completion(**{k: v for k, v in changes_nothing.items() if k != "parallel_tool_calls"}).check()
    # and nothing else is: a field of the chat API is unknown to the completion API
    assert _refusal(_completion, parallel_tool_calls=True).param == "parallel_tool_calls"


REFUSED_CASES: list[tuple[str, Any]] = [
    ("structured_outputs", {"json": {"type": "object"}}),
    ("use_beam_search", True),
    ("bad_words", ["no"]),
    ("cache_salt", "salt"),
    ("priority", 3),
    ("chat_template", "{{ messages }}"),
    ("add_special_tokens", True),
    ("reasoning_effort", "low"),
    ("include_reasoning", False),
    ("spaces_between_special_tokens", False),
    ("thinking_token_budget", 10),
    ("tool_choice", "required"),
    ("tool_choice", {"type": "function", "function": {"name": "f"}}),
    ("top_logprobs", 2),
    ("logprobs", True),
    ("echo", True),
    ("modalities", ["text", "audio"]),
    ("stream_options", {"continuous_usage_stats": True}),
    ("response_format", {"type": "json_schema", "json_schema": {}}),
]


def test_a_refused_field_is_refused_unless_neutral() -> None:
    for field, value in REFUSED_CASES:
        refusal = _refusal(_chat, **{field: value})
        assert refusal.param == field and refusal.code == "unsupported_value", (field, refusal.message)


def test_neutral_values_of_refused_fields_pass() -> None:
    _chat(
        use_beam_search=False,
        bad_words=[],
        priority=0,
        add_special_tokens=False,
        include_reasoning=True,
        thinking_token_budget=-1,
        tool_choice="auto",
        modalities=["text"],
        structured_outputs=None,
        logprobs=False,
        top_logprobs=0,
    ).check()
    _completion(add_special_tokens=True, prompt_embeds=None).check()
    assert _refusal(_completion, add_special_tokens=False).param == "add_special_tokens"
    assert _refusal(_completion, logprobs=0).param == "logprobs"  # 0 still asks for the chosen token's


ODD_VALUES: list[tuple[str, Any]] = [
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", "0.5"),
    ("temperature", 2.5),
    ("top_p", 0),
    ("max_tokens", 0),
    ("max_tokens", -5),
    ("max_tokens", "16"),
    ("max_tokens", 16.0),
    ("max_tokens", True),
    ("seed", 1 << 64),
    ("seed", -(1 << 63) - 1),
    ("top_k", -2),
    ("min_p", 1.5),
    ("repetition_penalty", 0),
    ("repetition_penalty", -1.0),
    ("min_tokens", -1),
    ("stop_token_ids", ["2"]),
    ("logit_bias", {"5": math.nan}),
    ("stream", "yes"),
    ("kvreg", {"mode": "off", "extra": 1}),
    ("kvreg", "off"),
    ("request_id", ""),
    ("stream_options", {"include_usage": True, "bogus": 1}),
]


def test_odd_values_are_refused_naming_the_field() -> None:
    for field, value in ODD_VALUES:
        assert _invalid(_chat, **{field: value}) == field, (field, value)


def test_logit_bias_keys_are_ascii_token_ids() -> None:
    for key in ("²", "٣", "+5", "-1", "5.0", "0x10", "", "9" * 5000):
        refusal = _refusal(_chat, logit_bias={key: 1})
        assert refusal.param == "logit_bias", key
    assert _chat(logit_bias={" 7 ": 2.5, "00012": -1}).biases() == {7: 2.5, 12: -1.0}


def test_stop_strings_must_not_be_empty_and_token_ids_must_be_in_the_vocabulary() -> None:
    assert _refusal(_chat, stop="").param == "stop"
    assert _refusal(_chat, stop=["a", ""]).param == "stop"
    assert _refusal(_chat, allowed_token_ids=[]).param == "allowed_token_ids"
    with pytest.raises(ApiError) as outside:
        _chat(stop_token_ids=[3, 99]).check_token_ids(50)
    assert outside.value.param == "stop_token_ids"
    with pytest.raises(ApiError) as negative:
        _completion(allowed_token_ids=[-1]).check_token_ids(50)
    assert negative.value.param == "allowed_token_ids"


def test_sampling_comes_from_the_request_then_the_models_defaults_then_neutral() -> None:
    defaults = {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05}
    given = _chat(temperature=0, top_k=-1).sampling(defaults)
    assert (given.temperature, given.top_p, given.top_k, given.repetition_penalty) == (0.0, 0.9, 0, 1.05)
    assert given.min_p == 0.0
    plain = _completion().sampling({})
    assert (plain.temperature, plain.top_p, plain.top_k, plain.min_p) == (1.0, 1.0, 0, 0.0)


def test_the_kvreg_extension_and_request_id_are_declared() -> None:
    assert _chat(kvreg={"mode": "off"}).kvreg_mode() == "off"
    assert _chat().kvreg_mode() is None
    assert _completion(request_id="abc").response_id("cmpl") == "cmpl-abc"
    assert _completion().response_id("cmpl").startswith("cmpl-")
