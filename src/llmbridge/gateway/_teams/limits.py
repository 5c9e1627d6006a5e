"""Rate limits and budgets per virtual key: in process, or shared by N replicas through Redis.

Rules (the same for both limiters):

- **RPM**: a sliding 60-second window of admitted requests; a request is admitted while fewer
  than ``rpm_limit`` were admitted in the last 60 s. Counted at the request's start.
- **TPM**: tokens per UTC minute. A request is admitted while the minute's tokens are below
  ``tpm_limit``; it is charged an estimate up front (its prompt's size) and corrected with the
  real usage when its stream ends (so one long answer can take a minute over the limit; the
  next request then waits).
- **Budget**: USD spent in the key's period (UTC day, UTC month, or ever). A request is
  admitted while the spend is below ``budget_usd``; its cost is added when it ends. So a key
  stops within one request of its budget (requests in flight at once can each finish).

The Redis limiter runs each decision as one Lua script (atomic on the server: no
read-then-write race between replicas) using Redis's own clock, so N replicas share one
exact window.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .keys import KeyRecord, period_end, period_start

__all__ = ["ADMITTED", "Admission", "LocalLimiter", "Pipeliner", "RedisLimiter", "Seed", "WINDOW"]

WINDOW = 60.0
Seed = Callable[[str, float], Awaitable[float]]  # (key id, period start) -> USD spent since (the ledger)


@dataclass(slots=True)
class Admission:
    """A limiter's answer. ``reason``: "rpm", "tpm" or "budget" when refused."""

    ok: bool
    reason: str | None = None
    retry_after: float | None = None  # seconds; None: not before the budget is raised
    bucket: int = 0  # the TPM minute the estimate was charged to
    estimate: int = 0
    counted: bool = True  # False: admitted without the limiter (it was down); nothing to settle


ADMITTED = Admission(True)


class LocalLimiter:
    """Limits kept in this process (one replica, or no Redis). Memory: O(keys x rpm_limit)."""

    def __init__(self, seed: Seed, clock: Callable[[], float] = time.time):
        self._seed = seed
        self._clock = clock
        self._rpm: dict[str, deque[float]] = {}
        self._tpm: dict[str, list[int]] = {}  # key id -> [minute, tokens]
        self._spend: dict[tuple[str, float], float] = {}

    async def admit(self, key: KeyRecord, estimate: int) -> Admission:
        now = self._clock()
        spent = None
        if key.budget_usd is not None:
            start = period_start(key.budget_period, now)
            spent = self._spend.get((key.id, start))
            if spent is None:  # a new period (or first use): read it from the ledger, forget past periods
                for stale in [k for k in self._spend if k[0] == key.id]:
                    del self._spend[stale]
                spent = self._spend.setdefault((key.id, start), await self._seed(key.id, start))
        return self._decide(key, estimate, now, spent)

    def admit_now(self, key: KeyRecord, estimate: int) -> Admission | None:
        """:meth:`admit` without a coroutine (~1.5 k instructions less per request), or None
        when the key's spend in this period must first be read from the ledger (then
        :meth:`admit`): the same decision and the same counts as :meth:`admit`."""
        now = self._clock()
        spent = None
        if key.budget_usd is not None:
            spent = self._spend.get((key.id, period_start(key.budget_period, now)))
            if spent is None:
                return None
        return self._decide(key, estimate, now, spent)

    def _decide(self, key: KeyRecord, estimate: int, now: float, spent: float | None) -> Admission:
        """Budget (``spent`` this period: None without a budget), RPM and TPM at ``now``;
        counts an admitted request."""
        if spent is not None and key.budget_usd is not None and spent >= key.budget_usd:
            end = period_end(key.budget_period, now)
            return Admission(False, "budget", None if end is None else end - now)
        window = None
        if key.rpm_limit is not None:
            window = self._rpm.get(key.id)
            if window is None:
                window = self._rpm[key.id] = deque()
            while window and window[0] <= now - WINDOW:
                window.popleft()
            if len(window) >= key.rpm_limit:
                return Admission(False, "rpm", window[0] + WINDOW - now)
        minute = int(now // 60)
        if key.tpm_limit is not None:
            used = self._tpm.get(key.id)
            if used is None or used[0] != minute:
                used = self._tpm[key.id] = [minute, 0]
            if used[1] >= key.tpm_limit:
                return Admission(False, "tpm", (minute + 1) * 60 - now)
            used[1] += estimate
        if window is not None:
            window.append(now)
        return Admission(True, None, None, minute, estimate)  # (positional: ok, reason, retry_after, bucket, estimate)

    async def settle(self, key: KeyRecord, admission: Admission, tokens: int, cost: float) -> None:
        self.settle_now(key, admission, tokens, cost)

    def settle_now(self, key: KeyRecord, admission: Admission, tokens: int, cost: float) -> None:
        """:meth:`settle` without a coroutine (nothing to wait for in process)."""
        if key.tpm_limit is not None:
            used = self._tpm.get(key.id)
            if used is not None and used[0] == admission.bucket:
                used[1] += tokens - admission.estimate
        if key.budget_usd is not None and cost:
            period = (key.id, period_start(key.budget_period, self._clock()))
            spent = self._spend.get(period)
            if spent is not None:  # (else not seeded yet: the next admission reads the ledger)
                self._spend[period] = spent + cost

    async def aclose(self) -> None:
        pass


# KEYS: rpm zset, tpm key prefix, spend key. ARGV: rpm, tpm, estimate, member, budget ("" none).
# Returns {code, retry_ms, minute}: 1 admitted, 0 rpm, 3 tpm, 4 budget, 2 spend unknown (seed it).
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)
if ARGV[5] ~= '' then
  local spent = redis.call('GET', KEYS[3])
  if not spent then return {2, 0, minute} end
  if tonumber(spent) >= tonumber(ARGV[5]) then return {4, 0, minute} end
