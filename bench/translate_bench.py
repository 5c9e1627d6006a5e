"""Streaming translation throughput over the corpus, per dialect pair, on one core.

For each source dialect, every corpus file of that dialect is decoded from its bytes and
re-encoded into each target dialect (decoder -> hub -> encoder, the path the gateway and
``llmbridge translate`` take).  events/s counts the source's SSE events per CPU second.
LiteLLM's streaming translation, where it has the pair, runs over the same input in the same
process (see litellm_peer.py).
"""

from __future__ import annotations

from llmbridge import dialects, sse

from .common import best_of, corpus_bodies, table

SOURCES = ("openai-chat", "anthropic-messages", "openai-responses", "gemini")


def count_events(bodies: list[bytes]) -> int:
    n = 0
    for body in bodies:
        d = sse.Decoder()
        n += len(d.feed(body)) + len(d.close())
    return n


def translate_all(source: str, target: str, bodies: list[bytes]) -> int:
    src, dst = dialects.get(source), dialects.get(target)
    size = 0
    for body in bodies:
        decoder, encoder = src.StreamDecoder(), dst.StreamEncoder()
        encode = encoder.encode
        for event in decoder.feed(body) + decoder.close():
            size += len(encode(event))
    return size


def run() -> str:
    rows = []
    ours: dict[tuple[str, str], float] = {}
    for source in SOURCES:
        bodies = [b for _, b in corpus_bodies(source)]
        n = count_events(bodies)
        row: list[object] = [source, n]
        for target in dialects.NAMES:
            t = best_of(lambda s=source, t=target, b=bodies: translate_all(s, t, b), repeat=3, min_time=0.3)
            ours[(source, target)] = n / t
            row.append(n / t)
        rows.append(row)
    out = [
        "Translation, events/s per core (CPU time, best of 3), whole corpus of each source",
        table(["source \\ target", "events", *dialects.NAMES], rows),
    ]
    try:
        from . import litellm_peer
    except ImportError as exc:  # the bench environment installs litellm; plain `make test` does not
        out.append(f"\nLiteLLM: not installed here ({exc}); run `make bench`")
        return "\n".join(out)
    out.append("")
    out.append(litellm_peer.compare(ours))
    return "\n".join(out)


if __name__ == "__main__":
    print(run())
