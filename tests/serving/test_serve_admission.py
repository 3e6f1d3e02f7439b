"""What ``kvreg engine serve`` refuses from the headers alone, and its bounded queue: the API
key and the body limit checked before a body is read (raw sockets that never send it), 429
with ``Retry-After`` past ``max_queue``, and a client that leaves while queued giving its place
back at once (the model never runs its request)."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import httpx
import openai
import pytest

from kvreg.app.serving.server import MAX_REQUEST_BYTES, create_app
from kvreg.engine.router import plain_generate
from serving.conftest import MODEL, Served, on_loopback
from serving.wire import (
    model_thread_held,
    port_of,
    read_answer,
    request_head,
    sample,
    scrape,
    wait_for,
)

KEY = "s3cret-key"


def _greedy(served: Served, prompt: str, steps: int) -> str:
    lm = served.host.lm
    tokens = served.on_model(served.host.text_tokens, prompt)
    decoded = served.on_model(plain_generate, lm, tokens, steps, stop_at_eos=True)
    return str(lm.tokenizer.decode(decoded.tokens, skip_special_tokens=True))


@pytest.fixture(scope="module")
def keyed(served: Served) -> Any:
    """A second application over the same model, behind an API key, on loopback."""
    with on_loopback(create_app(served.host, api_key=KEY)) as root:
        yield root


def test_a_wrong_key_is_refused_before_the_body_is_read(keyed: str) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {KEY}"}):
        # The body is declared (1 MiB, under the limit) and never sent: the 401 cannot wait for it.
        with socket.create_connection(("127.0.0.1", port_of(keyed)), timeout=30) as sock:
            sock.sendall(request_head("/v1/completions", 1 << 20, headers))
            answer = read_answer(sock)
        assert answer.status == 401, (headers, answer)
        assert answer.json()["error"]["code"] == "invalid_api_key"
    # Also past the body limit: the key is checked first.
    with socket.create_connection(("127.0.0.1", port_of(keyed)), timeout=30) as sock:
        sock.sendall(request_head("/v1/chat/completions", 33 << 20, {"authorization": "Bearer wrong"}))
        assert read_answer(sock).status == 401


def test_every_route_but_health_wants_the_key(keyed: str) -> None:
    good = {"Authorization": f"Bearer {KEY}"}
    for path in ("/openapi.json", "/version", "/metrics", "/v1/models", f"/v1/models/{MODEL}"):
        refused = httpx.get(keyed + path, timeout=60)
        assert refused.status_code == 401, path
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(keyed + path, headers=good, timeout=60).status_code == 200, path
    for path in ("/tokenize", "/detokenize"):
        assert httpx.post(keyed + path, json={"prompt": "x", "tokens": [1]}, timeout=60).status_code == 401
    assert httpx.get(keyed + "/health", timeout=60).status_code == 200
    ask = {"model": MODEL, "prompt": "x", "max_tokens": 1, "temperature": 0}
    assert httpx.post(keyed + "/v1/completions", json=ask, headers=good, timeout=120).status_code == 200
    samples = scrape(keyed, good)
    assert sample(samples, "kvreg_engine_requests_rejected_total", reason="auth") >= 7


def test_a_body_over_the_limit_is_refused_413_before_it_is_read(served: Served) -> None:
    root = served.url.removesuffix("/v1")
    with socket.create_connection(("127.0.0.1", port_of(root)), timeout=30) as sock:
        sock.sendall(request_head("/v1/completions", 33 << 20))  # 33 MiB declared, nothing sent
        answer = read_answer(sock)
    assert answer.status == 413
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_too_large"
    assert str(MAX_REQUEST_BYTES) in error["message"]
    samples = scrape(root)
    assert sample(samples, "kvreg_engine_requests_rejected_total", reason="body_too_large") >= 1
    ok = httpx.post(
        served.url + "/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1}, timeout=120
    )
    assert ok.status_code == 200  # the server goes on


def _completion(url: str, prompt: str, out: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "temperature": 0}
        out["answer"] = httpx.post(url + "/v1/completions", json=body, timeout=120)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_past_the_queue_429_with_retry_after_and_a_client_that_leaves_frees_its_place_at_once(
    served: Served,
) -> None:
    host = served.host
    prompts = {"a": "The first of two held requests.", "d": "The one admitted in the place given back."}
    expected = {k: _greedy(served, p, 3) for k, p in prompts.items()}
    app = create_app(host, max_queue=1)  # one on the model, one waiting
    admission = app.state.admission
    answered = host.counters.answered
    with on_loopback(app) as root, model_thread_held(host):
        a: dict[str, Any] = {}
        thread_a = _completion(root, prompts["a"], a)
        wait_for(lambda: admission.held == 1 and host.executor.pending == 2, "A never queued")
        body = json.dumps({"model": MODEL, "prompt": "Nobody waits for this.", "max_tokens": 3}).encode()
        b = socket.create_connection(("127.0.0.1", port_of(root)), timeout=60)
        b.sendall(request_head("/v1/completions", len(body)) + body)
        wait_for(lambda: admission.held == 2 and host.executor.pending == 3, "B never queued")

        full = openai.OpenAI(base_url=root + "/v1", api_key="unused", max_retries=0, timeout=60)
        with pytest.raises(openai.RateLimitError) as refused:
            full.completions.create(model=MODEL, prompt="One too many.", max_tokens=1)
        response = refused.value.response
        assert response.status_code == 429 and int(response.headers["retry-after"]) >= 1
        error = response.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
        assert "at capacity" in error["message"]

        b.close()  # B leaves while queued: its place is free while the model thread is still held
        wait_for(lambda: admission.held == 1 and host.executor.pending == 2, "B's place was kept")
        d: dict[str, Any] = {}
        thread_d = _completion(root, prompts["d"], d)
        wait_for(lambda: admission.held == 2, "D was not admitted")
    thread_a.join(120)
    thread_d.join(120)
    assert a["answer"].status_code == 200 and a["answer"].json()["choices"][0]["text"] == expected["a"]
    assert d["answer"].status_code == 200 and d["answer"].json()["choices"][0]["text"] == expected["d"]
    assert host.counters.answered == answered + 2  # A and D: the model never ran B
    assert admission.held == 0


def test_a_stream_that_leaves_while_its_job_is_queued_is_never_run(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = served.host
    release = threading.Event()
    tokenize = host.text_tokens

    def tokenize_then_hold(prompt: Any) -> list[int]:  # in the model's thread: the job queues behind
        host.executor.submit(release.wait, 120)
        return tokenize(prompt)

    monkeypatch.setattr(host, "text_tokens", tokenize_then_hold)
    app = create_app(host, max_queue=1)
    answered = host.counters.answered
    with on_loopback(app) as root:
        try:
            body = {"model": MODEL, "prompt": "A stream nobody reads.", "max_tokens": 3, "stream": True}
            with httpx.stream("POST", root + "/v1/completions", json=body, timeout=60) as r:
                assert r.status_code == 200
                lines = r.iter_lines()  # kept: a dropped iterator closes the connection
                assert next(lines).startswith("data: ")  # the role chunk: the job waits
                assert host.executor.pending == 2  # the hold, then the job
            wait_for(lambda: app.state.admission.held == 0, "the stream's place was kept")
            wait_for(lambda: host.executor.pending == 1, "the job stayed queued")  # only the hold
        finally:
            release.set()
        samples = scrape(root)
    monkeypatch.undo()
    wait_for(lambda: host.executor.pending == 0, "the hold never ended")
    assert host.counters.answered == answered
    assert sample(samples, "kvreg_engine_requests_abandoned_total", stage="queued") == 1
