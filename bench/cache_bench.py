"""Response cache: what an exact hit adds to the time to first token over reading the entry directly.

One process, no sockets: the gateway's ASGI app is called in process (as uvicorn would call it)
with a Chat Completions request whose answer, 200 text tokens, is in the cache (SQLite, the
default backend). Time to first token is from the call to the first body bytes holding content.
The baseline is a direct in-process read of the same entry: the cache's ``get`` (served by the
process's hot entries in front of the database, as a hit is) plus turning its JSON back into
hub events; the database read alone is shown too. The difference is what the gateway adds on a hit: auth, request
decoding, the canonical key, the replay through the client's encoder (all 200 tokens go out in
the first write), headers. For scale: the same request with the model's cache off, answered by
an in-process upstream that yields the same 200 events at once.

    python -m bench cache            # or: make bench BENCH=cache
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

from llmbridge import dialects, hub
from llmbridge.dialects.base import json_encode
from llmbridge.gateway import _cache as cache
from llmbridge.gateway import config, create_app

TOKENS = 200
RUNS = 300
BODY = {
    "model": "m",
    "max_tokens": 300,
    "temperature": 0,
    "stream": True,
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Tell me a story."}],
}


class Fixed:
    """An in-process upstream: the same 200-token answer, every event at once."""

    name = "fixed"
    format = "local"

    async def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        yield hub.ResponseStart("r1", "fixed", 1)
        yield hub.BlockStart(0, "text")
        for n in range(TOKENS):
            yield hub.Delta(0, f" tok{n}")
        yield hub.BlockStop(0)
        yield hub.Usage(input_tokens=12, output_tokens=TOKENS)
        yield hub.Finish("end_turn")
        yield hub.ResponseEnd()


async def first_token(app: Any, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> tuple[float, str]:
    """Seconds from the ASGI call to the first body bytes with content; the cache header."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    *(headers or [])],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {},
    }  # fmt: skip
    sent = False
    never = asyncio.Event()
    first: float | None = None
    mark = ""

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal first, mark
        if message["type"] == "http.response.start":
            mark = dict(message["headers"]).get(b"x-llmbridge-cache", b"-").decode()
        elif message["type"] == "http.response.body" and first is None and b'"content"' in message.get("body", b""):
            first = time.perf_counter()

    start = time.perf_counter()
    await app(scope, receive, send)
    assert first is not None
    return first - start, mark


def _stats(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[int(len(ordered) * 0.9)]
    return f"median {statistics.median(ordered) * 1e3:.3f} ms, p90 {p90 * 1e3:.3f} ms"


async def _run() -> str:
    tmp = tempfile.mkdtemp()
    raw = {
        "gateway": {"database_url": f"sqlite:///{tmp}/bench.db", "metrics": False, "ui": False},
        "upstreams": {"u": {"format": "local"}},
        "models": [
            {"name": "m", "upstream": "u", "cache": {"mode": "exact", "ttl_seconds": 3600}},
            {"name": "plain", "upstream": "u"},
        ],
    }
    app = create_app(config.parse(raw), upstreams={"u": Fixed()})  # type: ignore[dict-item]
    gateway = app.state.gateway
    await gateway.memory.start()
    body = json_encode(BODY)
    try:
        _, mark = await first_token(app, body)
        assert mark == "miss", mark
        await asyncio.gather(*gateway.memory._tasks)  # the entry is written
        hits = []
        for _ in range(RUNS):
            seconds, mark = await first_token(app, body)
            assert mark == "hit", mark
            hits.append(seconds)
        hreq = dialects.get("openai-chat").decode_request(dict(BODY))
        key, _ = cache.request_keys(hreq, "open", config.parse(raw).models["m"].cache)  # type: ignore[arg-type]
        backend = gateway.memory.cache.shared  # the database itself, not this process's hot entries
        reads = []
        for _ in range(RUNS):
            start = time.perf_counter()
            found = await backend.get(key, time.time())
            assert found is not None
            events = cache.decode_events(found[0])
            reads.append(time.perf_counter() - start)
            assert events is not None and len(events) == TOKENS + 6
        front = []
        for _ in range(RUNS):
            start = time.perf_counter()
            found = await gateway.memory.cache.get(key, time.time())  # this process's hot entries
            assert found is not None
            events = cache.decode_events(found[0])
            front.append(time.perf_counter() - start)
        plain = json_encode({**BODY, "model": "plain"})
        uncached = [(await first_token(app, plain))[0] for _ in range(RUNS)]
    finally:
        await gateway.aclose()
    added = statistics.median(hits) - statistics.median(front)
    return "\n".join(
        [
            f"exact hit, {TOKENS}-token answer, SQLite backend, {RUNS} runs each (time to first token, in process):",
            f"  direct read, the process's hot entries (get + decode):  {_stats(front)}",
            f"  direct read, the database (get + events decoded):       {_stats(reads)}",
            f"  gateway, cache hit (/v1/chat/completions, streamed):     {_stats(hits)}",
            f"  gateway, no cache, in-process upstream (for scale):     {_stats(uncached)}",
            f"  added by the gateway over the direct in-process read:   {added * 1e3:.3f} ms (medians)",
        ]
    )


def run() -> str:
    return asyncio.run(_run())


if __name__ == "__main__":
    print(run())
