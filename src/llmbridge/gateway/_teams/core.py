"""The team gateway's request path: who is calling, may they, and what did it cost.

:class:`Teams` is what :class:`~llmbridge.gateway._app.Gateway` calls:

1. :meth:`Teams.authenticate` — the presented secret to a :class:`Principal` (master key,
   static ``api_keys`` entry or virtual key) or a refusal. Virtual keys are looked up by
   SHA-256 in an in-memory table refreshed from the store every ``key_refresh_seconds``
   (a miss asks the store once, so a key made on another replica works at once).
2. :meth:`Teams.admit` — the key's models, budget, RPM and TPM, before anything goes
   upstream; a :class:`Ticket` for an admitted request, else a :class:`Refusal` (429 with
   ``retry-after``, or 403 for a spent budget or a model the key may not use).
3. The end: :meth:`Teams.exchange_ended` (the exchange's ``on_end``) and
   :meth:`Teams.responded` (the response the handler returns) settle the ticket exactly
   once: TPM and spend corrected with the real usage, one ledger row, metrics, the span.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ... import hub
from .._response import StreamResponse  # (once: an import statement per request cost 1.5 µs)
from . import keys as _keys
from . import redact, tracing
from ._guesses import Guesses
from .ledger import Ledger
from .limits import ADMITTED, Admission, LocalLimiter, RedisLimiter
from .metrics import Metrics
from .pricing import Price, cost
from .principal import AS_MASTER, AS_OPEN, AS_STATIC, VIRTUAL, Principal, Refusal
from .settings import TeamsSettings
from .store import LedgerRow, Store, connect

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from starlette.responses import Response


__all__ = ["Answer", "Principal", "Refusal", "Teams", "Ticket", "create", "presented_key"]

log = logging.getLogger("llmbridge.gateway.teams")
UNKNOWN_MODEL = "(unknown)"  # what metrics and the ledger say for a model the config does not name
_ERROR_TYPES = frozenset({*hub.ERROR_TYPES, "client_disconnected", "cancelled"})  # error_type values stored
_NEGATIVE_CACHE = 10_000  # unknown secrets remembered (briefly) so guessing does not hit the store each time
_TOKENS_PER_BYTE = 0.25  # the up-front TPM estimate: ~4 bytes of request JSON per prompt token
_MEMO = 4_096  # virtual keys whose principal is kept (Teams._virtual)
_LIMITER_BACKOFF = 1.0  # seconds: after a failed limiter call, apply rate_limit_failure without calling


class Config(Protocol):
    """What the team features read of the gateway's config (``config.Config`` is one). A
    protocol, not an import: ``config`` imports this package to parse ``[gateway]``'s team keys."""

    @property
    def gateway(self) -> Any: ...
    @property
    def models(self) -> Mapping[str, Any]: ...
    @property
    def upstreams(self) -> Mapping[str, Any]: ...


class Answer(Protocol):
    """What settling reads off an answer: a chat :class:`~.._streaming.Exchange`, or the
    :class:`~.._metering.Outcome` of an images or embeddings call."""

    @property
    def usage(self) -> hub.Usage | None: ...
    @property
    def error(self) -> hub.Error | None: ...  # the error the client got, if any
    @property
    def finish(self) -> hub.Finish | None: ...
    @property
    def ended(self) -> bool: ...  # the client's answer reached its end (a stream: its terminal event)
    @property
    def closed(self) -> bool: ...
    @property
    def first_byte_at(self) -> float | None: ...  # loop time of a stream's first client bytes


@dataclass(slots=True)
class Ticket:
    """An admitted request until it is settled."""

    principal: Principal
    model: str
    price: Price | None
    dialect_in: str
    dialect_out: str
    request_id: str
    started: float  # loop time
    wall: float  # epoch seconds
    admission: Admission
    span: Span | None = None
    streaming: bool = False
    exchange: Answer | None = None
    upstream: str | None = None
    upstream_format: str | None = None
    upstream_model: str | None = None
    settled: bool = False
    cache: str | None = None  # "hit" (answered from the response cache: no upstream tokens, cost 0) or "miss"


