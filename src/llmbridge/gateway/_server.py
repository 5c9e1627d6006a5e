"""Serving the gateway: uvicorn with client timeouts, a connection cap, redacted logs, workers.

What an operator in front of real users needs that uvicorn does not do by default:

- **Header-read timeout.** uvicorn's only client clock is the keep-alive timeout, armed
  *after* a response; a socket that sends nothing, or half a request head, or stops in the
  middle of a body, stays open for ever. :class:`GuardedHttpToolsProtocol` arms
  ``header_timeout`` when a connection opens and when a request begins, closes the
  connection when the head is not complete by then, and gives a body ``idle_timeout``
  between chunks.
- **Idle keep-alive timeout** (uvicorn's ``timeout_keep_alive``) and a **cap on open
  connections** (uvicorn's ``limit_concurrency``: past it, a request gets 503).
- **Open files.** Each connection is a file descriptor: the soft ``RLIMIT_NOFILE`` is raised
  to the hard limit at start (:func:`raise_open_files_limit`).
- **No credentials in logs.** uvicorn's access log prints the query string, where Gemini
  clients put ``?key=``. :class:`RedactSecrets`, on every handler of the logging config,
  masks credential-like query values, bearer tokens and every configured key.
- **Workers.** ``workers > 1`` runs that many processes on one socket (uvicorn's
  multiprocess supervisor); each builds its app from the config path through
  :func:`app_from_environment`.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import operator
import os
import re
import resource
from collections.abc import Awaitable, Callable, Generator, Iterable, MutableSet
from typing import Any
from urllib.parse import unquote

import httptools
import uvicorn
from starlette.applications import Starlette
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl, service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from . import _heap as heap
from ._accesslog import AccessLine, access_logger
from ._app import create_app
from ._response import Racing
from .config import Config, ConfigError, default_config, load

__all__ = [
    "CONFIG_ENV",
    "GuardedConfig",
    "GuardedCycle",
    "GuardedHttpToolsProtocol",
    "REDACTED",
    "RedactSecrets",
    "app_from_environment",
    "build_app",
    "freeze_startup_objects",
    "log_config",
    "raise_open_files_limit",
    "redact",
    "register_secrets",
    "serve",
]

log = logging.getLogger("llmbridge.gateway")

CONFIG_ENV = "LLMBRIDGE_CONFIG"  # the config path the workers build their app from ("" = default)


# --------------------------------------------------------------------------- header timeout


class GuardedConfig(uvicorn.Config):
    """uvicorn's config plus ``header_timeout`` (seconds to receive a whole request head).

    A module-level class, so the config pickles into worker processes."""

    # ``app`` and ``kwargs`` go to uvicorn.Config as they are (an ASGI app, a factory or an
    # import string; uvicorn's own options): its signature is the type.
    def __init__(self, app: Any, *, header_timeout: float = 10.0, **kwargs: Any) -> None:
        self.header_timeout = header_timeout
        super().__init__(app, **kwargs)


class GuardedCycle(RequestResponseCycle, Racing):
    """uvicorn's request/response cycle, its usual response head checked and written in a
    few C calls over all the headers, not a dozen Python steps per header.

    uvicorn searches each name and each value with a one-character-class pattern
    (``HEADER_RE``, ``HEADER_VALUE_RE``), then lower-cases and compares each name; with a
    streamed answer's ten headers that was most of its own work in sending a response. Here
    all the names together and all the values together are translated once each by a
    table that changes just the bytes uvicorn's patterns refuse (``bytes.translate``): a
    translation that differs holds one, so the head is checked just as strictly -- values
    from an upstream included, a line break anywhere refused as before. The shortcut only takes heads it can write as
    uvicorn would without looking at a name: every name lower-case already, none of the
    three uvicorn acts on (``content-length``, ``transfer-encoding``, ``connection``) but
    one ``content-length`` of digits (a sized answer), a method and status with a body.
    Anything else -- an invalid header too, whose error uvicorn raises -- is uvicorn's own
    :meth:`RequestResponseCycle.send`, and so is every body message of an answer whose head
    that wrote; ``tests/test_gateway_server.py`` compares the bytes both write.

    **A head goes out with the body's first bytes** (issue 23): kept until the next message,
    which usually follows before the task yields (the first chunk of a stream, the whole
    body of a sized answer), so the client is written to and woken once, not twice; a task
    that yields first has it written on the loop's next turn (:meth:`flush_head`).

    A :class:`~._response.Racing` ``receive`` owner: the disconnect race leaves its task here
    rather than watching ``receive`` (the protocol's ``connection_lost`` cancels it).

    **The request's side without an** ``asyncio.Event`` (issue 23). uvicorn's cycle makes an
    event per request, which its ``receive`` waits on (a coroutine inside a coroutine) and the
    protocol sets for each body chunk, the body's end, a lost connection and the response's
    end. Here that is a flag (:attr:`_pending`) and a future made only when ``receive``
    actually has to wait; uvicorn's code that still runs on a cycle (its ``send`` for the
    answers written its way, its ``connection_lost``) sets it through :attr:`message_event`,
    which is the cycle itself (:meth:`set`). The state a request starts in is class
    attributes, so a cycle's ``__init__`` stores only what differs per request. A chunked
    answer's body messages are written here too, as uvicorn frames them, without its
    coroutine (:meth:`send`). ``tests/test_gateway_protocol.py`` compares what both write,
    and what the app receives, over many requests and apps.
    """

    # where every request starts (uvicorn sets these per cycle; an instance's own value
    # shadows them once changed)
    disconnected = False
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0
    more_body = True  # the request's body has more to come
    body = b""  # type: ignore[assignment]  # (bytes, not uvicorn's bytearray: one chunk, the usual body, is handed over as it came)
    _pending = False  # something new for receive: a chunk, the body's end, the client or the answer done
    _waiter: asyncio.Future[None] | None = None  # what a waiting receive awaits (made only then)
    _chunks = False  # the head went out chunked, by send, for a method with a body: body messages framed here
    _head = b""  # that head, until the body's first chunk goes with it (or the loop's next turn)

    def __init__(
        self,
        scope: Any,
        transport: asyncio.Transport,
        flow: FlowControl,
        logger: logging.Logger,
        access_logger: logging.Logger,
        access_log: bool,
        default_headers: list[tuple[bytes, bytes]],
        expect_100_continue: bool,
        keep_alive: bool,
        on_response: Callable[[], None],
    ) -> None:
        """One request's cycle (uvicorn's arguments, less its event); nothing is sent."""
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.logger = logger
        self.access_logger = access_logger
        self.access_log = access_log
        self.default_headers = default_headers
        self.waiting_for_100_continue = expect_100_continue
        self.keep_alive = keep_alive
        self.on_response = on_response

    @property
    def message_event(self) -> GuardedCycle:  # type: ignore[override]  # (what uvicorn's code calls set() on)
        return self

    def set(self) -> None:
        """Something new for :meth:`receive` (uvicorn's ``message_event.set()``): wakes a
        waiting one."""
        self._pending = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():  # (a cancelled receive's)
                waiter.set_result(None)

    async def receive(self) -> Any:
        """The next ASGI message for the app (uvicorn's contract): the body so far and whether
        more is to come, waiting for some if nothing is new; ``http.disconnect`` once the
        client left or the answer is complete. Writes ``100 Continue`` first if the client
        asked for it and nothing was sent yet; resumes reading if it was paused."""
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(_CONTINUE)
            self.waiting_for_100_continue = False
        if not (self.disconnected or self.response_complete):
            if self.flow.read_paused:
                self.flow.resume_reading()
            if not self._pending:
                waiter = self._waiter
                if waiter is None or waiter.done():  # (another receive's, still waiting, is shared)
                    waiter = self._waiter = asyncio.get_running_loop().create_future()
                await waiter
            self._pending = False
            if not (self.disconnected or self.response_complete):
                body, self.body = self.body, b""
                return {"type": "http.request", "body": body, "more_body": self.more_body}
        return {"type": "http.disconnect"}

    def quiet(self) -> bool:
        """Whether :meth:`receive` would only wait until the client leaves: the whole body has
        been taken (nothing left to hand over), no ``100 Continue`` is owed, reading is not
        paused (``receive`` would resume it), and neither the client nor the response is
        done (``receive`` would answer ``http.disconnect`` at once)."""
        return not (
            self.more_body
            or self.body
            or self.waiting_for_100_continue
            or self.disconnected
            or self.response_complete
            or self.flow.read_paused
        )

    def send(self, message: Any) -> Awaitable[None]:  # type: ignore[override]  # (an awaitable, not a coroutine)
        """Send one ASGI message (uvicorn's contract: raises RuntimeError for a message out of
        turn or an invalid header, as uvicorn does, when awaited).

        Not a coroutine function: what it returns is awaited by the caller, as ASGI's ``await
        send(message)`` does -- uvicorn's own coroutine for every message it does not write
        itself (so a body message makes one coroutine, not one inside another), and
        :data:`_SENT`, done at once, for a head it wrote."""
        if self.response_started:
            if (
                not self._chunks
                or message["type"] != "http.response.body"
                or self.response_complete
                or self.disconnected
                or self.flow.write_paused
            ):
                if self._head:
                    if self._sized_whole(message):  # a sized answer's whole body, with its head
                        return _SENT
                    self.flush_head()
                return _uvicorn_send(self, message)
            # a body message of a chunked answer whose head this wrote: the bytes and the one
            # write uvicorn's send makes for it (an empty chunk that is not the last:
            # uvicorn's, which writes nothing in its own way)
            body = message.get("body", b"")
            # the head, if it has not gone out yet, goes with this (on every later chunk of the
            # stream: one attribute read, no store)
            head = self._head
            if head:
                self._head = b""
            if message.get("more_body", False):
                if not body:
                    if head:
                        self.transport.write(head)
                    return _uvicorn_send(self, message)
                self.transport.write(b"%b%x\r\n%b\r\n" % (head, len(body), body))
                return _SENT
            self.transport.write(b"%b%x\r\n%b\r\n0\r\n\r\n" % (head, len(body), body) if body else head + _LAST_CHUNK)
            self._complete()
            return _SENT
        if message["type"] != "http.response.start" or self.flow.write_paused:
            return _uvicorn_send(self, message)
        given = message.get("headers", ())
        if self.disconnected or not isinstance(given, list | tuple):  # (an iterator is read once: uvicorn's)
            return _uvicorn_send(self, message)
        headers = [*self.default_headers, *given]
        status_code = message["status"]
        status_line = STATUS_LINE.get(status_code)
        if (
            status_line is None
            or not set(map(len, headers)) <= _ONE_PAIR
            or self.scope["method"] == "HEAD"
            or status_code in (204, 304)
        ):
            return _uvicorn_send(self, message)
        names = list(map(_NAME, headers))
        if (
            (joined := b"".join(names)).translate(_FAST_NAMES) != joined  # a byte uvicorn refuses, or upper case
            or (joined := b"".join(map(_VALUE, headers))).translate(_VALUES) != joined  # a byte uvicorn refuses
        ):
            return _uvicorn_send(self, message)  # (which raises uvicorn's error for a bad name or value)
        length = None
        if not _ACTED_ON.isdisjoint(names):
            # one content-length of digits and nothing else uvicorn acts on: a sized answer,
            # whose length uvicorn's send keeps as this does (its body messages are uvicorn's,
            # but for a whole body in one: _sized_whole)
            if _ACTED_ON.intersection(names) != _LENGTH or names.count(b"content-length") != 1:
                return _uvicorn_send(self, message)
            length = headers[names.index(b"content-length")][1]
            if not (length.isdigit() and length.isascii()):
                return _uvicorn_send(self, message)
        self.response_started = True
        self.waiting_for_100_continue = False
        logger: Any = self.access_logger  # (an AccessLine in the shipped set-up: accesslog.access_logger)
        if self.access_log and type(logger) is AccessLine:  # the same line, kept
            logger.served(self.scope, status_code)
        elif self.access_log:  # as uvicorn logs it
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(self.scope),
                self.scope["method"],
                get_path_with_query_string(self.scope),
                self.scope["http_version"],
                status_code,
            )
        if length is not None:
            self.expected_content_length = int(length)
            self.chunked_encoding = False
            tail = b"\r\n" if self.keep_alive else _CLOSE
        else:  # neither a length nor a framing given: uvicorn frames the body in chunks
            self.chunked_encoding = self._chunks = True
            tail = _CHUNKED if self.keep_alive else _CLOSE_CHUNKED
        # The head waits for the body's first chunk, which usually follows before this task
        # yields: one write and one wake-up of the client, not two (issue 23). A task that
        # yields first has it written by the loop's next turn.
        if headers:
            self._head = b"".join((status_line, b"\r\n".join(map(_FIELD.join, headers)), b"\r\n", tail))
        else:
            self._head = status_line + tail
        asyncio.get_running_loop().call_soon(self.flush_head)
        return _SENT

    def _sized_whole(self, message: Any) -> bool:
        """Write a sized answer's kept head with ``message``, its whole body, as uvicorn's send
        would end it (complete, the connection closed unless kept alive); false, and nothing
        done, for any other message (a part, a body of another length: uvicorn's)."""
        if (
            message["type"] != "http.response.body"
            or message.get("more_body", False)
            or self._chunks
            or self.response_complete
            or self.disconnected
            or self.flow.write_paused
        ):
            return False
        body = message.get("body", b"")
        if len(body) != self.expected_content_length:
            return False
        head, self._head = self._head, b""
        self.transport.write(head + body)
        self.expected_content_length = 0
        self._complete()
        return True

    def _complete(self) -> None:
        """The answer's last bytes are written: as uvicorn's send ends a response (a waiting
        ``receive`` woken, the connection closed unless kept alive, the protocol told)."""
        self.response_complete = True
        self.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

    def flush_head(self) -> None:
        """Write the response head :meth:`send` kept for the body's first chunk, if it is
        still kept (nothing, once the connection is closing)."""
        head = self._head
        if head:
            self._head = b""
            if not self.transport.is_closing():
                self.transport.write(head)

    async def run_asgi(self, app: Any, tasks: MutableSet[asyncio.Task[None]] | None = None) -> None:
        """Run ``app`` for this request, in the task serving it (uvicorn's contract: an error
        is logged and answered 500 if nothing was sent yet, else the connection is closed; an
        app that returns a value, or without answering, is logged, and its connection closed
        or answered 500 as uvicorn does). The task leaves ``tasks`` (the server's) as it ends
        (no done callback: its scheduling cost about as much as the rest of starting a task)."""
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if self.response_started:
                self.flush_head()
                self.transport.close()
            else:
                await self.send_500_response()
        else:
            if result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.transport.close()
            elif self.disconnected:
                pass
            elif not self.response_started:
                self.logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete:
                self.logger.error("ASGI callable returned without completing response.")
                self.flush_head()
                self.transport.close()
        finally:
            self.on_response = _nothing  # (and the protocol is no longer held)
            if tasks is not None:
                # (a try costs nothing until it catches; contextlib.suppress is a context manager
                # per request)
                try:  # noqa: SIM105
                    tasks.discard(asyncio.current_task())  # type: ignore[arg-type]  # (this task: not None)
                except RuntimeError:  # closed by the garbage collector after its loop ended: no task
                    pass


_uvicorn_send = RequestResponseCycle.send  # (called directly: a super() per body message costs more)


def _nothing() -> None:
    """What a finished request's cycle calls when its answer completes (nobody waits then)."""


_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"


class _Sent:
    """An awaitable done at once (what is left of a message :meth:`GuardedCycle.send` wrote)."""

    __slots__ = ()

    # ``await`` calls this with no argument and gets an exhausted iterator: done, value None.
    # The empty tuple's own bound ``__iter__`` (C), not a method: no Python call per message
    # awaited (up to one per chunk of a stream).
    __await__: Callable[[], Generator[None, None, None]] = ().__iter__  # type: ignore[assignment]


_SENT = _Sent()


def _moving(pattern: re.Pattern[bytes], also: bytes = b"") -> bytes:
    """A ``bytes.translate`` table that keeps every byte but those ``pattern`` (a one-character
    pattern of uvicorn's) matches and those in ``also``, which it changes: a translation
    equals what it translated exactly when that holds none of them. (A table and nothing to
    delete is CPython's fast translation: one pass, no table made per call.)"""
    return bytes((b + 1) % 256 if pattern.match(bytes((b,))) or b in also else b for b in range(256))


# What a head's names and values may hold, from uvicorn's own patterns (the names: no upper
# case either, which uvicorn would lower: its own send does that).
_FAST_NAMES = _moving(HEADER_RE, also=b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_VALUES = _moving(HEADER_VALUE_RE)
_ACTED_ON = frozenset((b"content-length", b"transfer-encoding", b"connection"))  # names uvicorn's send reads
_ONE_PAIR = frozenset((2,))  # the length of every header (a name and a value)
_NAME, _VALUE = operator.itemgetter(0), operator.itemgetter(1)
_FIELD = b": "
_CHUNKED = b"transfer-encoding: chunked\r\n\r\n"
_CLOSE_CHUNKED = b"connection: close\r\n" + _CHUNKED  # (uvicorn's order)
_CLOSE = b"connection: close\r\n\r\n"
_LENGTH = frozenset((b"content-length",))


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that closes connections slow to send a request head.

    The clock starts when the connection opens and when each request's first byte arrives
    (a keep-alive connection between requests is under uvicorn's idle timeout instead), and
    stops when the head is complete. A request body then has the idle timeout between two
    of its chunks (a slow upload is fine, a stalled one is closed); the answer takes as long
    as it takes.

    **One timer per connection, not four per request** (issue 23). The head, body and
    keep-alive timeouts are one deadline (``_due``, and what it is for) that the parser's
    callbacks move by writing a number; a single timer handle wakes up, finds the deadline
    moved (or gone) and sleeps again, or closes the connection. The timer is always due no
    later than any deadline could be (it is scheduled at most the shortest timeout ahead),
    so a deadline set later never needs it re-armed. Before, a request armed and cancelled
    the header timer, the body timer (twice) and uvicorn's keep-alive timer.

    **uvicorn's proxy-headers middleware only where it can act** (issue 23). uvicorn wraps
    the app in :class:`ProxyHeadersMiddleware` (``proxy_headers``, on by default), one more
    coroutine every request's task passes through at each wake-up, and a loop over the
    headers. It changes a request's scope only when the connection's peer is a trusted
    proxy (``forwarded_allow_ips``) *and* the request has an ``x-forwarded-for`` or
    ``x-forwarded-proto`` header; every other request runs the app it wraps directly. The
    peer is the connection's, so it is asked once per connection; a trusted peer's request
    heads are looked through for the two names when complete, as the app is picked. A
    request that has them goes through uvicorn's middleware, as before.
    ``tests/test_gateway_server.py`` pins the names the middleware reads and compares the
    client and scheme both paths give the app.

    **Each request's work is ours** (issue 23): when a head is complete,
    :meth:`on_headers_complete` makes the scope in one go and a :class:`GuardedCycle` (no
    ``asyncio.Event``), and the body callbacks hand chunks to it directly; uvicorn's code
    still collects the head (``on_url``, ``on_header``), starts the task, upgrades a WebSocket,
    answers an invalid request, and owns the server (sockets, lifespan, signals, workers).
    ``tests/test_gateway_protocol.py`` compares this protocol with uvicorn's own over many
    requests and apps, byte for byte.
    """

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_timeout: float = getattr(config, "header_timeout", 10.0)
        self._shortest = min(self._header_timeout, self.timeout_keep_alive)
        self._due: float | None = None  # loop time the connection is closed at, unless moved
        self._due_for = _IDLE  # what the deadline is for (_HEAD, _BODY, _IDLE)
        self._clock: asyncio.TimerHandle | None = None  # the one timer, re-armed lazily
        # the shipped access log's lines without logging's machinery (accesslog.AccessLine)
        self.access_logger = access_logger(self.access_logger)  # type: ignore[assignment]
        # uvicorn's proxy-headers middleware, when it is the app uvicorn loaded (see above)
        self._proxy = self.app if type(self.app) is ProxyHeadersMiddleware else None
        self._proxied = False  # the peer is a proxy the middleware trusts
        self._upgrading = False  # this request's head asks for a WebSocket (uvicorn takes over)

    # -- the one deadline

    def _expect(self, what: int, seconds: float) -> None:
        now = self.loop.time()
        self._due, self._due_for = now + seconds, what
        if self._clock is None:
            self._clock = self.loop.call_at(now + self._shortest, self._tick)

    def _tick(self) -> None:
        due = self._due
        if due is None:  # nothing to wait for: the next _expect starts the clock again
            self._clock = None
            return
        now = self.loop.time()
        if now < due:
            self._clock = self.loop.call_at(min(due, now + self._shortest), self._tick)
            return
        self._clock = None
        self._due = None
        if self._due_for == _BODY and self.flow.read_paused:  # we stopped reading (the app is behind)
            self._expect(_BODY, self.timeout_keep_alive)
        elif not self.transport.is_closing():
            # a head or body that stalled, or an idle keep-alive connection: nothing is being
            # answered (a stalled body's app sees http.disconnect and answers nobody)
            self.transport.close()

    # -- uvicorn's callbacks, moving it

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        proxy = self._proxy
        if proxy is not None:
            # (what the middleware asks of each request's scope["client"], which is self.client)
            self._proxied = (self.client[0] if self.client else None) in proxy.trusted_hosts
            if not self._proxied:  # it would pass every request of this connection on as it is
                self.app = proxy.app
        self._expect(_HEAD, self._header_timeout)

    # A request's head, as the parser reports it: uvicorn's on_url and on_header collect the
    # target and the headers (lower-case names, values without trailing blanks); the scope is
    # made at once when the head is complete, with the cycle (GuardedCycle, no event).

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.expect_100_continue = False
        if self._due is None or self._due_for != _HEAD:  # (a new connection's clock keeps running)
            self._expect(_HEAD, self._header_timeout)

    def on_headers_complete(self) -> None:
        parser = self.parser
        method = parser.get_method().decode("ascii")
        http_version = parser.get_http_version()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": http_version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
            "method": method,
        }
        self.scope = scope  # type: ignore[assignment]
        self._upgrading = parser.should_upgrade() and self._should_upgrade()
        if self._upgrading:  # a WebSocket: data_received hands the connection to uvicorn's ws protocol
            return
        url = httptools.parse_url(self.url)
        path = url.path.decode("ascii")
        if "%" in path:
            path = unquote(path)
        root = self.root_path
        scope["path"] = root + path
        scope["raw_path"] = root.encode("ascii") + url.path if root else url.path
        scope["query_string"] = url.query or b""

        limit = self.limit_concurrency
        app: Any  # (uvicorn's loaded app, its middleware's, or its 503)
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        elif self._proxied:  # the middleware for a request that names a forwarded client or scheme
            proxy = self._proxy
            assert proxy is not None
            app = proxy.app
            for name, _ in self.headers:  # (a plain loop: cheaper here than map() or a set's isdisjoint)
                if name in _FORWARDED:
                    app = proxy
                    break
        else:
            app = self.app

        previous = self.cycle
        self.cycle = cycle = GuardedCycle(
            scope,
            self.transport,
            self.flow,
            self.logger,
            self.access_logger,
            self.access_log,
            self.server_state.default_headers,
            self.expect_100_continue,
            http_version != "1.0" and parser.should_keep_alive(),
            self.on_response_complete,
        )
        if previous is None or previous.response_complete:
            self._start_asgi_task(cycle, app)
        else:  # pipelined: it starts when the one before is answered (on_response_complete)
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))
        self._expect(_BODY, self.timeout_keep_alive)  # a body that stalls for idle_timeout closes it too

    def on_body(self, body: bytes) -> None:
        self._due = self.loop.time() + self.timeout_keep_alive
        cycle: GuardedCycle = self.cycle  # type: ignore[assignment]
        if self._upgrading or cycle.response_complete:  # (answered already: the rest is dropped)
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:  # the app is behind: stop reading until it takes some
            self.flow.pause_reading()
        cycle._pending = True  # (cycle.set(), its call only when a receive waits)
        if cycle._waiter is not None:
            cycle.set()

    def on_message_complete(self) -> None:
        self._due = None  # the answer takes as long as it takes
        cycle: GuardedCycle = self.cycle  # type: ignore[assignment]
        if self._upgrading or cycle.response_complete:
            return
        cycle.more_body = False
        cycle._pending = True  # (as in on_body)
        if cycle._waiter is not None:
            cycle.set()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:  # (a GuardedCycle: the pipeline's are typed uvicorn's)
        # uvicorn's, less the done callback (the task leaves the server's set itself, as it
        # ends: GuardedCycle.run_asgi). A task cancelled before its first step (only at a
        # shutdown past its grace period) stays in the set: nothing waits on it then.
        coroutine = cycle.run_asgi(app, self.tasks)
        if self.config.reset_contextvars:  # (uvicorn's opt-in: each request in a fresh context)
            task = self.loop.create_task(coroutine, context=contextvars.Context())
        else:
            task = self.loop.create_task(coroutine)
        self.tasks.add(task)

    def on_response_complete(self) -> None:
        # uvicorn's, with its keep-alive timer as our deadline
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        # (uvicorn drops its keep-alive timer here: ours is never armed while a request is
        # answered -- its deadline is for the head or the body then -- and uvicorn's own is
        # never armed at all)
        if self.flow.read_paused:
            self.flow.resume_reading()
        if self.pipeline:  # pipelined requests waiting: the next one starts
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._expect(_IDLE, self.timeout_keep_alive)

    def _unset_keepalive_if_required(self) -> None:
        # uvicorn's own timer, should anything still set it (nothing here does): looked at
        # before calling uvicorn's method, as this runs on every data_received and response
        if self.timeout_keep_alive_task is not None:
            super()._unset_keepalive_if_required()
        if self._due_for == _IDLE:
            self._due = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._due = None
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None
        super().connection_lost(exc)
        cycle = self.cycle
        # uvicorn marks the request being answered: where a watch's receive would now get
        # http.disconnect, the task racing against it is cancelled (_response.until_disconnected)
        if cycle is not None and cycle.disconnected:
            cycle.client_gone()  # type: ignore[attr-defined]  # (a GuardedCycle: uvicorn makes ours)


_HEAD, _BODY, _IDLE = 0, 1, 2  # what a connection's deadline is for
# the headers ProxyHeadersMiddleware reads (tests/test_gateway_server.py checks its code for them)
_FORWARDED = frozenset((b"x-forwarded-for", b"x-forwarded-proto"))


# --------------------------------------------------------------------------- open files


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (each connection is a file).

    Returns the (soft, hard) limits now in force; never raises (an unchanged limit is fine).
    """
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ValueError, OSError):  # a platform or container that refuses: keep what we have
        return resource.getrlimit(resource.RLIMIT_NOFILE)


# --------------------------------------------------------------------------- redaction

REDACTED = "***"
_SECRETS: set[str] = set()  # the configured keys of this process (gateway and upstream keys)
# query parameters and header-like "name: value" / "name=value" pairs that hold credentials
# (names that END in one of these words: "key", "api_key", "x-goog-api-key", "access_token",
# but not "max_tokens" or "input_tokens")
_SENSITIVE = r"[\w.-]*?(?:key|token|secret|password|passwd|auth|authorization|signature|credential)"
_QUERY = re.compile(rf"([?&;]{_SENSITIVE}=)[^&#\s\"']*", re.IGNORECASE)
_PAIR = re.compile(rf"(\b{_SENSITIVE}\s*[:=]\s*)(?:Bearer\s+)?[^\s&,;\"']+", re.IGNORECASE)
_ADDRESS = re.compile(r"[0-9A-Fa-f.:\[\]]*")  # an IPv4/IPv6 address and port, as uvicorn logs the client
_BEARER = re.compile(r"(\bBearer\s+)[^\s\"',;]+", re.IGNORECASE)


def register_secrets(values: Iterable[object]) -> None:
    """Add configured keys (strings) that must never appear in a log line of this process."""
    _SECRETS.update(v for v in values if isinstance(v, str) and len(v) >= 4)


def redact(text: str) -> str:
    """``text`` with credential-like query values, bearer tokens and registered keys masked."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "=" in text:
        text = _QUERY.sub(rf"\g<1>{REDACTED}", text)
    if ":" in text or "=" in text:
        text = _PAIR.sub(rf"\g<1>{REDACTED}", text)
    if "earer" in text:
        text = _BEARER.sub(rf"\g<1>{REDACTED}", text)
    return text


class RedactSecrets(logging.Filter):
    """A handler filter that masks credentials in every record (see :func:`redact`).

    uvicorn's access formatter reads ``record.args`` by position, so string arguments are
    redacted in place; other records' arguments are rendered into the message first.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            # (a client address, host:port, holds no credential: skipping it saves the
            # pattern scan its colon would cost on every request)
            record.args = tuple(
                redact(a) if isinstance(a, str) and not _ADDRESS.fullmatch(a) else a for a in record.args
            )
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: let logging report it as it does
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True

    @staticmethod
    def redact_access(text: str) -> str:
        """What :meth:`filter` does to a string argument of an access line (accesslog.AccessLine)."""
        return redact(text)


def log_config() -> dict[str, Any]:
    """uvicorn's logging config with :class:`RedactSecrets` on every handler, and the
    gateway's own logger (``llmbridge``, warnings and errors) writing through uvicorn's
    default handler, so its lines are redacted too."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_secrets"] = {"()": f"{__name__}.RedactSecrets"}
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("redact_secrets")
    # the access lines of one event-loop turn in one write, after the turn (accesslog.py)
    config["handlers"]["access"]["class"] = "llmbridge.gateway._accesslog.BatchedStreamHandler"
    if config["formatters"]["access"].get("()") == "uvicorn.logging.AccessFormatter":
        config["formatters"]["access"]["()"] = "llmbridge.gateway._accesslog.PlainAccessFormatter"
    # WARNING as before (the per-exchange INFO lines stay off), but through a filtered handler
    config["loggers"]["llmbridge"] = {"handlers": ["default"], "level": "WARNING", "propagate": False}
    return config


# --------------------------------------------------------------------------- apps and serving


def _secrets_of(config: Config) -> list[str]:
    keys = [*config.gateway.api_keys, config.gateway.ui_key or "", config.gateway.teams.master_key or ""]
    for upstream in config.upstreams.values():
        keys.append(upstream.api_key or "")
        keys += list(upstream.headers.values())  # an Authorization / api-key header from the config
    return keys


def build_app(config: Config) -> Starlette:
    """The gateway app for ``config``, its keys registered for log redaction in this
    process. Raises RuntimeError as create_app (a missing local extra)."""
    register_secrets(_secrets_of(config))
    heap.keep_large_buffers_on_heap()  # megabyte image events without page faults (gateway/_heap.py)
    return create_app(config)


def app_from_environment() -> Starlette:
    """The app factory each worker process calls (``uvicorn ... --factory``): the config
    path comes from the ``LLMBRIDGE_CONFIG`` environment variable ("" = the local model)."""
    path = os.environ.get(CONFIG_ENV)
    try:
        app = build_app(load(path) if path else default_config())
    except (ConfigError, RuntimeError) as exc:
        raise SystemExit(f"llmbridge serve: {exc}") from None
    freeze_startup_objects()
    return app


def freeze_startup_objects() -> None:
    """Move every object alive now (the modules, the app, its config) out of the cyclic
    garbage collector's sight, for the life of this serving process.

    They live as long as the process, yet each full collection walked all of them (~40,000
    objects, ~25 ms on this machine: a pause in every request being served, every few
    thousand requests). Only a process that serves until it exits does this: frozen objects
    are never collected, which a program building many apps (the tests) must not do.

    Also collects the youngest generation ten times less often (every 7,000 new container
    objects, not 700): a request makes a few hundred, nearly all freed by reference counting
    when it ends (no request leaves a cycle: ``tests/test_gateway_overhead.py``), so each young
    collection walked mostly the objects of the requests in flight -- about 1% of a request's
    instructions (callgrind), now a tenth of that. What a cycle holds is freed a little later."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


YOUNG_COLLECTION_EVERY = 7_000  # new container objects between two young collections (CPython: 700)


def serve(config_path: str | None = None, host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> None:
    """Run the gateway until SIGINT/SIGTERM. Exits with a one-line message (no traceback) on
    a bad config or a missing local extra; with ``workers > 1`` each worker process loads the
    config (and the embedded model, if the config uses it) itself."""
    try:
        config = load(config_path) if config_path else default_config()
        app = build_app(config) if workers <= 1 else None  # workers build their own
    except (ConfigError, RuntimeError) as exc:  # a bad config or a missing extra: say so, no traceback
        raise SystemExit(f"llmbridge serve: {exc}") from None
    if workers < 1:
        raise SystemExit("llmbridge serve: --workers must be at least 1")
    g = config.gateway
    soft, _ = raise_open_files_limit()
    if soft < g.max_connections + 64:
        log.warning("open-files limit %d is below max_connections %d", soft, g.max_connections)
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "info",
        "log_config": log_config(),
        "http": GuardedHttpToolsProtocol,
        "header_timeout": g.header_timeout,
        "timeout_keep_alive": g.idle_timeout,
        # uvicorn counts the connection asking too: +1 serves max_connections, 503s the one after
        "limit_concurrency": g.max_connections + 1,
    }
    if workers > 1:
        os.environ[CONFIG_ENV] = os.path.abspath(config_path) if config_path else ""
        target: str | Starlette | None = f"{__name__}:app_from_environment"
        options.update(factory=True, workers=workers)
    else:
        target = app
    uv_config = GuardedConfig(target, **options)
    if workers <= 1:
        freeze_startup_objects()  # (each worker freezes its own, in app_from_environment)
    if workers > 1:
        import inspect

        from uvicorn.supervisors import Multiprocess

        sock = uv_config.bind_socket()  # as uvicorn.run does: one socket, shared by the workers
        if "target" in inspect.signature(Multiprocess).parameters:  # older uvicorn: the supervisor takes the target
            Multiprocess(uv_config, target=uvicorn.Server(uv_config).run, sockets=[sock]).run()  # type: ignore[call-arg]
        else:
            Multiprocess(uv_config, sockets=[sock]).run()
    else:
        uvicorn.Server(uv_config).run()
