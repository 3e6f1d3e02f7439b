"""The OpenAI API's shapes as this server speaks them: request bodies, errors, answers, chunks.

Requests are pydantic models that declare every field of OpenAI's and vLLM's chat and
completion requests this server knows, strictly typed and range-checked (a string for a
number, NaN or Infinity, a value out of range: a 400 naming the field). What each field does
is listed once, in :mod:`.fields`: applied (the sampling, including vLLM's ``top_k``,
``min_p``, ``repetition_penalty``, ``stop_token_ids``, ``ignore_eos``, ``min_tokens``,
``include_stop_str_in_output``, ``skip_special_tokens`` and ``allowed_token_ids``), accepted
because it changes nothing in the answer (``user``, ``metadata``, ``store``...), or refused
unless neutral. An undeclared field is refused by name, never ignored. kvreg's own ``kvreg``
extension (``{"mode": "off"}`` asks for a plain run, e.g. an exam's baseline) is declared too,
as are vLLM's ``add_generation_prompt`` and ``continue_final_message`` for chats. What kvreg
cannot honour (``n`` or ``best_of`` other than 1, token log-probabilities, a JSON
``response_format``, guided decoding, tools the model may call) is refused with
:class:`ApiError`, which the server turns into the OpenAI error object ``{"error":
{"message", "type", "param", "code"}}`` with its HTTP status.

:meth:`_Request.sampling` resolves a request's sampling settings against the model's
defaults (vLLM's order: the request, then the model's ``generation_config.json``, then the
neutral value). The answer builders take plain values; nothing here runs a model or does I/O.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvreg.app.serving.errors import ApiError
from kvreg.app.serving.fields import refuse_unneutral, unknown_field

__all__ = ["ApiError", "ChatRequest", "CompletionRequest", "Sampling"]

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_STOPS = 4  # OpenAI's limit on stop strings
MAX_TOKEN_ID_DIGITS = 12  # a logit_bias key longer than this is no token id


class _Strict(BaseModel):
    """No coercion (a string is not a number, a number not a boolean) and no NaN or Infinity."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")


class KvregExtension(_Strict):
    """kvreg's request extension: ``{"mode": "off"}`` asks for a plain run with no cache."""

    mode: str


class StreamOptions(_Strict):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # refused when true (usage comes once, at the end)


@dataclass(frozen=True)
class Sampling:
    """A request's sampling settings once the model's defaults have filled what it left out."""

    temperature: float
    top_p: float
    top_k: int  # 0: all tokens
    min_p: float
    repetition_penalty: float


