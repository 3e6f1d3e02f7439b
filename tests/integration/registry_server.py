"""A real registry for the integration tests: ``kvreg serve`` under uvicorn on loopback.

Two backends, both real: ``sqlite-folder`` (the embedded defaults) and
``postgres-s3`` (a fresh PostgreSQL database and a fresh SeaweedFS bucket, from
``tests/services.py``). The first admin is made with ``kvreg-admin``, as an
operator would; everything after that goes through the HTTP API.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvreg.core.keys import PublicKey
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.remote.remotes import Credentials, RemoteConfig
from kvreg.store.home import Home

BACKENDS = ("sqlite-folder", "postgres-s3")
# Small limits, so the oversized-body refusals are cheap to provoke.
MAX_OBJECT_BYTES = 8 * 1024 * 1024
MAX_JSON_BYTES = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    backend: str
    root: Path
    env: dict[str, str]
    url: str = ""
    admin_token: str = ""
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)
    storage_url: str = ""
    s3: dict[str, str] = field(default_factory=dict)

    # --- lifecycle -------------------------------------------------------------------

    def start(self, port: int | None = None, *, args: tuple[str, ...] = ()) -> None:
        """Start ``kvreg serve`` on ``port`` (default: a free one), with more options ``args``,
        and wait until it answers."""
        port = port or free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = self.root / f"server-{port}.log"
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvreg",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
                *args,
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvreg serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/api/v1/", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"kvreg serve did not answer within 90 s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    @contextlib.contextmanager
    def another_process(self, **extra_env: str) -> Iterator[Registry]:
        """A second ``kvreg serve`` on the same database and storage (scale-out), stopped after."""
        other = Registry(
            self.backend,
            self.root,
            {**self.env, **extra_env},
            admin_token=self.admin_token,
            storage_url=self.storage_url,
            s3=self.s3,
        )
        other.start()
        try:
            yield other
        finally:
            other.stop()

    # --- administration ------------------------------------------------------------------

    def admin_cli(self, *args: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "kvreg_registry.admin", "--json", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"kvreg-admin {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}"
            )
        return json.loads(proc.stdout)

    def bootstrap(self) -> None:
        self.admin_cli("user", "create", "root", "--admin")
        self.admin_token = self.admin_cli("token", "create", "root", "--label", "tests")["token"]

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=60)

    def admin(self) -> httpx.Client:
        return self.http(self.admin_token)

    def namespace(self, *, public: bool = False) -> str:
        name = f"ns-{uuid.uuid4().hex[:10]}"
        with self.admin() as c:
            r = c.post("/namespaces", json={"name": name, "public": public})
            assert r.status_code == 201, r.text
        return name

    def user(self, roles: dict[str, str] | None = None) -> str:
        """A new user with ``roles`` ({namespace: role}); returns a token of theirs."""
        name = f"u{uuid.uuid4().hex[:10]}"
        with self.admin() as c:
            assert c.post("/users", json={"name": name}).status_code == 201
            for ns, role in (roles or {}).items():
                r = c.put(f"/namespaces/{ns}/roles/{name}", json={"role": role})
                assert r.status_code == 204, r.text
            r = c.post(f"/users/{name}/tokens", json={"label": "test"})
            assert r.status_code == 201, r.text
            return str(r.json()["token"])

    def register_key(self, ns: str, public_key: str) -> None:
        with self.admin() as c:
            r = c.post(f"/namespaces/{ns}/keys", json={"public_key": public_key})
            assert r.status_code == 201, r.text

    # --- looking behind the server's back ---------------------------------------------------

    def storage(self) -> Any:
        from kvreg_registry.storage import open_storage

        return open_storage(self.storage_url, **self.s3)

    def stored_digests(self) -> dict[str, int]:
        return {str(o.digest): o.size for o in self.storage().iter_objects()}


@contextlib.contextmanager
def running_registry(backend: str, root: Path) -> Iterator[Registry]:
    """Start a registry on ``backend`` with its own database and storage; stop and drop it after."""
    from services import fresh_bucket, fresh_pg_database, s3_settings

    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("KVREG_") and not key.startswith("KVREG_TEST_"):
            env.pop(key)
    env.update(
        KVREG_DATA=str(root / "data"),
        KVREG_MAX_OBJECT_BYTES=str(MAX_OBJECT_BYTES),
        KVREG_MAX_JSON_BYTES=str(MAX_JSON_BYTES),
        KVREG_MAX_MISSING_DIGESTS="5000",
        OMP_WAIT_POLICY="PASSIVE",
    )
    with contextlib.ExitStack() as stack:
        s3: dict[str, str] = {}
        if backend == "sqlite-folder":
            storage_url = str(root / "data" / "objects")
        elif backend == "postgres-s3":
            env["KVREG_DATABASE_URL"] = stack.enter_context(fresh_pg_database())
            bucket = stack.enter_context(fresh_bucket())
            s3 = s3_settings()
            storage_url = f"s3://{bucket}/kvreg/"
            env.update(
                KVREG_STORAGE=storage_url,
                KVREG_S3_ENDPOINT=s3["endpoint_url"],
                KVREG_S3_ACCESS_KEY=s3["access_key"],
                KVREG_S3_SECRET_KEY=s3["secret_key"],
                KVREG_S3_REGION=s3["region"],
            )
        else:  # pragma: no cover
            raise ValueError(backend)
        registry = Registry(backend, root, env, storage_url=storage_url, s3=s3)
        registry.bootstrap()
        registry.start()
        try:
            yield registry
        finally:
            registry.stop()


def client_home(root: Path, url: str, token: str, trust: dict[str, PublicKey]) -> Path:
    """``root`` as a client store: remote ``origin`` at ``url``, logged in, trusting ``trust``."""
    home = Home(root)
    home.ensure()
    RemoteConfig(home).add("origin", url)
    Credentials(home).set("origin", token)
    save_trust_policy(TrustPolicy({ns: [key] for ns, key in trust.items()}), home.trust_path)
    return root
