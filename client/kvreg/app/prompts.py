"""Prompts as plain text or as chat messages: the typed conversation, its file, the one-turn wrap.

A use case's prompt (deposit, graft, ask) is a :data:`Prompt`: a ``str``, tokenized
as it always was (with the tokenizer's special tokens, e.g. BOS), or
:class:`ChatMessages`, rendered with the model's own chat template and tokenized as
rendered (``kvreg.engine.chat``; a generation prompt is added unless the last message
is the assistant's). :func:`load_messages_file` reads ``--messages-file`` (a JSON
list of ``{"role": ..., "content": ...}`` objects); :func:`chat_turn` wraps a text as
one user turn (``--chat``). :func:`encode_prompt` and :func:`engine_prompt` hand a
prompt to the engine once the model is loaded.

This module renders and tokenizes nothing itself and imports no engine module at
import time (the engine imports torch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from kvreg.app.textfiles import read_utf8_text
from kvreg.core.errors import UsageError

if TYPE_CHECKING:
    from kvreg.engine.chat import ChatPrompt
    from kvreg.engine.runtime import LoadedModel

MAX_MESSAGES_BYTES = 16 * 1024 * 1024
USER = "user"
_EXAMPLE = '[{"role": "user", "content": "What is 17 * 23?"}]'


class ChatMessage(TypedDict):
    role: str
    content: str


def _check_messages(value: object, source: str) -> tuple[ChatMessage, ...]:
    """``value`` as a conversation, or ``UsageError`` naming ``source`` and the first problem."""
    if not isinstance(value, list | tuple):
        raise UsageError(
            f"{source} must be a JSON list of messages, not {type(value).__name__}", hint=f"e.g. {_EXAMPLE}"
        )
    if not value:
        raise UsageError(f"{source} holds no messages", hint=f"e.g. {_EXAMPLE}")
    out: list[ChatMessage] = []
    for i, item in enumerate(value):
        where = f"{source}: message {i}"
        if not isinstance(item, dict):
            raise UsageError(f"{where} must be an object with role and content, not {type(item).__name__}")
        extra = sorted(set(item) - {"role", "content"})
        if extra:
            raise UsageError(
                f"{where} has fields other than role and content: {', '.join(map(repr, extra))}",
                hint="kvreg renders role and content only; remove the other fields",
            )
        for key in ("role", "content"):
            if key not in item:
                raise UsageError(f"{where} has no {key!r}")
            if not isinstance(item[key], str):
                raise UsageError(f"{where}: {key!r} must be a string, not {type(item[key]).__name__}")
            try:
                item[key].encode("utf-8")
            except UnicodeEncodeError:
                raise UsageError(f"{where}: {key!r} holds an unpaired surrogate escape") from None
        if not item["role"]:
            raise UsageError(f"{where}: 'role' is empty")
        out.append(ChatMessage(role=item["role"], content=item["content"]))
    return tuple(out)


@dataclass(frozen=True)
class ChatMessages:
    """A conversation of one or more ``{role, content}`` turns, in order (checked on construction)."""

    turns: tuple[ChatMessage, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", _check_messages(list(self.turns), "the chat messages"))

    @classmethod
    def parse(cls, value: object, *, source: str = "the chat messages") -> ChatMessages:
        """From a parsed JSON value; ``UsageError`` naming ``source`` for anything but a conversation."""
        return cls(_check_messages(value, source))

    def to_list(self) -> list[dict[str, str]]:
        return [{"role": m["role"], "content": m["content"]} for m in self.turns]

    def __len__(self) -> int:
        return len(self.turns)


Prompt = str | ChatMessages


def chat_turn(text: str) -> ChatMessages:
    """``text`` as one user turn (``--chat``)."""
    return ChatMessages((ChatMessage(role=USER, content=text),))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise UsageError(f"duplicate key {k!r}")
    return dict(pairs)


def load_messages_file(path: str | Path) -> ChatMessages:
    """Read a messages file: UTF-8 JSON, a non-empty list of ``{"role": str, "content": str}``."""
    source = Path(path)
    what = f"messages file {source}"
    text = read_utf8_text(source, what, MAX_MESSAGES_BYTES)
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except UsageError as e:
        raise UsageError(f"{what}: {e.message}") from None
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{what} is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})", hint=f"e.g. {_EXAMPLE}"
        ) from None
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{what} is not valid JSON: {e}") from None
    return ChatMessages.parse(value, source=what)


def engine_prompt(lm: LoadedModel, prompt: Prompt) -> str | ChatPrompt:
    """What the engine's deposit takes: the text as it is, or the messages rendered for ``lm``."""
    if isinstance(prompt, str):
        return prompt
    from kvreg.engine.chat import chat_prompt  # torch; the model is loaded by now

    return chat_prompt(lm, prompt.to_list())


ChatEnding = Literal["rule", "generation", "closed", "continue"]


def encode_chat(lm: LoadedModel, messages: ChatMessages, ending: ChatEnding = "rule") -> list[int]:
    """The tokens of ``messages`` as the chat template renders them, ending as asked:

    ``rule``: kvreg's rule (``kvreg.engine.chat.wants_generation_prompt``: a generation
    prompt unless the last turn is the assistant's, as deposits and ``kvreg ask`` render);
    ``generation``: always a new assistant turn (what the OpenAI API does); ``closed``: the
    turns as they are, nothing after them; ``continue``: the last (assistant) turn left open.
    """
    from kvreg.engine.chat import chat_tokens, render_chat, wants_generation_prompt  # torch; loaded by now

    turns = messages.to_list()
    generation = wants_generation_prompt(turns) if ending == "rule" else ending == "generation"
    keep_open = ending == "continue"
    text = render_chat(lm, turns, add_generation_prompt=generation, continue_final_message=keep_open)
    return chat_tokens(lm, text)


def encode_prompt(lm: LoadedModel, prompt: Prompt) -> list[int]:
    """The prompt's token ids: text with the tokenizer's special tokens, messages as rendered."""
    if isinstance(prompt, str):
        return lm.encode(prompt, first=True)
    return encode_chat(lm, prompt)
