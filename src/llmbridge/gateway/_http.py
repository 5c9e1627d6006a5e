"""The gateway's upstream HTTP/1.1 client: asyncio protocols on httptools, pooled per origin.

Why not httpx: reading a streamed body through httpx costs a chain of coroutines per read
(httpx -> httpcore -> anyio -> the socket), and a read cannot be interrupted by a timer
without cancelling the task doing it, so the old data path ran a Task plus an
``asyncio.wait`` per upstream chunk.  Measured in ``bench/http_client_bench.py`` (one run,
the same streamed bodies): see bench/README.md, "Upstream HTTP client".

Here the event loop calls :meth:`_Connection.data_received`; httptools parses in C and hands
body bytes to the response's :class:`Inbox`, which wakes the one task that consumes the
answer.  Everything that arrived since that task last looked is taken in one go, so bytes
that arrive together are processed and written to the client together.  Deadlines and
keep-alives are timers that *raise a flag in the inbox* (:meth:`Inbox.alarm`) instead of
cancelling a read, so the consumer never needs a second task.

A response head's fields are not handed to Python one by one (a vendor API sends a score of
them; the gateway reads a few, and only for an error): llhttp checks them in C, the connection
keeps the head's bytes, and :attr:`Response.headers` parses them only if it is asked.  So a
head's cost no longer grows with its fields, only (in C) with its bytes.

Scope, on purpose: HTTP/1.1 over TCP or TLS (the vendor APIs all speak it), bodies with
``content-length``, chunked or close-delimited framing, ``gzip``/``deflate`` bodies (we ask for
``identity``; a server may ignore that), keep-alive reuse with one retry when a pooled
connection turns out to be closed before any response byte (and no reuse of one idle for more
than :data:`IDLE_EXPIRY`), TCP keep-alive probes on quiet connections, spare connections
opened ahead of the requests, host names resolved once for a burst (kept :data:`DNS_TTL`).  Heads up to 64
KiB; trailers are not read.  No proxies and no HTTP/2 to upstreams; an operator who needs a
proxy puts the gateway's upstream ``base_url`` on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import os
import socket
import ssl
import time
import zlib
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httptools

__all__ = ["ConnectError", "HTTPClient", "Head", "Inbox", "ProtocolError", "Response", "UpstreamHTTPError"]

# Flow control: above this many bytes waiting in an inbox, stop reading the upstream socket
# until the consumer (which waits on a slow client) takes them.  It bounds memory per stream
# to this plus one socket read; it says nothing about event sizes (those are capped later).
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
# A connection silent for KEEPALIVE_IDLE seconds is probed by TCP every KEEPALIVE_INTERVAL, and
# given up after KEEPALIVE_COUNT probes unanswered. A NAT gateway, a firewall or a load balancer
# may drop a quiet connection without a word (AWS's NAT gateways after 350 s): the probes keep
# its mapping alive, and a peer that is gone is found in about a minute -- for an idle pooled
# connection, and for a request whose upstream says nothing for minutes (a long answer that is
# not streamed), which would otherwise wait out its deadline on a connection that is dead.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3
# An idle pooled connection older than this is closed instead of reused, whatever the probes
# said: the backstop for a middlebox that forgets a connection they kept busy. A request sent on
# a dropped connection would wait out its whole head timeout (first_byte, 120 s by default).
# Servers that close idle connections themselves say so (FIN), which the pool sees at once.
IDLE_EXPIRY = 300.0
# A host name's addresses are kept this long for new connections (aiohttp's default): a burst
# that opens a hundred connections asks the resolver once, not a hundred times through the
# loop's few executor threads (each a query to the DNS server where nothing caches it).
DNS_TTL = 10.0
# A spare connection that could not be opened: none is tried to that origin for this long
# (an upstream that is down gets the requests' own connects, not a second stream of them).
SPARE_RETRY_AFTER = 5.0

log = logging.getLogger("llmbridge.gateway")


class UpstreamHTTPError(Exception):
    """Talking HTTP to an upstream failed (the message says how, never with credentials)."""


class ConnectError(UpstreamHTTPError):
    """No connection could be made (refused, DNS, TLS handshake)."""


class ProtocolError(UpstreamHTTPError):
    """The upstream broke HTTP/1.1 (unparseable bytes, connection lost mid-response)."""


class Inbox:
    """Items an upstream delivered that the consumer has not taken yet, and why it should wake.

    One producer (a protocol callback or one long-lived task) calls :meth:`put` /
    :meth:`finish`; timers call :meth:`alarm`; one consumer awaits :meth:`wait` and then reads
    :attr:`items` (via :meth:`take`), :attr:`eof`, :attr:`error` and :attr:`alarms`.
    """

    __slots__ = (
        "_loop",
        "_pause",
        "_paused",
        "_resume",
        "_waiter",
        "alarms",
        "eof",
        "error",
        "items",
        "last_put",
        "size",
    )

    def __init__(self, pause: Callable[[], None] | None = None, resume: Callable[[], None] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self.items: list[Any] = []
        self.size = 0  # bytes waiting (bytes items only)
        self.eof = False
        self.error: BaseException | None = None  # why the input ended early, if it did
        self.alarms: set[str] = set()  # raised by timers: "deadline", "keepalive"
        self.last_put = self._loop.time()
        self._waiter: asyncio.Future[None] | None = None
        self._pause, self._resume = pause, resume
        self._paused = False

    # -- producer side

    def put(self, item: Any, size: int = 0) -> None:
        """Add one item (``size`` bytes of it count towards flow control); wakes the consumer."""
        self.items.append(item)
        self.last_put = self._loop.time()
        if size:
            self.size += size
            if self.size > HIGH_WATER and self._pause is not None and not self._paused:
                self._paused = True
                self._pause()
        self._wake()

    def put_many(self, items: list[Any], size: int) -> None:
        """Add several byte items at once (one wake-up, one clock read, one flow-control check)."""
        self.items += items
        self.last_put = self._loop.time()
        self.size += size
        if self.size > HIGH_WATER and self._pause is not None and not self._paused:
            self._paused = True
            self._pause()
        self._wake()

    def finish(self, error: BaseException | None = None) -> None:
        """No more items: a clean end, or ``error``.  The first call wins."""
        if not self.eof:
            self.eof = True
            self.error = error
            self._wake()

    def alarm(self, name: str) -> None:
        """A timer wants the consumer's attention (a missed deadline, a keep-alive due)."""
        self.alarms.add(name)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- consumer side

    @property
    def ready(self) -> bool:
        return bool(self.items) or self.eof or bool(self.alarms)

    async def wait(self) -> None:
        """Return once there are items, the end, or an alarm (at once if there already are)."""
        if self.items or self.eof or self.alarms:
            return
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def take(self) -> list[Any]:
        """All items delivered so far (emptying the inbox; resumes a paused producer)."""
        items, self.items = self.items, []
        if self.size:
            self.size = 0
            if self._paused and self._resume is not None:
                self._paused = False
                self._resume()
        return items


