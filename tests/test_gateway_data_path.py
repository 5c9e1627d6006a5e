"""The gateway's data path against hostile upstreams and hasty clients (issue 11's hardening).

A raw upstream (asyncio, no framework) sends exactly the bytes a test scripts: huge events,
endless lines, error chunks without ``[DONE]``.  The gateway in front of it is a real uvicorn
server on loopback, read with plain httpx and with the official openai SDK.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
import socket
import threading
import time
import tracemalloc
import weakref
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from llmbridge import hub
from llmbridge.dialects import openai_chat
from llmbridge.gateway import config, create_app
from llmbridge.gateway._http import Inbox
from llmbridge.gateway._sources import Source
from llmbridge.gateway._streaming import Exchange, Options
from llmbridge.sse import EventBoundaries
from tests.gateway_util import StalledHead, serving, wait_for

HI = [{"role": "user", "content": "hi"}]
HTTP = httpx.Client(timeout=60)
CAP = 1 << 20  # the gateway's max_event_bytes in these tests


def chunk(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def chat_chunk(delta: dict, finish: str | None = None) -> bytes:
    return chunk(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


# Scripts: model name -> the body pieces the upstream sends (then it closes the body).
def big_event() -> Iterator[bytes]:
    yield chat_chunk({"role": "assistant", "content": ""})
    text = "x" * (CAP // 2)
    event = chat_chunk({"content": text})
    for i in range(0, len(event), 4096):  # one event in many small reads
        yield event[i : i + 4096]
    yield chat_chunk({}, "stop")
    yield b"data: [DONE]\n\n"


def endless_line() -> Iterator[bytes]:
    yield chat_chunk({"role": "assistant", "content": "hi"})
    yield b"data: {"
    for _ in range(4 * CAP // 65536):  # 4x the cap without a line end (the gateway must stop it)
        yield b"a" * 65536


def error_without_done() -> Iterator[bytes]:
    yield chat_chunk({"role": "assistant", "content": "partial "})
    yield chunk({"error": {"message": "upstream overloaded", "type": "server_error", "code": 503}})


def usage_then_done() -> Iterator[bytes]:
    yield chat_chunk({"role": "assistant", "content": "hello"})
    yield chat_chunk({}, "stop")
    yield b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
    yield b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n'
    yield b"data: [DONE]\n\n"


def drip() -> Iterator[bytes]:
    # A slow answer (the upstream's own thread sleeps between tokens): about 10 s in all.
    yield chat_chunk({"role": "assistant", "content": ""})
    for _ in range(500):
        time.sleep(0.02)
        yield chat_chunk({"content": "x"})
    yield chat_chunk({}, "stop")
    yield b"data: [DONE]\n\n"


SCRIPTS: dict[str, Callable[[], Iterator[bytes]]] = {
    "drip": drip,
    "big-event": big_event,
    "endless-line": endless_line,
    "error-without-done": error_without_done,
    "usage-then-done": usage_then_done,
}


class RawUpstream:
    """An HTTP/1.1 server on 127.0.0.1 that streams a script as chunked SSE, in its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.closed_early = 0  # bodies the client stopped reading before the end
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            model = json.loads(await reader.readexactly(length))["model"]
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                b"connection: close\r\n\r\n"
            )
            for piece in SCRIPTS[model]():
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_early += 1
        finally:
            writer.close()

    def start(self) -> RawUpstream:
        self.thread.start()
        self.ready.wait(5)
        return self

    def stop(self) -> None:
        async def end_connections() -> None:  # (one still waiting for a request: a spare)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(end_connections(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def upstream():
    raw = RawUpstream().start()
    yield raw
    raw.stop()


@pytest.fixture(scope="module")
def gw(upstream):
    raw = {
        "gateway": {"max_event_bytes": CAP},
        "upstreams": {"raw": {"format": "openai-chat", "base_url": f"http://127.0.0.1:{upstream.port}/v1"}},
        "models": [{"name": name, "upstream": "raw"} for name in SCRIPTS],
    }
    with serving(StalledHead(create_app(config.parse(raw)), 1.0)) as server:
        yield server


def chat(gw, model: str, **extra) -> httpx.Response:
    body = {"model": model, "messages": HI, "stream": True, **extra}
    return HTTP.post(gw.url + "/v1/chat/completions", json=body)


