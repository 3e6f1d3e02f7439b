"""``kvreg engine``: the engine as a long-lived process; ``kvreg engine serve`` for now.

``serve`` listens at once, loads one model under its pinned config in the background and
answers OpenAI's ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models`` on it,
each request routed and grafted as ``kvreg ask`` does (``kvreg.app.serving``), plus the
operator's ``/health``, ``/version``, ``/metrics``, ``/tokenize`` and ``/detokenize``. It
prints where it listens, then when it is ready, and blocks until interrupted (Ctrl-C).
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from kvreg import console as output
from kvreg.cli import common
from kvreg.cli.ask import AskMode
from kvreg.cli.engine_options import (
    AttnOpt,
    BlockSizeOpt,
    DeviceOpt,
    DtypeOpt,
    ProfileOpt,
    ThreadsOpt,
    bundle,
)
from kvreg.core.errors import UsageError


class ProbePolicy(enum.StrEnum):
    once = "once"
    always = "always"


def serve_cmd(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", metavar="MODEL", help=common.MODEL_HELP)],
    name: Annotated[
        str | None,
        typer.Option(
            "--name", metavar="ID", help="The model id clients send and /v1/models lists (default: --model)."
        ),
    ] = None,
    remote: common.RouteRemoteOpt = None,
    namespace: common.RouteNamespaceOpt = None,
    mode: Annotated[
        AskMode,
        typer.Option("--mode", help="How each request uses the store, as for kvreg ask."),
    ] = AskMode.auto,
    probe: Annotated[
        ProbePolicy,
        typer.Option(
            "--probe",
            help="once: a witness probe that passed is remembered in the store per (artifact, config) "
            "and repeat grafts skip it; always: every graft probes.",
        ),
    ] = ProbePolicy.once,
    receipts: Annotated[
        str | None,
        typer.Option(
            "--receipts",
            metavar="REMOTE",
            help="Send a signed graft receipt to REMOTE after every graft (from a thread of its own).",
        ),
    ] = None,
    key: Annotated[
        str, typer.Option("--key", metavar="NAME", help="With --receipts: the signing key's name.")
    ] = "default",
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; keep it on loopback unless behind a proxy.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0 picks a free one).")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="KVREG_ENGINE_API_KEY",
            metavar="KEY",
            show_envvar=True,
            help="Answer only requests that carry 'Authorization: Bearer KEY' (OpenAI clients send "
            "OPENAI_API_KEY so); prefer the environment variable, which ps does not show.",
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=1,
            max=1 << 20,
            metavar="N",
            help="Completion tokens when a request does not say (default: the model's max_new_tokens, "
            "else the rest of the context, as vLLM).",
        ),
    ] = None,
    max_queue: Annotated[
        int | None,
        typer.Option(
            "--max-queue",
            min=0,
            max=1 << 16,
            metavar="N",
            help="Requests for the model that may wait besides the one it runs; past N, 429 with "
            "Retry-After (default: 4 per usable CPU, at least 4).",
        ),
    ] = None,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    block_size: BlockSizeOpt = None,
) -> None:
    """Serve a model over the OpenAI API, with the verified registry as its prompt cache.

    POST /v1/chat/completions and /v1/completions (streamed or not), GET
    /v1/models; greedy answers are byte-identical to an uncached run. GET /health
    answers 503 until the model is loaded and answers (no key needed); GET
    /metrics is Prometheus' text format (docs/serving.md).

    Examples:

      kvreg engine serve --model smollm2 --port 8000

      OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=unused python my_app.py

      kvreg engine serve --model ./model --remote origin -n team --mode knowledge

      KVREG_ENGINE_API_KEY=$(openssl rand -hex 16) kvreg engine serve --model smollm2
    """
    from kvreg.app.serving.lifecycle import EngineServeRequest, serve_engine  # FastAPI, uvicorn

    if namespace and remote is None:
        raise UsageError("--namespace needs --remote")
    out = output.get(ctx)
    request = EngineServeRequest(
        model=model,
        name=name,
        remote=remote,
        namespaces=tuple(namespace or ()),
        mode=str(mode),
        probe=str(probe),
        receipts=receipts,
        receipt_key=key,
        host=host,
        port=port,
        api_key=api_key or None,
        default_max_tokens=max_tokens,
        max_queue=max_queue,
        engine=bundle(dtype, threads, attn, profile, device, block_size),
    )

    def listening(url: str) -> None:
        out.note(f"kvreg engine listening at {url}; loading {model} (GET /health answers 503 until ready)")

    def ready(url: str, served: object) -> None:
        out.note(f"kvreg engine serving {request.name or model} at {url} (mode {mode}); Ctrl-C stops it")

    serve_engine(common.home(ctx), request, out, on_ready=ready, on_listening=listening)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="The engine as a server: serve (OpenAI-compatible).", no_args_is_help=True)
    group.command("serve")(serve_cmd)
    app.add_typer(group, name="engine")
