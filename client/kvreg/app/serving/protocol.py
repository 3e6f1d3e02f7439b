"""The OpenAI API's shapes as this server speaks them: request bodies, errors, answers, chunks.

Requests are pydantic models that accept the fields OpenAI clients send and ignore the
ones kvreg has no use for (``user``, ``logit_bias``…), plus kvreg's own ``kvreg``
extension (``{"mode": "off"}`` asks for a plain run, e.g. an exam's baseline); what kvreg cannot honour (``n``
other than 1, token log-probabilities) is refused with :class:`ApiError`, which the
server turns into the OpenAI error object ``{"error": {"message", "type", "param",
"code"}}`` with its HTTP status. The answer builders take plain values; nothing here
runs a model or does I/O.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

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

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4:
            raise ApiError("stop takes at most 4 sequences", param="stop")
        return tuple(s for s in stops if s)

    def check(self) -> None:
        """Refuse what this server does not do (one choice, no log-probabilities)."""
        if self.n is not None and self.n != 1:
            raise ApiError(
                f"n={self.n} is not supported: this server returns one choice per request (n=1)",
                param="n",
                code="unsupported_value",
            )
        if self.logprobs:
            raise ApiError("logprobs are not supported", param="logprobs", code="unsupported_value")
        self.stops()

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

    def limit(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default

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

    def limit(self, default: int) -> int:
        return self.max_tokens or default

    def check(self) -> None:
        super().check()
        several = isinstance(self.prompt, list) and len(self.prompt) > 1 and isinstance(self.prompt[0], str)
        if several:
            raise ApiError("one prompt per request (a list of prompts is not supported)", param="prompt")
        if self.echo or self.suffix:
            raise ApiError("echo and suffix are not supported", param="echo" if self.echo else "suffix")

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
