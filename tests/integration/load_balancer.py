"""nginx in front of several ``kvreg serve`` processes: the load-balancer sample of
docs/deployment.md made runnable, its access log read back, and a backend watched and killed.

:func:`documented_load_balancer` takes the sample as documented (``log_format``, ``upstream``
and ``server`` blocks), serves it on loopback without TLS and lists the given backends with
the documented ``server`` options; :func:`integration.test_ops_nginx.nginx` runs it. The
access log is the sample's own JSON format, which names every upstream a request was sent to
(``"127.0.0.1:A, 127.0.0.1:B"`` when nginx passed it on) and the status each answered.
Used by ``test_scale_out.py`` and ``bench/scale_out.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: What the documented sample says, replaced by the tests' own values.
DOC_BACKENDS = ("10.0.0.11:8080", "10.0.0.12:8080")
DOC_LISTEN = "listen 443 ssl;"
DOC_LOG = "access_log /var/log/nginx/kvreg.log kvreg_upstreams;"
#: The requests that carry object bytes (single objects, object packs, fetch packs).
OBJECT_PATH = re.compile(r"/objects/sha256:[0-9a-f]{64}$|/uploads/[^/]+/objects$|/objects/fetch$")


def documented_load_balancer(listen_port: int, backends: Sequence[str], log_path: Path) -> str:
    """The nginx sample of docs/deployment.md's load balancer, on ``127.0.0.1:listen_port``
    without TLS, in front of ``backends`` (``HOST:PORT``), its access log at ``log_path``."""
    doc = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    match = re.search(r"^nginx in front of several servers:\n\n```nginx\n(.*?)^```", doc, re.S | re.M)
    assert match is not None, "docs/deployment.md has no load-balancer sample"
    lines = match.group(1).splitlines()
    servers = [
        i
        for i, line in enumerate(lines)
        if line.strip().startswith(tuple(f"server {b}" for b in DOC_BACKENDS))
    ]
    assert len(servers) == len(DOC_BACKENDS), f"the sample's upstream changed: {lines}"
    options = {lines[i].split(None, 2)[2] for i in servers}
    assert len(options) == 1, f"the sample's servers differ in their options: {options}"
    indent = lines[servers[0]][: len(lines[servers[0]]) - len(lines[servers[0]].lstrip())]
    ours = [f"{indent}server {backend} {next(iter(options))}" for backend in backends]
    lines[servers[0] : servers[-1] + 1] = ours
    block = "\n".join(line for line in lines if "ssl_certificate" not in line)
    for documented, tested in (
        (DOC_LISTEN, f"listen 127.0.0.1:{listen_port};"),
        (DOC_LOG, f"access_log {log_path} kvreg_upstreams;"),
    ):
        assert documented in block, f"the load-balancer sample changed: {documented!r} is gone"
        block = block.replace(documented, tested)
    return block


@dataclass(frozen=True)
class Request:
    """One line of the sample's access log."""

    method: str
    path: str
    status: int
    sent: int
    received: int
    seconds: float
    upstreams: tuple[str, ...]
    upstream_statuses: tuple[str, ...]

    @property
    def passed_on(self) -> bool:
        """nginx sent it to more than one server (the first refused, reset or timed out)."""
        return len(self.upstreams) > 1

    @property
    def carries_objects(self) -> bool:
        return OBJECT_PATH.search(self.path) is not None


def read_access_log(path: Path) -> list[Request]:
    out: list[Request] = []
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        method, _, rest = doc["request"].partition(" ")
        target = rest.rpartition(" ")[0].split("?")[0]
        upstreams = tuple(u.strip() for u in re.split(r"[,:]\s(?=\S)", doc["upstream"]) if u.strip())
        statuses = tuple(s.strip() for s in re.split(r"[,:]\s", doc["upstream_status"]) if s.strip())
        out.append(
            Request(
                method,
                target,
                int(doc["status"]),
                int(doc["sent"]),
                int(doc["received"]),
                float(doc["seconds"]),
                upstreams,
                statuses,
            )
        )
    return out


@dataclass(frozen=True)
class Traffic:
    """What the access log says about a stretch of requests."""

    requests: int
    object_requests: int
    passed_on: int
    answered_5xx: int
    bytes_received: int
    bytes_sent: int
    by_upstream: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "object_requests": self.object_requests,
            "passed_on_to_another_server": self.passed_on,
            "answered_5xx": self.answered_5xx,
            "bytes_received": self.bytes_received,
            "bytes_sent": self.bytes_sent,
            "answered_by_upstream": self.by_upstream,
        }


def traffic(requests: Sequence[Request]) -> Traffic:
    by_upstream: dict[str, int] = {}
    for r in requests:
        if r.upstreams:
            by_upstream[r.upstreams[-1]] = by_upstream.get(r.upstreams[-1], 0) + 1
    return Traffic(
        requests=len(requests),
        object_requests=sum(r.carries_objects for r in requests),
        passed_on=sum(r.passed_on for r in requests),
        answered_5xx=sum(r.status >= 500 for r in requests),
        bytes_received=sum(r.received for r in requests),
        bytes_sent=sum(r.sent for r in requests),
        by_upstream=dict(sorted(by_upstream.items())),
    )


def open_transfers(port: int) -> list[int]:
    """The bytes each established TCP connection to ``127.0.0.1:port`` has moved so far (the
    larger of received and acknowledged as sent), from ``ss -ti``. The sample keeps no
    connections to the upstreams open between requests, so each is a request nginx proxies."""
    done = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    moved = []
    for info in done.stdout.split("\n\t")[1:]:
        counters = dict(re.findall(r"\b(bytes_received|bytes_acked):(\d+)", info))
        moved.append(max(int(counters.get("bytes_received", 0)), int(counters.get("bytes_acked", 0))))
    return moved


def sigkill(proc: subprocess.Popen[bytes]) -> int:
    """``kill -9`` a process of ours; its exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(30)


#: The upstream failures nginx writes to its error log, by kind.
UPSTREAM_ERRORS = {
    "refused": "(111: Connection refused) while connecting to upstream",
    "reset": "(104: Connection reset by peer)",
    "closed_early": "upstream prematurely closed connection",
    "no_live_upstreams": "no live upstreams",
}


def upstream_errors(error_log: Path) -> dict[str, int]:
    """How many upstream failures of each kind nginx's error log holds."""
    try:
        text = error_log.read_text(errors="replace")
    except OSError:
        text = ""
    return {kind: text.count(needle) for kind, needle in UPSTREAM_ERRORS.items()}
