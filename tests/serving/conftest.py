"""A real ``kvreg engine serve`` application on loopback (uvicorn in a thread) over a tiny chat model.

The server holds the seed-0 tiny llama with the ChatML template (``tiny_models["llama-chat"]``),
block size 8, over a store whose trust policy allows one key (``Served.key``). It is shared by
the module's tests; each test names its own refs and prompts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn

from kvreg.app.engine_options import EngineOptions
from kvreg.app.serving.host import ModelHost
from kvreg.app.serving.server import bind, create_app
from kvreg.core.keys import SigningKey
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.home import Home

MODEL = "tiny-chat"
T = TypeVar("T")


@dataclass
class Served:
    url: str  # the OpenAI base URL, ending /v1
    host: ModelHost
    home: Home
    key: SigningKey

    def on_model(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in the server's model thread (between requests, never beside one)."""
        return self.host.executor.submit(fn, *args, **kwargs).result()


@contextlib.contextmanager
def on_loopback(app: Any) -> Iterator[str]:
    """``app`` under uvicorn on a free loopback port, in a thread: its root URL (no ``/v1``)."""
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


@contextlib.contextmanager
def running(model: Path, name: str, root: Path, block_size: int | None = 8) -> Iterator[Served]:
    """A server on ``model`` (as ``name``) over a fresh store under ``root`` trusting one new key."""
    home = Home(root / "home").ensure()
    key = SigningKey.generate()
    policy = TrustPolicy()
    policy.allow("*", key.public_key)
    save_trust_policy(policy, home.trust_path)
    host = ModelHost(home, model, EngineOptions(block_size=block_size), name=name)
    try:
        with on_loopback(create_app(host, default_max_tokens=16)) as root_url:
            yield Served(f"{root_url}/v1", host, home, key)
    finally:
        host.close()


@pytest.fixture(scope="module")
def served(tiny_models: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with running(Path(tiny_models["llama-chat"]), MODEL, Path(tmp_path_factory.mktemp("serve"))) as s:
        yield s
