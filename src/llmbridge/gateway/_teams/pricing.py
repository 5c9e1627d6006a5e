"""Prices per model and the cost of one request (pure functions, no I/O)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ... import hub

__all__ = ["PRICE_KEYS", "Price", "cost", "parse_price"]

PRICE_KEYS = ("input", "output", "cached", "thinking")
_MAX_PRICE = 1_000_000.0  # USD per million tokens: anything above is a typo, not a price


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. ``cached`` defaults to ``input``, ``thinking`` to ``output``."""

    input: float = 0.0
    output: float = 0.0
    cached: float | None = None
    thinking: float | None = None


def parse_price(value: Any, key: str) -> Price:
    """A ``price = { input = …, output = …, cached = …, thinking = … }`` table to a :class:`Price`.

    Raises ``ValueError(key, why)`` (the config layer turns it into a ``ConfigError``) for a
    non-table, an unknown field or a price that is negative, not finite or absurd.
    """
    if not isinstance(value, dict):
        raise ValueError(key, "must be a table like { input = 2.5, output = 10 } (USD per million tokens)")
    fields: dict[str, float] = {}
    for name, v in value.items():
        if name not in PRICE_KEYS:
            raise ValueError(f"{key}.{name}", f"unknown key; known: {', '.join(PRICE_KEYS)}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= _MAX_PRICE:
            raise ValueError(f"{key}.{name}", f"must be a number of USD per million tokens in [0, {_MAX_PRICE:g}]")
        fields[name] = float(v)
    return Price(**fields)


def cost(price: Price | None, usage: hub.Usage | None) -> float:
    """USD for one request's ``usage`` at ``price`` (0.0 without either).

    ``input_tokens`` counts cached prompt tokens too and ``output_tokens`` counts reasoning
    tokens too (see :class:`hub.Usage`), so those parts are billed at their own rates and
    only the rest at the plain input/output rates.
    """
    if price is None or usage is None:
        return 0.0
    inp = usage.input_tokens or 0
    out = usage.output_tokens or 0
    if not usage.cache_read_tokens and not usage.reasoning_tokens and inp >= 0 and out >= 0:
        # Nothing at the cached or reasoning rates (most answers): the sum below less its two
        # zero terms, which leave a non-negative float exactly as it was (every request settled
        # asks this; the rest costs ~3 k instructions more).
        return (inp * price.input + out * price.output) / 1_000_000
    cached = min(usage.cache_read_tokens or 0, inp)
    thinking = min(usage.reasoning_tokens or 0, out)
    cached_rate = price.input if price.cached is None else price.cached
    thinking_rate = price.output if price.thinking is None else price.thinking
    micro = (inp - cached) * price.input + cached * cached_rate + (out - thinking) * price.output
    micro += thinking * thinking_rate
    return micro / 1_000_000
