"""Prometheus metrics of one server process (``/metrics``): requests, latencies, writes, conflicts,
rejections. Each app has its own registry, so that several apps in one process do not collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "gitmem_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "gitmem_http_request_seconds",
            "Time from request to response",
            ["method", "route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.writes = Counter("gitmem_writes", "Versions written (and redactions)", ["operation"], registry=r)
        self.conflicts = Counter("gitmem_conflicts", "409 answers by error type", ["type"], registry=r)
        self.rejections = Counter(
            "gitmem_rejections", "4xx and 5xx answers by status", ["status"], registry=r
        )
        self.inline_reads = Counter(
            "gitmem_inline_reads", "Reads answered on the event loop, without a worker thread", registry=r
        )
        self.in_flight = Gauge("gitmem_http_in_flight", "Requests being answered", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
