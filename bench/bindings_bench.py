"""Issue 14: the draft's framing claim (§6: SSE O(n) per boundary, binary O(1)) and HTTP/1.1 vs HTTP/2.

Three parts, each a ratio against the SSE binding (or HTTP/1.1) measured in the same run:

1. **Client side decode**, CPU per event over every corpus stream translated to llm-stream
   (what the gateway sends): framing alone (SSE event splitting / binary frame cutting /
   WebSocket frame parsing by the ``websockets`` sans-I/O protocol) and the whole decode to
   hub events (framing + JSON + grammar), from whole bodies and from 64-byte pieces; then the
   framing cost against event size (16 B to 64 KiB of text in one event), which is where an
   O(n) boundary scan would show.
2. **Gateway side encode**, CPU per event: hub events -> SSE (the encoder), -> binary (the
   encoder + the re-framer the gateway runs), -> WebSocket frames (encoder + SSE split +
   ``websockets`` frame writing).
3. **Served**, 100 concurrent streams of 200 tokens through a real gateway process on a fast
   upstream (bench/fast_upstream.py), gateway CPU per stream from /proc: SSE, binary and
   WebSocket bindings on uvicorn (WebSocket with its ``websockets`` and ``wsproto``
   implementations), and HTTP/1.1 vs HTTP/2 (h2c) on Hypercorn and Granian.

    python -m bench bindings
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import best_of, corpus_bodies, pieces, table
from bench.gateway_bench import _port, _start

ROOT = Path(__file__).resolve().parent.parent
STREAMS, CONCURRENCY, TOKENS = 300, 100, 200


# --------------------------------------------------------------------------- corpus


def _llm_stream_corpus() -> tuple[list[bytes], list[list]]:
    from llmbridge import dialects
    from llmbridge.dialects import llm_stream
    from llmbridge.dialects.base import decode_all, encode_all

    bodies, hub_streams = [], []
    for name, body in corpus_bodies():
        dialect = name.split("/", 1)[0]
        if dialect not in dialects.NAMES:
            continue
        events = decode_all(dialects.get(dialect).StreamDecoder(), body)
        hub_streams.append(events)
        bodies.append(encode_all(llm_stream.StreamEncoder(), events))
    return bodies, hub_streams


def _ws_bytes(sse_body: bytes) -> tuple[bytes, int]:
    """The server->client WebSocket frames carrying ``sse_body``'s events (one text message each)."""
    from websockets.protocol import Protocol, Side, State

    from llmbridge import sse

    server = Protocol(Side.SERVER, state=State.OPEN)
    d = sse.Decoder()
    events = d.feed(sse_body) + d.close()
    for e in events:
        server.send_text(e.data.encode())
    return b"".join(server.data_to_send()), len(events)


# --------------------------------------------------------------------------- part 1: client decode


def client_decode() -> str:
    from websockets.protocol import Protocol, Side, State

    from llmbridge import bindings, sse
    from llmbridge.dialects import llm_stream
    from llmbridge.dialects.llm_stream import _encoder as llm_stream_encoder  # its frame(): the SSE bytes of one event

    bodies, _ = _llm_stream_corpus()
    binaries = []
    for body in bodies:
        f = bindings.BinaryFraming()
        binaries.append(f.feed(body) + f.close())
    ws_data = [_ws_bytes(b) for b in bodies]
    n_events = sum(n for _, n in ws_data)
    total_bytes = sum(map(len, bodies))

    def sse_frames(chunked: bool):
        for body in bodies:
            d = sse.Decoder()
            for p in pieces(body, 64) if chunked else [body]:
                d.feed(p)
            d.close()

    def bin_frames(chunked: bool):
        for data in binaries:
            d = bindings.FrameDecoder()
            for p in pieces(data, 64) if chunked else [data]:
                d.feed(p)
            d.close()

    def ws_frames(chunked: bool):
        for data, _ in ws_data:
            c = Protocol(Side.CLIENT, state=State.OPEN, max_size=None)
            for p in pieces(data, 64) if chunked else [data]:
                c.receive_data(p)
                c.events_received()

    def sse_full(chunked: bool):
        for body in bodies:
            d = llm_stream.StreamDecoder()
            for p in pieces(body, 64) if chunked else [body]:
                d.feed(p)
            d.close()

    def bin_full(chunked: bool):
        for data in binaries:
            d = bindings.BinaryStreamDecoder()
            for p in pieces(data, 64) if chunked else [data]:
                d.feed(p)
            d.close()

    def ws_full(chunked: bool):
        for data, _ in ws_data:
            c = Protocol(Side.CLIENT, state=State.OPEN, max_size=None)
            d = bindings.MessageStreamDecoder()
            for p in pieces(data, 64) if chunked else [data]:
                c.receive_data(p)
                for frame in c.events_received():
                    d.feed_message(frame.data.decode())
            d.close()

    rows = []
    for label, fns in (
        ("framing only", (sse_frames, bin_frames, ws_frames)),
        ("whole decode", (sse_full, bin_full, ws_full)),
    ):
        for chunked in (False, True):
            times = [best_of(lambda f=f, c=chunked: f(c), repeat=3, min_time=0.3) for f in fns]
            per = [t / n_events * 1e9 for t in times]
            rows.append(
                [f"{label}, {'64-byte pieces' if chunked else 'whole bodies'}", *per, per[1] / per[0], per[2] / per[0]]
            )
    head = f"{len(bodies)} streams, {n_events} events, {total_bytes / 1e6:.1f} MB of SSE; ns of CPU per event"
    out = head + "\n" + table(["client side", "SSE", "binary", "WebSocket", "bin/SSE", "WS/SSE"], rows)

    # framing cost against event size: one stream of 200 events of one size
    size_rows = []
    for size in (16, 256, 4096, 65536):
        text = "x" * size
        body = b"".join(
            llm_stream_encoder.frame(
                "content.delta", {"v": "1.0", "seq": i, "type": "content.delta", "index": 0, "delta": {"text": text}}
            )
            for i in range(200)
        )
        f = bindings.BinaryFraming()
        data = f.feed(body) + f.close()
        wsb, _ = _ws_bytes(body)

        def s(body=body):
            d = sse.Decoder()
            for p in pieces(body, 16384):
                d.feed(p)
            d.close()

        def b(data=data):
            d = bindings.FrameDecoder()
            for p in pieces(data, 16384):
                d.feed(p)

        def w(wsb=wsb):
            c = Protocol(Side.CLIENT, state=State.OPEN, max_size=None)
            for p in pieces(wsb, 16384):
                c.receive_data(p)
                c.events_received()

        t = [best_of(fn, repeat=3, min_time=0.2) / 200 * 1e9 for fn in (s, b, w)]
        size_rows.append([f"{size} B of text", *t, t[1] / t[0], t[2] / t[0]])
    out += "\n\nframing only, 200 equal events read in 16 KiB pieces; ns of CPU per event\n"
    out += table(["event size", "SSE", "binary", "WebSocket", "bin/SSE", "WS/SSE"], size_rows)
    return out


