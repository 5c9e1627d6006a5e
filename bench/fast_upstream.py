"""A fast local OpenAI-chat upstream and the load generator of the gateway benchmark.

Both are stdlib asyncio (uvloop when installed) over raw sockets, so neither spends CPU on an
HTTP framework: the machine's two cores are left to the server under test. Each runs as a
plain script in its own process (``bench/gateway_bench.py`` starts them):

    python bench/fast_upstream.py serve PORT
    python bench/fast_upstream.py load URL DIALECT MODEL CONCURRENCY REQUESTS DEADLINE_S

The upstream answers ``POST /v1/chat/completions`` with a ``chat.completion.chunk`` stream:
a role chunk, N content chunks (one token each), a finish chunk, a usage chunk, ``[DONE]``.
N and the pacing come from the model name, ``fast-<N>-<ms per token>`` (``fast-200-0``:
200 tokens as fast as possible; ``fast-200-10``: one token every 10 ms), so every server in
front of it selects them by model name alone.

Its response head is three fields unless ``FAST_UPSTREAM_HEAD=vendor`` is set for the
``serve`` process: then it is the 24 fields a real vendor API sends (OpenAI's, values made up:
rate limits, request id, Cloudflare's), to measure what a realistic head costs the gateway.

The load generator keeps CONCURRENCY keep-alive connections, each running streams back to
back until REQUESTS streams were started or DEADLINE_S passed (streams still open at twice
DEADLINE_S are cut: their first token and tokens so far still count), and prints one JSON line:
per stream the time to first token (the first content token in the client's dialect), the
total time and the tokens received; the errors; the wall time and its own CPU time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time

try:
    import uvloop
except ImportError:  # plain asyncio still works, only slower
    uvloop = None

# --------------------------------------------------------------------------- the upstream

_MODELS = b'{"object":"list","data":[{"id":"fast-200-0","object":"model","created":0,"owned_by":"bench"}]}'


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk carrying one SSE event."""
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _events(model: str, tokens: int) -> tuple[bytes, list[bytes], bytes]:
    head = b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"%s",' % (
        model.encode()
    )
    first = _chunk(head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}')
    body = [
        _chunk(head + b'"choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]}' % i)
        for i in range(tokens)
    ]
    tail = (
        _chunk(head + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
        + _chunk(
            head
            + b'"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}'
            % (tokens, tokens + 8)
        )
        + _chunk(b"[DONE]")
        + b"0\r\n\r\n"
    )
    return first, body, tail


_CACHE: dict[str, tuple[bytes, list[bytes], bytes]] = {}

_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
# FAST_UPSTREAM_HEAD=vendor: the head of an OpenAI streaming answer (24 fields, 958 bytes), the
# names and shapes as api.openai.com sends them, the values made up.
_VENDOR_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Date: Thu, 03 Dec 2026 16:00:00 GMT\r\n"
    b"Content-Type: text/event-stream; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Connection: keep-alive\r\n"
    b"access-control-expose-headers: X-Request-ID\r\n"
    b"openai-organization: user-abc123\r\n"
    b"openai-processing-ms: 182\r\n"
    b"openai-project: proj_abc123\r\n"
    b"openai-version: 2020-10-01\r\n"
    b"x-envoy-upstream-service-time: 187\r\n"
    b"x-ratelimit-limit-requests: 10000\r\n"
    b"x-ratelimit-limit-tokens: 30000000\r\n"
    b"x-ratelimit-remaining-requests: 9999\r\n"
    b"x-ratelimit-remaining-tokens: 29999990\r\n"
    b"x-ratelimit-reset-requests: 6ms\r\n"
    b"x-ratelimit-reset-tokens: 0s\r\n"
    b"x-request-id: req_0123456789abcdef0123456789abcdef\r\n"
    b"strict-transport-security: max-age=31536000; includeSubDomains; preload\r\n"
    b"cf-cache-status: DYNAMIC\r\n"
    b"set-cookie: __cf_bm=abc; path=/; expires=Thu, 03-Dec-26 16:30:00 GMT; domain=.api.openai.com; HttpOnly;"
    b" Secure; SameSite=None\r\n"
    b"x-content-type-options: nosniff\r\n"
    b"Server: cloudflare\r\n"
    b"CF-RAY: 8f0a1b2c3d4e5f60-FRA\r\n"
    b'alt-svc: h3=":443"; ma=86400\r\n'
    b"\r\n"
)


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    answer_head = _VENDOR_HEAD if os.environ.get("FAST_UPSTREAM_HEAD") == "vendor" else _HEAD
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
            body = await reader.readexactly(int(m.group(1))) if m else b""
            if head.startswith(b"GET"):
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(_MODELS), _MODELS)
                )
                continue
            model = json.loads(body).get("model", "fast-200-0") if body else "fast-200-0"
            _, n, pace = [*model.rsplit("/", 1)[-1].split("-"), "200", "0"][:3]
            if model not in _CACHE:
                _CACHE[model] = _events(model, int(n))
            first, tokens, tail = _CACHE[model]
            delay = int(pace) / 1000
            writer.write(answer_head + first)
            for token in tokens:
                if delay:
                    await asyncio.sleep(delay)
                writer.write(token)  # one write per token: each goes out as its own send
                await writer.drain()
            writer.write(tail)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(_serve_one, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


# --------------------------------------------------------------------------- the load generator

KEY = "sk-bench-5f0c1e9a7b3d42c88e61f0a4d2b79c35"  # the gateways' API key (LiteLLM's proxy insists on one)
KEY = os.environ.get("LLMBRIDGE_BENCH_KEY", KEY)  # bench/teams_bench.py loads with a virtual key
STREAM_TIMEOUT = 120.0  # seconds; a stream taking longer counts as an error

# A content token as each client dialect carries it (checked: every target returns N of them).
TOKEN = {
    "openai-chat": re.compile(rb'"content": ?"[^"]'),
    "anthropic-messages": re.compile(rb'"text_delta"'),
}


def _request(url: str, dialect: str, model: str) -> tuple[str, int, bytes]:
    m = re.match(r"http://([^:/]+):(\d+)(/.*)", url)
    host, port, path = m.group(1), int(m.group(2)), m.group(3)
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = f"Host: {host}:{port}\r\nContent-Type: application/json\r\nAuthorization: Bearer {KEY}\r\n"
    if dialect == "anthropic-messages":
        body["max_tokens"] = 4096
        headers += f"x-api-key: {KEY}\r\nanthropic-version: 2023-06-01\r\n"
    else:
        body["stream_options"] = {"include_usage": True}
    data = json.dumps(body).encode()
    req = f"POST {path} HTTP/1.1\r\n{headers}Content-Length: {len(data)}\r\n\r\n".encode() + data
    return host, port, req


class Progress:
    """What one stream has received so far (read back when the stream is cut)."""

    __slots__ = ("body", "first", "sent")

    def __init__(self) -> None:
        self.body = bytearray()
        self.first: float | None = None  # seconds from the request's write to the first token
        self.sent = 0.0  # the request's write, on perf_counter (CLOCK_MONOTONIC: comparable across processes)


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: bytes, token: re.Pattern, p: Progress):
    """One streaming exchange: (ttft, total, tokens, keep_alive); raises on HTTP errors."""
    start = p.sent = time.perf_counter()
    writer.write(req)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    body = p.body
    first = None
    if b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            body += (await reader.readexactly(size + 2))[:-2]
            if first is None and token.search(body):
                first = p.first = time.perf_counter() - start
    else:
        m = re.search(rb"\r\ncontent-length:\s*(\d+)", lower)
        body += await (reader.readexactly(int(m.group(1))) if m else reader.read())
    total = time.perf_counter() - start
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {bytes(body[:200])!r}")
    tokens = len(token.findall(body))
    return first if first is not None else total, total, tokens, b"connection: close" not in lower


