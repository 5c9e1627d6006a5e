"""gateway/_server.py's GuardedCycle: the response heads it writes itself are uvicorn's, byte for byte."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from llmbridge.gateway._server import GuardedCycle
from tests.gateway_util import served_access_logger


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[Any, ...]] = []

    def info(self, msg: str, *args: Any) -> None:
        self.lines.append((msg, *args))


DEFAULTS = [(b"date", b"Thu, 01 Jan 2026 00:00:00 GMT"), (b"server", b"uvicorn")]


def _cycle(kind: type[RequestResponseCycle], **arguments: Any) -> Any:
    """A ``kind`` cycle: uvicorn's takes an event, GuardedCycle none (it is its own)."""
    if kind is not GuardedCycle:
        arguments["message_event"] = asyncio.Event()
    return kind(**arguments)


def _run(kind: type[RequestResponseCycle], messages: list[dict[str, Any]], method: str, keep_alive: bool) -> Any:
    async def go() -> Any:
        transport, log = _Transport(), _Log()
        scope = {"method": method, "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                 "query_string": b"", "http_version": "1.1",
                 "client": ("127.0.0.1", 5000), "root_path": ""}  # fmt: skip
        cycle = _cycle(
            kind,
            scope=scope,  # type: ignore[arg-type]
            transport=transport,  # type: ignore[arg-type]
            flow=FlowControl(transport),  # type: ignore[arg-type]
            logger=log,  # type: ignore[arg-type]
            access_logger=log,  # type: ignore[arg-type]
            access_log=True,
            default_headers=list(DEFAULTS),
            expect_100_continue=False,
            keep_alive=keep_alive,
            on_response=lambda: None,
        )
        error = None
        try:
            for message in messages:
                await cycle.send(message)
        except Exception as exc:  # (compared: the same error, or none)
            error = (type(exc), str(exc))
        await asyncio.sleep(0)  # (a head kept for its body's first chunk goes out by then)
        state = (cycle.response_started, cycle.response_complete, cycle.chunked_encoding, cycle.keep_alive)
        # the bytes on the wire: ours writes a head with the body's first chunk, uvicorn's apart
        return b"".join(transport.written), transport.closed, log.lines, state, error

    return asyncio.run(go())


STREAM = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"x-request-id", b"req_0123"),
    (b"server-timing", b"gateway;dur=0.3, upstream;dur=1.2"),
]
HEADS = [
    STREAM,
    (*STREAM, (b"retry-after", b"3\tseconds")),  # a tab is a value's character
    [*STREAM, (b"content-length", b"5")],  # a sized answer
    [*STREAM, (b"content-length", b"5"), (b"content-length", b"5")],  # uvicorn's own path: twice
    [*STREAM, (b"content-length", b" 5")],  # uvicorn's own path: not just digits
    [*STREAM, (b"Content-Type", b"text/plain")],  # not lower-case
    [*STREAM, (b"connection", b"close")],
    [*STREAM, (b"transfer-encoding", b"chunked")],
    [*STREAM, (b"x-upstream", b"a\r\nset-cookie: x=1")],  # header injection: refused
    [*STREAM, (b"x-upstream", b"a\nb")],
    [*STREAM, (b"x-upstream", b"a\x00b")],
    [*STREAM, (b"bad name", b"1")],
    [*STREAM, (b"bad:name", b"1")],
    [*STREAM, (b"", b"1")],
    [],
]


