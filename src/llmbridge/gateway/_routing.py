"""Routing a model's requests across its deployments: load balancing, retries, cooldowns.

A model's ``[[models]]`` entry lists *deployments* (an upstream and the model name it knows,
with a weight, optional ``rpm``/``tpm`` limits, and ``fallback``).  For each client request
the gateway asks a :class:`Plan` for the next :class:`Attempt` (a deployment and how long to
wait first) and reports what happened (answer started, failed with a status and
``retry-after``, finished).  Everything here is sans-I/O with the clock and the random source
injected, apart from :meth:`Router.next` (which sleeps the backoff) and :class:`SharedState`
(Redis, for replicas that share cooldowns and rpm/tpm counters).

The rules, in one place:

- **Which errors retry** (:data:`RETRY_STATUS`, :func:`should_retry`): connect errors (502),
  first-byte timeouts (504), 408, 429, 500, 502, 503, 504, 529 (Anthropic's overloaded) and
  any other 5xx: yes; 400, 401, 403, 404, 413, 422 and any other 4xx: no.  Only errors that
  retry count against a deployment (a bad request is not its fault).
- **Backoff**: the n-th retry waits ``uniform(0, min(max_backoff, backoff * 2^(n-1)))`` (full
  jitter), and never less than the deployment's ``retry-after``; a retry that cannot start
  before the request's deadline is not made (the client gets the last error).  A retry goes
  to a deployment not yet tried for this request when one is ready.
- **Cooldown**: ``failures`` retryable failures in a row take a deployment out for
  ``seconds``; then exactly one request probes it; an answer that starts brings it back, a
  failure cools it again.  While a deployment has failures but is not cooling yet, no more
  than ``failures`` requests wait on it at once (so a deployment that went down entirely gets
  at most ``failures`` requests before it cools).  When none of a model's deployments is
  healthy, health is ignored (panic, as Envoy's): the one soonest out of its cooldown is
  tried rather than refusing everyone.
- **Fallbacks** (``fallback = true``) serve only when no other deployment can: all cooling,
  at their rpm/tpm limits, waiting on a ``retry-after``, or out of attempts.
- **Strategies** among the deployments ready now: ``ordered`` (config order), ``weighted``
  (random by weight), ``least-busy`` (fewest requests in flight, ties at random), ``latency``
  (lowest EWMA of the time to the answer's start; a deployment without a sample first, and
  :data:`EXPLORE` of the picks at random so a recovered deployment is measured again).  A
  deployment whose probe is due is picked first.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import hub
from ._response import StreamResponse  # (once: an import statement per request cost 1.5 µs)
from .config import NO_COOLDOWN, Config, Cooldown, Deployment, ModelConfig, Retries, Route

if TYPE_CHECKING:
    from starlette.responses import Response

    from ._teams import Teams
    from ._upstream import Upstream

__all__ = [
    "ATTEMPTS_HEADER",
    "COOLING",
    "EWMA_ALPHA",
    "EXPLORE",
    "FAILURE_SAMPLE",
    "HEADER",
    "OK",
    "PROBING",
    "RETRY_STATUS",
    "Attempt",
    "DeploymentState",
    "Plan",
    "Router",
    "SharedState",
    "backoff",
    "collector",
    "create",
    "deadline",
    "named",
    "retry_after",
    "should_retry",
]

log = logging.getLogger("llmbridge.gateway.routing")

HEADER = "x-llmbridge-deployment"  # names the deployment that served (or last failed) an answer
ATTEMPTS_HEADER = "x-llmbridge-attempts"  # how many upstream requests the answer took (1: no retry)
OK, COOLING, PROBING = "ok", "cooling", "probing"
EWMA_ALPHA = 0.3  # weight of the newest time-to-start sample
EXPLORE = 0.05  # share of "latency" picks made at random among the other ready deployments
FAILURE_SAMPLE = 1.0  # seconds: what a failed attempt counts as in the latency EWMA (at least)
MAX_RETRY_AFTER = 3600.0  # an upstream's retry-after is believed up to an hour
_WINDOW = 60.0  # rpm: a sliding 60-second window
_TOKENS_PER_BYTE = 0.25  # tpm's up-front estimate: ~4 bytes of request JSON per prompt token
_NO_RETRIES = Retries()  # a model without [models.retries]

# The one retry table: status -> retry?  Statuses not listed: 5xx retry, anything else not.
# A connect error is a 502 and a first-byte timeout a 504 by the time they get here.
RETRY_STATUS: dict[int, bool] = {
    408: True,
    429: True,
    500: True,
    502: True,
    503: True,
    504: True,
    529: True,  # Anthropic's overloaded_error
    400: False,
    401: False,
    403: False,
    404: False,
    413: False,
    422: False,
}


def should_retry(error: hub.Error) -> bool:
    """Whether ``error`` (before the client's first byte) is worth another attempt."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    found = RETRY_STATUS.get(status)
    return found if found is not None else status >= 500


def retry_after(headers: Mapping[str, str], wall: float | None = None) -> float | None:
    """Seconds an upstream asked us to wait (``retry-after-ms``, ``retry-after`` as seconds or
    an HTTP date), at most :data:`MAX_RETRY_AFTER`; None when it did not say (or said nonsense)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return min(value, MAX_RETRY_AFTER)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        value = when.timestamp() - (time.time() if wall is None else wall)
    if not math.isfinite(value):
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER)


def backoff(retry: int, retries: Retries, rng: random.Random) -> float:
    """Seconds before the ``retry``-th retry (1 = the first): full jitter over an exponential cap."""
    if retry <= 0:
        return 0.0
    cap = min(retries.max_backoff_ms, retries.backoff_ms * 2 ** min(retry - 1, 30)) / 1000
    return rng.uniform(0, cap) if cap > 0 else 0.0


class DeploymentState:
    """What the router knows of one deployment (an upstream and its model name), shared by
    every model entry that lists it.  Times are on the router's clock (monotonic seconds)."""

    def __init__(self, upstream: str, model: str) -> None:
        self.upstream = upstream
        self.model = model
        self.name = f"{upstream}/{model}"
        self.in_flight = 0  # attempts started and not over (a streaming answer counts until it ends)
        self.pending = 0  # attempts started whose answer has not started yet
        self.ewma: float | None = None  # seconds from sending to the answer's start
        self.failures = 0  # retryable failures in a row
        self.state = OK
        self.cooling_until = 0.0
        self.retry_after_until = 0.0
        self.limited_until = 0.0  # at its rpm/tpm limit (known locally or from Redis) until then
        self.requests = 0  # attempts sent
        self.errors = 0  # attempts that failed (retryable or not)
        self.served = 0  # answers that started
        self.cooldowns = 0  # times it was taken out
        self._rpm: deque[float] = deque()  # send times in the last 60 s (local limits only)
        self._tpm = [0, 0]  # [minute, tokens] (local limits only)

    # -- availability

    def probe_due(self, now: float) -> bool:
        return self.state == COOLING and now >= self.cooling_until

    def usable(self, now: float, cooldown: Cooldown) -> bool:
        """May get an attempt now (apart from retry-after, which the plan waits out)."""
        return now >= self.limited_until and self.healthy(now, cooldown)

    def healthy(self, now: float, cooldown: Cooldown) -> bool:
        """Neither cooling, nor probed by another request, nor holding as many waiting requests as
        failures left before it cools."""
        if self.state == PROBING or (self.state == COOLING and now < self.cooling_until):
            return False
        # suspect (failed, not cooling yet): no more requests waiting on it than failures left before it cools
        most = cooldown.failures
        return not (self.state == OK and most and self.failures and self.failures + self.pending >= most)

    def room(self, now: float, deployment: Deployment) -> float:
        """0 when the local rpm/tpm windows admit one more request, else seconds until they may."""
        if deployment.rpm is not None:
            window = self._rpm
            while window and window[0] <= now - _WINDOW:
                window.popleft()
            if len(window) >= deployment.rpm:
                return window[0] + _WINDOW - now
        if deployment.tpm is not None:
            minute = int(time.time() // 60)
            if self._tpm[0] == minute and self._tpm[1] >= deployment.tpm:
                return (minute + 1) * 60 - time.time()
        return 0.0

    def take(self, now: float, deployment: Deployment, estimate: int) -> None:
        """Count one request (and its estimated tokens) in the local windows."""
        if deployment.rpm is not None:
            self._rpm.append(now)
        if deployment.tpm is not None:
            minute = int(time.time() // 60)
            if self._tpm[0] != minute:
                self._tpm[:] = [minute, 0]
            self._tpm[1] += estimate

    def correct_tokens(self, minute: int, delta: int) -> None:
        if self._tpm[0] == minute:
            self._tpm[1] += delta

    # -- outcomes

    def sample(self, seconds: float) -> None:
        self.ewma = seconds if self.ewma is None else EWMA_ALPHA * seconds + (1 - EWMA_ALPHA) * self.ewma

    def snapshot(self, now: float) -> dict[str, Any]:
        """JSON-ready: what /admin/deployments, the console and the CLI show."""
        return {
            "deployment": self.name,
            "upstream": self.upstream,
            "model": self.model,
            "state": self.state,
            "in_flight": self.in_flight,
            "latency_ewma_ms": None if self.ewma is None else round(self.ewma * 1000, 1),
            "failures": self.failures,
            "cooling_for_s": round(max(0.0, self.cooling_until - now), 3) if self.state == COOLING else None,
            "retry_after_s": round(self.retry_after_until - now, 3) if self.retry_after_until > now else None,
            "limited_for_s": round(self.limited_until - now, 3) if self.limited_until > now else None,
            "requests": self.requests,
            "errors": self.errors,
            "served": self.served,
            "cooldowns": self.cooldowns,
        }


@dataclass(slots=True)
class _Slot:
    """One deployment of one model: its config and its (shared) state."""

    index: int
    deployment: Deployment
    state: DeploymentState


class Attempt:
    """One try of a request on one deployment.  The gateway calls :meth:`begin` as it sends,
    then :meth:`answered` (the answer started) or :meth:`failed`, and :meth:`finished` when
    the exchange is over (idempotent; after :meth:`failed` it does nothing)."""

    def __init__(self, plan: Plan, slot: _Slot, delay: float, probe: bool) -> None:
        self.plan = plan
        self.slot = slot
        self.delay = delay
        self.probe = probe
        self.started: float | None = None
        self.over = False
        self.answered_at: float | None = None
        self.tpm_minute = 0
        self.panic = False  # sent although the deployment is not healthy: none of the model's is

    @property
    def upstream(self) -> str:
        return self.slot.deployment.upstream

    @property
    def model(self) -> str:
        return self.slot.deployment.model

    @property
    def name(self) -> str:
        return self.slot.state.name

    def on_end(self, exchange: Any) -> None:
        """The exchange's ``on_end``: :meth:`finished` with its usage and error. ``exchange``
        is what settling reads too (``teams.core.Answer``: an exchange or an outcome), so both
        are plain attributes (two getattr() calls cost ~1 k instructions per request)."""
        usage = exchange.usage
        tokens = None if usage is None else (usage.input_tokens or 0) + (usage.output_tokens or 0)
        self.finished(self.plan.router.clock(), tokens, exchange.error)

    def begin(self, now: float, *, count_locally: bool = True) -> None:
        s = self.slot.state
        self.started = now
        self.plan.attempts += 1
        self.plan.tried[self.slot.index] = self.plan.tried.get(self.slot.index, 0) + 1
        if not self.slot.deployment.fallback:
            self.plan.regular_attempts += 1
        s.in_flight += 1
        s.pending += 1
        s.requests += 1
        if self.probe:
            s.state = PROBING
        if count_locally:  # (else Redis counted it, and its claim set tpm_minute)
            d = self.slot.deployment
            if d.rpm is not None or d.tpm is not None:
                s.take(now, d, self.plan.estimate)
            if d.tpm is not None:  # (read only to correct a tpm count)
                self.tpm_minute = int(time.time() // 60)

    def answered(self, now: float) -> None:
        """The answer started (its first event that is content): a success."""
        if self.answered_at is not None or self.over:
            return
        s = self.slot.state
        self.answered_at = now
        self.plan.error, self.plan.headers = None, {}  # served
        s.pending -= 1
        s.served += 1
        was = s.state
        if s.state != OK:  # a probe that worked (or a request that raced the cooldown): back
            s.state = OK
            s.ewma = None  # measure it afresh
        if self.started is not None:
            s.sample(now - self.started)
        if s.failures or was != OK:
            s.failures = 0
            self.plan.router._recovered(s)

    def failed(self, now: float, error: hub.Error, headers: Mapping[str, str] | None = None) -> None:
        """The attempt failed before the answer started (``headers``: the upstream's, for retry-after)."""
        if self.over or self.answered_at is not None:
            return
        self.over = True
        s = self.slot.state
        s.pending -= 1
        s.in_flight -= 1
        s.errors += 1
        plan = self.plan
        plan.error, plan.headers, plan.last = error, dict(headers or {}), self
        wait = retry_after(headers or {})
        if wait is not None and wait > 0:
            s.retry_after_until = max(s.retry_after_until, now + wait)
        if not should_retry(error):
            if self.probe:  # not the deployment's fault: let the next request probe
                s.state = COOLING
                plan.router._probe_released(s)
            return
        elapsed = now - self.started if self.started is not None else 0.0
        s.sample(max(elapsed, FAILURE_SAMPLE))
        s.failures += 1
        cooldown = plan.model.cooldown
        if self.probe or (cooldown.failures and s.failures >= cooldown.failures and s.state == OK):
            s.state = COOLING
            s.cooling_until = now + cooldown.seconds
            s.cooldowns += 1
            log.warning("deployment %s cools down for %g s after %d failures in a row (last: %s)",
                        s.name, cooldown.seconds, s.failures, error.message[:200])  # fmt: skip
            plan.router._cooled(s, cooldown.seconds)
        else:
            plan.router._failed(s)

    def finished(self, now: float, tokens: int | None = None, error: hub.Error | None = None) -> None:
        """The exchange is over; ``tokens`` the usage, ``error`` one the answer ended with."""
        if self.over:
            return
        self.over = True
        s = self.slot.state
        if self.answered_at is None:  # ended before it started (the client went away)
            s.pending -= 1
            if self.probe and s.state == PROBING:
                s.state = COOLING
                self.plan.router._probe_released(s)
        s.in_flight -= 1
        if tokens is not None and self.slot.deployment.tpm is not None:
            delta = tokens - self.plan.estimate
            s.correct_tokens(self.tpm_minute, delta)
            self.plan.router._tokens(self, delta)
        if error is not None and self.answered_at is not None and should_retry(error):
            s.errors += 1
            s.failures += 1  # broke off mid-answer: counts toward the next cooldown (not a retry)


class Plan:
    """The attempts of one client request (sans-I/O): :meth:`next` says where to go next."""

    def __init__(
        self,
        router: Router,
        model: ModelConfig,
        slots: list[_Slot],
        deadline: float | None,
        estimate: int,
    ) -> None:
        self.router = router
        self.model = model
        self.slots = slots
        self.deadline = deadline
        self.estimate = estimate
        self.attempts = 0
        self.regular_attempts = 0
        self.tried: dict[int, int] = {}
        self.error: hub.Error | None = None  # the last failure (what the client gets when we stop)
        self.headers: dict[str, str] = {}
        self.last: Attempt | None = None
        self._waited = False  # the backoff for the next retry was slept already (a claim was refused)
        self._refused: dict[int, float] = {}  # slot index -> until (refused by the shared state)

    def next(self, now: float) -> Attempt | None:
        """The next attempt (a deployment and the seconds to wait first), or None: stop, the
        client gets :attr:`error` with :attr:`headers`."""
        if not self.attempts and len(self.slots) == 1 and not self._refused:
            # The usual first attempt: one deployment, healthy, unlimited, not waiting on a
            # retry-after -- what the loop below picks then, without its lists.
            slot = self.slots[0]
            s, d = slot.state, slot.deployment
            if (
                s.state == OK
                and not s.failures
                and s.limited_until <= now
                and s.retry_after_until <= now
                and d.rpm is None
                and d.tpm is None
                and (d.fallback or (self.model.retries or _NO_RETRIES).attempts > 0)
            ):
                if self.deadline is not None and now > self.deadline:
                    return None
                return Attempt(self, slot, 0.0, False)
        if self.error is not None and not should_retry(self.error):
            return None
        retries = self.model.retries or _NO_RETRIES
        delay = 0.0
        if self.attempts and not self._waited:
            delay = backoff(self.attempts, retries, self.router.rng)
        self._waited = False
        cooldown = self.model.cooldown
        regular: list[_Slot] = []
        fallback: list[_Slot] = []
        unhealthy: list[_Slot] = []  # left out only for their health (cooling, probed, suspect)
        limited = 0.0  # the soonest a deployment skipped for its rpm/tpm frees up
        for slot in self.slots:
            s = slot.state
            if self._refused.get(slot.index, 0.0) > now:
                continue
            if s.limited_until > now:
                limited = min(limited or math.inf, s.limited_until - now)
                continue
            if self.router.local_limits:
                room = s.room(now, slot.deployment)
                if room > 0:
                    limited = min(limited or math.inf, room)
                    continue
            if slot.deployment.fallback:
                pool = fallback if not self.tried.get(slot.index) else None
            else:
                pool = regular if self.regular_attempts < retries.attempts else None
            if pool is None:
                continue
            if s.healthy(now, cooldown):
                pool.append(slot)
            else:
                unhealthy.append(slot)
        if not regular and not fallback and unhealthy:
            # Panic (as Envoy's): no deployment is healthy, so health is ignored rather than
            # refusing everyone -- the one soonest out of its cooldown first.
            slot = min(unhealthy, key=lambda x: (x.state.cooling_until, x.state.pending))
            wait = max(0.0, slot.state.retry_after_until - now)
            if self.deadline is None or now + max(delay, wait) <= self.deadline:
                attempt = self._attempt(slot, max(delay, wait), now)
                if attempt is not None:
                    attempt.panic = True
                return attempt
        for pool in (regular, fallback):
            ready = [x for x in pool if x.state.retry_after_until <= now + delay]
            if ready:
                fresh = [x for x in ready if not self.tried.get(x.index)]
                return self._attempt(self._pick(fresh or ready, now), delay, now)
        waiting = regular + fallback
        if waiting:
            soonest = min(waiting, key=lambda x: x.state.retry_after_until)
            wait = soonest.state.retry_after_until - now
            if self.deadline is None or now + wait <= self.deadline:
                return self._attempt(soonest, max(delay, wait), now)
        if self.error is None:  # never tried: nothing could serve at all
            name = self.model.name
            if limited:
                self.error = hub.Error(f"every deployment of model {name!r} is at its rate limit", "rate_limit",
                                       "deployments_rate_limited", 429)  # fmt: skip
                self.headers = {"retry-after": str(max(1, math.ceil(limited)))}
            else:
                self.error = hub.Error(f"no deployment of model {name!r} can serve now (cooling down)", "overloaded",
                                       "deployments_cooling", 503)  # fmt: skip
                soon = [x.state.cooling_until - now for x in self.slots if x.state.state == COOLING]
                if soon:
                    self.headers = {"retry-after": str(max(1, math.ceil(min(soon))))}
        return None

    def _attempt(self, slot: _Slot, delay: float, now: float) -> Attempt | None:
        if self.deadline is not None and now + delay > self.deadline:
            return None
        return Attempt(self, slot, delay, probe=slot.state.probe_due(now + delay))

    def _pick(self, ready: list[_Slot], now: float) -> _Slot:
        for slot in ready:
            if slot.state.probe_due(now):
                return slot
        if len(ready) == 1:
            return ready[0]
        rng = self.router.rng
        routing = self.model.routing
        if routing == "weighted":
            return rng.choices(ready, weights=[x.deployment.weight for x in ready])[0]
        if routing == "least-busy":
            least = min(x.state.in_flight for x in ready)
            return rng.choice([x for x in ready if x.state.in_flight == least])
        if routing == "latency":
            unknown = [x for x in ready if x.state.ewma is None]
            if unknown:
                return unknown[0]
            best = min(ready, key=lambda x: x.state.ewma or 0.0)
            if rng.random() < EXPLORE:
                return rng.choice([x for x in ready if x is not best])
            return best
        return ready[0]  # ordered

    def refused(self, attempt: Attempt, until: float) -> None:
        """The shared state refused ``attempt`` (rpm/tpm, cooling, another replica probing)."""
        self._refused[attempt.slot.index] = until
        self._waited = True


class SharedState:
    """Cooldowns and deployment rpm/tpm counters shared by replicas through Redis.

    Each decision is one Lua script on the server (Redis's clock, no read-then-write race):
    :meth:`claim` admits a request to a deployment (rpm window, tpm minute, cooling, the one
    probe); failures, cooldowns and recoveries are written as they happen.  Redis down: the
    router goes on with its own per-process state (logged once per failure streak).
    """

    def __init__(self, url: str, *, timeout: float = 1.0, client: Any = None) -> None:
        import redis.asyncio as aioredis

        from ._teams.limits import Pipeliner

        self.redis = client or aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, health_check_interval=30
        )
        self._claim = self.redis.register_script(_CLAIM)
        self._fail = self.redis.register_script(_FAIL)
        self._pipe = Pipeliner(self.redis)
        self._down_until = 0.0
        self._tasks: set[asyncio.Task[Any]] = set()

    @staticmethod
    def prefix(state: DeploymentState) -> str:
        return f"llmb:dep:{{{state.name}}}"  # one hash tag per deployment: its keys share a slot

    async def claim(self, attempt: Attempt, probe_ttl: float) -> tuple[int, float]:
        """(code, seconds until it may be: 0 unknown); codes as :data:`_CLAIM` returns them.
        Counts the request when admitted (1, or 6: admitted as the deployment's probe)."""
        d, s = attempt.slot.deployment, attempt.slot.state
        p = self.prefix(s)
        keys = [f"{p}:rpm", f"{p}:tpm:", f"{p}:cool", f"{p}:probe", f"{p}:down"]
        member = f"{time.time_ns()}-{id(attempt)}"
        args: list[int | str] = [
            d.rpm or 0, d.tpm or 0, attempt.plan.estimate, member, int(probe_ttl * 1000), int(attempt.panic),
        ]  # fmt: skip
        code, wait_ms, minute = await self._pipe.call(self._claim, keys, args)
        attempt.tpm_minute = int(minute)
        return int(code), int(wait_ms) / 1000

    def failed(self, state: DeploymentState, cooldown: Cooldown, cool: bool) -> asyncio.Future[Any]:
        """Count a failure in a row; cool the deployment (``cool``: this replica did, or the
        count reached ``cooldown.failures``).  The reply: [failures in a row, cooling (1/0)]."""
        p = self.prefix(state)
        args: list[int | str] = [cooldown.failures, int(cooldown.seconds * 1000), 1 if cool else 0]
        return self._pipe.call(self._fail, [f"{p}:fail", f"{p}:cool", f"{p}:probe", f"{p}:down"], args)

    def recovered(self, state: DeploymentState) -> asyncio.Future[Any]:
        p = self.prefix(state)
        return self._pipe.call(self._recover, [f"{p}:fail", f"{p}:cool", f"{p}:probe", f"{p}:down"], [])

    async def release_probe(self, state: DeploymentState) -> None:
        await self.redis.delete(f"{self.prefix(state)}:probe")

    def tokens(self, state: DeploymentState, minute: int, delta: int) -> asyncio.Future[Any]:
        p = self.prefix(state)
        return self._pipe.call(self._settle, [f"{p}:tpm:{minute}"], [delta])

    async def cooling(self, states: Sequence[DeploymentState]) -> list[int]:
        """Milliseconds each deployment is still cooling for (-2/-1: not cooling)."""
        pipe = self.redis.pipeline(transaction=False)
        for s in states:
            pipe.pttl(f"{self.prefix(s)}:cool")
        return [int(x) for x in await pipe.execute()]

    @property
    def _recover(self) -> Any:
        script = getattr(self, "_recover_script", None)
        if script is None:
            script = self._recover_script = self.redis.register_script(_RECOVER)
        return script

    @property
    def _settle(self) -> Any:
        script = getattr(self, "_settle_script", None)
        if script is None:
            script = self._settle_script = self.redis.register_script(_SETTLE_TOKENS)
        return script

    def spawn(self, future: Any) -> None:
        """Fire and forget a write (its failure is logged, never raised)."""

        async def wait() -> None:
            try:
                await future
            except Exception as exc:
                log.warning("routing state not shared (%s: %s)", type(exc).__name__, exc)

        task = asyncio.get_running_loop().create_task(wait())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.redis.aclose()


# KEYS: rpm zset, tpm key prefix, cool key, probe key, down key.
# ARGV: rpm, tpm, estimate, member, probe ttl ms, panic (1: no healthy deployment, health ignored).
# Returns {code, wait_ms, minute}: 1 admitted, 6 admitted as the probe (it was down, its cooldown
# is over), 0 at rpm, 3 at tpm, 4 cooling, 5 another request (any replica) is probing it.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)
local cool = redis.call('PTTL', KEYS[3])
if cool > 0 and ARGV[6] ~= '1' then return {4, cool, minute} end
local probe = 0
if ARGV[6] ~= '1' and redis.call('EXISTS', KEYS[5]) == 1 then
  if not redis.call('SET', KEYS[4], '1', 'NX', 'PX', tonumber(ARGV[5])) then return {5, 0, minute} end
  probe = 1
end
local rpm = tonumber(ARGV[1])
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if probe == 1 then redis.call('DEL', KEYS[4]) end
    return {0, tonumber(oldest[2]) + 60000 - now, minute}
  end
end
local tpm = tonumber(ARGV[2])
if tpm > 0 then
  local tkey = KEYS[2] .. minute
  local used = tonumber(redis.call('GET', tkey) or '0')
  if used >= tpm then
    if probe == 1 then redis.call('DEL', KEYS[4]) end
    return {3, (minute + 1) * 60000 - now, minute}
  end
  redis.call('INCRBY', tkey, ARGV[3])
  redis.call('PEXPIRE', tkey, 120000)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], 61000)
end
if probe == 1 then return {6, 0, minute} end
return {1, 0, minute}
"""

# KEYS: failures counter, cool key, probe key, down key.
# ARGV: failures to cool (0: off), cool ms, cool now (1/0).
# Returns the failures in a row (across replicas) and whether it now cools.  Cooling sets
# "down" (until a probe succeeds) and a cool key that expires after the cooldown.
_FAIL = """
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 3600000)
local limit = tonumber(ARGV[1])
if ARGV[3] == '1' or (limit > 0 and n >= limit) then
  redis.call('SET', KEYS[2], '1', 'PX', tonumber(ARGV[2]))
  redis.call('SET', KEYS[4], '1', 'PX', 86400000)
  redis.call('DEL', KEYS[3])
  return {n, 1}