def messages(gw, model: str) -> httpx.Response:
    body = {"model": model, "messages": HI, "stream": True, "max_tokens": 16}
    return HTTP.post(gw.url + "/v1/messages", json=body)


def data_lines(body: bytes) -> list[bytes]:
    return [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]


# --------------------------------------------------------------------------- linear scans, capped events


def test_boundary_scan_looks_at_each_byte_once():
    # The old relay re-scanned its whole pending buffer on every read (quadratic: a 40 MiB
    # event took 30 s of CPU).  The scanner keeps three bytes of context, never the event.
    scan = EventBoundaries(1 << 30)
    for _ in range(2000):
        assert scan.feed(b"a" * 4096) == -1
        assert len(scan._tail) <= 3
    assert scan.pending == 2000 * 4096


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "translate"])
def test_a_large_event_in_small_reads_arrives_whole(gw, relay):
    r = chat(gw, "big-event", stream_options={"include_usage": True}) if relay else messages(gw, "big-event")
    assert r.status_code == 200
    if relay:
        chunks = [json.loads(d) for d in data_lines(r.content) if d.startswith(b"{")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert r.content.endswith(b"data: [DONE]\n\n")
    else:
        events = [json.loads(d) for d in data_lines(r.content)]
        text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
        assert events[-1]["type"] == "message_stop"
    assert text == "x" * (CAP // 2)


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "translate"])
def test_an_endless_line_ends_with_an_error_event_and_the_terminal_event(gw, relay):
    r = chat(gw, "endless-line") if relay else messages(gw, "endless-line")
    assert r.status_code == 200
    assert len(r.content) < CAP  # the oversized event never reached the client
    if relay:
        lines = data_lines(r.content)
        assert lines[-1] == b"[DONE]"
        error = json.loads(lines[-2])
        assert "larger than" in error["error"]["message"]
        assert error["choices"][0]["finish_reason"] == "error" if error.get("choices") else True
    else:
        events = [json.loads(d) for d in data_lines(r.content)]
        assert events[-1]["type"] == "error" and "larger than" in events[-1]["error"]["message"]


