"""Chat prompts: render messages with the tokenizer's own chat template, and tokenize the rendering.

Instruct models see a conversation through their chat template, so kvreg renders it
exactly as a chat client does: :func:`render_chat` calls
``tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...)``
and :func:`chat_tokens` tokenizes the rendered text with ``add_special_tokens=False``.
That pair is what ``apply_chat_template(tokenize=True)`` does in transformers 5
(``PreTrainedTokenizerBase.apply_chat_template`` calls ``self(rendered,
add_special_tokens=False)``) and what chat servers do: the template writes any BOS
itself, so adding special tokens again would double it. The tokens of a repeat
question sent through the template are therefore exactly the prefix of an artifact
deposited from the same messages.

**The generation prompt rule** (:func:`wants_generation_prompt`): the generation
prompt (the assistant header the template writes after the last turn) is added iff
the last message's role is not ``assistant``. A conversation ending with a user turn
is a question for the model; one ending with an assistant turn is complete, e.g. a
few-shot prefix, and renders as a prefix of the same conversation followed by a new
user question and the generation prompt — for templates that render each turn
without looking at the turns after it (ChatML and most others; a template that
rewrites earlier turns, e.g. one that strips past reasoning, breaks the prefix, and
a graft then uses only the blocks that still match).

:func:`chat_prompt` does both and returns what a manifest records: the digest of the
template string that rendered the prompt, the RFC 8785 canonical JSON of the messages,
and whether the generation prompt was added. This module reads no files and validates
no message files (``kvreg.app.prompts`` does); it builds no manifest
(``kvreg.engine.deposit`` does).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jinja2 import TemplateError, TemplateSyntaxError

from kvreg.core.canonical import canonical_json
from kvreg.core.digest import Digest
from kvreg.core.errors import ModelError, UsageError
from kvreg.engine.runtime import LoadedModel

log = logging.getLogger(__name__)

ASSISTANT = "assistant"


@dataclass(frozen=True)
class ChatPrompt:
    """A conversation rendered with a model's chat template, and its tokens."""

    text: str  # the rendered prompt
    tokens: list[int]  # tokenizer(text, add_special_tokens=False)
    template_digest: Digest  # SHA-256 of the template string that rendered it
    messages_json: bytes  # the messages as RFC 8785 canonical JSON
    generation_prompt: bool

    @property
    def messages_digest(self) -> Digest:
        return Digest.of_bytes(self.messages_json)


def wants_generation_prompt(messages: Sequence[Mapping[str, str]]) -> bool:
    """True unless the last message is the assistant's (see the module docstring)."""
    return not messages or messages[-1]["role"] != ASSISTANT


def chat_template(lm: LoadedModel) -> str:
    """The template string ``apply_chat_template`` uses; ``ModelError`` for a tokenizer without one."""
    try:
        return str(lm.tokenizer.get_chat_template())
    except ValueError as e:
        raise ModelError(
            f"the tokenizer of {lm.info.get('name', lm.path)} has no chat template: {e}",
            hint="use --prompt-file without --chat for a base model, or a model directory whose "
            "tokenizer_config.json or chat_template.jinja defines one",
        ) from None


def render_chat(
    lm: LoadedModel,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool,
    continue_final_message: bool = False,
) -> str:
    """The conversation as the model's chat template writes it (special tokens as text).

    ``continue_final_message``: the last message (the assistant's) is left open, without the
    end of its turn, so that decoding continues it (transformers' option of that name).
    """
    chat_template(lm)  # the clear error for a tokenizer without a template
    if not messages:
        raise UsageError("a chat prompt needs at least one message")
    if continue_final_message and (add_generation_prompt or messages[-1]["role"] != ASSISTANT):
        raise UsageError(
            "only a last assistant message, with no generation prompt after it, can be continued"
        )
    options = {"add_generation_prompt": add_generation_prompt}
    if continue_final_message:
        options["continue_final_message"] = True
    try:
        rendered = lm.tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False, **options)
    except TemplateSyntaxError as e:
        name = lm.info.get("name", lm.path)
        raise ModelError(f"the chat template of {name} is not valid Jinja: {e}") from None
    except TemplateError as e:
        raise UsageError(
            f"the chat template of {lm.info.get('name', lm.path)} refused the messages: {e}",
            hint="check the roles and their order (many templates want user and assistant to alternate)",
        ) from None
    except ValueError as e:  # transformers: a final message it cannot find in the rendering to continue
        raise UsageError(f"the chat template of {lm.info.get('name', lm.path)}: {e}") from None
    if not isinstance(rendered, str):
        raise ModelError(f"the chat template rendered {type(rendered).__name__}, not text")
    return rendered


def chat_tokens(lm: LoadedModel, rendered: str) -> list[int]:
    """The token ids of a rendered chat: no special tokens added (the template wrote them)."""
    return lm.encode(rendered, first=False)


def chat_prompt(lm: LoadedModel, messages: Sequence[Mapping[str, str]]) -> ChatPrompt:
    """Render ``messages`` (generation prompt by the rule above) and tokenize the rendering."""
    generation = wants_generation_prompt(messages)
    text = render_chat(lm, messages, add_generation_prompt=generation)
    tokens = chat_tokens(lm, text)
    template = chat_template(lm)
    messages_json = canonical_json([dict(m) for m in messages])
    log.debug("chat prompt: %d messages, %d tokens", len(messages), len(tokens))
    return ChatPrompt(text, tokens, Digest.of_bytes(template.encode("utf-8")), messages_json, generation)
