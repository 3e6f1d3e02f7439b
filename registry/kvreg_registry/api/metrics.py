"""The registry's Prometheus metrics: what is counted, and the text ``GET /metrics`` answers.

One :class:`RegistryMetrics` per app (``create_app`` makes it; :func:`metrics_of` finds it).
What feeds it:

- every HTTP request, through ``kvreg_registry.api.metrics_http`` (requests by route
  template, method and status; latency; body bytes in and out; requests in progress; and the
  events an answer stands for: pushes, pulls, refused uploads, ref conflicts);
- the upload routes, for the objects they stored (:meth:`RegistryMetrics.objects_stored`);
- the failed-authentication limiter (``kvreg_registry.api.ratelimit``): failures and refusals;
- the database engine's pool events (:meth:`RegistryMetrics.watch_pool`): connections in use;
- at scrape time, the database: the audit log's size and its last stored checkpoint
  (:class:`AuditLogCollector`), read by whichever process answers the scrape.

**Several processes** (``kvreg serve --workers N``): prometheus-client's multiprocess mode. When
``PROMETHEUS_MULTIPROC_DIR`` is set (``kvreg_registry.server`` sets it to a fresh directory of
the server's own before it starts the workers) every process writes its samples to files there
and a scrape, whichever worker answers it, adds up every process's files: counters and
histograms are summed, gauges of live processes summed (``livesum``), and a worker that stops
removes its live gauges (:meth:`RegistryMetrics.close`). Without the variable each app keeps its
metrics in a registry of its own (one process; the tests' apps never share counters).

Names follow Prometheus's conventions: the ``kvreg_`` prefix, base units (seconds, bytes),
``_total`` on counters. Labels never carry a raw path, a namespace, a digest or a user: a
route's template (``/api/v1/namespaces/{ns}/objects/{digest}``) is the most specific label.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, event, select
from starlette.requests import HTTPConnection

import kvreg
from kvreg_registry.db.models import LogCheckpoint, LogHead
from kvreg_registry.state import RegistryState

log = logging.getLogger(__name__)

__all__ = [
    "CONTENT_TYPE",
    "MULTIPROC_ENV",
    "AuditLogCollector",
    "RegistryMetrics",
    "metrics_of",
]

#: prometheus-client's variable: where the processes of one server keep their samples.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The exposition format ``GET /metrics`` answers: Prometheus text 0.0.4, which every scraper reads
#: (the names here need none of the newer format's escaping).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Request latency buckets, seconds: API calls take milliseconds, object transfers minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class RegistryMetrics:
    """The registry's metrics, in this process's registry or in the multiprocess files."""

    def __init__(self) -> None:
        self.multiprocess_dir: str | None = os.environ.get(MULTIPROC_ENV) or None
        own = None if self.multiprocess_dir else CollectorRegistry()
        self._own = own
        self._scrape_collectors: list[Collector] = []

        def counter(name: str, doc: str, labels: Iterable[str] = ()) -> Counter:
            return Counter(name, doc, list(labels), registry=own)

        def live_gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, registry=own, multiprocess_mode="livesum")

        # --- HTTP (kvreg_registry.api.metrics_http) ----------------------------------------
        self.requests = counter(
            "kvreg_http_requests", "HTTP requests answered, by method, route template and status.",
            ("method", "route", "status"),
        )  # fmt: skip
        self.duration = Histogram(
            "kvreg_http_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by method and route template.",
            ["method", "route"],
            buckets=DURATION_BUCKETS,
            registry=own,
        )
        self.received = counter(
            "kvreg_http_received_bytes", "Request body bytes received, by route template.", ("route",)
        )
        self.served = counter(
            "kvreg_http_served_bytes", "Response body bytes sent, by route template.", ("route",)
        )
        self.in_progress = live_gauge("kvreg_http_requests_in_progress", "Requests being answered now.")
        # --- what the answers stand for ---------------------------------------------------------
        self.pushes = counter("kvreg_pushes", "Signed envelopes accepted (one per push of an artifact).")
        self.pulls = counter(
            "kvreg_pulls", "Envelopes (kvreg) and OCI manifests (oci) served: pulls begun.", ("api",)
        )
        self.stored = counter(
            "kvreg_objects_stored",
            "Objects accepted by uploads (PUT or object pack); storage: new bytes, or existing ones.",
            ("storage",),
        )
        self.stored_bytes = counter("kvreg_objects_stored_bytes", "Bytes of objects new to the storage.")
        self.refused = counter(
            "kvreg_objects_refused",
            "Uploads refused (an object, or a whole pack): digest_mismatch or too_large.",
            ("reason",),
        )
        self.ref_conflicts = counter(
            "kvreg_ref_conflicts", "Ref changes refused because the ref was not at the expected digest."
        )
        self.auth_failures = counter(
            "kvreg_auth_failures", "Failed authentications (bearer tokens and web sign-ins)."
        )
        self.rate_limited = counter(
            "kvreg_rate_limited_requests", "Requests refused 429 by the failed-authentication limiter."
        )
        # --- this process's database pool (watch_pool) -----------------------------------------
        self.db_in_use = live_gauge(
            "kvreg_db_pool_connections_in_use", "Database connections checked out of the pools."
        )
        self.db_max = live_gauge(
            "kvreg_db_pool_connections_max", "Most connections the pools may open (size plus overflow)."
        )
        for api in ("kvreg", "oci"):  # every series from the start: rate() and alerts need no gap
            self.pulls.labels(api=api)
        for storage in ("new", "existing"):
            self.stored.labels(storage=storage)
        for reason in ("digest_mismatch", "too_large"):
            self.refused.labels(reason=reason)
        build = Gauge(
            "kvreg_build_info", "The registry's version (always 1).", ["version"],
            registry=own, multiprocess_mode="max",
        )  # fmt: skip
        build.labels(version=kvreg.__version__).set(1)

    # --- recording ---------------------------------------------------------------------------

    def objects_stored(self, results: Iterable[tuple[bool, int]]) -> None:
        """Count the objects an upload stored: ``(new to the storage, size)`` each."""
        for new, size in results:
            self.stored.labels(storage="new" if new else "existing").inc()
            if new:
                self.stored_bytes.inc(size)

    def watch_pool(self, engine: Engine) -> None:
        """Follow ``engine``'s connection pool: checkouts and checkins, and its capacity."""
        pool: Any = engine.pool
        size = pool.size() if callable(getattr(pool, "size", None)) else 0
        overflow = getattr(pool, "_max_overflow", 0)
        self.db_max.inc(size + max(0, int(overflow)))
        event.listen(engine, "checkout", self._checked_out)
        event.listen(engine, "checkin", self._checked_in)

    def _checked_out(self, *_args: Any) -> None:
        self.db_in_use.inc()

    def _checked_in(self, *_args: Any) -> None:
        self.db_in_use.dec()

    def add_scrape_collector(self, collector: Collector) -> None:
        """A collector run at each scrape, in the process that answers it (never per process)."""
        self._scrape_collectors.append(collector)
        if self._own is not None:
            self._own.register(collector)

    def close(self) -> None:
        """This process stops serving: its live gauges leave the multiprocess sums."""
        if self.multiprocess_dir is not None:
            multiprocess.mark_process_dead(os.getpid(), self.multiprocess_dir)  # type: ignore[no-untyped-call]

    # --- exposition --------------------------------------------------------------------------

    def render(self) -> bytes:
        """Every sample, in the Prometheus text format (blocking: the scrape collectors read the
        database, and in multiprocess mode every process's files are read)."""
        if self._own is not None:
            return generate_latest(self._own)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        for collector in self._scrape_collectors:
            registry.register(collector)
        return generate_latest(registry)


