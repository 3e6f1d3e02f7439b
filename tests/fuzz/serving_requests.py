"""Requests for ``kvreg engine serve`` built to break it, and the check every answer must pass.

An example is one of the two endpoints and a valid greedy base request with one to three fields
set to drawn values (or removed): declared fields with plausible and absurd values (NaN,
Infinity, huge and negative integers, unicode digits, empty strings, wrong types, nested junk),
fields of other vLLM and OpenAI versions, and made-up names. :func:`check_answer` holds the
server to its promise: never a 5xx; a 4xx is OpenAI's error object and, for one changed field,
names that field; a 200 for a field the endpoint does not declare is a field silently ignored,
and a 200 for fields that change nothing (``kvreg.app.serving.fields.IGNORED``) must give the
base request's text. The fast form runs in ``make check`` (``tests/fuzz``), a longer one in
``make test`` (``tests/serving``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import strategies as st

from kvreg.app.serving import fields
from kvreg.app.serving.protocol import ChatRequest, CompletionRequest

MODEL = "fuzz"
PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
BASE: dict[str, dict[str, Any]] = {
    "chat": {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Fuzz every field."}],
        "max_tokens": 2,
        "temperature": 0,
    },
    "completion": {"model": MODEL, "prompt": "Fuzz every field.", "max_tokens": 2, "temperature": 0},
}
DECLARED = {"chat": set(ChatRequest.model_fields), "completion": set(CompletionRequest.model_fields)}
DELETE = object()  # a drawn "value" that removes the field from the base request

ints = st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, 2, 3, -1, -2, 2**63, -(2**63) - 1, 10**30])
floats = st.floats() | st.sampled_from([0.0, 1e-300, 5e-324, 1e-6, 1e-5, 0.5, 1.0, 2.0, 2.5, -0.1, 1e300])
texts = st.text(max_size=8) | st.sampled_from(
    ["", "²", "٣", "7", "0", "auto", "none", "required", "text", "off"]
)
scalars = st.none() | st.booleans() | ints | floats | texts
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
token_ids = st.lists(st.integers(-3, 600) | st.sampled_from([2, 10**12]), max_size=4)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "", "x"]) | junk},
    optional={
        "content": texts
        | junk
        | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": texts})),
        "name": texts,
    },
)
TYPICAL: dict[str, Any] = {
    "messages": st.lists(message, max_size=3),
    "prompt": texts | st.lists(st.integers(-2, 600), max_size=6) | st.lists(texts, max_size=2),
    "model": st.sampled_from([MODEL, "other", ""]),
    "logit_bias": st.dictionaries(texts | st.integers(0, 600).map(str), floats | ints, max_size=3),
    "stop": texts | st.lists(texts, max_size=5),
    "stop_token_ids": token_ids,
    "allowed_token_ids": token_ids,
    "kvreg": st.fixed_dictionaries({"mode": st.sampled_from(["off", "auto", "knowledge", "x"])}) | junk,
    "stream_options": st.dictionaries(
        st.sampled_from(["include_usage", "continuous_usage_stats", "x"]), st.booleans() | junk, max_size=2
    ),
    "response_format": st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "json_object", "json_schema"])}
    ),
    "tool_choice": st.sampled_from(["none", "auto", "required"]) | junk,
    "tools": st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": junk}), max_size=2),
    "max_tokens": st.integers(-2, 70) | ints,
    "max_completion_tokens": st.integers(-2, 70) | ints,
    "min_tokens": st.integers(-1, 6) | ints,
    "top_k": st.integers(-3, 600) | ints,
    "seed": ints,
    "temperature": st.floats(0, 2) | floats,
    "top_p": st.floats(0, 1) | floats,
    "min_p": st.floats(0, 1) | floats,
    "repetition_penalty": st.floats(0, 3) | floats,
    "presence_penalty": st.floats(-2, 2) | floats,
    "frequency_penalty": st.floats(-2, 2) | floats,
    "n": st.integers(-1, 3),
    "best_of": st.integers(-1, 3),
    "logprobs": st.booleans() | st.integers(-1, 3),
    "top_logprobs": st.integers(-1, 3),
    "priority": st.integers(-1, 1),
    "thinking_token_budget": st.integers(-2, 3),
    "modalities": st.lists(st.sampled_from(["text", "audio"]), max_size=2),
    "request_id": texts,
}
BOOLEANS = {
    "stream", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "echo",
    "add_generation_prompt", "continue_final_message", "add_special_tokens", "use_beam_search",
    "include_reasoning", "spaces_between_special_tokens", "store", "parallel_tool_calls",
    "return_token_ids", "return_prompt_text", "watermarking", "return_tokens_as_token_ids",
}  # fmt: skip
TYPICAL.update({name: st.booleans() for name in BOOLEANS})
NAMES = sorted(fields.APPLIED | set(fields.IGNORED) | set(fields.REFUSED) | set(fields.OTHER_KNOWN))
names = st.one_of(st.sampled_from(NAMES), st.sampled_from(sorted(TYPICAL)), st.text(min_size=1, max_size=10))


@st.composite
def value_for(draw: st.DrawFn, name: str) -> Any:
    typical = TYPICAL.get(name)
    choices = [scalars, junk, st.just(DELETE)] + ([typical] * 6 if typical is not None else [])
    return draw(st.one_of(choices))


@st.composite
def requests(draw: st.DrawFn, max_fields: int = 3) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(endpoint, the changed fields and their values, the request body)."""
    kind = draw(st.sampled_from(sorted(PATHS)))
    chosen = draw(st.lists(names, min_size=1, max_size=max_fields, unique=True))
    changed = {name: draw(value_for(name)) for name in chosen}
    body = dict(BASE[kind])
    for name, value in changed.items():
        if value is DELETE:
            body.pop(name, None)
        else:
            body[name] = value
    return kind, changed, body


