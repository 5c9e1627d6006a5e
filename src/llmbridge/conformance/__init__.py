"""A black-box conformance suite for servers of LLM-Stream 1.0 and its bindings.

``llmbridge conformance URL`` (or :func:`run`) sends a fixed set of requests to
``URL/v1/stream`` and checks every answer against the draft (the LLM-Stream draft) and
docs/llm-stream-bindings.md; each check names its section and whether the text says
MUST or SHOULD.  See docs/conformance.md.
"""

from __future__ import annotations

from ._catalogue import CHECKS, Check
from ._report import to_json, to_junit, to_text
from ._runner import Report, Result, run
from ._stream import Findings, StreamChecker, sse_events

__all__ = [
    "CHECKS",
    "Check",
    "Findings",
    "Report",
    "Result",
    "StreamChecker",
    "run",
    "sse_events",
    "to_json",
    "to_junit",
    "to_text",
]
