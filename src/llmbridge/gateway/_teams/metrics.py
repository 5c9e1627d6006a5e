"""Prometheus metrics of one gateway (its own registry: two apps in a process never clash).

Labels are bounded sets chosen by the operator (model names, upstream names, dialects, error
types), never key ids or request data: cardinality stays what the config allows.

Every request updates about ten series, so an update is a plain float addition here: the
values live in this module's own small objects, and the registry reads them only when
``/metrics`` is scraped (each family is a collector of its children). prometheus_client's own
metric classes took a lock, an observability check and a label lookup per update -- about a
third of what settling a request cost. The exposition (``render``) is the one
prometheus_client writes for its own Counter, Gauge and Histogram, ``_created`` series included.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

import prometheus_client.metrics as _pm
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

__all__ = ["CONTENT_TYPE", "Counter", "Family", "Gauge", "Histogram", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def _created() -> bool:
    # prometheus_client's switch for the ``_created`` series (PROMETHEUS_DISABLE_CREATED_SERIES,
    # or disable_created_metrics()): read at scrape time, as its own metrics do.
    return bool(getattr(_pm, "_use_created", True))


class Counter:
    """One counter series: only goes up."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount

    def samples(self, metric: Metric, labels: dict[str, str]) -> None:
        metric.add_sample(metric.name + "_total", labels, self.value)
        if _created():
            metric.add_sample(metric.name + "_created", labels, self.created)


class Gauge:
    """One gauge series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)

    def samples(self, metric: Metric, labels: dict[str, str]) -> None:
        metric.add_sample(metric.name, labels, self.value)


class Histogram:
    """One histogram series: a count per bucket (not cumulative until rendered) and the sum."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds  # ascending, the last one +Inf
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.sum += amount
        if amount == amount:  # (NaN falls in no bucket, as prometheus_client has it)
            # the first bucket whose bound is >= amount: the one prometheus_client counts it in
            self.counts[bisect_left(self.bounds, amount)] += 1

    def samples(self, metric: Metric, labels: dict[str, str]) -> None:
        name = metric.name
        total = 0.0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            total += count
            le = floatToGoString(bound)  # type: ignore[no-untyped-call]  # (prometheus_client's own spelling)
            metric.add_sample(name + "_bucket", {**labels, "le": le}, total)
        metric.add_sample(name + "_count", labels, total)
        if self.bounds[0] >= 0:
            metric.add_sample(name + "_sum", labels, self.sum)
        if _created():
            metric.add_sample(name + "_created", labels, self.created)


_C = TypeVar("_C", Counter, Gauge, Histogram)


class Family(Generic[_C]):
    """A metric by label values (:meth:`labels`), and the registry's collector of it. A series
    exists from its first :meth:`labels` call on, as with prometheus_client."""

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        documentation: str,
        kind: str,
        labelnames: Sequence[str],
        make: Callable[[], _C],
    ) -> None:
        self.name, self.documentation, self.kind = name, documentation, kind
        self.labelnames = tuple(labelnames)
        self._make: Callable[[], _C] = make
        self.children: dict[tuple[str, ...], _C] = {}
        registry.register(self)

    def labels(self, *values: str) -> _C:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, got {len(values)}")
            child = self.children[values] = self._make()
        return child

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, self.kind)
        for values, child in list(self.children.items()):
            child.samples(metric, dict(zip(self.labelnames, map(str, values), strict=True)))
        return [metric]


def _single(r: CollectorRegistry, name: str, doc: str, kind: str, make: Callable[[], _C]) -> _C:
    """A metric without labels: its one series (registered, there from the start)."""
    return Family(r, name, doc, kind, (), make).labels()


class _ModelSeries:
    """A model's series that settling moves, kept once found: one look-up by the model's name
    per request instead of a label tuple made and hashed per series. Each is None until its
    family's ``labels()`` makes it, the first time it moves (so the same series exist)."""

    __slots__ = ("cost", "duration", "input", "output", "ttft")

    def __init__(self) -> None:
        self.cost: Counter | None = None
        self.duration: Histogram | None = None
        self.input: Counter | None = None
        self.output: Counter | None = None
        self.ttft: Histogram | None = None


