"""The flywheel's exams through a running ``kvreg engine serve``: each question one HTTP request.

:class:`ServedExam` asks a server's OpenAI API (httpx) the way an application does: a text
prompt through ``/v1/completions``, a chat prompt through ``/v1/chat/completions``, greedy
(``temperature: 0``), and reads the answer's text, finish reason and the ``kvreg`` facts
(mode, artifact, grafted/prefilled/decoded tokens, the server's CPU seconds, and in knowledge
mode the part of the text that is the verified artifact's). A baseline question asks for a
plain run (``{"kvreg": {"mode": "off"}}``). :meth:`ServedExam.check_same_engine` refuses a
server whose model, tokenizer or config fingerprint differs from this process's, since the
flywheel compares the server's answers with its own. Nothing here loads a model or prints.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from kvreg.app.prompts import ChatMessages, Prompt
from kvreg.core.errors import RemoteError, UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedAnswer:
    """One answer from the server: its text, whether the model ended it, and kvreg's facts."""

    completion: str  # the whole completion text
    continuation: str  # what the model decoded (the completion less the artifact's part in knowledge mode)
    ended: bool  # the model ended its turn (finish_reason "stop": no stop strings are sent)
    facts: dict[str, Any]
    completion_tokens: int
    wall_seconds: float  # the request's round trip, as a client sees it

    @property
    def mode(self) -> str:
        return str(self.facts["mode"])


class ServedExam:
    """A client of one ``kvreg engine serve`` at ``url`` (its base URL, ending ``/v1`` or not)."""

    def __init__(self, url: str, *, timeout: float = 600.0, transport: httpx.BaseTransport | None = None):
        base = url.rstrip("/")
        self.url = base if base.endswith("/v1") else base + "/v1"
        self.http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)
        self.model = ""  # the served model's id, from /v1/models
        self.card: dict[str, Any] = {}

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ServedExam:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise RemoteError(
                f"the server at {self.url} did not answer: {exc}",
                hint="start it with: kvreg engine serve --model MODEL --block-size N (see docs/serving.md)",
            ) from None
        try:
            body: dict[str, Any] = r.json()
        except ValueError:
            body = {}
        if r.status_code != 200:
            err = body.get("error") or {}
            why = err.get("message", r.text[:200])
            raise RemoteError(
                f"the server at {self.url} refused {path}: {r.status_code} {why}",
                status=r.status_code,
                code=err.get("code"),
            )
        return body

    def check_same_engine(self, model_fp: str, tokenizer_fp: str, config_fp: str, block_size: int) -> None:
        """Read the served model's card; refuse a server on another model, tokenizer or config."""
        cards = self._call("GET", "/models").get("data") or []
        if len(cards) != 1:
            raise RemoteError(f"the server at {self.url} lists {len(cards)} models; kvreg serves one")
        card = cards[0]
        facts = card.get("kvreg") or {}
        self.model, self.card = str(card.get("id")), facts
        mine = {"model_fingerprint": model_fp, "tokenizer_fingerprint": tokenizer_fp}
        for name, value in mine.items():
            if facts.get(name) != value:
                raise UsageError(
                    f"the server at {self.url} serves another model ({name} {facts.get(name)}, here {value})",
                    hint="start the server on the flywheel's model: kvreg engine serve --model DIR",
                )
        if facts.get("config_fingerprint") != config_fp:
            raise UsageError(
                f"the server at {self.url} runs another engine config (config fingerprint "
                f"{facts.get('config_fingerprint')}, here {config_fp}): its answers cannot be compared",
                hint=f"start it with the flywheel's block size and threads: kvreg engine serve --model DIR "
                f"--block-size {block_size} --threads N",
            )

    def answer(self, prompt: Prompt, *, max_tokens: int, plain: bool) -> ServedAnswer:
        """Ask ``prompt`` greedily; ``plain`` asks for a run with no cache (the baseline)."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "temperature": 0}
        if plain:
            body["kvreg"] = {"mode": "off"}
        if isinstance(prompt, ChatMessages):
            path, body["messages"] = "/chat/completions", prompt.to_list()
        else:
            path, body["prompt"] = "/completions", prompt
        t = time.perf_counter()
        data = self._call("POST", path, json=body)
        wall = time.perf_counter() - t
        choice = data["choices"][0]
        text = str(choice["message"]["content"] if "message" in choice else choice["text"])
        facts = dict(data["kvreg"])
        knowledge = str(facts.get("knowledge_text") or "")
        return ServedAnswer(
            completion=text,
            continuation=text[len(knowledge) :] if text.startswith(knowledge) else text,
            ended=choice.get("finish_reason") == "stop",
            facts=facts,
            completion_tokens=int(data["usage"]["completion_tokens"]),
            wall_seconds=wall,
        )