def post(app: TestClient, kind: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as Python's JSON writes it (NaN and Infinity included, as some clients send)."""
    return app.post(PATHS[kind], content=json.dumps(body), headers={"content-type": "application/json"})


def answer_text(response: Any) -> str:
    """The completion's text, from a JSON answer or an event stream (which must end well)."""
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", response.text[-300:]
        chunks = [json.loads(e) for e in events[:-1]]
        assert not any("error" in c for c in chunks), chunks
        out = []
        for c in chunks:
            for choice in c.get("choices", []):
                out.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
        return "".join(out)
    choice = response.json()["choices"][0]
    return str(choice["message"]["content"] if "message" in choice else choice["text"])


def check_answer(
    app: TestClient, kind: str, changed: dict[str, Any], body: dict[str, Any], base_texts: dict[str, str]
) -> None:
    response = post(app, kind, body)
    assert response.status_code < 500, (changed, response.status_code, response.text[:500])
    if response.status_code != 200:
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str)
        assert error["param"] is None or isinstance(error["param"], str)
        if len(changed) == 1 and error["param"] is not None:
            (name,) = changed
            # continue_final_message is refused for the messages it needs (a last assistant turn)
            expected = {name, "messages"} if name == "continue_final_message" else {name}
            assert error["param"] in expected, (changed, error)
        return
    undeclared = [n for n, v in changed.items() if n not in DECLARED[kind] and v is not DELETE]
    assert not undeclared, f"{undeclared} answered 200: silently ignored"
    text = answer_text(response)
    neutral = all(n in fields.IGNORED for n in changed) and not any(v is DELETE for v in changed.values())
    if neutral:
        assert text == base_texts[kind], (changed, text, base_texts[kind])


@contextmanager
def fuzz_app(root: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The server in process on a tiny chat model with a 64-token context (an unset max_tokens is
    the rest of it), and the base requests' texts."""
    from kvreg.app.engine_options import EngineOptions
    from kvreg.app.serving.host import ModelHost
    from kvreg.app.serving.server import create_app
    from kvreg.engine.tiny import CHATML_TEMPLATE, build_model_dir
    from kvreg.store.home import Home

    model = build_model_dir(root / "model", "llama", seed=0, chat_template=CHATML_TEMPLATE, max_positions=64)
    host = ModelHost(Home(root / "home").ensure(), model, EngineOptions(block_size=8), name=MODEL)
    try:
        with TestClient(create_app(host, default_max_tokens=None)) as app:  # type: ignore[arg-type]
            texts = {kind: answer_text(post(app, kind, BASE[kind])) for kind in PATHS}
            yield app, texts
    finally:
        host.close()