class _Origin(NamedTuple):
    """Where a connection goes; the pool's key (a named tuple: hashed and compared in C, twice
    per request, where a frozen dataclass runs its generated ``__hash__``)."""

    scheme: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


Head = tuple[_Origin, bytes]  # a request's origin, and its head up to the content-length value


class Response:
    """An upstream HTTP response: status and headers at once, the body through :attr:`inbox`."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self.status = 0
        self._head = b""  # the final head's bytes, status line to blank line: see headers
        self._headers: dict[str, str] | None = None
        self.inbox = Inbox(connection.pause_reading, connection.resume_reading)
        self.head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.complete = False

    @property
    def headers(self) -> dict[str, str]:
        """Lower-cased names; repeated headers joined with ", "; values as llhttp gives them
        (leading blanks dropped, trailing ones kept).  Only the head's: trailers are not read.

        Parsed from the head's bytes the first time they are asked for: the usual answer's
        (a vendor API sends a score) are never read, only an error's ``retry-after``."""
        headers = self._headers
        if headers is None:
            headers = self._headers = _parse_head(self._head)
        return headers

    @property
    def got_bytes(self) -> bool:
        """Whether any byte of the answer came (a request answered by none may be sent again).

        Asked when the head failed, before the connection serves anything else: the reads the
        connection kept for the incomplete head say it (a flag set per read would cost every
        body read)."""
        connection = self._connection
        return bool(connection._reads) or not connection._in_head

    async def read(self, limit: int) -> bytes:
        """The whole body, at most ``limit`` bytes (the rest is dropped); closes the response."""
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                await self.inbox.wait()
                for chunk in self.inbox.take():
                    if size < limit:
                        parts.append(chunk[: limit - size])
                    size += len(chunk)
                if self.inbox.eof:
                    if self.inbox.error is not None:
                        raise self.inbox.error
                    return b"".join(parts)
                if size >= limit:
                    return b"".join(parts)
        finally:
            self.close()

    def close(self) -> None:
        """Done with the response: its connection goes back to the pool if it is reusable."""
        self._connection.release(self)


