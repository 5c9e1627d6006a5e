"""Reads an anthropic-messages stream with the official ``anthropic`` SDK.

``client.messages.stream(...)`` through a mock transport, its events iterated and the
accumulated message taken from ``get_final_message()`` (or the snapshot when the SDK
raised).  The SDK ships its own httpx fork, ``httpx2``, and refuses plain httpx objects.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2

from . import FINISH_CATEGORY, Summary, arguments

CARRIES_THINKING = True

# Anthropic's stop_reason values (Messages API reference) as the standard's stop_reason.
REASON = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "model_context_window_exceeded": "max_tokens",
}

# The lossy table: the stop_reason the SDK shows for each of the standard's reasons.
SHOWS = {
    "end_turn": "end_turn",
    "stop_sequence": "stop_sequence",
    "max_tokens": "max_tokens",
    "tool_use": "tool_use",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "content_filter": "refusal",  # output withheld: Anthropic's nearest word
    "other": "end_turn",  # no word for "other": the turn simply ended
    "error": "end_turn",  # a failed turn without an error event: no word either
}

UNKNOWN_COUNT = 0  # the SDK's usage fields are required integers: an unknown count shows as 0
NO_USAGE_COUNT = 0  # message_start always carries a usage object
NO_FINISH = None
ERROR_SHOWS_FINISH = False  # the error event replaces message_delta, which carries both


def client_for(body: bytes, status: int = 200) -> anthropic.Anthropic:
    """An SDK client whose every request is answered with ``body``."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": "text/event-stream"}, content=body)

    transport = httpx2.MockTransport(handler)
    return anthropic.Anthropic(
        api_key="x", base_url="http://anthropic.test", max_retries=0, http_client=httpx2.Client(transport=transport)
    )


def read(body: bytes) -> Summary:
    client = client_for(body)
    message: Any = None
    error: str | None = None
    inputs: dict[int, list[str]] = {}  # tool input JSON as streamed, by block index
    stream_manager = client.messages.stream(model="m", max_tokens=1024, messages=[{"role": "user", "content": "hi"}])
    try:
        with stream_manager as stream:
            try:
                for event in stream:
                    if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                        inputs.setdefault(event.index, []).append(event.delta.partial_json)
                message = stream.get_final_message()
            except Exception as exc:  # the SDK's own exceptions, reported as such
                error = f"{type(exc).__name__}: {exc}"
                message = stream.current_message_snapshot if _has_snapshot(stream) else None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return summarize(message, error, inputs)


def _has_snapshot(stream: Any) -> bool:
    try:
        return stream.current_message_snapshot is not None
    except (AssertionError, AttributeError):
        return False


def summarize(message: Any, error: str | None = None, inputs: dict[int, list[str]] | None = None) -> Summary:
    """What a user of the SDK sees in ``message``; ``inputs`` is the tool input JSON as it streamed."""
    summary = Summary(error=error)
    if message is None:
        return summary
    text, thinking = [], []
    for n, block in enumerate(message.content):
        kind = block.type
        if kind == "text":
            text.append(block.text or "")
        elif kind == "thinking":
            thinking.append(block.thinking or "")
        elif kind == "tool_use":
            args = block.input if isinstance(block.input, dict) else None
            streamed = (inputs or {}).get(n)
            if streamed is not None and arguments("".join(streamed)) is None:
                args = None  # cut off (max_tokens): the SDK shows a partial parse, the JSON is invalid
            summary.tool_calls.append((block.name, args))
            summary.tool_call_ids.append(block.id)
    summary.text = "".join(text)
    summary.thinking = "".join(thinking)
    summary.stop = message.stop_reason
    if message.stop_reason:
        summary.finish = FINISH_CATEGORY.get(REASON.get(message.stop_reason, "other"))
    usage = message.usage
    if usage is not None:
        fresh = usage.input_tokens or 0
        cached = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
        summary.input_tokens = fresh + cached  # the standard counts every prompt token, cached ones included
        summary.output_tokens = usage.output_tokens
    return summary
