"""The HTTP face of ``kvreg engine serve``: OpenAI's chat and completion endpoints on one model.

:func:`create_app` builds the FastAPI application over a :class:`~.host.ModelHost`:
``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST /v1/completions``, with and
without streaming (server-sent events in OpenAI's chunk format, ending ``data: [DONE]``).
Prompts are tokenized and answered in the host's one worker thread, in arrival order; the
event loop only waits, so many clients can be connected while one request runs. A client
that disconnects mid-stream marks its job cancelled and the decoding stops at its next token.
Every error is OpenAI's error object with its status. Each answer carries kvreg's facts in
the ``kvreg`` field (and, when not streamed, ``x-kvreg-*`` headers). A non-streamed request
whose client disconnects is cancelled the same way, and no answer is sent. A request may ask
for a plain run with ``{"kvreg": {"mode": "off"}}``.

In front of the routes, ``.gate`` decides from the headers alone, before any body is read: the
API key (every route but ``/health``: 401 ``invalid_api_key``), a declared body over the limit
(413) and a place in the bounded queue for the routes that use the model (429 with
``Retry-After``; ``.admission``). A client that leaves while its request waits for the model
gives its place back at once and the model never runs it. The operator's routes are in
``.ops`` (``/health``, ``/version``, ``/metrics``) and ``.tokenize_routes`` (``/tokenize``,
``/detokenize``); ``kvreg engine serve`` itself (listen, load in the background, serve) is
``.lifecycle``. Nothing here touches the model directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

from kvreg.app.serving import protocol
from kvreg.app.serving import trace as traces
from kvreg.app.serving.admission import Admission, default_max_queue
from kvreg.app.serving.gate import Gate
from kvreg.app.serving.health import PROBE_TIMEOUT, STALL_SECONDS, HealthCheck
from kvreg.app.serving.host import Cancelled, Job, JobResult, ModelHost
from kvreg.app.serving.metrics import ServeMetrics
from kvreg.app.serving.ops import add_operation_routes
from kvreg.app.serving.protocol import ApiError, ChatRequest, CompletionRequest
from kvreg.app.serving.tokenize_routes import add_tokenize_routes
from kvreg.core.errors import KvregError, UsageError

log = logging.getLogger(__name__)

#: Completion tokens when a request does not say: None, the model's ``max_new_tokens`` or the
#: rest of the context (vLLM's default); ``kvreg engine serve --max-tokens`` sets a number.
DEFAULT_MAX_TOKENS: int | None = None
#: The largest request body read (413 past it): far above any prompt a context window holds (a
#: 128K-token prompt is a few MiB of JSON), far below what would strain the server's memory.
MAX_REQUEST_BYTES = 32 << 20
CLIENT_CLOSED = 499  # the status logged for a request whose client left before its answer (nginx's)
T = TypeVar("T")


class ClientGone(Exception):
    """The client left while its request waited for the model: it was taken off the queue."""


class _GatedApp(FastAPI):
    """FastAPI with the front door (``.gate``) as its outermost layer: it answers from the headers
    before FastAPI's own layers (its body limit would otherwise answer a declared oversize body
    with plain text, and before the API key)."""

    front: Callable[[ASGIApp], ASGIApp] | None = None

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        return stack if self.front is None else self.front(stack)


def _from_kvreg(exc: KvregError) -> ApiError:
    if isinstance(exc, UsageError):
        return ApiError(exc.message, code=exc.code)
    return ApiError(exc.message, status=500, type="server_error", code=exc.code)


def _header(value: object) -> str:
    text = " ".join(str(value).split())
    return text.encode("ascii", "replace").decode("ascii")[:512]


def _headers(res: JobResult) -> dict[str, str]:
    facts = res.facts()
    out = {
        "x-kvreg-mode": facts["mode"],
        "x-kvreg-cached-tokens": str(res.cached_tokens),
        "x-kvreg-grafted-tokens": str(facts["grafted_tokens"]),
        "x-kvreg-prefilled-tokens": str(facts["prefilled_tokens"]),
    }
    art = facts["artifact"]
    if art is not None:
        out["x-kvreg-artifact"] = _header(art["digest"])
        if art["ref"]:
            out["x-kvreg-ref"] = _header(art["ref"])
        if art["verdict"]:
            out["x-kvreg-verdict"] = _header(art["verdict"])
    if facts["reason"]:
        out["x-kvreg-fallback-reason"] = _header(facts["reason"])
    return out


def create_app(
    host: ModelHost,
    *,
    default_max_tokens: int | None = DEFAULT_MAX_TOKENS,
    api_key: str | None = None,
    max_queue: int | None = None,
    health_timeout: float = PROBE_TIMEOUT,
    health_stall: float = STALL_SECONDS,
) -> FastAPI:
    """The FastAPI application serving ``host``'s model: every route but ``/health`` behind
    ``api_key`` when given; at most ``max_queue`` requests waiting for the model besides the one
    it runs (default: ``.admission.default_max_queue``); ``/health`` judged by ``.health``."""
    admission = Admission(default_max_queue() if max_queue is None else max_queue)
    metrics = ServeMetrics(host, admission)
    app = _GatedApp(
        title="kvreg engine serve", docs_url=None, redoc_url=None, max_body_size=MAX_REQUEST_BYTES
    )
    app.front = partial(
        Gate, api_key=api_key, max_body=MAX_REQUEST_BYTES, admission=admission, metrics=metrics
    )
    app.state.admission, app.state.metrics = admission, metrics
    created = int(time.time())

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        json_error = first.get("type") == "json_invalid"
        if json_error:
            message = "the request body is not valid JSON"
        elif not loc:  # the body as a whole: none, or not an object
            message = f"the request body must be a JSON object ({first.get('msg')})"
        else:
            message = f"{'.'.join(loc)}: {first.get('msg')}"
        err = ApiError(message, param=None if json_error or not loc else loc[0], code="invalid_request")
        return JSONResponse(err.body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        err = ApiError(
            str(exc.detail), status=exc.status_code, code="not_found" if exc.status_code == 404 else None
        )
        return JSONResponse(err.body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("serve: unexpected error", exc_info=exc)
        err = ApiError(f"internal error: {type(exc).__name__}", status=500, type="server_error")
        return JSONResponse(err.body(), status_code=500)

    def model_card() -> dict[str, Any]:
        lm = host.lm
        return {
            "id": host.name,
            "object": "model",
            "created": created,
            "owned_by": "kvreg",
            "kvreg": {
                "model_fingerprint": str(lm.model_fp),
                "tokenizer_fingerprint": str(lm.tokenizer_fp),
                "config_fingerprint": str(lm.config.fingerprint),
                "block_size": lm.config.block_size,
                "context_length": host.context_length,
                "mode": host.mode,
                "probe": host.probe,
                # what a request leaves out comes from the model's generation config (vLLM's default)
                "sampling_defaults": host.sampling_defaults,
                "end_token_ids": sorted(host.end_ids),
            },
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        if model_id != host.name:
            raise ApiError(
                f"the model {model_id!r} does not exist", status=404, param="model", code="model_not_found"
            )
        return model_card()

    async def in_worker(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await _in_worker(host, fn, *args)
        except KvregError as exc:
            raise _from_kvreg(exc) from None

    async def complete(body: ChatRequest | CompletionRequest, request: Request) -> Any:
        chat = isinstance(body, ChatRequest)
        body.check()
        mode = host.request_mode(body.kvreg_mode())
        if body.model != host.name:
            raise ApiError(
                f"the model {body.model!r} does not exist; this server serves {host.name!r}",
                status=404,
                param="model",
                code="model_not_found",
            )
        biases = body.biases()
        host.check_biases(biases)
        body.check_token_ids(len(host.lm.tokenizer))
        if isinstance(body, ChatRequest):
            prompt = await in_worker(host.chat_tokens, body.conversation(), body.rendering())
        else:
            prompt = await in_worker(host.text_tokens, body.text_or_tokens())
        # the request's max_tokens, else the server's default, else the rest of the context (vLLM's)
        max_tokens = host.check_length(
            prompt,
            body.limit(),
            default_max_tokens,
            prompt_param="messages" if chat else "prompt",
            max_param=body.limit_param(),
        )
        min_tokens = body.min_tokens or 0
        if min_tokens > max_tokens:
            raise ApiError(
                f"min_tokens={min_tokens} is more than the {max_tokens} completion tokens allowed",
                param="min_tokens",
            )
        sampling = body.sampling(host.sampling_defaults)  # the request's, else the model's defaults
        job = Job(
            prompt=prompt,
            stream=host.new_stream(
                max_tokens,
                body.stops(),
                stop_ids=body.stop_token_ids or (),
                ignore_eos=bool(body.ignore_eos),
                min_tokens=min_tokens,
                include_stop=bool(body.include_stop_str_in_output),
                skip_special=body.skip_special_tokens is not False,
            ),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            min_p=sampling.min_p,
            repetition_penalty=sampling.repetition_penalty,
            seed=body.seed,
            logit_bias=biases,
            presence_penalty=body.presence_penalty or 0.0,
            frequency_penalty=body.frequency_penalty or 0.0,
            allowed_token_ids=None if body.allowed_token_ids is None else frozenset(body.allowed_token_ids),
            mode=mode,
        )
        rid = body.response_id("chatcmpl" if chat else "cmpl")
        if body.stream:
            return StreamingResponse(
                _events(host, job, rid, chat=chat, include_usage=body.include_usage()),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
            )
        res = await _answer_or_drop(in_worker(host.run, job), request, job, rid)
        if res is None:  # the client left: this response is never sent
            return Response(status_code=CLIENT_CLOSED)
        use = protocol.usage(res.prompt_tokens, len(job.stream.tokens), res.cached_tokens)
        build = protocol.chat_answer if chat else protocol.completion_answer
        finish = job.stream.finish_reason or "length"
        payload = build(rid, host.name, job.stream.text, finish, use, res.facts())
        return JSONResponse(payload, headers=_headers(res))

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request) -> Any:
        return await _unless_gone(complete(body, request))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        return await _unless_gone(complete(body, request))

    settings = {
        "max_queue": admission.max_queue,
        "default_max_tokens": default_max_tokens,
        "max_body_bytes": MAX_REQUEST_BYTES,
        "api_key_required": api_key is not None,
    }
    health = HealthCheck(host, timeout=health_timeout, stall=health_stall)
    add_operation_routes(app, host, metrics, health, settings)
    add_tokenize_routes(app, host, in_worker)
    return app


async def _unless_gone(answer: Awaitable[Any]) -> Any:
    """``answer``, or an empty 499 when its client left while it waited for the model."""
    try:
        return await answer
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED)


async def _in_worker(host: ModelHost, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the model's thread. If the client leaves while it still waits there, it is
    taken off the queue (never run) and :class:`ClientGone` is raised; once it runs, it runs to
    its end (a job stops at its next token: whoever watches the job cancels it)."""
    future = host.executor.submit(fn, *args)
    waiting = asyncio.wrap_future(future)
    trace = traces.current()
    if trace is None:
        return await waiting
    gone = asyncio.ensure_future(trace.gone.wait())
    either: set[asyncio.Future[Any]] = {waiting, gone}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not waiting.done():  # the client left
        if future.cancel():
            trace.leave("queued")
            raise ClientGone
        trace.leave("running")
    return await waiting


