"""The gateway's own time, shown to operators (issue 23), and the cheap request path behind it.

- every answer carries ``Server-Timing: gateway;dur=…, upstream;dur=…`` (presence, format,
  and that the figures are non-negative: never a timed assertion);
- ``llmbridge_gateway_overhead_seconds`` counts one observation per answer, its buckets
  cumulative;
- the chat endpoints' hot path (``hotpath.GatewayApp``) keeps what Starlette's stack did for
  them: the ``x-request-id`` header, errors in the client's dialect, a wrong method answered
  by the router; a program's own middleware turns the hot path off;
- the disconnect race without a task per request (``response.until_disconnected``): a
  finished work returns its result, a client gone cancels the work and the caller gets a
  return (not a ``CancelledError``), an outside cancellation still propagates;
- the upstream request head made once per URL and header set (``_http``), the body encoded
  once and only re-walked when our extension key is in it (``upstream.request_bytes``);
- the access log written once per event-loop turn (``accesslog.BatchedStreamHandler``).
"""

from __future__ import annotations

import asyncio
import gc
import io
import logging
import re

import httpx
import pytest
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from llmbridge import dialects, hub, replay
from llmbridge.dialects.base import json_encode
from llmbridge.gateway import _http, config, create_app
from llmbridge.gateway._accesslog import BatchedStreamHandler
from llmbridge.gateway._response import until_disconnected
from llmbridge.gateway._upstream import HTTPUpstream
from llmbridge.gateway.config import UpstreamConfig
from tests.conftest import CORPUS
from tests.gateway_util import replay_config, served_access_logger, serving

HTTP = httpx.Client(timeout=30)
TIMING = re.compile(r"^gateway;dur=(\d+\.\d+), upstream;dur=(\d+\.\d+)$")
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 16}


@pytest.fixture(scope="module")
def gw():
    with serving(replay.create_app(CORPUS, seed=23)) as up:
        raw = replay_config(up.url, {"chat": ("openai-chat", "hf-novita-text")}, gateway={"api_keys": ["k-timing"]})
        with serving(create_app(config.parse(raw))) as server:
            yield server


def _ask(gw, path: str, body: dict, **headers: str) -> httpx.Response:
    return HTTP.post(gw.url + path, json=body, headers={"authorization": "Bearer k-timing", **headers})


def _durations(response: httpx.Response) -> tuple[float, float]:
    match = TIMING.match(response.headers["server-timing"])
    assert match, response.headers["server-timing"]
    return float(match.group(1)), float(match.group(2))


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
@pytest.mark.parametrize("stream", [True, False])
def test_every_answer_says_the_gateway_and_upstream_time(gw, path, stream):
    body = {"model": "chat", "input": "hi", "stream": stream} if path == "/v1/responses" else {**CHAT, "stream": stream}
    r = _ask(gw, path, body)
    assert r.status_code == 200, r.text
    gateway, upstream = _durations(r)
    assert gateway >= 0 and upstream >= 0


def test_gemini_answers_through_starlette_carry_it_too(gw):
    r = HTTP.post(gw.url + "/v1beta/models/chat:streamGenerateContent?alt=sse&key=k-timing",
                  json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})  # fmt: skip
    assert r.status_code == 200, r.text
    _durations(r)


def _overhead(gw) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = HTTP.get(gw.url + "/metrics").text
    return {
        s.name + (f"{{le={s.labels['le']}}}" if "le" in s.labels else ""): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "llmbridge_gateway_overhead_seconds"
        for s in family.samples
    }


def test_the_overhead_histogram_counts_each_answer_once(gw):
    before = _overhead(gw)
    for _ in range(3):
        assert _ask(gw, "/v1/chat/completions", CHAT).status_code == 200
    after = _overhead(gw)
    assert after["llmbridge_gateway_overhead_seconds_count"] == before.get("llmbridge_gateway_overhead_seconds_count",
                                                                           0) + 3  # fmt: skip
    assert after["llmbridge_gateway_overhead_seconds_sum"] >= before.get("llmbridge_gateway_overhead_seconds_sum", 0)
    buckets = [v for k, v in after.items() if "_bucket" in k]
    assert buckets == sorted(buckets) and buckets[-1] == after["llmbridge_gateway_overhead_seconds_count"]


