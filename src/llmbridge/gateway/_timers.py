"""Lazy timers: deadlines and keep-alives that cost one timestamp per event.

Moving a due time later is free: the timer wakes at the time it was armed for, finds the new
due time, and sleeps again — so the data path never pays for a ``call_at``/``cancel`` pair
per event, and no task waits per read. :class:`Deadlines` is an upstream answer's
first-byte, idle and total deadlines as one such timer, raising an alarm in its inbox; a
streamed answer's client keep-alive rides the same timer.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Protocol

from .. import hub
from ._http import Inbox
from .config import Timeouts

__all__ = ["NEVER_WRITTEN", "Deadlines", "LazyTimer", "Written"]


class LazyTimer:
    """Calls ``fire()`` when ``due()`` (a loop time, ``inf`` for never) has passed.

    Moving the due time later costs nothing: the timer wakes at the time it was armed for,
    finds the new due time, and sleeps again.  So per-event work is one timestamp, never a
    ``call_at``/``cancel`` pair.
    """

    __slots__ = ("_due", "_fire", "_handle", "_loop")

    def __init__(self, due: Callable[[], float], fire: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._due, self._fire = due, fire
        self._handle: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        due = self._due()
        if due != math.inf:
            self._handle = self._loop.call_at(due, self._check)

    def _check(self) -> None:
        self._handle = None
        if self._loop.time() >= self._due():
            self._fire()
        else:
            self._arm()

    def rearm(self) -> None:
        """Arm again after a fire, or after the due time moved (a move later costs nothing:
        the armed timer wakes first, finds the new due time and sleeps again)."""
        handle = self._handle
        if handle is not None:
            if handle.when() <= self._due():
                return
            handle.cancel()
            self._handle = None
        self._arm()

    def cancel(self) -> None:
        """Stop for good.  The callbacks are dropped too: they are closures over their owner
        (an exchange, its deadlines), which holds this timer, and that cycle would keep the
        owner -- and the megabytes of an image answer it may hold -- alive until the cyclic
        GC runs, which counts objects, not bytes (RSS climbed by hundreds of MB that way)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._due, self._fire = _never, _nothing


def _never() -> float:
    return math.inf


def _nothing() -> None:
    return None


class Written(Protocol):
    """What a keep-alive counts from: when the client last had bytes (a loop time)."""

    last_write: float


class _NeverWritten:
    last_write = math.inf


NEVER_WRITTEN: Written = _NeverWritten()  # (no client to keep alive: a keep-alive never comes due)


class Deadlines:
    """The first-byte, idle and total deadlines of one upstream answer, as one lazy timer.

    ``missed`` is the hub error once a deadline passed (and the inbox has a ``"deadline"``
    alarm); the first byte is the first body data (or event) after the response head
    (``got_data``: it had come before these deadlines were armed).

    With ``keepalive`` (seconds) and ``client`` (whose ``last_write`` it counts from), the
    same timer also raises a ``"keepalive"`` alarm when the client has had no bytes for that
    interval. One timer an answer, not two (issue 23): each is a
    timer handle in the loop, an object and two closures, made and cancelled per request, and
    in front of a real model every object a request touches is touched cold.
    """

    def __init__(
        self,
        inbox: Inbox,
        timeouts: Timeouts,
        upstream: str,
        started: float,
        got_data: bool = False,
        keepalive: float | None = None,
        client: Written = NEVER_WRITTEN,
    ) -> None:
        self._inbox = inbox
        self._timeouts = timeouts
        self._upstream = upstream
        self._started = started
        self._first_at = started + timeouts.first_byte if timeouts.first_byte else math.inf
        self._total_at = started + timeouts.total if timeouts.total else math.inf
        self._idle = timeouts.idle or math.inf
        # The client's keep-alive: its interval, and whose last write it counts from. It waits
        # when none is asked for, and once raised until answered (keep_alive_again).
        self._keepalive = keepalive or math.inf
        self._client = client
        self._keepalive_waits = keepalive is None or client is NEVER_WRITTEN
        self.missed: hub.Error | None = None
        # Set by the consumer, not derived from timestamps: uvloop's clock moves in whole
        # milliseconds, so "data came after the start" cannot be read off the times.
        self.got_data = got_data
        self._timer = LazyTimer(self._due, self._fire)

    def _deadline(self) -> float:
        if self.missed is not None:
            return math.inf
        nearest = self._inbox.last_put + self._idle if self.got_data else self._first_at
        return min(nearest, self._total_at)

    def _due(self) -> float:
        # (_deadline's lines again, not a call: this runs at every re-arm, _deadline at a fire)
        if self.missed is not None:
            due = math.inf
        else:
            due = self._inbox.last_put + self._idle if self.got_data else self._first_at
            if self._total_at < due:
                due = self._total_at
        if not self._keepalive_waits:
            keepalive = self._client.last_write + self._keepalive
            if keepalive < due:
                due = keepalive
        return due

    def _fire(self) -> None:
        t = self._timeouts
        now = asyncio.get_running_loop().time()
        if now < self._deadline():  # the client's keep-alive: raised once, until answered
            self._keepalive_waits = True
            self._inbox.alarm("keepalive")
            self._timer.rearm()  # (the deadlines go on meanwhile)
            return
        if now >= self._total_at:
            what = f"took longer than {t.total:g} s in total"
        elif not self.got_data:
            what = f"sent no data within {t.first_byte:g} s"
        else:
            what = f"sent nothing for {t.idle:g} s"
        self.missed = hub.Error(f"upstream {self._upstream!r} {what}", "timeout", "upstream_timeout", 504)
        self._inbox.alarm("deadline")

    def data_arrived(self) -> None:
        """Call once, at the first data: the idle deadline replaces the (later) first-byte one."""
        self.got_data = True
        self._timer.rearm()

    def keep_alive_again(self) -> None:
        """The client has had bytes, or is about to (a raised keep-alive answered): the next
        keep-alive counts from ``client.last_write`` again (nothing to do if none was raised:
        the armed timer finds the later due time when it wakes)."""
        if self._keepalive_waits and self._keepalive != math.inf and self._client is not NEVER_WRITTEN:
            self._keepalive_waits = False
            self._timer.rearm()

    def cancel(self) -> None:
        """Stop for good (the timer's callbacks and the client dropped: they are, or hold,
        the owner of this, a cycle the cyclic GC would be left to break)."""
        self._timer.cancel()
        self._client, self._keepalive_waits = NEVER_WRITTEN, True
