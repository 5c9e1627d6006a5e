"""Megabyte images on the gateway's own HTTP client: relayed byte for byte and translated
(Gemini ``inlineData`` → Images API) from an upstream that cuts them at odd places, a broken
byte deep inside one, the upstream's idle and first-byte clocks on images and embeddings;
and the SSE decoder's big-chunk paths (memchr searches) against its small-chunk ones."""

from __future__ import annotations

import asyncio
import base64
import json
import random

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmbridge import sse
from llmbridge.gateway import config, create_app
from tests.gateway_util import serving

HTTP = httpx.Client(timeout=30)
RNG = random.Random(15)
IMAGE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + RNG.randbytes(786_000)).decode()  # ~1 MB of base64
GONE: list[str] = []  # upstream image streams that ended, by model
PIECE = 70_001  # the upstream writes its body in pieces of this size: events cut anywhere


def _partial(i: int, image: str = IMAGE) -> bytes:
    obj = {"type": "image_generation.partial_image", "b64_json": image, "output_format": "png",
           "partial_image_index": i, "created_at": 1}  # fmt: skip
    return f"event: image_generation.partial_image\ndata: {json.dumps(obj)}\n\n".encode()


COMPLETED = {"type": "image_generation.completed", "b64_json": IMAGE, "output_format": "png", "created_at": 1,
             "usage": {"total_tokens": 3, "input_tokens": 1, "output_tokens": 2}}  # fmt: skip
DONE_EVENT = f"event: image_generation.completed\ndata: {json.dumps(COMPLETED)}\n\n".encode()
BODY = b"".join(_partial(i) for i in range(3)) + DONE_EVENT
BROKEN = _partial(0, IMAGE[:400_000] + "!" + IMAGE[400_001:])
GEMINI = (
    b'data: {"candidates":[{"content":{"parts":[{"text":"Here."}],"role":"model"},"index":0}]}\r\n\r\n'
    + b'data: {"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"'
    + IMAGE.encode()
    + b'"}}],"role":"model"},"finishReason":"STOP","index":0}],'
    + b'"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1290,"totalTokenCount":1295}}\r\n\r\n'
)


def _pieces(data: bytes) -> list[bytes]:
    return [data[i : i + PIECE] for i in range(0, len(data), PIECE)]


