"""The operator's routes of ``kvreg engine serve``: ``/health`` (idle, busy, stalled, failing,
loading), ``/version``, ``/metrics`` (linted by ``promtool``, and counting what was answered),
and vLLM's ``/tokenize`` and ``/detokenize``; and the server answering while its model loads."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

import kvreg
from kvreg.app.serving.server import create_app
from kvreg.core.errors import UsageError
from kvreg.core.names import RefName
from kvreg.engine import deposit
from kvreg.engine.router import plain_generate
from kvreg.store.home import Home
from prometheus_text import promtool_check
from serving.conftest import MODEL, Served
from serving.wire import model_thread_held, sample, scrape, wait_for


def _root(served: Served) -> str:
    return served.url.removesuffix("/v1")


@pytest.fixture
def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=120)


def test_health_runs_a_forward_pass_on_an_idle_model(served: Served) -> None:
    r = httpx.get(_root(served) + "/health", timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and body["check"] == "forward_pass"
    assert 0 <= body["token"] < len(served.host.lm.tokenizer)
    assert r.headers["cache-control"] == "no-store"


def test_health_does_not_queue_behind_a_busy_model_and_reports_a_stall(served: Served) -> None:
    with model_thread_held(served.host):
        t0 = time.monotonic()
        r = httpx.get(_root(served) + "/health", timeout=60)
        assert time.monotonic() - t0 < 30  # answered while the thread is held, not after it
        assert r.status_code == 200 and r.json()["check"] == "progress", r.text
        # The same busy thread, judged with a short stall limit: no progress for too long is a 503.
        with TestClient(create_app(served.host, health_stall=0.2)) as app:
            time.sleep(0.3)
            stalled = app.get("/health")
    assert stalled.status_code == 503
    assert stalled.json()["status"] == "stalled" and "no progress" in stalled.json()["error"]


def test_health_reports_a_failing_model(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise RuntimeError("the forward pass produced NaN")

    monkeypatch.setattr(served.host, "health_probe", broken)
    with TestClient(create_app(served.host)) as app:
        r = app.get("/health")
    assert r.status_code == 503
    assert r.json()["status"] == "failing" and "NaN" in r.json()["error"]
    monkeypatch.undo()
    assert httpx.get(_root(served) + "/health", timeout=60).status_code == 200


def test_version_names_the_release_the_model_its_config_and_the_server(served: Served) -> None:
    body = httpx.get(_root(served) + "/version", timeout=60).json()
    lm = served.host.lm
    assert body["version"] == kvreg.__version__
    assert body["model"]["id"] == MODEL
    assert body["model"]["model_fingerprint"] == str(lm.model_fp)
    assert body["model"]["tokenizer_fingerprint"] == str(lm.tokenizer_fp)
    assert body["model"]["config_fingerprint"] == str(lm.config.fingerprint)
    assert body["model"]["context_length"] == served.host.context_length
    assert body["engine"]["block_size"] == 8 and body["engine"] == lm.config.fields
    assert body["server"]["max_queue"] >= 4 and body["server"]["default_max_tokens"] == 16
    assert body["server"]["api_key_required"] is False
    defaults = getattr(served.host, "sampling_defaults", None)
    assert body.get("sampling_defaults") == (None if defaults is None else dict(defaults))


def test_metrics_lint_clean_and_count_what_was_answered(client: openai.OpenAI, served: Served) -> None:
    root = _root(served)
    before = scrape(root)
    prompt = "Metrics count the prompt tokens, the cached ones and the decoded ones."
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
    served.on_model(
        deposit.deposit,
        served.host.lm,
        served.home,
        text="",
        prompt=prompt,
        ref=RefName.parse("metrics/prefix"),
        key=served.key,
    )
    grafted = [
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0) for _ in "ab"
    ]
    chat = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Stream me."}],
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    chat_usage = chat[-1].usage
    assert chat_usage is not None
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, n=2)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=2)

    text = httpx.get(root + "/metrics", timeout=60).text
    promtool_check(text)
    after = scrape(root)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    route = "/v1/completions"
    assert grew("kvreg_engine_time_to_first_token_seconds_count", route=route, mode="off") == 1
    assert grew("kvreg_engine_time_to_first_token_seconds_count", route=route, mode="prefix") == 2
    assert grew("kvreg_engine_e2e_request_latency_seconds_count", route=route, mode="prefix") == 2
    assert grew("kvreg_engine_time_to_first_token_seconds_sum", route=route, mode="prefix") > 0
    chats = sum(
        grew("kvreg_engine_e2e_request_latency_seconds_count", route="/v1/chat/completions", mode=m)
        for m in ("knowledge", "prefix", "off")
    )
    assert chats == 1
    usage = [a.usage for a in (plain, *grafted)]
    assert all(u is not None for u in usage)
    prompt_tokens = sum(u.prompt_tokens for u in usage if u is not None)
    cached = sum(
        u.prompt_tokens_details.cached_tokens for u in usage if u is not None and u.prompt_tokens_details
    )
    assert cached == 2 * plain.usage.prompt_tokens  # type: ignore[union-attr]  # both repeats grafted whole
    assert grew("kvreg_engine_prompt_tokens_total") == prompt_tokens + chat_usage.prompt_tokens
    assert grew("kvreg_engine_cached_prompt_tokens_total") == cached
    completion_tokens = (
        sum(u.completion_tokens for u in usage if u is not None) + chat_usage.completion_tokens
    )
    assert grew("kvreg_engine_completion_tokens_total") == completion_tokens
    assert grew("kvreg_engine_decoded_tokens_total") == completion_tokens  # nothing came from knowledge
    assert grew("kvreg_engine_answered_total") == 4
    assert grew("kvreg_engine_grafts_total", mode="prefix") == 2
    assert grew("kvreg_engine_witness_probes_total", outcome="run") == 1
    assert grew("kvreg_engine_witness_probes_total", outcome="remembered") == 1
    assert grew("kvreg_engine_fallbacks_total", reason="no_match") >= 1
    assert grew("kvreg_engine_requests_rejected_total", reason="invalid") == 1
    assert grew("kvreg_engine_requests_rejected_total", reason="not_found") == 1
    assert grew("kvreg_engine_http_requests_total", route=route, code="200") == 3
    assert sample(after, "kvreg_engine_requests_running") == 0
    assert sample(after, "kvreg_engine_queue_capacity") >= 4
    assert sample(after, "kvreg_engine_model_load_seconds") > 0
    info = [k for k in after if k[0] == "kvreg_engine_build_info"]
    assert dict(info[0][1])["version"] == kvreg.__version__


def test_tokenize_and_detokenize_as_vllm(client: openai.OpenAI, served: Served) -> None:
    root, host = _root(served), served.host
    prompt = "Tokenize me the way a completion would."
    r = httpx.post(root + "/tokenize", json={"model": MODEL, "prompt": prompt}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0)
    assert answer.usage is not None and body["count"] == answer.usage.prompt_tokens == len(body["tokens"])
    assert body["tokens"] == served.on_model(host.text_tokens, prompt)
    assert body["max_model_len"] == host.context_length
    bare = httpx.post(
        root + "/tokenize", json={"prompt": prompt, "add_special_tokens": False}, timeout=60
    ).json()
    assert bare["tokens"] == served.on_model(host.lm.encode, prompt, first=False)

    messages = [{"role": "user", "content": "And a chat, rendered by the template."}]
    chat = httpx.post(
        root + "/tokenize", json={"messages": messages, "return_token_strs": True}, timeout=60
    ).json()
    chat_answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)  # type: ignore[arg-type]
    assert chat_answer.usage is not None and chat["count"] == chat_answer.usage.prompt_tokens
    assert chat["tokens"] == served.on_model(host.chat_tokens, messages)
    assert len(chat["token_strs"]) == chat["count"] and all(isinstance(s, str) for s in chat["token_strs"])
    closed = httpx.post(
        root + "/tokenize", json={"messages": messages, "add_generation_prompt": False}, timeout=60
    ).json()
    assert closed["tokens"] == served.on_model(host.chat_tokens, messages, "closed")

    back = httpx.post(root + "/detokenize", json={"model": MODEL, "tokens": body["tokens"]}, timeout=60)
    assert back.status_code == 200 and back.json() == {"prompt": host.lm.decode(body["tokens"])}
    assert prompt in back.json()["prompt"]

    for path, payload, status, param in (
        ("/tokenize", {"prompt": "x", "messages": messages}, 400, "prompt"),
        ("/tokenize", {}, 400, "prompt"),
        ("/tokenize", {"prompt": "x", "model": "other"}, 404, "model"),
        ("/tokenize", {"messages": messages, "add_special_tokens": True}, 400, "add_special_tokens"),
        ("/tokenize", {"prompt": "x", "chat_template": "{{ x }}"}, 400, "chat_template"),
        ("/detokenize", {"tokens": [len(host.lm.tokenizer)]}, 400, "tokens"),
        ("/detokenize", {"tokens": ["a"]}, 400, "tokens"),
    ):
        refused = httpx.post(root + path, json=payload, timeout=60)
        assert refused.status_code == status, (payload, refused.text)
        assert refused.json()["error"]["param"] == param, (payload, refused.text)


class _SlowHost:
    """Stands for ``ModelHost`` in ``kvreg.app.serving.lifecycle``: waits for ``go``, then loads
    the real model (or fails, when ``fail`` is set)."""

    go = threading.Event()
    fail: str | None = None
    real: Any = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        assert cls.go.wait(120)
        if cls.fail is not None:
            raise UsageError(cls.fail)
        return cls.real(*args, **kwargs)


def _serve_in_thread(server: Any) -> tuple[threading.Thread, list[str], list[BaseException]]:
    urls: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            server.run(on_listening=urls.append)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: bool(urls) or bool(errors), "the server never listened")
    return thread, urls, errors


def test_the_server_listens_at_once_and_is_ready_once_the_model_loads(
    tiny_models: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvreg.app.serving import lifecycle
    from kvreg.app.serving.lifecycle import EngineServer, EngineServeRequest

    monkeypatch.setattr(_SlowHost, "go", threading.Event())
    monkeypatch.setattr(_SlowHost, "real", lifecycle.ModelHost)
    monkeypatch.setattr(lifecycle, "ModelHost", _SlowHost)
    home = Home(tmp_path / "home").ensure()
    request = EngineServeRequest(model=str(tiny_models["llama-chat"]), name="tiny", port=0, api_key="k3y")
    server = EngineServer(home, request)
    thread, urls, _ = _serve_in_thread(server)
    root, key = urls[0].removesuffix("/v1"), {"Authorization": "Bearer k3y"}
    try:
        loading = httpx.get(root + "/health", timeout=60)
        assert loading.status_code == 503 and loading.json() == {"status": "loading"}
        models = httpx.get(root + "/v1/models", headers=key, timeout=60)
        assert models.status_code == 503 and models.json()["error"]["code"] == "model_loading"
        assert int(models.headers["retry-after"]) >= 1
        assert httpx.get(root + "/v1/models", timeout=60).status_code == 401  # the key, even now
        _SlowHost.go.set()
        wait_for(lambda: httpx.get(root + "/health", timeout=60).status_code == 200, "never ready", 240)
        assert httpx.get(root + "/v1/models", headers=key, timeout=60).json()["data"][0]["id"] == "tiny"
    finally:
        server.stop()
        thread.join(60)
    assert not thread.is_alive()


def test_a_model_that_fails_to_load_stops_the_server_with_the_error(
    tiny_models: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvreg.app.serving import lifecycle
    from kvreg.app.serving.lifecycle import EngineServer, EngineServeRequest

    monkeypatch.setattr(_SlowHost, "go", threading.Event())
    monkeypatch.setattr(_SlowHost, "fail", "the model folder has no weights")
    monkeypatch.setattr(lifecycle, "ModelHost", _SlowHost)
    home = Home(tmp_path / "home").ensure()
    server = EngineServer(home, EngineServeRequest(model=str(tiny_models["llama-chat"]), port=0))
    thread, urls, errors = _serve_in_thread(server)
    assert httpx.get(urls[0].removesuffix("/v1") + "/health", timeout=60).status_code == 503
    _SlowHost.go.set()
    thread.join(60)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], UsageError)
    assert "no weights" in errors[0].message


def test_the_health_probe_is_one_greedy_step_of_the_model(served: Served) -> None:
    """The probe's one step is the model's greedy choice after its first special token."""
    host = served.host
    tokenizer = host.lm.tokenizer
    start = next(t for t in (tokenizer.bos_token_id, tokenizer.eos_token_id, 0) if t is not None)
    expected = served.on_model(plain_generate, host.lm, [start], 1).tokens
    assert served.on_model(host.health_probe) == expected[0]
