"""Issue 23, the first token: what the gateway does between a request's arrival and the
upstream request's write, each shortcut checked against the general path it skips."""

from __future__ import annotations

import asyncio
import json
import os
import re
from types import SimpleNamespace
from typing import Any

import pytest

from llmbridge import hub
from llmbridge.gateway import _hotpath, config
from llmbridge.gateway._failures import UpstreamFailed
from llmbridge.gateway._upstream import BY_STREAM


def test_request_ids_keep_their_format_and_differ() -> None:
    """``req_`` and 32 lower-case hex digits, as ``uuid4().hex`` gave, zero-padded when the
    draw is small; no two alike."""
    ids = {_hotpath.new_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"req_[0-9a-f]{32}", rid) for rid in ids)


def test_a_small_draw_is_zero_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_hotpath, "_bits", lambda n: 0x1F)
    assert _hotpath.new_request_id() == "req_" + "0" * 30 + "1f"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_worker_draws_other_ids() -> None:
    """Workers forked from one process do not repeat its ids (``random`` reseeds after a fork)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write, _hotpath.new_request_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    mine = _hotpath.new_request_id()
    os.waitpid(pid, 0)
    theirs = os.read(read, 100).decode()
    os.close(read)
    assert re.fullmatch(r"req_[0-9a-f]{32}", theirs) and theirs != mine


# -- the Traffic row, begun once the upstream has the request (Chat.start)


class _Gated:
    """An upstream whose opening writes (notes the ring as it is then) and waits for ``head``."""

    format = "openai-chat"

    def __init__(self, gateway: Any, fail_at_once: bool = False) -> None:
        self.name = "u"
        self.gateway = gateway
        self.fail_at_once = fail_at_once
        self.head: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.rows_at_write: int | None = None
        self.saw: BaseException | None = None

    async def open_stream(self, request: hub.Request, started: float, tap: Any = None) -> Any:
        self.rows_at_write = len(self.gateway.traffic.recent())
        if self.fail_at_once:
            raise UpstreamFailed(hub.Error("refused at once", "invalid_request", status=400))
        try:
            return await self.head
        except BaseException as exc:
            self.saw = exc
            raise


def _gateway() -> Any:
    from llmbridge.gateway._app import Gateway

    raw = {
        "upstreams": {"u": {"format": "openai-chat", "base_url": "http://127.0.0.1:9/v1"}},
        "models": [{"name": "m", "upstream": "u"}],
    }
    return Gateway(config.parse(raw))


def _start(gw: Any, upstream: _Gated) -> Any:
    from llmbridge.gateway._chat import Turn
    from llmbridge.gateway._metering import Meter

    gw.upstreams["u"] = upstream  # (the pipeline's own mapping)
    hreq = hub.Request(model="m", messages=[hub.Message("user", "hi")], stream=True)
    turn = Turn(hreq, "openai-chat", "openai-chat", 10)
    return gw.chat.start(turn, Meter(), None, SimpleNamespace(upstream="u", model="m"))


async def test_the_row_is_begun_after_the_write_from_the_time_before_it() -> None:
    """Not in the ring while the request is being written; in it, open, as soon as the
    opening waits for the head (before any other task runs), started at the clock's reading
    from before the write; failed with the upstream's error when the head fails."""
    gw = _gateway()
    ticks = iter(range(100, 200))
    gw.traffic.clock = lambda: float(next(ticks))
    upstream = _Gated(gw)
    task = asyncio.ensure_future(_start(gw, upstream))
    await asyncio.sleep(0)  # the task's first step: up to the wait for the head
    assert upstream.rows_at_write == 0
    (row,) = gw.traffic.recent()
    assert row.status == "open" and row.started == 100.0 and (row.upstream, row.model) == ("u", "m")
    upstream.head.set_exception(UpstreamFailed(hub.Error("boom", "api_error", status=502)))
    with pytest.raises(UpstreamFailed):
        await task
    assert row.status == "error" and row.error is not None and row.error["message"] == "boom"
    assert gw.traffic.recent() == [row]