end
return {n, 0}
"""

_RECOVER = """
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
"""

_SETTLE_TOKENS = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCRBY', KEYS[1], ARGV[1]) end
return 1
"""


class Router:
    """Every model's deployments and their state, for one gateway process.

    ``clock`` (monotonic seconds) and ``rng`` are injected for tests; ``shared`` (a
    :class:`SharedState`) makes replicas share cooldowns and rpm/tpm counters.
    """

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        shared: SharedState | None = None,
        probe_ttl: Callable[[str], float] | None = None,
    ) -> None:
        self.clock = clock
        self.rng = rng or random.Random()
        self.shared = shared
        self.states: dict[str, DeploymentState] = {}
        self._slots: dict[str, list[_Slot]] = {}
        self.models: dict[str, ModelConfig] = {}
        self._probe_ttl = probe_ttl or (lambda upstream: 120.0)
        self._sync: asyncio.Task[None] | None = None
        self._shared_down_until = 0.0
        for name, model in config.models.items():
            self.models[name] = model
            self._slots[name] = [_Slot(i, d, self._state(d)) for i, d in enumerate(model.deployments)]

    def _state(self, d: Deployment) -> DeploymentState:
        key = f"{d.upstream}/{d.model}"
        found = self.states.get(key)
        if found is None:
            found = self.states[key] = DeploymentState(d.upstream, d.model)
        return found

    # -- per request

    def plan(
        self, model: str | None, routes: Sequence[Route] | None = None, deadline: float | None = None,
        body_bytes: int = 0,
    ) -> Plan:  # fmt: skip
        """A request's plan for ``model``; ``routes`` other than the model's (a caller with its
        own list) get plain deployments tried in order.  ``deadline`` on :attr:`clock`.
        (``deadline`` and ``body_bytes`` may be passed positionally, as the pipeline does once
        per request: a keyword costs ~0.4 k instructions to bind.)"""
        config = self.models.get(model or "")
        if config is not None and (routes is None or routes is config.routes or tuple(routes) == config.routes):
            slots = self._slots[config.name]
        else:  # an ad-hoc list: in order, each once, no cooldown
            routes = routes or ()
            deployments = tuple(Deployment(r.upstream, r.upstream_model) for r in routes)
            config = ModelConfig(model or "", tuple(routes), deployments=deployments, cooldown=NO_COOLDOWN)
            slots = [_Slot(i, d, self._state(d)) for i, d in enumerate(deployments)]
        return Plan(self, config, slots, deadline, math.ceil(body_bytes * _TOKENS_PER_BYTE))

    def next_now(self, plan: Plan) -> Attempt | None:
        """:meth:`next` without its coroutine, for the usual attempt, which has nothing to wait
        for (no backoff to sleep, no shared state to ask): the next attempt of ``plan``, begun,
        or None. An attempt that has something to wait for, or whose deployment's rpm/tpm is
        full, comes back *not begun* (``started`` is None): ``await next(plan, attempt)`` takes
        it on from there, as :meth:`next` would have. (A coroutine per try costs ~1.5 k
        instructions, on the way to the upstream request: issue 23.)"""
        attempt = plan.next(self.clock())
        if attempt is None or attempt.delay > 0 or not (self.shared is None or self.local_limits):
            return attempt
        d = attempt.slot.deployment
        if (d.rpm is not None or d.tpm is not None) and attempt.slot.state.room(self.clock(), d) > 0:
            return attempt  # (refused and planned again by next: one place for that)
        attempt.begin(self.clock())
        return attempt

    async def next(self, plan: Plan, given: Attempt | None = None) -> Attempt | None:
        """The next attempt of ``plan``, begun (its backoff slept, its rpm/tpm counted), or None;
        ``given``: the one :meth:`next_now` left to it (from ``plan.next``, not begun)."""
        while True:
            attempt = given if given is not None else plan.next(self.clock())
            given = None
            if attempt is None:
                return None
            if attempt.delay > 0:
                await asyncio.sleep(attempt.delay)
                s, now = attempt.slot.state, self.clock()
                if s.probe_due(now):
                    attempt.probe = True  # its cooldown ended while we waited: this is the probe
                elif not attempt.panic and (attempt.probe or not s.usable(now, plan.model.cooldown)):
                    plan.refused(attempt, now + 0.001)  # it cooled, or another request took the probe, meanwhile
                    continue
            shared = self.shared
            if shared is None or self.local_limits:
                d = attempt.slot.deployment
                if (d.rpm is not None or d.tpm is not None) and attempt.slot.state.room(self.clock(), d) > 0:
                    plan.refused(attempt, self.clock() + 0.001)  # filled while we slept
                    continue
                attempt.begin(self.clock())
                return attempt
            try:
                code, wait = await shared.claim(attempt, self._probe_ttl(attempt.upstream))
            except Exception as exc:  # Redis down: this process's own state, its own limits
                self._shared_down(exc)
                attempt.begin(self.clock())
                return attempt
            self._shared_down_until = 0.0
            s, now = attempt.slot.state, self.clock()
            if code in (1, 6):
                if code == 6:  # down, its cooldown over: this request is its one probe (for every replica)
                    attempt.probe = True
                elif attempt.probe and s.state == PROBING:  # another request here took the probe meanwhile
                    attempt.probe = False
                attempt.begin(now, count_locally=False)
                return attempt
            if code in (4, 5):  # cooling (another replica cooled it), or another request probes it
                wait = wait if code == 4 else 0.25  # (a probe: look again in a moment)
                if s.state == OK or (s.state == COOLING and s.cooling_until < now + wait):
                    s.state, s.cooling_until = COOLING, now + wait
            elif wait > 0:  # at its rpm/tpm limit
                s.limited_until = max(s.limited_until, now + wait)
            plan.refused(attempt, now + (wait or 1.0))

    @property
    def local_limits(self) -> bool:
        """rpm/tpm are counted in this process: no Redis, or Redis failed less than a second ago."""
        return self.shared is None or self.clock() < self._shared_down_until

    def _shared_down(self, exc: Exception) -> None:
        if not self._shared_down_until:
            log.warning("routing state in Redis unavailable (%s: %s); using this process's own for now",
                        type(exc).__name__, exc)  # fmt: skip
        self._shared_down_until = self.clock() + 1.0

    # -- hooks from attempts (shared state writes)

    def _failed(self, state: DeploymentState) -> None:
        self._share_failure(state, False)

    def _cooled(self, state: DeploymentState, seconds: float) -> None:
        self._share_failure(state, True)

    def _share_failure(self, state: DeploymentState, cooled: bool) -> None:
        """Count the failure in Redis; cool the deployment for every replica when this one
        cooled it, or when the failures in a row across replicas reach the limit."""
        shared = self.shared
        if shared is None or self.clock() < self._shared_down_until:
            return
        cooldown = self._cooldown_of(state)

        async def share() -> None:
            _, cools = await shared.failed(state, cooldown, cooled)
            if int(cools) and state.state == OK:  # the other replicas' failures made it a cooldown
                state.state = COOLING
                state.cooling_until = self.clock() + cooldown.seconds

        with contextlib.suppress(RuntimeError):  # no running loop (a unit test driving the plan by hand)
            shared.spawn(share())

    def _recovered(self, state: DeploymentState) -> None:
        if self.shared is not None:
            with contextlib.suppress(RuntimeError):
                self.shared.spawn(self.shared.recovered(state))

    def _probe_released(self, state: DeploymentState) -> None:
        """A probe ended without a verdict (the client left, or a 4xx): another may probe."""
        if self.shared is not None:
            with contextlib.suppress(RuntimeError):
                self.shared.spawn(self.shared.release_probe(state))

    def _tokens(self, attempt: Attempt, delta: int) -> None:
        if self.shared is not None and delta:
            with contextlib.suppress(RuntimeError):
                self.shared.spawn(self.shared.tokens(attempt.slot.state, attempt.tpm_minute, delta))

    def _cooldown_of(self, state: DeploymentState) -> Cooldown:
        for name, slots in self._slots.items():
            if any(x.state is state for x in slots):
                return self.models[name].cooldown
        return NO_COOLDOWN

    # -- shared cooldowns seen here

    async def start(self, interval: float = 0.5) -> None:
        """With shared state: read the cooldowns other replicas set, every ``interval`` seconds."""
        if self.shared is not None and self._sync is None:
            self._sync = asyncio.get_running_loop().create_task(self._follow(interval), name="llmbridge-routing")

    async def _follow(self, interval: float) -> None:
        assert self.shared is not None
        states = list(self.states.values())
        while True:
            await asyncio.sleep(interval)
            if not states or self.clock() < self._shared_down_until:
                continue
            try:
                ttls = await self.shared.cooling(states)
            except Exception as exc:
                self._shared_down(exc)
                continue
            self._shared_down_until = 0.0
            now = self.clock()
            for s, ttl in zip(states, ttls, strict=True):
                if ttl > 0 and s.state == OK:  # another replica cooled it
                    s.state = COOLING
                    s.cooling_until = now + ttl / 1000
                elif ttl > 0 and s.state == COOLING:
                    s.cooling_until = max(s.cooling_until, now + ttl / 1000)

    async def aclose(self) -> None:
        if self._sync is not None:
            self._sync.cancel()
            await asyncio.gather(self._sync, return_exceptions=True)
            self._sync = None
        if self.shared is not None:
            await self.shared.aclose()

    # -- what is shown

    def snapshot(self) -> list[dict[str, Any]]:
        """Each model's deployments with their state (JSON-ready), in config order."""
        now = self.clock()
        rows = []
        for name, slots in self._slots.items():
            model = self.models[name]
            for slot in slots:
                d = slot.deployment
                row = {"model_name": name, "routing": model.routing, **slot.state.snapshot(now)}
                row.update(weight=d.weight, rpm=d.rpm, tpm=d.tpm, fallback=d.fallback)
                rows.append(row)
        return rows

    def deployments(self) -> Iterator[DeploymentState]:
        return iter(self.states.values())


