"""Reads an mmsp body the way an MMSP client does: ``data:`` lines parsed as UniEvents,
the grammar enforced, the message assembled from the ``.done`` items and the stop event.

A stream that ends in an error event (MMSP's stream grammar: "a stream ends with stop or with an
exception") has no stop event; what came before the error, and what our encoder carried
beside it under ``llmbridge`` (blocks still waiting, usage, finish reasons), is read back
with our own mmsp decoder.
"""

from __future__ import annotations

import json

from llmbridge import hub, sse
from llmbridge.dialects import mmsp
from llmbridge.dialects.base import decode_all
from llmbridge.unievent import FINISH_FROM_MMSP, UniEvent, assemble_message, grammar_violations

from . import FINISH_CATEGORY, Summary

CARRIES_THINKING = True


class StreamError(Exception):
    """The stream broke MMSP's grammar, or ended without its stop event."""


class ServerError(Exception):
    """The server sent ``data: {"error": ...}``."""


def read(body: bytes) -> Summary:
    decoder = sse.Decoder()
    events: list[UniEvent] = []
    error: str | None = None
    done = failed = False
    try:
        for event in decoder.feed(body) + decoder.close():
            if event.data.strip() == "[DONE]":
                done = True
                break
            obj = json.loads(event.data)
            if "error" in obj and "event_type" not in obj:
                failed = True
                err = obj["error"]
                raise ServerError(f"{err.get('type')}: {err.get('message')}")
            events.append(UniEvent.from_dict(obj))
        problems = grammar_violations(events)
        if problems:
            raise StreamError("; ".join(problems[:3]))
        if not done:
            raise StreamError("no [DONE] after the stop event")
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if failed:
        return _read_failed(body, error)
    message = assemble_message(events)
    summary = Summary(
        text=message.text,
        thinking=message.thinking,
        tool_calls=[(c.name, c.arguments) for c in message.tool_calls],
        tool_call_ids=[c.tool_call_id for c in message.tool_calls],
        error=error,
    )
    extra = message.llmbridge or {}
    if message.finish_reason is not None and not ("finish" in extra and extra["finish"] is None):
        # Our own reader knows the hub reason kept beside MMSP's coarser word.
        reason = (extra.get("finish") or {}).get("reason") or FINISH_FROM_MMSP.get(message.finish_reason)
        summary.finish = FINISH_CATEGORY.get(reason)
    usage = message.usage_metadata
    if usage is not None:
        summary.input_tokens = usage.prompt_tokens
        if usage.response_tokens is not None or usage.thoughts_tokens is not None:
            summary.output_tokens = (usage.response_tokens or 0) + (usage.thoughts_tokens or 0)
    return summary


def _read_failed(body: bytes, error: str | None) -> Summary:
    r = hub.assemble(decode_all(mmsp.StreamDecoder(), body))
    blocks = r.choice_blocks(0)
    calls = []
    for b in blocks:
        if b.kind == "tool_call":
            try:
                args = json.loads(b.text) if b.text.strip() else {}
            except ValueError:
                args = None
            calls.append((b.name or "", args, b.id or ""))
    usage = r.usage or hub.Usage()
    return Summary(
        text="".join(b.text for b in blocks if b.kind == "text"),
        thinking="".join(b.text for b in blocks if b.kind == "thinking"),
        tool_calls=[(n, a) for n, a, _ in calls],
        tool_call_ids=[i for _, _, i in calls],
        finish=FINISH_CATEGORY.get(r.finish.reason) if r.finish else None,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        error=error,
    )
