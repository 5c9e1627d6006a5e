"""Reads an openai-chat stream with the official ``openai`` SDK's stream helper."""

from __future__ import annotations

import json

import httpx
import openai

from . import FINISH_CATEGORY, Summary

CARRIES_THINKING = True  # as delta.reasoning_content, which the SDK keeps as an extra field

_WIRE_CATEGORY = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool",
    "function_call": "tool",
    "content_filter": "filter",
    "error": "error",
}


def client_for(body: bytes, content_type: str = "text/event-stream") -> openai.OpenAI:
    """An SDK client whose every request is answered with ``body``."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": content_type})

    transport = httpx.MockTransport(handler)
    return openai.OpenAI(
        base_url="http://test/v1", api_key="x", http_client=httpx.Client(transport=transport), max_retries=0
    )


def read(body: bytes) -> Summary:
    client = client_for(body)
    summary = Summary(thinking="")
    bridge_finish = None
    stream = client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}])
    snapshot = None
    try:
        with stream as events:
            for event in events:
                if event.type == "chunk":
                    for choice in event.chunk.choices:
                        extra = getattr(choice, "model_extra", None) or {}
                        bridge = extra.get("llmbridge")
                        if choice.index == 0 and isinstance(bridge, dict) and bridge.get("finish"):
                            bridge_finish = bridge["finish"]
                    snapshot = event.snapshot
            try:
                completion = events.get_final_completion()
            except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as exc:
                completion = exc.completion  # raised by design for parsing; the stream itself is fine
    except Exception as exc:  # the SDK's own error, e.g. APIError for an error chunk
        summary.error = f"{type(exc).__name__}: {exc}"
        completion = snapshot
    if completion is None:
        return summary
    _fill(summary, completion, bridge_finish)
    return summary


def _fill(summary: Summary, completion, bridge_finish: str | None) -> None:
    choice = next((c for c in completion.choices if c.index == 0), None)
    if choice is not None:
        message = choice.message
        summary.text = (message.content or "") + (message.refusal or "")
        extra = getattr(message, "model_extra", None) or {}
        summary.thinking = extra.get("reasoning_content") or ""
        for call in message.tool_calls or []:
            args = call.function.arguments
            try:
                parsed = json.loads(args) if args and args.strip() else {}
            except ValueError:
                parsed = None
            summary.tool_calls.append((call.function.name, parsed))
            summary.tool_call_ids.append(call.id)
        reason = choice.finish_reason
        if bridge_finish in FINISH_CATEGORY:
            summary.finish = FINISH_CATEGORY[bridge_finish]
        elif reason == "stop" and message.refusal:
            summary.finish = "filter"
        elif reason:
            summary.finish = _WIRE_CATEGORY.get(reason, "other")
    usage = completion.usage
    if usage is not None:
        summary.input_tokens = usage.prompt_tokens
        summary.output_tokens = usage.completion_tokens