def upstream_app() -> Starlette:
    async def images(request: Request) -> Response:
        model = json.loads(await request.body())["model"]

        async def body():
            if model.startswith("stall"):  # one image, then silence
                try:
                    yield _partial(0)
                    await asyncio.sleep(60 if model == "stall-long" else 3)
                finally:
                    GONE.append(model)  # the gateway closed the connection (or the sleep ended)
            for piece in _pieces(BROKEN if model == "broken" else BODY):
                yield piece

        return StreamingResponse(body(), media_type="text/event-stream")

    async def gemini(request: Request) -> Response:
        await request.body()
        stall = "stall" in request.path_params["target"]

        async def body():
            for piece in _pieces(GEMINI):
                yield piece
                if stall:  # the text part, then silence
                    await asyncio.sleep(3)

        return StreamingResponse(body(), media_type="text/event-stream")

    async def embeddings(request: Request) -> Response:
        await request.body()
        await asyncio.sleep(3)  # never in time
        return Response("{}", media_type="application/json")

    return Starlette(
        routes=[
            Route("/v1/images/generations", images, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1beta/models/{target:path}", gemini, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def gw():
    with serving(upstream_app()) as up:
        tight = {"first_byte": 0.5, "idle": 0.5}
        raw = {
            "upstreams": {
                "oa": {"format": "openai-chat", "base_url": up.url + "/v1"},
                "gem": {"format": "gemini", "base_url": up.url},
                "tight": {"format": "openai-chat", "base_url": up.url + "/v1", "timeouts": tight},
                "gem-tight": {"format": "gemini", "base_url": up.url, "timeouts": tight},
            },
            "models": [
                {"name": "big", "upstream": "oa"},
                {"name": "broken", "upstream": "oa"},
                {"name": "gem-image", "upstream": "gem"},
                {"name": "stall", "upstream": "tight"},
                {"name": "stall-long", "upstream": "oa"},
                {"name": "slow-embed", "upstream": "tight"},
                {"name": "gem-stall", "upstream": "gem-tight"},
            ],
        }
        with serving(create_app(config.parse(raw))) as server:
            yield server


@pytest.fixture(scope="module")
def small(gw):
    """A gateway whose max_event_bytes is below one image event."""
    upstream = gw.app.state.gateway.config.upstreams["oa"].base_url
    raw = {
        "gateway": {"max_event_bytes": 500_000},
        "upstreams": {"oa": {"format": "openai-chat", "base_url": upstream}},
        "models": [{"name": "big", "upstream": "oa"}],
    }
    with serving(create_app(config.parse(raw))) as server:
        yield server


def _events(body: bytes) -> list[sse.Event]:
    decoder = sse.Decoder()
    return [*decoder.feed(body), *decoder.close()]


def test_megabyte_events_are_relayed_byte_for_byte(gw):
    r = HTTP.post(gw.url + "/v1/images", json={"model": "big", "prompt": "x", "stream": True})
    assert r.status_code == 200
    assert r.content == BODY + b"data: [DONE]\n\n"  # the upstream's own bytes, then the spec's [DONE]
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
    got = list(client.images.generate(model="big", prompt="x", stream=True, partial_images=3))
    assert [e.b64_json for e in got] == [IMAGE] * 4 and got[-1].usage.output_tokens == 2


def test_a_megabyte_gemini_image_is_translated_whole(gw):
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
    got = list(client.images.generate(model="gem-image", prompt="x", stream=True, n=2))
    assert [e.type for e in got] == ["image_generation.completed"] * 2
    assert all(e.b64_json == IMAGE for e in got)
    assert got[-1].usage.output_tokens == 1290
    whole = client.images.generate(model="gem-image", prompt="x")
    assert whole.data[0].b64_json == IMAGE and whole.data[0].revised_prompt == "Here."


def test_an_image_event_over_max_event_bytes_ends_the_stream(small):
    r = HTTP.post(small.url + "/v1/images", json={"model": "big", "prompt": "x", "stream": True})
    events = _events(r.content)
    assert [e.event for e in events] == ["error", "message"]
    assert "larger than 500000 bytes" in json.loads(events[0].data)["error"]["message"]


def test_a_broken_byte_deep_in_a_megabyte_image_is_an_error_event(gw, caplog):
    r = HTTP.post(gw.url + "/v1/images", json={"model": "broken", "prompt": "x", "stream": True})
    events = _events(r.content)
    assert [e.event for e in events] == ["error", "message"] and events[-1].data == "[DONE]"
    assert json.loads(events[0].data)["error"]["code"] == "bad_upstream_image"
    assert "Traceback" not in caplog.text


def test_an_image_upstream_gone_silent_ends_with_a_timeout_error_event(gw):
    r = HTTP.post(gw.url + "/v1/images", json={"model": "stall", "prompt": "x", "stream": True})
    events = [e for e in _events(r.content) if e.event != "keep-alive"]
    assert [e.event for e in events] == ["image_generation.partial_image", "error", "message"]
    error = json.loads(events[1].data)["error"]
    assert "sent nothing for 0.5 s" in error["message"] and events[-1].data == "[DONE]"


def test_a_gemini_image_upstream_gone_silent_ends_with_a_timeout_error_event(gw):
    r = HTTP.post(gw.url + "/v1/images", json={"model": "gem-stall", "prompt": "x", "stream": True})
    events = _events(r.content)
    assert [e.event for e in events] == ["error", "message"] and events[-1].data == "[DONE]"
    assert json.loads(events[0].data)["error"]["code"] == "upstream_timeout"


def test_a_client_gone_mid_image_stream_closes_the_upstream_at_once(gw):
    from tests.gateway_util import wait_for

    body = {"model": "stall-long", "prompt": "x", "stream": True}
    with HTTP.stream("POST", gw.url + "/v1/images", json=body) as r:
        got = b""
        for chunk in r.iter_bytes():
            got += chunk
            if b"\n\n" in got:
                break  # the first image is in: hang up while the upstream is silent
    assert got.startswith(b"event: image_generation.partial_image")
    # the upstream's 60 s silence is cut short: the gateway closed its connection
    assert wait_for(lambda: "stall-long" in GONE, timeout=30)


def test_an_embeddings_upstream_without_an_answer_is_a_504_in_openais_shape(gw):
    r = HTTP.post(gw.url + "/v1/embeddings", json={"model": "slow-embed", "input": "x"})
    assert r.status_code == 504 and "timed out" in r.json()["error"]["message"]


# --------------------------------------------------------------------------- the SSE decoder on big chunks


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("size", [4096, 4097, 65_536, 300_000])
def test_big_chunks_decode_as_small_ones(ending, size):
    """Chunks at or over the memchr threshold give the events small chunks give (which the
    property tests of test_sse hold to the WHATWG rules), whatever the line ends."""
    rng = random.Random(size)
    blocks = []
    for i in range(12):
        data = base64.b64encode(rng.randbytes(rng.choice([10, 5000, 90_000]))).decode()
        blocks.append(f"event: e{i}{ending.decode()}data: {data}{ending.decode()}id: {i}")
    body = (ending * 2).join(b.encode() for b in blocks) + ending * 2 + b"data: last"
    want = _decode(body, 100)
    assert [e.event for e in want] == [f"e{i}" for i in range(12)] + ["message"]
    assert _decode(body, size) == want


def _decode(body: bytes, size: int) -> list[sse.Event]:
    decoder = sse.Decoder()
    out = []
    for start in range(0, len(body), size):
        out += decoder.feed(body[start : start + size])
    return out + decoder.close()


def test_blank_line_and_cr_helpers_match_the_plain_operations():
    rng = random.Random(7)
    for _ in range(300):
        data = bytes(rng.choice(b"ab\n\r") for _ in range(rng.randrange(0, 12))) * rng.choice([1, 1000])
        assert sse.has_blank_line(data) == (b"\n\n" in data)
        assert sse.normalise_cr(data) == data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


# --------------------------------------------------------------------------- the heap


@pytest.mark.parametrize(
    ("env", "applied"),
    [({}, True), ({"LLMBRIDGE_HEAP": "system"}, False), ({"MALLOC_TRIM_THRESHOLD_": "131072"}, False)],
)
def test_megabyte_buffers_stay_on_the_heap_unless_the_operator_says_otherwise(env, applied):
    """gateway/_heap.py in a fresh process (mallopt is process-wide): applied on glibc, skipped
    when the operator set glibc's thresholds or asked for the system's defaults."""
    import os
    import platform
    import subprocess
    import sys

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "LLMBRIDGE_HEAP"}
    code = "from llmbridge.gateway import _heap as heap; print(heap.keep_large_buffers_on_heap())"
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(applied)


def test_event_boundaries_on_big_reads_match_the_plain_search():
    """sse.py's memchr paths (reads of 4 KiB and more) find the blank lines the plain
    separator search finds, for every line-end mix."""
    ends = sse.EventBoundaries._ENDS

    def last(data: bytes, start: int, stop: int) -> int:
        found = [at + len(sep) for sep in ends if (at := data.rfind(sep, start, stop)) >= 0]
        return max(found, default=-1)

    def following(data: bytes, start: int) -> int:
        found = [at + len(sep) for sep in ends if (at := data.find(sep, start)) >= 0]
        return min(found, default=len(data))

    rng = random.Random(11)
    for _ in range(400):
        alphabet = rng.choice([b"ab\n\r", b"abcdefgh\n", b"abcdefghij\r\n", b"x\r", b"abcdefghijklmnop"])
        data = bytes(rng.choice(alphabet) for _ in range(rng.choice([100, 5000, 20000])))
        start = rng.randrange(len(data))
        stop = rng.randrange(start, len(data) + 1)
        assert sse.last_event_end(data, start, stop) == last(data, start, stop)
        assert sse.next_event_end(data, start) == following(data, start)


def test_the_relay_skims_huge_events_at_their_ends_and_small_ones_whole():
    """A huge event (a base64 image) is looked at in its first and last 4 KiB for the relay's
    markers: its name and type at the head, what follows the payload (usage, finish_reason)
    at the tail; small events after it are searched whole, as before."""
    from llmbridge.gateway import _streaming as streaming

    markers = streaming.RELAY_MARKERS["openai-chat"]

    def chunk(content: str, tail: str = "") -> bytes:
        return f'data: {{"choices":[{{"index":0,"delta":{{"content":"{content}"}}{tail}}}]}}\n\n'.encode()

    huge = IMAGE[:300_000]
    data = (
        chunk(huge)  # no marker anywhere
        + chunk(huge[:150_000] + "error" + huge[150_000:])  # only payload: not looked at
        + chunk(huge, ',"finish_reason":"stop"')  # at the tail
        + chunk("small")
        + chunk("small", ',"finish_reason":"stop"')
        + b"data: [DONE]\n\n"
    )
    spans = sse.marked_events(data, 0, markers)
    events = [data[a:b] for a, b in spans]
    assert len(events) == 3
    assert events[0].endswith(b'"finish_reason":"stop"}]}\n\n') and len(events[0]) > 300_000
    assert events[1] == chunk("small", ',"finish_reason":"stop"') and events[2] == b"data: [DONE]\n\n"
    small = chunk("a") + chunk("b", ',"finish_reason":"stop"') + b"data: [DONE]\n\n"
    assert [small[a:b] for a, b in sse.marked_events(small, 0, markers)] == [
        chunk("b", ',"finish_reason":"stop"'),
        b"data: [DONE]\n\n",
    ]
