"""Where an upstream answer comes from: an :class:`~._http.Inbox` plus how to read and close it.

An HTTP upstream's body bytes land in the inbox from the connection's protocol callback
(:class:`HTTPSource`; the exchange decodes or relays them); an in-process upstream's hub
events are put there by one long-lived task (:class:`EventSource`). Either way the one task
serving the client awaits the inbox and takes everything that arrived meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from .. import hub
from ..dialects.base import StreamDecoder
from ._failures import as_hub_error
from ._http import HIGH_WATER, Inbox, Response
from ._timers import NEVER_WRITTEN, Deadlines, Written
from .config import Timeouts

__all__ = ["EVENTS_AHEAD", "EventSource", "HTTPSource", "Source"]

log = logging.getLogger("llmbridge.gateway")


class Source:
    """One upstream answer as it arrives: an :class:`Inbox` plus how to read and close it.

    ``decoder`` is set for HTTP upstreams (raw bytes are decoded by the exchange, which may
    also relay them); in-process upstreams put hub events in the inbox themselves.
    """

    inbox: Inbox
    decoder: StreamDecoder | None = None
    record: Callable[[bytes], None] | None = None

    def __init__(self, name: str, timeouts: Timeouts, started: float) -> None:
        self.name = name
        self.timeouts = timeouts
        self.started = started

    def start_deadlines(
        self, got_data: bool = False, keepalive: float | None = None, client: Written = NEVER_WRITTEN
    ) -> Deadlines:
        """The answer's deadlines, counted from ``started``; ``got_data``: its first data is in;
        with ``keepalive``, the client's keep-alive on the same timer (:class:`Deadlines`)."""
        return Deadlines(self.inbox, self.timeouts, self.name, self.started, got_data, keepalive, client)

    async def aclose(self) -> None:  # pragma: no cover - every source overrides it
        raise NotImplementedError


class HTTPSource(Source):
    """An HTTP upstream's response body (its dialect's ``StreamDecoder`` reads it)."""

    def __init__(
        self,
        response: Response,
        decoder: StreamDecoder,
        name: str,
        timeouts: Timeouts,
        started: float,
        record: Callable[[bytes], None] | None = None,
    ) -> None:
        # (Source.__init__'s three, set here: one call less per request)
        self.name, self.timeouts, self.started = name, timeouts, started
        self.response = response
        self.inbox = response.inbox
        self.decoder = decoder
        self.record = record

    async def aclose(self) -> None:
        self.response.close()


EVENTS_AHEAD = 256  # in-process events a slow client may fall behind by before the upstream waits
_EVENT_WEIGHT = HIGH_WATER // EVENTS_AHEAD + 1  # what one event counts for in the inbox's flow control


class EventSource(Source):
    """An in-process upstream's hub events, moved into the inbox by one long-lived task.

    The upstream's failures become hub errors; a stream that stops without ``ResponseEnd``
    is a truncation.  The task never ends with an exception (nothing is left unretrieved).
    """

    def __init__(self, events: AsyncIterator[hub.Event], name: str, timeouts: Timeouts, started: float) -> None:
        super().__init__(name, timeouts, started)
        # Back-pressure: past EVENTS_AHEAD events not yet taken (a slow client), the pump waits,
        # and so does the in-process upstream it reads (the local model's queue fills, the
        # engine blocks): a fast upstream cannot run ahead of its client into memory.
        self._room = asyncio.Event()
        self._room.set()
        self.inbox = Inbox(self._room.clear, self._room.set)
        self._events = events
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        inbox = self.inbox
        ended = False
        try:
            room = self._room
            async for event in self._events:
                ended = type(event) is hub.ResponseEnd
                inbox.put(event, _EVENT_WEIGHT)
                if ended:
                    break
                if not room.is_set():
                    await room.wait()
            if not ended:
                inbox.put(hub.Error("upstream ended before its terminal event", "incomplete_stream"))
                inbox.put(hub.ResponseEnd())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the upstream's failure is the client's error event, not a crash
            error = as_hub_error(exc, self.name)
            if not isinstance(exc, OSError | RuntimeError) and error.type == "api_error":
                log.error("upstream %s failed: %s", self.name, type(exc).__name__)
            inbox.put(error)
            inbox.put(hub.ResponseEnd())
        finally:
            inbox.finish()
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def aclose(self) -> None:
        task = self._task
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):  # cancelled on purpose; its errors are in the inbox
            await task
