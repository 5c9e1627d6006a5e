"""Moving one upstream answer to the client: translate or relay, keep alive, time out, cancel.

An upstream answer is pulled as *batches* ``(raw_bytes, hub_events)``: one per network chunk
from an HTTP upstream (the chunk and what the dialect decoder made of it), one per event from
an in-process upstream.  A final batch with ``raw is None`` holds what the decoder's
``close()`` returned, or an error the gateway made up (timeout, broken connection).

:class:`Exchange` runs in two phases.  :meth:`Exchange.prime` pulls until the answer really
starts (its first event other than ``ResponseStart``/``Usage``, or a keep-alive interval
without one); an error before that is still an HTTP status for the client, and the caller
may try the next upstream.  After it, :meth:`Exchange.body` yields client bytes and every
error is an event in the client's dialect followed by its terminal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

from .. import hub, sse
from .config import Timeouts

log = logging.getLogger("llmbridge.gateway")
Batch = tuple["bytes | None", list]
KEEPALIVE = object()  # pull() result: the keep-alive interval passed without upstream data
KEEPALIVE_BYTES = b": keep-alive\n\n"
_NON_COMMITTING = (hub.ResponseStart, hub.Usage)


async def http_batches(raw: Any, decoder: Any, record: Callable[[bytes], None] | None = None) -> AsyncIterator[Batch]:
    """Byte chunks of an HTTP upstream and their hub events; closes the response at the end."""
    try:
        async for chunk in raw.chunks():
            if record is not None:
                record(chunk)
            yield chunk, decoder.feed(chunk)
        yield None, decoder.close()
    finally:
        await raw.aclose()


async def event_batches(events: AsyncIterator[hub.Event]) -> AsyncIterator[Batch]:
    """An in-process upstream's events, one batch each; a missing ResponseEnd is a truncation."""
    ended = False
    try:
        async for event in events:
            ended = type(event) is hub.ResponseEnd
            yield b"", [event]
        if not ended:
            yield None, [hub.Error("upstream ended before its terminal event", "incomplete_stream"), hub.ResponseEnd()]
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


class Puller:
    """Pulls batches under the upstream's first-byte, idle and total deadlines.

    ``pull(wait)`` returns the next batch, ``None`` at the end, or :data:`KEEPALIVE` when
    ``wait`` seconds pass first (the pending read carries on).  A missed deadline or a broken
    upstream becomes a final ``(None, [Error, ResponseEnd])`` batch.
    """

    def __init__(self, batches: AsyncIterator[Batch], timeouts: Timeouts, upstream: str, started: float):
        self._it = batches
        self._pending: asyncio.Future | None = None
        self._timeouts = timeouts
        self.upstream = upstream
        self._total_at = started + timeouts.total if timeouts.total else math.inf
        self._next_at = started + timeouts.first_byte if timeouts.first_byte else math.inf
        self._first = True
        self.done = False

    async def pull(self, wait: float | None = None) -> Any:
        if self.done:
            return None
        if self._pending is None:
            self._pending = asyncio.ensure_future(anext(self._it))
        loop = asyncio.get_running_loop()
        deadline = min(self._next_at, self._total_at)
        limit = deadline - loop.time()
        timeout = limit if wait is None else min(limit, wait)
        if timeout != math.inf:
            done, _ = await asyncio.wait((self._pending,), timeout=max(timeout, 0))
            if not done:
                if loop.time() < deadline:
                    return KEEPALIVE
                return await self._fail(self._timeout_error(deadline))
        task, self._pending = self._pending, None
        try:
            batch = await task
        except StopAsyncIteration:
            self.done = True
            return None
        except Exception as exc:
            from .upstream import as_hub_error

            return await self._fail(as_hub_error(exc, self.upstream))
        self._first = False
        if self._timeouts.idle:
            self._next_at = loop.time() + self._timeouts.idle
        return batch

    def _timeout_error(self, deadline: float) -> hub.Error:
        t = self._timeouts
        if deadline == self._total_at:
            what = f"took longer than {t.total:g} s in total"
        elif self._first:
            what = f"sent no data within {t.first_byte:g} s"
        else:
            what = f"sent nothing for {t.idle:g} s"
        return hub.Error(f"upstream {self.upstream!r} {what}", "timeout", "upstream_timeout", 504)

    async def _fail(self, error: hub.Error) -> Batch:
        await self.aclose()
        return None, [error, hub.ResponseEnd()]

    async def aclose(self) -> None:
        """Stop the upstream at once (cancels a pending read, closes the HTTP response)."""
        self.done = True
        pending, self._pending = self._pending, None
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):  # cancelled on purpose
                await pending
        aclose = getattr(self._it, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):  # closing a broken upstream
                await aclose()


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


