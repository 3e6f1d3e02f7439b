"""Readiness: whether this process can serve requests now (``GET /readyz``).

:class:`ReadinessProbe` runs four checks, each in a worker thread, all at once, each bounded by
:data:`CHECK_TIMEOUT_S`:

- ``database``: a connection from the pool answers ``SELECT 1``;
- ``migrations``: in the same connection, ``alembic_version`` names the head revision of this
  code's migrations (a database behind, or ahead of, the code is not ready);
- ``storage``: a probe object is written, read back and removed (``ObjectStorage.probe``: in
  ``probe/``, a folder or key prefix of its own, never an object's name);
- ``log_key``: the audit log's key file reads, and is the key this process signs with.

A check's failure is reported by a fixed sentence and the error's class (the detail goes to the
server log only: the answer may reach anyone who can reach the server). A check runs on a
daemon thread of its own; one still running from an earlier probe (a database host that does
not answer at all) is not started again but fails at once, so that a load balancer's probes
cannot pile threads up. Probes closer together than
:data:`MIN_INTERVAL_S` share one result, so that asking often writes to the storage at most
that often.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

from kvreg.fileio.keyfiles import load_signing_key
from kvreg_registry.db.engine import head_revisions, schema_revisions
from kvreg_registry.state import RegistryState

log = logging.getLogger(__name__)

#: Seconds each check may take before it counts as failed.
CHECK_TIMEOUT_S = 5.0
#: Probes closer together than this share one result.
MIN_INTERVAL_S = 1.0
CHECKS = ("database", "migrations", "storage", "log_key")


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"ok": True} if self.ok else {"ok": False, "error": self.error}


@dataclass(frozen=True)
class Readiness:
    checks: dict[str, CheckResult] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return all(check.ok for check in self.checks.values())

    @property
    def failed(self) -> list[str]:
        return [name for name, check in self.checks.items() if not check.ok]

    def as_json(self) -> dict[str, Any]:
        return {
            "status": "ready" if self.ready else "not ready",
            "failed": self.failed,
            "checks": {name: check.as_json() for name, check in self.checks.items()},
        }


def _failure(what: str, exc: BaseException) -> CheckResult:
    log.warning("readiness: %s: %s: %s", what, type(exc).__name__, exc)
    return CheckResult(False, f"{what} ({type(exc).__name__})")


def check_database(st: RegistryState) -> dict[str, CheckResult]:
    """``database`` and ``migrations``, in one connection."""
    try:
        with st.db.engine.connect() as conn:
            conn.execute(text("SELECT 1")).scalar_one()
            current = schema_revisions(conn)
    except Exception as exc:
        failed = _failure("the database does not answer", exc)
        return {
            "database": failed,
            "migrations": CheckResult(False, "not checked: the database does not answer"),
        }
    wanted = head_revisions()
    if current != wanted:
        have = ", ".join(sorted(current)) or "none"
        migrations = CheckResult(
            False, f"the schema is at revision {have}, this code needs {', '.join(sorted(wanted))}"
        )
    else:
        migrations = CheckResult(True)
    return {"database": CheckResult(True), "migrations": migrations}


def check_storage(st: RegistryState) -> dict[str, CheckResult]:
    try:
        st.storage.probe()
    except Exception as exc:
        return {"storage": _failure("the object storage failed a write and read of a probe object", exc)}
    return {"storage": CheckResult(True)}


def check_log_key(st: RegistryState) -> dict[str, CheckResult]:
    path = st.settings.log_key_path
    try:
        key = load_signing_key(path)
    except Exception as exc:
        return {"log_key": _failure("the audit log's key file cannot be read", exc)}
    if key.public_key.keyid != st.log.key.public_key.keyid:
        return {
            "log_key": CheckResult(False, "the audit log's key file holds another key than the one in use")
        }
    return {"log_key": CheckResult(True)}


Check = Callable[[RegistryState], dict[str, CheckResult]]
_GROUPS: tuple[tuple[Check, tuple[str, ...]], ...] = (
    (check_database, ("database", "migrations")),
    (check_storage, ("storage",)),
    (check_log_key, ("log_key",)),
)


class ReadinessProbe:
    """The checks of one app; see the module docstring."""

    def __init__(self, *, timeout_s: float = CHECK_TIMEOUT_S, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.timeout_s = timeout_s
        self.min_interval_s = min_interval_s
        self._running = {check: threading.Lock() for check, _ in _GROUPS}
        self._lock = asyncio.Lock()
        self._last: tuple[float, Readiness] | None = None

    async def __call__(self, st: RegistryState) -> Readiness:
        async with self._lock:  # one probe at a time; those that waited take its result
            if self._last is not None and time.monotonic() - self._last[0] < self.min_interval_s:
                return self._last[1]
            results = await asyncio.gather(*(self._run(check, names, st) for check, names in _GROUPS))
            merged = {name: result for group in results for name, result in group.items()}
            readiness = Readiness({name: merged[name] for name in CHECKS})
            self._last = (time.monotonic(), readiness)
            return readiness

    async def _run(self, check: Check, names: tuple[str, ...], st: RegistryState) -> dict[str, CheckResult]:
        """``check`` on a daemon thread of its own, waited for at most ``timeout_s``: a check that
        hangs keeps its thread (and its lock, so it is not started twice) until it returns, and
        never holds up the answer or the process's exit."""
        running = self._running[check]
        if not running.acquire(blocking=False):
            return dict.fromkeys(names, CheckResult(False, "an earlier check has not answered yet"))
        loop = asyncio.get_running_loop()
        done: asyncio.Future[dict[str, CheckResult]] = loop.create_future()

        def work() -> None:
            try:
                result = check(st)
            except Exception as exc:  # the checks catch their own errors: this is a bug
                result = dict.fromkeys(names, _failure("the check failed", exc))
            finally:
                running.release()
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, done, result)

        threading.Thread(target=work, name=f"kvreg-readiness-{names[0]}", daemon=True).start()
        try:
            return await asyncio.wait_for(asyncio.shield(done), self.timeout_s)
        except TimeoutError:
            return dict.fromkeys(names, CheckResult(False, f"no answer within {self.timeout_s:g} s"))


def _settle(future: asyncio.Future[dict[str, CheckResult]], result: dict[str, CheckResult]) -> None:
    if not future.done():
        future.set_result(result)