#: The neutral value of each setting a model's generation config may default (vLLM's, and
#: OpenAI's temperature of 1).
NEUTRAL_SAMPLING: dict[str, float | int] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    response_format: dict[str, Any] | None = None
    kvreg: KvregExtension | None = None
    # vLLM's sampling parameters
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0)
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool | None = False
    ignore_eos: bool | None = False
    min_tokens: int | None = Field(default=0, ge=0)
    skip_special_tokens: bool | None = True
    spaces_between_special_tokens: bool | None = True  # refused when false (kvreg.app.serving.fields)
    allowed_token_ids: list[int] | None = None
    request_id: str | None = Field(default=None, min_length=1, max_length=256)
    # accepted, changing nothing (kvreg.app.serving.fields.IGNORED)
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prediction: dict[str, Any] | None = None
    session_id: str | None = None
    stream_interval: int | None = Field(default=None, ge=1)
    length_penalty: float | None = None
    truncation_side: Literal["left", "right"] | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_offsets: bool | None = None
    return_mm_kwargs: bool | None = True
    routed_experts_prompt_start: int | None = Field(default=None, ge=0)
    # refused unless neutral (kvreg.app.serving.fields.REFUSED)
    use_beam_search: bool | None = False
    watermarking: bool | None = None
    truncate_prompt_tokens: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    structured_outputs: dict[str, Any] | None = None
    priority: int | None = 0
    return_token_ids: bool | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    repetition_detection: dict[str, Any] | None = None
    thinking_token_budget: int | None = None

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOPS:
            raise ApiError(f"stop takes at most {MAX_STOPS} sequences", param="stop")
        if any(not s for s in stops):
            raise ApiError("stop cannot contain an empty string", param="stop")
        return tuple(stops)

    def check(self) -> None:
        """Refuse what this server does not do (one choice, no log-probabilities, free text only),
        every undeclared field by name, and every refused field unless it is neutral."""
        for name in self.model_extra or {}:
            raise unknown_field(name)
        declared = type(self).model_fields
        refuse_unneutral(
            (name, getattr(self, name))
            for name in sorted(self.model_fields_set)
            if getattr(self, name) != declared[name].default
        )
        if self.n is not None and self.n != 1:
            raise ApiError(
                f"n={self.n} is not supported: this server returns one choice per request (n=1)",
                param="n",
                code="unsupported_value",
            )
        kind = (self.response_format or {}).get("type", "text")
        if kind != "text":
            raise ApiError(
                f"response_format {kind!r} is not supported: this server does not constrain the "
                "output to JSON; ask for JSON in the prompt and parse the text",
                param="response_format",
                code="unsupported_value",
            )
        if self.stream_options is not None and self.stream_options.continuous_usage_stats:
            raise ApiError(
                "stream_options.continuous_usage_stats is not supported: usage comes once, at the end",
                param="stream_options",
                code="unsupported_value",
            )
        if self.allowed_token_ids is not None and not self.allowed_token_ids:
            raise ApiError("allowed_token_ids must not be empty", param="allowed_token_ids")
        self.stops()
        self.biases()

    def check_token_ids(self, vocab: int) -> None:
        """``ApiError`` for a token id of ``stop_token_ids`` or ``allowed_token_ids`` outside
        ``[0, vocab)`` (``logit_bias``'s ids are checked by the host)."""
        for name in ("stop_token_ids", "allowed_token_ids"):
            outside = sorted({t for t in getattr(self, name) or () if not 0 <= t < vocab})
            if outside:
                raise ApiError(
                    f"{name} names token ids outside the vocabulary [0, {vocab}): {outside[:5]}", param=name
                )

    def biases(self) -> dict[int, float]:
        """``logit_bias`` with token ids as integers (OpenAI sends them as JSON object keys)."""
        out: dict[int, float] = {}
        for key, bias in (self.logit_bias or {}).items():
            digits = key.strip()
            if not (digits.isascii() and digits.isdigit() and len(digits) <= MAX_TOKEN_ID_DIGITS):
                raise ApiError(f"logit_bias keys are token ids, not {key!r}", param="logit_bias")
            if not -100 <= bias <= 100:
                raise ApiError(
                    f"the logit bias of token {key} is {bias}, outside [-100, 100]", param="logit_bias"
                )
            out[int(digits)] = float(bias)
        return out

    def sampling(self, defaults: Mapping[str, Any]) -> Sampling:
        """The sampling settings: the request's, else the model's default, else the neutral value
        (temperature 1, as OpenAI and vLLM; ``top_k`` -1 is 0, all tokens)."""
        chosen = {
            name: value
            if (value := getattr(self, name)) is not None
            else defaults.get(name, NEUTRAL_SAMPLING[name])
            for name in NEUTRAL_SAMPLING
        }
        top_k = int(chosen["top_k"])
        return Sampling(
            temperature=float(chosen["temperature"]),
            top_p=float(chosen["top_p"]),
            top_k=0 if top_k == -1 else top_k,
            min_p=float(chosen["min_p"]),
            repetition_penalty=float(chosen["repetition_penalty"]),
        )

    def include_usage(self) -> bool:
        return bool(self.stream_options is not None and self.stream_options.include_usage)

    def kvreg_mode(self) -> str | None:
        """The ``kvreg`` extension's ``mode`` (``{"kvreg": {"mode": "off"}}``), or None when absent."""
        return None if self.kvreg is None else self.kvreg.mode

    def response_id(self, prefix: str) -> str:
        """The answer's id: ``PREFIX-REQUEST_ID`` with vLLM's ``request_id``, else a new one."""
        return new_id(prefix) if self.request_id is None else f"{prefix}-{self.request_id}"


