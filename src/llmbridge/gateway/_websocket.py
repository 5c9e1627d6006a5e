"""The WebSocket binding on ``/v1/stream`` (docs/llm-stream-bindings.md §3): the I/O shell.

:class:`~llmbridge.bindings.ServerSession` decides what each client message means; this
module runs the turns.  A turn is the same request the HTTP endpoint would get, answered
by the gateway's own streaming response, which is driven here as an ASGI app whose body
chunks are cut into events and sent one per text message.  So routing, fallback,
timeouts, relay and upstream cancellation are exactly those of the HTTP binding.

Back-pressure: the response is pumped only as fast as the sends complete, so what a
turn holds is bounded by the WebSocket library's write buffer; a send blocked longer than
``send_timeout`` (a client that does not read) closes the connection with 4408 and stops
the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from starlette.responses import Response
from starlette.types import Message, Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import errors, hub, sse
from ..bindings import (
    CLOSE_INTERNAL,
    CLOSE_SLOW_CLIENT,
    CLOSE_UNAUTHORIZED,
    SUBPROTOCOL,
    CancelTurn,
    Close,
    ServerSession,
    StartTurn,
    TurnError,
    turn_end,
)
from ..dialects import llm_stream
from ..dialects.base import json_encode
from . import _origins
from . import _replies as replies
from ._chat import Chat, Turn
from ._pipeline import Pipeline, Refused, request_id_of

if TYPE_CHECKING:
    from ._response import StreamResponse

__all__ = ["STANDARD", "WebSocketEndpoint"]

log = logging.getLogger("llmbridge.gateway")
STANDARD = "llm-stream"


class _SlowClient(Exception):
    pass


class _Cancelled(Exception):
    """The client's cancel, raised between two sends (never inside one)."""


class WebSocketEndpoint:
    """``/v1/stream`` over WebSocket, on the gateway's pipeline and chat entry point.

    ``send_timeout``: seconds one message may wait for the client to take it before the
    connection is closed with 4408.  ``max_message``: the cap on a client message (default:
    the gateway's ``max_body_bytes``), over it the connection closes with 1009.
    """

    def __init__(
        self, pipeline: Pipeline, chat: Chat, send_timeout: float = 30.0, max_message: int | None = None
    ) -> None:
        self.pipeline = pipeline
        self.chat = chat
        self.send_timeout = send_timeout
        self.max_message = max_message

    async def handle(self, ws: WebSocket) -> None:
        # A keyless gateway's WebSocket is not for other sites' pages (gateway/_origins.py).
        if not _origins.allowed(ws.headers, ws.url.scheme, self.pipeline.config.gateway):
            message = "this gateway takes WebSockets from its own pages only ([gateway] allowed_origins)"
            await self._deny(ws, hub.Error(message, "permission", "origin_not_allowed", 403))
            return
        try:  # static or virtual keys, as over HTTP; checked again at every turn
            await self.pipeline.authenticate(ws)
        except Refused as exc:
            await self._deny(ws, exc.error, exc.headers)
            return
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        cap = self.max_message or self.pipeline.config.gateway.max_body_bytes
        conn = _Connection(self, ws, ServerSession(cap))
        try:
            await conn.run()
        except (WebSocketDisconnect, _SlowClient):
            pass
        except Exception:  # a bug: close with 1011, never a traceback to the client
            log.exception("websocket session failed")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(CLOSE_INTERNAL, "internal gateway error"), 1)
        finally:
            await conn.stop()

    async def _deny(self, ws: WebSocket, error: hub.Error, headers: dict[str, str] | None = None) -> None:
        """Refuse the upgrade with ``error``'s HTTP status where the server can (ASGI denial
        response), else close 4401 / 4403 / 4429. Logged at INFO at most, never the key."""
        status = error.status or 401
        log.debug("websocket upgrade refused (%d %s)", status, error.type)
        if "websocket.http.response" in ws.scope.get("extensions", {}):
            await ws.send_denial_response(replies.error_response(STANDARD, error, headers))
            return
        await ws.accept()
        await ws.close(CLOSE_UNAUTHORIZED if status == 401 else 4000 + status, error.message[:120])  # (123 bytes max)


