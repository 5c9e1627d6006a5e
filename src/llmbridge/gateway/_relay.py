"""Rewrites a relayed stream needs where the upstream's bytes differ from what the client asked.

A relay sends the upstream's bytes untouched, with one exception so far: the gateway always
asks an OpenAI-chat upstream for ``stream_options.include_usage`` (usage is what it watches),
so the upstream ends with a usage chunk whose ``choices`` is empty.  The gateway spec says a
client that did not ask for usage gets it all the same, on a last chunk that "keeps one choice
with an empty delta"; clients that index ``choices[0]`` on every chunk (many do) would break
on the empty array.  That one chunk is rewritten; every other byte passes as it came.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from .. import hub, sse

__all__ = ["chat_usage_chunk_filter", "relay_filter"]

_EMPTY_CHOICES = (b'"choices":[]', b'"choices": []')
_ONE_EMPTY_CHOICE = [{"index": 0, "delta": {}, "finish_reason": None}]


def relay_filter(dialect: str, request: hub.Request) -> Callable[[bytes], bytes] | None:
    """The rewrite a relayed ``dialect`` stream answering ``request`` needs, if any."""
    if dialect == "openai-chat":
        options = request.extensions.get("openai-chat:stream_options") or {}
        if not (isinstance(options, dict) and options.get("include_usage")):
            return chat_usage_chunk_filter
    return None


def chat_usage_chunk_filter(data: bytes) -> bytes:
    """``data`` (whole SSE events) with every ``choices: []`` chunk given one empty choice.

    The check is a substring search (the usual relayed bytes pass through untouched at the
    cost of a scan); only an event that holds an empty ``choices`` array is parsed.
    """
    if _EMPTY_CHOICES[0] not in data and _EMPTY_CHOICES[1] not in data:
        return data
    out = []
    for event in sse.split_events(data):
        if _EMPTY_CHOICES[0] in event or _EMPTY_CHOICES[1] in event:
            event = _rewrite(event)
        out.append(event)
    return b"".join(out)


def _rewrite(event: bytes) -> bytes:
    lines = event.splitlines(keepends=True)
    out = []
    for line in lines:
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            try:
                chunk = msgspec.json.decode(payload)
            except msgspec.DecodeError:
                out.append(line)
                continue
            if isinstance(chunk, dict) and chunk.get("choices") == [] and "error" not in chunk:
                chunk["choices"] = _ONE_EMPTY_CHOICE
                ending = line[len(line.rstrip(b"\r\n")) :]
                line = b"data: " + msgspec.json.encode(chunk) + ending
        out.append(line)
    return b"".join(out)
