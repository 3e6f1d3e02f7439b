"""The request fields of OpenAI's and vLLM's chat and completion APIs, and what this server does
with each one: applied, accepted because it changes nothing in the answer, or refused.

One place lists them all (:data:`APPLIED`, :data:`IGNORED`, :data:`REFUSED`), and the request
models of :mod:`.protocol` declare exactly these fields, with their types and ranges, so that
a field of the wrong type or out of range is a 400 that names it. A field that is not declared
is refused by name (:func:`unknown_field`), never ignored; a refused field is accepted only
with its default or the value that changes nothing (``null``, ``false``, an empty list...).
Nothing here runs a model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kvreg.app.serving.errors import ApiError

#: Fields that change the answer and are honoured (the sampling, the prompt, the stream, kvreg's
#: extension). ``n``, ``best_of``, ``logprobs``, ``response_format``, ``tools``... are honoured
#: only where the server can (one choice, text): see :data:`REFUSED` and ``check`` of each request.
APPLIED = frozenset(
    {
        "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p",
        "seed", "stop", "stream", "stream_options", "logit_bias", "presence_penalty",
        "frequency_penalty", "n", "best_of", "logprobs", "top_logprobs", "response_format", "tools",
        "tool_choice", "functions", "function_call", "echo", "suffix", "add_generation_prompt",
        "continue_final_message", "top_k", "min_p", "repetition_penalty", "stop_token_ids",
        "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
        "allowed_token_ids", "request_id", "kvreg",
    }
)  # fmt: skip

#: Fields accepted whatever their (well-typed) value, and why each changes nothing in the answer.
IGNORED: dict[str, str] = {
    "user": "an end-user id for the caller's own records (OpenAI's; vLLM ignores it too)",
    "metadata": "tags for OpenAI's stored completions; this server stores nothing",
    "store": "whether OpenAI stores the completion; this server stores nothing",
    "service_tier": "OpenAI's processing tier; this server has one",
    "safety_identifier": "an end-user id for OpenAI's abuse detection",
    "prompt_cache_key": "OpenAI's prompt-cache routing hint; kvreg routes by the prompt's blocks",
    "prompt_cache_retention": "how long OpenAI keeps its prompt cache; kvreg's store keeps its own",
    "prediction": "OpenAI's predicted output makes answers faster, never different",
    "parallel_tool_calls": "only matters with tools, which are refused",
    "session_id": "vLLM's session id for routing and metrics",
    "stream_interval": "how many tokens vLLM batches per streamed chunk; the text is the same",
    "length_penalty": "applies to beam search only (vLLM), which is refused",
    "truncation_side": "applies with truncate_prompt_tokens only, which is refused",
    "return_tokens_as_token_ids": "applies with log-probabilities only, which are refused",
    "return_token_offsets": "vLLM's render endpoints only",
    "return_mm_kwargs": "vLLM's render endpoints only",
    "routed_experts_prompt_start": "applies to vLLM's routed-expert data only, never returned here",
}


def _unset(value: object) -> bool:
    return value is None


def _not_true(value: object) -> bool:
    return value is not True


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, list | dict | str) and not value)


#: Fields refused (400, ``unsupported_value``, the field as ``param``) unless their value changes
#: nothing: field -> (the values accepted, why the others are refused).
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "use_beam_search": (_not_true, "this server decodes one sequence, greedily or by sampling"),
    "watermarking": (_not_true, "this server does not watermark its output"),
    "truncate_prompt_tokens": (_unset, "send the prompt tokens the model should read"),
    "prompt_logprobs": (_unset, "this server returns no log-probabilities"),
    "logprob_token_ids": (_unset, "this server returns no log-probabilities"),
    "bad_words": (_empty, "ban the words' tokens with logit_bias instead"),
    "structured_outputs": (_unset, "this server does not constrain the output (guided decoding)"),
    "priority": (lambda v: v in (None, 0), "this server answers requests in arrival order"),
    "return_token_ids": (_not_true, "the answer has the text and the usage counts only"),
    "return_prompt_text": (_not_true, "the answer has the text and the usage counts only"),
    "cache_salt": (
        _unset,
        "kvreg's cache is the shared, verified registry; ask for a plain run with "
        '{"kvreg": {"mode": "off"}}',
    ),
    "kv_transfer_params": (_unset, "this server does not do disaggregated prefill"),
    "ec_transfer_params": (_unset, "this server does not do disaggregated encoding"),
    "vllm_xargs": (_empty, "this server has no vLLM extensions to pass them to"),
    "repetition_detection": (_unset, "this server does not stop on repeated patterns"),
    "thinking_token_budget": (lambda v: v in (None, -1), "this server has no reasoning parser"),
    "reasoning_effort": (_unset, "this server has no reasoning parser"),
    "include_reasoning": (
        lambda v: v is not False,
        "this server has no reasoning parser: the text is all of it",
    ),
    "spaces_between_special_tokens": (
        lambda v: v is not False,
        "special tokens are decoded as the tokenizer writes them",
    ),
    "add_special_tokens": (_unset, "prompts are tokenized as kvreg deposits them (BOS as the model adds it)"),
    "documents": (_unset, "the chat template is rendered with the messages only"),
    "chat_template": (_unset, "the model's own chat template renders every chat"),
    "chat_template_kwargs": (_empty, "the model's own chat template renders every chat"),
    "mm_processor_kwargs": (_empty, "this server reads text only"),
    "media_io_kwargs": (_empty, "this server reads text only"),
    "prompt_embeds": (_unset, "send the prompt as text or token ids"),
    "audio": (_unset, "this server answers with text only"),
    "modalities": (lambda v: v is None or v == ["text"], "this server answers with text only"),
    "verbosity": (_unset, "this server has no reasoning model's verbosity control"),
    "web_search_options": (_unset, "this server does not search the web"),
}

#: Fields of other versions of vLLM's or OpenAI's APIs that are not declared here, with the
#: reason they are refused (any other undeclared field is refused as unknown).
OTHER_KNOWN: dict[str, str] = {
    **{
        name: "guided decoding is not supported: this server does not constrain the output"
        for name in (
            "guided_json",
            "guided_regex",
            "guided_choice",
            "guided_grammar",
            "guided_json_object",
            "guided_decoding_backend",
            "guided_whitespace_pattern",
        )
    },
    "logits_processors": "this server runs no custom logits processors",
    "early_stopping": "applies to beam search only, which is not supported",
}


def refuse_unneutral(fields: Iterable[tuple[str, Any]]) -> None:
    """``ApiError`` for the first field of :data:`REFUSED` whose value is not the neutral one."""
    for name, value in fields:
        rule = REFUSED.get(name)
        if rule is not None and not rule[0](value):
            raise ApiError(
                f"{name}={value!r} is not supported: {rule[1]}", param=name, code="unsupported_value"
            )


def unknown_field(name: str) -> ApiError:
    """The refusal of a field this server does not declare."""
    why = OTHER_KNOWN.get(name)
    if why is not None:
        return ApiError(f"{name} is not supported: {why}", param=name, code="unsupported_value")
    return ApiError(
        f"unknown parameter {name!r}: this server does not implement it, and refuses rather than "
        "ignores what it does not implement",
        param=name,
        code="unknown_parameter",
    )