def bounded_request_id(value: str) -> str:
    """A request id as the ledger may store it: at most 128 printable ASCII characters (as the
    ``x-request-id`` header is checked in app.py), whatever a body's ``metadata.request_id`` held."""
    # (printable ASCII less the space is 0x21-0x7e: asked with three string methods, ~1.3 k
    # instructions cheaper than a regular expression, on every admitted request)
    if len(value) <= 128 and value.isascii() and value.isprintable() and " " not in value:
        return value
    return "".join(c for c in value[:4096] if "!" <= c <= "~")[:128]


def milliseconds(seconds: float) -> float:
    """``round(seconds * 1000, 3)``: a duration in milliseconds to the microsecond, as the
    ledger stores it, and the same float.

    round() with digits converts to decimal and back (~3 k instructions, twice per settled
    request). The microseconds to the nearest integer ``k`` is that rounding whenever they
    are not within 0.001 of a half: below 1e12 µs the float product is off from the exact one
    by less than 2**-14, so the nearest integer is the same, and ``k / 1000`` is the float
    nearest k/1000, which is what round() returns. Near a half, at zero (its sign), and for
    anything not finite or that large, round() itself answers. (Floats throughout: ``// 1``
    is cheaper than int() or round() calls.)"""
    ms = seconds * 1000
    us = ms * 1000
    if 0.0 < us < 1e12:
        whole = (us + 0.5) // 1  # k, unless us is near a half (then the check below fails)
        if -0.499 < us - whole < 0.499:
            return whole / 1000
    return round(ms, 3)


def one_of(presented: bytes, keys: list[bytes]) -> bool:
    """Whether ``presented`` is one of ``keys``, each compared in constant time (a loop, not
    ``any()`` over a generator: this runs on every request)."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented, key)
    return found


def presented_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The client's secret from ``Authorization: Bearer``, ``x-api-key``, ``x-goog-api-key`` or ``?key=``."""
    auth = headers.get("authorization", "")
    key = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    return key or headers.get("x-api-key") or headers.get("x-goog-api-key") or query.get("key") or None