def test_the_hot_path_keeps_the_request_id_and_the_client_dialect(gw):
    r = _ask(gw, "/v1/chat/completions", CHAT, **{"x-request-id": "my-id-23"})
    assert r.headers["x-request-id"] == "my-id-23"
    fresh = _ask(gw, "/v1/messages", CHAT)
    assert re.fullmatch(r"req_[0-9a-f]{32}", fresh.headers["x-request-id"])
    bad = HTTP.post(gw.url + "/v1/messages", json=CHAT, headers={"x-api-key": "wrong"})
    assert bad.status_code == 401 and "x-request-id" in bad.headers
    assert dialects.get("anthropic-messages").decode_error(401, bad.content).type == "authentication"
    garbage = HTTP.post(gw.url + "/v1/chat/completions", content=b"{nope", headers={"authorization": "Bearer k-timing"})
    assert garbage.status_code == 400 and garbage.json()["error"]["type"] == "invalid_request_error"
    wrong_method = HTTP.get(gw.url + "/v1/chat/completions")
    assert wrong_method.status_code == 405 and "x-request-id" in wrong_method.headers


def test_a_programs_own_middleware_sees_every_request():
    seen: list[str] = []

    class Spy:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                seen.append(scope["path"])
            await self.app(scope, receive, send)

    raw = {"gateway": {"api_keys": ["k"]}, "upstreams": {}, "models": []}
    app = create_app(config.parse(raw))
    app.add_middleware(Spy)
    assert app.user_middleware[0] == Middleware(Spy) or seen == []
    with serving(app) as server:
        r = HTTP.post(server.url + "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer k"})
    assert r.status_code == 404 and seen == ["/v1/chat/completions"]


# --------------------------------------------------------------------------- the race, no task per request


def _receive_after(first: asyncio.Event):
    async def receive() -> dict:
        await first.wait()
        return {"type": "http.disconnect"}

    return receive


async def test_finished_work_returns_its_result_and_leaves_no_task():
    never = asyncio.Event()
    tasks = len(asyncio.all_tasks())

    async def work() -> int:
        await asyncio.sleep(0)
        return 7

    assert await until_disconnected(_receive_after(never), work()) == (True, 7)
    assert len(asyncio.all_tasks()) == tasks


async def test_a_client_gone_cancels_the_work_and_the_caller_gets_a_return():
    gone = asyncio.Event()
    cleaned: list[str] = []

    async def work() -> int:
        try:
            gone.set()
            await asyncio.sleep(60)
            return 1
        finally:
            cleaned.append("work")

    finished, result = await asyncio.wait_for(until_disconnected(_receive_after(gone), work()), 10)
    assert (finished, result, cleaned) == (False, None, ["work"])
    await asyncio.sleep(0)  # the caller goes on: no cancellation is left pending on it
    assert not asyncio.current_task().cancelling()


async def test_an_outside_cancellation_still_propagates():
    never = asyncio.Event()

    async def caller() -> None:
        await until_disconnected(_receive_after(never), asyncio.sleep(60))

    task = asyncio.ensure_future(caller())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_write_to_a_gone_client_counts_as_gone():
    async def work() -> None:
        raise ConnectionResetError

    assert await until_disconnected(_receive_after(asyncio.Event()), work()) == (False, None)


# --------------------------------------------------------------------------- upstream request, access log


