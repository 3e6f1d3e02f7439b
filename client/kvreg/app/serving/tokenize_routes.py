"""``POST /tokenize`` and ``POST /detokenize``, as vLLM's OpenAI server has them.

``/tokenize`` takes a ``prompt`` (text; ``add_special_tokens``, default true, adds the
tokenizer's special tokens, such as a BOS) or chat ``messages`` (rendered with the model's
template exactly as ``/v1/chat/completions`` renders them: ``add_generation_prompt``, default
true, and ``continue_final_message``), and answers ``{"count", "max_model_len", "tokens"}`` (plus
``token_strs`` with ``return_token_strs``). The tokens are the prompt a completion request
with the same text or messages would have: ``count`` is its ``usage.prompt_tokens``.
``/detokenize`` takes ``tokens`` and answers ``{"prompt"}``, special tokens included.
``model`` is optional; another model's id is 404. Both use the model's thread (the tokenizer
is used there only), so they wait their turn and hold a place in the queue like completions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

from kvreg.app.serving.protocol import ApiError, ChatRequest

if TYPE_CHECKING:
    from kvreg.app.serving.host import ModelHost

InWorker = Callable[..., Awaitable[Any]]


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool | None = None  # default: true for a prompt, false for messages
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    tokens: list[int]


def _check_model(host: ModelHost, model: str | None) -> None:
    if model is not None and model != host.name:
        raise ApiError(
            f"the model {model!r} does not exist; this server serves {host.name!r}",
            status=404,
            param="model",
            code="model_not_found",
        )


def _chat(body: TokenizeRequest) -> ChatRequest:
    """The messages as a chat completion request would carry them (for its rendering rules)."""
    assert body.messages is not None
    if body.add_special_tokens:
        raise ApiError(
            "add_special_tokens is not supported with messages: the chat template places the "
            "special tokens itself",
            param="add_special_tokens",
            code="unsupported_value",
        )
    if (
        body.continue_final_message
        and body.add_generation_prompt
        and "add_generation_prompt" in body.model_fields_set
    ):
        raise ApiError(
            "continue_final_message and add_generation_prompt cannot both be true",
            param="continue_final_message",
        )
    last = body.messages[-1].get("role") if body.messages else None
    if body.continue_final_message and last != "assistant":
        raise ApiError("continue_final_message needs a last message from the assistant", param="messages")
    return ChatRequest.model_construct(
        model=body.model or "",
        messages=body.messages,
        add_generation_prompt=body.add_generation_prompt,
        continue_final_message=body.continue_final_message,
    )


def add_tokenize_routes(app: FastAPI, host: ModelHost, in_worker: InWorker) -> None:
    def tokenize(body: TokenizeRequest) -> list[int]:  # in the model's thread
        if body.messages is not None:
            chat = _chat(body)
            return host.chat_tokens(chat.conversation(), chat.rendering())
        assert body.prompt is not None
        if body.add_special_tokens is False:
            return host.lm.encode(body.prompt, first=False)
        return host.text_tokens(body.prompt)

    @app.post("/tokenize")
    async def tokenize_route(body: TokenizeRequest) -> dict[str, Any]:
        _check_model(host, body.model)
        if (body.prompt is None) == (body.messages is None):
            raise ApiError(
                "send either prompt (text) or messages (a chat), not both or neither", param="prompt"
            )
        tokens: list[int] = await in_worker(tokenize, body)
        out: dict[str, Any] = {"count": len(tokens), "max_model_len": host.context_length, "tokens": tokens}
        if body.return_token_strs:
            out["token_strs"] = await in_worker(host.lm.tokenizer.convert_ids_to_tokens, tokens)
        return out

    @app.post("/detokenize")
    async def detokenize_route(body: DetokenizeRequest) -> dict[str, Any]:
        _check_model(host, body.model)
        vocab = len(host.lm.tokenizer)
        outside = [t for t in body.tokens if not 0 <= t < vocab]
        if outside:
            raise ApiError(f"tokens outside the vocabulary [0, {vocab}): {outside[:5]}", param="tokens")
        text: str = await in_worker(host.lm.decode, body.tokens)
        return {"prompt": text}
