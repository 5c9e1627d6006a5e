"""gateway/_server.py's protocol and cycle own each request's work (the scope, the cycle, the
body handed to the app, the answer's framing) instead of uvicorn's code: compared here with
uvicorn's own ``HttpToolsProtocol`` over many requests (heads, bodies, pieces, pipelining,
HTTP/1.0, 100-continue, invalid requests, flow control, the concurrency cap, a WebSocket
upgrade) and many apps (streamed, sized, unread bodies, errors, waiting for the client to
leave): what the app sees and receives, what is written, paused and closed must be the same."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.gateway_util import RecordingTransport

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def _post(body: bytes = BODY, extra: str = "", path: str = "/v1/chat/completions", version: str = "1.1") -> bytes:
    head = f"POST {path} HTTP/{version}\r\nHost: a\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


_CHUNKED = b"POST /up HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
_WS = (
    b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)

# Each request: the pieces data_received is given, one loop turn apart.
REQUESTS: dict[str, list[bytes]] = {
    "post": [_post()],
    "post in pieces": _pieces(_post(), 7),
    "post, a piece a byte": _pieces(_post(), 1),
    "get": [b"GET /v1/models HTTP/1.1\r\nhost: a\r\n\r\n"],
    "head": [b"HEAD /v1/models HTTP/1.1\r\nhost: a\r\n\r\n"],
    "http/1.0": [b"GET /x HTTP/1.0\r\n\r\n"],
    "http/1.0 keep-alive": [b"GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"],
    "connection close": [_post(extra="Connection: close\r\n")],
    "chunked body": [_CHUNKED],
    "chunked body in pieces": _pieces(_CHUNKED, 5),
    "empty body": [_post(b"")],
    "100-continue": [_post(extra="Expect: 100-continue\r\n")[: -len(BODY)], BODY],
    "100-continue, upper case": [_post(extra="expect: 100-Continue \r\n")[: -len(BODY)], BODY],
    "query and escapes": [b"GET /v1beta/models/a%20b%2Fc:stream?alt=sse&key=x HTTP/1.1\r\nhost: a\r\n\r\n"],
    "absolute form": [b"GET http://example.com/x/y?z=1 HTTP/1.1\r\nhost: a\r\n\r\n"],
    "fragment": [b"GET /x?y=1#frag HTTP/1.1\r\nhost: a\r\n\r\n"],
    "asterisk": [b"OPTIONS * HTTP/1.1\r\nhost: a\r\n\r\n"],
    "header spacing and case": [
        b"POST /x HTTP/1.1\r\nHOST: a \r\nX-Odd:\t v \t\r\nX-Empty:\r\nX-Dup: 1\r\nx-dup: 2\r\n"
        b"content-length: 2\r\n\r\nhi"
    ],
    "latin-1 header value": [b"GET /x HTTP/1.1\r\nhost: a\r\nx-name: caf\xe9\r\n\r\n"],
    "pipelined": [_post() + b"GET /second HTTP/1.1\r\nhost: a\r\n\r\n" + _post(b"{}", path="/third")],
    "keep-alive, three": [_post(), b"GET /second HTTP/1.1\r\nhost: a\r\n\r\n", _post(b"{}", path="/third")],
    "large body": _pieces(_post(b"x" * 200_000), 16_384),
    "large body at once": [_post(b"y" * 150_000)],
    "invalid": [b"GARBAGE\r\n\r\n"],
    "invalid header": [b"GET /x HTTP/1.1\r\nbad header: 1\r\n\r\n"],
    "invalid after one": [_post() + b"NOT HTTP\r\n\r\n"],
    "h2c upgrade asked": [b"GET /x HTTP/1.1\r\nhost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n"],
    "websocket": [_WS],
    "half a head, then gone": [b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-le"],
    "half a body, then gone": [_post()[:-10]],
}


async def _read_all(receive: Any, seen: list[Any]) -> None:
    while True:
        message = await receive()
        seen.append(message)
        if message["type"] != "http.request" or not message.get("more_body"):
            return


def _app(kind: str, seen: list[Any]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            seen.append(("ws", scope["path"], await receive()))
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": 1000})
            return
        seen.append({k: v for k, v in scope.items() if k != "state"})
        seen.append(("state", scope["state"]))
        if kind == "stream":
            await _read_all(receive, seen)
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            for chunk, more in ((b"data: 1\n\n", True), (b"", True), (b"data: 2\n\n", True), (b"", False)):
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
        elif kind == "last chunk with data":
            await _read_all(receive, seen)
            await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
            await send({"type": "http.response.body", "body": b"a", "more_body": True})
            await send({"type": "http.response.body", "body": b"bc", "more_body": False})
        elif kind == "sized":
            await _read_all(receive, seen)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")]})  # fmt: skip
            await send({"type": "http.response.body", "body": b"he", "more_body": True})
            await send({"type": "http.response.body", "body": b"llo"})
        elif kind == "sized at once":  # (a JSON answer: Starlette's Response)
            await _read_all(receive, seen)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})  # fmt: skip
            await send({"type": "http.response.body", "body": b"{}"})
        elif kind == "sized, too short":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"3")]})
            await send({"type": "http.response.body", "body": b"{}"})
        elif kind == "unread":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            seen.append(await receive())
        elif kind == "read after the answer":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            await _read_all(receive, seen)
        elif kind == "no content":
            await _read_all(receive, seen)
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        elif kind == "not modified":
            await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", b'"1"')]})
            await send({"type": "http.response.body", "body": b""})
        elif kind == "raises":
            await _read_all(receive, seen)
            raise ValueError("bug")
        elif kind == "raises after the head":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise ValueError("bug")
        elif kind == "returns silent":
            await _read_all(receive, seen)
        elif kind == "returns half-way":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
        elif kind == "waits for the client":
            await _read_all(receive, seen)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"tick", "more_body": True})
            seen.append(await receive())
            await send({"type": "http.response.body", "body": b"late", "more_body": False})
        elif kind == "two readers":
            first = asyncio.ensure_future(receive())
            second = asyncio.ensure_future(receive())
            seen.append(await first)
            seen.append(await second)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        elif kind == "a reader waits while answering":
            await _read_all(receive, seen)
            reader = asyncio.ensure_future(receive())
            await asyncio.sleep(0)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            seen.append(await reader)  # (the answer's end wakes it)
        elif kind == "returns a value":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return 1  # type: ignore[return-value]  # (an app that does: uvicorn logs it, closes)
        elif kind == "cancelled":
            await _read_all(receive, seen)
            raise asyncio.CancelledError
        else:  # pragma: no cover
            raise AssertionError(kind)

    return app


APPS = ["stream", "last chunk with data", "sized", "sized at once", "sized, too short",
        "unread", "read after the answer", "no content", "not modified",
        "raises", "raises after the head", "returns silent", "returns half-way", "waits for the client", "two readers",
        "a reader waits while answering", "returns a value", "cancelled"]  # fmt: skip


async def _turns(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _served(protocol_class: type, pieces: list[bytes], kind: str, **options: Any) -> tuple[Any, ...]:
    import logging

    import uvicorn
    from uvicorn.server import ServerState

    seen: list[Any] = []
    errors: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(record.getMessage().splitlines()[0])

    catch = Catch()
    logging.getLogger("uvicorn.error").addHandler(catch)

    async def go() -> tuple[Any, ...]:
        config = uvicorn.Config(_app(kind, seen), lifespan="off", log_config=None, access_log=False, **options)
        state = ServerState()
        protocol = protocol_class(config, state, {"shared": 1}, _loop=asyncio.get_running_loop())
        transport = RecordingTransport()
        protocol.connection_made(transport)
        for piece in pieces:
            if transport.protocol is not None:  # (a WebSocket: uvicorn's ws protocol has it now)
                transport.protocol.data_received(piece)
            else:
                protocol.data_received(piece)
            await _turns()
        await _turns()
        seen.append("the connection is lost")
        (transport.protocol or protocol).connection_lost(None)
        await _turns()
        return transport.on_the_wire(), seen, errors, state.total_requests, len(state.tasks)

    try:
        return asyncio.run(go())
    finally:
        logging.getLogger("uvicorn.error").removeHandler(catch)


@pytest.mark.parametrize("kind", APPS)
@pytest.mark.parametrize("request_name", list(REQUESTS))
def test_the_protocol_serves_as_uvicorns_does(request_name, kind):
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    pieces = REQUESTS[request_name]
    ours = _served(GuardedHttpToolsProtocol, pieces, kind)
    theirs = _served(HttpToolsProtocol, pieces, kind)
    assert ours == theirs


@pytest.mark.parametrize("options", [{"root_path": "/api"}, {"limit_concurrency": 1}, {"proxy_headers": False}],
                         ids=["root path", "at the cap", "no proxy headers"])  # fmt: skip
@pytest.mark.parametrize("request_name", ["post", "query and escapes", "pipelined", "keep-alive, three"])
def test_the_protocol_serves_as_uvicorns_does_with_options(request_name, options):
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    pieces = REQUESTS[request_name]
    for kind in ("stream", "sized"):
        assert _served(GuardedHttpToolsProtocol, pieces, kind, **options) == _served(
            HttpToolsProtocol, pieces, kind, **options
        )


def test_the_comparison_sees_what_matters():
    """Not vacuous: the app saw the request, the answer was written, a pipelined request
    waited (reading paused), a large body paused and resumed reading, a WebSocket changed
    protocol."""
    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    events, seen, errors, total, tasks = _served(GuardedHttpToolsProtocol, REQUESTS["post"], "stream")
    assert seen[0]["path"] == "/v1/chat/completions" and seen[2]["body"] == BODY and total == 1 and tasks == 0
    assert events[0].startswith(b"HTTP/1.1 200 OK\r\n") and events[0].endswith(b"0\r\n\r\n") and events[1:] == ["close"]
    events, seen, *_ = _served(GuardedHttpToolsProtocol, REQUESTS["pipelined"], "stream")
    assert "pause" in events and sum(e.count(b"HTTP/1.1 200") for e in events if isinstance(e, bytes)) == 3
    events, *_ = _served(GuardedHttpToolsProtocol, REQUESTS["large body at once"], "stream")
    assert "pause" in events and "resume" in events
    events, seen, *_ = _served(GuardedHttpToolsProtocol, REQUESTS["websocket"], "stream")
    assert events[0][0] == "protocol" and events[1].startswith(b"HTTP/1.1 101 ") and seen[0][0] == "ws"
    _, seen, *_ = _served(GuardedHttpToolsProtocol, REQUESTS["100-continue"], "stream")
    assert seen[2]["body"] == BODY
    events, _, errors, *_ = _served(GuardedHttpToolsProtocol, REQUESTS["post"], "raises")
    assert errors == ["Exception in ASGI application"] and events[0].startswith(b"HTTP/1.1 500")


@pytest.mark.parametrize("request_name", ["post", "pipelined", "keep-alive, three", "http/1.0", "chunked body"])
def test_no_keep_alive_deadline_is_armed_while_a_request_is_answered(request_name, monkeypatch):
    """on_response_complete does not drop a keep-alive deadline (uvicorn's does): none can be
    armed then -- ours is for the head or the body while a request is answered, uvicorn's own
    timer is never armed. Checked at every answer's end, then the idle deadline after it."""
    from llmbridge.gateway import _server
    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    ends: list[tuple[Any, ...]] = []
    complete = GuardedHttpToolsProtocol.on_response_complete

    def on_response_complete(self: Any) -> None:
        ends.append((self._due_for == _server._IDLE and self._due is not None, self.timeout_keep_alive_task))
        complete(self)
        if not self.transport.is_closing() and not self.pipeline:
            assert self._due_for == _server._IDLE and self._due is not None  # (the idle deadline, armed)

    monkeypatch.setattr(GuardedHttpToolsProtocol, "on_response_complete", on_response_complete)
    _served(GuardedHttpToolsProtocol, REQUESTS[request_name], "stream")
    assert ends and all(end == (False, None) for end in ends)


def _answered(app: Any, transport: RecordingTransport | None = None) -> list[Any]:
    """The transport's events for one POST answered by ``app``."""
    import uvicorn
    from uvicorn.server import ServerState

    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    recording = RecordingTransport() if transport is None else transport

    async def go() -> list[Any]:
        config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False)
        protocol = GuardedHttpToolsProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(recording)
        protocol.data_received(_post())
        await _turns()
        protocol.connection_lost(None)
        await _turns()
        return recording.events

    return asyncio.run(go())


