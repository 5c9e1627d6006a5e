"""Reads a Responses stream with the official ``openai`` SDK: ``client.responses.stream(...)``,
its event accumulator and its final response object."""

from __future__ import annotations

import json
import warnings

import httpx

from . import Summary

CARRIES_THINKING = True

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "filter"}
_FINISH = {  # hub reasons our encoder carries under "llmbridge" when Responses has no word for them
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool",
    "content_filter": "filter",
    "refusal": "filter",
    "pause_turn": "other",
    "error": "error",
    "other": "other",
}


def _client(body: bytes):
    import openai

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return openai.OpenAI(
        base_url="http://llmbridge.test/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def _extra(obj) -> dict:
    extra = getattr(obj, "model_extra", None) or {}
    value = extra.get("llmbridge")
    return value if isinstance(value, dict) else {}


def _summarize(response, summary: Summary) -> None:
    """Fill ``summary`` from a final (completed, incomplete or failed) response object."""
    text, thinking, calls, ids = [], [], [], []
    for item in response.output or []:
        kind = item.type
        if kind == "message":
            for part in item.content or []:
                text.append(part.text if part.type == "output_text" else getattr(part, "refusal", "") or "")
        elif kind == "reasoning":
            parts = [p.text for p in item.summary or []]
            parts += [p.text for p in getattr(item, "content", None) or []]
            thinking.append("\n\n".join(parts))
        elif kind == "function_call":
            calls.append((item.name, _arguments(item.arguments)))
            ids.append(item.call_id)
        elif kind == "custom_tool_call":
            calls.append((item.name, {"input": item.input}))
            ids.append(item.call_id)
    summary.text, summary.thinking = "".join(text), "".join(thinking)
    summary.tool_calls, summary.tool_call_ids = calls, ids
    usage = response.usage
    if usage is not None:
        summary.input_tokens, summary.output_tokens = usage.input_tokens, usage.output_tokens
    extra = _extra(response)
    carried = extra.get("finish")
    if "finish" in extra:  # a reason Responses has no status for, or none at all
        summary.finish = _FINISH.get(carried.get("reason")) if isinstance(carried, dict) else None
    elif response.status == "completed":
        summary.finish = "tool" if calls else "stop"
    elif response.status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        summary.finish = _INCOMPLETE.get(reason, "other")
    elif response.status == "failed":
        error = response.error
        summary.error = f"ResponseFailed: {error.message if error else 'response failed'}"


def read(body: bytes) -> Summary:
    summary = Summary()
    final = None
    text: list[str] = []
    thinking: list[str] = []
    calls: dict[str, list] = {}  # item id -> [name, call_id, argument fragments]: what streamed, for errors
    try:
        with warnings.catch_warnings(), _client(body).responses.stream(model="m", input="hi") as stream:
            # pydantic warns while the SDK serializes vendor items newer than its models; not our concern
            warnings.simplefilter("ignore", UserWarning)
            for event in stream:
                kind = event.type
                if kind == "response.output_text.delta":
                    text.append(event.delta)
                elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                    thinking.append(event.delta)
                elif kind == "response.output_item.added" and event.item.type == "function_call":
                    calls[event.item.id] = [event.item.name, event.item.call_id, []]
                elif kind == "response.function_call_arguments.delta" and event.item_id in calls:
                    calls[event.item_id][2].append(event.delta)
                elif kind == "response.function_call_arguments.done" and event.item_id in calls:
                    calls[event.item_id][2] = [event.arguments]
                elif kind in ("response.completed", "response.incomplete", "response.failed"):
                    final = event.response
        if final is None:
            raise RuntimeError("the stream ended without a terminal event")
    except Exception as exc:
        summary.text, summary.thinking = "".join(text), "".join(thinking)
        for name, call_id, fragments in calls.values():
            summary.tool_calls.append((name, _arguments("".join(fragments))))
            summary.tool_call_ids.append(call_id)
        summary.error = f"{type(exc).__name__}: {exc}"
        # what streamed before the error (finish, usage) rides on the error object (see the encoder)
        body = getattr(exc, "body", None)
        carried = body.get("llmbridge") if isinstance(body, dict) else None
        if isinstance(carried, dict):
            finish, usage = carried.get("finish"), carried.get("usage")
            if isinstance(finish, dict):
                summary.finish = _FINISH.get(finish.get("reason"))
            if isinstance(usage, dict):
                summary.input_tokens, summary.output_tokens = usage.get("input_tokens"), usage.get("output_tokens")
        return summary
    _summarize(final, summary)
    return summary


def _arguments(text: str) -> dict | None:
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return None