class ChatRequest(_Request):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    echo: bool | None = False
    # vLLM's extensions: a new assistant turn after the messages (OpenAI's behaviour, the
    # default), or the last assistant message continued where it stops.
    add_generation_prompt: bool | None = True
    continue_final_message: bool | None = False
    add_special_tokens: bool | None = False
    documents: list[Any] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    include_reasoning: bool | None = True
    return_prompt_text: bool | None = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    verbosity: str | None = None
    web_search_options: dict[str, Any] | None = None

    def limit(self, default: int | None = None) -> int | None:
        """The completion tokens the request asks for at most (``max_completion_tokens`` first)."""
        return self.max_completion_tokens or self.max_tokens or default

    def limit_param(self) -> str:
        """The field that sets :meth:`limit` (named when it is refused)."""
        return "max_completion_tokens" if self.max_completion_tokens else "max_tokens"

    def check(self) -> None:
        super().check()
        if self.logprobs or self.top_logprobs:
            param = "logprobs" if self.logprobs else "top_logprobs"
            raise ApiError("log-probabilities are not supported", param=param, code="unsupported_value")
        if self.echo:
            raise ApiError(
                "echo is not supported: the answer is a new message", param="echo", code="unsupported_value"
            )
        for tools, choice, names in (
            (self.tools, self.tool_choice, ("tools", "tool_choice")),
            (self.functions, self.function_call, ("functions", "function_call")),
        ):
            if tools and choice != "none":
                raise ApiError(
                    "tool calls are not supported: this server answers with text only; send no tools, "
                    'or tool_choice "none"',
                    param=names[0],
                    code="unsupported_value",
                )
            if choice not in (None, "none", "auto"):  # "required" or a named tool: a call is wanted
                raise ApiError(
                    f"{names[1]}={choice!r} is not supported: this server answers with text only",
                    param=names[1],
                    code="unsupported_value",
                )
        both = self.continue_final_message and self.add_generation_prompt
        if both and "add_generation_prompt" in self.model_fields_set:  # the default gives way
            raise ApiError(
                "continue_final_message and add_generation_prompt cannot both be true",
                param="continue_final_message",
            )
        last = self.messages[-1].get("role") if self.messages else None
        if self.continue_final_message and last != "assistant":
            raise ApiError("continue_final_message needs a last message from the assistant", param="messages")

    def rendering(self) -> Literal["generation", "closed", "continue"]:
        """How the conversation ends: ``generation`` (a new assistant turn), ``continue`` (the
        last assistant message goes on) or ``closed`` (as the messages end, nothing added)."""
        if self.continue_final_message:
            return "continue"
        return "generation" if self.add_generation_prompt is not False else "closed"

    def conversation(self) -> list[dict[str, str]]:
        """The messages as role/content text (text parts joined; names and other fields dropped)."""
        out: list[dict[str, str]] = []
        for i, m in enumerate(self.messages):
            content = m.get("content")
            if isinstance(content, list):
                parts = []
                for part in content:
                    if not isinstance(part, dict) or part.get("type") != "text":
                        raise ApiError(
                            f"messages[{i}]: only text content parts are supported", param="messages"
                        )
                    parts.append(str(part.get("text", "")))
                content = "".join(parts)
            if content is None:
                content = ""
            if not isinstance(m.get("role"), str) or not isinstance(content, str):
                raise ApiError(f"messages[{i}] needs a string role and text content", param="messages")
            out.append({"role": m["role"], "content": content})
        if not out:
            raise ApiError("messages must not be empty", param="messages")
        return out


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None
    add_special_tokens: bool | None = True
    prompt_embeds: str | list[str] | None = None

    def limit(self, default: int | None = None) -> int | None:
        """The completion tokens the request asks for at most."""
        return self.max_tokens or default

    def limit_param(self) -> str:
        return "max_tokens"

    def check(self) -> None:
        super().check()
        several = isinstance(self.prompt, list) and len(self.prompt) > 1 and isinstance(self.prompt[0], str)
        if several:
            raise ApiError("one prompt per request (a list of prompts is not supported)", param="prompt")
        if self.echo or self.suffix:
            raise ApiError(
                "echo and suffix are not supported",
                param="echo" if self.echo else "suffix",
                code="unsupported_value",
            )
        if self.logprobs is not None:
            raise ApiError("log-probabilities are not supported", param="logprobs", code="unsupported_value")
        if self.best_of is not None and self.best_of != 1:
            raise ApiError(
                f"best_of={self.best_of} is not supported: this server decodes one completion per request",
                param="best_of",
                code="unsupported_value",
            )

    def text_or_tokens(self) -> str | list[int]:
        if isinstance(self.prompt, str):
            return self.prompt
        if self.prompt and isinstance(self.prompt[0], str):
            return str(self.prompt[0])
        return [int(t) for t in self.prompt]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def chat_answer(
    rid: str, model: str, text: str, finish: str, use: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": use,
        "kvreg": facts,
    }


def completion_answer(
    rid: str, model: str, text: str, finish: str, use: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
        "usage": use,
        "kvreg": facts,
    }


def chunk(
    rid: str,
    model: str,
    *,
    chat: bool,
    text: str | None = None,
    first: bool = False,
    finish: str | None = None,
    use: dict[str, Any] | None = None,
    facts: dict[str, Any] | None = None,
    no_choices: bool = False,
) -> dict[str, Any]:
    """One streamed chunk (``chat.completion.chunk`` or ``text_completion``)."""
    choices: list[dict[str, Any]] = []
    if not no_choices:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text:
                delta["content"] = text
            choices.append({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish})
        else:
            choices.append({"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish})
    out: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if use is not None:
        out["usage"] = use
    if facts is not None:
        out["kvreg"] = facts
    return out


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {body}\n\n".encode()


DONE = sse("[DONE]")