# --------------------------------------------------------------------------- part 2: gateway encode


def gateway_encode() -> str:
    from websockets.protocol import Protocol, Side, State

    from llmbridge import bindings, sse
    from llmbridge.dialects import llm_stream

    _, hub_streams = _llm_stream_corpus()
    n = sum(len(s) for s in hub_streams)

    def to_sse():
        for events in hub_streams:
            enc = llm_stream.StreamEncoder()
            for e in events:
                enc.encode(e)

    def to_binary():
        for events in hub_streams:
            enc = llm_stream.StreamEncoder()
            f = bindings.BinaryFraming()
            for e in events:
                f.feed(enc.encode(e))
            f.close()

    def to_ws():
        for events in hub_streams:
            enc = llm_stream.StreamEncoder()
            d = sse.Decoder()
            server = Protocol(Side.SERVER, state=State.OPEN)
            for e in events:
                for ev in d.feed(enc.encode(e)):
                    server.send_text(ev.data.encode())
                server.data_to_send()

    times = [best_of(f, repeat=3, min_time=0.3) / n * 1e9 for f in (to_sse, to_binary, to_ws)]
    rows = [["hub events -> wire", *times, times[1] / times[0], times[2] / times[0]]]
    return f"{n} hub events; ns of CPU per hub event\n" + table(
        ["gateway side", "SSE", "binary", "WebSocket", "bin/SSE", "WS/SSE"], rows
    )


# --------------------------------------------------------------------------- part 3: served


def serve(kind: str, port: int, config_path: str) -> None:
    """A gateway process for part 3 (``python -m bench.bindings_bench serve KIND PORT CONFIG``)."""
    from llmbridge.gateway import create_app, load

    app = create_app(load(config_path))
    if kind.startswith("uvicorn"):
        import uvicorn

        ws = kind.split("-", 1)[1] if "-" in kind else "auto"
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws=ws)
    elif kind == "hypercorn":
        import uvloop
        from hypercorn.asyncio import serve as hypercorn_serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = None
        config.h2_max_concurrent_streams = 1000
        uvloop.run(hypercorn_serve(app, config))  # type: ignore[arg-type]
    else:
        raise SystemExit(f"unknown server kind {kind}")


def granian_app():
    """Granian's factory target (config path in the environment)."""
    from llmbridge.gateway import create_app, load

    return create_app(load(os.environ["LLMBRIDGE_BENCH_CONFIG"]))


