"""The binary and WebSocket bindings on the real gateway (uvicorn on loopback), and the client SDK over them.

Upstreams: the replay server on the real corpus, and in-process upstreams where a test needs
a stream that never ends (a client that never reads).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from llmbridge import bindings, hub, replay
from llmbridge.client import AsyncClient, Client
from llmbridge.dialects import llm_stream
from llmbridge.dialects.base import decode_all
from llmbridge.errors import UpstreamError
from llmbridge.gateway import config, create_app
from tests.gateway_util import replay_config, serving, wait_for

CORPUS = Path(__file__).parent / "corpus"
HTTP = httpx.Client(timeout=30)
STD = {"content-type": "application/llm-request+json"}
BINARY = {**STD, "accept": bindings.BINARY_MEDIA_TYPE}
MODELS = {
    "text": ("anthropic-messages", "claude-text-simple"),
    "tool": ("anthropic-messages", "claude-sonnet4-text-then-tool-use"),
    "chat": ("openai-chat", "hf-novita-text"),
    "trunc": ("openai-chat", "hf-novita-text@truncate=700"),
    "stall": ("openai-chat", "hf-novita-text@stall=1"),
    "long": ("openai-chat", "hf-together-deepseek-r1-think-tags@delay-ms=20"),
}


@pytest.fixture(scope="module")
def servers():
    with serving(replay.create_app(CORPUS, seed=11)) as up:
        raw = replay_config(up.url, MODELS, gateway={"keepalive_seconds": 0.3})
        with serving(create_app(config.parse(raw, env={}))) as gw:
            yield gw, up


@pytest.fixture
def gw(servers):
    return servers[0]


@pytest.fixture
def stats(servers):
    return servers[1].app.state.replay.stats


def body(model: str, text: str = "hi", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def sse_events(gw, model: str) -> list[hub.Event]:
    r = HTTP.post(gw.url + "/v1/stream", json=body(model), headers=STD)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    return decode_all(llm_stream.StreamDecoder(), r.content)


def binary_events(gw, model: str) -> tuple[list[hub.Event], bytes]:
    r = HTTP.post(gw.url + "/v1/stream", json=body(model), headers=BINARY)
    assert r.status_code == 200
    assert r.headers["content-type"] == bindings.BINARY_MEDIA_TYPE
    decoder = bindings.BinaryStreamDecoder()
    events = decoder.feed(r.content) + decoder.close()
    assert decoder.violations == []
    return events, r.content


# --------------------------------------------------------------------------- binary over HTTP


@pytest.mark.parametrize("model", ["text", "tool", "chat"])
def test_binary_answer_carries_the_same_events_as_sse(gw, model):
    events, data = binary_events(gw, model)
    assert events == sse_events(gw, model)
    assert data[0] == 0x01  # stream.start's type byte first


def test_binary_answer_to_a_truncated_upstream_ends_with_error_and_stream_end_frames(gw):
    events, data = binary_events(gw, "trunc")
    assert type(events[-2]) is hub.Error and events[-2].type == "incomplete_stream"
    frames = bindings.FrameDecoder().feed(data)
    assert [f.type for f in frames[-2:]] == [0x06, 0x07]


def test_binary_keepalive_frames_while_the_upstream_is_silent(gw):
    events, data = binary_events(gw, "stall")
    decoder = bindings.FrameDecoder()
    decoder.feed(data)
    assert decoder.keepalives >= 1
    assert hub.assemble(events).complete


def test_errors_before_the_stream_stay_json_and_406(gw):
    r = HTTP.post(gw.url + "/v1/stream", json=body("no-such-model"), headers=BINARY)
    assert r.status_code == 404 and r.headers["content-type"] == "application/json"
    assert r.json()["error"]["type"] == "not_found"
    r = HTTP.post(gw.url + "/v1/stream", json=body("text"), headers={**STD, "accept": "image/png"})
    assert r.status_code == 406 and r.json()["error"]["code"] == "not_acceptable"
    # q-values: binary only when preferred at least as much as SSE
    r = HTTP.post(
        gw.url + "/v1/stream",
        json=body("text"),
        headers={**STD, "accept": f"{bindings.BINARY_MEDIA_TYPE};q=0.2, text/event-stream"},
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    # a non-streaming request is JSON whatever the Accept
    r = HTTP.post(gw.url + "/v1/stream", json=body("text", stream=False), headers=BINARY)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"


def test_binary_client_disconnect_cancels_the_upstream(gw, stats):
    target = "hf-together-deepseek-r1-think-tags@delay-ms=20"
    before = stats.cancelled.count(target)
    with HTTP.stream("POST", gw.url + "/v1/stream", json=body("long"), headers=BINARY) as r:
        for _ in r.iter_bytes():
            break
    assert wait_for(lambda: stats.cancelled.count(target) > before, timeout=5)


# --------------------------------------------------------------------------- WebSocket


def ws_url(gw) -> str:
    return gw.url.replace("http://", "ws://") + "/v1/stream"


def read_turn(ws) -> list[dict]:
    out = []
    while True:
        message = ws.recv(timeout=20)
        assert isinstance(message, str)
        out.append(json.loads(message))
        if out[-1]["type"] == "stream.end":
            return out


def test_websocket_several_turns_on_one_connection_match_sse(gw):
    with connect(ws_url(gw), subprotocols=[bindings.SUBPROTOCOL]) as ws:
        assert ws.subprotocol == bindings.SUBPROTOCOL
        for model in ("text", "tool", "chat"):
            ws.send(json.dumps(body(model)))
            decoder = bindings.MessageStreamDecoder()
            events = []
            for envelope in read_turn(ws):
                events += decoder.feed_message(json.dumps(envelope))
            events += decoder.close()
            assert decoder.violations == []
            assert events == sse_events(gw, model)


def test_websocket_cancel_stops_the_upstream_and_ends_the_turn(gw, stats):
    target = "hf-together-deepseek-r1-think-tags@delay-ms=20"
    before = stats.cancelled.count(target)
    with connect(ws_url(gw)) as ws:
        ws.send(json.dumps(body("long")))
        first = json.loads(ws.recv(timeout=20))
        assert first["type"] == "stream.start"
        ws.send(bindings.cancel_message())
        rest = read_turn(ws)
        assert [e["type"] for e in rest[-2:]] == ["error", "stream.end"]
        assert rest[-2]["error"]["type"] == "cancelled"
        seqs = [first["seq"]] + [e["seq"] for e in rest]
        assert seqs == list(range(len(seqs)))  # no gap even when the cancel lands between sends
        assert wait_for(lambda: stats.cancelled.count(target) > before, timeout=5)
        ws.send(json.dumps(body("text")))  # the connection serves the next turn
        assert read_turn(ws)[-1]["type"] == "stream.end"


def test_websocket_request_errors_are_failed_turns(gw):
    with connect(ws_url(gw)) as ws:
        for message, kind in [
            ("{oops", "invalid_request"),
            (json.dumps({"model": "text"}), "invalid_request"),  # no messages
            (json.dumps(body("nope")), "not_found"),
        ]:
            ws.send(message)
            turn = read_turn(ws)
            assert [e["type"] for e in turn] == ["stream.start", "error", "stream.end"]
            assert turn[1]["error"]["type"] == kind
        ws.send(json.dumps(body("text")))
        assert read_turn(ws)[-1]["type"] == "stream.end"


def test_websocket_truncated_upstream_ends_the_turn_with_error(gw):
    with connect(ws_url(gw)) as ws:
        ws.send(json.dumps(body("trunc")))
        turn = read_turn(ws)
        assert turn[-2]["type"] == "error" and turn[-2]["error"]["type"] == "incomplete_stream"


def close_code(ws) -> int | None:
    try:
        while True:
            ws.recv(timeout=10)
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd is not None else None


def test_websocket_binary_message_closes_1003(gw):
    with connect(ws_url(gw)) as ws:
        ws.send(b'{"model":"text"}')
        assert close_code(ws) == 1003


def test_websocket_request_while_streaming_closes_1008(gw):
    with connect(ws_url(gw)) as ws:
        ws.send(json.dumps(body("long")))
        ws.recv(timeout=20)
        ws.send(json.dumps(body("text")))
        assert close_code(ws) == 1008


def test_websocket_message_over_the_cap_closes_1009(servers):
    gw = servers[0]
    endpoint = gw.app.state.websocket
    endpoint.max_message = 4096
    try:
        with connect(ws_url(gw), max_size=None) as ws:
            ws.send(json.dumps(body("text", "x" * 5000)))
            assert close_code(ws) == 1009
    finally:
        endpoint.max_message = None


def test_websocket_auth():
    with serving(replay.create_app(CORPUS, seed=1)) as up:
        raw = replay_config(up.url, MODELS, gateway={"api_keys": ["sekrit"]})
        with serving(create_app(config.parse(raw, env={}))) as gw:
            from websockets.exceptions import InvalidStatus

            with pytest.raises(InvalidStatus) as exc:
                connect(ws_url(gw), additional_headers={"authorization": "Bearer wrong"}).close()
            assert exc.value.response.status_code == 401
            assert b"authentication" in exc.value.response.body
            with connect(ws_url(gw), additional_headers={"authorization": "Bearer sekrit"}) as ws:
                ws.send(json.dumps(body("text")))
                assert read_turn(ws)[-1]["type"] == "stream.end"
            with connect(ws_url(gw) + "?key=sekrit") as ws:  # browsers cannot set headers
                ws.send(json.dumps(body("text")))
                assert read_turn(ws)[-1]["type"] == "stream.end"


class Firehose:
    """An in-process upstream that never stops: 32 KiB deltas until it is closed."""

    name = "firehose"
    timeouts = config.Timeouts()

    def __init__(self) -> None:
        self.sent = 0
        self.closed = False

    async def stream(self, request: hub.Request):
        try:
            yield hub.ResponseStart(id="fh", model=request.model)
            yield hub.BlockStart(0, "text")
            while True:
                self.sent += 1
                yield hub.Delta(0, "y" * 32768)
                await asyncio.sleep(0)
        finally:
            self.closed = True


def test_websocket_client_that_never_reads_is_closed_4408_and_the_upstream_stops():
    up = Firehose()
    raw = {"upstreams": {"firehose": {"format": "local"}}, "models": [{"name": "fh", "upstream": "firehose"}]}
    app = create_app(config.parse(raw, env={}), upstreams={"firehose": up})
    app.state.websocket.send_timeout = 0.5
    with serving(app) as gw:
        sock = socket.create_connection(("127.0.0.1", gw.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            f"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 101")
        payload = json.dumps(body("fh")).encode()
        mask = os.urandom(4)
        masked = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
        assert len(payload) < 126  # the 7-bit length form (RFC 6455 wants the shortest one)
        sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
        # ... and never read.  The server's sends block, its limit passes, it gives up.
        assert wait_for(lambda: up.closed, timeout=20)
        sent = up.sent
        assert sent < 2000  # back-pressure held the upstream: it did not run ahead into memory
        sock.close()


# --------------------------------------------------------------------------- the client SDK


@pytest.mark.parametrize("binding", ["sse", "binary", "websocket"])
def test_client_sdk_bindings_give_the_same_completion(gw, binding):
    with Client(gw.url, binding=binding) as client:
        a = client.complete("text", "hi")
        b = client.complete("tool", "weather?")
        assert a.text and a.finish == "end_turn"
        assert b.tool_calls and b.tool_calls[0].name == "get_weather" and b.finish == "tool_use"
        with Client(gw.url) as sse_client:
            assert a.text == sse_client.complete("text", "hi").text


def test_client_sdk_websocket_closing_a_stream_cancels_and_keeps_the_connection(gw, stats):
    with Client(gw.url, binding="websocket") as client:
        stream = client.stream("long", "go")
        next(iter(stream))
        stream.close()
        assert client.complete("text", "hi").text  # same connection, next turn
        assert client._ws is not None and client._ws._ws is not None


def test_client_sdk_websocket_errors_raise(gw):
    with Client(gw.url, binding="websocket") as client:
        with pytest.raises(UpstreamError) as exc:
            client.complete("no-such", "hi")
        assert exc.value.type == "not_found"
        assert client.complete("text", "hi").text


def test_async_client_bindings(gw):
    async def main():
        out = []
        for binding in ("binary", "websocket"):
            async with AsyncClient(gw.url, binding=binding) as client:
                conv = client.conversation("text")
                out.append((await conv.complete("hi")).text)
                out.append((await conv.complete("again")).text)
        return out

    texts = asyncio.run(main())
    assert len(texts) == 4 and all(texts)


def test_binding_choice_is_checked():
    with pytest.raises(ValueError):
        Client("http://127.0.0.1:1", binding="carrier-pigeon")
    with pytest.raises(ValueError):
        Client("http://127.0.0.1:1", dialect="openai-chat", binding="binary")