async def test_a_cancelled_opening_still_gets_its_row_and_sees_the_cancellation() -> None:
    gw = _gateway()
    upstream = _Gated(gw)
    task = asyncio.ensure_future(_start(gw, upstream))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert isinstance(upstream.saw, asyncio.CancelledError)  # thrown on into the opening
    (row,) = gw.traffic.recent()
    assert row.status == "cancelled" and row.ended_at is not None


async def test_an_opening_refused_before_it_waits_gets_its_row() -> None:
    gw = _gateway()
    with pytest.raises(UpstreamFailed):
        await _start(gw, _Gated(gw, fail_at_once=True))
    (row,) = gw.traffic.recent()
    assert row.status == "error" and row.error is not None and row.error["message"] == "refused at once"


async def test_resumed_runs_a_coroutine_as_await_does() -> None:
    """``_resumed`` after a first step: every value sent in, every exception thrown in (and
    handled inside), every further suspension and the result, as a plain ``await``."""
    from llmbridge.gateway._chat import _resumed

    async def body(log: list[object]) -> str:
        loop = asyncio.get_running_loop()
        for i in range(3):
            future = loop.create_future()
            loop.call_soon(future.set_result, i)
            log.append(await future)
        await asyncio.sleep(0)  # (a bare yield: None to the task)
        log.append("waiting")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append("cancelled, handled")
        return "done"

    async def stepped(log: list[object]) -> str:
        coroutine = body(log)
        return await _resumed(coroutine, coroutine.send(None))

    for run in (body, stepped):
        log: list[object] = []
        task = asyncio.ensure_future(run(log))
        while not log or log[-1] != "waiting":
            await asyncio.sleep(0)
        task.cancel()
        assert await task == "done" and log == [0, 1, 2, "waiting", "cancelled, handled"], run

    async def raising() -> None:
        await asyncio.sleep(0)
        raise KeyError("x")

    coroutine = raising()
    with pytest.raises(KeyError):
        await _resumed(coroutine, coroutine.send(None))


# -- the router's next attempt without a coroutine (Router.next_now, as Pipeline.route asks)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Shared:
    """A stand-in for the Redis state: claims answered from a script (code, wait), in turn."""

    def __init__(self, answers: list[tuple[int, float]]) -> None:
        self.answers = answers
        self.n = 0

    async def claim(self, attempt: Any, ttl: float) -> tuple[int, float]:
        answer = self.answers[self.n % len(self.answers)]
        self.n += 1
        return answer

    def failed(self, *args: Any) -> Any:
        return None

    def recovered(self, *args: Any) -> Any:
        return None

    def tokens(self, *args: Any) -> Any:
        return None

    def spawn(self, future: Any) -> None:
        if hasattr(future, "close"):  # (a coroutine: nothing to share)
            future.close()


def _router(deployments: list[dict[str, Any]], how: str, seed: int, shared: _Shared | None) -> Any:
    import random

    from llmbridge.gateway._routing import Router

    ups = {d["upstream"]: {"format": "openai-chat", "base_url": "http://127.0.0.1:9/v1"} for d in deployments}
    entry = {"name": "m", "routing": how, "deployments": deployments, "retries": {"attempts": 3}}
    entry["cooldown"] = {"failures": 2, "seconds": 5}
    cfg = config.parse({"upstreams": ups, "models": [entry]})
    clock = _Clock()
    return Router(cfg, clock=clock, rng=random.Random(seed), shared=shared), clock  # type: ignore[arg-type]