class Metrics:
    def __init__(self) -> None:
        # what settled() moves, by model and by (model, dialect, status as a number): see there
        self._models: dict[str, _ModelSeries] = {}
        self._answered: dict[tuple[str, str, int], Counter] = {}
        r = self.registry = CollectorRegistry()
        latency = (*map(float, _LATENCY), math.inf)
        self.requests = Family(
            r, "llmbridge_requests", "Requests answered, by model, client dialect and HTTP status", "counter",
            ["model", "dialect", "status"], Counter,
        )  # fmt: skip
        self.tokens = Family(
            r, "llmbridge_tokens", "Tokens reported by upstreams, by model and direction (input/output)", "counter",
            ["model", "direction"], Counter,
        )  # fmt: skip
        self.cost = Family(
            r, "llmbridge_cost_usd", "USD spent (config prices), by model", "counter", ["model"], Counter
        )
        self.ttft = Family(
            r, "llmbridge_time_to_first_byte_seconds", "Request start to the first body bytes sent, streams only",
            "histogram", ["model"], lambda: Histogram(latency),
        )  # fmt: skip
        self.duration = Family(
            r, "llmbridge_request_duration_seconds", "Request start to the end of the answer", "histogram",
            ["model"], lambda: Histogram(latency),
        )  # fmt: skip
        overhead = (*map(float, _OVERHEAD), math.inf)
        self.overhead = _single(
            r, "llmbridge_gateway_overhead_seconds", "The gateway's own time before an answer's first byte "
            "(request arrival to first byte, less the upstream's time to its answer): Server-Timing gateway;dur",
            "histogram", lambda: Histogram(overhead),
        )  # fmt: skip
        self.open_streams = _single(r, "llmbridge_open_streams", "Requests admitted and not over yet", "gauge", Gauge)
        self.upstream_errors = Family(
            r, "llmbridge_upstream_errors", "Errors the client got, by upstream and hub error type", "counter",
            ["upstream", "type"], Counter,
        )  # fmt: skip
        self.rejections = Family(
            r, "llmbridge_limit_rejections", "Requests refused by a key's limits, by reason (rpm, tpm, budget, "
            "model, auth, auth_throttled, limiter_unavailable)", "counter", ["reason"], Counter,
        )  # fmt: skip
        self.limiter_errors = _single(r, "llmbridge_limiter_errors", "Redis calls that failed", "counter", Counter)
        self.ledger_written = _single(r, "llmbridge_ledger_rows_written", "Ledger rows written", "counter", Counter)
        self.ledger_dropped = _single(
            r, "llmbridge_ledger_rows_dropped", "Ledger rows shed: the database was down and the buffer full",
            "counter", Counter,
        )  # fmt: skip
        self.cache = Family(
            r, "llmbridge_cache", "Response cache lookups (gateway/_cache.py), by model and result (hit, miss)",
            "counter", ["model", "result"], Counter,
        )  # fmt: skip
        self.ledger_pending = _single(
            r, "llmbridge_ledger_rows_pending", "Ledger rows waiting to be written", "gauge", Gauge
        )

    def settled(
        self,
        model: str,
        dialect: str,
        status: int,
        input_tokens: int | None,
        output_tokens: int | None,
        cost: float,
        ttft: float | None,
        duration: float,
        cache: str | None,
        error: tuple[str, str] | None,
    ) -> None:
        """One request settled (``Teams.settle``): the series it moves, in one call.

        The series are kept per model (:class:`_ModelSeries`) and per (model, dialect,
        status): a dictionary look-up or two per request, where a label tuple per series
        (and ``str(status)``) cost ~3 k instructions more. A series is made by its family's
        ``labels()``, as with ``labels().inc()``, and only when it first moves: a token
        count only when it is positive, the cost only when there is one, the time to the
        first byte only for a stream, the cache's only for a cached model, an upstream
        error (``error``: (upstream, type)) only when there was one."""
        self.open_streams.value -= 1.0
        answered = self._answered.get((model, dialect, status))
        if answered is None:
            answered = self._answered[(model, dialect, status)] = self.requests.labels(model, dialect, str(status))
        answered.value += 1.0
        series = self._models.get(model)
        if series is None:
            series = self._models[model] = _ModelSeries()
        if input_tokens and input_tokens > 0:
            if series.input is None:
                series.input = self.tokens.labels(model, "input")
            series.input.value += input_tokens
        if output_tokens and output_tokens > 0:
            if series.output is None:
                series.output = self.tokens.labels(model, "output")
            series.output.value += output_tokens
        if cost and cost > 0:
            if series.cost is None:
                series.cost = self.cost.labels(model)
            series.cost.value += cost
        if ttft is not None:
            if series.ttft is None:
                series.ttft = self.ttft.labels(model)
            series.ttft.observe(ttft)
        if series.duration is None:
            series.duration = self.duration.labels(model)
        series.duration.observe(duration)
        if cache is not None:
            key = (model, cache)
            (self.cache.children.get(key) or self.cache.labels(*key)).value += 1.0
        if error is not None:
            (self.upstream_errors.children.get(error) or self.upstream_errors.labels(*error)).value += 1.0

    def on_ledger_write(self, written: int, dropped: int) -> None:
        if written:
            self.ledger_written.inc(written)
        if dropped:
            self.ledger_dropped.inc(dropped)

    def render(self) -> bytes:
        """The text exposition format (version 0.0.4)."""
        return generate_latest(self.registry)