async def _load(url: str, mode: str, streams: int, concurrency: int) -> dict:
    """Run ``streams`` llm-stream requests, ``concurrency`` at a time; wall seconds and events seen."""
    import httpx

    body = json.dumps({"model": f"fast-{TOKENS}-0", "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {"content-type": "application/llm-request+json", "authorization": "Bearer k"}
    if mode == "binary":
        headers["accept"] = "application/llm-stream+binary"
    started = 0
    got = 0
    errors = 0

    async def http_worker(client: httpx.AsyncClient) -> None:
        nonlocal started, got, errors
        while started < streams:
            started += 1
            try:
                async with client.stream("POST", url + "/v1/stream", content=body, headers=headers) as r:
                    async for chunk in r.aiter_raw():
                        got += len(chunk)
                    if r.status_code != 200:
                        errors += 1
            except httpx.HTTPError:
                errors += 1

    async def ws_worker() -> None:
        nonlocal started, got, errors
        from websockets.asyncio.client import connect

        async with connect(
            url.replace("http", "ws") + "/v1/stream", additional_headers={"authorization": "Bearer k"}, max_size=None
        ) as ws:
            while started < streams:
                started += 1
                await ws.send(body.decode())
                while True:
                    m = await ws.recv()
                    got += len(m)
                    if '"stream.end"' in m:
                        break

    t0 = time.monotonic()
    if mode == "ws":
        await asyncio.gather(*(ws_worker() for _ in range(concurrency)))
    else:
        h2 = mode == "h2"
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(http1=not h2, http2=h2, limits=limits, timeout=120) as client:
            await asyncio.gather(*(http_worker(client) for _ in range(concurrency)))
    return {"wall": time.monotonic() - t0, "bytes": got, "errors": errors}


PLANS = [
    ("uvicorn (h11/httptools)", "uvicorn-websockets", ["sse", "binary", "ws"]),
    ("uvicorn, ws=wsproto", "uvicorn-wsproto", ["ws"]),
    ("hypercorn", "hypercorn", ["sse", "h2", "ws"]),
    ("granian", "granian", ["sse", "h2", "ws"]),
]
WS_AB = [
    ("uvicorn, ws=websockets", "uvicorn-websockets", ["ws"]),
    ("uvicorn, ws=wsproto", "uvicorn-wsproto", ["ws"]),
]


def served(plans: list | None = None, rounds: int = 1) -> str:
    """Part 3 (``plans``: (label, server kind, modes); ``rounds`` > 1 alternates the plans)."""
    plans = (plans or PLANS) * rounds
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        up_port = _port()
        upstream = _start(
            "upstream",
            [sys.executable, str(ROOT / "bench" / "fast_upstream.py"), "serve", str(up_port)],
            f"http://127.0.0.1:{up_port}/v1/models",
            tmp,
        )
        cfg = tmp / "gw.toml"
        cfg.write_text(
            f'[gateway]\napi_keys = ["k"]\n[upstreams.fast]\nformat = "openai-chat"\n'
            f'base_url = "http://127.0.0.1:{up_port}/v1"\n[[models]]\nname = "fast-{TOKENS}-0"\nupstream = "fast"\n'
        )
        env = {"PYTHONPATH": str(ROOT), "LLMBRIDGE_BENCH_CONFIG": str(cfg)}
        baseline = None
        try:
            for label, kind, modes in plans:
                port = _port()
                if kind == "granian":
                    argv = [
                        str(Path(sys.executable).parent / "granian"),
                        "--interface",
                        "asgi",
                        "--factory",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--http",
                        "auto",
                        "--workers",
                        "1",
                        "--ws",
                        "--log-level",
                        "warning",
                        "bench.bindings_bench:granian_app",
                    ]
                else:
                    argv = [sys.executable, "-m", "bench.bindings_bench", "serve", kind, str(port), str(cfg)]
                try:
                    server = _start(kind, argv, f"http://127.0.0.1:{port}/healthz", tmp, env, wait=60)
                except RuntimeError as exc:
                    rows.append([label, "-", "did not start", str(exc)[:60], "", ""])
                    continue
                try:
                    url = f"http://127.0.0.1:{port}"
                    asyncio.run(_load(url, "sse", 20, 10))  # warm-up
                    for mode in modes:
                        cpu0 = server.cpu()
                        try:
                            result = asyncio.run(_load(url, mode, STREAMS, CONCURRENCY))
                        except Exception as exc:  # a server that cannot do a mode
                            rows.append([label, mode, "failed", f"{type(exc).__name__}: {exc}"[:60], "", ""])
                            continue
                        cpu = (server.cpu() - cpu0) / STREAMS * 1000
                        if baseline is None:
                            baseline = cpu
                        rows.append([label, mode, cpu, STREAMS / result["wall"], cpu / baseline, result["errors"]])
                finally:
                    server.stop()
        finally:
            upstream.stop()
    head = (
        f"{STREAMS} llm-stream streams of {TOKENS} tokens, {CONCURRENCY} concurrent, gateway CPU per stream; "
        "ratio against uvicorn SSE (HTTP/1.1)"
    )
    return head + "\n" + table(["server", "binding", "CPU ms/stream", "streams/s", "vs uvicorn SSE", "errors"], rows)


def run() -> str:
    ab = "WebSocket server protocol A/B, alternating, 3 rounds (ratio against the first row)\n" + served(WS_AB, 3)
    return "\n\n".join([client_decode(), gateway_encode(), served(), ab])


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        print(run())
