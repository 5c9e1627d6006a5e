"""The floor under any Python gateway: relays that check nothing, for the gateway benchmark.

Issue 23's targets are ratios against the direct path (the load generator talking to the fast
upstream itself). A gateway is a second HTTP exchange in the middle: it reads the client's
request, sends one upstream, reads the answer and writes it back. What that costs a Python
process even when it does nothing else is the floor every Python gateway stands on, and these
two relays measure it in the same run as the gateway (``bench/gateway_bench.py`` starts them):

    python bench/floor_relay.py bare PORT UPSTREAM_PORT
    python bench/floor_relay.py uvicorn PORT UPSTREAM_PORT

- ``bare``: uvloop protocols and nothing else. A client's request (head and ``content-length``
  body, as the load generator sends it) goes upstream byte for byte on a kept-alive
  connection from a pool; the answer's bytes go back as they arrive, until the chunked
  body's last chunk. No parsing beyond finding the head's end and the body's length, no
  JSON, no headers rewritten, no checks: a lower bound, not a gateway.
- ``uvicorn``: the same upstream side behind uvicorn (httptools, uvloop, no access log) and an
  ASGI app of a dozen lines: what the HTTP server and the ASGI messages add to ``bare``.

Both serve only what the benchmark asks (``POST`` with a body, and ``GET /v1/models`` for the
readiness check, answered by the upstream too); anything malformed closes the connection.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable
from typing import Any

try:
    import uvloop
except ImportError:  # plain asyncio works too, only slower
    uvloop = None

_LENGTH = re.compile(rb"\r\n[Cc]ontent-[Ll]ength:\s*(\d+)")
_LAST_CHUNK = b"\r\n0\r\n\r\n"  # the end of a chunked body (an empty one too: the head ends in CRLF)
_CHUNKED = -(1 << 62)  # UpstreamConnection.remaining of a chunked answer
MAX_HEAD = 64 * 1024


class UpstreamConnection(asyncio.Protocol):
    """One kept-alive connection to the upstream: sends a request, hands each piece of the
    answer to ``on_data`` and calls ``on_end`` after the answer's last byte."""

    def __init__(self, pool: list[UpstreamConnection]) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.on_data: Callable[[bytes], None] | None = None
        self.on_end: Callable[[], None] | None = None
        self.tail = b""  # a chunked answer's last bytes so far
        self.remaining: int | None = None  # a content-length answer's bytes still to come (or _CHUNKED)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def start(self, request: bytes, on_data: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        self.on_data, self.on_end, self.tail, self.remaining = on_data, on_end, b"", None
        assert self.transport is not None
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        if self.on_data is None:
            return
        self.on_data(data)
        if self.remaining is None:  # the answer's first piece holds its head (the upstream writes it whole)
            head_end = data.find(b"\r\n\r\n")
            m = _LENGTH.search(data, 0, head_end) if head_end >= 0 else None
            self.remaining = int(m.group(1)) - (len(data) - head_end - 4) if m else _CHUNKED
        elif self.remaining != _CHUNKED:
            self.remaining -= len(data)
        if self.remaining == _CHUNKED:
            self.tail = (self.tail + data)[-len(_LAST_CHUNK) :]
            done = self.tail == _LAST_CHUNK
        else:
            done = self.remaining <= 0
        if done:
            end, self.on_data, self.on_end = self.on_end, None, None
            self.pool.append(self)
            assert end is not None
            end()

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool:
            self.pool.remove(self)
        self.transport = None


class Upstream:
    """Kept-alive connections to the upstream, taken and given back per request."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle: list[UpstreamConnection] = []

    def take_idle(self) -> UpstreamConnection | None:
        """A kept-alive connection still open, or None."""
        while self.idle:
            conn = self.idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def connection(self) -> UpstreamConnection:
        """An idle connection, or a new one."""
        conn = self.take_idle()
        if conn is not None:
            return conn
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: UpstreamConnection(self.idle), "127.0.0.1", self.port)
        return conn


class BareRelay(asyncio.Protocol):
    """A client connection of the ``bare`` relay: one request at a time, each relayed as is."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.buffer = b""
        self.busy = False
        self.transport: asyncio.Transport | None = None
        self.connecting: asyncio.Future[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            if len(self.buffer) > MAX_HEAD and self.transport is not None:
                self.transport.close()
            return
        m = _LENGTH.search(self.buffer, 0, head_end)
        size = head_end + 4 + (int(m.group(1)) if m else 0)
        if len(self.buffer) < size:
            return
        request, self.buffer = self.buffer[:size], self.buffer[size:]
        self.busy = True
        conn = self.upstream.take_idle()  # (without a coroutine when one is idle)
        if conn is not None:
            conn.start(request, self._write, self._done)
        else:
            self.connecting = asyncio.ensure_future(self._connect(request))  # (held: a task is weakly kept)

    async def _connect(self, request: bytes) -> None:
        try:
            conn = await self.upstream.connection()
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        conn.start(request, self._write, self._done)

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _done(self) -> None:
        self.busy = False
        if self.buffer:
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def asgi_relay(upstream: Upstream) -> Callable[..., Any]:
    """The ``uvicorn`` relay's app: the request's body re-sent upstream under a fixed head;
    the answer's chunk payloads relayed back as body messages (uvicorn frames them again)."""

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        head = b"%s %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (
            scope["method"].encode(),
            scope["raw_path"],
            len(body),
        )
        conn = await upstream.connection()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        conn.start(head + body, queue.put_nowait, lambda: queue.put_nowait(None))
        first = await queue.get()
        assert first is not None
        head_end = first.find(b"\r\n\r\n")
        status = int(first[9:12])
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        rest: bytes | None = first[head_end + 4 :]
        pending = b""
        while rest is not None:
            pending += rest
            # re-frame: the ASGI server frames the body itself, so pass the chunks' payloads
            payloads, pending = _unchunk(pending)
            if payloads:
                await send({"type": "http.response.body", "body": payloads, "more_body": True})
            rest = await queue.get()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def _unchunk(data: bytes) -> tuple[bytes, bytes]:
    """The payloads of the whole chunks at the start of ``data``, and what is left."""
    out, i = [], 0
    while True:
        line_end = data.find(b"\r\n", i)
        if line_end < 0:
            break
        size = int(data[i:line_end], 16)
        if size == 0:
            return b"".join(out), b""
        end = line_end + 2 + size
        if len(data) < end + 2:
            break
        out.append(data[line_end + 2 : end])
        i = end + 2
    return b"".join(out), data[i:]


async def serve_bare(port: int, upstream_port: int) -> None:
    upstream = Upstream(upstream_port)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: BareRelay(upstream), "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    mode, port, upstream_port = argv[0], int(argv[1]), int(argv[2])
    if mode == "bare":
        if uvloop is not None:
            uvloop.run(serve_bare(port, upstream_port))
        else:
            asyncio.run(serve_bare(port, upstream_port))
    elif mode == "uvicorn":
        import uvicorn

        uvicorn.run(asgi_relay(Upstream(upstream_port)), host="127.0.0.1", port=port, loop="uvloop",
                    http="httptools", access_log=False, log_level="warning", backlog=4096)  # fmt: skip
    else:
        raise SystemExit(f"unknown mode {mode!r}: bare or uvicorn")


if __name__ == "__main__":
    main(sys.argv[1:])
