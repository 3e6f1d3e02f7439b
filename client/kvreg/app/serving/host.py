"""The one model a server holds, and the single worker thread every request queues for.

:class:`ModelHost` loads the model once under its pinned config (``kvreg.app.loader``),
opens the remote (when one is named) for the server's lifetime, and runs each request
as :func:`kvreg.app.ask.ask` does for ``kvreg ask`` — route over the local store and the
registry, lazy pull, on-demand chunk fetch, graft or fall back with the reason, decode —
in one worker thread: requests wait in the executor's queue, in order, and never share
a cache or run on the model at the same time. With ``probe="once"`` (the default) a witness probe that
passed is remembered in the store, and repeat grafts of that artifact skip it. With
``receipts=REMOTE`` each graft's signed receipt is queued to that registry, sent from a
thread of its own so the next request does not wait for it. A request whose client is gone
(``Job.cancelled``) is skipped if it has not started and stops at its next token if it has.
What the worker answered is counted in ``counters`` (``.worker.RunCounters``: tokens, grafts,
probes, fallbacks, stops, receipts), and ``stopped`` and ``receipts`` keep only the last few
(how many tokens a stopped request had decoded; what each receipt sent), so that memory stays
flat however long the server runs. A request may ask for a plain run (``Job.mode = "off"``).

Nothing here speaks HTTP; :mod:`.server` does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.app.ask import ASK_MODES, AskResult, ask
from kvreg.app.discovery import RemoteSource
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.graft_receipt import receipt_sender
from kvreg.app.keyring import DEFAULT_KEY_NAME, load_signing_key
from kvreg.app.loader import load_engine
from kvreg.app.prompts import ChatEnding, ChatMessages, encode_chat, encode_prompt
from kvreg.app.serving.protocol import ApiError
from kvreg.app.serving.textstream import TextStream
from kvreg.app.serving.worker import ModelWorker, RunCounters
from kvreg.core.errors import KvregError, UsageError
from kvreg.remote.remotes import RemoteConfig
from kvreg.store.home import Home

if TYPE_CHECKING:
    from kvreg.engine.model_defaults import ModelDefaults
    from kvreg.engine.runtime import LoadedModel

log = logging.getLogger(__name__)

# once: a witness probe that passed is remembered per (artifact, config) and repeat grafts skip it;
# always: every graft probes (kvreg ask's behaviour)
PROBE_POLICIES = ("once", "always")
RECENT = 64  # entries ``stopped`` and ``receipts`` keep (the counts are in ``counters``)
# A model whose config states no context length: the most tokens a request may fill
UNKNOWN_CONTEXT_TOKENS = 1 << 20


class Cancelled(Exception):
    """The client went away before its request reached the model."""


@dataclass
class Job:
    """One request for the model: its prompt tokens, decoding settings and its text stream."""

    prompt: list[int]
    stream: TextStream
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_k: int = 0  # 0: all tokens
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    allowed_token_ids: frozenset[int] | None = None  # only these may be chosen; None: any
    mode: str | None = None  # the request's own mode (the ``kvreg`` extension); None: the server's
    on_delta: Callable[[], None] | None = None  # called (in the worker) after each token is taken
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass
class JobResult:
    job: Job
    result: AskResult
    receipt: dict[str, Any] | None = None  # with --receipts: queued (sent from its own thread), or why not
    cpu_seconds: float = 0.0  # the server process's CPU time while the model answered this request
    knowledge_text: str = ""  # knowledge mode: the start of the text that is the verified artifact's
    first_token_at: float | None = None  # time.perf_counter() when the first completion token came

    @property
    def prompt_tokens(self) -> int:
        return len(self.job.prompt)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens restored from kvreg (a knowledge graft's answer tokens are not prompt)."""
        return min(self.result.grafted_tokens, len(self.job.prompt))

    def facts(self) -> dict[str, Any]:
        """The answer's kvreg facts: the ``kvreg`` extension field of the response."""
        data = self.result.to_dict()
        art = data["artifact"]
        return {
            "requested_mode": data["requested_mode"],
            "mode": data["mode"],
            "fallback": data["fallback"],
            "reason": data["reason"],
            "error": data["error"],
            "artifact": None
            if art is None
            else {
                "ref": art["ref"],
                "digest": art["manifest_digest"],
                "verdict": art["verdict"],
                "verifier": art["verifier"],
                "signers": art.get("signers", []),
            },
            "grafted_tokens": data["grafted_tokens"],
            "prefilled_tokens": data["prefilled_tokens"],
            "decoded_tokens": data["decoded_tokens"],
            "cached_tokens": self.cached_tokens,
            "knowledge_text": self.knowledge_text,
            "probe": data["probe"],
            "refused_modes": data["refused_modes"],
            "remote": data["remote"],
            "receipt": self.receipt,
            "timings": data["timings"],
            "cpu_seconds": round(self.cpu_seconds, 6),
        }