async def test_the_request_head_is_made_once_per_url_and_headers():
    client = _http.HTTPClient()
    head_a = _http._head_for("POST", "http://127.0.0.1:9/v1/chat/completions", {"authorization": "Bearer x"})
    origin, prefix = head_a
    assert origin == _http._Origin("http", "127.0.0.1", 9)
    assert prefix.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:9\r\n")
    assert prefix.endswith(b"authorization: Bearer x\r\ncontent-length: ")
    with pytest.raises(_http.ConnectError):
        await client.request("POST", "http://127.0.0.1:9/x", {"a": "b"}, b"{}", connect_timeout=5)
    with pytest.raises(_http.ConnectError):
        await client.request("POST", "http://127.0.0.1:9/x", {"a": "b"}, b"{}", connect_timeout=5)
    assert len(client._heads) == 1
    with pytest.raises(_http.UpstreamHTTPError, match="line break"):
        await client.request("POST", "http://127.0.0.1:9/x", {"a": "b\r\nevil: 1"}, b"{}")
    await client.aclose()


def test_the_upstream_body_is_stripped_of_our_key_only_when_it_holds_it():
    upstream = HTTPUpstream(UpstreamConfig("u", "openai-chat", base_url="http://127.0.0.1:9/v1"))
    plain = hub.Request(model="m", messages=[hub.Message("user", [hub.TextPart("llmbridge")])])
    assert b'"content":"llmbridge"' in upstream.request_bytes(plain)  # text that merely says it stays
    marked = hub.Request(model="m", messages=plain.messages, extensions={"anthropic-messages:x": 1})
    assert b'"llmbridge":{' in json_encode(dialects.get("openai-chat").encode_request(marked))
    assert b'"llmbridge":{' not in upstream.request_bytes(marked)
    assert b'"content":"llmbridge"' in upstream.request_bytes(marked)


async def test_access_lines_of_one_loop_turn_go_out_in_one_write():
    writes: list[str] = []

    class Stream(io.StringIO):
        def write(self, s: str) -> int:
            writes.append(s)
            return len(s)

    handler = BatchedStreamHandler(Stream())
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.Logger("t")
    logger.addHandler(handler)
    for n in range(3):
        logger.warning("line %d", n)
    assert writes == []
    await asyncio.sleep(0)
    assert writes == ["line 0\nline 1\nline 2\n"]
    logger.warning("outside")
    handler.flush()
    assert writes[-1] == "outside\n"


def test_the_access_filter_still_masks_the_path_but_not_the_address():
    from llmbridge.gateway._server import RedactSecrets

    record = logging.LogRecord("uvicorn.access", logging.INFO, "x", 1, '%s - "%s %s HTTP/%s" %d',
                               ("[::1]:5", "GET", "/v1beta/models?key=abc123", "1.1", 200), None)  # fmt: skip
    assert RedactSecrets().filter(record)
    assert record.args == ("[::1]:5", "GET", "/v1beta/models?key=***", "1.1", 200)


async def test_a_burst_finds_its_upstream_connections_ready_the_second_time():
    """100 requests at once: all 100 connections go back to the pool (not 64), so the next
    burst opens none."""
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                await reader.readexactly(2)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
    client = _http.HTTPClient()

    async def one() -> bytes:
        response = await client.request("POST", url, {}, b"{}", connect_timeout=10, head_timeout=10)
        return await response.read(100)

    for _ in range(2):
        assert await asyncio.gather(*(one() for _ in range(100))) == [b"ok"] * 100
    assert connections == 100
    await client.aclose()
    server.close()


@pytest.mark.parametrize("status", [200, 401, 499, 503, 799])
def test_the_plain_access_formatter_writes_uvicorns_line(status):
    from uvicorn.logging import AccessFormatter

    from llmbridge.gateway._accesslog import UVICORN_ACCESS_FORMAT, PlainAccessFormatter

    args = ("127.0.0.1:5", "POST", "/v1/chat/completions?alt=sse", "1.1", status)
    record = logging.LogRecord("uvicorn.access", logging.INFO, "x", 1, '%s - "%s %s HTTP/%s" %d', args, None)
    ours = PlainAccessFormatter(UVICORN_ACCESS_FORMAT, use_colors=False).format(record)
    assert ours == AccessFormatter(UVICORN_ACCESS_FORMAT, use_colors=False).format(record)
    coloured = PlainAccessFormatter(UVICORN_ACCESS_FORMAT, use_colors=True).format(record)
    assert coloured == AccessFormatter(UVICORN_ACCESS_FORMAT, use_colors=True).format(record)


