"""Reads a Responses stream with the official ``openai`` SDK: ``client.responses.stream(...)``,
its event accumulator and its final response object.

The finish word a user sees is the response's ``status``, and for an incomplete response
``incomplete_details.reason``: ``Summary.stop`` is ``"completed"``, ``"failed"`` or
``"incomplete:<reason>"``.
"""

from __future__ import annotations

import warnings

import httpx

from . import FINISH_CATEGORY, Summary, arguments

CARRIES_THINKING = True

# status[:incomplete reason] as the standard's stop_reason; "completed" with function calls
# is a tool_use turn (see reason()).
REASON = {
    "completed": "end_turn",
    "incomplete:max_output_tokens": "max_tokens",
    "incomplete:content_filter": "content_filter",
    "failed": "error",
}

# The lossy table: what the SDK shows for each of the standard's reasons.
SHOWS = {
    "end_turn": "completed",
    "stop_sequence": "completed",
    "max_tokens": "incomplete:max_output_tokens",
    "tool_use": "completed",  # a turn that ends in function calls is simply completed
    "content_filter": "incomplete:content_filter",
    "refusal": "completed",  # a refusal is a "refusal" content part of a completed message
    "pause_turn": "completed",
    "other": "completed",
    "error": "failed",
}

UNKNOWN_COUNT = None  # no usage object, no usage
NO_USAGE_COUNT = None
NO_FINISH = "completed"  # a response always ends with a status
ERROR_SHOWS_FINISH = False  # response.failed carries neither


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


def _summarize(response, summary: Summary) -> None:
    """Fill ``summary`` from a final (completed, incomplete or failed) response object."""
    text, thinking, calls, ids = [], [], [], []
    refused = False
    for item in response.output or []:
        kind = item.type
        if kind == "message":
            for part in item.content or []:
                if part.type == "output_text":
                    text.append(part.text)
                else:
                    refused = refused or part.type == "refusal"
                    text.append(getattr(part, "refusal", "") or "")
        elif kind == "reasoning":
            parts = [p.text for p in item.summary or []]
            parts += [p.text for p in getattr(item, "content", None) or []]
            thinking.append("\n\n".join(parts))
        elif kind == "function_call":
            calls.append((item.name, arguments(item.arguments)))
            ids.append(item.call_id)
        elif kind == "custom_tool_call":
            calls.append((item.name, {"input": item.input}))
            ids.append(item.call_id)
    summary.text, summary.thinking = "".join(text), "".join(thinking)
    summary.tool_calls, summary.tool_call_ids = calls, ids
    usage = response.usage
    if usage is not None:
        summary.input_tokens, summary.output_tokens = usage.input_tokens, usage.output_tokens
    if response.status == "incomplete":
        details = response.incomplete_details
        summary.stop = f"incomplete:{details.reason if details else None}"
    else:
        summary.stop = response.status
    if response.status == "completed":
        summary.finish = "tool" if calls else "filter" if refused else "stop"
    elif response.status == "incomplete":
        summary.finish = FINISH_CATEGORY.get(REASON.get(summary.stop, "other"))
    elif response.status == "failed":
        error = response.error
        summary.error = f"ResponseFailed: {error.message if error else 'response failed'}"


def read(body: bytes) -> Summary:
    summary = Summary()
    final = None
    # what streamed, by output_index: the items' order, which interleaved deltas need not keep
    text: dict[int, list[str]] = {}
    thinking: dict[int, list[str]] = {}
    calls: dict[str, list] = {}  # item id -> [name, call_id, argument fragments]: what streamed, for errors
    try:
        with warnings.catch_warnings(), _client(body).responses.stream(model="m", input="hi") as stream:
            # pydantic warns while the SDK serializes vendor items newer than its models; not our concern
            warnings.simplefilter("ignore", UserWarning)
            for event in stream:
                kind = event.type
                if kind == "response.output_text.delta":
                    text.setdefault(event.output_index, []).append(event.delta)
                elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                    thinking.setdefault(event.output_index, []).append(event.delta)
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
        summary.text = "".join("".join(text[k]) for k in sorted(text))
        summary.thinking = "".join("".join(thinking[k]) for k in sorted(thinking))
        for name, call_id, fragments in calls.values():
            summary.tool_calls.append((name, arguments("".join(fragments))))
            summary.tool_call_ids.append(call_id)
        summary.error = f"{type(exc).__name__}: {exc}"
        return summary
    _summarize(final, summary)
    return summary


def reason(summary: Summary) -> str | None:
    """The standard's stop_reason for what the SDK showed."""
    if summary.stop == "completed":
        return "tool_use" if summary.tool_calls else "end_turn"
    return REASON.get(summary.stop, "other") if summary.stop else None
