"""The ASGI side of a request: the streaming response, and the one race against the client's disconnect.

A client may leave at any moment: while the gateway waits for an upstream to start (then
nothing has been sent: the work is dropped, and with it the upstream request) or while a
stream flows (then the body stops at once, not at its next write, which can be a keep-alive
interval away). Both are :func:`until_disconnected`: the work and a watch on ``receive``,
whichever ends first cancels the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.types import Receive, Scope, Send

__all__ = ["StreamResponse", "until_disconnected"]

T = TypeVar("T")


async def until_disconnected(receive: Receive, work: Coroutine[Any, Any, T]) -> tuple[bool, T | None]:
    """Run ``work`` until it ends or the client disconnects (``http.disconnect`` on
    ``receive``), cancelling the other. Returns ``(finished, result)``: ``finished`` is
    false when the client left first. ``work``'s exception is raised, except ``OSError``
    (a client gone mid-write), which counts as the client leaving."""

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watcher):
            if not t.done():
                t.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled():
        return False, None
    exc = task.exception()
    if isinstance(exc, OSError):
        return False, None
    if exc is not None:
        raise exc
    return True, task.result()


class StreamResponse:
    """An ASGI streaming response that stops at once when the client goes away.

    (Starlette's ``StreamingResponse`` only notices a disconnect at its next write, which
    can be a keep-alive interval away; this one listens for ``http.disconnect`` meanwhile.)

    ``on_close`` is awaited once the response is over, however it ended.  A body generator's
    own ``finally`` is not enough: a client that leaves while the head is still being sent
    (a full socket buffer) cancels the response before the generator ever started, and an
    unstarted generator's ``aclose`` runs none of its code -- the upstream would stay open and
    the request unsettled.  ``on_close`` must therefore be safe to call after the body's own
    cleanup ran.
    """

    def __init__(
        self,
        body: AsyncIterator[bytes],
        status: int = 200,
        headers: dict[str, str] | None = None,
        media_type: str = "text/event-stream",
        on_close: Callable[[], Awaitable[None]] | None = None,
    ):
        self.body = body
        self.on_close = on_close
        self.status = status
        self.headers = [
            (b"content-type", media_type.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        for k, v in (headers or {}).items():
            self.headers.append((k.lower().encode("latin-1"), v.encode("latin-1")))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def pump() -> None:
            await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
            async for chunk in self.body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await until_disconnected(receive, pump())
        finally:
            aclose = getattr(self.body, "aclose", None)  # an async generator's, if the body is one
            if aclose is not None:
                await aclose()
            if self.on_close is not None:
                await self.on_close()
