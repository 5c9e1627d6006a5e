"""Gateway CPU per 1 MB partial-image event: ``python -m bench images``.

Issue 15's bench: "a 1 MB base64 event must not cost more than copying it a few times". A fast
upstream (its own process, ``--upstream``) serves

- ``POST /v1/images/generations``: an OpenAI Images stream of 20 partial images and the final
  one, ~1 MB of base64 each (model ``img-20``);
- ``POST /v1beta/models/{m}:streamGenerateContent?alt=sse``: a Gemini answer with one
  ``inlineData`` image of the same size (a text part, the image part, usage).

and ``llmbridge serve`` (its own process) stands in front of it. Measured, in one run:

1. **relayed**: ``/v1/images`` to the OpenAI upstream (each event checked, relayed byte for byte);
2. **translated**: ``/v1/images`` with ``n = 10`` to the Gemini upstream (its hub image blocks
   re-written as ``image_generation.completed`` events);
3. both again on a gateway left on glibc's own malloc thresholds (``LLMBRIDGE_HEAP=system``,
   see ``gateway/_heap.py``), and the gateways' RSS after the runs;
4. **floors**: a plain relay process (``--relay``: Starlette + httpx, bytes passed through
   untouched, no parsing, no check) and a socket pipe (``--pipe``: bytes between two sockets
   and nothing else), the same upstream stream;
5. in process: the sans-I/O pieces (``ImageStreamDecoder``: framing, the base64 check, the
   relay bytes; the Gemini decoder + ``HubImages`` + ``encode_event`` of the translation).

The gateway's CPU per event is utime + stime of its process from /proc over 5 requests
(after one warm-up), as a multiple of one memcpy of the same 1 MB measured in this process in
the same run (a bytes slice, the best of 5). Interleaved rounds; the median is printed.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import ROOT, best_of, table
from bench.gateway_bench import BIN, Server, _port, _start

PARTIALS = 20
RUNS = 5
ROUNDS = 3
GEMINI_N = 10


def _image() -> str:
    # Random bytes behind a PNG signature: incompressible, ~1 MB once in base64.
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + os.urandom(786_000)).decode()


def serve_upstream(port: int) -> None:
    """The fast upstream (runs in its own process)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    image = _image()

    def partial(i: int) -> bytes:
        obj = {
            "type": "image_generation.partial_image",
            "b64_json": image,
            "created_at": 0,
            "size": "1024x1024",
            "quality": "low",
            "background": "opaque",
            "output_format": "png",
            "partial_image_index": i,
        }
        return f"event: image_generation.partial_image\ndata: {json.dumps(obj)}\n\n".encode()

    events = [partial(i) for i in range(PARTIALS)]
    done = {
        "type": "image_generation.completed",
        "b64_json": image,
        "created_at": 0,
        "output_format": "png",
        "usage": {"total_tokens": 2, "input_tokens": 1, "output_tokens": 1},
    }
    events.append(f"event: image_generation.completed\ndata: {json.dumps(done)}\n\n".encode())
    text = {"candidates": [{"content": {"parts": [{"text": "Here it is."}], "role": "model"}, "index": 0}]}
    picture = {
        "candidates": [
            {
                "content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": image}}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1290, "totalTokenCount": 1295},
    }
    gemini = [f"data: {json.dumps(text)}\r\n\r\n".encode(), f"data: {json.dumps(picture)}\r\n\r\n".encode()]

    item = "ig_0123456789abcdef"
    head = {
        "id": "resp_0123",
        "object": "response",
        "created_at": 0,
        "model": "gpt-image-bench",
        "status": "in_progress",
    }

    def resp(kind: str, seq: int, **fields: Any) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq, **fields})}\n\n".encode()

    responses = [
        resp("response.created", 0, response=head),
        resp("response.output_item.added", 1, output_index=0,
             item={"id": item, "type": "image_generation_call", "status": "in_progress"}),
        *(
            resp("response.image_generation_call.partial_image", 2 + i, output_index=0, item_id=item,
                 partial_image_index=i, partial_image_b64=image)
            for i in range(PARTIALS)
        ),
        resp("response.output_item.done", PARTIALS + 2, output_index=0,
             item={"id": item, "type": "image_generation_call", "status": "completed", "output_format": "png",
                   "result": image}),
        resp("response.completed", PARTIALS + 3, response={**head, "status": "completed",
             "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}}),
    ]  # fmt: skip

    async def responses_stream(request: Request) -> Response:
        await request.body()

        async def body() -> Any:
            for event in responses:
                yield event

        return StreamingResponse(body(), media_type="text/event-stream")

    async def images(request: Request) -> Response:
        await request.body()

        async def body() -> Any:
            for event in events:
                yield event

        return StreamingResponse(body(), media_type="text/event-stream")

    async def generate(request: Request) -> Response:
        await request.body()

        async def body() -> Any:
            for event in gemini:
                yield event

        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(
        routes=[
            Route("/v1/images/generations", images, methods=["POST"]),
            Route("/v1/images", images, methods=["POST"]),  # for the pipe, which forwards the path as it is
            Route("/v1/responses", responses_stream, methods=["POST"]),
            Route("/v1beta/models/{target:path}", generate, methods=["POST"]),
            Route("/health", lambda r: Response("ok"), methods=["GET"]),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def serve_relay(port: int, upstream_port: int) -> None:
    """The floor: Starlette + httpx passing the upstream's image stream through untouched."""
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    client = httpx.AsyncClient(timeout=None)

    async def images(request: Request) -> Response:
        body = await request.body()
        req = client.build_request(
            "POST",
            f"http://127.0.0.1:{upstream_port}/v1/images/generations",
            content=body,
            headers={"content-type": "application/json"},
        )
        upstream = await client.send(req, stream=True)

        async def relay() -> Any:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

        return StreamingResponse(relay(), media_type="text/event-stream")

    app = Starlette(
        routes=[
            Route("/v1/images", images, methods=["POST"]),
            Route("/health", lambda r: Response("ok"), methods=["GET"]),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def serve_pipe(port: int, upstream_port: int) -> None:
    """The floor of any relay: bytes moved between two sockets and nothing else (asyncio
    protocols on uvloop, as the gateway runs; the client's request forwarded as it is, the
    upstream's answer written back as it comes; one upstream connection per client one)."""
    import asyncio

    import uvloop

    class Back(asyncio.Protocol):
        def __init__(self, front: asyncio.Transport) -> None:
            self.front = front

        def data_received(self, data: bytes) -> None:
            self.front.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self.front.close()

    class Front(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport
            self.back: Any = None
            self.queued: list[bytes] = []
            self.connecting = asyncio.ensure_future(self._connect())

        async def _connect(self) -> None:
            loop = asyncio.get_running_loop()
            self.back, _ = await loop.create_connection(lambda: Back(self.transport), "127.0.0.1", upstream_port)
            for data in self.queued:
                self.back.write(data)

        def data_received(self, data: bytes) -> None:
            if self.back is None:
                self.queued.append(data)
            else:
                self.back.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.back is not None:
                self.back.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Front, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def _cpu_per_event(
    client: Any, server: Server, url: str, body: dict[str, Any], events: int, marker: bytes = b"event: image_generation"
) -> float:
    """CPU seconds of ``server`` per image event over RUNS streamed requests (``events`` of
    them per answer, each holding ``marker``)."""
    client.post(url, json=body).raise_for_status()  # warm up
    cpu0 = server.cpu()
    for _ in range(RUNS):
        r = client.post(url, json=body)
        got = r.content.count(marker)
        assert r.status_code == 200 and got == events, (r.status_code, got, r.content[-300:])
    return (server.cpu() - cpu0) / (RUNS * events)


def served() -> dict[str, float]:
    """Median CPU seconds per event of each served path; the gateways' RSS (MB) after."""
    import httpx

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        up_port, gw_port, relay_port = _port(), _port(), _port()
        env = {"PYTHONPATH": str(ROOT)}
        upstream = _start(
            "upstream",
            [sys.executable, "-m", "bench.image_bench", "--upstream", str(up_port)],
            f"http://127.0.0.1:{up_port}/health",
            tmp,
            env,
        )
        (tmp / "gw.toml").write_text(
            f"""
[upstreams.fast]
format = "openai-chat"
base_url = "http://127.0.0.1:{up_port}/v1"

[upstreams.gem]
format = "gemini"
base_url = "http://127.0.0.1:{up_port}"

[upstreams.resp]
format = "openai-responses"
base_url = "http://127.0.0.1:{up_port}/v1"

[[models]]
name = "img-20"
upstream = "fast"

[[models]]
name = "resp-image"
upstream = "resp"

[[models]]
name = "gem-image"
upstream = "gem"
"""
        )
        gw = _start(
            "gateway",
            [str(BIN / "llmbridge"), "serve", "--config", str(tmp / "gw.toml"), "--port", str(gw_port)],
            f"http://127.0.0.1:{gw_port}/healthz",
            tmp,
        )
        plain_port = _port()  # the same gateway on glibc's own malloc thresholds (gateway/_heap.py)
        plain = _start(
            "gateway-system-heap",
            [str(BIN / "llmbridge"), "serve", "--config", str(tmp / "gw.toml"), "--port", str(plain_port)],
            f"http://127.0.0.1:{plain_port}/healthz",
            tmp,
            {"LLMBRIDGE_HEAP": "system"},
        )
        pipe_port = _port()
        pipe = _start(
            "pipe",
            [sys.executable, "-m", "bench.image_bench", "--pipe", str(pipe_port), str(up_port)],
            f"http://127.0.0.1:{pipe_port}/health",
            tmp,
            env,
        )
        relay = _start(
            "relay",
            [sys.executable, "-m", "bench.image_bench", "--relay", str(relay_port), str(up_port)],
            f"http://127.0.0.1:{relay_port}/health",
            tmp,
            env,
        )
        got: dict[str, list[float]] = {
            "relayed": [], "translated": [], "floor": [], "pipe": [], "relayed-system": [], "translated-system": [],
            "chat-relayed": [], "chat-translated": [], "chat-relayed-system": [], "chat-translated-system": [],
        }  # fmt: skip
        responses = {"model": "resp-image", "input": "x", "stream": True}
        gemini_client = {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}
        to_gemini = f"http://127.0.0.1:{gw_port}/v1beta/models/resp-image:streamGenerateContent?alt=sse"
        to_gemini_plain = to_gemini.replace(str(gw_port), str(plain_port))
        stream = {"model": "img-20", "prompt": "x", "stream": True, "partial_images": 3}
        gemini = {"model": "gem-image", "prompt": "x", "stream": True, "n": GEMINI_N}
        try:
            with httpx.Client(timeout=120) as client:
                for _ in range(ROUNDS):  # interleaved, so that the machine's load weighs on all alike
                    got["relayed"].append(
                        _cpu_per_event(client, gw, f"http://127.0.0.1:{gw_port}/v1/images", stream, PARTIALS + 1)
                    )
                    got["translated"].append(
                        _cpu_per_event(client, gw, f"http://127.0.0.1:{gw_port}/v1/images", gemini, GEMINI_N)
                    )
                    got["chat-relayed"].append(
                        _cpu_per_event(
                            client,
                            gw,
                            f"http://127.0.0.1:{gw_port}/v1/responses",
                            responses,
                            PARTIALS,
                            b'"partial_image_b64"',
                        )
                        * PARTIALS
                        / (PARTIALS + 1)  # per image event: the 20 partials and the final item
                    )
                    # (Gemini has no partial images: the client gets the final one; per upstream image event)
                    got["chat-translated"].append(
                        _cpu_per_event(client, gw, to_gemini, gemini_client, 1, b'"inlineData"') / (PARTIALS + 1)
                    )
                    got["chat-relayed-system"].append(
                        _cpu_per_event(
                            client,
                            plain,
                            f"http://127.0.0.1:{plain_port}/v1/responses",
                            responses,
                            PARTIALS,
                            b'"partial_image_b64"',
                        )
                        * PARTIALS
                        / (PARTIALS + 1)  # per image event: the 20 partials and the final item
                    )
                    got["chat-translated-system"].append(
                        _cpu_per_event(client, plain, to_gemini_plain, gemini_client, 1, b'"inlineData"')
                        / (PARTIALS + 1)
                    )
                    got["relayed-system"].append(
                        _cpu_per_event(client, plain, f"http://127.0.0.1:{plain_port}/v1/images", stream, PARTIALS + 1)
                    )
                    got["translated-system"].append(
                        _cpu_per_event(client, plain, f"http://127.0.0.1:{plain_port}/v1/images", gemini, GEMINI_N)
                    )
                    got["pipe"].append(
                        _cpu_per_event(client, pipe, f"http://127.0.0.1:{pipe_port}/v1/images", stream, PARTIALS + 1)
                    )
                    got["floor"].append(
                        _cpu_per_event(client, relay, f"http://127.0.0.1:{relay_port}/v1/images", stream, PARTIALS + 1)
                    )
            rss = {"rss": gw.memory() / 2**20, "rss-system": plain.memory() / 2**20}
        finally:
            plain.stop()
            pipe.stop()
            relay.stop()
            gw.stop()
            upstream.stop()
    return {**{k: statistics.median(v) for k, v in got.items()}, **rss}


def in_process() -> dict[str, float]:
    """CPU seconds of the sans-I/O pieces for one 1 MB event."""
    from llmbridge.media import _ALPHABET, ImageStreamDecoder

    image = _image()
    payload = image.encode()
    wire = (
        "event: image_generation.partial_image\ndata: "
        + json.dumps(
            {
                "type": "image_generation.partial_image",
                "b64_json": image,
                "output_format": "png",
                "partial_image_index": 0,
            }
        )
        + "\n\n"
    ).encode()
    pieces = [wire[i : i + 65536] for i in range(0, len(wire), 65536)]

    def decode() -> None:
        decoder = ImageStreamDecoder("bench")
        for piece in pieces:
            decoder.feed(piece)

    from llmbridge import dialects
    from llmbridge.gateway._images import HubImages, ImageRequest, encode_event

    gemini = (
        b'data: {"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"'
        + payload
        + b'"}}],"role":"model"},"finishReason":"STOP","index":0}]}\r\n\r\n'
    )
    gemini_pieces = [gemini[i : i + 262144] for i in range(0, len(gemini), 262144)]
    codec = dialects.get("gemini")

    def translate() -> None:
        decoder = codec.StreamDecoder()
        reader = HubImages("bench", ImageRequest("m", "x"))
        out = []
        for piece in gemini_pieces:
            for event in decoder.feed(piece):
                out += reader.feed(event)
        for event in decoder.close():
            out += reader.feed(event)
        assert len(out) == 1, out
        encode_event(out[0], 0)  # type: ignore[arg-type]

    keep = _ALPHABET + b"="
    # A copy as the gateway makes one: from bytes not in the cache (a rotating pool of 64 MB)
    # into a fresh allocation (what a socket read or a join gets). The hot memcpy (the same
    # 1 MB again and again, in the cache) is the yardstick; this one is what a copy
    # costs in a serving process.
    pool = [os.urandom(len(payload)) for _ in range(64)]
    turn = [0]

    def cold() -> None:
        turn[0] = (turn[0] + 1) % len(pool)
        bytearray(pool[turn[0]])

    return {
        "memcpy": best_of(lambda: payload[1:]),
        "cold": best_of(cold),
        "decoder": best_of(decode),
        "translate": best_of(translate),
        "join": best_of(lambda: b"".join(pieces)),
        "check": best_of(lambda: payload.translate(None, keep)),
    }


def run() -> str:
    from llmbridge.gateway import _heap as heap

    heap.keep_large_buffers_on_heap()  # the in-process rows under the gateway's own malloc thresholds
    core = in_process()
    per = served()
    copy = core["memcpy"]
    rows = [
        ["gateway, relayed (OpenAI Images upstream -> /v1/images)", per["relayed"] * 1000, per["relayed"] / copy],
        ["  the same, glibc's default malloc thresholds", per["relayed-system"] * 1000, per["relayed-system"] / copy],
        ["gateway, translated (Gemini inlineData -> /v1/images)", per["translated"] * 1000, per["translated"] / copy],
        ["  the same, glibc's defaults", per["translated-system"] * 1000, per["translated-system"] / copy],
        [
            "chat path: Responses image_generation stream relayed",
            per["chat-relayed"] * 1000,
            per["chat-relayed"] / copy,
        ],
        ["  the same, glibc's defaults", per["chat-relayed-system"] * 1000, per["chat-relayed-system"] / copy],
        ["chat path: the same stream to a Gemini client", per["chat-translated"] * 1000, per["chat-translated"] / copy],
        ["  the same, glibc's defaults", per["chat-translated-system"] * 1000, per["chat-translated-system"] / copy],
        ["plain relay process (httpx -> uvicorn, no checks)", per["floor"] * 1000, per["floor"] / copy],
        ["socket pipe process (bytes between two sockets, nothing else)", per["pipe"] * 1000, per["pipe"] / copy],
        ["in process: ImageStreamDecoder, 64 KiB pieces", core["decoder"] * 1000, core["decoder"] / copy],
        ["  of which: joining the pieces once", core["join"] * 1000, core["join"] / copy],
        ["  of which: the base64 check (bytes.translate)", core["check"] * 1000, core["check"] / copy],
        ["in process: Gemini decoder + HubImages + encode_event", core["translate"] * 1000, core["translate"] / copy],
        ["one 1 MB copy from cold memory into a fresh buffer", core["cold"] * 1000, core["cold"] / copy],
        ["one 1 MB memcpy (a bytes slice, in the cache)", copy * 1000, 1.0],
    ]
    rss = f"gateway RSS after the runs: {per['rss']:.0f} MB (glibc's defaults: {per['rss-system']:.0f} MB)"
    return table(["per image event (~1 MB base64)", "CPU ms", "x one memcpy"], rows) + "\n" + rss


def profile(path: str, requests: int = 10) -> str:
    """cProfile of the gateway serving ``path`` (``relayed`` or ``translated``) *in this
    process* (thread CPU time as the clock), the fast upstream and the client in their own:
    where the time per image event goes. ``python -m bench.image_bench --profile relayed``."""
    import asyncio
    import cProfile
    import io
    import pstats
    import time

    import uvicorn

    from llmbridge.gateway import _heap as heap
    from llmbridge.gateway import config, create_app

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        up_port, gw_port = _port(), _port()
        upstream = _start(
            "upstream",
            [sys.executable, "-m", "bench.image_bench", "--upstream", str(up_port)],
            f"http://127.0.0.1:{up_port}/health",
            tmp,
            {"PYTHONPATH": str(ROOT)},
        )
        raw = {
            "upstreams": {
                "fast": {"format": "openai-chat", "base_url": f"http://127.0.0.1:{up_port}/v1"},
                "gem": {"format": "gemini", "base_url": f"http://127.0.0.1:{up_port}"},
            },
            "models": [{"name": "img-20", "upstream": "fast"}, {"name": "gem-image", "upstream": "gem"}],
        }
        heap.keep_large_buffers_on_heap()
        app = create_app(config.parse(raw))
        body = (
            {"model": "img-20", "prompt": "x", "stream": True}
            if path == "relayed"
            else {"model": "gem-image", "prompt": "x", "stream": True, "n": GEMINI_N}
        )
        events = PARTIALS + 1 if path == "relayed" else GEMINI_N
        client = (
            "import httpx, json, sys\n"
            "c = httpx.Client(timeout=60)\n"
            f"for i in range({requests} + 1):\n"
            f"    r = c.post('http://127.0.0.1:{gw_port}/v1/images', json={body!r})\n"
            f"    assert r.content.count(b'event: image_generation') == {events}\n"
            "    if i == 0: print('warm', flush=True)\n"
        )
        profiler = cProfile.Profile(time.thread_time)

        async def main() -> float:
            server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=gw_port, log_level="warning"))
            task = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.05)
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", client, stdout=asyncio.subprocess.PIPE)
            assert proc.stdout is not None
            await proc.stdout.readline()  # warmed up
            cpu = time.thread_time()
            profiler.enable()
            await proc.wait()
            profiler.disable()
            cpu = time.thread_time() - cpu
            server.should_exit = True
            await task
            return cpu

        try:
            import uvloop

            cpu = uvloop.run(main())
        finally:
            upstream.stop()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    per = cpu * 1000 / (requests * events)
    return f"{path}: {per:.2f} ms of CPU per event under the profiler\n" + out.getvalue()


if __name__ == "__main__":
    if sys.argv[1] == "--profile":
        print(profile(sys.argv[2]))
    elif sys.argv[1] == "--pipe":
        serve_pipe(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "--relay":
        serve_relay(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "--upstream":
        serve_upstream(int(sys.argv[2]))