def collector(router: Router) -> Any:
    """A Prometheus collector of the router's per-deployment gauges (read at scrape time)."""
    from prometheus_client.core import GaugeMetricFamily

    class _Collector:
        def collect(self) -> Iterator[Any]:
            labels = ["upstream", "model"]
            flight = GaugeMetricFamily(
                "llmbridge_deployment_in_flight", "Requests in flight per deployment", labels=labels
            )
            ewma = GaugeMetricFamily(
                "llmbridge_deployment_latency_ewma_seconds",
                "EWMA of the time to an answer's start, per deployment (failures count as >= 1 s)", labels=labels,
            )  # fmt: skip
            state = GaugeMetricFamily(
                "llmbridge_deployment_state", "1 for the deployment's state (ok, cooling, probing)",
                labels=[*labels, "state"],
            )  # fmt: skip
            failures = GaugeMetricFamily("llmbridge_deployment_failures", "Failures in a row", labels=labels)
            for s in router.deployments():
                pair = [s.upstream, s.model]
                flight.add_metric(pair, s.in_flight)
                if s.ewma is not None:
                    ewma.add_metric(pair, s.ewma)
                for name in (OK, COOLING, PROBING):
                    state.add_metric([*pair, name], 1.0 if s.state == name else 0.0)
                failures.add_metric(pair, s.failures)
            yield from (flight, ewma, state, failures)

        def describe(self) -> list[Any]:
            return []  # unchecked: the names are fixed above

    return _Collector()


