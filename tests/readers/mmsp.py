"""Reads an mmsp body with MMSP's own client (the ``mmsp`` package's ``MmspClient``): its SSE
parsing, its error and incomplete-stream checks, and its ``concat_uni_events_to_uni_message``
assembler, which makes the message from the ``.done`` items and the ``stop`` event.

A stream that ends in an error event (MMSP's stream grammar: "a stream ends with stop or with an
exception") raises in the client; the summary then holds the text and thinking the user saw
stream by (the ``.delta`` items) and the tool calls that were done before it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from mmsp.mmsp.client import MmspClient

from . import FINISH_CATEGORY, Summary

CARRIES_THINKING = True

# MMSP's finish_reason values (MMSP's stream grammar) as the standard's stop_reason.
REASON = {"stop": "end_turn", "length": "max_tokens", "tool_call": "tool_use", "unknown": "other"}

# The lossy table: the finish_reason MMSP's client shows for each of the standard's reasons.
SHOWS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "content_filter": "unknown",  # MMSP has four words; everything else is "unknown"
    "refusal": "unknown",
    "pause_turn": "unknown",
    "other": "unknown",
    "error": "unknown",
}

UNKNOWN_COUNT = None  # the stop event's usage_metadata holds null
NO_USAGE_COUNT = None
NO_FINISH = "unknown"  # the stop event always carries a finish_reason
ERROR_SHOWS_FINISH = False  # the error stands in place of the stop event, which carries both

_BASE = "http://mmsp.test/v1"
_USER: Any = {"role": "user", "content_items": [{"type": "text.done", "text": "hi"}]}


def client_for(body: bytes) -> MmspClient:
    """MMSP's client, its HTTP client swapped for one whose every request gets ``body``."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = MmspClient("m", api_key="k", base_url=_BASE)
    # MmspClient builds its httpx.AsyncClient itself; this attribute is the only way in.
    client._client = httpx.AsyncClient(base_url=_BASE, transport=httpx.MockTransport(handler))
    return client


def read(body: bytes) -> Summary:
    client = client_for(body)
    events: list[Any] = []
    error: str | None = None

    async def run() -> None:
        async for event in client.streaming_response([_USER], {}):
            events.append(event)

    try:
        asyncio.run(run())
    except Exception as exc:  # MMSP's own verdict: UpstreamError, IncompleteStreamError ...
        kind = getattr(exc, "error_type", None)  # the server-side class an UpstreamError names
        error = f"{type(exc).__name__}({kind}): {exc}" if kind else f"{type(exc).__name__}: {exc}"
    message = client.concat_uni_events_to_uni_message(events)
    done = message["content_items"]
    summary = Summary(
        text="".join(i["text"] for i in done if i["type"] == "text.done"),
        thinking="".join(i["thinking"] for i in done if i["type"] == "thinking.done"),
        tool_calls=[(i["name"], i["arguments"]) for i in done if i["type"] == "tool_call.done"],
        tool_call_ids=[i["tool_call_id"] for i in done if i["type"] == "tool_call.done"],
        error=error,
    )
    if error is not None:  # no message: what streamed by before the exception
        items = [i for e in events for i in e["content_items"]]
        summary.text = "".join(i["text"] for i in items if i["type"] == "text.delta")
        summary.thinking = "".join(i["thinking"] for i in items if i["type"] == "thinking.delta")
    summary.stop = message["finish_reason"]
    if summary.stop is not None:
        summary.finish = FINISH_CATEGORY.get(REASON.get(summary.stop, "other"))
    usage = message["usage_metadata"]
    if usage is not None:
        summary.input_tokens = usage.get("prompt_tokens")
        if usage.get("response_tokens") is not None or usage.get("thoughts_tokens") is not None:
            summary.output_tokens = (usage.get("response_tokens") or 0) + (usage.get("thoughts_tokens") or 0)
    return summary
