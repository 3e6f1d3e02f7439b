"""The nginx sample of docs/deployment.md in front of a real ``kvreg serve --forwarded-allow-ips``.

The test runs Debian's ``nginx`` with the documented ``server`` block (TLS taken out, a free
loopback port, the registry's port put in) and talks to it from two loopback addresses,
127.0.0.2 and 127.0.0.3, while nginx reaches the registry from 127.0.0.1, the trusted proxy.
The failed-authentication limiter must see each client's own address: one client locked out
leaves the other alone (with nginx's address, both would be locked out together), a client
cannot claim another address through nginx, and a peer that is not the proxy cannot claim one
either. The sample also keeps ``/metrics`` from the outside. nginx is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from prometheus_text import tool, value

from .registry_server import Registry, free_port

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
LIMIT = 3
A, B = "127.0.0.2", "127.0.0.3"
TOKEN_A, TOKEN_B = "kvreg_" + "A" * 43, "kvreg_" + "B" * 43


def documented_server_block(listen_port: int, registry_port: int) -> str:
    """The nginx sample of docs/deployment.md, served on loopback without TLS."""
    doc = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    match = re.search(r"^nginx:\n\n```nginx\n(.*?)^```", doc, re.S | re.M)
    assert match is not None, "docs/deployment.md has no nginx sample"
    block = match.group(1)
    for documented, tested in (
        ("listen 443 ssl;", f"listen 127.0.0.1:{listen_port};"),
        ("proxy_pass http://127.0.0.1:8080;", f"proxy_pass http://127.0.0.1:{registry_port};"),
    ):
        assert documented in block, f"the nginx sample changed: {documented!r} is gone"
        block = block.replace(documented, tested)
    return "\n".join(line for line in block.splitlines() if "ssl_certificate" not in line)


@contextlib.contextmanager
def nginx(root: Path, server_block: str, port: int) -> Iterator[str]:
    root.mkdir()
    conf = root / "nginx.conf"
    temp = "\n".join(
        f"    {kind}_temp_path {root / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf.write_text(
        f"daemon off;\nworker_processes 1;\npid {root / 'nginx.pid'};\nerror_log {root / 'error.log'} warn;\n"
        "events { worker_connections 64; }\n"
        f"http {{\n    access_log {root / 'access.log'};\n{temp}\n{server_block}\n}}\n"
    )
    log = (root / "nginx.out").open("wb")
    proc = subprocess.Popen(
        [tool("nginx"), "-p", str(root), "-c", str(conf), "-e", str(root / "error.log")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert proc.poll() is None, f"nginx exited: {(root / 'error.log').read_text(errors='replace')}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/livez", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "nginx did not answer"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def client_from(address: str, base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, transport=httpx.HTTPTransport(local_address=address), timeout=30)


def namespaces(client: httpx.Client, token: str, **headers: str) -> int:
    return client.get(
        "/api/v1/namespaces", headers={"Authorization": f"Bearer {token}", **headers}
    ).status_code


def test_behind_the_documented_nginx_the_limiter_sees_each_clients_address(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_") or k.startswith("KVREG_TEST_")}
    env.update(KVREG_DATA=str(tmp_path / "data"), KVREG_AUTH_FAILURE_LIMIT=str(LIMIT))
    reg = Registry("sqlite-folder", tmp_path, env)
    reg.bootstrap()
    reg.start(args=("--forwarded-allow-ips", "127.0.0.1"))
    port = free_port()
    registry_port = int(reg.url.rpartition(":")[2])
    try:
        with (
            nginx(tmp_path / "nginx", documented_server_block(port, registry_port), port) as url,
            client_from(A, url) as a,
            client_from(B, url) as b,
        ):
            assert [namespaces(a, TOKEN_A) for _ in range(LIMIT)] == [401] * LIMIT
            assert namespaces(a, reg.admin_token) == 429  # A is locked out, whatever token it sends
            # B comes through the same nginx: its address is its own, not locked out with A's
            assert namespaces(b, TOKEN_B) == 401
            assert namespaces(b, reg.admin_token) == 200
            # A cannot claim B's address through nginx: the sample replaces X-Forwarded-For
            assert namespaces(a, reg.admin_token, **{"X-Forwarded-For": B}) == 429
            # ... nor straight to the registry, which believes only its proxy (127.0.0.1)
            with client_from(A, reg.url) as direct:
                assert namespaces(direct, reg.admin_token, **{"X-Forwarded-For": B}) == 429
            with client_from("127.0.0.1", reg.url) as proxy_itself:
                assert namespaces(proxy_itself, reg.admin_token, **{"X-Forwarded-For": "127.0.0.9"}) == 200
            # the sample keeps /metrics from the outside; from the inside it counts what happened
            assert a.get("/metrics").status_code == 403
            text = httpx.get(f"{reg.url}/metrics", timeout=30).text
            assert value(text, "kvreg_auth_failures_total") == LIMIT + 1
            assert value(text, "kvreg_rate_limited_requests_total") == 3
        access_log = (tmp_path / "nginx" / "access.log").read_text()
        assert A in access_log and B in access_log
    finally:
        reg.stop()
