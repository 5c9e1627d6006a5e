"""Lazy timers: deadlines and keep-alives that cost one timestamp per event.

Moving a due time later is free: the timer wakes at the time it was armed for, finds the new
due time, and sleeps again — so the data path never pays for a ``call_at``/``cancel`` pair
per event, and no task waits per read. :class:`Deadlines` is an upstream answer's
first-byte, idle and total deadlines as one such timer, raising an alarm in its inbox.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from .. import hub
from ._http import Inbox
from .config import Timeouts

__all__ = ["Deadlines", "LazyTimer"]


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


class Deadlines:
    """The first-byte, idle and total deadlines of one upstream answer, as one lazy timer.

    ``missed`` is the hub error once a deadline passed (and the inbox has a ``"deadline"``
    alarm); the first byte is the first body data (or event) after the response head
    (``got_data``: it had come before these deadlines were armed).
    """

    def __init__(self, inbox: Inbox, timeouts: Timeouts, upstream: str, started: float, got_data: bool = False) -> None:
        self._inbox = inbox
        self._timeouts = timeouts
        self._upstream = upstream
        self._started = started
        self._first_at = started + timeouts.first_byte if timeouts.first_byte else math.inf
        self._total_at = started + timeouts.total if timeouts.total else math.inf
        self._idle = timeouts.idle or math.inf
        self.missed: hub.Error | None = None
        # Set by the consumer, not derived from timestamps: uvloop's clock moves in whole
        # milliseconds, so "data came after the start" cannot be read off the times.
        self.got_data = got_data
        self._timer = LazyTimer(self._due, self._fire)

    def _due(self) -> float:
        if self.missed is not None:
            return math.inf
        nearest = self._inbox.last_put + self._idle if self.got_data else self._first_at
        return min(nearest, self._total_at)

    def _fire(self) -> None:
        t = self._timeouts
        now = asyncio.get_running_loop().time()
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

    def cancel(self) -> None:
        self._timer.cancel()