_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _streaming_app(between: Any = None) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        if between is not None:
            await between()
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def test_a_streamed_answers_head_goes_out_with_its_first_chunk():
    """One write and one wake-up of the client for the head and the first event, not two
    (the first token's path, issue 23)."""
    events = _answered(_streaming_app())
    assert events[0] == _HEAD + b"9\r\ndata: 1\n\n\r\n"
    assert events[1] == b"0\r\n\r\n"


def test_a_head_whose_body_is_late_goes_out_on_the_loops_next_turn():
    """An app that waits between its head and its body (a slow upstream's stream, whose
    keep-alives come later) has its head written by the loop's next turn, not held."""
    transport = RecordingTransport()
    seen: list[list[Any]] = []

    async def between() -> None:
        seen.append(list(transport.events))  # (kept while the app has not yielded)
        await asyncio.sleep(0)
        seen.append(list(transport.events))

    events = _answered(_streaming_app(between), transport)
    assert seen == [[], [_HEAD]]
    assert events[:2] == [_HEAD, b"9\r\ndata: 1\n\n\r\n"]


def test_a_head_then_a_failure_still_writes_the_head_before_closing():
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        raise ValueError("bug")

    assert _answered(app)[:2] == [_HEAD, "close"]


def test_a_sized_answers_head_goes_out_with_its_body():
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    events = _answered(app)
    assert events[0] == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
