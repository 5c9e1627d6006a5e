"""Moving one upstream answer to one client: translate or relay, keep alive, time out, cancel.

The shape of the data path, and why (docs/gateway.md, "Data path", has the profile):

- **One reader per upstream answer, no task per read.**  An HTTP upstream's bytes arrive in
  the connection protocol's callback and land in an :class:`~._http.Inbox`; an in-process
  upstream's events are put there by one long-lived task.  The one task serving the client
  awaits the inbox, and when it wakes it takes *everything* that arrived meanwhile.
- **Whatever is ready leaves in one write.**  What one wake-up took is decoded, translated
  (or relayed) and sent as one ASGI message, so when events arrive together they leave
  together and the cost per event falls as load rises.
- **Deadlines and keep-alives are one timer** an exchange, re-armed lazily: data only moves a
  timestamp, and the timer, when it fires, either finds it moved (and sleeps again) or raises
  an alarm in the inbox.  No ``asyncio.wait``/``wait_for`` per read.
- **The relay watches, it does not keep.**  A same-dialect stream goes out byte for byte; the
  decoder still reads it to note usage, finish and errors, but the exchange keeps only what
  it needs to end the stream properly if the upstream breaks off (the start, the blocks still
  open, the usage so far): memory per stream does not grow with its length.
- **Every buffer has a cap.**  An upstream event (the bytes between two blank lines) larger
  than ``max_event_bytes`` ends the answer with an error; the scan for event boundaries looks
  at each byte once.

:class:`Exchange` runs in two phases.  :meth:`Exchange.prime` reads until the answer really
starts (its first event other than ``ResponseStart``/``Usage``, or a keep-alive interval
without one); an error before that is still an HTTP status for the client, and the caller
may try the next upstream.  After it, :meth:`Exchange.body` yields client bytes and every
error is an event in the client's dialect followed by its terminal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, Protocol

from msgspec.structs import replace as _copy

from .. import dialects, hub, sse
from ..dialects.base import KEEPALIVE_COMMENT, StreamDecoder, StreamEncoder
from ..sse import EventBoundaries, marked_events, next_event_end
from ._failures import as_hub_error
from ._sources import HTTPSource, Source
from ._timers import Deadlines

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "Exchange",
    "Framing",
    "JSONArrayFraming",
    "Options",
    "KEEPALIVE_BYTES",
    "RELAY_MARKERS",
]

log = logging.getLogger("llmbridge.gateway")

_NON_COMMITTING = (hub.ResponseStart, hub.Usage)
_DECODE_WHOLE = 2048  # a relayed read before the answer starts this short is decoded whole (_watch_until_started)
# The kinds Exchange._note tells apart, as plain globals (one lookup each, not two)
_START, _END, _DELTA, _BLOCK_START, _BLOCK_STOP = (
    hub.ResponseStart,
    hub.ResponseEnd,
    hub.Delta,
    hub.BlockStart,
    hub.BlockStop,
)
_USAGE, _FINISH, _ERROR = hub.Usage, hub.Finish, hub.Error
DEFAULT_MAX_EVENT_BYTES = 32 * 1024 * 1024  # a few base64 images in one event; see docs/gateway.md

# Each served dialect's traits (dialects.base.Served, its package's GATEWAY): the keep-alive
# bytes its clients skip (an SSE comment is the idiom; Gemini's google-genai dies on one and
# gets a bare line break: docs/gateway.md, "Keep-alives", lists the clients each choice was
# tested with), the terminal a relayed stream needs after a non-terminal error event (the
# gateway spec: a chat error chunk, then [DONE]), and what a relay's watcher must decode once
# the answer has started: a stretch of whole events holding none of RELAY_MARKERS is relayed
# without being decoded (a superset test: text that happens to contain one costs a decode).
KEEPALIVE_BYTES = {name: dialects.served(name).keepalive for name in dialects.NAMES}
_RELAY_DONE = {name: done for name in dialects.NAMES if (done := dialects.served(name).relay_done) is not None}
RELAY_MARKERS: dict[str, tuple[bytes, ...]] = {
    name: markers for name in dialects.NAMES if (markers := dialects.served(name).relay_markers) is not None
}


class Framing(Protocol):
    """Re-frames the client dialect's SSE bytes (e.g. as a JSON array, or binary frames)."""

    def feed(self, data: bytes) -> bytes: ...

    def close(self) -> bytes: ...


