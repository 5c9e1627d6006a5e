"""Readers for the translation matrix: each reads a streamed body of one dialect with that
dialect's official SDK (an independent reader of the standard for llm-stream, MMSP's own
client for mmsp) and returns a :class:`Summary` of what that client shows, nothing more.

Each dialect has a module here, ``tests/readers/<module>.py`` (``openai_chat``,
``openai_responses``, ``anthropic_messages``, ``gemini``, ``llm_stream``, ``mmsp``), with::

    CARRIES_THINKING: bool        # does the SDK show thinking text?
    REASON: dict[str, str]        # the SDK's finish word -> the standard's stop_reason (hand-written)
    SHOWS: dict[str, str]         # a stop_reason -> the word this SDK shows for it (the lossy table)
    UNKNOWN_COUNT: int | None     # what the SDK shows for a token count the stream does not know
    NO_USAGE_COUNT: int | None    # ... and for each count of a stream that has no usage at all
    NO_FINISH: str | None         # the word the SDK shows for a stream that has no finish reason
    ERROR_SHOWS_FINISH: bool      # does the SDK still show the finish and usage sent before an error?
    def read(body: bytes) -> Summary

``read`` feeds ``body`` to the SDK through a mock transport (the SDK's real HTTP code path),
uses the SDK's stream helper/accumulator, and returns what the SDK exposes.  A reader never
looks at llmbridge's own extension fields (the ``llmbridge`` keys): a value that a dialect
cannot express shows as the dialect's nearest word, and the tests say so through ``SHOWS``.
An exception raised by the SDK is caught and its class name and message go into
``Summary.error`` (with what was received before it in the other fields).

The tables here are written from the vendors' documentation, not imported from llmbridge:
a wrong entry in one of llmbridge's maps must not be able to agree with itself.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field

from llmbridge import hub

# The standard's stop_reason (the LLM-Stream draft) compared by category: what every dialect can tell apart.
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
    # The SDK's own finish word (stop_reason, finish_reason, finishReason, status...), exactly as
    # shown; kept out of == so that summaries of different dialects still compare.
    stop: str | None = field(default=None, compare=False)


def reader(dialect: str):
    """The reader module of ``dialect``."""
    return importlib.import_module(f"tests.readers.{dialect.replace('-', '_')}")


def expected(events: list[hub.Event], dialect: str | None = None) -> Summary:
    """What a reader should see for this hub stream, by llmbridge's own assembler.

    For tests of one codec against hub streams they build themselves.  The translation
    matrix does not use it: its expectations come from the vendor SDK reading the source
    capture (:mod:`tests.readers.sources`).  With ``dialect``, the values that dialect
    cannot express are replaced by what its SDK shows instead (the reader's ``SHOWS`` for a
    finish reason, ``UNKNOWN_COUNT``/``NO_USAGE_COUNT`` for a token count the stream does
    not know).
    """
    summary = _expected(events)
    if dialect is None:
        return summary
    module = reader(dialect)
    r = hub.assemble(events)
    if summary.error is None:
        if hasattr(module, "shows"):  # the word depends on more than the reason
            summary.stop = module.shows(r)
        else:
            summary.stop = module.SHOWS[r.finish.reason] if r.finish is not None else module.NO_FINISH
        summary.finish = category(dialect, summary)
    if summary.error is not None and not module.ERROR_SHOWS_FINISH:
        # the error event stands in place of the terminal event that would carry these
        summary.finish = summary.input_tokens = summary.output_tokens = None
    else:
        unknown = module.UNKNOWN_COUNT if r.usage is not None else module.NO_USAGE_COUNT
        summary.input_tokens = unknown if summary.input_tokens is None else summary.input_tokens
        summary.output_tokens = unknown if summary.output_tokens is None else summary.output_tokens
    return summary


def category(dialect: str, summary: Summary) -> str | None:
    """The FINISH_CATEGORY of the finish word ``dialect``'s SDK showed in ``summary``."""
    r = reason(dialect, summary)
    return FINISH_CATEGORY.get(r) if r else None


def _expected(events: list[hub.Event]) -> Summary:
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


def arguments(text: str) -> dict | None:
    """Tool arguments as the SDK's user would parse them: None when the JSON is cut short."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def reason(dialect: str, summary: Summary) -> str | None:
    """The standard's stop_reason for the finish word ``dialect``'s SDK showed in ``summary``."""
    module = reader(dialect)
    custom = getattr(module, "reason", None)
    if custom is not None:
        return custom(summary)
    return module.REASON.get(summary.stop, "other") if summary.stop else None
