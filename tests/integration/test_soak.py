"""The short soak: ``bench/soak.py``'s run for ~30 s against each backend, every check of it asserted.

The same code as the long form (``bench/soak.py --duration 600``, figures in
docs/benchmarks.md), run in-process against a registry of its own on each backend
(SQLite + folder, PostgreSQL + SeaweedFS): concurrent pushers, pullers, searchers,
route queries, GC with grace 0, web readers signed in through the form, a client
checking the audit log's consistency, and churn (deleted envelopes, abandoned
uploads). At the end: no error but the 409s of lost compare-and-swap races, every
pushed artifact pullable and byte-identical, storage exactly the live objects after
a last GC (plus only known garbage before it), no duplicate in the storage listing,
the database's object rows equal to storage, the whole audit log verified by the
client with entry counts equal to what was done, and the server's RSS at the end
not above twice its value after warm-up. No timing thresholds: the latencies are
reported by the long form, not judged here.

The soak found that GC with a short grace period deleted the temp file of an upload in
flight (a 500 for the upload); ``test_gc_with_grace_zero_leaves_an_upload_in_flight_alone``
pins the fix deterministically.

The soak's registry is not the suite's shared one (``tests/integration/conftest.py``): the
storage check needs a storage no other test writes to.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from kvreg.core.digest import Digest

from .registry_server import BACKENDS, Registry

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "soak.py"
DURATION_S = 30.0


def _soak_module() -> ModuleType:
    name = "kvreg_bench_soak"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend", BACKENDS)
def test_short_soak_loses_nothing_and_keeps_the_log_whole(backend: str, tmp_path: Path) -> None:
    soak = _soak_module()
    report: dict[str, Any] = soak.soak_backend(
        backend, tmp_path / "registry", duration=DURATION_S, workers=8, seed=1
    )
    summary = soak.render({"runs": [report]})

    assert report["server_alive_at_end"], summary
    assert report["unexpected_errors"] == 0, summary
    assert set(report["errors"]) <= {"409 REF_CONFLICT"}, summary
    assert report["mismatches"] == [], summary
    done = report["done"]
    # Every kind of operation ran, concurrently, more than once.
    for what in (
        "envelopes_created",
        "refs_created",
        "pulls",
        "searches",
        "pages",
        "gc_runs",
        "envelopes_deleted",
    ):
        assert done.get(what, 0) >= 2, (what, summary)
    assert done.get("abandoned_uploads", 0) >= 1, summary
    assert report["ops"]["log_check"]["count"] >= 2, summary

    checks = report["checks"]
    for name, value in checks.items():
        if isinstance(value, bool):
            assert value, (name, summary)
    assert checks["artifacts_lost"] == 0, summary
    assert checks["artifacts_pulled_byte_identical"] == checks["artifacts_pushed"] >= 2, summary
    assert checks["storage_after_gc_missing"] == [] and checks["storage_after_gc_unexpected"] == [], summary
    assert checks["audit_log_verified_entries"] > done["envelopes_created"], summary

    memory = report["memory"]
    assert memory["samples"] >= 2, summary
    assert memory["last_kib"] <= 2 * memory["after_warmup_kib"], summary
    assert report["ok"], summary


def test_gc_with_grace_zero_leaves_an_upload_in_flight_alone(_registries: dict[str, Registry]) -> None:
    """An object upload is paused after its first piece reached the server; a GC with
    grace 0 runs; the upload then finishes: stored (201), and its bytes read back. Before the fix,
    the GC swept the temp file and the upload failed with a 500. (SQLite + folder: there the temp
    file can be watched; the S3 backend's sweep takes the same floor.)"""
    registry = _registries["sqlite-folder"]
    ns = registry.namespace()
    token = registry.user({ns: "write"})
    piece = 4 << 20  # the first piece: the upload is under way, its temp file open
    data = os.urandom(piece + 4096)
    digest = Digest.of_bytes(data)
    tmp = registry.root / "data" / "objects" / "tmp"
    before = set(tmp.glob("*.incomplete")) if tmp.exists() else set()
    resume = threading.Event()
    answer: dict[str, object] = {}

    def body() -> Iterator[bytes]:
        yield data[:piece]
        resume.wait(120)
        yield data[piece:]

    def upload() -> None:
        try:
            with registry.http(token) as c:
                answer["r"] = c.put(
                    f"/namespaces/{ns}/objects/{digest}",
                    content=body(),
                    headers={"Content-Length": str(len(data)), "Content-Type": "application/octet-stream"},
                )
        except Exception as e:  # reported by the assertion below
            answer["error"] = e

    sender = threading.Thread(target=upload)
    sender.start()
    try:
        deadline = time.monotonic() + 60
        written: list[Path] = []
        while time.monotonic() < deadline and not written:
            # The server writes whole buffers (kvreg.fileio.directio), so the file may still be
            # empty: what matters is that an upload is in flight in it.
            written = [f for f in set(tmp.glob("*.incomplete")) - before if f.exists()]
            time.sleep(0.05)
        assert written, "the server never opened a temp file for the upload"
        time.sleep(1.1)  # the temp file is now older than a 0 s grace, at any mtime resolution
        with registry.admin() as c:
            gc = c.post("/gc", json={"grace_seconds": 0})
        assert gc.status_code == 200, gc.text
        assert all(f.exists() for f in written), "GC removed the temp file of an upload in flight"
    finally:
        resume.set()
        sender.join(120)
    assert "error" not in answer, answer
    r = answer["r"]
    assert isinstance(r, httpx.Response)
    assert r.status_code == 201, r.text
    with registry.http(token) as c:
        got = c.get(f"/namespaces/{ns}/objects/{digest}")
    assert got.status_code == 200 and got.content == data
