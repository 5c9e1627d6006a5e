"""The console's Traffic page: a bounded in-memory ring of recent exchanges.

Sans-I/O apart from reading a clock: the gateway calls :meth:`TrafficLog.begin` when it opens
an exchange, lets :meth:`Entry.watch` look at the batches going by (to time the first token
and keep a short event timeline, which the exchange itself does not record), and ends the
entry from the exchange's ``on_end`` callback.  Memory is bounded twice: the ring holds at
most ``size`` entries, and each entry at most :data:`TIMELINE_LIMIT` timeline rows.

Prompt text is never kept unless ``keep_prompts`` (the gateway records bodies to disk anyway
then); credentials never reach this module (it sees hub requests, not HTTP headers).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from .. import hub

if TYPE_CHECKING:
    from ._streaming import Exchange

TIMELINE_LIMIT = 300  # timeline rows per entry; the rest is counted, not kept
PROMPT_LIMIT = 500  # characters of the last user message kept when keep_prompts
_CONTENT = (hub.BlockStart, hub.Delta)  # the first of these is the "first token"
_NO_EVENTS: list[type[hub.Event]] = []  # the timeline's row of a batch without events (never changed)


_clock = time.monotonic
Batch = tuple[bytes | None, list[hub.Event]]  # what an exchange's observer gets per wake-up


class Outcome(Protocol):
    """What :meth:`Entry.end` reads from an exchange that is over (an :class:`Exchange`, or a
    stand-in such as :class:`_Cancelled`): all five are read as attributes, once per request."""

    @property
    def ended(self) -> bool: ...
    @property
    def relay(self) -> bool: ...
    @property
    def usage(self) -> hub.Usage | None: ...
    @property
    def finish(self) -> hub.Finish | None: ...
    @property
    def error(self) -> hub.Error | None: ...


class Entry:
    """One exchange as the Traffic page shows it.  Times are seconds on ``time.monotonic``."""

    def __init__(
        self,
        log: TrafficLog,
        number: int,
        model: str | None,
        upstream: str,
        upstream_format: str,
        dialect: str,
        stream: bool,
        prompt: str | None,
        started: float,
    ) -> None:
        self._log = log
        self.id = number
        self.wall = time.time()  # for display only; durations use the monotonic clock
        self.model = model
        self.upstream = upstream
        self.upstream_format = upstream_format
        self.dialect = dialect
        self.stream = stream
        self.prompt = prompt
        self.started = started
        self.first_token: float | None = None
        self.ended_at: float | None = None
        self.status = "open"  # open | ok | error | cancelled
        self.error: dict[str, Any] | None = None
        self.finish: str | None = None
        self.usage: hub.Usage | None = None
        self.relay = False
        # (clock time, event types, bytes) per batch: the events and bytes counts are summed from
        # it when read, so a batch costs one append (past the limit, counted in the _dropped fields)
        self.timeline: list[tuple[float, list[type[hub.Event]], int]] = []
        self.timeline_dropped = 0
        self._dropped_events = 0
        self._dropped_bytes = 0

    # -- fed by the gateway

    @property
    def hook(self) -> Callable[[Batch], None] | None:
        """The exchange's ``observer``: called with ``(raw_bytes | None, hub_events)`` per wake-up.

        Only what the exchange does not record is taken here (the first token's time, an
        error the answer failed with before it started, the timeline); usage, finish and
        later errors come from the exchange at the end.  This is on the gateway's data path:
        it stays a few attribute updates per batch (bench/ui_bench.py measures it).
        """
        return self._glance

    def _glance(self, batch: Batch) -> None:
        raw, events = batch
        now = _clock()
        if self.first_token is None:
            for event in events:
                kind = type(event)
                if kind in _CONTENT:
                    self.first_token = now
                    break
                if kind is hub.Error:
                    self._error(cast(hub.Error, event))  # what ``kind is`` checked (mypy cannot narrow through it)
        self._row(now, events, len(raw) if raw else 0)

    def observe(self, raw: bytes | None, events: list[hub.Event], now: float | None = None) -> None:
        """Note one batch in full: size, events, the first token's time, usage, finish, errors.

        For a caller with no exchange to ask at the end (the Playground).
        """
        now = _clock() if now is None else now
        for event in events:
            if self.first_token is None and type(event) in _CONTENT:
                self.first_token = now
            elif type(event) is hub.Usage:
                self.usage = hub.merge_usage(self.usage, event)
            elif type(event) is hub.Finish:
                self.finish = event.reason
            elif type(event) is hub.Error:
                self._error(event)
        self._row(now, events, len(raw) if raw else 0)

    def _row(self, now: float, events: list[hub.Event], size: int) -> None:
        """One batch in the timeline (its event types only: no content is kept), or counted past the limit."""
        timeline = self.timeline
        if len(timeline) < TIMELINE_LIMIT:
            # (an empty batch shares one empty list: the console only reads it)
            timeline.append((now, [*map(type, events)] if events else _NO_EVENTS, size))
        else:
            self.timeline_dropped += 1
            self._dropped_events += len(events)
            self._dropped_bytes += size

    @property
    def events(self) -> int:
        """Hub events seen so far."""
        return sum(len(kinds) for _, kinds, _ in self.timeline) + self._dropped_events

    @property
    def bytes(self) -> int:
        """Upstream bytes seen so far."""
        return sum(size for _, _, size in self.timeline) + self._dropped_bytes

    def _error(self, event: hub.Error) -> None:
        if self.error is None:
            self.error = {"type": event.type, "message": event.message[:500], "status": event.status}

    def end(self, exchange: Outcome | None = None, now: float | None = None) -> None:
        """The exchange is over (its ``on_end``): take what it knows, settle the status."""
        if self.ended_at is not None:
            return
        self.ended_at = _clock() if now is None else now
        if exchange is not None:
            self.relay = exchange.relay
            usage = exchange.usage
            if usage is not None:
                self.usage = usage
            finish = exchange.finish
            if finish is not None:
                self.finish = finish.reason
            error = exchange.error
            if error is not None and self.error is None:
                self.error = {"type": error.type, "message": error.message[:500], "status": error.status}
            ended = exchange.ended
        else:
            ended = True
        if self.error is not None:
            self.status = "error"
        elif not ended:
            self.status = "cancelled"  # the client went away, or the upstream failed before the answer
        else:
            self.status = "ok"

    def fail(self, exc: BaseException) -> None:
        """The upstream refused before any event (``exc`` carries the hub ``error``) or was cancelled."""
        error = getattr(exc, "error", None)
        if isinstance(error, hub.Error):
            self.error = {"type": error.type, "message": error.message[:500], "status": error.status}
        self.end(exchange=_Cancelled if self.error is None else None)

    def then(self, callback: Callable[[Exchange], None]) -> Callable[[Exchange], None]:
        """An ``on_end`` callback that ends this entry and then calls ``callback``."""

        def on_end(exchange: Exchange) -> None:
            self.end(exchange)
            callback(exchange)

        return on_end

    # -- read by the console

    def summary(self) -> dict[str, Any]:
        """The row on the Traffic page: JSON-ready, no prompt text unless kept."""
        end = self.ended_at
        u = self.usage
        out_tokens = u.output_tokens if u else None
        tps = None
        if out_tokens and end is not None and self.first_token is not None and end > self.first_token:
            tps = round(out_tokens / (end - self.first_token), 1)
        return {
            "id": self.id,
            "time": round(self.wall, 3),
            "model": self.model,
            "upstream": self.upstream,
            "deployment": f"{self.upstream}/{self.model}",  # as x-llmbridge-deployment names it (routing.py)
            "upstream_format": self.upstream_format,
            "dialect": self.dialect,
            "stream": self.stream,
            "relay": self.relay,
            "status": self.status,
            "error": self.error,
            "finish": self.finish,
            "ttft_ms": _ms(self.first_token - self.started) if self.first_token is not None else None,
            "duration_ms": _ms(end - self.started) if end is not None else None,
            "input_tokens": u.input_tokens if u else None,
            "output_tokens": out_tokens,
            "tokens_per_s": tps,
            "events": self.events,
            "bytes": self.bytes,
            "prompt": self.prompt,
        }

    def detail(self) -> dict[str, Any]:
        """:meth:`summary` plus the event timeline."""
        return dict(
            self.summary(),
            timeline=[
                {"t_ms": _ms(t - self.started), "what": _what(kinds, n), "bytes": n} for t, kinds, n in self.timeline
            ],
            timeline_dropped=self.timeline_dropped,
        )


class _Off(Entry):
    """The entry handed out when traffic is off: watches nothing, keeps nothing."""

    @property
    def hook(self) -> None:
        return None  # no observer at all: the data path is exactly as without the console

    def then(self, callback: Callable[[Exchange], None]) -> Callable[[Exchange], None]:
        return callback

    def fail(self, exc: BaseException) -> None:
        pass


class TrafficLog:
    """The last ``size`` exchanges (``size`` 0: off).  ``keep_prompts`` keeps prompt text."""

    def __init__(self, size: int = 200, *, keep_prompts: bool = False) -> None:
        self.size = size
        self.keep_prompts = keep_prompts
        self._ring: deque[Entry] = deque(maxlen=max(size, 1))
        self._numbers = itertools.count(1)
        # The entries' clock, for a caller that notes when its exchange opened and begins the
        # entry later (the chat path: once the upstream request is written, issue 23).
        self.clock = _clock

    def begin(
        self,
        upstream: str,
        request: hub.Request,
        dialect: str,
        upstream_format: str = "local",
        stream: bool = True,
        started: float | None = None,
    ) -> Entry:
        """A new entry for an exchange opened now (or at ``started``), already in the ring.
        (The chat path passes its arguments positionally: a keyword costs ~0.4 k instructions.)"""
        prompt = None
        if self.keep_prompts:
            users = [m for m in request.messages if m.role == "user"]
            prompt = users[-1].text[:PROMPT_LIMIT] if users else None
        entry_type = Entry if self.size else _Off
        entry = entry_type(
            self,
            next(self._numbers),
            request.model,
            upstream,
            upstream_format,
            dialect,
            stream,
            prompt,
            _clock() if started is None else started,
        )
        if self.size:
            self._ring.append(entry)
        return entry

    def recent(self, after: int = 0, limit: int | None = None) -> list[Entry]:
        """Entries newer than id ``after``, newest first."""
        out = [e for e in reversed(self._ring) if e.id > after]
        return out[:limit] if limit is not None else out

    def get(self, number: int) -> Entry | None:
        return next((e for e in self._ring if e.id == number), None)

    def totals(self) -> list[dict[str, Any]]:
        """Per model and upstream: requests, errors and tokens over the entries in memory."""
        rows: dict[tuple[str | None, str], dict[str, Any]] = {}
        for e in self._ring:
            row = rows.setdefault(
                (e.model, e.upstream),
                {
                    "model": e.model,
                    "upstream": e.upstream,
                    "requests": 0,
                    "errors": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                },
            )
            row["requests"] += 1
            row["errors"] += e.status == "error"
            if e.usage is not None:
                row["input_tokens"] += e.usage.input_tokens or 0
                row["output_tokens"] += e.usage.output_tokens or 0
        return sorted(rows.values(), key=lambda r: -r["requests"])


class _Cancelled:
    """Stands in for an exchange that never began (cancelled before the upstream answered)."""

    ended = relay = False
    usage = finish = error = None


def _what(kinds: list[type[hub.Event]], size: int) -> str:
    """``"BlockStart, Delta x3"`` for a batch's event types, in order of first appearance."""
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind.__name__] = counts.get(kind.__name__, 0) + 1
    what = ", ".join(k if n == 1 else f"{k} x{n}" for k, n in counts.items())
    return what or ("bytes (no complete event yet)" if size else "end of body")


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
