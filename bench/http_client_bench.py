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

Second part, **the first request of a fresh pool** (spare connections, issue 23): the time from
``request()`` to the response head on a new ``HTTPClient``, to a TLS upstream (a throwaway CA,
trustme), with no spare (the request connects: TCP and TLS handshakes on its path) and with one
opened by ``prepare()`` 200 ms before (what the gateway does at start-up). On loopback, and
through a proxy that delays every read by HTTP_BENCH_DELAY_MS each way (a network's round trip
is twice it); medians of HTTP_BENCH_FIRST samples.

``python -m bench http``; env HTTP_BENCH_STREAMS (default 200 per run), HTTP_BENCH_FIRST (30),
HTTP_BENCH_DELAY_MS (10).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .common import table

HERE = Path(__file__).resolve().parent
STREAMS = int(os.environ.get("HTTP_BENCH_STREAMS", "200"))
FIRST = int(os.environ.get("HTTP_BENCH_FIRST", "30"))
DELAY_MS = float(os.environ.get("HTTP_BENCH_DELAY_MS", "10"))
BURST = int(os.environ.get("HTTP_BENCH_BURST", "50"))
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


# -- the first request of a fresh pool, with and without a spare connection


def _tls_upstream(loop: asyncio.AbstractEventLoop, delay: float) -> tuple[int, int, ssl.SSLContext]:
    """A TLS server answering every request with a short body, and a proxy in front of it that
    delays each read ``delay`` seconds each way, both on ``loop`` (another thread's); their
    ports and a client context that trusts the server."""
    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                fields = [x.split(b":") for x in head.lower().split(b"\r\n")]
                await reader.readexactly(next((int(f[1]) for f in fields if f[0] == b"content-length"), 0))
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):  # each read forwarded ``delay`` later, in order
                loop.call_later(delay, writer.write, data)
            loop.call_later(delay, writer.close)
        except ConnectionError:
            writer.close()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", direct)
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    async def start() -> tuple[int, int]:
        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_ctx)
        nonlocal direct
        direct = server.sockets[0].getsockname()[1]
        delayed = await asyncio.start_server(proxy, "127.0.0.1", 0)
        servers.extend((server, delayed))
        return direct, delayed.sockets[0].getsockname()[1]

    direct = 0
    ports = asyncio.run_coroutine_threadsafe(start(), loop).result()
    return ports[0], ports[1], trusted


servers: list[asyncio.Server] = []  # the first-request part's, closed with their loop
writers: list[asyncio.StreamWriter] = []  # and their connections' ends


async def _stop_servers() -> None:
    """Close the servers and reset their connections; their handlers end on their own (a
    cancelled one would have asyncio log its CancelledError)."""
    for server in servers:
        server.close()
    for writer in writers:
        writer.transport.abort()
    servers.clear()
    writers.clear()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.wait(tasks, timeout=1) if tasks else None


async def _first_request(url: str, trusted: ssl.SSLContext, spare: bool) -> float:
    """Seconds from ``request()`` to the head, on a fresh pool (its spare opened 200 ms before)."""
    from llmbridge.gateway._http import HTTPClient

    client = HTTPClient(ssl_context=trusted, spares=1 if spare else 0)
    if spare:
        client.prepare(url)
    await asyncio.sleep(0.2)
    t0 = time.perf_counter()
    response = await client.request("POST", url, {"content-type": "application/json"}, b"{}")
    took = time.perf_counter() - t0
    await response.read(100)
    await client.aclose()
    return took


def first_request() -> str:
    import uvloop

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    rows = []
    try:
        direct, delayed, trusted = _tls_upstream(loop, DELAY_MS / 1000)
        for port, where in ((direct, "loopback"), (delayed, f"+{DELAY_MS:g} ms each way")):
            url = f"https://127.0.0.1:{port}/v1/chat/completions"
            for spare in (False, True, False, True):  # (alternating: the machine's drift hits both)
                took = [uvloop.run(_first_request(url, trusted, spare)) for _ in range(FIRST)]
                label = "a spare opened ahead" if spare else "no spare: connects itself"
                rows.append([where, label, FIRST, statistics.median(took) * 1e3, min(took) * 1e3])
    finally:
        asyncio.run_coroutine_threadsafe(_stop_servers(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    head = ["upstream (TLS)", "the first request of a fresh pool", "samples", "to the head p50 ms", "min ms"]
    return "the first request: time from request() to the response head\n" + table(head, rows)


# -- a burst of new connections to a host name: its addresses asked once, or once per connection


def _per_connection_lookups(client: Any, wait: float) -> None:
    """``client`` asking the resolver at every connect, as before the addresses were kept (a
    lookup occupying an executor thread ``wait`` seconds more, as a query to a DNS server does)."""

    async def addresses_of(origin: Any) -> list[tuple[int, str]]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)
        if wait:
            await loop.run_in_executor(None, time.sleep, wait)
        return [(int(f), str(a[0])) for f, _, _, _, a in infos]

    client._addresses_of = addresses_of


async def _burst(url: str, n: int, kept: bool, wait: float) -> float:
    """Seconds until ``n`` requests at once on a fresh pool all have their heads."""
    from llmbridge.gateway._http import HTTPClient

    client = HTTPClient()
    if kept:
        real = client._resolve

        async def resolve(host: str, port: int) -> list[tuple[int, str]]:
            if wait:
                await asyncio.get_running_loop().run_in_executor(None, time.sleep, wait)
            return await real(host, port)

        client._resolve = resolve  # type: ignore[method-assign]
    else:
        _per_connection_lookups(client, wait)
    t0 = time.perf_counter()
    body = b'{"model": "fast-1-0"}'  # (a one-token answer: the connects are the work)
    responses = await asyncio.gather(*(client.request("POST", url, {}, body) for _ in range(n)))
    took = time.perf_counter() - t0
    for response in responses:
        await response.read(1 << 20)
    await client.aclose()
    return took


def dns_burst() -> str:
    import uvloop

    port = _port()
    upstream = subprocess.Popen([sys.executable, str(HERE / "fast_upstream.py"), "serve", str(port)])
    rows = []
    try:
        time.sleep(1.0)
        url = f"http://localhost:{port}/v1/chat/completions"
        for wait, where in ((0.0, "/etc/hosts"), (0.005, "a DNS server answering in 5 ms")):
            for kept in (False, True, False, True):
                took = [uvloop.run(_burst(url, BURST, kept, wait)) for _ in range(FIRST)]
                label = "once for the burst, kept" if kept else "once per connection"
                rows.append([where, label, BURST, statistics.median(took) * 1e3])
    finally:
        upstream.terminate()
        upstream.wait()
    head = ["localhost resolved by", "addresses asked", "requests at once", "until all heads p50 ms"]
    return "a burst on a fresh pool, by host name\n" + table(head, rows)


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
    return table(head, rows) + "\n\n" + first_request() + "\n\n" + dns_burst()


if __name__ == "__main__":
    print(run())
