"""Reads an llm-stream body as an independent client of the standard would (the LLM-Stream draft):
SSE events, one JSON envelope each, ``v``/``seq``/``type``; text from ``content.delta``,
calls from ``tool.call``, usage from ``usage``, the turn's ``stop_reason`` from the last
``content.stop``, an ``error`` event raised, no ``stream.end`` an error.  It shares no code
with the llm-stream codec; only the SSE layer.  It reads none of the namespaced
``llmbridge:`` keys: a plain client of the draft does not know them."""

from __future__ import annotations

import json

from llmbridge import sse

from . import FINISH_CATEGORY, Summary

CARRIES_THINKING = False  # the draft has no thinking text; ours rides in a namespaced key

# The draft's stop_reason words (the LLM-Stream draft names end_turn and tool_use; docs/llm-stream.md the rest).
_WORDS = ("end_turn", "max_tokens", "tool_use", "stop_sequence", "content_filter", "refusal", "pause_turn", "error")
REASON = {w: w for w in _WORDS}
# The lossy table: every reason has its own word; one the draft lacks is "other".
SHOWS = {**REASON, "other": "other"}

UNKNOWN_COUNT = None  # no usage event, no usage
NO_USAGE_COUNT = None
NO_FINISH = None
ERROR_SHOWS_FINISH = True  # usage and content.stop are events of their own, before the error


class StreamError(Exception):
    pass


def read(body: bytes) -> Summary:
    decoder = sse.Decoder()
    s = Summary(thinking="")
    ended = False
    expected_seq = 0
    try:
        for event in decoder.feed(body) + decoder.close():
            obj = json.loads(event.data)
            if obj.get("v") != "1.0" or obj.get("seq") != expected_seq or obj.get("type") != event.event:
                raise StreamError(f"bad envelope at seq {expected_seq}: {event.data[:80]}")
            expected_seq += 1
            kind = obj["type"]
            if kind == "content.delta":
                delta = obj.get("delta") or {}
                s.text += delta.get("text", "")
            elif kind == "tool.call":
                try:  # a call cut off by max_tokens keeps its partial arguments
                    arguments = json.loads(obj["arguments"])
                except ValueError:
                    arguments = None
                s.tool_calls.append((obj["name"], arguments))
                s.tool_call_ids.append(obj["id"])
            elif kind == "usage":
                s.input_tokens = obj.get("input_tokens", s.input_tokens)
                s.output_tokens = obj.get("output_tokens", s.output_tokens)
            elif kind == "content.stop" and "stop_reason" in obj:
                s.stop = obj["stop_reason"]
                s.finish = FINISH_CATEGORY.get(obj["stop_reason"], "other")
            elif kind == "error":
                err = obj.get("error") or {}
                raise StreamError(f"{err.get('type')}: {err.get('message')}")
            elif kind == "stream.end":
                ended = True
        if not ended:
            raise StreamError("no stream.end")
    except Exception as exc:
        s.error = f"{type(exc).__name__}: {exc}"
    return s