class _Connection:
    """One accepted connection: the receive loop, the turn task, serialized sends."""

    def __init__(self, endpoint: WebSocketEndpoint, ws: WebSocket, session: ServerSession) -> None:
        self.endpoint = endpoint
        self.ws = ws
        self.session = session
        self.turn: _Turn | None = None
        self._send_lock = asyncio.Lock()
        self._closed = asyncio.Event()  # set when a turn closed the connection (slow client)

    async def run(self) -> None:
        ws = self.ws
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is not None:
                actions = self.session.receive_text(text)
            else:
                actions = self.session.receive_bytes(message.get("bytes") or b"")
            for action in actions:
                if isinstance(action, StartTurn):
                    self.turn = _Turn(self, action.request)
                elif isinstance(action, CancelTurn):
                    if self.turn is not None:
                        await self.turn.cancel()
                elif isinstance(action, TurnError):
                    await self.send_all(turn_end(action.error, 0, started=False))
                elif isinstance(action, Close):
                    await self.stop()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(ws.close(action.code, action.reason), 1)
                    return

    async def _receive(self) -> Message:
        """The next client message, or a disconnect once a turn closed the connection."""
        if self._closed.is_set():
            return {"type": "websocket.disconnect"}
        recv = asyncio.ensure_future(self.ws.receive())
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait((recv, closed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (recv, closed):
                if not task.done():
                    task.cancel()
            await asyncio.gather(recv, closed, return_exceptions=True)
        if recv.done() and not recv.cancelled():
            return recv.result()
        return {"type": "websocket.disconnect"}

    async def send_all(self, texts: list[str]) -> None:
        """Send messages in order; raises :class:`_SlowClient` when one waits past ``send_timeout``."""
        async with self._send_lock:
            for text in texts:
                try:
                    await asyncio.wait_for(self.ws.send_text(text), self.endpoint.send_timeout)
                except TimeoutError:
                    await self._slow()

    async def _slow(self) -> None:
        log.info("websocket client did not read for %g s: closing", self.endpoint.send_timeout)
        self._closed.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(CLOSE_SLOW_CLIENT, "client did not read"), 1)
        raise _SlowClient

    async def stop(self) -> None:
        if self.turn is not None:
            await self.turn.abandon_and_wait()


class _Turn:
    """One request on the connection, streamed as messages; ends with ``stream.end``."""

    def __init__(self, conn: _Connection, request: dict[str, Any]) -> None:
        self.conn = conn
        self.request = request
        self.sent = 0  # events sent (the next seq, the gateway's encoder numbering from 0 without gaps)
        self.request_id: str | None = None
        self.done = False
        self.sending = False  # a message is being written: a cancel waits for it (seq stays exact)
        self.cancel_requested = False
        self._sse = sse.Decoder()
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        # A cancelled task ends here without a terminal message: cancel() sends it (or the
        # connection is going away and nobody is listening).
        try:
            await self._stream()
        except _SlowClient:
            self.done = True
        except _Cancelled:
            pass  # cancel() sends error + stream.end
        except Exception:
            log.exception("websocket turn failed")
            await self._end(hub.Error("internal gateway error", "api_error", status=500))

    async def _stream(self) -> None:
        """The pipeline's steps for one turn (the body was read and size-capped by the
        session); a refusal ends the turn with ``error`` + ``stream.end``."""
        endpoint = self.conn.endpoint
        p, chat = endpoint.pipeline, endpoint.chat
        try:
            # The key presented at the upgrade, checked anew: each turn is a request, so a key
            # revoked, rotated, expired or re-scoped stops at the next turn.
            who = await p.authenticate(self.conn.ws)
            body = p.check_object(self.request)
            hreq = chat.decode(body, STANDARD)
            hreq.stream = True
            self.request_id = request_id_of(hreq)
            turn = Turn(hreq, STANDARD, STANDARD, len(json_encode(body)), request_id=self.request_id)
            response = await chat.serve(turn, who, self.request_id or "")
        except Refused as exc:
            await self._end(exc.error)
            return
        except errors.RequestError as exc:
            await self._end(hub.Error(str(exc), exc.type, status=exc.status))
            return
        await self._pump(response)

    async def _pump(self, response: Response | StreamResponse) -> None:
        """Drive the gateway's HTTP response as an ASGI app and forward its events."""
        status = 200
        error_body: list[bytes] = []

        async def receive() -> Message:
            await asyncio.Event().wait()  # the turn is cancelled instead: no disconnect message needed
            return {"type": "http.disconnect"}  # pragma: no cover

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                if status != 200:
                    error_body.append(message.get("body", b""))
                else:
                    await self._forward(message.get("body", b""))

        scope: Scope = {"type": "http", "method": "POST", "path": "/v1/stream", "headers": [], "query_string": b""}
        await response(scope, receive, send)
        if status != 200:
            await self._end(llm_stream.decode_error(status, b"".join(error_body)))
        elif not self.done:
            await self._forward(b"", close=True)
            if not self.done:  # the stream ended without stream.end (cannot happen with the gateway's encoder)
                await self._end(hub.Error("stream ended before stream.end", "incomplete_stream", status=502))

    async def _forward(self, chunk: bytes, close: bool = False) -> None:
        events = self._sse.close() if close else self._sse.feed(chunk)
        if not events or self.done:
            return
        for event in events:  # one at a time: a cancel between two sends must know the next seq
            if self.cancel_requested:
                raise _Cancelled
            self.sending = True
            try:
                await self.conn.send_all([event.data])
            finally:
                self.sending = False
            self.sent += 1
            if self.cancel_requested and event.event not in ("error", "stream.end"):  # a stream ending anyway
                raise _Cancelled
        if events[-1].event == "stream.end":
            self.done = True
            self.conn.session.turn_over()

    async def _end(self, error: hub.Error) -> None:
        if self.done:
            return
        self.done = True
        await self.conn.send_all(turn_end(error, self.sent, started=self.sent > 0, request_id=self.request_id))
        self.conn.session.turn_over()

    async def cancel(self) -> None:
        """The client's cancel: stop the upstream, end the turn with ``error`` (cancelled) + ``stream.end``."""
        if self.done or self.task.done():
            return
        self.cancel_requested = True
        if not self.sending:  # waiting on the upstream: interrupt it (mid-send, _forward stops after it)
            self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        if not self.done:
            await self._end(hub.Error("cancelled by the client", "cancelled", "cancelled", 499))

    def abandon(self) -> None:
        if not self.task.done():
            self.task.cancel()

    async def abandon_and_wait(self) -> None:
        self.abandon()
        with contextlib.suppress(BaseException):
            await self.task