async def load(url: str, dialect: str, model: str, concurrency: int, requests: int, deadline: float) -> dict:
    host, port, req = _request(url, dialect, model)
    token = TOKEN[dialect]
    results: list[tuple[float, float, int]] = []
    marks: list[tuple[int, float, float]] = []  # per finished stream: (client port, request written, first token)
    partial: list[tuple[float | None, int]] = []  # the cut streams: (ttft, tokens so far)
    errors: list[str] = []
    started = 0
    open_now = peak_open = cut = 0
    stop_at = time.perf_counter() + deadline

    async def worker() -> None:
        nonlocal started, open_now, peak_open, cut
        conn = None
        while started < requests and time.perf_counter() < stop_at:
            started += 1
            try:
                if conn is None:
                    conn = await asyncio.open_connection(host, port, limit=1 << 20)
                open_now += 1
                peak_open = max(peak_open, open_now)
                progress = Progress()
                try:
                    ttft, total, tokens, keep = await asyncio.wait_for(
                        _one(*conn, req, token, progress), STREAM_TIMEOUT
                    )
                except asyncio.CancelledError:
                    cut += 1
                    partial.append((progress.first, len(token.findall(progress.body))))
                    raise
                finally:
                    open_now -= 1
                results.append((ttft, total, tokens))
                marks.append((conn[1].get_extra_info("sockname")[1], progress.sent, progress.sent + ttft))
                if not keep:
                    conn[1].close()
                    conn = None
            except Exception as exc:  # counted and reported, the run goes on
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                if conn is not None:
                    conn[1].close()
                conn = None
        if conn is not None:
            conn[1].close()

    cpu, wall = time.process_time(), time.perf_counter()
    # No new stream after ``deadline``; streams still open at twice the deadline are cut (so a
    # saturated server cannot stretch the run) and counted as such, not as errors.
    tasks = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    _, pending = await asyncio.wait(tasks, timeout=2 * deadline)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - wall
    return {
        "results": results,
        "marks": marks,
        "partial": partial,
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:3],
        "wall": wall,
        "peak_open": peak_open,
        "cut": cut,
        "cpu": time.process_time() - cpu,
    }


def main(argv: list[str]) -> None:
    run = uvloop.run if uvloop else asyncio.run
    if argv[0] == "serve":
        run(serve(int(argv[1])))
    elif argv[0] == "load":
        url, dialect, model, conc, reqs, deadline = argv[1:7]
        print(json.dumps(run(load(url, dialect, model, int(conc), int(reqs), float(deadline)))))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