# --------------------------------------------------------------------------- the gateway's side


def create(config: Config, upstreams: Mapping[str, Upstream], teams: Teams | None = None) -> Router:
    """The gateway's router: shared through Redis when ``redis_url`` is set, its gauges in
    ``/metrics`` when metrics are on."""
    shared = SharedState(config.gateway.teams.redis_url) if config.gateway.teams.redis_url else None

    def probe_ttl(name: str) -> float:  # a probe's claim lasts as long as an answer may take to start
        upstream = upstreams.get(name)
        first_byte = upstream.timeouts.first_byte if upstream is not None else None
        return first_byte or 120.0

    router = Router(config, shared=shared, probe_ttl=probe_ttl)
    if teams is not None and teams.metrics is not None:
        teams.metrics.registry.register(collector(router))
    return router


def deadline(router: Router, upstreams: Mapping[str, Upstream], routes: Sequence[Route]) -> float | None:
    """A request's deadline on the router's clock: now + the first deployment's ``total``
    timeout (the most a request may take); no retry is scheduled past it."""
    if not routes:
        return None
    upstream = upstreams.get(routes[0].upstream)
    total = upstream.timeouts.total if upstream is not None else None
    return None if total is None else router.clock() + total


_HEADER_KEY, _ATTEMPTS_KEY = HEADER.encode(), ATTEMPTS_HEADER.encode()


def named(response: Response | StreamResponse, attempt: Attempt | None) -> Response | StreamResponse:
    """``response`` with :data:`HEADER` naming the deployment that served it (or failed last)
    and :data:`ATTEMPTS_HEADER` counting the upstream requests it took."""
    if attempt is None:
        return response
    name = attempt.slot.state.name.encode("latin-1", "replace")
    tries = str(attempt.plan.attempts).encode()
    if isinstance(response, StreamResponse):
        response.headers += [(_HEADER_KEY, name), (_ATTEMPTS_KEY, tries)]
    else:
        response.headers[HEADER] = name.decode("latin-1")
        response.headers[ATTEMPTS_HEADER] = tries.decode()
    return response
