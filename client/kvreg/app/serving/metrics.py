"""``GET /metrics``: the server's counters and latencies in Prometheus' text format.

One :class:`ServeMetrics` per application, over a registry of its own (never
``prometheus_client``'s global one: two applications in one process, as the tests build, must
not share or collide). Names follow Prometheus' conventions: the ``kvreg_engine_`` prefix,
base units (seconds), ``_total`` on counters. The request histograms and the HTTP counters
are observed by the front door when an answer ends (``.gate``); everything the model thread
and the queue know is read when the page is scraped (a collector over ``host.counters``,
``host.executor`` and the admission), so the model thread never touches the registry.

Time to first token runs from the request's headers to the first completion token taken from
the model (the first streamed text leaves at most one token later: a partial character or a
possible stop string waits); end to end, from the headers to the answer's last byte.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvreg import __version__

if TYPE_CHECKING:
    from kvreg.app.serving.admission import Admission
    from kvreg.app.serving.host import ModelHost
    from kvreg.app.serving.trace import Trace

PREFIX = "kvreg_engine"
#: Prometheus' classic text format, which every Prometheus release scrapes (the names here are
#: plain ASCII, so the newer 1.0.0 format would be the same bytes).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
COMPLETION_ROUTES = ("/v1/chat/completions", "/v1/completions")
MODES = ("knowledge", "prefix", "off")
#: Status codes that mean the request was refused, by reason (a label of ``requests_rejected``).
REJECTIONS = {
    400: "invalid",
    422: "invalid",
    401: "auth",
    404: "not_found",
    405: "invalid",
    413: "body_too_large",
    429: "overload",
}
# From a grafted repeat on a fast host (10 ms) to a long CPU prefill (several minutes).
TTFT_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    320.0,
)
E2E_BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
)


class ServeMetrics:
    """The registry of one application, and the observations the front door makes."""

    def __init__(self, host: ModelHost, admission: Admission) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ttft = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "Seconds from a completion request's headers to its first completion token, by route "
            "and the mode used (knowledge, prefix: grafted; off: no cache).",
            ["route", "mode"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            f"{PREFIX}_e2e_request_latency_seconds",
            "Seconds from a completion request's headers to the end of its answer, by route and mode.",
            ["route", "mode"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.http = Counter(
            f"{PREFIX}_http_requests",
            "HTTP requests answered, by route and status code.",
            ["route", "code"],
            registry=r,
        )
        self.rejected = Counter(
            f"{PREFIX}_requests_rejected",
            "Requests refused before any work, by reason: overload (429), invalid (400), auth (401), "
            "body_too_large (413), not_found (404).",
            ["reason"],
            registry=r,
        )
        self.abandoned = Counter(
            f"{PREFIX}_requests_abandoned",
            "Requests whose client left before the answer ended: while queued (their place given "
            "back at once, the model never ran them) or while running (stopped at the next token).",
            ["stage"],
            registry=r,
        )
        self.health = Counter(
            f"{PREFIX}_health_checks",
            "GET /health answers, by result (ok or failed).",
            ["result"],
            registry=r,
        )
        info = Gauge(
            f"{PREFIX}_build_info",
            "Always 1: the kvreg version, the model id and the config fingerprint as labels.",
            ["version", "model", "config_fingerprint"],
            registry=r,
        )
        info.labels(__version__, host.name, str(host.lm.config.fingerprint)).set(1)
        for route in COMPLETION_ROUTES:  # every series exists from the start, at zero
            for mode in MODES:
                self.ttft.labels(route, mode)
                self.e2e.labels(route, mode)
        for reason in sorted(set(REJECTIONS.values())):
            self.rejected.labels(reason)
        for stage in ("queued", "running"):
            self.abandoned.labels(stage)
        for result in ("ok", "failed"):
            self.health.labels(result)
        r.register(_ServerCollector(host, admission))
        ProcessCollector(namespace=PREFIX, registry=r)

    def finished(self, trace: Trace, status: int) -> None:
        """Observe one request whose answer ended (called by the front door)."""
        if status:
            self.http.labels(trace.route, str(status)).inc()
        reason = REJECTIONS.get(status)
        if reason is not None:
            self.rejected.labels(reason).inc()
        if trace.abandoned is not None:
            self.abandoned.labels(trace.abandoned).inc()
        res = trace.result
        if res is None or trace.route not in COMPLETION_ROUTES:
            return
        mode = res.result.used_mode
        if res.first_token_at is not None:
            self.ttft.labels(trace.route, mode).observe(max(0.0, res.first_token_at - trace.started))
        self.e2e.labels(trace.route, mode).observe(time.perf_counter() - trace.started)

    def render(self) -> tuple[bytes, str]:
        """The exposition (Prometheus text format 0.0.4) and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE


class _ServerCollector(Collector):
    """What the model thread and the queue know, read at each scrape."""

    def __init__(self, host: ModelHost, admission: Admission) -> None:
        self.host, self.admission = host, admission

    def collect(self) -> Iterator[Metric]:
        counts = self.host.counters.snapshot()
        held, running = self.admission.held, int(self.host.running is not None)
        yield _gauge("requests_running", "Requests on the model now (0 or 1).", running)
        yield _gauge(
            "requests_waiting",
            "Requests held for the model and not on it: reading their body, tokenizing, queued.",
            max(0, held - running),
        )
        yield _gauge(
            "queue_capacity",
            "Requests that may wait besides the running one (--max-queue).",
            self.admission.max_queue,
        )
        yield _gauge("model_load_seconds", "Seconds the model took to load.", self.host.load_seconds)
        for name, doc, value in (
            ("answered", "Requests the model answered.", counts.answered),
            ("prompt_tokens", "Prompt tokens of the requests answered.", counts.prompt_tokens),
            (
                "cached_prompt_tokens",
                "Prompt tokens restored from kvreg (grafted) instead of computed.",
                counts.cached_tokens,
            ),
            ("prefilled_tokens", "Prompt tokens computed (prefilled) by the model.", counts.prefilled_tokens),
            ("decoded_tokens", "Completion tokens decoded by the model.", counts.decoded_tokens),
            (
                "completion_tokens",
                "Completion tokens answered (a knowledge answer's copied tokens included).",
                counts.completion_tokens,
            ),
            ("stopped", "Requests stopped on the model because their client left.", counts.stopped),
        ):
            yield CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)
        for name, doc, label, by, known in (
            (
                "grafts",
                "Requests answered with a graft, by mode.",
                "mode",
                counts.grafts,
                ("knowledge", "prefix"),
            ),
            (
                "witness_probes",
                "Witness probes of grafts: run, or skipped because a pass under this config was remembered.",
                "outcome",
                counts.probes,
                ("run", "remembered"),
            ),
            (
                "fallbacks",
                "Requests that asked for the cache and ran without it, by reason: the refusal's error "
                "code (a verification refusal: key_untrusted, digest_mismatch...) or no_match.",
                "reason",
                counts.fallbacks,
                ("no_match",),
            ),
            (
                "receipts",
                "Graft receipts sent to --receipts, by outcome.",
                "outcome",
                counts.receipts,
                ("sent", "failed"),
            ),
        ):
            family = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=[label])
            for key in sorted(set(known) | set(by)):
                family.add_metric([key], by.get(key, 0))
            yield family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)