async def test_the_fast_access_line_is_the_logged_line():
    """AccessLine (no LogRecord, no formatter) writes what logging writes, masked the same way."""
    from llmbridge.gateway._accesslog import UVICORN_ACCESS_MESSAGE, AccessLine, access_logger
    from llmbridge.gateway._server import register_secrets

    register_secrets(["sk-configured-0123456789"])
    for path in ("/v1/chat/completions", "/v1beta/models/m:x?key=AIzaSecret&t=sk-configured-0123456789"):
        for status in (200, 429, 799):
            slow_out, fast_out = io.StringIO(), io.StringIO()
            args = ("[::1]:5", "POST", path, "1.1", status)
            slow = served_access_logger(slow_out)
            fast = access_logger(served_access_logger(fast_out))
            assert isinstance(fast, AccessLine)
            for _ in range(2):  # (the second line from the connection's kept request lines)
                slow.info(UVICORN_ACCESS_MESSAGE, *args)
                fast.info(UVICORN_ACCESS_MESSAGE, *args)
            await asyncio.sleep(0)
            assert fast_out.getvalue() == slow_out.getvalue() != ""
            assert "AIzaSecret" not in fast_out.getvalue() and "sk-configured" not in fast_out.getvalue()


def test_any_other_access_log_setup_goes_through_logging():
    from llmbridge.gateway._accesslog import access_logger

    assert access_logger(served_access_logger(io.StringIO(), colors=True)).__class__ is logging.Logger
    logger = served_access_logger(io.StringIO())
    logger.addFilter(lambda record: True)  # a filter that does not say how it redacts
    assert access_logger(logger) is logger
    logger = served_access_logger(io.StringIO())
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    assert access_logger(logger) is logger


