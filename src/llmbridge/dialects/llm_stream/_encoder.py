"""The llm-stream stream encoder: hub events -> ``event: <type>`` / ``data: <envelope>`` SSE events."""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import json_encode, not_a_hub_event
from ._common import (
    DELTA_KEY_BY_KIND,
    OTHER_KIND_KEY,
    SEQ_LIMIT,
    VERSION,
    annotation,
    error_fields,
    finish_fields,
    usage_fields,
)


def frame(event_type: str, obj: dict) -> bytes:
    """One SSE event: ``event: <event_type>`` and ``obj`` as its one ``data:`` line."""
    return b"event: " + event_type.encode() + b"\ndata: " + json_encode(obj) + b"\n\n"


def _delta_key(kind: str, choice: int) -> str:
    """The ``content.delta`` field that grows a block of ``kind`` in ``choice``."""
    if kind == "text":
        return "text" if choice == 0 else "llmbridge:text"
    return DELTA_KEY_BY_KIND.get(kind, OTHER_KIND_KEY)


def _block_info(e: hub.BlockStart, with_kind: bool, with_id: bool = True) -> dict | None:
    """The BlockStart fields the draft has no place for, as the value of ``llmbridge:block``."""
    info: dict[str, Any] = {}
    if with_kind:
        info["kind"] = e.kind
    if e.choice:
        info["choice"] = e.choice
    if with_id and e.id is not None:
        info["id"] = e.id
    if with_id and e.name is not None:
        info["name"] = e.name
    if e.mime_type is not None:
        info["mime_type"] = e.mime_type
    if e.fidelity:
        info["fidelity"] = e.fidelity
    if e.extensions:
        info["extensions"] = e.extensions
    return info or None


class _ToolBuffer:
    __slots__ = ("annotations", "parts", "start")

    def __init__(self, start: hub.BlockStart) -> None:
        self.start = start
        self.parts: list[str] = []
        self.annotations: list[dict] = []


