"""Reads an anthropic-messages stream with the official ``anthropic`` SDK.

``client.messages.stream(...)`` through a mock transport, its events iterated and the
accumulated message taken from ``get_final_message()`` (or the snapshot when the SDK
raised).  The SDK ships its own httpx fork, ``httpx2``, and refuses plain httpx objects.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2

from llmbridge.dialects.anthropic_messages.common import EXT, STOP_TO_HUB

from . import FINISH_CATEGORY, Summary

CARRIES_THINKING = True


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
    carried: dict[str, Any] = {}  # what our encoder put under "llmbridge" on message_delta
    inputs: dict[int, list[str]] = {}  # tool input JSON as streamed, by block index
    stream_manager = client.messages.stream(model="m", max_tokens=1024, messages=[{"role": "user", "content": "hi"}])
    try:
        with stream_manager as stream:
            try:
                for event in stream:
                    if event.type == "message_start":
                        carried = (event.message.model_extra or {}).get(EXT) or {}
                    elif event.type == "message_delta":
                        carried = (event.model_extra or {}).get(EXT) or {}
                    elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                        inputs.setdefault(event.index, []).append(event.delta.partial_json)
                message = stream.get_final_message()
            except Exception as exc:  # the SDK's own exceptions, reported as such
                error = f"{type(exc).__name__}: {exc}"
                message = stream.current_message_snapshot if _has_snapshot(stream) else None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return summarize(message, error, carried, inputs)


def _complete(streamed: str) -> bool:
    if not streamed.strip():
        return True
    try:
        json.loads(streamed)
    except ValueError:
        return False
    return True


def _has_snapshot(stream: Any) -> bool:
    try:
        return stream.current_message_snapshot is not None
    except (AssertionError, AttributeError):
        return False


def summarize(
    message: Any,
    error: str | None = None,
    carried: dict[str, Any] | None = None,
    inputs: dict[int, list[str]] | None = None,
) -> Summary:
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
            carried_args = ((block.model_extra or {}).get(EXT) or {}).get("arguments")
            if not _complete("".join((inputs or {}).get(n, ()))) or not _complete(carried_args or ""):
                args = None  # cut off (max_tokens): the SDK shows a partial parse, the JSON is invalid
            summary.tool_calls.append((block.name, args))
            summary.tool_call_ids.append(block.id)
    summary.text = "".join(text)
    summary.thinking = "".join(thinking)
    carried = carried or {}
    finish = carried.get("finish") if isinstance(carried.get("finish"), dict) else None
    if finish is not None:  # a hub reason Anthropic has no word for, carried by llmbridge
        summary.finish = FINISH_CATEGORY.get(finish.get("reason"))
    elif message.stop_reason:
        summary.finish = FINISH_CATEGORY.get(STOP_TO_HUB.get(message.stop_reason, "other"))
    usage = message.usage
    unknown = set((carried.get("usage") or {}).get("none") or ())
    if usage is not None:
        fresh = usage.input_tokens or 0
        cached = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
        summary.input_tokens = None if "input_tokens" in unknown else fresh + cached
        summary.output_tokens = None if "output_tokens" in unknown else usage.output_tokens
    return summary