class JSONArrayFraming:
    """Re-frames an SSE body as a JSON array stream (Gemini's ``streamGenerateContent`` without ``alt=sse``)."""

    def __init__(self) -> None:
        self._sse = sse.Decoder()
        self._sep = b"["

    def feed(self, data: bytes) -> bytes:
        out = []
        for event in self._sse.feed(data):
            out.append(self._sep + event.data.encode())
            self._sep = b",\r\n"
        return b"".join(out)

    def close(self) -> bytes:
        tail = self.feed(b"")
        for event in self._sse.close():
            tail += self._sep + event.data.encode()
            self._sep = b",\r\n"
        return tail + (b"[]" if self._sep == b"[" else b"]")


class _RelayState:
    """What a relay keeps to end a stream properly if the upstream breaks off: bounded (noted
    by :meth:`Exchange._note`)."""

    __slots__ = ("open_blocks", "start")

    def __init__(self) -> None:
        self.start: hub.ResponseStart | None = None
        self.open_blocks: dict[tuple[int, int], hub.BlockStart] = {}  # (choice, index) -> start

    def replay(self) -> list[hub.Event]:
        """Events that bring a fresh encoder to where the relayed stream stands."""
        events: list[hub.Event] = [self.start] if self.start is not None else []
        return events + list(self.open_blocks.values())


class Options(NamedTuple):
    """How one :class:`Exchange` carries its answer (the caller's decisions, fixed for its life).

    ``dialect``: the client's; ``relay``: send the upstream's bytes untouched (same dialect,
    same framing) while its decoder watches them; ``relay_filter`` may rewrite whole relayed
    events (the chat usage chunk for a client that did not ask for ``include_usage``);
    ``keepalive``: seconds of client silence before the dialect's keep-alive bytes (``None``:
    never); ``json_array``: Gemini's JSON-array framing instead of SSE; ``request_id``: the
    client's own, stamped into the stream; ``max_event_bytes``: the cap on one upstream
    event; ``observer`` sees each wake-up's raw bytes and hub events (the console's Traffic
    page); ``on_end`` is called once, with the exchange, when it is over; ``model`` is named
    in an answer whose upstream named none (every vendor's answer names its model).

    A named tuple, not a frozen dataclass: just as fixed, and made (once per request) at a
    third of the cost; a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``.
    """

    dialect: str = ""
    relay: bool = False
    relay_filter: Callable[[bytes], bytes] | None = None
    keepalive: float | None = None
    json_array: bool = False
    request_id: str | None = None
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    observer: Callable[[tuple[bytes | None, list[hub.Event]]], None] | None = None
    on_end: Callable[[Exchange], None] | None = None
    model: str | None = None  # the model to name when the upstream's answer names none


_DEFAULTS = Options()


