"""The team gateway's ``[gateway]`` keys: parsed and validated at start (pure, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_DATABASE_URL", "KEYS", "TeamsSettings", "parse"]

KEYS = frozenset(
    {
        "master_key",
        "database_url",
        "redis_url",
        "rate_limit_failure",
        "ledger_flush_seconds",
        "ledger_max_buffer",
        "key_refresh_seconds",
        "metrics",
        "otlp_endpoint",
        "trace_content",
    }
)
DEFAULT_DATABASE_URL = "sqlite:///llmbridge.db"  # relative: under the working directory


@dataclass(frozen=True)
class TeamsSettings:
    """What turns the team features on and how they behave.

    Keys, limits and the ledger are on when ``master_key`` is set; ``/metrics`` is on unless
    ``metrics = false``; spans are exported when ``otlp_endpoint`` is set (or a tracer
    provider is handed to :meth:`Teams.use_tracer_provider`).
    """

    master_key: str | None = None
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    rate_limit_failure: str = "open"  # Redis unreachable: "open" admits, "closed" refuses with 503
    ledger_flush_seconds: float = 1.0  # the bound on rows lost to a SIGKILL (docs/teams.md)
    ledger_max_buffer: int = 100_000  # rows held while the database is down; more are shed (counted)
    key_refresh_seconds: float = 5.0  # how soon a key changed on another replica is seen here
    metrics: bool = True
    otlp_endpoint: str | None = None
    trace_content: bool = False  # put prompts in spans: an explicit opt-in, off by default

    @property
    def accounts(self) -> bool:
        """Virtual keys, limits and the ledger are on."""
        return self.master_key is not None


def parse(t: dict[str, Any], expand: Callable[[str, str], str]) -> TeamsSettings:
    """The team keys of a ``[gateway]`` table (others are ignored) to :class:`TeamsSettings`.

    ``expand(value, key)`` substitutes ``${VAR}``. Raises ``ValueError(key, why)``.
    """
    d = TeamsSettings()
    master = _string(t, "master_key", expand)
    if master is not None and len(master) < 16:
        raise ValueError("gateway.master_key", "must be at least 16 characters (it guards every key and budget)")
    database_url = _string(t, "database_url", expand) or d.database_url
    if not database_url.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ValueError("gateway.database_url", "must start with sqlite:/// or postgresql://")
    redis_url = _string(t, "redis_url", expand)
    if redis_url is not None and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("gateway.redis_url", "must start with redis://, rediss:// or unix://")
    failure = t.get("rate_limit_failure", d.rate_limit_failure)
    if failure not in ("open", "closed"):
        raise ValueError("gateway.rate_limit_failure", 'must be "open" or "closed"')
    flush = _positive(t, "ledger_flush_seconds", d.ledger_flush_seconds, 3600)
    refresh = _positive(t, "key_refresh_seconds", d.key_refresh_seconds, 3600)
    max_buffer = t.get("ledger_max_buffer", d.ledger_max_buffer)
    if type(max_buffer) is not int or not 1 <= max_buffer <= 100_000_000:
        raise ValueError("gateway.ledger_max_buffer", "must be an integer in [1, 100000000]")
    metrics = _bool(t, "metrics", d.metrics)
    otlp = _string(t, "otlp_endpoint", expand)
    if otlp is not None and not otlp.startswith(("http://", "https://")):
        raise ValueError("gateway.otlp_endpoint", "must be an http:// or https:// URL (OTLP over HTTP)")
    return TeamsSettings(
        master, database_url, redis_url, failure, flush, max_buffer, refresh, metrics, otlp,
        _bool(t, "trace_content", d.trace_content),
    )  # fmt: skip


def _string(t: dict[str, Any], name: str, expand: Callable[[str, str], str]) -> str | None:
    value = t.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"gateway.{name}", "must be a string")
    return expand(value, f"gateway.{name}") or None


def _positive(t: dict[str, Any], name: str, default: float, most: float) -> float:
    value = t.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value <= most):
        raise ValueError(f"gateway.{name}", f"must be a number of seconds in (0, {most:g}]")
    if not math.isfinite(value):
        raise ValueError(f"gateway.{name}", "must be finite")
    return float(value)


def _bool(t: dict[str, Any], name: str, default: bool) -> bool:
    value = t.get(name, default)
    if not isinstance(value, bool):
        raise ValueError(f"gateway.{name}", "must be true or false")
    return value
