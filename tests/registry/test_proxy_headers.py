"""The client's address behind a proxy (``KVREG_FORWARDED_ALLOW_IPS``, ``kvreg serve
--forwarded-allow-ips``), in process: ``X-Forwarded-For`` changes the address the
failed-authentication limiter records only when the direct peer is a trusted proxy; the
setting's parsing; and ``kvreg serve`` hands the job to the app alone (uvicorn adds no proxy
middleware of its own) and passes the setting on to worker processes.

The audit log records no client address (its entries name the actor, a user), so the limiter is
where the address is recorded. nginx in front of a real server is
``tests/integration/test_ops_nginx.py``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kvreg.core.errors import ConfigError
from kvreg_registry import server
from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings

BAD = "kvreg_" + "P" * 43
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's variable
PROXY = ("192.0.2.10", 50000)
STRANGER = ("198.51.100.7", 50000)
CLIENT = "203.0.113.9"


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Any]:
    clients: list[TestClient] = []

    def make(peer: tuple[str, int], **settings: Any) -> TestClient:
        app = create_app(Settings(data_dir=tmp_path / f"data{len(clients)}", **settings))
        c = TestClient(app, base_url="http://testserver", client=peer)
        c.__enter__()
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def failed_sign_in(client: TestClient, forwarded_for: str | None = None, token: str = BAD) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    return client.get("/api/v1/namespaces", headers=headers).status_code


def recorded_clients(client: TestClient) -> set[str]:
    limiter = client.app.state.auth_failure_limiter  # type: ignore[attr-defined]
    return {key.removeprefix("client:") for key in limiter._failures if key.startswith("client:")}


def test_forwarded_for_from_an_untrusted_peer_does_not_change_the_recorded_address(make_client: Any) -> None:
    c = make_client(STRANGER, forwarded_allow_ips=PROXY[0])
    assert failed_sign_in(c, forwarded_for=CLIENT) == 401
    assert recorded_clients(c) == {STRANGER[0]}


def test_forwarded_for_from_a_trusted_proxy_is_the_recorded_address(make_client: Any) -> None:
    c = make_client(PROXY, forwarded_allow_ips=f"{PROXY[0]}, 10.0.0.0/8")
    assert failed_sign_in(c, forwarded_for=CLIENT) == 401
    # two proxies: the peer got it from a trusted one (10.1.2.3), which got it from the client
    # (198.51.100.20), which claimed to be 1.1.1.1: the rightmost untrusted address is the client
    assert failed_sign_in(c, forwarded_for="1.1.1.1, 198.51.100.20, 10.1.2.3") == 401
    assert recorded_clients(c) == {CLIENT, "198.51.100.20"}


def test_behind_a_trusted_proxy_each_client_is_limited_on_its_own(make_client: Any) -> None:
    c = make_client(PROXY, forwarded_allow_ips=PROXY[0], auth_failure_limit=2)
    assert [failed_sign_in(c, CLIENT, BAD) for _ in range(3)] == [401, 401, 429]
    # another client behind the same proxy (and another token) is not locked out with the first
    assert failed_sign_in(c, "203.0.113.50", "kvreg_" + "Q" * 43) == 401


def test_an_untrusted_peer_cannot_escape_the_limiter_by_claiming_addresses(make_client: Any) -> None:
    c = make_client(STRANGER, forwarded_allow_ips=PROXY[0], auth_failure_limit=2)
    statuses = [failed_sign_in(c, f"203.0.113.{i}", "kvreg_" + chr(65 + i) * 43) for i in range(3)]
    assert statuses == [401, 401, 429]


def test_loopback_is_trusted_by_default_and_an_empty_setting_trusts_no_one(make_client: Any) -> None:
    default = make_client(("127.0.0.1", 40000))
    assert failed_sign_in(default, forwarded_for=CLIENT) == 401
    assert recorded_clients(default) == {CLIENT}
    nobody = make_client(("127.0.0.1", 40000), forwarded_allow_ips="")
    assert failed_sign_in(nobody, forwarded_for=CLIENT) == 401
    assert recorded_clients(nobody) == {"127.0.0.1"}


def test_forwarded_proto_from_a_trusted_proxy_is_the_request_scheme(make_client: Any) -> None:
    """Behind a TLS proxy the web UI's cookies are ``Secure`` (the scheme is the proxy's)."""
    trusted = make_client(PROXY, forwarded_allow_ips=PROXY[0])
    untrusted = make_client(STRANGER, forwarded_allow_ips=PROXY[0])
    for client, secure in ((trusted, True), (untrusted, False)):
        r = client.get("/signin", headers={"X-Forwarded-Proto": "https"})
        assert r.status_code == 200
        cookies = r.headers.get_list("set-cookie")
        assert cookies and all(("; secure" in c.lower()) is secure for c in cookies), cookies


def test_the_setting_is_parsed_and_checked() -> None:
    assert Settings().forwarded_allow_ips == "127.0.0.1"
    assert Settings.from_env({}).forwarded_allow_ips == "127.0.0.1"
    assert Settings.from_env({"KVREG_FORWARDED_ALLOW_IPS": ""}).forwarded_allow_ips == ""
    assert Settings.from_env({"KVREG_FORWARDED_ALLOW_IPS": " * "}).forwarded_allow_ips == "*"
    got = Settings.from_env({"KVREG_FORWARDED_ALLOW_IPS": "10.1.2.3/8,  ::1,192.0.2.1"}).forwarded_allow_ips
    assert got == "10.0.0.0/8, ::1, 192.0.2.1"
    for bad in ("proxy.internal", "10.0.0.1, nginx", "300.1.1.1", "*, 10.0.0.1"):
        with pytest.raises(ConfigError, match="KVREG_FORWARDED_ALLOW_IPS"):
            Settings.from_env({"KVREG_FORWARDED_ALLOW_IPS": bad})


def test_kvreg_serve_leaves_the_proxy_headers_to_the_app(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """uvicorn's own proxy middleware (on by default, trusting loopback or $FORWARDED_ALLOW_IPS)
    is turned off, with one worker and with several: the app's is the only one."""
    import uvicorn

    from kvreg.app.serve import ServeRequest, registry_settings, serve

    calls: list[dict[str, Any]] = []
    seen_dirs: list[str | None] = []

    def fake_run(app: Any, **kwargs: Any) -> None:
        calls.append(kwargs)
        seen_dirs.append(os.environ.get(MULTIPROC_ENV))

    monkeypatch.setattr(uvicorn, "run", fake_run)
    for name in (
        MULTIPROC_ENV,
        "KVREG_DATA",
        "KVREG_DATABASE_URL",
        "KVREG_STORAGE",
        "KVREG_FORWARDED_ALLOW_IPS",
    ):
        monkeypatch.setenv(name, "")  # recorded, so that what serve() puts there is undone after
        monkeypatch.delenv(name)
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")  # uvicorn's own variable: not read any more
    request = ServeRequest(data=tmp_path / "data", workers=2, forwarded_allow_ips="10.0.0.0/8")
    settings = registry_settings(request)
    assert settings.forwarded_allow_ips == "10.0.0.0/8"
    serve(request, settings)
    server.run(Settings(data_dir=tmp_path / "one"), host="127.0.0.1", port=0)
    assert [c["proxy_headers"] for c in calls] == [False, False]
    assert os.environ["KVREG_FORWARDED_ALLOW_IPS"] == "10.0.0.0/8"  # what the workers read
    # with workers, a metrics directory of the server's own, gone when it stops; one process: none
    assert seen_dirs[0] is not None and seen_dirs[1] is None
    assert not Path(seen_dirs[0]).exists()
    assert MULTIPROC_ENV not in os.environ


def test_an_operators_metrics_directory_is_emptied_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "counter_123.db").write_bytes(b"old samples")
    (folder / "notes.txt").write_text("kept")
    monkeypatch.setenv(MULTIPROC_ENV, str(folder))
    with server.metrics_directory(workers=4) as used:
        assert used == str(folder)
        assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert folder.is_dir()