class ModelHost:
    """The loaded model, the store, the remote, and the worker thread requests queue for."""

    def __init__(
        self,
        home: Home,
        model: str | Path,
        engine: EngineOptions,
        *,
        name: str | None = None,
        mode: str = "auto",
        remote: RemoteSource | None = None,
        probe: str = "once",
        receipts: str | None = None,
        receipt_key: str = DEFAULT_KEY_NAME,
        feedback: Feedback | None = None,
    ) -> None:
        if mode not in ASK_MODES:
            raise UsageError(f"unknown mode {mode!r}", hint=f"choose one of: {', '.join(ASK_MODES)}")
        if probe not in PROBE_POLICIES:
            raise UsageError(f"unknown probe policy {probe!r}", hint="choose once or always")
        self.home, self.mode, self.remote, self.probe = home, mode, remote, probe
        self.receipts_to, self.receipt_key = receipts, receipt_key
        if receipts is not None:
            RemoteConfig(home).get(receipts)  # NotFoundError with the command that adds it, before loading
            load_signing_key(home, receipt_key)  # the key that signs them must exist
        self.name = name or str(model)
        self.lm: LoadedModel
        self.lm, self.load_seconds = load_engine(feedback or Silent(), model, engine.for_new(), home)
        cfg = self.lm.model.config
        text_cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        self.context_length = int(getattr(text_cfg, "max_position_embeddings", 0) or 0)
        self.executor = ModelWorker()
        # Receipts go out from their own thread: the next request does not wait for the registry.
        self.receipt_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvreg-receipts")
        self.counters = RunCounters()
        self.receipts: deque[dict[str, Any]] = deque(maxlen=RECENT)  # what the last receipts sent
        self.stopped: deque[int] = deque(maxlen=RECENT)  # the last requests cut short: tokens decoded
        self.running: Job | None = None  # the request on the model now

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.receipt_executor.shutdown(wait=True)

    # --- prompts --------------------------------------------------------------------------

    def chat_tokens(self, messages: list[dict[str, str]], ending: ChatEnding = "generation") -> list[int]:
        """The conversation's tokens; by default with a new assistant turn after it, as OpenAI's API
        answers a conversation whatever its last turn (``kvreg.app.prompts.encode_chat``)."""
        try:
            return encode_chat(self.lm, ChatMessages.parse(messages, source="messages"), ending)
        except KvregError as exc:
            raise ApiError(exc.message, param="messages") from None

    def text_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            return encode_prompt(self.lm, prompt)
        vocab = len(self.lm.tokenizer)
        if not prompt or any(not 0 <= t < vocab for t in prompt):
            raise ApiError(f"prompt token ids must be a non-empty list in [0, {vocab})", param="prompt")
        return list(prompt)

    def check_biases(self, biases: dict[int, float]) -> None:
        """``ApiError`` for a ``logit_bias`` token id outside the vocabulary."""
        vocab = len(self.lm.tokenizer)
        outside = sorted(t for t in biases if not 0 <= t < vocab)
        if outside:
            raise ApiError(
                f"logit_bias names token ids outside the vocabulary [0, {vocab}): {outside[:5]}",
                param="logit_bias",
            )

    def new_stream(
        self,
        max_tokens: int,
        stops: tuple[str, ...] = (),
        *,
        stop_ids: Iterable[int] = (),
        ignore_eos: bool = False,
        min_tokens: int = 0,
        include_stop: bool = False,
        skip_special: bool = True,
    ) -> TextStream:
        """The text stream of one completion: it ends at the model's end-of-turn ids (:attr:`end_ids`,
        unless ``ignore_eos``), at ``stop_ids`` or a stop string (not before ``min_tokens``
        tokens), or at ``max_tokens``; decoded with special tokens skipped unless ``skip_special``
        is false (``kvreg.app.serving.textstream``)."""

        def decode(ids: Sequence[int]) -> str:
            return str(self.lm.tokenizer.decode(list(ids), skip_special_tokens=skip_special))

        return TextStream(
            decode,
            max_tokens,
            stops,
            eos=self.end_ids,
            stop_ids=frozenset(stop_ids),
            ignore_eos=ignore_eos,
            min_tokens=min_tokens,
            include_stop=include_stop,
        )

    @cached_property
    def generation_defaults(self) -> ModelDefaults:
        """The model's end-of-turn ids and the sampling defaults of its ``generation_config.json``
        (``kvreg.engine.model_defaults``), read once."""
        from kvreg.engine.model_defaults import model_defaults

        return model_defaults(self.lm.path, self.lm.tokenizer.eos_token_id)

    @property
    def end_ids(self) -> frozenset[int]:
        """The token ids that end the model's turn: its tokenizer's EOS and every EOS id of its
        generation config (Llama 3's ``<|eot_id|>``, Gemma's ``<end_of_turn>``)."""
        return self.generation_defaults.end_ids

    @property
    def sampling_defaults(self) -> dict[str, Any]:
        """The sampling settings the model ships (``temperature``, ``top_p``, ``top_k``, ``min_p``,
        ``repetition_penalty``, ``max_tokens``: only those its generation config sets), applied to
        what a request leaves out; a plain dict, as ``/v1/models`` shows it."""
        return self.generation_defaults.as_dict()

    def request_mode(self, asked: str | None) -> str:
        """The mode a request runs in: the server's, or ``off`` when the request asks for a plain run."""
        if asked is None or asked == self.mode:
            return self.mode
        if asked == "off":
            return "off"
        raise ApiError(
            f"kvreg.mode {asked!r} is not allowed: this server runs {self.mode!r}; "
            "a request may ask for 'off'",
            param="kvreg",
            code="unsupported_value",
        )

    def check_length(
        self,
        prompt: Sequence[int],
        max_tokens: int | None,
        default: int | None = None,
        *,
        prompt_param: str = "messages",
        max_param: str = "max_tokens",
    ) -> int:
        """The completion's token limit. ``max_tokens`` as the request asks, refused (400
        ``context_length_exceeded``) when the prompt and it do not fit the model's context;
        unset: ``default`` (the server's), else the model's ``max_new_tokens``, capped at the rest
        of the context, else the rest of the context (as vLLM). A prompt that leaves no room for
        one token is refused (``prompt_param`` named; ``max_param`` for a limit that does not fit)."""
        if not prompt:
            raise ApiError("the prompt has no tokens", param="prompt")
        room = self.context_length - len(prompt) if self.context_length else UNKNOWN_CONTEXT_TOKENS
        if room < 1:
            raise ApiError(
                f"this model's maximum context length is {self.context_length} tokens; the prompt has "
                f"{len(prompt)} tokens, which leaves no room for a completion",
                param=prompt_param,
                code="context_length_exceeded",
            )
        if max_tokens is not None:
            if max_tokens > room:
                context = self.context_length or UNKNOWN_CONTEXT_TOKENS
                raise ApiError(
                    f"this model's maximum context length is {context} tokens; the request asks "
                    f"for {len(prompt)} prompt tokens and up to {max_tokens} completion tokens",
                    param=max_param,
                    code="context_length_exceeded",
                )
            return max_tokens
        limit = default if default is not None else self.generation_defaults.max_tokens
        return room if limit is None else min(limit, room)

    # --- the worker -----------------------------------------------------------------------

    def run(self, job: Job) -> JobResult:
        """Answer ``job`` on the model (in the worker thread): route, graft or not, decode."""
        if job.cancelled.is_set():
            self.counters.stop(started=False)
            log.info("serve: a request was skipped: its client left before it reached the model")
            raise Cancelled
        from kvreg.engine.sampling import Adjustments, Masks, sampler  # torch; the model is loaded by now

        adjust = Adjustments(
            job.logit_bias, job.presence_penalty, job.frequency_penalty, job.repetition_penalty
        )
        masks = Masks(job.allowed_token_ids, job.stream.min_tokens, job.stream.unwanted_early)
        choose = sampler(
            job.temperature,
            top_p=job.top_p,
            top_k=job.top_k,
            min_p=job.min_p,
            seed=job.seed,
            adjust=adjust,
            masks=masks,
            history=lambda: job.stream.tokens,
            prompt=job.prompt,
        )
        self.running = job
        try:
            return self._run(job, choose)
        finally:
            self.running = None

    @property
    def answered(self) -> int:
        """Requests run on the model."""
        return self.counters.answered

    def _run(self, job: Job, choose: Any) -> JobResult:
        first: list[float] = []

        def on_token(token: int) -> bool:
            if not first:
                first.append(time.perf_counter())
            self.executor.progress()
            more = job.stream.feed(token)
            if job.on_delta is not None:
                job.on_delta()
            return more and not job.cancelled.is_set()

        cpu = time.process_time()
        result = ask(
            self.lm,
            self.home,
            job.prompt,
            mode=job.mode or self.mode,
            remote=self.remote,
            max_new_tokens=job.stream.max_tokens,
            stop_at_eos=True,
            choose=choose,
            on_token=on_token,
            remember_probes=self.probe == "once",
        )
        job.stream.finish()
        cpu = time.process_time() - cpu
        receipt = self._send_receipt(result)
        self.counters.answer(result, prompt_tokens=len(job.prompt), completion_tokens=len(job.stream.tokens))
        if job.cancelled.is_set():
            self.counters.stop(started=True)
            self.stopped.append(len(job.stream.tokens))
            log.info("serve: a request was stopped after %d tokens: its client left", len(job.stream.tokens))
        return JobResult(
            job,
            result,
            receipt,
            cpu_seconds=cpu,
            knowledge_text=self._knowledge_text(job, result),
            first_token_at=first[0] if first else None,
        )

    def health_probe(self) -> int:
        """A forward pass of one token and a greedy step (in the worker, for ``/health``): the token
        chosen, or an error when the model fails or answers outside its vocabulary."""
        from kvreg.engine.router import plain_generate  # torch; the model is loaded by now

        tokenizer = self.lm.tokenizer
        start = next((t for t in (tokenizer.bos_token_id, tokenizer.eos_token_id) if t is not None), 0)
        tokens = plain_generate(self.lm, [int(start)], 1).tokens
        vocab = len(tokenizer)
        if len(tokens) != 1 or not 0 <= int(tokens[0]) < vocab:
            raise KvregError(f"the model answered {tokens!r} for one step, not a token of its vocabulary")
        return int(tokens[0])

    def _knowledge_text(self, job: Job, result: AskResult) -> str:
        """In knowledge mode, the start of the answer's text that is the artifact's (the rest was decoded)."""
        if result.used_mode != "knowledge":
            return ""
        # the artifact's tokens, as the stream spells them (special tokens as the request asked);
        # the text may end among them (a stop), or leave out a stop id decoded after them
        forced = len(result.completion_tokens) - len(result.generation.decoded.tokens)
        return job.stream.text[: len(job.stream.decode(job.stream.tokens[:forced]))]

    def _send_receipt(self, result: AskResult) -> dict[str, Any] | None:
        """Queue the graft's signed receipt for ``--receipts REMOTE``; what the answer says of it."""
        artifact, outcome = result.plan.artifact, result.generation.outcome
        if self.receipts_to is None or artifact is None or outcome is None:
            return None
        try:
            sender = receipt_sender(self.home, artifact, self.receipts_to, self.receipt_key)
        except KvregError as exc:
            log.warning("serve: no receipt for %s: %s", artifact.digest, exc.message)
            return {"remote": self.receipts_to, "queued": False, "reason": exc.message}
        if sender is None:
            return None
        plan, lm = result.plan, self.lm
        graft = {
            "graft_tokens": plan.graft_tokens,
            "prompt_tokens": plan.prompt_tokens,
            "decoded_tokens": result.decoded_tokens,
            "whole": plan.whole,
        }
        witness = "skipped" if outcome.probe is None else "pass"

        def send() -> None:
            sent = sender.send(Silent(), lm, witness=witness, check=None, graft=graft)
            if not sent.get("sent"):
                log.warning("serve: the receipt of %s was not sent: %s", artifact.digest, sent)
            self.counters.receipt(sent=bool(sent.get("sent")))
            self.receipts.append(sent)

        self.receipt_executor.submit(send)
        return {"remote": self.receipts_to, "queued": True, "witness": witness}