async def _disconnected(request: Request) -> None:
    """Wait for the client to go away (the body is read: the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _answer_or_drop(
    answer: Awaitable[JobResult], request: Request, job: Job, rid: str
) -> JobResult | None:
    """``answer``, or None if the client disconnects first: then the job is cancelled (it stops at
    its next token, or ``answer``, a :func:`_in_worker`, takes it off the queue if it has not
    started)."""
    trace = traces.current()
    work = asyncio.ensure_future(answer)
    watch = asyncio.ensure_future(_disconnected(request) if trace is None else trace.gone.wait())
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        job.cancelled.set()
        raise
    finally:
        watch.cancel()
    if not work.done():  # the client left: nobody reads the answer
        job.cancelled.set()
        log.info("serve: client of %s went away; its decoding stops at the next token", rid)
        work.add_done_callback(_drop_cancelled)
        return None
    res = work.result()
    if trace is not None:
        trace.result = res
    return res


async def _events(
    host: ModelHost, job: Job, rid: str, *, chat: bool, include_usage: bool
) -> AsyncIterator[bytes]:
    """The answer as server-sent events; marks the job cancelled if the client goes away."""
    loop = asyncio.get_running_loop()
    wake: asyncio.Queue[None] = asyncio.Queue()

    def woken() -> None:  # in the model's thread: wake the event loop
        loop.call_soon_threadsafe(wake.put_nowait, None)

    job.on_delta = woken
    trace = traces.current()
    submitted = host.executor.submit(host.run, job)
    future = asyncio.wrap_future(submitted)
    future.add_done_callback(lambda _: wake.put_nowait(None))
    model = host.name
    try:
        yield protocol.sse(protocol.chunk(rid, model, chat=chat, first=True))
        while not future.done():
            await wake.get()
            piece = job.stream.delta()
            if piece:
                yield protocol.sse(protocol.chunk(rid, model, chat=chat, text=piece))
        try:
            res: JobResult = future.result()
        except KvregError as exc:
            yield protocol.sse(_from_kvreg(exc).body())
            yield protocol.DONE
            return
        except Exception as exc:  # the stream has started: the error goes in it, as an event
            log.exception("serve: unexpected error in %s", rid, exc_info=exc)
            err = ApiError(f"internal error: {type(exc).__name__}", status=500, type="server_error")
            yield protocol.sse(err.body())
            yield protocol.DONE
            return
        if trace is not None:
            trace.result = res
        piece = job.stream.delta()
        if piece:
            yield protocol.sse(protocol.chunk(rid, model, chat=chat, text=piece))
        finish = job.stream.finish_reason or "length"
        yield protocol.sse(protocol.chunk(rid, model, chat=chat, finish=finish, facts=res.facts()))
        if include_usage:
            use = protocol.usage(res.prompt_tokens, len(job.stream.tokens), res.cached_tokens)
            yield protocol.sse(protocol.chunk(rid, model, chat=chat, use=use, no_choices=True))
        yield protocol.DONE
    finally:
        if not future.done():
            job.cancelled.set()
            queued = submitted.cancel()  # still waiting: off the queue, never run
            if trace is not None:
                trace.leave("queued" if queued else "running")
            log.info("serve: client of %s went away; its decoding stops at the next token", rid)
            future.add_done_callback(_drop_cancelled)


def _drop_cancelled(future: asyncio.Future[Any]) -> None:
    """Read a cancelled job's outcome, so an error in it is logged rather than left unread."""
    with contextlib.suppress(Cancelled, ClientGone, asyncio.CancelledError):
        exc = future.exception()
        if exc is not None and not isinstance(exc, Cancelled | ClientGone):
            log.warning("serve: a cancelled request ended with %s", exc)


# --- the listening socket ---------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror}", hint="choose another --port"
        ) from None
    sock.listen(128)
    return sock
