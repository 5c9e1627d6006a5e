"""The client side of the WebSocket binding (docs/llm-stream-bindings.md §3): one connection, turns in order.

A :class:`WebSocketTransport` holds one connection (opened on the first turn) to
``ws(s)://host/v1/stream``.  :meth:`WebSocketTransport.turn` sends a request envelope and
yields the turn's event messages until ``stream.end``; closing the iterator early sends
the cancel message and reads the turn to its end, so the connection serves the next turn.
The blocking client uses the ``websockets`` package's sync client, the async one its
asyncio client.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ..bindings import SUBPROTOCOL, cancel_message
from ..errors import TransportError

__all__ = ["AsyncWebSocketTransport", "WebSocketTransport", "ws_url"]

_END = '"stream.end"'


def ws_url(base_url: str) -> str:
    """``http(s)://host[/v1]`` -> ``ws(s)://host/v1/stream``."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    if base.startswith("http"):
        base = "ws" + base[4:]
    return base + "/v1/stream"


def _is_end(text: str) -> bool:
    # cheap pre-check, then the real one: only an envelope whose type is stream.end ends a turn
    if _END not in text:
        return False
    import msgspec

    try:
        obj = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return False
    return type(obj) is dict and obj.get("type") == "stream.end"


def _headers(api_key: str | None, headers: dict[str, str]) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "accept")}
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    return out


class WebSocketTransport:
    """Blocking; one turn at a time (the binding has no turn ids)."""

    def __init__(self, base_url: str, api_key: str | None, headers: dict[str, str], timeout: float | None) -> None:
        self.url = ws_url(base_url)
        self.headers = _headers(api_key, headers)
        self.timeout = timeout
        self._ws: Any = None
        self._stack = contextlib.ExitStack()

    def _connect(self) -> Any:
        if self._ws is None:
            from websockets.sync.client import connect

            try:
                self._stack = contextlib.ExitStack()
                self._ws = self._stack.enter_context(
                    connect(
                        self.url,
                        subprotocols=[SUBPROTOCOL],
                        additional_headers=self.headers,
                        max_size=None,
                        open_timeout=self.timeout,
                    )
                )
            except Exception as exc:
                raise TransportError(f"cannot open {self.url}: {exc}") from exc
        return self._ws

    def turn(self, request_json: str) -> Iterator[str]:
        """The messages of one turn; closing the iterator early cancels the turn."""
        ws = self._connect()
        ended = False
        try:
            ws.send(request_json)
            while True:
                message = self._recv(ws)
                if isinstance(message, bytes):
                    message = message.decode("utf-8", "replace")
                ended = _is_end(message)  # before the yield: the caller may stop at the last message
                yield message
                if ended:
                    return
        finally:
            if not ended:
                self._cancel(ws)

    def _recv(self, ws: Any) -> Any:
        from websockets.exceptions import ConnectionClosed

        try:
            return ws.recv(timeout=self.timeout)
        except ConnectionClosed as exc:
            self._ws = None
            raise TransportError(f"the server closed the WebSocket: {exc}") from exc
        except TimeoutError as exc:
            self.close()
            raise TransportError("no WebSocket message within the timeout") from exc

    def _cancel(self, ws: Any) -> None:
        """Send cancel and read the turn to its end; a connection that cannot is dropped."""
        try:
            ws.send(cancel_message())
            while not _is_end(ws.recv(timeout=10)):
                pass
        except Exception:
            self.close()

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                self._stack.close()


class AsyncWebSocketTransport:
    """The asyncio twin of :class:`WebSocketTransport`."""

    def __init__(self, base_url: str, api_key: str | None, headers: dict[str, str], timeout: float | None) -> None:
        self.url = ws_url(base_url)
        self.headers = _headers(api_key, headers)
        self.timeout = timeout
        self._ws: Any = None

    async def _connect(self) -> Any:
        if self._ws is None:
            from websockets.asyncio.client import connect

            try:
                self._ws = await connect(
                    self.url,
                    subprotocols=[SUBPROTOCOL],
                    additional_headers=self.headers,
                    max_size=None,
                    open_timeout=self.timeout,
                )
            except Exception as exc:
                raise TransportError(f"cannot open {self.url}: {exc}") from exc
        return self._ws

    async def turn(self, request_json: str) -> AsyncIterator[str]:
        import asyncio

        from websockets.exceptions import ConnectionClosed

        ws = await self._connect()
        ended = False
        try:
            await ws.send(request_json)
            while True:
                try:
                    message = await asyncio.wait_for(ws.recv(), self.timeout)
                except ConnectionClosed as exc:
                    self._ws = None
                    raise TransportError(f"the server closed the WebSocket: {exc}") from exc
                except TimeoutError as exc:
                    await self.aclose()
                    raise TransportError("no WebSocket message within the timeout") from exc
                if isinstance(message, bytes):
                    message = message.decode("utf-8", "replace")
                ended = _is_end(message)  # before the yield: the caller may stop at the last message
                yield message
                if ended:
                    return
        finally:
            if not ended:
                try:
                    await ws.send(cancel_message())
                    while not _is_end(await asyncio.wait_for(ws.recv(), 10)):
                        pass
                except BaseException:
                    await self.aclose()

    async def aclose(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()