class Pushed(Source):
    """A source whose raw bytes the test puts in its inbox (as the HTTP protocol would)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.inbox = Inbox()
        self.decoder = openai_chat.StreamDecoder()

    async def aclose(self) -> None:
        pass


def test_relay_memory_does_not_grow_with_the_stream():
    # Relay state is the start, the open blocks and the usage: measured over 20,000 and then
    # 120,000 more relayed events, the traced memory stays where it was.
    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        source = Pushed("fake", config.Timeouts(first_byte=None, idle=None, total=None), loop.time())
        exchange = Exchange(source, openai_chat.StreamEncoder, Options(dialect="openai-chat", relay=True))
        token = chat_chunk({"content": "tok "})
        sent = 0

        def push(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                source.inbox.put(token, len(token))
            sent += n

        source.inbox.put(chat_chunk({"role": "assistant", "content": ""}), 10)
        body = exchange.body()
        push(20_000)
        await anext(body)
        tracemalloc.start()
        push(10_000)
        await anext(body)  # the same amount in flight at both measurements (the last write)
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(12):
            push(10_000)
            await anext(body)
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        await body.aclose()
        return before, after

    before, after = asyncio.run(run())
    assert after - before < 256 * 1024, (before, after)  # the old relay kept ~110 B per event: +13 MB


# --------------------------------------------------------------------------- errors and the chat terminal


def test_relayed_chat_error_chunk_is_followed_by_done(gw):
    # The gateway spec: a chat error mid-stream is an error chunk, and the stream still ends with [DONE].
    r = chat(gw, "error-without-done")
    lines = data_lines(r.content)
    assert lines[-1] == b"[DONE]" and lines.count(b"[DONE]") == 1
    assert json.loads(lines[-2])["error"]["message"] == "upstream overloaded"
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
    with pytest.raises(openai.APIError, match="upstream overloaded"):
        for _ in client.chat.completions.create(model="error-without-done", messages=HI, stream=True):
            pass


def test_usage_reaches_a_chat_client_that_did_not_ask_with_one_empty_choice(gw):
    r = chat(gw, "usage-then-done")
    chunks = [json.loads(d) for d in data_lines(r.content) if d.startswith(b"{")]
    assert all(len(c["choices"]) == 1 for c in chunks)
    assert chunks[-1]["usage"]["total_tokens"] == 4 and chunks[-1]["choices"][0]["delta"] == {}
    asked = chat(gw, "usage-then-done", stream_options={"include_usage": True})
    assert json.loads(data_lines(asked.content)[-2])["choices"] == []


# --------------------------------------------------------------------------- the log after hasty clients


def test_clients_that_close_at_done_leave_no_traceback_in_the_log(gw, caplog):
    caplog.set_level(logging.DEBUG)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
    for _ in range(30):
        stream = client.chat.completions.create(model="usage-then-done", messages=HI, stream=True)
        for c in stream:
            if not c.choices or c.choices[0].finish_reason:
                break
        stream.close()  # at once, as LangChain's use of the SDK does
    for _ in range(10):
        with HTTP.stream(
            "POST", gw.url + "/v1/chat/completions", json={"model": "big-event", "messages": HI, "stream": True}
        ) as r:
            next(r.iter_bytes())  # and some that leave mid-stream
    text = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "Traceback" not in text and "never retrieved" not in text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], text


def test_hub_error_status_of_a_capped_event_is_a_gateway_error():
    scan = EventBoundaries(8)
    scan.feed(b"data: 123456789")
    assert scan.over
    assert hub.ERROR_STATUS.get("api_error", 500) >= 500


@pytest.mark.parametrize("model", ["usage-then-done", "big-event"])
def test_the_relay_still_notes_usage_and_finish(gw, caplog, model):
    # The watcher decodes only stretches that can hold usage, a finish or an error: they must
    # still be noted (the log line, the usage ledger and the recorder read them).
    caplog.set_level(logging.INFO, logger="llmbridge.gateway")
    r = chat(gw, model)
    assert r.status_code == 200
    lines = [rec.getMessage() for rec in caplog.records if "(relayed)" in rec.getMessage()]
    assert lines and "finish=end_turn" in lines[-1], lines
    if model == "usage-then-done":
        assert "tokens in=3 out=1" in lines[-1]


def test_an_in_process_upstream_waits_for_a_slow_client():
    # Back-pressure: the pump that moves an in-process upstream's events stops once
    # EVENTS_AHEAD are waiting, so a fast upstream cannot run ahead of its client into memory.
    from llmbridge.gateway._sources import EVENTS_AHEAD, EventSource

    produced = 0

    async def firehose():
        nonlocal produced
        yield hub.ResponseStart()
        yield hub.BlockStart(0, "text")
        while True:
            produced += 1
            yield hub.Delta(0, "x")

    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        source = EventSource(firehose(), "fast", config.Timeouts(), loop.time())
        await asyncio.sleep(0.2)  # nobody takes
        held = produced
        source.inbox.take()
        await asyncio.sleep(0.05)
        more = produced
        await source.aclose()
        return held, more

    held, more = asyncio.run(run())
    assert held <= EVENTS_AHEAD + 1
    assert more > held  # taking makes room: it carries on


def test_a_client_gone_before_the_first_body_byte_closes_the_upstream(gw, upstream):
    # The client leaves while the response head is still on its way (held back a second here,
    # as a full socket buffer would): the response is cancelled before its body generator ever
    # ran, and that generator's cleanup with it.  The gateway must still close the upstream
    # (and so settle the request), not leave it streaming to nobody.
    before, stalls = upstream.closed_early, gw.app.stalled
    body = json.dumps({"model": "drip", "messages": HI, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", gw.port)) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
            b"x-test-stall-head: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        # leave while the head is held back (the upstream has answered by then)
        assert wait_for(lambda: gw.app.stalled == stalls + 1, timeout=10)
    assert wait_for(lambda: upstream.closed_early > before, timeout=5)


def test_an_ended_exchange_is_freed_without_the_cyclic_gc():
    # An exchange's timers (deadlines, keep-alive) call back into it, and it holds them: a
    # cycle. Left to the cyclic GC, which runs by object counts and not bytes, every ended
    # exchange kept its held events and decoder state (megabytes for an image answer) for a
    # while: RSS climbed from 50 to 430 MB over 40 image answers. With the GC off, an ended
    # exchange must go when its last reference does.
    async def run() -> tuple[weakref.ref, weakref.ref]:
        loop = asyncio.get_running_loop()
        timeouts = config.Timeouts(first_byte=60, idle=60, total=600)
        source = Pushed("fake", timeouts, loop.time())
        exchange = Exchange(source, openai_chat.StreamEncoder, Options(dialect="openai-chat", relay=True, keepalive=15))
        source.inbox.put(chat_chunk({"role": "assistant", "content": ""}), 10)
        source.inbox.put(chat_chunk({"content": "x" * 100_000}), 10)
        source.inbox.put(chat_chunk({}, "stop") + b"data: [DONE]\n\n", 10)
        source.inbox.finish()
        body = [out async for out in exchange.body()]
        assert b"[DONE]" in b"".join(body)
        return weakref.ref(exchange), weakref.ref(source.decoder)

    gc.disable()
    try:
        gone, decoder = asyncio.run(run())
        assert gone() is None
        assert decoder() is None
    finally:
        gc.enable()


_WHOLE_ANSWERS = {
    "complete": [
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": "Hi"}),
        chat_chunk({"content": " there"}),
        chat_chunk({}, "stop"),
        chunk("[DONE]"),
    ],
    "no [DONE]": [chat_chunk({"role": "assistant", "content": "Hi"}), chat_chunk({}, "stop")],
    "cut off": [chat_chunk({"role": "assistant", "content": "Hi"}), b'data: {"id": "chatc'],
}


@pytest.mark.parametrize("answer", list(_WHOLE_ANSWERS))
@pytest.mark.parametrize("relay", [True, False])
def test_an_answer_complete_while_priming_goes_out_whole_as_body_would_stream_it(answer, relay):
    """Exchange.whole() (one write with the head: issue 23) is exactly what body() yields."""
    from llmbridge.dialects import anthropic_messages

    async def run(whole: bool) -> bytes:
        loop = asyncio.get_running_loop()
        source = Pushed("fake", config.Timeouts(first_byte=None, idle=None, total=None), loop.time())
        dialect, encoder = (
            ("openai-chat", openai_chat.StreamEncoder)
            if relay
            else ("anthropic-messages", anthropic_messages.StreamEncoder)
        )
        exchange = Exchange(source, encoder, Options(dialect=dialect, relay=relay))
        for piece in _WHOLE_ANSWERS[answer]:
            source.inbox.put(piece, len(piece))
        source.inbox.finish()
        assert await exchange.prime() is None
        if whole:
            out = exchange.whole()
            assert out is not None and exchange.finished
            await exchange.aclose()
            return out
        return b"".join([part async for part in exchange.body()])

    streamed, whole = asyncio.run(run(False)), asyncio.run(run(True))
    assert whole == streamed and whole


def test_an_answer_still_arriving_is_not_whole():
    async def run() -> None:
        loop = asyncio.get_running_loop()
        source = Pushed("fake", config.Timeouts(first_byte=None, idle=None, total=None), loop.time())
        exchange = Exchange(source, openai_chat.StreamEncoder, Options(dialect="openai-chat", relay=True))
        source.inbox.put(chat_chunk({"role": "assistant", "content": "Hi"}), 10)
        assert await exchange.prime() is None
        assert exchange.whole() is None
        source.inbox.put(chat_chunk({}, "stop") + chunk("[DONE]"), 10)
        source.inbox.finish()
        rest = b"".join([part async for part in exchange.body()])
        assert b'"Hi"' in rest and rest.endswith(b"data: [DONE]\n\n") and b"error" not in rest

    asyncio.run(run())


@pytest.mark.parametrize("got_data_first", [True, False])
def test_deadlines_are_armed_at_the_first_wait_and_count_from_the_start(got_data_first):
    """An answer all in when its exchange starts arms no timer; one that is not gets the
    upstream's deadlines at its first wait, due from ``started`` (not from the wait): an idle
    deadline once the first data is in, the first-byte one before it."""

    async def whole_answer() -> None:
        loop = asyncio.get_running_loop()
        source = Pushed("fake", config.Timeouts(first_byte=0.05, idle=0.05, total=1), loop.time())
        exchange = Exchange(source, openai_chat.StreamEncoder, Options(dialect="openai-chat", relay=True))
        answer = chat_chunk({"role": "assistant", "content": "Hi"}) + chat_chunk({}, "stop") + chunk("[DONE]")
        source.inbox.put(answer, len(answer))
        source.inbox.finish()
        assert await exchange.prime() is None
        assert exchange.whole() is not None
        await exchange.aclose()
        assert exchange._deadlines is None

    async def stalled() -> bytes:
        loop = asyncio.get_running_loop()
        source = Pushed("fake", config.Timeouts(first_byte=0.3, idle=0.05, total=10), loop.time())
        exchange = Exchange(source, openai_chat.StreamEncoder, Options(dialect="openai-chat", relay=True))
        if got_data_first:  # the start is in, then nothing: the idle deadline ends it
            source.inbox.put(chat_chunk({"role": "assistant", "content": "Hi"}), 10)
        else:  # nothing at all: the first-byte deadline ends it, counted from ``started``
            await asyncio.sleep(0.2)
        began = loop.time()
        error = await exchange.prime()
        if error is not None:
            await exchange.aclose()
            assert error.status == 504 and "within 0.3 s" in error.message
            assert loop.time() - began < 0.25  # due 0.3 s after ``started``, 0.2 s before the wait
            return b""
        out = b"".join([part async for part in exchange.body()])
        assert exchange._deadlines is not None and exchange._deadlines.missed is not None
        return out

    asyncio.run(whole_answer())
    out = asyncio.run(stalled())
    if got_data_first:
        assert b"sent nothing for 0.05 s" in out and out.endswith(b"data: [DONE]\n\n")


def test_one_keepalive_timer_serves_a_slow_start_and_the_stream_after_it():
    """A start slower than the keep-alive interval: prime returns on the keep-alive, and the
    same timer (armed while priming: the deadlines' own) goes on raising keep-alives while the
    stream is silent."""

    async def run() -> list[tuple[float, bytes]]:
        loop = asyncio.get_running_loop()
        source = Pushed("fake", config.Timeouts(first_byte=None, idle=None, total=None), loop.time())
        exchange = Exchange(
            source, openai_chat.StreamEncoder, Options(dialect="openai-chat", relay=True, keepalive=0.05)
        )
        role = chat_chunk({"role": "assistant", "content": ""})
        source.inbox.put(role, len(role))  # the start, no content yet
        assert await exchange.prime() is None  # slow to start: after one keep-alive interval
        timer = exchange._deadlines
        assert timer is not None
        began = loop.time()
        got: list[tuple[float, bytes]] = []
        body = exchange.body()
        while len(got) < 4:  # the start (held while priming), then keep-alives
            part = await body.__anext__()
            got.append((loop.time() - began, part))
        assert exchange._deadlines is timer
        rest = chat_chunk({"content": "Hi"}) + chat_chunk({}, "stop") + chunk("[DONE]")
        source.inbox.put(rest, len(rest))
        source.inbox.finish()
        async for part in body:
            got.append((loop.time() - began, part))
        return got

    got = asyncio.run(run())
    assert got[0][1] == chat_chunk({"role": "assistant", "content": ""})
    assert [part for _, part in got[1:4]] == [b": keep-alive\n\n"] * 3
    assert all(0.03 < b[0] - a[0] < 0.2 for a, b in itertools.pairwise(got[:4]))  # one per interval
    assert b"".join(part for _, part in got[4:]).endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("tokens", [2, 40])  # a first read decoded whole (short), or event by event (long)
def test_a_relay_broken_off_after_its_first_read_ends_with_the_error_and_done(tokens):
    """Whichever way the first read was watched, the relay knows its start and open blocks,
    usage and finish so far: a break-off after it still ends with an error chunk and [DONE]."""

    async def run() -> tuple[bytes, Exchange]:
        loop = asyncio.get_running_loop()
        source = Pushed("fake", config.Timeouts(first_byte=None, idle=None, total=None), loop.time())
        exchange = Exchange(source, openai_chat.StreamEncoder, Options(dialect="openai-chat", relay=True))
        first = chat_chunk({"role": "assistant", "content": ""}) + b"".join(
            chat_chunk({"content": f"tok{i} "}) for i in range(tokens)
        )
        source.inbox.put(first, len(first))
        assert await exchange.prime() is None
        assert exchange.whole() is None
        body = exchange.body()
        out = await body.__anext__()
        source.inbox.finish(ConnectionResetError("gone"))
        out += b"".join([part async for part in body])
        return out, exchange

    out, exchange = asyncio.run(run())
    events = data_lines(out)
    assert events[-1] == b"[DONE]" and "error" in json.loads(events[-2])
    assert out.startswith(chat_chunk({"role": "assistant", "content": ""}) + chat_chunk({"content": "tok0 "}))
    assert exchange.error is not None and exchange.ended