class StreamEncoder:
    """Hub events to LLM-Stream SSE bytes.

    Buffers: a tool call of choice 0 until its block stops (``tool.call`` is one event); a
    block's start until its first delta (they share one ``content.delta``); a block's
    ``content.stop`` until the next event shows whether the turn's ``stop_reason`` goes on it.

    Terminal rule: ``ResponseEnd`` writes ``stream.end``; an ``Error`` writes ``error`` then
    ``stream.end`` (tool calls cut off ride on the error, never as calls to run); a ``seq``
    that would reach ``seq_limit`` ends the stream the same way (§8.4).  Refuses what is not
    a hub event (``TypeError``); after the end it writes nothing.
    """

    def __init__(self, seq_limit: int = SEQ_LIMIT) -> None:
        self.seq = 0  # the next seq to send
        self.seq_limit = seq_limit
        self._last_regular = seq_limit - 3  # keep two seqs for error + stream.end
        self._ended = False
        self._response_id: str | None = None
        self._request_id: str | None = None
        self._keys: dict[int, str] = {}  # open streamed block -> its delta key
        self._choice: dict[int, int] = {}  # every block seen -> its choice
        self._tools: dict[int, _ToolBuffer] = {}  # open buffered tool calls
        self._pending_start: dict | None = None  # a content.delta waiting for its first text
        self._pending_start_index = -1
        self._pending_stop: dict | None = None  # a content.stop waiting for a Finish
        self._annotations: list[dict] = []  # Extension events riding on the next frame

    def _emit(self, event_type: str, fields: dict) -> bytes:
        if self._ended:
            return b""
        if self.seq > self._last_regular and event_type not in ("error", "stream.end"):
            return self._exhausted()
        obj = {"v": VERSION, "seq": self.seq, "type": event_type}
        obj.update(fields)
        if self._annotations:
            obj["llmbridge:annotations"] = self._annotations
            self._annotations = []
        self.seq += 1
        return frame(event_type, obj)

    def _exhausted(self) -> bytes:
        """§8.4: never send a seq at or above the limit; end with an error instead."""
        error = hub.Error(f"seq would exceed {self.seq_limit - 1}", "protocol_error", code="seq_exhausted")
        return self._terminate(error)

    def _terminate(self, error: hub.Error | None) -> bytes:
        out = b""
        if error is not None:
            fields: dict[str, Any] = {"error": error_fields(error)}
            if error.status is not None:
                fields["llmbridge:status"] = error.status
            if error.body is not None:
                fields["llmbridge:body"] = error.body
            partial = [self._tool_call_fields(i, t, partial=True) for i, t in self._tools.items()]
            for tool in self._tools.values():
                self._annotations.extend(tool.annotations)
            if partial:
                # Cut-off calls must not look like calls to run; they ride on the error event.
                fields["llmbridge:partial_tool_calls"] = partial
            self._tools.clear()
            out = self._emit("error", fields)
        end: dict[str, Any] = {}
        if self._request_id is not None:
            end["request_id"] = self._request_id
        out += self._emit("stream.end", end)
        self._ended = True
        return out

    def _tool_call_fields(self, index: int, tool: _ToolBuffer, partial: bool = False) -> dict:
        start = tool.start
        arguments = "".join(tool.parts)
        if partial:  # as it was when cut off: nothing filled in
            fields: dict[str, Any] = {"index": index, "arguments": arguments}
            if start.id is not None:
                fields["id"] = start.id
            if start.name is not None:
                fields["name"] = start.name
        else:  # the draft needs an id to answer to and JSON arguments ("" means no arguments)
            call_id = start.id if start.id is not None else f"call_{self._response_id or 'llmbridge'}_{index}"
            fields = {"index": index, "id": call_id, "name": start.name or "", "arguments": arguments or "{}"}
        info = _block_info(start, False, with_id=False)
        if info:
            fields["llmbridge:block"] = info
        return fields

    def _flush_start(self) -> bytes:
        obj = self._pending_start
        if obj is None:
            return b""
        self._pending_start = None
        obj["delta"] = {self._keys[self._pending_start_index]: ""}
        return self._emit("content.delta", obj)

    def _flush_stop(self) -> bytes:
        obj = self._pending_stop
        if obj is None:
            return b""
        self._pending_stop = None
        return self._emit("content.stop", obj)

    def encode(self, event: hub.Event) -> bytes:
        """The SSE bytes for ``event`` (``b""`` while buffering and after the end)."""
        if self._ended:
            return b""
        # `type(event) is X` rather than isinstance: the fastest test, hub events are never
        # subclassed, and mypy narrows it; Delta first, as it is nearly every event.
        if type(event) is hub.Delta:
            text = event.text
            if not text:
                return b""  # nothing to say; an empty delta would only cost a seq
            index = event.index
            out = b""
            pending = self._pending_start
            if pending is not None:
                if index == self._pending_start_index:  # the block's start and first text: one event
                    self._pending_start = None
                    pending["delta"] = {self._keys[index]: text}
                    return self._emit("content.delta", pending)
                out = self._flush_start()
            key = self._keys.get(index)
            if key is not None:
                if self._annotations or self.seq > self._last_regular:
                    delta = {"index": index, "role": "assistant", "delta": {key: text}}
                    return out + self._emit("content.delta", delta)
                # The hot path: the same bytes _emit would give, without building dicts.
                seq = self.seq
                self.seq = seq + 1
                return b"".join(
                    (
                        out,
                        b'event: content.delta\ndata: {"v":"1.0","seq":',
                        str(seq).encode(),
                        b',"type":"content.delta","index":',
                        str(index).encode(),
                        b',"role":"assistant","delta":{',
                        json_encode(key),
                        b":",
                        json_encode(text),
                        b"}}\n\n",
                    )
                )
            tool = self._tools.get(index)
            if tool is not None:
                tool.parts.append(text)
            return out
        out = b""
        if self._pending_start is not None and type(event) is not hub.Extension:
            out = self._flush_start()
        pending_stop = self._pending_stop
        if pending_stop is not None and type(event) is not hub.Usage and type(event) is not hub.Extension:
            if type(event) is hub.Finish and self._choice.get(pending_stop["index"]) == event.choice:
                self._pending_stop = None
                return out + self._emit("content.stop", finish_fields(event, pending_stop))
            out += self._flush_stop()
        if type(event) is hub.BlockStart:
            return out + self._block_start(event)
        if type(event) is hub.BlockStop:
            return out + self._block_stop(event)
        if type(event) is hub.Usage:
            return out + self._emit("usage", usage_fields(event))
        if type(event) is hub.Extension:
            tool = self._tools.get(event.index) if event.index is not None else None
            (tool.annotations if tool is not None else self._annotations).append(annotation(event))
            return out
        if type(event) is hub.Finish:
            fields: dict[str, Any] = {}
            if event.choice:
                fields["llmbridge:choice"] = event.choice
            return out + self._emit("content.stop", finish_fields(event, fields))
        if type(event) is hub.ResponseStart:
            return out + self._stream_start(event)
        if type(event) is hub.Error:
            return out + self._terminate(event)
        if type(event) is hub.ResponseEnd:
            if event.request_id is not None:
                self._request_id = event.request_id
            for index, tool in list(self._tools.items()):  # not valid hub, but never drop a call
                out += self._tool_call(index, tool)
            return out + self._terminate(None)
        not_a_hub_event(event)

    def _stream_start(self, e: hub.ResponseStart) -> bytes:
        self._response_id = e.id
        self._request_id = e.request_id
        fields: dict[str, Any] = {}
        if e.id is not None:
            fields["id"] = e.id
        if e.request_id is not None:
            fields["request_id"] = e.request_id
        if e.model is not None:
            fields["model"] = e.model
        if e.created is not None:
            fields["created"] = e.created
        if e.extensions:
            fields["llmbridge:extensions"] = e.extensions
        return self._emit("stream.start", fields)

    def _block_start(self, e: hub.BlockStart) -> bytes:
        self._choice[e.index] = e.choice
        if e.kind == "tool_call" and e.choice == 0:
            self._tools[e.index] = _ToolBuffer(e)
            return b""
        key = _delta_key(e.kind, e.choice)
        self._keys[e.index] = key
        obj: dict[str, Any] = {"index": e.index, "role": "assistant"}
        info = _block_info(e, key == OTHER_KIND_KEY)
        if info:
            obj["llmbridge:block"] = info
        self._pending_start = obj
        self._pending_start_index = e.index
        return b""

    def _tool_call(self, index: int, tool: _ToolBuffer) -> bytes:
        del self._tools[index]
        self._annotations.extend(tool.annotations)
        return self._emit("tool.call", self._tool_call_fields(index, tool))

    def _block_stop(self, e: hub.BlockStop) -> bytes:
        out = b""
        tool = self._tools.get(e.index)
        if tool is not None:
            out = self._tool_call(e.index, tool)
        elif self._keys.pop(e.index, None) is None:
            return b""  # not an open block: invalid hub input, nothing to stop
        stop: dict[str, Any] = {"index": e.index}
        if e.fidelity:
            stop["llmbridge:fidelity"] = e.fidelity
        if e.extensions:
            stop["llmbridge:extensions"] = e.extensions
        self._pending_stop = stop
        return out
