"""What settling a request costs (issue 23): each shortcut taken on the settle path against
the general path it stands for, over many inputs (a shortcut that diverges fails here)."""

from __future__ import annotations

import itertools

from llmbridge import hub
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
