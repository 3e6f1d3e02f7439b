"""``/metrics`` of a real ``kvreg serve --workers 2``, read by ``promtool`` and scraped by a real
Prometheus server.

The two worker processes keep their samples in one directory of the server's own (made in
``$TMPDIR`` at start, removed at stop): requests are spread over both (each one's share is read
from its own files), and every scrape, whichever worker answers it, counts all of them. A
Prometheus server (Debian's ``prometheus``), configured by the test on loopback, scrapes the
registry every second; its HTTP API then answers a query for the registry's series. Every wait
is bounded and both servers are stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from prometheus_text import promtool_check, tool, value
from web.library import Library

from .registry_server import Registry, free_port

WAIT_S = 60.0
LIVEZ = {"method": "GET", "route": "/livez", "status": "200"}


def per_worker_livez(folder: Path) -> dict[str, float]:
    """The ``/livez`` requests each worker counted, read from its own files alone."""
    shares: dict[str, float] = {}
    pids = {p.stem.rpartition("_")[2] for p in folder.glob("counter_*.db")}
    for pid in pids:
        alone = folder.parent / f"alone-{pid}"
        alone.mkdir()
        for f in folder.glob(f"*_{pid}.db"):
            shutil.copy(f, alone / f.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))  # type: ignore[no-untyped-call]
        shares[pid] = value(generate_latest(registry).decode(), "kvreg_http_requests_total", **LIVEZ)
        shutil.rmtree(alone)
    return shares


@contextlib.contextmanager
def prometheus(root: Path, target: str) -> Iterator[str]:
    """A Prometheus server scraping ``target`` every second; yields its URL."""
    root.mkdir()
    config = root / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: kvreg\n    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    port = free_port()
    log = (root / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    with contextlib.suppress(httpx.HTTPError):
        r = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
        if r.status_code == 200:
            return list(r.json()["data"]["result"])
    return []


def test_workers_share_their_metrics_and_prometheus_scrapes_them(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVREG_", "PROMETHEUS_MULTIPROC"))}
    env.update(KVREG_DATA=str(tmp_path / "data"), TMPDIR=str(tmp), OMP_WAIT_POLICY="PASSIVE")
    reg = Registry("sqlite-folder", tmp_path, env)
    reg.bootstrap()
    reg.start(args=("--workers", "2"))
    try:
        folders = list(tmp.glob("kvreg-metrics-*"))
        assert len(folders) == 1, folders
        # a push and a pull, each request on a connection of its own
        with httpx.Client(base_url=reg.url, timeout=60) as http:
            lib = Library(client=http, admin_token=reg.admin_token)  # type: ignore[arg-type]
            ns = lib.namespace()
            published = lib.publish(ns, "ops-one", "the registry counts what its workers serve")
        auth = {"Authorization": f"Bearer {reg.admin_token}"}
        api = f"{reg.url}/api/v1/namespaces/{ns}"
        assert httpx.get(f"{api}/envelopes/{published.digest}", headers=auth).status_code == 200
        for digest in published.manifest.object_digests():
            assert httpx.get(f"{api}/objects/{digest}", headers=auth).status_code == 200
        # /livez until both workers have answered some (bounded)
        sent = 0
        while sent < 400:
            for _ in range(20):
                assert httpx.get(f"{reg.url}/livez", timeout=10).status_code == 200
            sent += 20
            shares = per_worker_livez(folders[0])
            if len(shares) == 2 and all(shares.values()):
                break
        assert len(shares) == 2 and all(shares.values()), f"one worker answered everything: {shares}"
        assert sum(shares.values()) == sent
        # every scrape counts every worker's requests
        for _ in range(8):
            r = httpx.get(f"{reg.url}/metrics", timeout=30)
            assert r.status_code == 200
            assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
            text = r.text
            assert value(text, "kvreg_http_requests_total", **LIVEZ) == sent
            assert value(text, "kvreg_pushes_total") == 1
            assert value(text, "kvreg_pulls_total", api="kvreg") == 1
            assert value(text, "kvreg_objects_stored_total", storage="new") > 0
            assert value(text, "kvreg_db_pool_connections_max") == 30  # two processes' pools
            assert value(text, "kvreg_build_info", version=__import__("kvreg").__version__) == 1
        promtool_check(text)

        with prometheus(tmp_path / "prometheus", reg.url.removeprefix("http://")) as prom:
            deadline = time.monotonic() + WAIT_S
            series: list[dict[str, Any]] = []
            while time.monotonic() < deadline:
                series = query(prom, 'kvreg_http_requests_total{route="/livez",status="200"}')
                if series and float(series[0]["value"][1]) >= sent:
                    break
                time.sleep(1)
            assert series, f"Prometheus has no kvreg series after {WAIT_S:.0f} s"
            assert series[0]["metric"]["job"] == "kvreg"
            assert float(series[0]["value"][1]) >= sent
            up = query(prom, 'up{job="kvreg"}')
            assert up and up[0]["value"][1] == "1"
            assert query(prom, "kvreg_pushes_total")[0]["value"][1] == "1"
    finally:
        reg.stop()
    assert list(tmp.glob("kvreg-metrics-*")) == [], "the server left its metrics directory behind"