end
local rpm = tonumber(ARGV[1])
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, tonumber(oldest[2]) + 60000 - now, minute}
  end
end
local tpm = tonumber(ARGV[2])
if tpm > 0 then
  local tkey = KEYS[2] .. minute
  local used = tonumber(redis.call('GET', tkey) or '0')
  if used >= tpm then return {3, (minute + 1) * 60000 - now, minute} end
  redis.call('INCRBY', tkey, ARGV[3])
  redis.call('PEXPIRE', tkey, 120000)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], 61000)
end
return {1, 0, minute}
"""

# KEYS: tpm bucket key, spend key. ARGV: token correction, cost. Never creates a key: an expired
# TPM minute needs no correction, and a spend counter not seeded yet is seeded from the ledger.
_SETTLE = """
if ARGV[1] ~= '0' and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCRBY', KEYS[1], ARGV[1]) end
if ARGV[2] ~= '0' and redis.call('EXISTS', KEYS[2]) == 1 then redis.call('INCRBYFLOAT', KEYS[2], ARGV[2]) end
return 1
"""


# One queued script call: the script (redis-py's AsyncScript: its ``sha`` and ``script`` are
# used), KEYS, ARGV, and the caller's future for the reply (a Redis reply: any shape).
_Call = tuple[Any, list[str], list[int | str], asyncio.Future[Any]]


class Pipeliner:
    """Coalesces the script calls made in one event-loop turn into one Redis pipeline.

    A burst of N requests is one round trip on one connection instead of N connections and N
    round trips (each script still runs atomically on the server; a pipeline is not a
    transaction, so one failing script fails only its own call).
    """

    def __init__(self, redis: Any):
        self.redis = redis
        self._queue: list[_Call] = []
        self._flushing: set[asyncio.Task[None]] = set()  # held so a pending flush is not garbage-collected

    def call(self, script: Any, keys: list[str], args: list[int | str]) -> asyncio.Future[Any]:
        """Queue ``script(keys, args)``; the future gets its reply (or its error)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            task = loop.create_task(self._flush())  # runs after the handlers already ready this turn
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)
        self._queue.append((script, keys, args, future))
        return future

    async def _flush(self) -> None:
        batch, self._queue = self._queue, []
        try:
            replies = await self._execute(batch)
            missing = {id(script): script for (script, *_), r in zip(batch, replies, strict=True) if _noscript(r)}
            if missing:  # first use on this server (or it restarted): load the scripts, run those calls again
                for script in missing.values():
                    script.sha = await self.redis.script_load(script.script)
                again = [i for i, r in enumerate(replies) if _noscript(r)]
                for i, reply in zip(again, await self._execute([batch[i] for i in again]), strict=True):
                    replies[i] = reply
        except BaseException as exc:  # connection refused, timeout, cancelled: every caller hears it
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else ConnectionError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), reply in zip(batch, replies, strict=True):
            if future.done():  # the request went away meanwhile
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _execute(self, batch: list[_Call]) -> list[Any]:
        # EVALSHA straight into the pipeline: redis-py's Script objects would add a SCRIPT
        # EXISTS round trip to every pipeline; a NOSCRIPT reply is handled by the caller.
        pipe = self.redis.pipeline(transaction=False)
        for script, keys, args, _ in batch:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