def test_lookup_headers_answer_as_starlettes_headers():
    from starlette.datastructures import Headers

    from llmbridge.gateway._hotpath import LookupHeaders

    raw = [(b"content-type", b"application/json"), (b"x-dup", b"first"), (b"x-dup", b"second"),
           (b"authorization", b"Bearer k"), (b"x-latin", "caf\u00e9".encode("latin-1"))]  # fmt: skip
    ours, theirs = LookupHeaders({"headers": raw}), Headers(scope={"headers": raw})
    for name in ("content-type", "Content-Type", "x-dup", "AUTHORIZATION", "x-latin", "absent", "x-api-key"):
        assert ours.get(name) == theirs.get(name)
        assert ours.get(name, "d") == theirs.get(name, "d")
        assert (name in ours) == (name in theirs)
        if name in theirs:
            assert ours[name] == theirs[name]
        else:
            with pytest.raises(KeyError):
                ours[name]
    assert ours.getlist("x-dup") == ["first", "second"] and list(ours.items()) == list(theirs.items())
    assert 1 not in ours


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_leaves_no_reference_cycle_for_the_collector(gw, stream):
    """Each request's objects go when it ends (reference counting), not at the next cyclic
    collection: a cycle per request (exchange -> on_end -> meter -> ticket -> exchange) made
    the collector cost ~10% of a request's CPU (issue 23). The server runs in this process."""
    paths = ["/v1/chat/completions", "/v1/messages", "/v1/responses"]

    def body(path: str) -> dict:
        if path == "/v1/responses":
            return {"model": "chat", "input": "hi", "stream": stream}
        return {**CHAT, "stream": stream}

    for path in paths:  # warm: imports, pools, caches
        assert _ask(gw, path, body(path)).status_code == 200
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to be named
    try:
        for _ in range(5):
            for path in paths:
                assert _ask(gw, path, body(path)).status_code == 200
        gc.collect()
        ours = [type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("llmbridge")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    # (the test's own httpx client leaves cycles of its own: only the gateway's objects count)
    assert ours == [], f"gateway objects in reference cycles: {sorted(set(ours))}"


def test_a_serving_process_freezes_what_it_started_with_and_collects_young_objects_less_often():
    from llmbridge.gateway._server import freeze_startup_objects

    assert gc.get_freeze_count() == 0  # (building apps, as the tests do, freezes nothing)
    threshold = gc.get_threshold()
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > 10_000  # the modules, their functions and classes at least
        assert gc.get_threshold() == (7_000, *threshold[1:])  # young collections ten times rarer
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "llmbridge": {"extensions": {"anthropic-messages:$order": [0, 1]}}, "stream": True},
        {"model": "m", "messages": [{"role": "user", "content": "hi", "llmbridge": {"x": 1}}]},
        {"llmbridge": None, "model": "m", "messages": [{"role": "user", "llmbridge": 2, "content": "llmbridge"}]},
        {"model": "m", "messages": [{"role": "user", "content": '"llmbridge"'}], "llmbridge": {"y": 1}},
    ],
)
def test_the_upstream_body_is_encoded_once_and_is_what_stripping_gives(body):
    """request_bytes takes a top-level key off before encoding (the translated case), and is
    byte for byte the stripped body, wherever the key stands."""
    import copy
    import types

    from llmbridge.dialects.base import strip_extensions

    upstream = HTTPUpstream(UpstreamConfig("u", "openai-chat", base_url="http://127.0.0.1:9/v1"))
    upstream.dialect = types.SimpleNamespace(encode_request=lambda request: copy.deepcopy(body))  # type: ignore[assignment]
    expected = json_encode(strip_extensions(copy.deepcopy(body))[0])
    assert upstream.request_bytes(hub.Request(model="m")) == expected
    assert b'"llmbridge":' not in expected
    kept = HTTPUpstream(UpstreamConfig("u", "openai-chat", base_url="http://127.0.0.1:9/v1", extensions=True))
    kept.dialect = upstream.dialect  # type: ignore[assignment]
    assert kept.request_bytes(hub.Request(model="m")) == json_encode(body)  # an upstream that takes it gets it


def test_a_served_gateway_opens_its_upstreams_spare_connections_before_the_first_request():
    """At start-up each HTTP upstream opens its spare connection (``spare_connections``, 1 by
    default), and the first request is sent on it: no handshake on the first token's path."""
    ports: list[int] = []
    upstream_app = replay.create_app(CORPUS, seed=1)

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            ports.append(scope["client"][1])  # the gateway's end of the connection
        await upstream_app(scope, receive, send)

    with serving(recording) as up:
        raw = replay_config(up.url, {"m": ("openai-chat", "hf-novita-text")})
        raw["upstreams"]["rep-gemini"]["spare_connections"] = 0
        app = create_app(config.parse(raw))
        with serving(app) as gw:
            upstreams = app.state.gateway.upstreams
            idle = lambda name: sum(map(len, upstreams[name].client._idle.values()))  # noqa: E731
            assert _eventually(lambda: idle("rep-chat") == 1 and idle("rep-anthropic") == 1)
            assert idle("rep-gemini") == 0  # turned off
            spare = next(iter(upstreams["rep-chat"].client._idle.values()))[0]
            spare_port = spare.transport.get_extra_info("sockname")[1]
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            answer = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=10)
            assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
            assert ports == [spare_port]
    with pytest.raises(config.ConfigError, match="spare_connections"):
        bad = {"u": {"format": "openai-chat", "base_url": up.url, "spare_connections": -1}}
        config.parse({**raw, "upstreams": bad})


def _eventually(predicate, timeout: float = 5.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
