"""The OpenAI API's shapes as this server speaks them: request bodies, errors, answers, chunks.

Requests are pydantic models that accept the fields OpenAI clients send and ignore the
ones that change nothing in the answer (``user``, ``metadata``, ``store``…), plus kvreg's
own ``kvreg`` extension (``{"mode": "off"}`` asks for a plain run, e.g. an exam's
baseline) and vLLM's ``add_generation_prompt`` and ``continue_final_message`` for chats.
What kvreg cannot honour (``n`` or ``best_of`` other than 1, token log-probabilities, a
JSON ``response_format``, tools the model may call) is refused with :class:`ApiError`,
never ignored, which the server turns into the OpenAI error object ``{"error":
{"message", "type", "param", "code"}}`` with its HTTP status. The answer builders take
plain values; nothing here runs a model or does I/O.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ApiError(Exception):
    """An error answered as the OpenAI error object, with ``status``."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.type, self.param, self.code = message, status, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    logprobs: Any = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    response_format: dict[str, Any] | None = None

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4:
            raise ApiError("stop takes at most 4 sequences", param="stop")
        return tuple(s for s in stops if s)

    def check(self) -> None:
        """Refuse what this server does not do (one choice, no log-probabilities, free text only)."""
        if self.n is not None and self.n != 1:
            raise ApiError(
                f"n={self.n} is not supported: this server returns one choice per request (n=1)",
                param="n",
                code="unsupported_value",
            )
        if self.logprobs:
            raise ApiError("logprobs are not supported", param="logprobs", code="unsupported_value")
        kind = (self.response_format or {}).get("type", "text")
        if kind != "text":
            raise ApiError(
                f"response_format {kind!r} is not supported: this server does not constrain the "
                "output to JSON; ask for JSON in the prompt and parse the text",
                param="response_format",
                code="unsupported_value",
            )
        self.stops()
        self.biases()

    def biases(self) -> dict[int, float]:
        """``logit_bias`` with token ids as integers (OpenAI sends them as JSON object keys)."""
        out: dict[int, float] = {}
        for key, bias in (self.logit_bias or {}).items():
            if not key.strip().isdigit():
                raise ApiError(f"logit_bias keys are token ids, not {key!r}", param="logit_bias")
            if not -100 <= bias <= 100:
                raise ApiError(
                    f"the logit bias of token {key} is {bias}, outside [-100, 100]", param="logit_bias"
                )
            out[int(key)] = float(bias)
        return out

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def kvreg_mode(self) -> str | None:
        """The ``kvreg`` extension's ``mode`` (``{"kvreg": {"mode": "off"}}``), or None when absent."""
        ext = (self.model_extra or {}).get("kvreg")
        if ext is None:
            return None
        if not isinstance(ext, dict) or set(ext) - {"mode"} or not isinstance(ext.get("mode"), str):
            raise ApiError('kvreg must be an object with a "mode" string', param="kvreg")
        return str(ext["mode"])


class ChatRequest(_Request):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    functions: list[dict[str, Any]] | None = None
    function_call: Any = None
    # vLLM's extensions: a new assistant turn after the messages (OpenAI's behaviour, the
    # default), or the last assistant message continued where it stops.
    add_generation_prompt: bool = True
    continue_final_message: bool = False

    def limit(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default

    def check(self) -> None:
        super().check()
        if (self.tools and self.tool_choice != "none") or (self.functions and self.function_call != "none"):
            raise ApiError(
                "tool calls are not supported: this server answers with text only; send no tools, "
                'or tool_choice "none"',
                param="tools" if self.tools else "functions",
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
        return "generation" if self.add_generation_prompt else "closed"

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
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def limit(self, default: int) -> int:
        return self.max_tokens or default

    def check(self) -> None:
        super().check()
        several = isinstance(self.prompt, list) and len(self.prompt) > 1 and isinstance(self.prompt[0], str)
        if several:
            raise ApiError("one prompt per request (a list of prompts is not supported)", param="prompt")
        if self.echo or self.suffix:
            raise ApiError("echo and suffix are not supported", param="echo" if self.echo else "suffix")
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