def event_boundary(buf: bytearray) -> int:
    """Length of the prefix of ``buf`` that ends with a complete SSE event (0 if none)."""
    end = 0
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n"):
        i = buf.rfind(sep)
        if i >= 0 and i + len(sep) > end:
            end = i + len(sep)
    return end


class Exchange:
    """One upstream answer on its way to one client.

    ``encoder_factory`` makes the client dialect's ``StreamEncoder``; with ``relay`` the
    upstream bytes go out untouched (same dialect) while the decoder still watches them.
    """

    def __init__(
        self,
        puller: Puller,
        encoder_factory: Callable[[], Any],
        *,
        relay: bool = False,
        keepalive: float | None = None,
        json_array: bool = False,
        request_id: str | None = None,
        on_end: Callable[[Exchange], None] | None = None,
    ):
        self.puller = puller
        self._encoder_factory = encoder_factory
        self._encoder = None if relay else encoder_factory()
        self.relay = relay
        self.keepalive = keepalive
        self._framing = JSONArrayFraming() if json_array else None
        self.request_id = request_id
        self._on_end = on_end
        self._held: list[Batch] = []
        self._seen: list[hub.Event] = []  # relay: decoded events, to bring an encoder up to date on truncation
        self._buf = bytearray()  # relay: bytes of an event not complete yet
        self.ended = False
        self.error: hub.Error | None = None  # the error the client got, if any
        self.usage: hub.Usage | None = None
        self.finish: hub.Finish | None = None
        self.events = 0
        self.closed = False
        self.started = asyncio.get_running_loop().time()  # for TTFT/duration (gateway.teams)
        self.first_byte_at: float | None = None  # loop time the first client bytes were produced

    # -- phase 1

    async def prime(self) -> hub.Error | None:
        """Pull until the answer starts; an error before that is returned (nothing was sent)."""
        while True:
            batch = await self.puller.pull(self.keepalive)
            if batch is KEEPALIVE:
                self._held.append((b"", []))  # the answer is slow: start it, keep-alives follow
                return None
            if batch is None:
                return hub.Error("upstream ended without an answer", "incomplete_stream", status=502)
            self._held.append(batch)
            for event in batch[1]:
                if type(event) is hub.Error:
                    return event
                if not isinstance(event, _NON_COMMITTING):
                    return None

    # -- phase 2, streaming

    async def body(self) -> AsyncIterator[bytes]:
        try:
            async for out in self._body():
                if self.first_byte_at is None:
                    self.first_byte_at = asyncio.get_running_loop().time()
                yield out
        except Exception:  # a codec bug mid-stream: still end with the dialect's error + terminal event
            log.exception("stream failed")
            if not self.ended:
                error = hub.Error("internal gateway error while streaming", "api_error", status=500)
                try:
                    out = self._process((None, [error, hub.ResponseEnd()]))
                except Exception:
                    log.exception("cannot encode the error either")
                    out = b""
                if out:
                    yield out
        finally:
            await self.aclose()

    async def _body(self) -> AsyncIterator[bytes]:
        for batch in self._held:
            out = self._process(batch)
            if out:
                yield out
        self._held = []
        # Keep-alives go out when the *client* has had no bytes for a keep-alive interval:
        # a silent upstream, or one whose events the encoder is still buffering.
        keepalive = self.keepalive if not self._framing else None
        clock = asyncio.get_running_loop().time
        last = clock()
        while not self.puller.done:
            wait = None if keepalive is None else max(0.0, last + keepalive - clock())
            batch = await self.puller.pull(wait)
            if batch is KEEPALIVE:
                yield KEEPALIVE_BYTES
                last = clock()
                continue
            if batch is None:
                break
            out = self._process(batch)
            if out:
                yield out
                last = clock()
            elif keepalive is not None and clock() - last >= keepalive:
                yield KEEPALIVE_BYTES
                last = clock()
        out = self._finish()
        if out:
            yield out

    def _process(self, batch: Batch) -> bytes:
        raw, events = batch
        if self.relay:
            return self._relay(raw, events)
        if self.ended:
            return b""
        encode = self._encoder.encode
        parts = []
        for event in events:
            self._observe(event)
            parts.append(encode(event))
            if self.ended:
                break
        out = b"".join(parts)
        return self._framing.feed(out) if self._framing and out else out

    def _observe(self, event: hub.Event) -> None:
        self.events += 1
        kind = type(event)
        if kind is hub.ResponseStart:
            if self.request_id and not self.relay:
                event.request_id = self.request_id
        elif kind is hub.ResponseEnd:
            self.ended = True
            if self.request_id and not self.relay:
                event.request_id = self.request_id
        elif kind is hub.Usage:
            self.usage = hub.merge_usage(self.usage, event)
        elif kind is hub.Finish:
            self.finish = event
        elif kind is hub.Error:
            self.error = event

    def _relay(self, raw: bytes | None, events: list) -> bytes:
        if raw is not None:
            if not self.ended:
                for event in events:
                    self._observe(event)
                self._seen.extend(events)
            return self._relay_bytes(raw)
        if not self.ended and any(type(e) is hub.Error for e in events):
            # The upstream broke off (truncated, stalled, connection lost): drop the partial
            # event and append the dialect's own error + terminal event, from an encoder
            # brought up to date with what was relayed (its output for that already went out).
            self._buf.clear()
            encoder = self._encoder_factory()
            for event in self._seen:
                encoder.encode(event)
            parts = []
            for event in events:
                self._observe(event)
                parts.append(encoder.encode(event))
                if self.ended:
                    break
            return b"".join(parts)
        # A clean end; the last event may lack its blank line: relay it, terminated.
        if not self.ended:
            for event in events:
                self._observe(event)
        tail = bytes(self._buf)
        self._buf.clear()
        if tail.strip() and not tail.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
            tail += b"\n\n"
        return tail

    def _relay_bytes(self, raw: bytes) -> bytes:
        buf = self._buf
        buf += raw
        cut = event_boundary(buf)
        if not cut:
            return b""
        out = bytes(buf[:cut])
        del buf[:cut]
        return out

    def _finish(self) -> bytes:
        """The upstream is done; make sure the client sees a terminal event."""
        out = b""
        if not self.ended:
            error = hub.Error("upstream ended before its terminal event", "incomplete_stream", status=502)
            out = self._process((None, [error, hub.ResponseEnd()]))
        elif self.relay and self._buf:
            out = self._relay(None, [])
        if self._framing is not None:
            out += self._framing.close()
        return out

    # -- phase 2, not streaming

    async def collect(self) -> hub.Response:
        """The whole answer assembled (for a client that did not ask for a stream)."""
        assembler = hub.Assembler()
        try:
            batches = list(self._held)
            self._held = []
            while True:
                for _, events in batches:
                    for event in events:
                        self._observe(event)
                        assembler.feed(event)
                        if self.ended:
                            return assembler.response
                batch = await self.puller.pull()
                if batch is None:
                    break
                batches = [batch]
            error = hub.Error("upstream ended before its terminal event", "incomplete_stream", status=502)
            assembler.feed(error)
            assembler.feed(hub.ResponseEnd())
            return assembler.response
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.puller.aclose()
        if self._on_end is not None:
            self._on_end(self)


class StreamResponse:
    """An ASGI streaming response that stops at once when the client goes away.

    (Starlette's ``StreamingResponse`` only notices a disconnect at its next write, which
    can be a keep-alive interval away; this one listens for ``http.disconnect`` meanwhile.)
    """

    def __init__(
        self,
        body: AsyncIterator[bytes],
        status: int = 200,
        headers: dict[str, str] | None = None,
        media_type: str = "text/event-stream",
    ):
        self.body = body
        self.status = status
        self.headers = [
            (b"content-type", media_type.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        for k, v in (headers or {}).items():
            self.headers.append((k.lower().encode("latin-1"), v.encode("latin-1")))

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        async def pump() -> None:
            await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
            async for chunk in self.body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        pump_task = asyncio.ensure_future(pump())
        watch_task = asyncio.ensure_future(watch())
        try:
            await asyncio.wait((pump_task, watch_task), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump_task, watch_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(pump_task, watch_task, return_exceptions=True)
            aclose = getattr(self.body, "aclose", None)
            if aclose is not None:
                await aclose()
        exc = pump_task.exception() if pump_task.done() and not pump_task.cancelled() else None
        if exc is not None and not isinstance(exc, OSError):  # a client gone mid-write is no server error
            raise exc
