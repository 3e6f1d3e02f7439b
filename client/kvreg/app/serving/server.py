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
for a plain run with ``{"kvreg": {"mode": "off"}}``. With an API key, every route answers
only requests that carry it as a bearer token (401 ``invalid_api_key`` otherwise).

:func:`serve_engine` is the ``kvreg engine serve`` use case: load the model, open the remote,
run uvicorn until interrupted. Nothing here touches the model directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kvreg.app.discovery import remote_source
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.keyring import DEFAULT_KEY_NAME
from kvreg.app.serving import protocol
from kvreg.app.serving.host import Cancelled, Job, JobResult, ModelHost
from kvreg.app.serving.protocol import ApiError, ChatRequest, CompletionRequest
from kvreg.core.errors import KvregError, UsageError
from kvreg.store.home import Home

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 128
#: The largest request body read (413 past it): far above any prompt a context window holds (a
#: 128K-token prompt is a few MiB of JSON), far below what would strain the server's memory.
MAX_REQUEST_BYTES = 32 << 20
CLIENT_CLOSED = 499  # the status logged for a request whose client left before its answer (nginx's)


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


def bearer_check(api_key: str | None) -> Callable[[Request], None]:
    """A dependency that refuses (401, OpenAI's ``invalid_api_key``) a request whose
    ``Authorization: Bearer`` is not ``api_key``; with no key, every request passes."""
    expected = None if api_key is None else api_key.encode("utf-8")

    def check(request: Request) -> None:
        if expected is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("utf-8"), expected):
            raise ApiError(
                "a valid API key is required: send 'Authorization: Bearer KEY' with the server's key",
                status=401,
                code="invalid_api_key",
            )

    return check


def create_app(
    host: ModelHost, *, default_max_tokens: int = DEFAULT_MAX_TOKENS, api_key: str | None = None
) -> FastAPI:
    """The FastAPI application serving ``host``'s model (every route behind ``api_key`` when given)."""
    app = FastAPI(
        title="kvreg engine serve",
        docs_url=None,
        redoc_url=None,
        max_body_size=MAX_REQUEST_BYTES,
        dependencies=[Depends(bearer_check(api_key))],
    )
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
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(host.executor, fn, *args)
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
        return await complete(body, request)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        return await complete(body, request)

    return app


async def _watch_disconnect(request: Request, job: Job, rid: str) -> None:
    """Wait for the client to go away (the body is read: the next ASGI message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancelled.set()
            log.info("serve: client of %s went away; its decoding stops at the next token", rid)
            return


async def _answer_or_drop(
    answer: Awaitable[JobResult], request: Request, job: Job, rid: str
) -> JobResult | None:
    """``answer``, or None if the client disconnects first: then the job is cancelled (it stops at
    its next token, or is skipped if it has not started)."""
    work = asyncio.ensure_future(answer)
    watch = asyncio.ensure_future(_watch_disconnect(request, job, rid))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        job.cancelled.set()
        raise
    finally:
        watch.cancel()
    if not work.done():  # the client left: nobody reads the answer
        work.add_done_callback(_drop_cancelled)
        return None
    return work.result()


async def _events(
    host: ModelHost, job: Job, rid: str, *, chat: bool, include_usage: bool
) -> AsyncIterator[bytes]:
    """The answer as server-sent events; marks the job cancelled if the client goes away."""
    loop = asyncio.get_running_loop()
    wake: asyncio.Queue[None] = asyncio.Queue()

    def woken() -> None:  # in the model's thread: wake the event loop
        loop.call_soon_threadsafe(wake.put_nowait, None)

    job.on_delta = woken
    future = loop.run_in_executor(host.executor, host.run, job)
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
            log.info("serve: client of %s went away; its decoding stops at the next token", rid)
            future.add_done_callback(_drop_cancelled)


def _drop_cancelled(future: asyncio.Future[Any]) -> None:
    """Read a cancelled job's outcome, so an error in it is logged rather than left unread."""
    with contextlib.suppress(Cancelled, asyncio.CancelledError):
        exc = future.exception()
        if exc is not None and not isinstance(exc, Cancelled):
            log.warning("serve: a cancelled request ended with %s", exc)


# --- the ``kvreg engine serve`` use case ----------------------------------------------------


@dataclass(frozen=True)
class EngineServeRequest:
    model: str | Path
    name: str | None = None  # the model id clients send (default: --model as given)
    remote: str | None = None
    namespaces: Sequence[str] = ()
    mode: str = "auto"
    probe: str = "once"  # once: remember passed witness probes; always: probe every graft
    receipts: str | None = None  # send each graft's signed receipt to this remote
    receipt_key: str = DEFAULT_KEY_NAME
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None  # None: no authentication (loopback, or behind a proxy that checks)
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    engine: EngineOptions = field(default_factory=EngineOptions)


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


def serve_engine(
    home: Home,
    request: EngineServeRequest,
    feedback: Feedback | None = None,
    on_ready: Callable[[str, ModelHost], None] | None = None,
) -> None:
    """Load the model, open the remote and serve the OpenAI API until interrupted."""
    feedback = feedback or Silent()
    if request.namespaces and request.remote is None:
        raise UsageError("--namespace needs --remote")
    sock = bind(request.host, request.port)
    with remote_source(home, request.remote, request.namespaces) as source:
        host = ModelHost(
            home,
            request.model,
            request.engine,
            name=request.name or str(request.model),
            mode=request.mode,
            probe=request.probe,
            receipts=request.receipts,
            receipt_key=request.receipt_key,
            remote=source,
            feedback=feedback,
        )
        try:
            app = create_app(host, default_max_tokens=request.default_max_tokens, api_key=request.api_key)
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
            bound_host, bound_port = sock.getsockname()[:2]
            where = f"[{bound_host}]" if ":" in bound_host else bound_host
            if on_ready is not None:
                on_ready(f"http://{where}:{bound_port}/v1", host)
            server.run(sockets=[sock])
        finally:
            host.close()
            sock.close()