async def _requests(router: Any, clock: _Clock, now: bool, fails: set[int]) -> list[object]:
    """Twelve requests, the ``fails``-th tries failing (500, then retried), through
    ``next_now`` then ``next`` as Pipeline.route asks (``now``), or ``next`` alone."""
    seen: list[object] = []
    tries = 0
    for _ in range(12):
        plan = router.plan("m", None, clock.now + 30.0, 400)
        while True:
            if now:
                attempt = router.next_now(plan)
                if attempt is not None and attempt.started is None:
                    attempt = await router.next(plan, attempt)
            else:
                attempt = await router.next(plan)
            if attempt is None:
                seen.append(("stop", plan.error.message if plan.error else None, dict(plan.headers)))
                break
            tries += 1
            seen.append((attempt.upstream, attempt.delay, attempt.probe, attempt.panic, attempt.started))
            clock.now += 0.01
            if tries in fails:
                attempt.failed(clock.now, hub.Error("boom", "api_error", status=500), {})
                continue
            attempt.answered(clock.now)
            attempt.finished(clock.now, 40)
            break
        clock.now += 0.2
    seen.append(router.snapshot())
    return seen


@pytest.mark.parametrize(
    ("deployments", "how", "shared"),
    [
        ([{"upstream": "a", "model": "x"}], "ordered", None),
        ([{"upstream": "a", "model": "x", "rpm": 3}], "ordered", None),
        ([{"upstream": "a", "model": "x", "tpm": 500}, {"upstream": "b", "model": "x"}], "least-busy", None),
        ([{"upstream": "a", "model": "x"}, {"upstream": "b", "model": "x", "weight": 3}], "weighted", None),
        ([{"upstream": "a", "model": "x"}, {"upstream": "b", "model": "x", "fallback": True}], "latency", None),
        ([{"upstream": "a", "model": "x"}, {"upstream": "b", "model": "x"}], "ordered", [(1, 0.0), (3, 0.5), (4, 2.0)]),
    ],
)
async def test_next_now_then_next_is_next(
    monkeypatch: pytest.MonkeyPatch, deployments: list[dict[str, Any]], how: str, shared: Any
) -> None:
    """The same requests on two routers alike, one asked as Pipeline.route asks (next_now,
    then next with what it left), one through next alone: the same attempts (deployment,
    backoff, probe, panic, start), the same stops and errors, the same state after."""
    from llmbridge.gateway import _routing

    runs = []
    for now in (True, False):
        for fails in ({2, 3, 4, 7}, {1, 2, 3, 4, 5, 6, 9, 10}, set()):
            router, clock = _router(deployments, how, 7, _Shared(shared) if shared else None)

            async def sleep(seconds: float, clock: _Clock = clock) -> None:
                clock.now += seconds

            monkeypatch.setattr(_routing.asyncio, "sleep", sleep)
            runs.append(await _requests(router, clock, now, fails))
    assert runs[:3] == runs[3:]
    slept = any(isinstance(x, tuple) and isinstance(x[1], float) and x[1] > 0 for x in runs[1])
    assert slept or shared  # (backoffs were slept; with shared state, claims were refused instead)


# -- the request head by ``stream`` alone (HTTPUpstream, BY_STREAM)


def _varied_requests() -> list[hub.Request]:
    """Requests that differ in every way a dialect's endpoint could read."""
    out = []
    for stream in (True, False):
        out += [
            hub.Request(model="m", messages=[hub.Message("user", "hi")], stream=stream),
            hub.Request(
                model="models/gemini-x", stream=stream, max_tokens=5, metadata={"user_id": "u", "request_id": "r"}
            ),
            hub.Request(model="us.anthropic.claude/v1:0", stream=stream, extensions={"anthropic-beta": "a,b"}),
            hub.Request(model=None, stream=stream, tools=[hub.Tool("f", "d", {})], temperature=0.5),  # type: ignore[arg-type]
            hub.Request(model="x y", stream=stream, extensions={"anthropic-messages:$beta": "c", "k": 1}),
        ]
    return out


@pytest.mark.parametrize("dialect", sorted(BY_STREAM))
def test_the_by_stream_dialects_endpoints_read_only_stream(dialect: str) -> None:
    """Each dialect BY_STREAM names answers every request as it answers a bare one with the
    same ``stream``: its URL and headers read nothing else of the request."""
    from llmbridge import dialects

    endpoint = dialects.get(dialect).endpoint
    for base, key in (("https://api.example.com/v1", "sk-1"), ("http://127.0.0.1:9/", None)):
        for request in _varied_requests():
            bare = hub.Request(stream=request.stream)
            assert endpoint(request, base_url=base, api_key=key) == endpoint(bare, base_url=base, api_key=key)


