"""Prometheus metrics of one gateway (its own registry: two apps in a process never clash).

Labels are bounded sets chosen by the operator (model names, upstream names, dialects, error
types), never key ids or request data: cardinality stays what the config allows.
"""

from __future__ import annotations

from typing import TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import MetricWrapperBase

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_M = TypeVar("_M", bound=MetricWrapperBase)
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        # (id(metric), labels) -> child; bounded like the labels: by the config's models/upstreams
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "llmbridge_requests", "Requests answered, by model, client dialect and HTTP status",
            ["model", "dialect", "status"], registry=r,
        )  # fmt: skip
        self.tokens = Counter(
            "llmbridge_tokens", "Tokens reported by upstreams, by model and direction (input/output)",
            ["model", "direction"], registry=r,
        )  # fmt: skip
        self.cost = Counter("llmbridge_cost_usd", "USD spent (config prices), by model", ["model"], registry=r)
        self.ttft = Histogram(
            "llmbridge_time_to_first_byte_seconds", "Request start to the first body bytes sent, streams only",
            ["model"], buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self.duration = Histogram(
            "llmbridge_request_duration_seconds", "Request start to the end of the answer",
            ["model"], buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self.overhead = Histogram(
            "llmbridge_gateway_overhead_seconds", "The gateway's own time before an answer's first byte "
            "(request arrival to first byte, less the upstream's time to its answer): Server-Timing gateway;dur",
            buckets=_OVERHEAD, registry=r,
        )  # fmt: skip
        self.open_streams = Gauge("llmbridge_open_streams", "Requests admitted and not over yet", registry=r)
        self.upstream_errors = Counter(
            "llmbridge_upstream_errors", "Errors the client got, by upstream and hub error type",
            ["upstream", "type"], registry=r,
        )  # fmt: skip
        self.rejections = Counter(
            "llmbridge_limit_rejections", "Requests refused by a key's limits, by reason (rpm, tpm, budget, "
            "model, auth, auth_throttled, limiter_unavailable)", ["reason"], registry=r,
        )  # fmt: skip
        self.limiter_errors = Counter("llmbridge_limiter_errors", "Redis calls that failed", registry=r)
        self.ledger_written = Counter("llmbridge_ledger_rows_written", "Ledger rows written", registry=r)
        self.ledger_dropped = Counter(
            "llmbridge_ledger_rows_dropped", "Ledger rows shed: the database was down and the buffer full", registry=r
        )
        self.cache = Counter(
            "llmbridge_cache", "Response cache lookups (gateway/_cache.py), by model and result (hit, miss)",
            ["model", "result"], registry=r,
        )  # fmt: skip
        self.ledger_pending = Gauge("llmbridge_ledger_rows_pending", "Ledger rows waiting to be written", registry=r)

    def child(self, metric: _M, *labels: str) -> _M:
        """``metric.labels(*labels)``, cached: the label lookup is the costly part of an update."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        # The key holds id(metric), and labels() returns the metric's own type: the entry is an _M.
        return cast(_M, found)

    def on_ledger_write(self, written: int, dropped: int) -> None:
        if written:
            self.ledger_written.inc(written)
        if dropped:
            self.ledger_dropped.inc(dropped)

    def render(self) -> bytes:
        """The text exposition format (version 0.0.4)."""
        return generate_latest(self.registry)