def _noscript(reply: Any) -> bool:
    from redis.exceptions import NoScriptError

    return isinstance(reply, NoScriptError)


class RedisLimiter:
    """Limits in Redis, shared by every replica pointed at it. Raises the client's errors (the
    caller applies ``rate_limit_failure``)."""

    def __init__(self, url: str, seed: Seed, *, timeout: float = 1.0, client: Any = None):
        import redis.asyncio as aioredis

        self.redis = client or aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, health_check_interval=30
        )
        self._seed = seed
        self._admit_script = self.redis.register_script(_ADMIT)
        self._settle_script = self.redis.register_script(_SETTLE)
        self._pipe = Pipeliner(self.redis)

    def _admit(self, keys: list[str], args: list[int | str]) -> asyncio.Future[Any]:
        return self._pipe.call(self._admit_script, keys, args)

    @staticmethod
    def _keys(key: KeyRecord, now: float) -> list[str]:
        tag = f"llmb:{{{key.id}}}"  # one hash tag: the script's keys share a slot
        return [f"{tag}:rpm", f"{tag}:tpm:", f"{tag}:spend:{int(period_start(key.budget_period, now))}"]

    async def admit(self, key: KeyRecord, estimate: int) -> Admission:
        now = time.time()
        keys = self._keys(key, now)
        budget = "" if key.budget_usd is None else repr(key.budget_usd)
        args: list[int | str] = [key.rpm_limit or 0, key.tpm_limit or 0, estimate, uuid.uuid4().hex, budget]
        code, retry_ms, minute = await self._admit(keys, args)
        if code == 2:  # first use of this period on any replica since Redis started: seed from the ledger
            spent = await self._seed(key.id, period_start(key.budget_period, now))
            end = period_end(key.budget_period, now)
            ttl = None if end is None else int(end - now) + 86400
            await self.redis.set(keys[2], repr(spent), nx=True, ex=ttl)
            code, retry_ms, minute = await self._admit(keys, args)
            if code == 2:  # expired between the two calls (a period boundary): admit, count from now
                return Admission(True, bucket=int(minute), estimate=estimate)
        if code == 1:
            return Admission(True, bucket=int(minute), estimate=estimate)
        if code == 4:
            end = period_end(key.budget_period, now)
            return Admission(False, "budget", None if end is None else end - now)
        return Admission(False, "rpm" if code == 0 else "tpm", int(retry_ms) / 1000)

    async def settle(self, key: KeyRecord, admission: Admission, tokens: int, cost: float) -> None:
        keys = self._keys(key, time.time())
        delta = tokens - admission.estimate if key.tpm_limit is not None else 0
        spend = repr(cost) if key.budget_usd is not None and cost else "0"
        if delta or spend != "0":
            await self._pipe.call(self._settle_script, [keys[1] + str(admission.bucket), keys[2]], [delta, spend])

    async def aclose(self) -> None:
        await self.redis.aclose()