class Teams:
    """Keys, limits, ledger, metrics and traces of one gateway (see the module docstring)."""

    def __init__(self, settings: TeamsSettings, config: Config, static_keys: list[bytes]):
        redact.install()  # a key sent as ?key= must not reach the access log
        self.settings = settings
        self.accounts = settings.accounts
        self._master = settings.master_key.encode() if settings.master_key else None
        self._static = static_keys
        self._prices = {name: m.price for name, m in config.models.items()}
        self._formats = {name: u.format for name, u in config.upstreams.items()}
        # the upstream to blame when every route failed before an exchange began (no on_end)
        self._last_route = {name: m.routes[-1].upstream for name, m in config.models.items() if m.routes}
        self.metrics = Metrics() if settings.metrics else None
        throttled = self.metrics.rejections.labels("auth_throttled").inc if self.metrics is not None else None
        self.guesses = Guesses(config.gateway.auth_failures_per_minute, on_refused=throttled)  # wrong keys per address
        self.store: Store | None = connect(settings.database_url) if self.accounts else None
        self.ledger: Ledger | None = None
        if self.store is not None:
            on_write = self.metrics.on_ledger_write if self.metrics else None
            self.ledger = Ledger(self.store, settings.ledger_flush_seconds, settings.ledger_max_buffer, on_write)
        self.limiter: LocalLimiter | RedisLimiter | None = None
        if self.accounts:
            seed = self._seed_spend
            self.limiter = RedisLimiter(settings.redis_url, seed) if settings.redis_url else LocalLimiter(seed)
        self._by_hash: dict[str, _keys.KeyRecord] = {}
        self._changes = 0  # bumped by remember(): a reload that raced an admin change is dropped
        self._unknown: dict[str, float] = {}  # hash -> until (loop time)
        self._principals: dict[str, Principal] = {}  # hash -> the principal of its key record
        self._tracer: Tracer | None = None
        self._provider: TracerProvider | None = None
        if settings.otlp_endpoint:
            self.use_tracer_provider(tracing.otlp_provider(settings.otlp_endpoint), own=True)
        self._started = False
        self._start_lock = asyncio.Lock()
        self._refresh: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._limiter_down_until = 0.0  # loop time; a dead Redis costs one timeout per second, not per request

    # -- life cycle

    def use_tracer_provider(self, provider: TracerProvider, own: bool = False) -> None:
        """Send request spans to ``provider`` (an OpenTelemetry SDK ``TracerProvider``)."""
        self._tracer = provider.get_tracer("llmbridge.gateway")
        self._provider = provider if own else None

    async def start(self) -> None:
        """Open the store (migrating it), load the keys, start the ledger writer. Idempotent."""
        async with self._start_lock:
            if self._started:
                return
            if self.store is not None:
                await self.store.open()
                self._load(await self.store.list_keys())
                assert self.ledger is not None
                self.ledger.start()
                self._refresh = asyncio.get_running_loop().create_task(self._refresh_keys(), name="llmbridge-keys")
            self._started = True

    async def stop(self) -> None:
        """Write the ledger's last rows and close everything (a graceful stop loses no row)."""
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._started and self.ledger is not None:
            await self.ledger.close()
        if self.store is not None and self._started:
            await self.store.close()
        if self.limiter is not None:
            with contextlib.suppress(Exception):
                await self.limiter.aclose()
        if self._provider is not None:
            self._provider.shutdown()
        self._started = False

    def _load(self, records: list[_keys.KeyRecord]) -> None:
        self._by_hash = {k.key_hash: k for k in records}

    async def _refresh_keys(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.settings.key_refresh_seconds)
            try:
                assert self.store is not None
                before = self._changes
                found = await self.store.list_keys()
                if before == self._changes:  # else it may predate a change made here: next time
                    self._load(found)
            except Exception as exc:  # the database is down: keep serving the keys we know
                if not failing:
                    log.warning("cannot refresh keys (%s: %s); using the last known set", type(exc).__name__, exc)
                failing = True
            else:
                failing = False

    def remember(self, key: _keys.KeyRecord, old_hash: str | None = None) -> None:
        """A key changed on this replica: serve the change at once."""
        self._changes += 1
        if old_hash is not None:
            self._by_hash.pop(old_hash, None)
        self._by_hash[key.key_hash] = key
        self._unknown.pop(key.key_hash, None)

    async def _seed_spend(self, key_id: str, since: float) -> float:
        assert self.store is not None
        return await self.store.spend_since(key_id, since)

    # -- 1. who

    def is_master(self, secret: str | bytes | None) -> bool:
        """Whether ``secret`` (text, or its UTF-8 bytes) is the master key (compared in constant time)."""
        if not (secret and self._master):
            return False
        return hmac.compare_digest(secret.encode() if isinstance(secret, str) else secret, self._master)

    async def authenticate(self, secret: str | None) -> Principal | Refusal:
        """The caller behind ``secret`` (see :func:`presented_key`), or a 401 refusal."""
        if not self.accounts:
            return self.authenticate_keyless(secret)
        if not self._started:
            await self.start()
        if not secret:
            return self._refuse_auth("missing API key")
        raw = secret.encode()  # (once: compared with the master and static keys, then hashed)
        if self.is_master(raw):
            return AS_MASTER
        if one_of(raw, self._static):
            return AS_STATIC
        digest = _keys.hash_secret(raw)  # (every time: no secret is kept to skip it, see _virtual)
        key = self._by_hash.get(digest)
        if key is None:
            key = await self._lookup(digest)
            if key is None:
                return self._refuse_auth("invalid API key")
        why = key.usable(time.time())
        if why is not None:
            return self._refuse_auth(why)
        principal = self._principals.get(digest)
        if principal is None or principal.key is not key:  # new to this process, or changed since
            principal = self._virtual(digest, key)
        return principal

    def _virtual(self, digest: str, key: _keys.KeyRecord) -> Principal:
        """The principal of a usable virtual key, kept by the secret's digest for its next
        request (a frozen Principal costs ~1.5 k instructions, the look-up a fraction of
        that). Bounded, and only a memo: each request still finds its key record by digest
        and asks it whether it is usable now, so a revoked, rotated or expired key stops as
        before. The secret's hash (~6 k) is not skipped the same way: that would need the
        secrets themselves kept in memory, which the gateway never does (the store holds
        digests only)."""
        if len(self._principals) >= _MEMO:
            self._principals.clear()
        principal = self._principals[digest] = Principal(VIRTUAL, key)
        return principal

    def authenticate_keyless(self, secret: str | None) -> Principal | Refusal:
        """:meth:`authenticate` when there are no accounts (no virtual keys, no master key to
        check here): a static key, anyone when there are none, else a 401 refusal. Nothing to
        wait for, so callers that know ``accounts`` is off call it directly (no coroutine)."""
        if not self._static:
            return AS_OPEN
        if secret and one_of(secret.encode(), self._static):
            return AS_STATIC
        return self._refuse_auth("invalid or missing API key")

    async def _lookup(self, digest: str) -> _keys.KeyRecord | None:
        now = asyncio.get_running_loop().time()
        if self._unknown.get(digest, 0.0) > now:
            return None
        try:
            assert self.store is not None
            key = await self.store.key_by_hash(digest)
        except Exception as exc:
            log.warning("key lookup failed (%s: %s)", type(exc).__name__, exc)
            return None
        if key is None:
            if len(self._unknown) >= _NEGATIVE_CACHE:
                self._unknown.clear()
            self._unknown[digest] = now + self.settings.key_refresh_seconds
            return None
        self._by_hash[digest] = key
        return key

    def _refuse_auth(self, message: str) -> Refusal:
        if self.metrics is not None:
            self.metrics.rejections.labels("auth").inc()
        return Refusal(hub.Error(message, "authentication", "invalid_api_key", 401))

    # -- 2. may they

    async def admit(
        self,
        principal: Principal,
        hreq: hub.Request,
        body_bytes: int,
        dialect_in: str,
        dialect_out: str,
        request_id: str,
    ) -> Ticket | Refusal:
        """Check the key's model list, budget, RPM and TPM; a ticket to settle at the end.

        A refusal is a ledger row too (status 429/403/503, no tokens): "who was throttled" is
        part of "who used what".
        """
        key = principal.key
        if key is None:
            return self.admit_keyless(principal, hreq, dialect_in, dialect_out, request_id)
        asked = hreq.model or ""
        model, hreq = self._bounded_model(hreq)
        request_id = bounded_request_id(request_id)
        started = asyncio.get_running_loop().time(), time.time()  # TTFT and duration include the admission
        verdict = await self._check(key, asked, body_bytes)
        if isinstance(verdict, Refusal):
            if self.ledger is not None:
                error = verdict.error
                status = error.status or hub.ERROR_STATUS.get(error.type, 400)
                self.ledger.record(
                    LedgerRow(time.time(), request_id, key.id, model, None, dialect_in, dialect_out,
                              None, None, None, None, 0.0, None, 0.0, status, error.type)
                )  # fmt: skip
            if self.metrics is not None:
                self.metrics.requests.labels(model, dialect_out, str(verdict.error.status)).inc()
            return verdict
        return self._ticket(principal, hreq, model, dialect_in, dialect_out, request_id, verdict, started)

    def admit_keyless(
        self, principal: Principal, hreq: hub.Request, dialect_in: str, dialect_out: str, request_id: str
    ) -> Ticket:
        """:meth:`admit` for a principal without a virtual key (static, master, open): no
        limits to ask, so no coroutine; callers that know there is no key call it directly."""
        model, hreq = self._bounded_model(hreq)
        started = asyncio.get_running_loop().time(), time.time()  # TTFT and duration include the admission
        return self._ticket(
            principal, hreq, model, dialect_in, dialect_out, bounded_request_id(request_id), ADMITTED, started
        )

    def _bounded_model(self, hreq: hub.Request) -> tuple[str, hub.Request]:
        """The model as metrics, the ledger and spans name it, and the request the span reads.

        Bounded strings only past admission (metrics labels, ledger rows, span names): a model
        the config does not name is UNKNOWN_MODEL (and a request id is cut to 128 printable
        characters, :func:`bounded_request_id`)."""
        asked = hreq.model or ""
        if asked in self._prices:
            return asked, hreq
        if hreq.model is not None:
            hreq = dataclasses.replace(hreq, model=UNKNOWN_MODEL)  # (a copy for the span: the caller keeps its own)
        return UNKNOWN_MODEL, hreq

    async def _check(self, key: _keys.KeyRecord, model: str, body_bytes: int) -> Admission | Refusal:
        if key.models is not None and model not in key.models:
            shown = repr(model) if len(model) <= 64 else repr(model[:64]) + "…"
            return self._refuse(
                hub.Error(f"this API key may not use model {shown}", "permission", "model_not_allowed", 403),
                "model",
            )
        estimate = math.ceil(body_bytes * _TOKENS_PER_BYTE)
        if self._limiter_down_until and asyncio.get_running_loop().time() < self._limiter_down_until:
            admission = self._limiter_failed(None)
        else:
            try:
                limiter = self.limiter
                assert limiter is not None  # a virtual key: accounts are on, so is a limiter
                # (in process, and the period's spend known: nothing to wait for)
                ready = limiter.admit_now(key, estimate) if type(limiter) is LocalLimiter else None
                admission = ready if ready is not None else await limiter.admit(key, estimate)
                self._limiter_down_until = 0.0
            except Exception as exc:  # Redis down or slow: the operator's choice
                admission = self._limiter_failed(exc)
        return admission if admission.ok else self._refusal(key, admission)

    def _ticket(
        self,
        principal: Principal,
        hreq: hub.Request,
        model: str,
        dialect_in: str,
        dialect_out: str,
        request_id: str,
        admission: Admission,
        started: tuple[float, float],  # (loop time, epoch seconds)
    ) -> Ticket:
        ticket = Ticket(
            principal, model, self._prices.get(model), dialect_in, dialect_out, request_id,
            started[0], started[1], admission,
        )  # fmt: skip
        if self._tracer is not None:
            ticket.span = tracing.start_span(self._tracer, hreq, time.time_ns(), self.settings.trace_content)
        if self.metrics is not None:
            self.metrics.open_streams.inc()
        return ticket

    def _limiter_failed(self, exc: Exception | None) -> Admission:
        """``rate_limit_failure`` applied: after a failed call (``exc``) or within the back-off after one."""
        if exc is not None:
            self._limiter_down_until = asyncio.get_running_loop().time() + _LIMITER_BACKOFF
            if self.metrics is not None:
                self.metrics.limiter_errors.inc()
            log.warning("rate limiter unavailable (%s: %s); failing %s for %g s", type(exc).__name__, exc,
                        self.settings.rate_limit_failure, _LIMITER_BACKOFF)  # fmt: skip
        if self.settings.rate_limit_failure == "open":
            return Admission(True, counted=False)
        return Admission(False, "limiter_unavailable", _LIMITER_BACKOFF)

    def _refusal(self, key: _keys.KeyRecord, a: Admission) -> Refusal:
        headers = {}
        if a.retry_after is not None:
            headers["retry-after"] = str(max(1, math.ceil(a.retry_after)))
        if a.reason == "budget":
            period = "" if key.budget_period == "total" else f" per {key.budget_period}"
            message = f"this API key's budget of ${key.budget_usd:g}{period} is spent"
            return self._refuse(hub.Error(message, "permission", "insufficient_quota", 403), "budget", headers)
        if a.reason == "limiter_unavailable":
            error = hub.Error("the rate limiter is unavailable; try again shortly", "overloaded", None, 503)
            return self._refuse(error, "limiter_unavailable", headers)
        what = f"{key.rpm_limit} requests" if a.reason == "rpm" else f"{key.tpm_limit} tokens"
        error = hub.Error(f"rate limit reached: {what} per minute for this API key", "rate_limit",
                          "rate_limit_exceeded", 429)  # fmt: skip
        return self._refuse(error, a.reason or "rpm", headers)

    def _refuse(self, error: hub.Error, reason: str, headers: dict[str, str] | None = None) -> Refusal:
        if self.metrics is not None:
            self.metrics.rejections.labels(reason).inc()
        return Refusal(error, headers or {}, reason)

    # -- 3. what did it cost

    def exchange_ended(self, ticket: Ticket, upstream: str, upstream_model: str | None, exchange: Answer) -> None:
        """An exchange of this request is over (``on_end``): a fallback's failed try, or the answer."""
        ticket.exchange = exchange
        ticket.upstream = upstream
        ticket.upstream_format = self._formats.get(upstream)
        ticket.upstream_model = upstream_model
        if ticket.streaming:
            self.settle(ticket, 200)

    def responded(self, ticket: Ticket, response: Response | StreamResponse) -> None:
        """The handler's response: a stream settles when its exchange ends, anything else now."""
        if not isinstance(response, StreamResponse):
            self.settle(ticket, response.status_code)
        elif response.status != 200:
            self.settle(ticket, response.status)
        else:
            ticket.streaming = True
            if ticket.exchange is not None and ticket.exchange.closed and ticket.exchange.ended:
                self.settle(ticket, 200)  # (defensive: already over)

    def settle(self, ticket: Ticket, status: int) -> None:
        """Once per ticket: correct the limits, write the ledger row, metrics and span."""
        if ticket.settled:
            return
        ticket.settled = True
        exchange = ticket.exchange
        # Let go of it: the exchange's on_end holds the meter that holds this ticket, a
        # reference cycle per request that only the cyclic GC would free (issue 23: that GC
        # cost ~10% of a request's CPU).
        ticket.exchange = None
        if ticket.upstream is None and status >= 500:
            ticket.upstream = self._last_route.get(ticket.model)
        loop = asyncio.get_running_loop()
        now = loop.time()
        usage = exchange.usage if exchange is not None else None
        if ticket.cache == "hit":
            usage = None  # the stored answer's tokens were paid for once, by the request that filled the entry
        error_type = None
        if status == 499:
            error_type = "client_disconnected"
        elif exchange is not None and exchange.error is not None and (status >= 400 or ticket.streaming):
            error_type = exchange.error.type if exchange.error.type in _ERROR_TYPES else "api_error"  # bounded
        elif status >= 400:
            error_type = hub.error_type_for_status(status)
        elif ticket.streaming and exchange is not None and not exchange.ended:
            error_type = "client_disconnected"
        price = ticket.price
        spent = cost(price, usage)
        first = exchange.first_byte_at if ticket.streaming and exchange is not None else None
        ttft = (first - ticket.started) if first is not None else None
        duration = now - ticket.started
        key = ticket.principal.key
        inp = usage.input_tokens if usage else None
        out = usage.output_tokens if usage else None
        pending = None  # the ledger's rows waiting, once this one is queued
        if self.ledger is not None:
            # (positional, in LedgerRow's field order: ts, request_id, key_id, model, upstream,
            # dialect_in, dialect_out, input/output/thinking/cached tokens, cost_usd, ttft_ms,
            # duration_ms, status, error_type, cache; 17 keywords cost more to bind per request)
            pending = self.ledger.record(
                LedgerRow(ticket.wall, ticket.request_id, key.id if key is not None else None, ticket.model,
                          ticket.upstream, ticket.dialect_in, ticket.dialect_out, inp, out,
                          usage.reasoning_tokens if usage else None, usage.cache_read_tokens if usage else None,
                          spent, None if ttft is None else milliseconds(ttft), milliseconds(duration),
                          status, error_type, ticket.cache)
            )  # fmt: skip
        if key is not None and ticket.admission.ok and ticket.admission.counted:
            tokens = (inp or 0) + (out or 0)
            if isinstance(self.limiter, LocalLimiter):  # nothing to wait for: no task
                self.limiter.settle_now(key, ticket.admission, tokens, spent)
            else:
                task = loop.create_task(self._settle_limits(key, ticket.admission, tokens, spent))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        m = self.metrics
        if m is not None:
            blamed = None if error_type in (None, "client_disconnected") else (ticket.upstream or "", error_type)
            m.settled(ticket.model, ticket.dialect_out, status, inp, out, spent, ttft, duration, ticket.cache, blamed)
            if pending is not None:
                m.ledger_pending.set(pending)
        if ticket.span is not None:
            tracing.end_span(
                ticket.span, upstream=ticket.upstream, upstream_format=ticket.upstream_format,
                upstream_model=ticket.upstream_model, usage=usage,
                finish=exchange.finish if exchange is not None else None, error_type=error_type,
                key_id=key.id if key is not None else None, end_ns=time.time_ns(),
            )  # fmt: skip

    async def _settle_limits(self, key: _keys.KeyRecord, admission: Admission, tokens: int, spent: float) -> None:
        try:
            assert self.limiter is not None  # settling a virtual key: accounts are on, so is a limiter
            await self.limiter.settle(key, admission, tokens, spent)
        except Exception as exc:
            if self.metrics is not None:
                self.metrics.limiter_errors.inc()
            log.warning("cannot settle limits for %s (%s: %s)", key.id, type(exc).__name__, exc)


def create(config: Config, static_keys: list[bytes]) -> Teams | None:
    """The gateway's :class:`Teams`, or None when keys, metrics and traces are all off."""
    s = config.gateway.teams
    if not (s.accounts or s.metrics or s.otlp_endpoint):
        return None
    return Teams(s, config, static_keys)
