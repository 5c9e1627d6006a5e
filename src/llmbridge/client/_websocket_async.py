"""The asyncio WebSocket transport (docs/llm-stream-bindings.md §3): one connection, turns in order.

This module is the source of both transports: ``_websocket_sync.py`` is generated from it by
``scripts/unasync.py`` (``make lint`` fails when the two drift).  Edit this file, then run
``python scripts/unasync.py``.
"""

from __future__ import annotations

import asyncio  # unasync: async-only
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ..bindings import SUBPROTOCOL, cancel_message
from ..errors import TransportError
from ._websocket import is_end, ws_headers, ws_url

__all__ = ["AsyncWebSocketTransport"]

# How long the cancel of an abandoned turn may take to reach the turn's end before the
# connection is dropped instead: the server answers a cancel at its next event boundary.
CANCEL_TIMEOUT = 10.0


class AsyncWebSocketTransport:
    """One connection to ``ws(s)://host/v1/stream``, opened on the first turn; one turn at a
    time (the binding has no turn ids).

    :meth:`turn` sends a request envelope and yields the turn's messages up to ``stream.end``.
    Closing its iterator early sends the cancel message and reads the turn to its end, so the
    connection serves the next turn; a connection that fails, times out or cannot finish a
    cancel is closed, and the next turn opens a new one.
    """

    def __init__(self, base_url: str, api_key: str | None, headers: dict[str, str], timeout: float | None) -> None:
        self.url = ws_url(base_url)
        self.headers = ws_headers(api_key, headers)
        self.timeout = timeout
        self._ws: Any = None
        # The connection is entered as a context manager (websockets deprecates any other use
        # of its sync client); the stack holds it open between turns.
        self._stack = contextlib.AsyncExitStack()

    async def _connect(self) -> Any:
        if self._ws is None:
            from websockets.asyncio.client import connect
            from websockets.typing import Subprotocol

            try:
                self._ws = await self._stack.enter_async_context(
                    connect(
                        self.url,
                        subprotocols=[Subprotocol(SUBPROTOCOL)],
                        additional_headers=self.headers,
                        max_size=None,
                        open_timeout=self.timeout,
                    )
                )
            except Exception as exc:
                raise TransportError(f"cannot open {self.url}: {exc}") from exc
        return self._ws

    async def turn(self, request_json: str) -> AsyncIterator[str]:
        """The messages of one turn, ``stream.end`` last.

        Raises :class:`TransportError` when the connection cannot be opened, the server closes
        it, or no message comes within the timeout (the connection is then closed).
        """
        ws = await self._connect()
        ended = False
        try:
            await ws.send(request_json)
            while True:
                message = await self._recv(ws, self.timeout)
                ended = is_end(message)  # before the yield: the caller may stop at the last message
                yield message
                if ended:
                    return
        finally:
            if not ended:
                await self._cancel(ws)

    async def _recv(self, ws: Any, timeout: float | None) -> str:
        from websockets.exceptions import ConnectionClosed

        try:
            message = await asyncio.wait_for(ws.recv(), timeout)  # unasync: async-only
            # unasync: sync-only: message = ws.recv(timeout=timeout)
        except ConnectionClosed as exc:
            await self.aclose()  # frees what the stack holds; the next turn opens a new connection
            raise TransportError(f"the server closed the WebSocket: {exc}") from exc
        except TimeoutError as exc:
            await self.aclose()
            raise TransportError("no WebSocket message within the timeout") from exc
        # The gateway sends text frames; a binary one is read as UTF-8 rather than refused.
        return message.decode("utf-8", "replace") if isinstance(message, bytes) else message

    async def _cancel(self, ws: Any) -> None:
        """Send cancel and read the turn to its end; a connection that cannot is closed.

        Only a finished cancel keeps the connection: after a failure, or an interruption
        (task cancelled, KeyboardInterrupt, which propagates), its state is unknown.
        """
        finished = False
        try:
            await ws.send(cancel_message())
            while not is_end(await self._recv(ws, CANCEL_TIMEOUT)):
                pass
            finished = True
        except Exception:
            pass  # the turn was abandoned already; closing the connection is the whole remedy
        finally:
            if not finished:
                await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; the next turn opens a new one."""
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await self._stack.aclose()