@pytest.mark.parametrize("whole", [False, True], ids=["in parts", "whole"])
@pytest.mark.parametrize("headers", HEADS)
@pytest.mark.parametrize("method", ["POST", "HEAD"])
@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize("status", [200, 204, 429, 599])
def test_guarded_cycle_writes_what_uvicorn_writes(headers, method, keep_alive, status, whole):
    body = b"" if method == "HEAD" or status == 204 or any(n == b"content-length" for n, _ in headers) else b"data"
    if any(n == b"content-length" for n, _ in headers):
        body = b"12345"
    messages = [
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body, "more_body": True},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]
    if whole:  # the body in one message (a sized answer's: head and body in one write)
        messages = [messages[0], {"type": "http.response.body", "body": body}]
    ours = _run(GuardedCycle, messages, method, keep_alive)
    assert ours == _run(RequestResponseCycle, messages, method, keep_alive)
    if headers is STREAM and method == "POST" and status != 204:  # (the usual answer: written, no error)
        written, _, log, _, error = ours
        assert error is None and written.startswith(b"HTTP/1.1 ")
        assert b"transfer-encoding: chunked\r\n\r\n4\r\ndata" in written
        assert log == [('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST", "/v1/chat/completions", "1.1", status)]


def test_guarded_cycle_refuses_messages_out_of_turn_as_uvicorn_does():
    cases = (
        lambda: [{"type": "http.response.body", "body": b"x"}],
        lambda: [{"type": "http.response.start", "status": 200, "headers": STREAM}] * 2,
        lambda: [{"type": "http.response.start", "status": 200, "headers": iter(STREAM)}],  # an iterator: uvicorn's
        lambda: [{"type": "http.response.start", "status": 700, "headers": STREAM}],
    )
    for messages in cases:
        assert _run(GuardedCycle, messages(), "POST", True) == _run(RequestResponseCycle, messages(), "POST", True)


def test_served_requests_go_through_the_guarded_cycle():
    import socket

    import uvicorn

    from llmbridge.gateway._server import GuardedConfig, GuardedHttpToolsProtocol

    kinds: list[type] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        kinds.append(type(send.__self__))
        headers = [(b"content-type", b"text/event-stream"), (b"x-request-id", b"r1")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": False})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = GuardedConfig(app, http=GuardedHttpToolsProtocol, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)

    async def go() -> bytes:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n" * 2)  # two, pipelined
        data = b""
        while data.count(b"0\r\n\r\n") < 2:
            data += await reader.read(65536)
        writer.close()
        server.should_exit = True
        await serving
        return data

    data = asyncio.run(go())
    assert kinds == [GuardedCycle, GuardedCycle]
    assert data.count(b"HTTP/1.1 200 OK\r\n") == 2 and b"x-request-id: r1\r\ntransfer-encoding: chunked\r\n\r\n" in data


def test_the_guarded_cycles_tables_refuse_what_uvicorns_patterns_refuse():
    from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE

    from llmbridge.gateway._server import _FAST_NAMES, _VALUES

    for b in range(256):
        one = bytes((b,))
        assert (one.translate(_VALUES) != one) == bool(HEADER_VALUE_RE.search(one))
        assert (one.translate(_FAST_NAMES) != one) == bool(HEADER_RE.search(one) or one.isupper())


# --------------------------------------------------------------------------- proxy headers


class _PeerTransport(_Transport):
    def __init__(self, peer: str | None) -> None:
        super().__init__()
        self.peer = peer

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return None if self.peer is None else (self.peer, 5000)
        return {"sockname": ("127.0.0.1", 8000)}.get(name, default)


def _scopes_seen(protocol_class: type, peer: str | None, heads: list[str], **options: Any) -> Any:
    """What the app sees (client, scheme, the request's own header) of each request of one
    keep-alive connection from ``peer``, served by ``protocol_class`` over uvicorn's loaded app."""
    import uvicorn
    from uvicorn.server import ServerState

    seen: list[tuple[Any, ...]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["client"], scope["scheme"], dict(scope["headers"]).get(b"x-n")))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})

    async def go() -> None:
        config = uvicorn.Config(app, lifespan="off", log_config=None, **options)
        protocol = protocol_class(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        transport = _PeerTransport(peer)
        protocol.connection_made(transport)
        for n, head in enumerate(heads):
            protocol.data_received(f"GET /x HTTP/1.1\r\nhost: a\r\nx-n: {n}\r\n{head}\r\n".encode())
            for _ in range(50):
                await asyncio.sleep(0)
        protocol.connection_lost(None)

    asyncio.run(go())
    assert len(seen) == len(heads)
    return seen


FORWARDED_HEADS = [
    "",
    "x-forwarded-for: 203.0.113.7\r\n",
    "X-Forwarded-For: 203.0.113.7:4711\r\n",  # (names arrive lower-cased: uvicorn's on_header)
    "x-forwarded-proto: https\r\n",
    "x-forwarded-proto: wss\r\n",
    "x-forwarded-for: 203.0.113.7\r\nx-forwarded-proto: https\r\n",
    "x-forwarded-for: 203.0.113.7, 10.1.2.3\r\nx-forwarded-for: 127.0.0.1\r\n",
    "x-forwarded-for: \r\n",
    "forwarded: for=203.0.113.7;proto=https\r\n",  # (RFC 7239: uvicorn reads neither)
    "x-forwarded-host: example.com\r\nx-real-ip: 203.0.113.7\r\n",
]


@pytest.mark.parametrize("peer", ["127.0.0.1", "::1", "10.1.2.3", None])
@pytest.mark.parametrize(
    "options",
    [{}, {"forwarded_allow_ips": "*"}, {"forwarded_allow_ips": "10.0.0.0/8"}, {"proxy_headers": False}],
    ids=["default", "all", "network", "off"],
)
def test_the_app_sees_the_client_and_scheme_uvicorns_middleware_gives(peer, options):
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    # every head, then each again after a forwarded one on the same connection (a scope is per request)
    heads = [*FORWARDED_HEADS, *(h for head in FORWARDED_HEADS[1:] for h in (head, ""))]
    ours = _scopes_seen(GuardedHttpToolsProtocol, peer, heads, **options)
    assert ours == _scopes_seen(HttpToolsProtocol, peer, heads, **options)
    if peer == "127.0.0.1" and not options:  # (the comparison is not vacuous)
        assert ours[1][0] == ("203.0.113.7", 0) and ours[3][1] == "https" and ours[0][0] == ("127.0.0.1", 5000)


def test_uvicorns_proxy_middleware_reads_only_the_names_the_protocol_looks_for():
    """The protocol runs the app without ProxyHeadersMiddleware for a request that has none of
    these names (or a peer it does not trust): should uvicorn's middleware read another
    header one day, this fails rather than the shortcut skipping it."""
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    from llmbridge.gateway._server import _FORWARDED

    code = ProxyHeadersMiddleware.__call__.__code__
    names = {c for c in code.co_consts if isinstance(c, bytes) and c.replace(b"-", b"").isalpha()}  # (not b", ")
    assert names == _FORWARDED
    assert "client" in code.co_consts and "headers" in code.co_consts and "trusted_hosts" in code.co_names


def test_guarded_cycle_send_is_awaited_as_uvicorns_is():
    """``GuardedCycle.send`` is a plain method returning an awaitable: a head it writes itself
    is kept for the body's first chunk and the awaitable returns at once (no loop turn), and a
    chunk of the body it frames is written by the call; anything else is uvicorn's coroutine,
    whose errors come when it is awaited, as before."""
    from llmbridge.gateway._server import _SENT

    async def go() -> None:
        transport, log = _Transport(), _Log()
        scope = {"method": "POST", "raw_path": b"/x", "query_string": b"", "http_version": "1.1",
                 "client": ("127.0.0.1", 5000)}  # fmt: skip
        cycle = GuardedCycle(scope=scope, transport=transport, flow=FlowControl(transport), logger=log,  # type: ignore[arg-type]
                             access_logger=log, access_log=True, default_headers=[],  # type: ignore[arg-type]
                             expect_100_continue=False, keep_alive=True,
                             on_response=lambda: None)  # fmt: skip
        sent = cycle.send({"type": "http.response.start", "status": 200, "headers": STREAM})
        assert sent is _SENT and not transport.written  # kept for the body's first chunk
        steps = sent.__await__()
        with pytest.raises(StopIteration):
            next(steps)  # done without suspending
        assert await sent is None
        assert cycle.send({"type": "http.response.body", "body": b"x", "more_body": True}) is _SENT
        assert len(transport.written) == 1 and transport.written[0].endswith(b"\r\n\r\n1\r\nx\r\n")  # with the head
        assert cycle.send({"type": "http.response.body", "body": b"y", "more_body": True}) is _SENT
        assert transport.written[1] == b"1\r\ny\r\n"  # written by the call
        await asyncio.sleep(0)  # (the loop's turn after the head: nothing left to write then)
        empty = cycle.send({"type": "http.response.body", "body": b"", "more_body": True})
        assert asyncio.iscoroutine(empty) and len(transport.written) == 2  # uvicorn's, run when awaited
        await empty
        wrong = cycle.send({"type": "http.response.start", "status": 200, "headers": []})
        with pytest.raises(RuntimeError, match=r"Expected ASGI message 'http\.response\.body'"):
            await wrong

    asyncio.run(go())


# --------------------------------------------------------------------------- access line


ACCESS_SCOPES = [
    {"client": ("127.0.0.1", 5000), "raw_path": b"/v1/chat/completions", "query_string": b""},
    {"client": ("::1", 5), "raw_path": b"/v1beta/models/m:x", "query_string": b"key=AIzaSecret&alt=sse"},
    {"client": None, "raw_path": b'/a"b/\xe9', "query_string": b"t=sk-configured-0123456789"},
    {"client": ("203.0.113.7", 0), "raw_path": b"/v1/messages", "query_string": b"", "http_version": "1.0"},
]


async def test_the_kept_access_line_is_uvicorns_logged_line():
    """AccessLine.served (the line kept by the scope's raw fields) writes what uvicorn's own
    ``access_logger.info(...)`` call writes through logging, masked the same way."""
    import io

    from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

    from llmbridge.gateway._accesslog import UVICORN_ACCESS_MESSAGE, AccessLine, access_logger
    from llmbridge.gateway._server import register_secrets

    register_secrets(["sk-configured-0123456789"])
    slow_out, fast_out = io.StringIO(), io.StringIO()
    slow, fast_logger = served_access_logger(slow_out), served_access_logger(fast_out)
    fast = access_logger(fast_logger)
    assert isinstance(fast, AccessLine)
    for _ in range(2):  # (the second time from the kept lines)
        for fields in ACCESS_SCOPES:
            for method in ("POST", "GET"):
                for status in (200, 429, 799):
                    scope = {"method": method, "http_version": "1.1", **fields}
                    args = (get_client_addr(scope), method, get_path_with_query_string(scope), scope["http_version"])
                    slow.info(UVICORN_ACCESS_MESSAGE, *args, status)
                    fast.served(scope, status)
    await asyncio.sleep(0)
    assert fast_out.getvalue() == slow_out.getvalue() and fast_out.getvalue().count("\n") == 2 * 4 * 2 * 3
    assert "AIzaSecret" not in fast_out.getvalue() and "sk-configured" not in fast_out.getvalue()
    for logger in (slow, fast_logger):  # (a level that drops the line: dropped by both)
        logger.setLevel(logging.WARNING)
        logger._cache.clear()  # (what setLevel does for the loggers logging's manager knows)
    slow.info(UVICORN_ACCESS_MESSAGE, "127.0.0.1:5000", "GET", "/v1/chat/completions", "1.1", 200)
    fast.served({"method": "GET", "http_version": "1.1", **ACCESS_SCOPES[0]}, 200)
    await asyncio.sleep(0)
    assert fast_out.getvalue() == slow_out.getvalue()


async def test_the_guarded_cycle_logs_uvicorns_access_line():
    """A head GuardedCycle writes itself logs, through the shipped access logger, the line
    uvicorn's cycle logs through it."""
    import io

    from llmbridge.gateway._accesslog import access_logger

    outs = []
    for kind in (GuardedCycle, RequestResponseCycle):
        out = io.StringIO()
        logger = access_logger(served_access_logger(out)) if kind is GuardedCycle else served_access_logger(out)
        for fields in ACCESS_SCOPES:
            transport = _Transport()
            scope = {"method": "POST", "path": "/", "http_version": "1.1", **fields}
            cycle = _cycle(kind, scope=scope, transport=transport, flow=FlowControl(transport), logger=_Log(),
                         access_logger=logger, access_log=True, default_headers=[],
                         expect_100_continue=False, keep_alive=True,
                         on_response=lambda: None)  # fmt: skip
            await cycle.send({"type": "http.response.start", "status": 200, "headers": STREAM})
        await asyncio.sleep(0)
        outs.append(out.getvalue())
    assert outs[0] == outs[1] and outs[0].count("\n") == len(ACCESS_SCOPES)


def test_the_guarded_cycle_calls_uvicorns_send_as_its_own():
    """GuardedCycle calls RequestResponseCycle.send by name for what it does not write itself
    (a super() per message costs more), and uvicorn's code sets its event through
    ``message_event``: the cycle must be uvicorn's, its event the cycle."""
    assert GuardedCycle.__mro__[1] is RequestResponseCycle
    cycle = _cycle(GuardedCycle, scope={}, transport=_Transport(), flow=None, logger=_Log(), access_logger=_Log(),
                   access_log=False, default_headers=[], expect_100_continue=False, keep_alive=True,
                   on_response=lambda: None)  # fmt: skip
    assert cycle.message_event is cycle
    cycle.message_event.set()
    assert cycle._pending
