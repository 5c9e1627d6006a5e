"""Throttling credential guesses: failed key checks and console logins, per client address.

Every failed attempt (a missing, unknown, revoked or expired key on a client endpoint or
``/admin``, a wrong console key) takes a token from its address's bucket; an address whose
bucket is empty is refused with 429 and ``retry-after`` *before* its credential is looked
at, so a right key inside the window gets the same 429 (a 200 would tell a guesser it was
right). The bucket holds ``per_minute`` tokens and refills at ``per_minute`` a minute: a
client that mistypes its key a few times never notices, a guesser gets ``per_minute``
tries a minute instead of thousands a second. Successful requests cost nothing.

Memory is bounded: at most ``max_clients`` addresses are tracked (the least recently failed
is forgotten first) and an address whose bucket is full again is dropped. The table is per
process (each replica or worker throttles on its own). The address is the ASGI ``client``,
which uvicorn takes from ``X-Forwarded-For`` only for proxies it trusts
(``FORWARDED_ALLOW_IPS``, default loopback).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ... import hub
from .principal import Principal, Refusal

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

__all__ = ["Guesses", "client_of"]

MAX_CLIENTS = 10_000


def client_of(connection: HTTPConnection) -> str:
    """The client address of a request or WebSocket ("" when the server gave none)."""
    client = connection.scope.get("client")  # (host, port); read as is, not as Starlette's Address
    return client[0] if client else ""


class Guesses:
    """Token buckets of failed attempts by client address (see the module docstring)."""

    def __init__(
        self,
        per_minute: int = 10,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self.per_minute = per_minute  # 0: no throttling
        self.max_clients = max_clients
        self.clock = clock
        self.on_refused = on_refused  # called per 429 (the teams metrics count them)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, at)
        self.refused = 0  # attempts answered 429 (for tests and metrics)

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, client: str, now: float) -> float | None:
        """The address's tokens now, or None when it has a full bucket (forgotten)."""
        found = self._buckets.get(client)
        if found is None:
            return None
        tokens, at = found
        tokens = min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)
        if tokens >= self.per_minute:
            del self._buckets[client]
            return None
        return tokens

    def wait(self, client: str) -> float | None:
        """Seconds until ``client`` may try again, or None when it may try now."""
        if not self.per_minute or not self._buckets:  # (no address has failed lately: all may try)
            return None
        now = self.clock()
        tokens = self._tokens(client, now)
        if tokens is None or tokens >= 1.0:
            return None
        self.refused += 1
        if self.on_refused is not None:
            self.on_refused()
        return (1.0 - tokens) * 60.0 / self.per_minute

    def failed(self, client: str) -> None:
        """``client`` presented a wrong (or no) credential: one token less."""
        if not self.per_minute:
            return
        now = self.clock()
        tokens = self._tokens(client, now)
        if tokens is None:
            tokens = float(self.per_minute)
            while len(self._buckets) >= self.max_clients:
                self._buckets.popitem(last=False)  # the least recently failed address
        self._buckets[client] = (max(0.0, tokens - 1.0), now)
        self._buckets.move_to_end(client)

    async def check(
        self, client: str, authenticate: Callable[[], Awaitable[Principal | Refusal]]
    ) -> Principal | Refusal:
        """``authenticate()`` unless ``client`` must wait (then a 429); a refused key counts as a guess."""
        wait = self.wait(client)
        if wait is not None:
            return self.refusal(wait)
        who = await authenticate()
        if isinstance(who, Refusal) and who.reason == "auth":
            self.failed(client)
        return who

    def refusal(self, wait: float) -> Refusal:
        """The 429 for an address that must wait ``wait`` seconds."""
        error = hub.Error(
            "too many failed authentication attempts from this address; try again later",
            "rate_limit", "too_many_failed_attempts", 429,
        )  # fmt: skip
        return Refusal(error, {"retry-after": str(max(1, math.ceil(wait)))}, "auth_throttled")
