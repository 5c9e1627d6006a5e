"""The binary HTTP binding on ``/v1/stream`` (docs/llm-stream-bindings.md §2): negotiation and re-framing.

The gateway makes every LLM-Stream answer as SSE bytes; a client that asked for
``application/llm-stream+binary`` gets the same events re-framed by
:class:`~llmbridge.bindings.BinaryFraming` (one frame per event, keep-alive comments as
keep-alive frames).  Answers that are not a stream (errors before it, non-streaming JSON)
are unchanged: the binding only changes how *events* are framed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import Response

from ..bindings import BINARY_MEDIA_TYPE, BinaryFraming
from ._negotiation import parse_media_type
from ._response import StreamResponse

__all__ = ["acceptable", "as_binary", "wants_binary"]

# What /v1/stream can answer with; an Accept header that admits none of them gets 406.
_PRODUCIBLE = ("text/event-stream", BINARY_MEDIA_TYPE, "application/json")


def _accept_items(accept: str) -> list[tuple[str, float]]:
    items: list[tuple[str, float]] = []
    for item in accept.split(","):
        if not item.strip():
            continue
        kind, params = parse_media_type(item)
        try:
            q = float(params.get("q", "1"))
        except ValueError:
            q = 1.0
        items.append((kind, q))
    return items


def _quality(items: list[tuple[str, float]], kind: str) -> float:
    """The q an Accept list gives ``kind`` (exact match over ``type/*`` over ``*/*``; 0 if absent)."""
    major = kind.split("/", 1)[0] + "/*"
    best: tuple[int, float] = (-1, 0.0)
    for k, q in items:
        rank = 2 if k == kind else 1 if k == major else 0 if k == "*/*" else -1
        if rank > best[0]:
            best = (rank, q)
    return best[1]


def wants_binary(accept: str | None) -> bool:
    """Whether the client prefers the binary binding: it lists it with a q above 0 and at
    least the q of ``text/event-stream``."""
    if not accept or BINARY_MEDIA_TYPE not in accept:
        return False
    items = _accept_items(accept)
    q = _quality(items, BINARY_MEDIA_TYPE)
    return q > 0 and q >= _quality(items, "text/event-stream")


def acceptable(accept: str | None) -> bool:
    """Whether ``/v1/stream`` can answer a client with this ``Accept`` at all (else 406)."""
    if not accept or not accept.strip():
        return True
    items = _accept_items(accept)
    return any(_quality(items, kind) > 0 for kind in _PRODUCIBLE)


def as_binary(response: Response | StreamResponse) -> Response | StreamResponse:
    """``response`` re-framed for the binary binding when it is an event stream; else itself.

    Works on the gateway's :class:`~._response.StreamResponse` (its ``body`` async iterator
    and ``headers`` list are changed in place); a status or JSON answer passes through untouched.
    """
    if not isinstance(response, StreamResponse):
        return response
    headers = response.headers
    for n, (key, value) in enumerate(headers):
        if key == b"content-type":
            if not value.startswith(b"text/event-stream"):
                return response
            headers[n] = (b"content-type", BINARY_MEDIA_TYPE.encode())
    if isinstance(response.body, bytes):  # the whole body already: framed whole
        framing = BinaryFraming()
        response.body = framing.feed(response.body) + framing.close()
        return response
    response.body = _reframed(response.body)
    response.last = None  # the framing's close follows the body's last chunk
    return response


async def _reframed(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    framing = BinaryFraming()
    try:
        async for chunk in body:
            out = framing.feed(chunk)
            if out:
                yield out
        tail = framing.close()
        if tail:
            yield tail
    finally:
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            await aclose()