class AuditLogCollector(Collector):
    """The audit log's size and its last stored checkpoint, read from the database at scrape time
    (one short read; when the database does not answer, these samples are left out and the
    scrape still answers)."""

    def __init__(self, state_of: Callable[[], RegistryState | None]) -> None:
        self._state_of = state_of  # the app's state, once its lifespan began

    def describe(self) -> Iterable[Metric]:
        return self._families()

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily("kvreg_audit_log_entries", "Entries in the audit log."),
            GaugeMetricFamily(
                "kvreg_audit_log_checkpoint_entries", "The log's size at its last stored signed checkpoint."
            ),
            GaugeMetricFamily(
                "kvreg_audit_log_checkpoint_age_seconds",
                "Seconds since the last stored checkpoint was signed (a checkpoint is stored the first "
                "time a size is signed).",
            ),
        ]

    def collect(self) -> Iterator[Metric]:
        state = self._state_of()
        if state is None:
            return
        try:
            with state.db.read() as s:
                size = s.execute(select(LogHead.size).where(LogHead.id == 1)).scalar_one_or_none()
                last = s.execute(
                    select(LogCheckpoint.size, LogCheckpoint.created_at)
                    .order_by(LogCheckpoint.size.desc())
                    .limit(1)
                ).first()
        except Exception as e:  # a scrape must answer even when the database does not
            log.warning("metrics: the audit log's size could not be read: %s", e)
            return
        entries, checkpoint, age = self._families()
        entries.add_metric([], float(size or 0))
        yield entries
        checkpoint.add_metric([], float(last.size) if last is not None else 0.0)
        yield checkpoint
        if last is not None:
            age.add_metric([], max(0.0, time.time() - last.created_at.timestamp()))
            yield age


def metrics_of(request: HTTPConnection) -> RegistryMetrics:
    """The metrics of the app that serves ``request``."""
    metrics: RegistryMetrics = request.app.state.metrics  # set by create_app
    return metrics
