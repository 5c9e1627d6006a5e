"""Reads an openai-chat stream with the official ``openai`` SDK's stream helper."""

from __future__ import annotations

import httpx
import openai

from llmbridge import hub

from . import FINISH_CATEGORY, Summary, arguments

CARRIES_THINKING = True  # as delta.reasoning_content, which the SDK keeps as an extra field

# OpenAI's finish_reason values as the standard's stop_reason ("error" is OpenRouter's word).
REASON = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
    "error": "error",
}

# The lossy table: the finish_reason the SDK shows for each of the standard's reasons.
SHOWS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "content_filter": "content_filter",
    "refusal": "content_filter",  # withheld; but OpenAI's own refusals (message.refusal) keep "stop": shows()
    "pause_turn": "stop",  # no word for a paused turn
    "other": "stop",
    "error": "error",  # OpenRouter's word
}

UNKNOWN_COUNT = 0  # both counts are required integers; the unknown one goes out as 0
NO_USAGE_COUNT = None
NO_FINISH = None
ERROR_SHOWS_FINISH = True  # they came in earlier chunks, which the SDK has accumulated


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
    stream = client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}])
    snapshot = None
    try:
        with stream as events:
            for event in events:
                if event.type == "chunk":
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
    _fill(summary, completion)
    return summary


def _fill(summary: Summary, completion) -> None:
    choice = next((c for c in completion.choices if c.index == 0), None)
    if choice is not None:
        message = choice.message
        summary.text = (message.content or "") + (message.refusal or "")
        extra = getattr(message, "model_extra", None) or {}
        summary.thinking = extra.get("reasoning_content") or ""
        for call in message.tool_calls or []:
            summary.tool_calls.append((call.function.name, arguments(call.function.arguments or "")))
            summary.tool_call_ids.append(call.id)
        reason = choice.finish_reason
        summary.stop = reason
        if reason == "stop" and message.refusal:
            summary.finish = "filter"
        elif reason:
            summary.finish = FINISH_CATEGORY.get(REASON.get(reason, "other"))
    usage = completion.usage
    if usage is not None:
        summary.input_tokens = usage.prompt_tokens
        summary.output_tokens = usage.completion_tokens


def shows(response: hub.Response) -> str | None:
    """The finish_reason the SDK shows for an assembled hub response: SHOWS, except that a
    refusal the model wrote as OpenAI's own ``refusal`` text ends with "stop", as OpenAI's do."""
    finish = response.finish
    if finish is None:
        return NO_FINISH
    blocks = response.choice_blocks(0)
    refused = any(b.kind == "text" and ((b.extensions or {}).get("openai-chat") or {}).get("refusal") for b in blocks)
    if finish.reason == "refusal" and refused and not any(b.kind == "tool_call" for b in blocks):
        return "stop"
    return SHOWS[finish.reason]


def reason(summary: Summary) -> str | None:
    """The standard's stop_reason for what the SDK showed: a refusal is its own reason here."""
    if summary.stop == "stop" and summary.finish == "filter":
        return "refusal"
    return REASON.get(summary.stop, "other") if summary.stop else None
