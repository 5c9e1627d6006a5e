"""The mmsp stream encoder: hub events -> ``data: <UniEvent JSON>`` lines, then ``data: [DONE]``."""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import LLMBridgeError
from ...unievent import UniEventView
from ..base import EXTENSION_KEY, json_encode
from ._common import DONE, error_object, event_to_dict, exception_object

_EVENT_HEAD = b'data: {"role":"assistant","event_type":"delta","content_items":[{"type":'
_EVENT_TAIL = b'],"usage_metadata":null,"finish_reason":null,"created_at":'
# A plain fragment's event, as UniEvent.to_dict() encodes it: head + JSON string + tail + created_at + "}".
_FRAGMENT = {
    "text": (_EVENT_HEAD + b'"text.delta","text":', b"}" + _EVENT_TAIL),
    "thinking": (_EVENT_HEAD + b'"thinking.delta","thinking":', b"}" + _EVENT_TAIL),
    "tool_call": (_EVENT_HEAD + b'"tool_call.delta","name":"","arguments":', b',"tool_call_id":""}' + _EVENT_TAIL),
}


class StreamEncoder:
    """Hub events -> ``data: <UniEvent>`` lines, through :class:`UniEventView`.

    A failure ends the MMSP stream with an error event, as MMSP's stream grammar says, and that event
    carries under ``llmbridge`` whatever had not gone out, so our decoder loses nothing: the
    blocks still waiting, the usage and finish reasons so far, and, after tool arguments that
    do not parse, every hub event that followed (the error waits for the end of the stream).

    Terminal rule: ``ResponseEnd`` writes the stop event then ``data: [DONE]``; an ``Error``
    writes the ``{"error": ...}`` event then ``[DONE]``.  Refuses what is not a hub event
    (``TypeError``); after the end it writes nothing.
    """

    def __init__(self, clock: Any = None) -> None:
        self._view = UniEventView(clock)
        self._closed = False
        self._failure: dict | None = None  # the error of a tool call whose arguments do not parse
        self._after: list[dict] = []  # the hub events that came after it

    def encode(self, event: hub.Event) -> bytes:
        if self._closed:
            return b""
        if self._failure is not None:
            self._after.append(event_to_dict(event))
            return self._flush() if type(event) is hub.ResponseEnd else b""
        if type(event) is hub.Delta:
            kind = self._view.plain_fragment(event)
            if kind is not None:  # the hot path: the event's bytes without building it
                if not kind:
                    return b""
                head, tail = _FRAGMENT[kind]
                return b"".join((head, json_encode(event.text), tail, str(self._view.now()).encode(), b"}\n\n"))
        out, exc = self._view.step(event)
        chunks = [b"data: " + json_encode(e.to_dict()) + b"\n\n" for e in out]
        if exc is not None:
            chunks.append(self._fail(event, exc))
        elif type(event) is hub.ResponseEnd:
            chunks.append(DONE)
            self._closed = True
        return b"".join(chunks)

    def _fail(self, event: hub.Event, exc: LLMBridgeError) -> bytes:
        state = self._view.failure_state()
        if type(event) is hub.Error:
            obj = dict(error_object(event))
            obj[EXTENSION_KEY] = {**(obj.get(EXTENSION_KEY) or {}), **state}
            self._failure = obj
            return self._flush()
        # Only MMSP's grammar failed (tool arguments that do not parse): the source goes on, and
        # what follows travels with the error, which waits for the end.
        obj = exception_object(exc)
        obj[EXTENSION_KEY] = {**(obj.get(EXTENSION_KEY) or {}), **state, "resume": True, "after": self._after}
        self._failure = obj
        if type(event) is hub.ResponseEnd:
            self._after.append(event_to_dict(event))
            return self._flush()
        return b""

    def _flush(self) -> bytes:
        self._closed = True
        return b"data: " + json_encode({"error": self._failure}) + b"\n\n" + DONE
