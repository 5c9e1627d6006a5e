"""The disconnect race over the server's own ``receive`` (gateway/_server.py's GuardedCycle,
a ``_response.Racing``): no watch, the task left with the cycle, which the protocol cancels
when the connection is lost. Compared, scenario by scenario, with the watch that any other
``receive`` gets (uvicorn's own protocol and cycle, the watch started at once)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llmbridge.gateway import _response
from llmbridge.gateway._response import until_disconnected
from tests.gateway_util import RecordingTransport

BODY = b'{"model":"m","stream":true}'


def _head(extra: str = "", length: int = len(BODY)) -> bytes:
    return f"POST /v1/chat/completions HTTP/1.1\r\nhost: a\r\n{extra}content-length: {length}\r\n\r\n".encode()


async def _turns(n: int = 40) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


# Each scenario: (what the app does before racing, what the work does, what the test does
# while the work waits). read: the app reads the whole body first (as Chat does).
SCENARIOS: dict[str, dict[str, Any]] = {
    "finishes": {"then": "release"},
    "client leaves": {"then": "lose"},
    "client leaves with an error": {"then": "lose-error"},
    "cancelled from outside": {"then": "cancel"},
    "a write to a gone client": {"work": "oserror"},
    "a bug in the work": {"work": "bug"},
    "the work swallows the cancel": {"work": "swallow", "then": "lose"},
    "the work finishes the answer": {"work": "answer"},
    "body left unread, finishes": {"read": False, "then": "release"},
    "body left unread, client leaves": {"read": False, "then": "lose"},
    "client gone before the race": {"before": "lose"},
    "100-continue owed": {"read": False, "expect": True, "then": "release"},
    "pipelined request behind": {"pipelined": True, "then": "release"},
    "pipelined request behind, client leaves": {"pipelined": True, "then": "lose"},
    "leaves twice a request": {"twice": True, "then": "lose"},
}


def _serve(protocol_class: type, scenario: dict[str, Any]) -> tuple[Any, ...]:
    """One request of ``scenario`` on a connection served by ``protocol_class``: what the app
    and its work saw, what was done to the transport (writes, pauses, close), and whether the
    race left its task with the cycle (the shortcut) at its first wait."""
    import uvicorn
    from uvicorn.server import ServerState

    log: list[Any] = []
    shortcut: list[bool] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] != "/v1/chat/completions":
            return
        if scenario.get("read", True):
            while (await receive())["more_body"]:
                pass
        if scenario.get("before"):
            await before
        task = asyncio.current_task()
        assert task is not None

        async def work(n: int) -> int:
            owner = getattr(receive, "__self__", None)
            shortcut.append(getattr(owner, "racing", None) is task)
            try:
                log.append(("work", n))
                kind = scenario.get("work")
                if kind == "oserror":
                    raise ConnectionResetError
                if kind == "bug":
                    raise ValueError("bug")
                if kind == "answer":
                    await send({"type": "http.response.start", "status": 200, "headers": []})
                    await send({"type": "http.response.body", "body": b"done", "more_body": False})
                    return 9
                if kind == "swallow":
                    try:
                        await gate
                    except asyncio.CancelledError:
                        log.append("swallowed")
                    return 8
                await gate
                return 7
            finally:
                log.append(("work-finally", n))

        for n in range(2 if scenario.get("twice") else 1):
            try:
                outcome = await until_disconnected(receive, work(n))
            except BaseException as exc:
                log.append(("raised", type(exc).__name__, task.cancelling()))
                raise
            log.append(("outcome", outcome, task.cancelling()))
        await asyncio.sleep(0)  # no cancellation left pending on the task
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})
        log.append("answered")

    async def go() -> tuple[Any, ...]:
        nonlocal gate, before
        loop = asyncio.get_running_loop()
        gate, before = loop.create_future(), loop.create_future()
        config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False)
        state = ServerState()
        protocol = protocol_class(config, state, {}, _loop=loop)
        transport = RecordingTransport()
        protocol.connection_made(transport)
        tasks = set(asyncio.all_tasks())
        if scenario.get("expect"):
            protocol.data_received(_head("expect: 100-continue\r\n"))
        else:
            data = _head() + BODY
            protocol.data_received(
                data + (_head().replace(b"/v1/chat", b"/next") + BODY if scenario.get("pipelined") else b"")
            )
        await _turns()
        if scenario.get("before"):
            protocol.connection_lost(None)
            await _turns()
            before.set_result(None)
        await _turns()
        if scenario.get("expect"):
            protocol.data_received(BODY)
            await _turns()
        then = scenario.get("then")
        if then == "release":
            gate.set_result(None)
        elif then == "lose":
            protocol.connection_lost(None)
        elif then == "lose-error":
            protocol.connection_lost(ConnectionResetError())
        elif then == "cancel":
            for task in asyncio.all_tasks() - tasks - {asyncio.current_task()}:
                task.cancel()
        await _turns()
        left = [t for t in asyncio.all_tasks() - tasks - {asyncio.current_task()} if not t.done()]
        for t in left:  # (a request the client left behind, unanswered: ended here, and settled)
            t.cancel()
        await _turns()
        unanswered = sum("run_asgi" in t.get_coro().__qualname__ for t in left)  # (not the watch's task)
        return log, transport.on_the_wire(), unanswered, shortcut

    gate: asyncio.Future[None]
    before: asyncio.Future[None]
    return asyncio.run(go())


@pytest.fixture
def watch_at_once(monkeypatch):
    monkeypatch.setattr(_response, "WATCH_AFTER", 0.0)  # the watch a turn after the race starts, not 20 ms


# where the shortcut applies (the whole body taken, nothing owed, reading on, the client still there)
SHORTCUT = {
    "finishes",
    "client leaves",
    "client leaves with an error",
    "cancelled from outside",
    "a write to a gone client",
    "a bug in the work",
    "the work swallows the cancel",
    "the work finishes the answer",
    "leaves twice a request",
    "pipelined request behind",
    "pipelined request behind, client leaves",
}  # (the body read resumed reading)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_race_over_the_cycle_ends_as_the_watch_does(name, watch_at_once):
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    scenario = SCENARIOS[name]
    *ours, shortcut = _serve(GuardedHttpToolsProtocol, scenario)
    *theirs, watched = _serve(HttpToolsProtocol, scenario)
    assert ours == theirs
    assert not any(watched)  # (uvicorn's cycle is no Racing: the watch)
    assert shortcut[0] == (name in SHORTCUT)  # (a second race, the client gone: the watch)


def test_the_race_scenarios_are_not_vacuous(watch_at_once):
    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    log, events, left, _ = _serve(GuardedHttpToolsProtocol, SCENARIOS["client leaves"])
    assert log == [("work", 0), ("work-finally", 0), ("outcome", (False, None), 0), "answered"]
    assert events == ["close"] and left == 0  # nothing written, the connection closed
    log, events, *_ = _serve(GuardedHttpToolsProtocol, SCENARIOS["finishes"])
    assert log[-2:] == [("outcome", (True, 7), 0), "answered"]
    assert events[-1].endswith(b"ok\r\n0\r\n\r\n")
    log, *_ = _serve(GuardedHttpToolsProtocol, SCENARIOS["cancelled from outside"])
    assert log[-1] == ("raised", "CancelledError", 1)


async def test_a_race_over_another_receive_takes_the_watch():
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def work() -> int:
        await asyncio.sleep(0)
        return 3

    assert await until_disconnected(receive, work()) == (True, 3)


# --------------------------------------------------------------------------- StreamResponse's own race

STREAMS: dict[str, dict[str, Any]] = {
    "streams to the end": {"then": "release"},
    "client leaves mid-stream": {"then": "lose"},
    "client leaves, the body swallows it": {"swallow": True, "then": "lose"},
    "the body fails": {"fail": True},
    "the last chunk ends it": {"last": True},
    "cancelled from outside": {"then": "cancel"},
    "body left unread, client leaves": {"read": False, "then": "lose"},
    "head timing fails": {"timing": "fails"},
}


def _stream(protocol_class: type, scenario: dict[str, Any]) -> tuple[Any, ...]:
    """A StreamResponse of ``scenario`` served on a connection by ``protocol_class``: what the
    body, the response's end and the app saw, and what was done to the transport."""
    import uvicorn
    from uvicorn.server import ServerState

    from llmbridge.gateway._response import StreamResponse

    log: list[Any] = []

    async def body() -> Any:
        try:
            yield b"data: 1\n\n"
            log.append("waiting")
            try:
                await gate
            except asyncio.CancelledError:
                if not scenario.get("swallow"):
                    raise
                log.append("swallowed")
            if scenario.get("fail"):
                raise ValueError("upstream broke")
            yield b"data: 2\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            log.append("body closed")

    async def on_close() -> None:
        log.append("on_close")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scenario.get("read", True):
            while (await receive())["more_body"]:
                pass
        response = StreamResponse(body(), on_close=on_close)
        if scenario.get("last"):
            response.last = lambda: log.count("waiting") == 1
        if scenario.get("timing") == "fails":
            response.timing = lambda: 1 / 0  # type: ignore[assignment,return-value]
        task = asyncio.current_task()
        assert task is not None
        try:
            await response(scope, receive, send)
        except BaseException as exc:
            log.append(("raised", type(exc).__name__, task.cancelling()))
            raise
        log.append(("returned", task.cancelling()))

    async def go() -> tuple[Any, ...]:
        nonlocal gate
        loop = asyncio.get_running_loop()
        gate = loop.create_future()
        config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False)
        protocol = protocol_class(config, ServerState(), {}, _loop=loop)
        transport = RecordingTransport()
        protocol.connection_made(transport)
        tasks = set(asyncio.all_tasks())
        protocol.data_received(_head() + BODY)
        await _turns()
        then = scenario.get("then", "release")
        if then == "release":
            gate.set_result(None)
        elif then == "lose":
            protocol.connection_lost(None)
        elif then == "cancel":
            for task in asyncio.all_tasks() - tasks - {asyncio.current_task()}:
                task.cancel()
        await _turns()
        if not gate.done():
            gate.set_result(None)
        await _turns()
        return log, transport.on_the_wire()

    gate: asyncio.Future[None]
    return asyncio.run(go())


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_stream_over_the_cycle_ends_as_over_the_watch(name, watch_at_once):
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    ours = _stream(GuardedHttpToolsProtocol, STREAMS[name])
    assert ours == _stream(HttpToolsProtocol, STREAMS[name])
    log, events = ours
    assert "on_close" in log  # (however it ended)
    if name == "client leaves mid-stream":
        assert log[-2:] == ["on_close", ("returned", 0)] and events[-1] == "close"
