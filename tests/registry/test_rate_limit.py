"""The failed-authentication limiter (``kvreg_registry.api.ratelimit``): the limiter on its own with
a hand-driven clock, then through the real app (SQLite + folder) on the API's bearer tokens and the
web sign-in form: 429 ``RATE_LIMITED`` with ``Retry-After`` past the limit, successes never counted,
per client address and per token prefix, bounded memory, settings from ``KVREG_*``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from kvreg.core.errors import RateLimitedError, UnavailableError, error_classes
from kvreg_registry.api.ratelimit import AuthFailureLimiter
from kvreg_registry.app import create_app
from kvreg_registry.auth import Principal
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings

OPERATOR = Principal(is_admin=True, name="operator")
BAD = "kvreg_" + "B" * 43


class Clock:
    """A clock the test moves by hand (no sleeping, no timing thresholds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- the limiter on its own -------------------------------------------------------------------


def limiter(limit: int = 3, window: float = 60, max_keys: int = 100) -> tuple[AuthFailureLimiter, Clock]:
    clock = Clock()
    return AuthFailureLimiter(limit=limit, window_seconds=window, max_keys=max_keys, clock=clock), clock


def fail(lim: AuthFailureLimiter, client: str, token: str | None = None) -> None:
    from kvreg.core.errors import UnauthenticatedError

    with pytest.raises(UnauthenticatedError), lim.attempt(client, token):
        raise UnauthenticatedError("unknown token")


def test_the_limit_th_failure_locks_the_client_out_until_the_oldest_leaves_the_window() -> None:
    lim, clock = limiter(limit=3, window=60)
    for _ in range(3):
        fail(lim, "10.0.0.1")
        clock.now += 10
    with pytest.raises(RateLimitedError) as caught, lim.attempt("10.0.0.1", None):
        pytest.fail("a locked-out client must not get to authenticate")
    # The oldest failure was 30 s ago: it leaves the 60 s window in 30 s.
    assert caught.value.details["retry_after"] == 30
    assert caught.value.code == "RATE_LIMITED"
    with lim.attempt("10.0.0.2", None):
        pass  # another address is not affected
    clock.now += 30
    with lim.attempt("10.0.0.1", None):
        pass  # the oldest failure left the window: one more try is allowed


def test_successes_are_never_counted() -> None:
    lim, _clock = limiter(limit=2)
    fail(lim, "10.0.0.1")
    for _ in range(50):
        with lim.attempt("10.0.0.1", "kvreg_good"):
            pass
    fail(lim, "10.0.0.1")
    with pytest.raises(RateLimitedError), lim.attempt("10.0.0.1", "kvreg_good"):
        pass


def test_a_token_prefix_is_limited_across_client_addresses_and_is_not_kept_in_clear() -> None:
    lim, _clock = limiter(limit=3)
    for i in range(3):
        fail(lim, f"10.0.1.{i}", BAD)
    with pytest.raises(RateLimitedError), lim.attempt("10.0.2.1", BAD[:14] + "other-suffix"):
        pass
    with lim.attempt("10.0.2.1", "kvreg_" + "C" * 43):
        pass  # another prefix from a fresh address is fine
    assert not any(BAD[:14] in key or BAD[6:14] in key for key in lim._failures)


def test_the_table_is_bounded_and_forgets_the_least_recently_failed_key() -> None:
    lim, _clock = limiter(limit=2, max_keys=5)
    for i in range(100):
        fail(lim, f"10.1.0.{i}")
    assert len(lim) == 5
    assert all(len(times) <= 2 for times in lim._failures.values())
    assert "client:10.1.0.99" in lim._failures and "client:10.1.0.0" not in lim._failures


def test_a_limit_of_zero_turns_it_off() -> None:
    lim, _clock = limiter(limit=0)
    for _ in range(100):
        fail(lim, "10.0.0.1", BAD)
    assert len(lim) == 0


def test_rate_limited_is_a_stable_code_of_the_one_hierarchy_and_retried_like_unavailable() -> None:
    assert error_classes()["RATE_LIMITED"] is RateLimitedError
    assert issubclass(RateLimitedError, UnavailableError)


def test_settings_come_from_the_environment() -> None:
    s = Settings.from_env(
        {
            "KVREG_AUTH_FAILURE_LIMIT": "0",
            "KVREG_AUTH_FAILURE_WINDOW_SECONDS": "5",
            "KVREG_AUTH_FAILURE_KEYS": "7",
        }
    )
    assert (s.auth_failure_limit, s.auth_failure_window_seconds, s.auth_failure_keys) == (0, 5, 7)
    d = Settings.from_env({})
    assert (d.auth_failure_limit, d.auth_failure_window_seconds, d.auth_failure_keys) == (20, 60, 10_000)
    lim = AuthFailureLimiter.from_settings(s)
    assert not lim.enabled and lim.max_keys == 7


# --- through the app ---------------------------------------------------------------------------


@dataclass
class App:
    client: TestClient
    token: str
    clock: Clock

    def get(self, token: str | None, client: TestClient | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return (client or self.client).get("/api/v1/namespaces", headers=headers)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    application = create_app(Settings(data_dir=tmp_path / "reg", auth_failure_limit=3))
    with TestClient(application, base_url="http://testserver") as client:
        state = application.state.registry
        with state.db.write() as s:
            accounts.create_user(s, OPERATOR, "alice", admin=True)
            token = accounts.create_token(s, OPERATOR, "alice", label="rate").token
        clock = Clock()
        application.state.auth_failure_limiter = AuthFailureLimiter(
            limit=3, window_seconds=60, max_keys=100, clock=clock
        )
        yield App(client=client, token=token, clock=clock)


def test_api_failed_tokens_beyond_the_limit_answer_429_with_retry_after(app: App) -> None:
    for _ in range(3):
        r = app.get(BAD)
        assert r.status_code == 401 and r.headers["x-kvreg-error-code"] == "UNAUTHENTICATED"
    r = app.get(app.token)
    assert r.status_code == 429
    assert r.headers["x-kvreg-error-code"] == "RATE_LIMITED"
    assert int(r.headers["retry-after"]) == 60
    assert r.json()["error"]["details"]["retry_after"] == 60
    # Another client address with the valid token is not affected.
    with TestClient(app.client.app, base_url="http://testserver", client=("192.0.2.7", 4000)) as other:
        assert app.get(app.token, other).status_code == 200
    app.clock.now += 61
    assert app.get(app.token).status_code == 200


def test_api_successes_do_not_count_and_malformed_headers_do(app: App) -> None:
    for _ in range(20):
        assert app.get(app.token).status_code == 200
    r = app.client.get("/api/v1/namespaces", headers={"Authorization": "Basic abc"})
    assert r.status_code == 401
    assert app.get(BAD).status_code == 401
    assert app.get(app.token).status_code == 200
    assert app.get(BAD).status_code == 401
    assert app.get(BAD).status_code == 429
    assert app.get(None).status_code == 200  # an anonymous read is no attempt


def test_web_sign_in_failures_beyond_the_limit_answer_a_429_page(app: App) -> None:
    def csrf() -> str:
        page = app.client.get("/signin")
        match = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert match is not None
        return match.group(1)

    for _ in range(3):
        r = app.client.post("/signin", data={"token": BAD, "csrf": csrf()})
        assert r.status_code == 401
    r = app.client.post("/signin", data={"token": app.token, "csrf": csrf()}, follow_redirects=False)
    assert r.status_code == 429
    assert r.headers["x-kvreg-error-code"] == "RATE_LIMITED"
    assert r.headers["retry-after"] == "60"
    assert r.headers["content-type"].startswith("text/html")
    assert "Too many attempts" in r.text
    assert "unsafe-inline" not in r.headers["content-security-policy"]
    assert app.client.cookies.get("kvreg_session") is None
    app.clock.now += 61
    r = app.client.post("/signin", data={"token": app.token, "csrf": csrf()}, follow_redirects=False)
    assert r.status_code == 303 and app.client.cookies.get("kvreg_session")


def test_an_empty_sign_in_is_no_attempt(app: App) -> None:
    page = app.client.get("/signin")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None
    for _ in range(10):
        assert app.client.post("/signin", data={"token": " ", "csrf": token.group(1)}).status_code == 401
    assert app.get(app.token).status_code == 200