class _Callbacks:
    """What the connection's httptools parser calls (it looks them up once, when it is made):
    the connection's own methods, and for body pieces the ``append`` of its parts list.

    No ``on_header``: without it httptools asks llhttp for no field callbacks at all, so no
    Python runs per field (llhttp still checks every one in C); the connection keeps the head's
    bytes instead (see :meth:`_Connection.data_received`).
    Trailers (fields after a chunked body) are then not reported either: nothing reads them."""

    __slots__ = ("on_body", "on_headers_complete", "on_message_begin", "on_message_complete")

    def __init__(self, connection: _Connection) -> None:
        self.on_message_begin = connection.on_message_begin
        self.on_headers_complete = connection.on_headers_complete
        self.on_body = connection._parts.append
        self.on_message_complete = connection.on_message_complete


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection to an origin; serves one response at a time."""

    def __init__(self, pool: HTTPClient, origin: _Origin) -> None:
        self._pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None
        # The reads of the current response while its head is incomplete (references: the loop
        # hands over bytes, which never change), at most _MAX_HEAD bytes of them but the last.
        # Usually one read, the head and the body's first bytes.  One list for the connection's
        # life, emptied when the head is in; a connection is only reused after a complete
        # response, so a response's reads never hold its predecessor's bytes.
        self._reads: list[bytes] = []
        self._interim = 0  # interim (1xx) heads of the current response so far, before its own
        self._in_head = True  # the current response's (final) head is not complete yet
        self._decompress: Any = None
        # Body pieces of the current socket read (raw: a compressed body is inflated when they
        # are delivered).  One list for the connection's life: its own ``append`` is the
        # parser's body callback, a C call per HTTP chunk instead of a Python method.
        self._parts: list[bytes] = []
        self._parser = httptools.HttpResponseParser(_Callbacks(self))
        self.closed = False
        self.reused = False
        self.idle_since = 0.0  # time.monotonic() when it last went back to the pool
        self._keep_alive = True
        self._reading_paused = False  # pause_reading() was the last of the two called
        # The head timeout, as a lazy timer: sending moves the due time, the head's arrival
        # clears it, and the timer (armed once, not per request) fires only when the due time
        # it finds has passed; otherwise it sleeps again until that time (see expect_head).
        self._head_due = math.inf  # loop time the current response's head is due by
        self._head_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.response is None:  # bytes nobody asked for: the connection is not reusable
            self.abort()
            return
        if self._in_head:  # kept before it is fed: the head may complete in it (see got_bytes too)
            reads = self._reads
            # llhttp sets no bound on a head: the reads kept for one are, here (all the bytes
            # of the reads before this one belong to the head, which is still incomplete).
            if reads and sum(map(len, reads)) > _MAX_HEAD:
                self._fail(_head_too_long())
                return
            reads.append(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolError("upstream tried to switch protocols"))
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a callback raised (on_headers_complete: a too-long head)
            self._fail(
                cause if isinstance(cause, ProtocolError) else ProtocolError(f"upstream sent malformed HTTP ({exc})")
            )
        self._deliver()

    def _deliver(self) -> None:
        # httptools calls on_body once per HTTP chunk, and a streaming upstream sends one chunk
        # per event: the pieces of one socket read go to the inbox together, so the consumer is
        # woken (and the clock read) once per read, not once per event.
        parts = self._parts
        response = self.response
        if parts and response is not None:
            if response.complete:  # a stray message's body (see on_message_begin): no one's
                parts.clear()
                return
            items = parts.copy()
            parts.clear()
            if self._decompress is not None:
                items = self._inflate(items)
                if not items:
                    return
            response.inbox.put_many(items, len(items[0]) if len(items) == 1 else sum(map(len, items)))

    def _inflate(self, items: list[bytes]) -> list[bytes]:
        """``items`` decompressed (what inflated whole before a corrupt piece still counts)."""
        out = []
        try:
            for item in items:
                data = self._decompress.decompress(item)
                if data:
                    out.append(data)
        except zlib.error as exc:
            if out and self.response is not None:
                self.response.inbox.put_many(out, sum(map(len, out)))
            self._fail(ProtocolError(f"upstream sent a corrupt compressed body ({exc})"))
            return []
        return out

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_head_timer()
        self._pool.forget(self)
        response = self.response
        if response is None or response.complete:
            return
        if not self._in_head and not self._parser.should_keep_alive() and self._close_delimited():
            # A body framed by the connection's end: its end is the body's end.
            self.on_message_complete()
            return
        what = "closed the connection" if exc is None else f"connection lost ({type(exc).__name__})"
        self._fail(ProtocolError(f"upstream {what} before the response was complete"))

    # -- httptools callbacks

    def on_message_begin(self) -> None:
        # The client never pipelines: a message that begins once the current response is
        # complete answers nothing it asked (a confused or hostile upstream).  Its bytes reach
        # no inbox (_deliver) and the connection is not reused: the parser would keep a partial
        # head as the start of the next request's answer, on a pool that serves every caller.
        # (llhttp skips blank lines between messages before it calls this: they are harmless.)
        response = self.response
        if response is None or response.complete:
            self._keep_alive = False

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None or not self._in_head:  # bytes after a complete response: not ours
            self._keep_alive = False
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim response (100 Continue): the real head follows
            self._interim += 1
            return
        reads = self._reads
        data = reads[0] if len(reads) == 1 else b"".join(reads)
        # The head alone (a copy, or the read itself when it is all head): the response may
        # live as long as its stream, the read's body bytes must not live with it.
        end = data.find(b"\r\n\r\n") + 4
        if self._interim or data[0] in b"\r\n" or end < 4:  # not the usual: one head, first byte on
            start, end = _head_span(data, self._interim)
            self._interim = 0
            head = data[start:end]
        else:
            head = data[:end]
        if end > _MAX_HEAD:
            raise _head_too_long()  # (feed_data raises it on, as the cause of a callback error)
        reads.clear()
        self._in_head = False
        self._head_due = math.inf
        response._head = head
        response.status = status
        self._keep_alive = self._parser.should_keep_alive()
        # Is the body compressed?  The head is searched in C (lower-cased); only when it holds
        # "content-encoding" are the headers read to be sure.
        if b"content-encoding" in head.lower():
            encoding = response.headers.get("content-encoding", "").strip().lower()
            if encoding in ("gzip", "x-gzip"):
                self._decompress = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif encoding == "deflate":
                self._decompress = zlib.decompressobj()
        if not response.head.done():
            response.head.set_result(None)

    def on_message_complete(self) -> None:
        response = self.response
        # (in the head still: an interim response ended, the real one follows)
        if response is None or response.complete or self._in_head:
            return
        self._deliver()  # (before it is complete: body pieces after that are strays, dropped)
        response.complete = True
        if self._decompress is not None and not response.inbox.eof:  # (eof: the body was corrupt)
            tail = self._decompress.flush()
            if tail:
                response.inbox.put_many([tail], len(tail))
        response.inbox.finish()

    # -- for the pool and the response

    def _close_delimited(self) -> bool:
        headers = self.response.headers if self.response else {}
        return "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", "").lower()

    def _fail(self, error: Exception) -> None:
        self._deliver()  # what arrived whole before the failure still counts
        response = self.response
        if response is not None:
            if not response.head.done():
                response.head.set_exception(error)
                response.head.exception()  # retrieved: the opener reports it, not the loop's GC hook
            response.inbox.finish(error)
        self.abort()

    def send(self, data: bytes, body: bytes = b"") -> Response:
        """Write a request (``data``, then ``body`` if it is sent on its own); its response."""
        assert self.transport is not None
        self.response = Response(self)
        self._decompress = None
        self._in_head = True
        self._parts.clear()
        self.transport.write(data)
        if body:
            self.transport.write(body)
        return self.response

    def release(self, response: Response) -> None:
        if response is not self.response:
            return
        self.response = None
        if response.complete and self._keep_alive and not self.closed and self.transport is not None:
            if self._reading_paused:
                self.resume_reading()
            # The parser is at a message boundary (the response is complete, the connection
            # kept alive): it reads the next response as it is, no new parser per request.
            self._pool.put_back(self)
        else:
            self.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self._reading_paused = False
            with contextlib.suppress(RuntimeError):  # already reading
                self.transport.resume_reading()

    def expect_head(self, timeout: float) -> None:
        """Fail the current response's head with ``TimeoutError`` unless it is in within
        ``timeout`` seconds.

        A connection kept alive serves request after request: its one timer, armed for the
        first, wakes at that due time, finds a later one (or none) and sleeps again, so a
        request costs a timestamp, not a ``call_at`` and a ``cancel``.
        """
        loop = asyncio.get_running_loop()
        due = self._head_due = loop.time() + timeout
        timer = self._head_timer
        if timer is None or timer.when() > due:
            if timer is not None:
                timer.cancel()
            self._head_timer = loop.call_at(due, self._check_head)

    def _check_head(self) -> None:
        self._head_timer = None
        due = self._head_due
        if due == math.inf:  # no head pending: the timer stops until the next request
            return
        loop = asyncio.get_running_loop()
        if loop.time() < due:
            self._head_timer = loop.call_at(due, self._check_head)
            return
        self._head_due = math.inf
        response = self.response
        if response is not None and not response.head.done():
            response.head.set_exception(TimeoutError())

    def _stop_head_timer(self) -> None:
        self._head_due = math.inf
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def abort(self) -> None:
        self.closed = True
        self._stop_head_timer()
        if self.transport is not None:
            self.transport.abort()


class HTTPClient:
    """A pool of keep-alive HTTP/1.1 connections, per origin (scheme, host, port).

    ``spares``: connections kept ready per origin, opened ahead of the requests that will use
    them (0: none, a request connects when the pool has no idle one). A connection costs a
    request its TCP handshake, and to a vendor's API over TLS one or two round trips more and
    the key exchange: tens of milliseconds before the request is even written, all of them on
    the first token's path. A spare is opened in the background when a request takes the last
    idle connection of its origin, and by :meth:`prepare` (at start-up, before any request);
    it then waits in the pool like any idle connection (and leaves it if the upstream closes
    it). A request that found the pool empty opens no spare: its origin's connections do not
    outlive the gaps between its requests (the upstream's keep-alive is shorter), and a spare
    would only be one more handshake for the upstream to drop.
    """

    # Idle connections kept per origin: as many as the gateway serves streams at once by default
    # (max_connections, 1,000), so a burst finds its connections ready the second time, not 64 of
    # them (an idle connection the upstream closes leaves the pool: connection_lost -> forget).
    def __init__(
        self, *, max_idle_per_origin: int = 1024, ssl_context: ssl.SSLContext | None = None, spares: int = 0
    ) -> None:
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._all: set[_Connection] = set()
        self._max_idle = max_idle_per_origin
        self._ssl = ssl_context
        self._heads: dict[tuple[object, ...], Head] = {}  # see head()
        self.closed = False
        self.spares = spares
        self.idle_expiry = IDLE_EXPIRY  # seconds an idle connection stays reusable
        self._opening: dict[_Origin, int] = {}  # spares being opened, per origin
        self._no_spare_until: dict[_Origin, float] = {}  # loop time: a spare failed (SPARE_RETRY_AFTER)
        self._spare_tasks: set[asyncio.Task[None]] = set()
        self.dns_ttl = DNS_TTL  # seconds a host name's addresses are kept for new connections
        self._addresses: dict[str, tuple[float, list[tuple[int, str]]]] = {}  # host -> (until, addresses)
        self._resolving: dict[str, asyncio.Task[list[tuple[int, str]]]] = {}  # lookups under way

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            # SSL_CERT_FILE (the usual variable) names a private CA bundle; otherwise certifi's
            # (httpx's, already installed with it), as httpx and requests use.
            cafile = os.environ.get("SSL_CERT_FILE")
            if not cafile:
                try:
                    import certifi

                    cafile = certifi.where()
                except ImportError:  # pragma: no cover - the system store then
                    cafile = None
            self._ssl = ssl.create_default_context(cafile=cafile)
        return self._ssl

    async def _connect(self, origin: _Origin, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._addresses_of(origin)
                failed: OSError | None = None
                for family, address in addresses:  # (in the resolver's order, as asyncio tries them)
                    try:
                        _, connection = await loop.create_connection(
                            lambda: _Connection(self, origin),
                            address,
                            origin.port,
                            family=family,
                            ssl=self._ssl_context() if origin.tls else None,
                            server_hostname=origin.host if origin.tls else None,  # (the name, not the address)
                        )
                        break
                    except ssl.SSLError:
                        raise  # (the server's certificate, not the address: no other one will do better)
                    except OSError as exc:
                        failed = exc
                else:
                    self._addresses.pop(origin.host, None)  # (perhaps moved: asked afresh next time)
                    raise failed or OSError(f"no address for {origin.host}")
        except TimeoutError:
            raise ConnectError(f"connecting to {origin.host}:{origin.port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(f"cannot connect to {origin.host}:{origin.port}: {exc.strerror or exc}") from None
        _probe_when_quiet(connection.transport)
        self._all.add(connection)
        return connection

    async def _addresses_of(self, origin: _Origin) -> list[tuple[int, str]]:
        """``origin``'s host as (family, address) pairs: an address as it is; a name as the
        resolver gave it, kept :data:`DNS_TTL` seconds, and asked once for all the connections
        a burst opens at the same time. Raises OSError (``socket.gaierror``) when it cannot be
        resolved."""
        host = origin.host
        literal = _literal_family(host)
        if literal:
            return [(literal, host)]
        loop = asyncio.get_running_loop()
        kept = self._addresses.get(host)
        if kept is not None and kept[0] > loop.time():
            return kept[1]
        lookup = self._resolving.get(host)
        if lookup is None:
            lookup = self._resolving[host] = loop.create_task(self._resolve(host, origin.port))
            lookup.add_done_callback(partial(self._resolved, host))
        # (shielded: a connect that gives up does not end the lookup the others wait for)
        return await asyncio.shield(lookup)

    async def _resolve(self, host: str, port: int) -> list[tuple[int, str]]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys((int(family), str(sockaddr[0])) for family, _, _, _, sockaddr in infos))
        if len(self._addresses) >= _MAX_HOSTS:
            self._addresses.clear()
        self._addresses[host] = (loop.time() + self.dns_ttl, addresses)
        return addresses

    def _resolved(self, host: str, lookup: asyncio.Task[list[tuple[int, str]]]) -> None:
        if self._resolving.get(host) is lookup:
            del self._resolving[host]
        if not lookup.cancelled():
            lookup.exception()  # (retrieved: the connects that waited raise it; none may be left)

    def _checkout(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        oldest = time.monotonic() - self.idle_expiry  # (came back before this: expired)
        while idle:
            connection = idle.pop()
            if connection.idle_since < oldest:
                # The list is in the order the connections came back, the youngest last: the
                # ones left came back earlier still, and have expired too.
                _abort_all(idle)
                connection.abort()
                return None
            if not connection.closed and connection.transport is not None and not connection.transport.is_closing():
                connection.reused = True
                return connection
        return None

    def prepare(self, url: str, timeout: float | None = None) -> None:
        """Open the spare connections to ``url``'s origin now, in the background: the first
        request finds one ready, its handshakes done (nothing when :attr:`spares` is 0). Needs
        a running loop; failures are logged (debug) and retried no sooner than
        :data:`SPARE_RETRY_AFTER`. Raises :class:`UpstreamHTTPError` for a URL that is not http(s)."""
        if self.spares and not self.closed:
            self._top_up(self.head("GET", url, {})[0], timeout)

    def _top_up(self, origin: _Origin, timeout: float | None) -> None:
        """Open spares to ``origin`` in the background until :attr:`spares` are idle or opening."""
        loop = asyncio.get_running_loop()
        if self._no_spare_until and self._no_spare_until.get(origin, 0.0) > loop.time():
            return
        idle = self._idle.get(origin)
        opening = self._opening.get(origin, 0)
        for _ in range(self.spares - (len(idle) if idle else 0) - opening):
            opening += 1
            task = loop.create_task(self._open_spare(origin, timeout))
            self._spare_tasks.add(task)
            task.add_done_callback(self._spare_tasks.discard)
        if opening:
            self._opening[origin] = opening

    async def _open_spare(self, origin: _Origin, timeout: float | None) -> None:
        try:
            connection = await self._connect(origin, timeout)
        except Exception as exc:  # (a background task: nobody to raise to; no traceback in the log)
            self._no_spare_until[origin] = asyncio.get_running_loop().time() + SPARE_RETRY_AFTER
            log.debug("no spare connection to %s:%d: %s", origin.host, origin.port, exc)
            return
        finally:
            left = self._opening.get(origin, 1) - 1
            if left > 0:
                self._opening[origin] = left
            else:
                self._opening.pop(origin, None)
        self._no_spare_until.pop(origin, None)
        self.put_back(connection)  # (aborted there if the client closed meanwhile)

    def put_back(self, connection: _Connection) -> None:
        if self.closed:
            connection.abort()
            return
        idle = self._idle.setdefault(connection.origin, [])
        now = time.monotonic()
        oldest = now - self.idle_expiry  # (came back before this: expired)
        if idle and idle[0].idle_since < oldest:  # the ones at the bottom expired: closed
            fresh = next((i for i, c in enumerate(idle) if c.idle_since >= oldest), len(idle))
            expired = idle[:fresh]
            del idle[:fresh]
            _abort_all(expired)
        if len(idle) >= self._max_idle:
            connection.abort()
        else:
            connection.idle_since = now
            idle.append(connection)

    def forget(self, connection: _Connection) -> None:
        self._all.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)

    async def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes,
        *,
        connect_timeout: float | None = None,
        head_timeout: float | None = None,
    ) -> Response:
        """Send a request; the response once its status and headers are in (body to follow).

        Raises :class:`ConnectError`, :class:`ProtocolError`, or ``TimeoutError`` when no
        response head arrives within ``head_timeout`` seconds.  The caller must
        :meth:`Response.close` the response (its connection is pooled again or closed).
        """
        if self.closed:
            raise UpstreamHTTPError("the HTTP client is closed")
        return await self.send(
            self.head(method, url, headers), body, connect_timeout=connect_timeout, head_timeout=head_timeout
        )

    def head(self, method: str, url: str, headers: dict[str, str]) -> Head:
        """The request head of ``method`` ``url`` with ``headers``, for :meth:`send`. Raises
        :class:`UpstreamHTTPError` for a URL that is not http(s) or a header with a line break."""
        # The head of a request to the same URL with the same headers is the same but for its
        # length: made once (the upstream's few URLs and header sets), then one concatenation.
        key: tuple[object, ...] = (method, url, *headers.items())
        cached = self._heads.get(key)
        if cached is None:
            if len(self._heads) >= _MAX_HEADS:
                self._heads.clear()
            cached = self._heads[key] = _head_for(method, url, headers)
        return cached

    async def send(
        self, head: Head, body: bytes, connect_timeout: float | None = None, head_timeout: float | None = None
    ) -> Response:
        """:meth:`request` with a head made by :meth:`head` (a caller that keeps it saves
        building the lookup key of its headers per request). The timeouts may be passed
        positionally, as the upstreams do per request (a keyword costs ~0.4 k instructions)."""
        if self.closed:
            raise UpstreamHTTPError("the HTTP client is closed")
        origin, prefix = head
        # A short body goes out with its head in one write, made in one formatting (not a
        # head made and then copied again with the body); a large one in a write of its own.
        if len(body) < _ONE_WRITE:
            data, body = b"%s%d\r\n\r\n%s" % (prefix, len(body), body), b""
        else:
            data = b"%s%d\r\n\r\n" % (prefix, len(body))
        for attempt in (0, 1):
            connection = self._checkout(origin) if attempt == 0 else None
            if connection is None:
                connection = await self._connect(origin, connect_timeout)
            elif self.spares and len(self._idle[origin]) < self.spares:  # the pool's last ones: a spare
                self._top_up(origin, connect_timeout)
            response = connection.send(data, body)
            # The head's timeout fails the head future itself (no asyncio.timeout around the
            # await: that is a context manager, a task lookup and a cancellation to undo per
            # request), from the connection's lazy timer; what awaits it gets the TimeoutError.
            if head_timeout is not None:
                connection.expect_head(head_timeout)
            try:
                await response.head
            except ProtocolError:
                response.close()
                # A pooled connection the server had already closed: nothing was answered,
                # so the request never ran; send it once more on a fresh connection.
                if connection.reused and not response.got_bytes and attempt == 0:
                    continue
                raise
            except BaseException:
                connection.abort()
                response.close()
                raise
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        self.closed = True
        for lookup in list(self._resolving.values()):
            lookup.cancel()
        spares = list(self._spare_tasks)
        for task in spares:
            task.cancel()
        if spares:
            await asyncio.gather(*spares, return_exceptions=True)
        for connection in list(self._all):
            connection.abort()
        self._all.clear()
        self._idle.clear()


_MAX_HEADS = 256  # distinct (method, URL, headers) heads kept per client
_MAX_HOSTS = 256  # host names whose addresses are kept per client
_ONE_WRITE = 65536  # bytes of body sent in one write with the head (a larger body: its own write)
# The most bytes a response's heads may take, interim ones included (llhttp has no bound; a
# vendor's head is about 1 KB).  Past it the response fails, so the reads kept stay bounded.
_MAX_HEAD = 64 * 1024


def _probe_when_quiet(transport: asyncio.BaseTransport | None) -> None:
    """Turn on TCP keep-alive probes for ``transport``'s socket (see :data:`KEEPALIVE_IDLE`),
    where the platform has them; a socket that refuses is left as it is."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):  # (Linux; macOS names the first TCP_KEEPALIVE)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE)
        if hasattr(socket, "TCP_KEEPINTVL"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
    except OSError:
        pass


def _literal_family(host: str) -> int:
    """``AF_INET``/``AF_INET6`` when ``host`` is an IP address, else 0 (a name to resolve)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return 0
    return socket.AF_INET6 if address.version == 6 else socket.AF_INET


def _abort_all(connections: list[_Connection]) -> None:
    """Close ``connections`` (idle ones: nothing is in flight on them) and empty the list."""
    for connection in connections:
        connection.abort()
    connections.clear()


def _head_too_long() -> ProtocolError:
    return ProtocolError(f"upstream sent a response head over {_MAX_HEAD // 1024} KiB")


def _head_span(data: bytes, interim: int) -> tuple[int, int]:
    """Where the final head is in ``data``, a response's bytes from its first through at least
    the end of its head, after ``interim`` interim heads: (start, end).

    As llhttp parses them (tests/test_http_head.py holds it to that): it skips CR and LF before
    a status line, a 1xx head has no body, and every line ends in CRLF (a bare LF is refused,
    and so is an obs-fold continuation line), so a head ends at the first blank line, CRLFCRLF,
    after its start."""
    end = 0
    for _ in range(interim + 1):
        start = end
        while data.startswith(_CR_OR_LF, start):
            start += 1
        end = data.find(b"\r\n\r\n", start) + 4
        if end < 4:  # llhttp ended a head we cannot find: refuse it rather than misread it
            raise ProtocolError("upstream sent a response head that cannot be read")
    return start, end


_CR_OR_LF = (b"\r", b"\n")


class _Fields:
    """The httptools callback that reads a head's fields into a dict (see Response.headers)."""

    __slots__ = ("headers",)

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower().decode("latin-1")
        text = value.decode("latin-1")
        headers = self.headers
        headers[key] = headers[key] + ", " + text if key in headers else text


def _parse_head(head: bytes) -> dict[str, str]:
    """The fields of ``head`` (one response head, already accepted by the connection's parser)."""
    fields = _Fields()
    if head:
        # A fresh parser over the same bytes gives the fields exactly as the connection's would
        # have (a head with no body after it: the parser waits for more).  It cannot fail where
        # that one did not; if it ever did, the fields so far are the answer, not an exception
        # in a caller that reads an error's retry-after or a closing connection's framing.
        with contextlib.suppress(httptools.HttpParserError):
            httptools.HttpResponseParser(fields).feed_data(head)
    return fields.headers


def _head_for(method: str, url: str, headers: dict[str, str]) -> tuple[_Origin, bytes]:
    """The origin of ``url`` and the request head up to the ``content-length`` value."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamHTTPError(f"not an http(s) URL: {parts.scheme}://{parts.hostname or ''}")
    origin = _Origin(scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if ":" in parts.hostname and not parts.hostname.startswith("["):  # an IPv6 literal
        host = f"[{parts.hostname}]" + (f":{parts.port}" if parts.port else "")
    head = _request_head(method, target, host, headers, 0)
    return origin, head[: -len(b"content-length: 0\r\n\r\n")] + b"content-length: "


def _request_head(method: str, target: str, host: str, headers: dict[str, str], length: int) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"host: {host}"]
    names = {"host", "content-length", "transfer-encoding", "connection"}
    given = {k.lower() for k in headers}
    if "accept-encoding" not in given:
        lines.append("accept-encoding: identity")
    if "user-agent" not in given:
        lines.append("user-agent: llmbridge")
    for name, value in headers.items():
        if name.lower() in names:
            continue
        if any(c in name or c in value for c in "\r\n\0"):
            # Header injection: never send a line break from config or a client into a request.
            raise UpstreamHTTPError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}")
    lines.append(f"content-length: {length}")  # last: _head_for cuts it off
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