@pytest.mark.parametrize(
    "dialect", ["openai-chat", "openai-responses", "llm-stream", "mmsp", "anthropic-messages", "gemini"]
)
def test_prepared_heads_are_the_general_paths(dialect: str) -> None:
    """HTTPUpstream._prepared with its heads kept by ``stream`` (a BY_STREAM dialect) gives
    the head and body the general path (the dialect's URL and headers, looked up) gives."""
    from llmbridge.gateway._upstream import HTTPUpstream

    raw = {"upstreams": {"u": {"format": dialect, "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-x"}}}
    raw["upstreams"]["u"]["headers"] = {"X-Extra": "1"}
    cfg = config.parse({**raw, "models": [{"name": "m", "upstream": "u"}]})
    kept, general = HTTPUpstream(cfg.upstreams["u"]), HTTPUpstream(cfg.upstreams["u"])
    general._by_stream = None
    for _ in range(2):  # (made, then kept)
        for request in _varied_requests():
            if dialect == "gemini" and not request.model:
                continue
            assert kept._prepared(request) == general._prepared(request)


# -- the chat endpoints' Request and Headers, set up without Starlette's __init__ chain


def test_hot_request_and_headers_hold_what_starlettes_own_hold() -> None:
    """HotRequest and LookupHeaders set what ``Request(scope, receive)`` and
    ``Headers(scope=scope)`` set, to the same values (the headers a list, in the scope too),
    plus their own header table: a Starlette release that sets more must be followed here."""
    from starlette.datastructures import Headers
    from starlette.requests import Request

    async def receive() -> dict[str, Any]:
        return {}

    def scope() -> dict[str, Any]:
        raw = ((b"content-type", b"application/json"), (b"x-a", b"1"), (b"x-a", b"2"))  # (a tuple, as ASGI allows)
        return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": raw}

    theirs, ours = scope(), scope()
    request, hot = Request(theirs, receive), _hotpath.HotRequest(ours, receive)
    assert {k: v for k, v in vars(hot).items() if k != "_lookup"} == {**vars(request), "scope": ours}
    request.headers  # noqa: B018  (Starlette's, made when first asked for: the scope's headers become a list)
    assert ours == theirs and type(ours["headers"]) is list
    headers, lookup = Headers(scope=scope()), _hotpath.LookupHeaders(ours)
    assert {k: v for k, v in vars(lookup).items() if k != "_first"} == vars(headers)
    assert lookup._list is ours["headers"]
    assert hot.headers.get("x-a") == headers.get("x-a") == "1" and hot.headers.getlist("x-a") == ["1", "2"]
    assert hot.receive is receive and hot.method == "POST"


# -- the range check of a request that sets max_tokens alone (validate_request)


def _general_ranges(request: hub.Request, dialect: str) -> str | None:
    """The range check's loop over every set field, as validate_request runs it when its
    shortcut does not apply: the first refusal's field, or None."""
    from llmbridge.errors import RequestError
    from llmbridge.gateway._checks import _RANGE_ITEMS, _RANGED, _check_range

    try:
        for item, value in zip(_RANGE_ITEMS, _RANGED(request), strict=True):
            if value is not None:
                _check_range(request, dialect, item, value)
    except RequestError as exc:
        return exc.field
    return None


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic-messages", "gemini", "openai-responses"])
def test_max_tokens_alone_is_checked_as_the_loop_checks_it(dialect: str) -> None:
    """max_tokens at and past each bound, of every kind, alone or beside another field:
    validate_request refuses (naming the same field) exactly when the general loop does."""
    import enum

    from llmbridge.errors import RequestError
    from llmbridge.gateway._checks import INT32, validate_request

    class Big(enum.IntEnum):
        ONE = 1

    tries: list[object] = [0, 1, 2, -1, INT32 - 1, INT32, INT32 + 1, 2**63, True, False, 1.0, "1", Big.ONE, None]
    for max_tokens in tries:
        for other in ({}, {"temperature": 0.5}, {"temperature": 9.0}, {"n": 0}, {"frequency_penalty": -2.0}):
            request = hub.Request("m", max_tokens=max_tokens, **other)  # type: ignore[arg-type]
            try:
                validate_request(request, dialect)
                got = None
            except RequestError as exc:
                got = exc.field
            assert got == _general_ranges(request, dialect), (max_tokens, other)


