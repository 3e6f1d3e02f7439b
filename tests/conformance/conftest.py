"""A live registry per backend for the conformance run, with a little in it to find.

Each backend gets a ``kvreg serve`` of its own (``running_registry``: uvicorn on
loopback, SQLite + a folder or PostgreSQL + SeaweedFS), started once per session and
shared by test_found.py and test_openapi.py (pytest groups each backend's tests, so the
one-request checks of test_found.py run before the generated ones on the same server). What
is seeded through the HTTP API, so that generated requests reach more than 404s:

- the namespace ``conformance`` (private) holding one object, with a signing key
  registered, a (lifted) legal hold and a retention policy;
- a public namespace ``conformance-open``, for anonymous reads;
- three callers, each with a real token made by the admin plumbing: a server
  admin, a writer of ``conformance`` and a user with no role.

This module does not start the services (``make services`` does) and fakes nothing.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from integration.registry_server import BACKENDS, Registry, running_registry
from kvreg.core.keys import SigningKey

NAMESPACE = "conformance"
PUBLIC_NAMESPACE = "conformance-open"
OBJECT = b"conformance: one object, stored before the run\n" * 8


#: Requests the conformance run sent, per backend and per phase (reported at the end of the session).
REQUESTS: Counter[str] = Counter()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REQUESTS:
        counts = ", ".join(f"{backend}: {n}" for backend, n in sorted(REQUESTS.items()))
        terminalreporter.write_line(f"conformance: requests sent: {counts}")


@dataclass
class Target:
    """A seeded live registry and what the generated requests may aim at."""

    registry: Registry
    tokens: dict[str, str]
    token_ids: set[int] = field(default_factory=set)
    users: list[str] = field(default_factory=list)
    object_digest: str = ""
    keyid: str = ""
    hold_id: int = 0


def _seed(registry: Registry) -> Target:
    digest = "sha256:" + hashlib.sha256(OBJECT).hexdigest()
    public_key = SigningKey.from_seed(b"\x07" * 32).public_key.to_text()
    target = Target(registry=registry, tokens={}, object_digest=digest)
    with registry.admin() as c:
        for name, public in ((NAMESPACE, False), (PUBLIC_NAMESPACE, True)):
            r = c.post("/namespaces", json={"name": name, "public": public})
            assert r.status_code == 201, r.text
        for user, admin, role in (
            ("fuzz-admin", True, None),
            ("fuzz-writer", False, "write"),
            ("fuzz-nobody", False, None),
        ):
            assert c.post("/users", json={"name": user, "admin": admin}).status_code == 201
            if role is not None:
                r = c.put(f"/namespaces/{NAMESPACE}/roles/{user}", json={"role": role})
                assert r.status_code == 204, r.text
            r = c.post(f"/users/{user}/tokens", json={"label": "conformance"})
            assert r.status_code == 201, r.text
            target.tokens[user] = r.json()["token"]
            target.token_ids.add(int(r.json()["id"]))
            target.users.append(user)
        for ns in (NAMESPACE, PUBLIC_NAMESPACE):
            r = c.put(
                f"/namespaces/{ns}/objects/{digest}",
                content=OBJECT,
                headers={"Content-Type": "application/octet-stream"},
            )
            assert r.status_code == 201, r.text
        r = c.post(f"/namespaces/{NAMESPACE}/keys", json={"public_key": public_key})
        assert r.status_code == 201, r.text
        target.keyid = r.json()["keyid"]
        # A hold to find; lifted at once, so that it does not turn every delete into 403 LEGAL_HOLD.
        r = c.post(f"/namespaces/{NAMESPACE}/holds", json={"reason": "conformance run"})
        assert r.status_code == 201, r.text
        target.hold_id = int(r.json()["id"])
        r = c.delete(f"/namespaces/{NAMESPACE}/holds/{target.hold_id}", params={"reason": "seeded"})
        assert r.status_code == 200, r.text
        r = c.put(f"/namespaces/{NAMESPACE}/retention", json={"keep_versions": 3})
        assert r.status_code == 200, r.text
    return target


@pytest.fixture(scope="session", params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    root: Path = tmp_path_factory.mktemp(f"conformance-{request.param}")
    with running_registry(request.param, root) as registry:
        yield _seed(registry)
        if registry.proc is not None and registry.proc.poll() is not None:
            pytest.fail(f"the {registry.backend} registry died:\n{registry.log_tail()}")
