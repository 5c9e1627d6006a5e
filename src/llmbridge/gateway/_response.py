"""The ASGI side of a request: the streaming response, and the one race against the client's disconnect.

A client may leave at any moment: while the gateway waits for an upstream to start (then
nothing has been sent: the work is dropped, and with it the upstream request) or while a
stream flows (then the body stops at once, not at its next write, which can be a keep-alive
interval away). Both are :func:`until_disconnected`: the work, and a watch on ``receive``
that cancels it when the client leaves.

Cheap for the common case (issue 23): the work runs in the task serving the request (no
task of its own), and the watch on ``receive`` is a task only once the work has taken
longer than :data:`WATCH_AFTER` — a short answer ends before that and costs one timer
handle, not two tasks and an ``asyncio.wait``. A client gone earlier is still seen: the
watch, once started, finds ``http.disconnect`` waiting on ``receive`` at once.

Cheaper still when ``receive`` is the server's own (:class:`Racing`, gateway/_server.py's
request cycle): the server learns of a lost connection itself, so the race just leaves the
task with the cycle, which cancels it then -- no timer, no watch (a timer's arming and
cancelling was about half of a race's cost). Only while a watch would have nothing to do but
wait for ``http.disconnect``: anything else (a body still to read, a ``100 Continue`` owed,
reading paused) and any other ``receive`` gets the watch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.types import Receive, Scope, Send

__all__ = ["STARTED", "WATCH_AFTER", "Racing", "StreamResponse", "until_disconnected"]

T = TypeVar("T")

STARTED = "llmbridge.started"  # scope key: time.perf_counter() when the request reached the app (hotpath.py)

# Seconds of work before the disconnect watch becomes a task: short answers never start one.
WATCH_AFTER = 0.02


class _Watch:
    """Watches ``receive`` for ``http.disconnect`` and cancels ``task`` while it is inside the work."""

    __slots__ = ("_handle", "_receive", "_task", "_watcher", "active", "gone")

    def __init__(self, receive: Receive, task: asyncio.Task[Any], delay: float) -> None:
        self._receive = receive
        self._task = task
        self._watcher: asyncio.Task[None] | None = None
        self.active = True  # the task is inside the work: a cancel lands there
        self.gone = False
        self._handle: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._handle = None
        if self.active:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if self.active:
            self.gone = True
            self._task.cancel()

    def stop(self) -> asyncio.Task[None] | None:
        """Stop watching; the watch task, cancelled, when one had started: the caller awaits
        it (:meth:`close`), so that no ``http.disconnect`` it took is lost in the middle.
        Without one (a short answer) there is nothing to await, and no coroutine to make."""
        self.active = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        watcher = self._watcher
        if watcher is not None:
            self._watcher = None
            if not watcher.done():
                watcher.cancel()
        return watcher

    async def close(self) -> None:
        watcher = self.stop()
        if watcher is not None:
            await asyncio.gather(watcher, return_exceptions=True)


class Racing:
    """What a ``receive``'s owner (the server's request cycle) does to spare the race its watch.

    The owner knows when its client is gone; while a race runs over its ``receive``,
    :func:`until_disconnected` leaves the racing task in :attr:`racing`, and the owner calls
    :meth:`client_gone` when the connection is lost (not from inside that task)."""

    racing: asyncio.Task[Any] | None = None  # the task to cancel when the client leaves

    def quiet(self) -> bool:
        """Whether a watch on ``receive`` would do nothing but wait for the client to leave
        (then the race may leave its task here instead). The owner's to say; no by default."""
        return False

    def client_gone(self) -> None:
        """The client has left: cancel the racing task, if any (and forget it, which tells the
        race the cancellation is its own)."""
        task = self.racing
        if task is not None:
            self.racing = None
            task.cancel()


async def until_disconnected(receive: Receive, work: Coroutine[Any, Any, T]) -> tuple[bool, T | None]:
    """Run ``work`` until it ends or the client disconnects (``http.disconnect`` on
    ``receive``), whichever comes first. Returns ``(finished, result)``: ``finished`` is
    false when the client left first (the work was cancelled). ``work``'s exception is
    raised, except ``OSError`` (a client gone mid-write), which counts as the client leaving.

    ``work`` runs in the calling task; the watch cancels that task while it is inside
    ``work`` (and takes its own cancellation back), so the caller sees a return, not a
    ``CancelledError``.

    With a :class:`Racing` ``receive`` that is :meth:`~Racing.quiet` and not racing already,
    no watch: the task is left with the owner for the time of the work."""
    task = asyncio.current_task()
    assert task is not None
    race = _begin(receive, task)
    try:
        result = await work
    except BaseException as exc:
        if await _failed(race, task, exc):
            return False, None
        raise
    watcher = _finished(race, task)
    if watcher is not None:
        await asyncio.gather(watcher, return_exceptions=True)
    return True, result


