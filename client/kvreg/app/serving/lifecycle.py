"""The ``kvreg engine serve`` use case: listen at once, load the model behind, serve, stop.

:class:`EngineServer` binds the socket and starts uvicorn at once over ``.loading.Starting``
(``/health`` 503 ``loading``, every other route 503 ``model_loading``), opens the remote,
loads the model in a thread of its own, then hands the requests to :func:`.server.create_app`'s
application: ``/health`` turns 200 and ``on_ready`` is told. A model that fails to load stops
the server, and :meth:`EngineServer.run` raises the load's error. :meth:`EngineServer.stop`
(or SIGINT, SIGTERM) stops it; a model still loading is left to its daemon thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from kvreg.app.discovery import RemoteSource, remote_source
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.keyring import DEFAULT_KEY_NAME
from kvreg.app.serving.host import ModelHost
from kvreg.app.serving.loading import Starting
from kvreg.app.serving.server import DEFAULT_MAX_TOKENS, bind, create_app
from kvreg.core.errors import KvregError, UsageError
from kvreg.store.home import Home

log = logging.getLogger(__name__)


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
    default_max_tokens: int | None = DEFAULT_MAX_TOKENS
    max_queue: int | None = None  # requests that may wait besides the running one; None: by CPUs
    engine: EngineOptions = field(default_factory=EngineOptions)


class EngineServer:
    """One ``kvreg engine serve`` process's server (see the module's docstring)."""

    def __init__(self, home: Home, request: EngineServeRequest, feedback: Feedback | None = None) -> None:
        if request.namespaces and request.remote is None:
            raise UsageError("--namespace needs --remote")
        if request.max_queue is not None and request.max_queue < 0:
            raise UsageError("--max-queue must be 0 or more")
        self.home, self.request, self.feedback = home, request, feedback or Silent()
        self.front = Starting(request.api_key)
        self.server = uvicorn.Server(uvicorn.Config(self.front, log_level="warning", lifespan="off"))
        self.host: ModelHost | None = None
        self.failure: BaseException | None = None
        self._closed = threading.Lock()
        self._stopping = False

    def stop(self) -> None:
        self.server.should_exit = True

    def run(
        self,
        on_listening: Callable[[str], None] | None = None,
        on_ready: Callable[[str, ModelHost], None] | None = None,
    ) -> None:
        """Serve until stopped; ``on_listening(url)`` once the socket listens, ``on_ready(url, host)``
        once the model answers. Raises the load's error if the model could not be loaded."""
        request = self.request
        sock = bind(request.host, request.port)
        bound_host, bound_port = sock.getsockname()[:2]
        url = f"http://{f'[{bound_host}]' if ':' in bound_host else bound_host}:{bound_port}/v1"
        try:
            with remote_source(self.home, request.remote, request.namespaces) as source:
                loader = threading.Thread(
                    target=self._load, args=(source, url, on_ready), name="kvreg-load", daemon=True
                )
                if on_listening is not None:
                    on_listening(url)
                loader.start()
                self.server.run(sockets=[sock])
        finally:
            with self._closed:
                self._stopping = True
                if self.host is not None:
                    self.host.close()
            sock.close()
        if self.failure is not None:
            raise self.failure

    def _load(
        self, source: RemoteSource | None, url: str, on_ready: Callable[[str, ModelHost], None] | None
    ) -> None:
        request = self.request
        host: ModelHost | None = None
        try:
            host = ModelHost(
                self.home,
                request.model,
                request.engine,
                name=request.name or str(request.model),
                mode=request.mode,
                probe=request.probe,
                receipts=request.receipts,
                receipt_key=request.receipt_key,
                remote=source,
                feedback=self.feedback,
            )
            app = create_app(
                host,
                default_max_tokens=request.default_max_tokens,
                api_key=request.api_key,
                max_queue=request.max_queue,
            )
        except BaseException as exc:
            if host is not None:
                host.close()
            message = exc.message if isinstance(exc, KvregError) else f"{type(exc).__name__}: {exc}"
            log.error("serve: the model did not load: %s", message)
            self.failure = exc
            self.front.failed(message)
            self.stop()
            return
        with self._closed:
            if self._stopping:  # stopped while loading
                host.close()
                return
            self.host = host
        self.front.ready(app)
        if on_ready is not None:
            on_ready(url, host)


def serve_engine(
    home: Home,
    request: EngineServeRequest,
    feedback: Feedback | None = None,
    on_ready: Callable[[str, ModelHost], None] | None = None,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Listen, load the model in the background, serve the OpenAI API until interrupted."""
    EngineServer(home, request, feedback).run(on_listening, on_ready)
