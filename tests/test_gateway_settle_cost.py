"""What settling a request costs (issue 23): each shortcut taken on the settle path against
the general path it stands for, over many inputs (a shortcut that diverges fails here)."""

from __future__ import annotations

import itertools
import random

from llmbridge import hub
from llmbridge.gateway._teams.metrics import Metrics
from llmbridge.gateway._teams.pricing import Price, cost


def _cost_in_full(price: Price, usage: hub.Usage) -> float:
    # pricing.cost's general rule, every term written out (the reference the shortcut must equal)
    inp, out = usage.input_tokens or 0, usage.output_tokens or 0
    cached = min(usage.cache_read_tokens or 0, inp)
    thinking = min(usage.reasoning_tokens or 0, out)
    cached_rate = price.input if price.cached is None else price.cached
    thinking_rate = price.output if price.thinking is None else price.thinking
    micro = (inp - cached) * price.input + cached * cached_rate + (out - thinking) * price.output
    return (micro + thinking * thinking_rate) / 1_000_000


def test_cost_without_cached_or_reasoning_tokens_equals_the_general_rule_exactly() -> None:
    prices = [Price(2.5, 10, 1.25), Price(0.15, 0.6), Price(3, 15, 0.3, 20), Price(0, 0), Price(1e6, 0.1, 0.0, 0.0)]
    tokens = [None, 0, 1, 7, 8, 4096, 123_457, -3]
    seen = 0
    for price, inp, out, cached, thinking in itertools.product(prices, tokens, tokens, [None, 0, 5], [None, 0, 2]):
        usage = hub.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached, reasoning_tokens=thinking)
        expected = _cost_in_full(price, usage)
        got = cost(price, usage)
        assert got == expected and type(got) is type(expected), (price, usage, got, expected)
        seen += 1
    assert seen == 5 * 8 * 8 * 9


def _settled_by_labels(m: Metrics, model, dialect, status, inp, out, spent, ttft, duration, cache, error) -> None:
    # what Metrics.settled stands for, through the families' labels() and the series' own calls
    m.open_streams.dec()
    m.requests.labels(model, dialect, str(status)).inc()
    if inp and inp > 0:
        m.tokens.labels(model, "input").inc(inp)
    if out and out > 0:
        m.tokens.labels(model, "output").inc(out)
    if spent and spent > 0:
        m.cost.labels(model).inc(spent)
    if ttft is not None:
        m.ttft.labels(model).observe(ttft)
    m.duration.labels(model).observe(duration)
    if cache is not None:
        m.cache.labels(model, cache).inc()
    if error is not None:
        m.upstream_errors.labels(*error).inc()


def _exposition(m: Metrics) -> list[str]:
    return [line for line in m.render().decode().splitlines() if "_created" not in line]


def test_settled_moves_the_same_series_as_labels_calls() -> None:
    rng = random.Random(23)
    fast, by_labels = Metrics(), Metrics()
    for i in range(600):
        args = (
            rng.choice(["m1", "m2", "(unknown)"]),
            rng.choice(["openai-chat", "anthropic-messages"]),
            rng.choice([200, 200, 400, 429, 499, 502]),
            rng.choice([None, 0, 3, 812]),
            rng.choice([None, 0, 1, 40]),
            rng.choice([0.0, 0.0, 1.5e-05, 0.02]),
            rng.choice([None, 0.0004, 0.3, 7.0]),
            rng.choice([0.0, 0.001, 0.6, 45.0, 1000.0]),
            rng.choice([None, None, "hit", "miss"]),
            rng.choice([None, None, ("up-a", "overloaded"), ("up-b", "api_error")]),
        )
        fast.settled(*args)
        _settled_by_labels(by_labels, *args)
        if i in (0, 1, 7, 60, 599):  # series appear as they first move, not all at once
            assert _exposition(fast) == _exposition(by_labels)
