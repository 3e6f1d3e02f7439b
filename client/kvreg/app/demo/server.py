"""The demo's embedded registry: bootstrap its data folder and run ``kvreg serve`` as a subprocess.

:func:`bootstrap` does what an operator does with ``kvreg-admin`` before the first
start (users, tokens, namespaces, keys) with the registry's own functions, on the
embedded defaults (SQLite and an object folder). :class:`Server` runs ``kvreg
serve`` on 127.0.0.1 and a free port, and stops it whatever happens; on Linux it
dies with the demo's process if that is killed. :func:`stored` counts what the
object folder holds. Nothing here pushes, pulls or grafts (``registry_act``
does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from kvreg.app.demo.texts import (
    ADMIN_USER,
    FLYWHEEL_NAMESPACE,
    NAMESPACE,
    READER_USER,
    SERVER_START_TIMEOUT,
    SERVER_STOP_TIMEOUT,
)
from kvreg.core.errors import UnavailableError
from kvreg.core.keys import SigningKey
from kvreg_registry.admin import ACTOR
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings
from kvreg_registry.state import open_state

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tokens:
    """The API tokens :func:`bootstrap` created (never printed)."""

    admin: str
    reader: str


# Run in the server's process before ``kvreg serve``: on Linux, ask the kernel to send
# SIGTERM when the demo's process dies (even by SIGKILL), so that no server outlives it;
# exit at once if the demo is already gone. prctl(PR_SET_PDEATHSIG = 1) survives exec.
_SERVER_LAUNCHER = """
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
os.execv(sys.executable, [sys.executable, "-m", "kvreg", *sys.argv[2:]])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip() or "(empty log)"
    except OSError:
        return "(no log)"


class Server:
    """``kvreg serve --data DATA_DIR`` on 127.0.0.1 and a free port, as a subprocess.

    :meth:`start` launches it and returns at once (it starts while the demo does
    other work); :meth:`wait` returns its URL once ``GET /api/v1/`` answers, and
    launches it again on another port if it exited (another process took the free
    port first); :meth:`stop` (also on leaving the ``with`` block) terminates it,
    then kills it if it does not stop. The server gets the embedded defaults
    whatever ``KVREG_*`` variables are set in this process.
    """

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.stop()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_")}
        env["KVREG_DATA"] = str(self.data_dir)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = ["serve", "--data", str(self.data_dir), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--log-level", "warning"]
        with self.log_path.open("ab") as server_log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER_LAUNCHER, str(os.getpid()), *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=server_log,
                stderr=subprocess.STDOUT,
            )

    def wait(self) -> tuple[str, float]:
        """The server's URL once it answers, and the seconds this call waited for it."""
        waited = time.perf_counter()
        if self.proc is None:
            self.start()
        for attempt in range(3):
            deadline = time.monotonic() + SERVER_START_TIMEOUT
            with httpx.Client(trust_env=False, timeout=2.0) as http:
                while self.proc is not None and time.monotonic() < deadline and self.proc.poll() is None:
                    with contextlib.suppress(httpx.HTTPError):
                        if http.get(f"{self.url}/api/v1/").status_code == 200:
                            return self.url, time.perf_counter() - waited
                    time.sleep(0.05)
            if self.proc is not None and self.proc.poll() is None:
                self.stop()
                raise UnavailableError(
                    f"the demo registry did not answer within {SERVER_START_TIMEOUT:.0f} s:\n"
                    + _log_tail(self.log_path)
                )
            code = None if self.proc is None else self.proc.returncode
            log.info("the demo registry exited with %s (attempt %d)", code, attempt + 1)
            self.start()
        self.stop()
        raise UnavailableError(f"the demo registry did not start:\n{_log_tail(self.log_path)}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(SERVER_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("the demo registry did not stop within %.0f s; killing it", SERVER_STOP_TIMEOUT)
            proc.kill()
            proc.wait()


def bootstrap(data_dir: Path, key: SigningKey) -> Tokens:
    """What an operator does with ``kvreg-admin`` before the first start: returns the tokens."""
    state = open_state(Settings(data_dir=data_dir))  # the embedded defaults; migrates to head
    try:
        with state.db.write() as s:
            accounts.create_user(s, ACTOR, ADMIN_USER, admin=True)
            admin_token = accounts.create_token(s, ACTOR, ADMIN_USER, label="kvreg demo").token
            accounts.create_namespace(s, ACTOR, NAMESPACE, description="kvreg demo")
            accounts.register_key(
                s, ACTOR, NAMESPACE, key.public_key.to_text(), label="demo signer", owner=ADMIN_USER
            )
            accounts.create_namespace(
                s, ACTOR, FLYWHEEL_NAMESPACE, public=True, description="kvreg demo: the flywheel's library"
            )
            accounts.register_key(
                s, ACTOR, FLYWHEEL_NAMESPACE, key.public_key.to_text(), label="demo signer", owner=ADMIN_USER
            )
            accounts.create_user(s, ACTOR, READER_USER)
            accounts.set_role(s, ACTOR, NAMESPACE, READER_USER, "read")
            reader_token = accounts.create_token(s, ACTOR, READER_USER, label="kvreg demo").token
    finally:
        state.db.dispose()
    return Tokens(admin=admin_token, reader=reader_token)


def stored(data_dir: Path) -> dict[str, int]:
    """Objects and bytes in the registry's object folder (each stored once)."""
    files = [p for p in (data_dir / "objects" / "objects").rglob("*") if p.is_file()]
    return {"objects": len(files), "bytes": sum(p.stat().st_size for p in files)}
