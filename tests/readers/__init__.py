"""Readers for the translation matrix: each reads a streamed body of one dialect with that
dialect's official SDK (or our own reader for llm-stream and mmsp) and returns a
:class:`Summary`, the common ground compared against the source stream.

Each dialect has a module here, ``tests/readers/<module>.py`` (``openai_chat``,
``openai_responses``, ``anthropic_messages``, ``gemini``, ``llm_stream``, ``mmsp``), with::

    CARRIES_THINKING: bool        # does this dialect carry thinking text natively?
    def read(body: bytes) -> Summary

``read`` feeds ``body`` to the SDK through an ``httpx.MockTransport`` (the SDK's real
HTTP code path), uses the SDK's stream helper/accumulator, and returns what the SDK saw.
An exception raised by the SDK is caught and its class name and message go into
``Summary.error`` (with what was received before it in the other fields).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field

from llmbridge import hub

# Finish reasons compared by category: every dialect can tell these apart.
FINISH_CATEGORY = {
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


@dataclass
class Summary:
    text: str = ""  # choice 0's text, concatenated over its text blocks
    thinking: str | None = None  # choice 0's thinking text; None when the dialect does not carry it
    tool_calls: list[tuple[str, dict]] = field(default_factory=list)  # (name, parsed arguments), in order
    tool_call_ids: list[str] = field(default_factory=list)
    finish: str | None = None  # a FINISH_CATEGORY value
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None  # "ExceptionClass: message" when the SDK raised


def reader(dialect: str):
    return importlib.import_module(f"tests.readers.{dialect.replace('-', '_')}")


def expected(events: list[hub.Event]) -> Summary:
    """What a reader should see for this hub stream."""
    r = hub.assemble(events)
    blocks = r.choice_blocks(0)
    calls = []
    for b in blocks:
        if b.kind == "tool_call":
            try:
                args = json.loads(b.text) if b.text.strip() else {}
            except ValueError:
                args = None
            calls.append((b.name or "", args, b.id or ""))
    finish = r.finish.reason if r.finish else None
    u = r.usage or hub.Usage()
    return Summary(
        text="".join(b.text for b in blocks if b.kind == "text"),
        thinking="".join(b.text for b in blocks if b.kind == "thinking"),
        tool_calls=[(n, a) for n, a, _ in calls],
        tool_call_ids=[i for _, _, i in calls],
        finish=FINISH_CATEGORY.get(finish) if finish else None,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        error=f"{r.error.type}: {r.error.message}" if r.error else None,
    )
