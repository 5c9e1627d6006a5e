"""A fault-injecting OpenAI-chat upstream on a real socket (127.0.0.1), for the routing tests and bench.

Each request is answered as ``mode`` says (a string, or a callable of the request's number
that returns one): ``ok`` (a short chat stream), ``slow`` (the same after ``slow_ms``), ``429``
(with ``retry-after: 1``), ``500``, ``400``, ``stall`` (says nothing until the client gives up)
or ``refuse`` (the listener closes for ``refuse_ms`` so that connecting fails with
ECONNREFUSED, and this request's connection is reset).  :meth:`FaultUpstream.down` /
:meth:`FaultUpstream.up` close and reopen the listener for good (connection refused until
then); down also resets the connections that have not sent a request yet (a gateway's spare
connections), as a server that went away would.  Every answer carries ``connection: close``,
so each request is a new connection and a closed listener is seen at once.  ``arrivals`` keeps
(monotonic time, mode) per request.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Callable

_HEAD = b'{"id":"chatcmpl-f","object":"chat.completion.chunk","created":1700000000,"model":"%s",'


def chat_stream(model: str, text: str = "hello from the upstream") -> bytes:
    head = _HEAD % model.encode()
    events = [
        head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
        head + b'"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}' % json.dumps(text).encode(),
        head + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        head + b'"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":4,"total_tokens":12}}',
        b"[DONE]",
    ]
    return b"".join(b"data: " + e + b"\n\n" for e in events)


class FaultUpstream:
    """See the module docstring.  ``start()`` binds a free port and serves from a thread."""

    def __init__(self, name: str, mode: str | Callable[[int], str] = "ok", *, slow_ms: float = 200,
                 refuse_ms: float = 30) -> None:  # fmt: skip
        self.name = name
        self.mode = mode
        self.slow_ms = slow_ms
        self.refuse_ms = refuse_ms
        self.count = 0
        self.arrivals: list[tuple[float, str]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._writers: set[asyncio.StreamWriter] = set()
        self._waiting: set[asyncio.StreamWriter] = set()  # connected, no request yet
        self._refusing = False  # down (or stopped): a connection served from now on is reset

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FaultUpstream:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._close(abort=True))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def down(self) -> None:
        """Close the listener (connecting is refused until :meth:`up`) and reset the
        connections that have not sent a request yet."""
        self._call(self._close(abort=False, idle=True))

    def up(self) -> None:
        self._call(self._listen())

    def arrivals_of(self, mode: str | None = None) -> list[float]:
        return [t for t, m in self.arrivals if mode is None or m == mode]

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(5)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._refusing = False
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True,
                                                      backlog=1024)  # fmt: skip

    async def _close(self, abort: bool, idle: bool = False) -> None:
        self._refusing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for w in list(self._writers if abort else self._waiting if idle else ()):
            w.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:  # accepted just before the listener closed: reset as the others were
            # (asyncio accepts, then makes the connection's protocol and this task later: a
            # gateway's spare connection opened in that window came through down() unreset)
            writer.transport.abort()
            return
        self._writers.add(writer)
        self._waiting.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self._waiting.discard(writer)
            m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
            body = await reader.readexactly(int(m.group(1))) if m else b""
            n = self.count
            self.count += 1
            mode = self.mode(n) if callable(self.mode) else self.mode
            self.arrivals.append((time.monotonic(), mode))
            model = json.loads(body).get("model", "m") if body else "m"
            if mode == "refuse":
                writer.transport.abort()
                await self._close(abort=False)
                await asyncio.sleep(self.refuse_ms / 1000)
                await self._listen()
                return
            if mode == "stall":
                await reader.read()  # until the gateway gives up and closes
                return
            if mode.isdigit():  # an error status
                error = json.dumps({"error": {"message": f"injected {mode}", "type": "server_error", "code": mode}})
                extra = b"retry-after: 1\r\n" if mode == "429" else b""
                writer.write(
                    b"HTTP/1.1 %s Injected\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                    b"connection: close\r\n%s\r\n%s" % (mode.encode(), len(error), extra, error.encode())
                )
                await writer.drain()
                return
            if mode == "slow":
                await asyncio.sleep(self.slow_ms / 1000)
            data = chat_stream(model, f"hello from {self.name}")
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (len(data), data)
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            self._waiting.discard(writer)
            writer.close()
