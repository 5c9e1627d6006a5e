"""A/B of upstream HTTP clients for the gateway: CPU per streamed chunk, same upstream, one run.

The gateway reads every upstream answer as a stream of body chunks; what reading one chunk
costs is paid per token.  Each client here reads the same streamed responses from the fast
upstream (``bench/fast_upstream.py serve``, a separate process: one HTTP chunk per SSE
event, 204 a stream) and the figure is the *client process's* CPU time per chunk:

- ``llmbridge._http``: the gateway's own client (asyncio protocol + httptools, an inbox the
  consumer drains: one wake-up takes every chunk that arrived);
- ``httpx``: ``AsyncClient.stream`` + ``aiter_bytes`` (what the gateway used before);
- ``aiohttp``: ``ClientSession.post`` + ``content.iter_any()`` (when installed: the bench extra).

Sequential streams (concurrency 1) and 10 at once; uvloop as the gateway runs it.
``python -m bench http``; env HTTP_BENCH_STREAMS (default 200 per run).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from .common import table

HERE = Path(__file__).resolve().parent
STREAMS = int(os.environ.get("HTTP_BENCH_STREAMS", "200"))
BODY = json.dumps({"model": "fast-200-0", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _ours(url: str, n: int, concurrency: int) -> tuple[int, int]:
    from llmbridge.gateway._http import HTTPClient

    client = HTTPClient()
    reads = chunks = 0

    async def one() -> None:
        nonlocal reads, chunks
        response = await client.request("POST", url, {"content-type": "application/json"}, BODY)
        inbox = response.inbox
        while True:
            await inbox.wait()
            got = inbox.take()
            reads += 1
            chunks += len(got)
            if inbox.eof:
                break
        response.close()

    await _run(one, n, concurrency)
    await client.aclose()
    return reads, chunks


async def _httpx(url: str, n: int, concurrency: int) -> tuple[int, int]:
    import httpx

    reads = 0
    async with httpx.AsyncClient(timeout=30) as client:

        async def one() -> None:
            nonlocal reads
            async with client.stream("POST", url, content=BODY, headers={"content-type": "application/json"}) as r:
                async for _ in r.aiter_bytes():
                    reads += 1

        await _run(one, n, concurrency)
    return reads, reads


async def _aiohttp(url: str, n: int, concurrency: int) -> tuple[int, int]:
    import aiohttp

    reads = 0
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            nonlocal reads
            async with session.post(url, data=BODY, headers={"content-type": "application/json"}) as r:
                async for _ in r.content.iter_any():
                    reads += 1

        await _run(one, n, concurrency)
    return reads, reads


async def _run(one, n: int, concurrency: int) -> None:
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def _measure(name: str, fn, url: str, concurrency: int) -> list[object]:
    import uvloop

    uvloop.run(fn(url, 5, 1))  # warm up: imports, connections
    cpu0, wall0 = time.process_time(), time.perf_counter()
    reads, _ = uvloop.run(fn(url, STREAMS, concurrency))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    events = STREAMS * 204
    return [name, concurrency, STREAMS, reads / STREAMS, cpu * 1e6 / events, events / wall]


def run() -> str:
    port = _port()
    upstream = subprocess.Popen([sys.executable, str(HERE / "fast_upstream.py"), "serve", str(port)])
    try:
        time.sleep(1.0)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        clients = [("llmbridge._http", _ours), ("httpx", _httpx)]
        try:
            import aiohttp  # noqa: F401

            clients.append(("aiohttp", _aiohttp))
        except ImportError:
            pass
        rows = [_measure(name, fn, url, c) for c in (1, 10) for name, fn in clients]
    finally:
        upstream.terminate()
        upstream.wait()
    head = ["client", "conc", "streams", "reads/stream", "client CPU µs/event", "events/s (wall)"]
    return table(head, rows)


if __name__ == "__main__":
    print(run())