class Exchange:
    """One upstream answer on its way to one client.

    ``encoder_factory`` makes the client dialect's ``StreamEncoder``; ``options`` (one frozen
    :class:`Options`) says how the answer goes out: relayed or translated, keep-alives,
    framing, caps, and who is told what.  Attributes after the end: ``usage``, ``finish``,
    ``error`` (the error the client got), ``events`` (hub events seen), ``started``/``first_byte_at``
    (loop times).

    Slotted: it has more attributes (38) than CPython 3.11 keeps in an instance's shared-key
    table (30), so without slots each exchange got a dict of its own, filled and resized
    attribute by attribute (~250 instructions a store instead of ~100: ~6 k per request).
    """

    __slots__ = (
        "__weakref__",  # (tests watch an exchange being freed)
        "_boundaries",
        "_deadlines",
        "_encoder",
        "_encoder_factory",
        "_framing",
        "_got_data",
        "_held",
        "_held_events",
        "_loop",
        "_observer",
        "_on_end",
        "_pending",
        "_relay_done",
        "_relay_filter",
        "_relay_markers",
        "_relay_state",
        "_saw_done",
        "_skim",
        "closed",
        "dialect",
        "ended",
        "error",
        "events",
        "finish",
        "finished",
        "first_byte_at",
        "inbox",
        "keepalive",
        "last_write",
        "options",
        "relay",
        "request_id",
        "source",
        "started",
        "upstream_at",
        "upstream_done",
        "usage",
    )

    def __init__(self, source: Source, encoder_factory: Callable[[], StreamEncoder], options: Options = _DEFAULTS):
        dialect, relay = options.dialect, options.relay
        self.options = options
        self.source = source
        self.inbox = source.inbox
        self._loop = asyncio.get_running_loop()
        self.started = source.started  # loop time the upstream request was sent
        self.first_byte_at: float | None = None  # loop time the first client bytes were produced
        # perf_counter() of the wake-up that brought the answer's start (prime), or its end
        # (collect): where the upstream's share of the time to the first byte ends (Server-Timing)
        self.upstream_at: float | None = None
        self._encoder_factory = encoder_factory
        # A relay never encodes through this one (its end, if the upstream breaks off, is
        # written by a fresh encoder: _encode_end); a _NullEncoder keeps the type plain.
        self._encoder: StreamEncoder = _NULL_ENCODER if relay else encoder_factory()
        self.relay = relay
        self._relay_filter = options.relay_filter
        # noted only while relaying (a translation never reads it: one empty state serves all)
        self._relay_state = _RelayState() if relay else _NO_RELAY_STATE
        self._relay_done = _RELAY_DONE.get(dialect) if relay else None
        self._skim: tuple[bytes, ...] | None = None  # relay, once started: RELAY_MARKERS of the dialect
        self._relay_markers = RELAY_MARKERS.get(dialect) if relay else None
        self._saw_done = False
        self.dialect = dialect
        self.keepalive = options.keepalive
        self._framing: Framing | None = JSONArrayFraming() if options.json_array else None
        self.request_id = options.request_id
        self._on_end = options.on_end
        self._observer = options.observer  # called once per wake-up with (raw bytes, hub events decoded)
        cap = options.max_event_bytes
        self._boundaries = EventBoundaries(cap) if source.decoder is not None else None
        self._pending = bytearray()  # relay: the bytes of an event not complete yet
        self._held: list[bytes] = []  # client bytes made while priming
        self._held_events: list[hub.Event] = []  # and the hub events seen (for collect)
        # The upstream's deadlines are armed the first time the exchange waits for it
        # (_start_deadlines): an answer that is all in when it starts, as a fast upstream's
        # short one often is, never arms or cancels a timer.  Their due times count from
        # ``source.started`` either way.
        self._deadlines: Deadlines | None = None  # (and the client's keep-alive: one timer)
        self._got_data = False
        self.last_write = self._loop.time()
        self.upstream_done = False  # the inbox reached its end (or was abandoned)
        self.ended = False  # the client's stream reached its terminal event
        self.error: hub.Error | None = None
        self.usage: hub.Usage | None = None
        self.finish: hub.Finish | None = None
        self.events = 0
        self.closed = False
        # body() has yielded its last bytes (set just before that yield): the response can end
        # with them (StreamResponse.last) instead of an empty write of its own
        self.finished = False

    # -- phase 1

    async def prime(self) -> hub.Error | None:
        """Read until the answer starts; an error before that is returned (nothing was sent).

        Returns ``None`` once the answer has started (or is slow: a keep-alive interval
        passed), with the client bytes made so far held for :meth:`body`.
        """
        inbox = self.inbox
        while True:
            if not (inbox.items or inbox.eof or inbox.alarms):  # (Inbox.ready, without the call)
                # (timers only once there is something to wait for: a quick upstream's answer is
                # often in the inbox already; due times count from the exchange's start either way)
                if self._deadlines is None:
                    self._start_deadlines()  # (and the keep-alive: body() keeps it, aclose() stops it)
                await inbox.wait()
            self.upstream_at = time.perf_counter()
            if "keepalive" in inbox.alarms:  # slow to start: start the stream, keep-alives follow
                inbox.alarms.discard("keepalive")
                return None
            try:
                events, out = self._step()
            except Exception:  # a codec bug before the answer started: a 500 in the client's dialect
                log.exception("stream failed before it started")
                return hub.Error("internal gateway error", "api_error", status=500)
            self._held_events += events
            if out:
                self._held.append(out)
            for event in events:
                if type(event) is hub.Error:
                    return event
                if not isinstance(event, _NON_COMMITTING):
                    return None
            if self.upstream_done:
                return hub.Error("upstream ended without an answer", "incomplete_stream", status=502)

    # -- phase 2, streaming

    async def body(self) -> AsyncIterator[bytes]:
        """The client's bytes, one item per wake-up; ends with the dialect's terminal event."""
        # (one generator, not one wrapping another: each item would pass two frames)
        loop = self._loop
        try:
            held, self._held = b"".join(self._held), []
            if self.upstream_done or self.ended:  # the whole answer came while priming: one write, the last
                self.finished = True
                out = held + self._finish()
                if out:
                    self.first_byte_at = loop.time()
                    yield out
                return
            if held:
                self.first_byte_at = loop.time()
                yield held
            if self.relay:
                self._skim = self._relay_markers
            inbox = self.inbox
            self.last_write = loop.time()
            timer = self._deadlines
            if timer is not None:  # armed while priming: a due time moved later costs nothing,
                timer.keep_alive_again()  # and a keep-alive raised (a slow start) counts again
                inbox.alarms.discard("keepalive")  # (one raised since prime returned: the client just had bytes)
            else:
                self._start_deadlines()
                timer = self._deadlines
            while not self.upstream_done and not self.ended:
                await inbox.wait()
                _, out = self._step()
                if "keepalive" in inbox.alarms:
                    inbox.alarms.discard("keepalive")
                    if not out:
                        out = KEEPALIVE_BYTES.get(self.dialect, KEEPALIVE_COMMENT)
                    if timer is not None:  # (always: only the timer raises this alarm)
                        timer.keep_alive_again()
                if self.upstream_done or self.ended:  # the last bytes and the terminal event: one write
                    out += self._finish()
                    self.finished = True
                    if out:
                        if self.first_byte_at is None:
                            self.first_byte_at = loop.time()
                        yield out
                    return
                if out:
                    self.last_write = now = loop.time()
                    if self.first_byte_at is None:
                        self.first_byte_at = now
                    yield out
            tail = self._finish()
            self.finished = True
            if tail:
                if self.first_byte_at is None:
                    self.first_byte_at = loop.time()
                yield tail
        except Exception:  # a codec bug mid-stream: still end with the dialect's error + terminal event
            out = self._failed_end()
            if out:
                if self.first_byte_at is None:
                    self.first_byte_at = loop.time()
                yield out
        finally:
            await self.aclose()

    def whole(self) -> bytes | None:
        """The client's whole body, when the answer came complete while priming (the upstream
        is done, or the client's stream has its terminal event): what :meth:`body` would
        yield, in one piece; ``None`` otherwise (then :meth:`body` streams it).

        A short answer — most of them, when an upstream is fast — then goes out with the
        response head and no iterator, disconnect watch or wake-up of its own (issue 23).
        The caller still closes the exchange (:meth:`aclose`)."""
        if not (self.upstream_done or self.ended):
            return None
        held, self._held = b"".join(self._held), []
        self.finished = True
        self.first_byte_at = self._loop.time()
        try:
            return held + self._finish()
        except Exception:  # a codec bug at the end: ended as body() ends it
            return held + self._failed_end()

    def _failed_end(self) -> bytes:
        """After a codec bug mid-stream: the dialect's error and terminal event, if the client
        has not had its terminal event yet (logged; never raises)."""
        log.exception("stream failed")
        if self.ended:
            return b""
        error = hub.Error("internal gateway error while streaming", "api_error", status=500)
        try:
            return self._encode_end(error)
        except Exception:
            log.exception("cannot encode the error either")
            return b""

    def _start_deadlines(self) -> None:
        """Arm the upstream's first-byte, idle and total deadlines (before the first wait), and
        on the same timer the client's keep-alive, one for the exchange's life (priming, then
        the stream): a ``"keepalive"`` alarm when the *client* has had no bytes for an interval
        (a silent upstream, or one whose events the encoder is still buffering)."""
        if not self.closed and not self.upstream_done:
            self._deadlines = self.source.start_deadlines(self._got_data, self.keepalive, self)

    def _step(self) -> tuple[list[hub.Event], bytes]:
        """Take everything the inbox holds; the hub events seen and the client bytes made."""
        inbox = self.inbox
        items = inbox.take()
        source = self.source
        if items and not self._got_data:
            self._got_data = True
            if self._deadlines is not None:
                self._deadlines.data_arrived()
        decoder = source.decoder
        if decoder is None:  # in-process: the items are hub events
            events: list[hub.Event] = items
            out = self._encode(events) if items else b""
            if self._observer is not None and items:
                self._observer((b"", events))
        else:
            data = items[0] if len(items) == 1 else b"".join(items)
            events, out = self._bytes(data, decoder) if data else ([], b"")
            if self._observer is not None and data:
                self._observer((data, events))
        if "deadline" in inbox.alarms and not self.ended:
            inbox.alarms.discard("deadline")
            missed = self._deadlines.missed if self._deadlines is not None else None
            error = missed or hub.Error("upstream timed out", "timeout", status=504)
            self._abandon()
            events.append(error)
            return events, out + self._encode_end(error)
        if inbox.eof and not inbox.items and not self.upstream_done:
            self.upstream_done = True
            if decoder is not None and not self.ended:
                if inbox.error is not None:
                    error = as_hub_error(inbox.error, source.name)
                    events.append(error)
                    out += self._encode_end(error)
                else:
                    tail = bytes(self._pending) if self.relay else b""
                    tail_events = (decoder.feed(tail) if tail else []) + decoder.close()
                    events.extend(tail_events)
                    out += self._relay_end(tail_events) if self.relay else self._encode(tail_events)
        return events, out

    def _bytes(self, data: bytes, decoder: StreamDecoder) -> tuple[list[hub.Event], bytes]:
        """Raw upstream bytes: decoded by ``decoder`` (the source's) and relayed, or translated."""
        source = self.source
        if source.record is not None:
            source.record(data)
        boundaries = self._boundaries
        assert boundaries is not None
        cut = boundaries.feed(data)
        if boundaries.over:
            # One event larger than the cap: end the answer here, and read no more of it.
            error = hub.Error(
                f"upstream {source.name!r} sent an event larger than {boundaries.cap} bytes",
                "api_error",
                "upstream_event_too_large",
                502,
            )
            self._abandon()
            self._pending.clear()
            return [error], self._encode_end(error)
        if not self.relay:
            events = decoder.feed(data)
            return events, self._encode(events)
        # Relay whole events only, so that an upstream breaking off mid-event can still be
        # followed by a well-formed error event.
        pending = self._pending
        if cut < 0:
            pending += data
            return [], b""
        if pending:
            out = bytes(pending) + data[:cut]
            pending.clear()
        else:
            out = data[:cut] if cut < len(data) else data
        if cut < len(data):
            pending += data[cut:]
        # The watcher reads whole events only (the decoder never holds a partial one), and once
        # the answer has started only the stretches that hold something it notes: a stretch of
        # plain text deltas is relayed without being decoded.
        if self._skim is None and self._relay_markers is not None:
            events = self._watch_until_started(out, decoder)
        elif self._skim is None:
            events = decoder.feed(out)
            self._note(events)
        else:
            events = self._watch_marked(out, 0, decoder)
        return events, self._relayed(out)

    def _watch_marked(self, out: bytes, start: int, decoder: StreamDecoder) -> list[hub.Event]:
        """Decode only the events of ``out[start:]`` that hold one of the dialect's markers."""
        spans = marked_events(out, start, self._skim or ())
        if not spans:
            return []
        events: list[hub.Event] = []
        # Marked events next to each other (a stream's finish chunk, usage chunk and [DONE]
        # usually arrive in one read) are decoded in one feed: the same events, one call.
        begin, end = spans[0]
        for a, b in spans[1:]:
            if a != end:
                events += self._watch_bytes(out[begin:end], decoder)
                begin = a
            end = b
        events += self._watch_bytes(out[begin:end], decoder)
        return events

    def _watch_bytes(self, data: bytes, decoder: StreamDecoder) -> list[hub.Event]:
        got = decoder.feed(data)
        self._note(got)
        return got

    def _watch_until_started(self, out: bytes, decoder: StreamDecoder) -> list[hub.Event]:
        """Before the answer starts: decode one event at a time until it does, skim the rest.

        An unpaced upstream's first read can hold most of its answer; decoding all of it just
        to find the first content event would undo the skim for exactly the fast streams.  A
        short read (at most ``_DECODE_WHOLE`` bytes: a start, a few tokens, the end) is decoded
        in one feed instead: finding its events one by one and scanning the rest for markers
        cost more than decoding the few deltas among them (a 2-token answer in one read: 93 k
        instructions more, under callgrind).
        """
        n = len(out)
        if n <= _DECODE_WHOLE:
            events = decoder.feed(out)
            self._note(events)
            for event in events:
                if not isinstance(event, _NON_COMMITTING):
                    self._skim = self._relay_markers  # started: later reads are skimmed
                    break
            return events
        events = []
        start = 0
        while start < n:
            end = next_event_end(out, start)
            got = decoder.feed(out[start:end])
            events += got
            self._note(got)
            start = end
            for event in got:
                if not isinstance(event, _NON_COMMITTING):
                    self._skim = self._relay_markers  # started: the rest is skimmed
                    if start < n:
                        events += self._watch_marked(out, start, decoder)
                    return events
        return events

    def _relayed(self, out: bytes) -> bytes:
        # (searched from the end, where the read that ends a stream has its [DONE]: found in a
        # few steps, not after a pass over the whole read; the same answer as ``in``, which is
        # a little cheaper only on reads without one: ~0.3 k in 3.6 KB, against 2.5 k saved)
        if self._relay_done is not None and out.rfind(b"[DONE]") >= 0:
            self._saw_done = True
        if self._relay_filter is not None:
            out = self._relay_filter(out)
        return out

    def _encode(self, events: list[hub.Event]) -> bytes:
        """Translate hub events (the client's bytes, re-framed if asked)."""
        if self.ended:
            return b""
        parts = self._note(events, self._encoder.encode)
        out = b"".join(parts)
        return self._framing.feed(out) if self._framing is not None and out else out

    def _observe(self, event: hub.Event) -> None:
        """Note one event (see :meth:`_note`)."""
        self._note([event])

    def _note(self, events: list[hub.Event], encode: Callable[[hub.Event], bytes] | None = None) -> list[bytes]:
        """Note what ``events`` report, in order, up to the end of the client's stream: usage,
        finish, error, and while relaying what ending the stream needs (the start, the blocks
        still open); with ``encode``, each event's client bytes, made right after it is noted.

        One loop for every event of a batch, not a call or two per event: a 2-token stream has
        about eight, nearly all of them rare kinds.  A Delta (nearly every event of a longer
        stream) enters no branch.  The kind is told apart by ``type()`` and identity (hub events
        are final structs), so the loop reads the events as ``Any``: mypy cannot narrow through
        ``kind``, and a ``cast`` per branch would be a call per event.
        """
        parts: list[bytes] = []
        if self.ended:
            return parts
        relay = self.relay
        noted: list[Any] = events  # (kinds are told apart by type(); see the docstring)
        n = 0
        try:
            for event in noted:
                n += 1
                kind = type(event)
                if kind is _DELTA:
                    pass
                elif kind is _START:
                    start = event
                    if not relay:
                        if self.request_id:
                            start.request_id = self.request_id
                    elif self._relay_state.start is None:
                        self._relay_state.start = start
                    if not start.model and self.options.model:  # vendors' answers name a model (required)
                        start.model = self.options.model
                elif kind is _BLOCK_START:
                    if relay:
                        block = event
                        self._relay_state.open_blocks[(block.choice, block.index)] = block
                elif kind is _BLOCK_STOP:
                    if relay:
                        index = event.index
                        open_blocks = self._relay_state.open_blocks
                        # (the keys copied by tuple(), in C: a comprehension is a frame of its own)
                        for key in tuple(open_blocks):
                            if key[1] == index:
                                del open_blocks[key]
                elif kind is _END:  # the client's stream ends here: nothing after it is noted
                    self.ended = True
                    if self.request_id and not relay:
                        event.request_id = self.request_id
                    if encode is not None:
                        parts.append(encode(event))
                    break
                elif kind is _USAGE:  # (the first one copied as merge_usage would, without its call)
                    usage = self.usage
                    self.usage = _copy(event) if usage is None else hub.merge_usage(usage, event)
                elif kind is _FINISH:
                    self.finish = event
                elif kind is _ERROR:
                    self.error = event
                if encode is not None:
                    parts.append(encode(event))
        finally:  # (a codec bug in ``encode``: the events noted so far still count)
            self.events += n
        return parts

    def _relay_end(self, tail_events: list[hub.Event]) -> bytes:
        """The upstream ended (cleanly or not) while relaying: what the client still needs."""
        for event in tail_events:
            if type(event) is hub.Error and not self.ended:
                # Broke off (truncated): drop the partial event, end with our own error event.
                self._pending.clear()
                return self._encode_end(event)
            self._observe(event)
        tail = bytes(self._pending)
        self._pending.clear()
        if tail.strip() and not tail.endswith((b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n")):
            tail += b"\n\n"  # a last event without its blank line: relay it, terminated
        out = self._relayed(tail) if tail else b""
        if self._relay_done is not None and not self._saw_done:
            out += self._relay_done  # e.g. an upstream chat error chunk not followed by [DONE]
        return out

    def _encode_end(self, error: hub.Error) -> bytes:
        """``error`` and the terminal event, in the client's dialect (nothing if it ended)."""
        if self.ended:
            return b""
        if not self.relay:
            return self._encode([error, hub.ResponseEnd()])
        # Relayed so far: a fresh encoder brought to where the stream stands writes the end.
        encoder = self._encoder_factory()
        for event in self._relay_state.replay():
            encoder.encode(event)
        self._observe(error)
        out = encoder.encode(error)
        end = hub.ResponseEnd()
        self._observe(end)
        out += encoder.encode(end)
        if self._relay_done is not None and not out.rstrip().endswith(b"[DONE]"):
            out += self._relay_done
        self._saw_done = True
        return out

    def _abandon(self) -> None:
        """Read no more from the upstream (a deadline passed, an event was too large)."""
        self.upstream_done = True
        if self._deadlines is not None:
            self._deadlines.cancel()
        self.inbox.take()
        with contextlib.suppress(Exception):
            resp = getattr(self.source, "response", None)
            if resp is not None:
                resp.close()

    def _finish(self) -> bytes:
        """The upstream is done; make sure the client sees a terminal event."""
        out = b""
        if not self.ended:
            error = hub.Error("upstream ended before its terminal event", "incomplete_stream", status=502)
            out = self._encode_end(error)
        elif self._relay_done is not None and not self._saw_done:
            # Relayed to an upstream error chunk; its own [DONE], if it ever comes, is not awaited.
            out = self._relay_done
            self._saw_done = True
        if self._framing is not None:
            out += self._framing.close()
        return out

    # -- phase 2, not streaming

    async def collect(self) -> hub.Response:
        """The whole answer assembled (for a client that did not ask for a stream)."""
        assembler = hub.Assembler()
        self._encoder = _NullEncoder()
        self.relay = False
        try:
            inbox = self.inbox
            held_events, self._held_events = self._held_events, []
            for event in held_events:
                assembler.feed(event)
            while not self.ended:
                if self.upstream_done:
                    error = hub.Error("upstream ended before its terminal event", "incomplete_stream", status=502)
                    for event in (error, hub.ResponseEnd()):
                        self._observe(event)
                        assembler.feed(event)
                    break
                if self._deadlines is None and not inbox.ready:
                    self._start_deadlines()
                await inbox.wait()
                self.upstream_at = time.perf_counter()
                inbox.alarms.discard("keepalive")
                events, _ = self._step()
                for event in events:
                    assembler.feed(event)
                    if type(event) is hub.ResponseEnd:
                        break
            return assembler.response
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop everything at once: timers, the upstream (its connection is not reused)."""
        if self.closed:
            return
        self.closed = True
        if self._deadlines is not None:
            self._deadlines.cancel()
        source = self.source
        if type(source) is HTTPSource:  # (closing an HTTP response is immediate: no coroutine)
            source.response.close()
        else:
            await source.aclose()
        if self._on_end is not None:
            try:
                self._on_end(self)
            except Exception:
                log.exception("on_end callback failed")
        # What can be large goes now, by reference counting, even if something still refers
        # to the exchange (a callback, a cycle only the cyclic GC would break).
        self._held, self._held_events = [], []
        self._pending.clear()


class _NullEncoder:
    """The encoder of a non-streaming answer: events are only observed and assembled."""

    def encode(self, event: hub.Event) -> bytes:
        return b""


_NO_RELAY_STATE = _RelayState()  # (never noted into: _note and _encode_end read it only while relaying)
_NULL_ENCODER = _NullEncoder()  # (it keeps no state: one serves every relay)
