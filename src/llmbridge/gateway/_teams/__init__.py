"""The team gateway: virtual keys, limits and budgets, a usage ledger, metrics and traces.

On when ``[gateway] master_key`` is set (keys, limits, ledger); ``/metrics`` unless
``metrics = false``; spans with ``otlp_endpoint``. See docs/teams.md and docs/deploy.md.
"""

from __future__ import annotations

from .core import Teams, Ticket, create, one_of, presented_key
from .keys import KeyInputError, KeyRecord, hash_secret
from .ledger import Ledger
from .limits import Admission, LocalLimiter, RedisLimiter
from .pricing import Price, cost
from .principal import AS_MASTER, AS_OPEN, AS_STATIC, MASTER, OPEN, STATIC, VIRTUAL, Principal, Refusal
from .settings import TeamsSettings
from .store import LedgerRow, PostgresStore, SQLiteStore, Store, connect

__all__ = [
    "AS_MASTER",
    "AS_OPEN",
    "AS_STATIC",
    "MASTER",
    "OPEN",
    "STATIC",
    "VIRTUAL",
    "Admission",
    "KeyInputError",
    "KeyRecord",
    "Ledger",
    "LedgerRow",
    "LocalLimiter",
    "PostgresStore",
    "Price",
    "Principal",
    "RedisLimiter",
    "Refusal",
    "SQLiteStore",
    "Store",
    "Teams",
    "TeamsSettings",
    "Ticket",
    "connect",
    "cost",
    "create",
    "hash_secret",
    "one_of",
    "presented_key",
]
