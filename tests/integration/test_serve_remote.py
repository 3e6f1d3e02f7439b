"""``kvreg engine serve --remote origin --receipts origin`` against a real registry, with the
bundled arithmetic model and the ``openai`` client: a home that has only a remote and a trust
policy answers a published question by routing over the registry, pulling lazily and fetching
only the chunks the graft reads; the answer says so, a repeat skips the remembered probe, and
each graft's signed receipt reaches the registry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from cli.helpers import kvreg

from .registry_server import Registry
from .test_ask_remote import BLOCK, _publish

pytestmark = pytest.mark.slow


@pytest.fixture
def served(registry: Registry, library: dict[str, Any], make_home) -> Iterator[tuple[str, Any, str]]:  # type: ignore[no-untyped-def]
    import threading

    import uvicorn

    from kvreg.app.discovery import remote_source
    from kvreg.app.engine_options import EngineOptions
    from kvreg.app.serving.host import ModelHost
    from kvreg.app.serving.server import bind, create_app
    from kvreg.engine.flywheel.model import model_path
    from kvreg.store.home import Home

    ns = _publish(registry, library, make_home)
    asking = make_home(registry, registry.user({ns: "read"}), trust={ns: library["public_key"]})
    kvreg(asking, "keys", "generate")
    home = Home(Path(asking))
    with remote_source(home, "origin", []) as source:
        host = ModelHost(
            home,
            model_path(),
            EngineOptions(block_size=int(BLOCK)),
            name="fw",
            remote=source,
            receipts="origin",
        )
        sock = bind("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(create_app(host), log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", host, ns
        finally:
            server.should_exit = True
            thread.join(60)
            host.close()
            sock.close()


def test_serve_routes_over_the_registry_pulls_lazily_and_sends_receipts(
    served: tuple[str, Any, str], library: dict[str, Any]
) -> None:
    from kvreg.engine.flywheel.task import ANSWER_MARK

    url, host, ns = served
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300)
    problem, manifest = library["problems"][0], library["manifests"][0]
    first = client.completions.create(model="fw", prompt=problem.question(), max_tokens=200, temperature=0)
    facts = first.model_extra["kvreg"]  # type: ignore[index]
    assert facts["mode"] == "knowledge" and facts["artifact"]["ref"] == f"{ns}/add-{problem.a}-{problem.b}"
    assert facts["artifact"]["digest"] == str(manifest.digest) and facts["artifact"]["verdict"] == "pass"
    assert first.choices[0].text.endswith(f"{ANSWER_MARK}{problem.answer}")
    remote = facts["remote"]
    assert [p["ref"] for p in remote["pulled"]] == [facts["artifact"]["ref"]]
    assert remote["fetched_objects"] == len(manifest.chunks)
    assert facts["probe"]["witness_equal"] is True
    assert facts["receipt"] == {"remote": "origin", "queued": True, "witness": "pass"}
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens

    again = client.completions.create(model="fw", prompt=problem.question(), max_tokens=200, temperature=0)
    facts2 = again.model_extra["kvreg"]  # type: ignore[index]
    assert again.choices[0].text == first.choices[0].text
    assert facts2["remote"]["pulled"] == [] and facts2["probe"]["skipped"] is True
    assert facts2["receipt"]["witness"] == "skipped"

    deadline = time.monotonic() + 60
    while len(host.receipts) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r["sent"] for r in host.receipts] == [True, True], host.receipts
