"""SSE decode throughput over the whole corpus: llmbridge.sse vs httpx-sse vs the openai SDK.

Each decoder gets the same bytes, whole bodies and 64-byte pieces, and must return the same
number of events.  Figures are CPU time, best of several runs; ratios are what matter.
"""

from __future__ import annotations

import httpx

from llmbridge import sse

from .common import best_of, corpus_bodies, pieces, table


def ours(chunked: list[list[bytes]]) -> int:
    n = 0
    for chunks in chunked:
        d = sse.Decoder()
        for c in chunks:
            n += len(d.feed(c))
        n += len(d.close())
    return n


def httpx_sse(chunked: list[list[bytes]]) -> int:
    """httpx-sse as users run it: EventSource over an httpx response streaming the chunks."""
    from httpx_sse import EventSource

    n = 0
    for chunks in chunked:
        response = httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=httpx.ByteStream(b"") if not chunks else _Stream(chunks),
        )
        n += sum(1 for _ in EventSource(response).iter_sse())
    return n


class _Stream(httpx.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self):
        return iter(self.chunks)


def openai_sdk(chunked: list[list[bytes]]) -> int:
    from openai._streaming import SSEDecoder

    n = 0
    for chunks in chunked:
        n += sum(1 for _ in SSEDecoder().iter_bytes(iter(chunks)))
    return n


def run() -> str:
    bodies = [b for _, b in corpus_bodies()]
    total_bytes = sum(map(len, bodies))
    rows = []
    out = []
    inputs = (("whole bodies", [[b] for b in bodies]), ("64-byte pieces", [pieces(b, 64) for b in bodies]))
    for label, chunked in inputs:
        decoders = (("llmbridge", ours), ("httpx-sse", httpx_sse), ("openai SDK", openai_sdk))
        counts = {name: fn(chunked) for name, fn in decoders}
        times = {name: best_of(lambda fn=fn, chunked=chunked: fn(chunked)) for name, fn in decoders}
        n = counts["llmbridge"]
        for name, t in times.items():
            rows.append(
                [
                    label,
                    name,
                    counts[name],
                    counts[name] / t,
                    total_bytes / t / 1e6,
                    (n / times["llmbridge"]) / (counts[name] / t),
                ]
            )
    out.append(f"SSE decode, {len(bodies)} corpus files, {total_bytes:,} bytes (CPU time, best of 5)")
    out.append(table(["input", "decoder", "events", "events/s", "MB/s", "llmbridge x"], rows))
    return "\n".join(out)


if __name__ == "__main__":
    print(run())