# -- content negotiation, remembered per (endpoint, Content-Type, Accept)


class _Words:
    name = "w"

    async def stream(self, request: hub.Request) -> Any:
        yield hub.ResponseStart(id="r1", model=request.model)
        yield hub.BlockStart(0, "text")
        yield hub.Delta(0, "hi")
        yield hub.BlockStop(0)
        yield hub.Finish("end_turn")
        yield hub.ResponseEnd()


async def test_a_remembered_negotiation_answers_as_the_first() -> None:
    """Every endpoint, Content-Type and Accept (a 415 among them, the standard stream asked
    both ways, a wrong key) answered twice: the first time negotiated by the three calls,
    then from KNOWN: the same status, media type and error shape each time."""
    import httpx

    from llmbridge.gateway import _negotiation as negotiation
    from llmbridge.gateway import create_app

    raw = {
        "gateway": {"api_keys": ["k1"], "auth_failures_per_minute": 0},  # (no 429: the wrong key over and over)
        "upstreams": {"w": {"format": "local"}},
        "models": [{"name": "m", "upstream": "w"}],
    }
    app = create_app(config.parse(raw), upstreams={"w": _Words()})
    bodies = {
        "/v1/chat/completions": {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/messages": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/responses": {"model": "m", "input": "hi"},
    }
    types = [None, "application/json", "application/json; charset=utf-8", "text/plain", "application/llm-request+json"]
    accepts = [None, "*/*", "application/json", 'text/event-stream; profile="llm-stream-1.0"']

    async def answer(client: httpx.AsyncClient, path: str, ctype: str | None, accept: str | None, key: str) -> object:
        headers = {"authorization": f"Bearer {key}"}
        if ctype is not None:
            headers["content-type"] = ctype
        if accept is not None:
            headers["accept"] = accept
        r = await client.post(path, content=json.dumps(bodies[path]).encode(), headers=headers)
        shape = (
            sorted(r.json()) if r.status_code >= 400 and r.headers.get("content-type", "").endswith("json") else None
        )
        return r.status_code, r.headers.get("content-type"), shape

    negotiation.KNOWN.clear()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        for path in bodies:
            for ctype in types:
                for accept in accepts:
                    for key in ("k1", "wrong"):
                        first = await answer(client, path, ctype, accept, key)
                        assert first == await answer(client, path, ctype, accept, key), (path, ctype, accept, key)
    # every pair that negotiated but a 415's (httpx sends */* for no Accept), as the three calls have it
    assert len(negotiation.KNOWN) == 3 * 4 * 3
    for (endpoint, ctype, accept), known in negotiation.KNOWN.items():
        request_dialect = negotiation.request_dialect(ctype, endpoint)
        response_dialect = negotiation.response_dialect(endpoint, request_dialect, accept)
        assert known == (negotiation.error_dialect(endpoint, ctype, accept), request_dialect, response_dialect)


def test_the_negotiation_memo_keeps_only_short_header_values() -> None:
    """What a client sends in Content-Type and Accept is bounded only by the head's size: a
    long pair is negotiated each time, not kept."""
    from llmbridge.gateway import _negotiation as negotiation

    negotiation.KNOWN.clear()
    try:
        chat = ("openai-chat",) * 3
        negotiation.remember(("openai-chat", "application/json", "x" * 300), *chat)
        assert not negotiation.KNOWN
        negotiation.remember(("openai-chat", "application/json", None), *chat)
        assert list(negotiation.KNOWN) == [("openai-chat", "application/json", None)]
    finally:
        negotiation.KNOWN.clear()