# The race's three steps, shared by until_disconnected and StreamResponse (whose work runs in
# its own frame: a coroutine less to resume at each of a stream's wake-ups).


def _begin(receive: Receive, task: asyncio.Task[Any]) -> Racing | _Watch:
    """The race over ``receive`` for ``task``, started: the receive's owner holding the task
    (a quiet :class:`Racing` not racing already) or else a watch."""
    owner = getattr(receive, "__self__", None)  # (a bound method's object: the server's cycle, or not)
    if isinstance(owner, Racing) and owner.racing is None and owner.quiet():
        owner.racing = task
        return owner
    return _Watch(receive, task, WATCH_AFTER)


def _finished(race: Racing | _Watch, task: asyncio.Task[Any]) -> asyncio.Task[None] | None:
    """The work returned: the race is stopped, and a cancellation of ``task`` it made (which
    the work swallowed) taken back. Returns a watch's task, cancelled, for the caller to
    await (:meth:`_Watch.stop`), or None."""
    if type(race) is _Watch:
        race.active = False
        if race.gone:
            task.uncancel()
        return race.stop()
    assert isinstance(race, Racing)
    if race.racing is task:
        race.racing = None
    else:  # the owner cancelled the task (the client left), and the work finished anyway
        task.uncancel()
    return None


async def _failed(race: Racing | _Watch, task: asyncio.Task[Any], exc: BaseException) -> bool:
    """The work raised ``exc``: the race is stopped (a watch's task awaited). Returns whether
    the client left first -- the race's own cancellation (taken back, and nobody else's), or
    an ``OSError`` (a write to a gone client) -- so that ``exc`` is not to be raised."""
    if type(race) is _Watch:
        race.active = False
        gone = race.gone
    else:
        assert isinstance(race, Racing)
        gone = race.racing is not task  # (the owner forgot it as it cancelled it)
        if not gone:
            race.racing = None
    if isinstance(exc, asyncio.CancelledError):
        left = gone and task.uncancel() == 0  # (a cancellation of somebody else's is raised)
    else:
        left = isinstance(exc, OSError)
    if type(race) is _Watch:
        await race.close()
    return left


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

    ``timing``, when set, is called as the head goes out: its value is the answer's
    ``Server-Timing`` header (the gateway's and the upstream's time to this first byte).

    ``body`` may be the whole body already (an answer that came complete while the gateway
    waited for it to start): it goes out right after the head, with no disconnect watch
    (nothing is waited for any more) and no iterator.
    """

    timing: Callable[[], str] | None = None
    # true once the body has yielded its last chunk (checked after each): that chunk ends the
    # response, saving the empty write of the end (must be reset by whoever wraps ``body``)
    last: Callable[[], bool] | None = None

    def __init__(
        self,
        body: AsyncIterator[bytes] | bytes,
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

    def _start(self) -> dict[str, Any]:
        headers = self.headers
        if self.timing is not None:
            headers = [*headers, (b"server-timing", self.timing().encode("latin-1"))]
        return {"type": "http.response.start", "status": self.status, "headers": headers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body
        if isinstance(body, bytes):
            try:
                await send(self._start())
                await send({"type": "http.response.body", "body": body, "more_body": False})
            except OSError:  # gone mid-write: nobody to answer (as until_disconnected counts it)
                pass
            finally:
                if self.on_close is not None:
                    await self.on_close()
            return

        # until_disconnected's race, the work (the head, then each chunk) written out in this
        # frame: one coroutine, not three, to resume at each of the stream's wake-ups
        task = asyncio.current_task()
        assert task is not None
        race = _begin(receive, task)
        try:
            await send(self._start())
            last = self.last
            async for chunk in body:
                if last is not None and last():  # that chunk ends the answer
                    await send({"type": "http.response.body", "body": chunk, "more_body": False})
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except BaseException as exc:
            if not await _failed(race, task, exc):
                raise
        else:
            watcher = _finished(race, task)
            if watcher is not None:
                await asyncio.gather(watcher, return_exceptions=True)
        finally:
            aclose = getattr(body, "aclose", None)  # an async generator's, if the body is one
            if aclose is not None:
                await aclose()
            if self.on_close is not None:
                await self.on_close()
