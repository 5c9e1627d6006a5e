"""The mmsp stream encoder: hub events -> ``data: <UniEvent JSON>`` lines, then ``data: [DONE]``."""

from __future__ import annotations

import enum
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


class _Out(enum.Enum):
    """Where an encoder is: ``OPEN`` -> ``CLOSED`` on ``ResponseEnd`` or a hub ``Error`` (the
    ``[DONE]`` line is out); ``OPEN`` -> ``HOLDING`` when only MMSP's grammar failed (tool
    arguments that do not parse): the error waits for the end, collecting the hub events that
    follow, and ``HOLDING`` -> ``CLOSED`` on ``ResponseEnd``."""

    OPEN = "open"
    HOLDING = "holding"
    CLOSED = "closed"


_OPEN, _HOLDING, _CLOSED = _Out.OPEN, _Out.HOLDING, _Out.CLOSED


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
        self._state = _OPEN
        self._failure: dict | None = None  # the error event's object, once there is one
        self._after: list[dict] = []  # HOLDING: the hub events that came after the failure

    def encode(self, event: hub.Event) -> bytes:
        if self._state is not _OPEN:
            if self._state is _CLOSED:
                return b""
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
            self._state = _CLOSED
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
        self._state = _HOLDING
        if type(event) is hub.ResponseEnd:
            self._after.append(event_to_dict(event))
            return self._flush()
        return b""

    def _flush(self) -> bytes:
        self._state = _CLOSED
        return b"data: " + json_encode({"error": self._failure}) + b"\n\n" + DONE
