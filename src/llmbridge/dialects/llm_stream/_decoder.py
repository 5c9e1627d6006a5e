"""The llm-stream stream decoder: SSE events -> hub events, checking the draft's grammar."""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from ... import hub, sse
from ..base import SSEStreamDecoder, json_decode
from ._common import KIND_BY_DELTA_KEY, NAME, NS, OTHER_KIND_KEY, SEQ_LIMIT, USAGE_DETAILS, VERSION, finish


class _Wire(enum.Enum):
    """Where a decoder is in the draft's stream grammar: one state, not a flag per fact (h11's
    way), so no impossible mix (ended but never started) can be written down.

    ``START`` -> ``OPEN`` on the first event (``stream.start``, or any other, reported as
    ``start-first``); ``OPEN`` -> ``ERRORED`` on an ``error`` event (then only ``stream.end``
    may come); ``OPEN`` or ``ERRORED`` -> ``ENDED`` on ``stream.end`` (anything after it is
    ``after-end``).
    """

    START = "start"
    OPEN = "open"
    ERRORED = "errored"
    ENDED = "ended"


# The states as module constants: `is _OPEN` on every event costs no attribute lookup.
_START, _OPEN, _ERRORED, _ENDED = _Wire.START, _Wire.OPEN, _Wire.ERRORED, _Wire.ENDED


class StreamDecoder(SSEStreamDecoder):
    """LLM-Stream SSE bytes to hub events, checking the draft's grammar.

    Terminal rule: ``stream.end`` ends the stream (after an ``error`` event, the hub
    ``Error``); input that stops first gives ``end-missing`` and ``Error(incomplete_stream)``.

    Refuses, recording a violation (rule names): ``json``, ``envelope``, ``seq``, ``seq-exhausted``, ``start-first``,
    ``event-name``, ``after-end``, ``end-missing``, ``block``, ``field``, ``error-last``,
    ``request-id``, ``stop-reason``.  Breaks that lose or garble content (``json``, ``envelope``, ``seq``,
    ``seq-exhausted``, ``block`` on a stopped block, ``field`` on content) end the hub stream
    with ``Error(type="protocol_error")``; checking goes on so every violation is listed.
    """

    dialect = NAME

    def __init__(self, seq_limit: int = SEQ_LIMIT) -> None:
        super().__init__()
        self.seq_limit = seq_limit
        self._next_seq = 0
        self._wire = _START
        # The hub side, apart from the wire's state: a fatal violation ends the hub stream in
        # any wire state, and checking goes on after it (every violation is listed).
        self._hub_started = False  # ResponseStart emitted
        self._failed = False  # a fatal violation ended the hub stream
        self._request_id: str | None = None
        self._response_id: str | None = None
        self._keys: dict[int, str] = {}  # open block -> delta key
        self._choice: dict[int, int] = {}  # every block -> choice
        self._implicit: set[int] = set()  # open blocks that came without an index (§4.8 style)
        self._finished: set[int] = set()  # choices whose stop_reason arrived
        self._next_index = 0
        self._implicit_delta: int | None = None  # the block of content.delta events without index

    @property
    def wire_ended(self) -> bool:
        """``stream.end`` was received: the stream (or a WebSocket turn) is over."""
        return self._wire is _ENDED

    # -- driving

    def _dispatch(self, event: sse.Event) -> None:
        self.event_number += 1
        self.on_event(event)

    def close(self) -> list[hub.Event]:
        for event in self._sse.close():
            self._dispatch(event)
        if self._wire is not _ENDED:
            if self.event_number < 0:
                self.violation("start-first", "no stream.start: the stream is empty", event=-1)
            self.violation("end-missing", "stream ended before stream.end", event=-1)
            if not self.ended:
                self._end_with(hub.Error("stream ended before stream.end", "incomplete_stream"))
        out, self._out = self._out, []
        return out

    def _start_hub(self, start: hub.ResponseStart | None = None) -> None:
        if not self._hub_started:
            self._hub_started = True
            self.emit(start or hub.ResponseStart())

    def _end_with(self, error: hub.Error) -> None:
        """End the hub stream with ``error``, or just end it after the error event already sent."""
        self._start_hub()
        if self._wire is _ERRORED:
            self.finish_stream()
        else:
            self.fail(error)

    def _fatal(self, rule: str, message: str, code: str | None = None) -> None:
        self.violation(rule, message)
        if not self.ended:
            self._end_with(
                hub.Error(f"event {self.event_number}: {rule}: {message}", "protocol_error", code=code or rule)
            )
        self._failed = True

    def on_event(self, event: sse.Event) -> None:
        wire = self._wire
        if wire is _ENDED:
            self.violation("after-end", f"event {event.event!r} after stream.end")
            return
        try:
            obj = json_decode(event.data)
        except msgspec.DecodeError as exc:
            self._next_seq += 1  # the broken event had a seq of its own
            self._fatal("json", f"data is not one complete JSON object ({exc})")
            return
        if type(obj) is not dict:
            self._next_seq += 1
            self._fatal("json", f"data is a JSON {type(obj).__name__}, not an object")
            return
        if wire is _OPEN and not self._failed and event.event == "content.delta" and self._delta_fast(obj):
            return
        event_type = obj.get("type")
        seq = obj.get("seq")
        v = obj.get("v")
        if type(event_type) is not str:
            self._fatal("envelope", "'type' is missing or not a string")
            event_type = None
        if type(v) is not str:
            self._fatal("envelope", "'v' is missing or not a string")
        elif v.split(".", 1)[0] != "1":
            self._fatal("envelope", f"unsupported version v={v!r}")
        if type(seq) is not int:
            self._fatal("envelope", "'seq' is missing or not an integer")
            self._next_seq += 1
        elif seq != self._next_seq:
            if seq >= self.seq_limit:
                self._fatal("seq-exhausted", f"seq {seq} reached 2^53; the stream is terminated", "seq_exhausted")
            elif seq > self._next_seq:
                self._fatal("seq", f"seq {seq} where {self._next_seq} was due: events lost")
            else:
                self._fatal("seq", f"seq {seq} repeated or out of order ({self._next_seq} was due)")
            self._next_seq = max(self._next_seq, seq + 1)
        else:
            self._next_seq = seq + 1
        if event_type is None:
            return
        if event.event != event_type:
            self.violation("event-name", f"SSE event name {event.event!r} but JSON type {event_type!r}")
        if wire is _START:
            self._wire = _OPEN
            if event_type != "stream.start":
                self.violation("start-first", f"{event_type} before stream.start")
                if not self._failed:
                    self._start_hub()
            elif self.event_number != 0 or seq != 0:
                self.violation("start-first", f"stream.start is not the first event with seq 0 (seq {seq!r})")
        elif event_type == "stream.start":
            self.violation("start-first", "a second stream.start")
            return
        if event_type == "stream.end":
            if not self._failed:
                self._on_stream_end(obj)  # reads the state it ends: OPEN or ERRORED
            self._wire = _ENDED
            return
        handler = _HANDLERS.get(event_type)
        if handler is None or self._failed:
            return  # unknown types are ignored (forward compatibility)
        if self._wire is _ERRORED:
            self.violation("error-last", f"{event_type} after the error event")
            return
        handler(self, obj)

    def _delta_fast(self, obj: dict) -> bool:
        """A well-formed text delta of an open block, the bulk of every stream; False: take the full path."""
        seq = obj.get("seq")
        if seq != self._next_seq or type(seq) is not int or seq >= self.seq_limit or obj.get("v") != VERSION:
            return False
        index = obj.get("index")
        if type(index) is not int:
            return False
        key = self._keys.get(index)
        delta = obj.get("delta")
        if key is None or type(delta) is not dict or obj.get("type") != "content.delta":
            return False
        text = delta.get(key)
        if type(text) is not str or "llmbridge:annotations" in obj:
            return False
        self._next_seq = seq + 1
        if text:
            self._out.append(hub.Delta(index, text))
        return True

    # -- helpers

    def _field(self, obj: dict, name: str, types: type | tuple, fatal: bool = False) -> Any:
        value = obj.get(name)
        if value is None or (type(value) in types if isinstance(types, tuple) else type(value) is types):
            return value
        message = f"{name!r} has type {type(value).__name__}"
        if fatal:
            self._fatal("field", message)
        else:
            self.violation("field", message)
        return None

    def _annotations(self, obj: dict) -> None:
        items = obj.get("llmbridge:annotations")
        if type(items) is list:
            for a in items:
                if type(a) is dict and type(a.get("namespace")) is str:
                    index = a.get("index")
                    self.emit(hub.Extension(a["namespace"], a.get("data"), index if type(index) is int else None))

    def _index(self, obj: dict) -> int | None:
        """The block index; a new one for an event that has none (the draft's §4.8 examples)."""
        index = obj.get("index")
        if index is None:
            return None
        if type(index) is not int or index < 0:
            self._fatal("field", f"'index' must be a non-negative integer, not {index!r}")
            return -1
        return index

    def _open_block(self, index: int, kind: str, info: Any, key: str, implicit: bool) -> None:
        info = info if type(info) is dict else {}
        choice = info.get("choice") if type(info.get("choice")) is int else 0
        mime = info.get("mime_type")
        self.emit(
            hub.BlockStart(
                index,
                kind,
                info.get("id"),
                info.get("name"),
                choice,
                mime if type(mime) is str else None,
                info.get("fidelity") or None,
                info.get("extensions") or None,
            )
        )
        self._keys[index] = key
        self._choice[index] = choice
        if implicit:
            self._implicit.add(index)
        self._next_index = max(self._next_index, index + 1)

    def _stop_block(self, index: int, fidelity: Any = None, extensions: Any = None) -> None:
        del self._keys[index]
        self._implicit.discard(index)
        self.emit(
            hub.BlockStop(
                index, fidelity if type(fidelity) is dict else None, extensions if type(extensions) is dict else None
            )
        )

    # -- event handlers

    def _on_stream_start(self, obj: dict) -> None:
        self._request_id = self._field(obj, "request_id", str)
        self._response_id = self._field(obj, "id", str)
        ext = obj.get("llmbridge:extensions")
        self._start_hub(
            hub.ResponseStart(
                self._response_id,
                self._field(obj, "model", str),
                self._field(obj, "created", int),
                self._request_id,
                ext if type(ext) is dict and ext else None,
            )
        )
        self._annotations(obj)

    def _on_content_delta(self, obj: dict) -> None:
        index = self._index(obj)
        implicit = index is None
        if index is None:
            # The draft's own examples leave `index` out of single-block answers: such deltas
            # grow one implicit block, opened at the next free index (0 in a fresh stream).
            index = self._implicit_delta
            if index is None or index not in self._keys:
                index = self._implicit_delta = self._next_index
        elif index < 0:
            return
        delta = obj.get("delta")
        if type(delta) is not dict:
            self._fatal("field", "'delta' is missing or not an object")
            return
        key = self._keys.get(index)
        if key is None:
            if index in self._choice:
                self._fatal("block", f"content.delta for block {index} after its content.stop")
                return
            info = obj.get("llmbridge:block")
            key = next((k for k in delta if k in KIND_BY_DELTA_KEY or k == OTHER_KIND_KEY), "text")
            kind = info.get("kind") if type(info) is dict and type(info.get("kind")) is str else None
            self._open_block(index, kind or KIND_BY_DELTA_KEY.get(key, "text"), info, key, implicit)
        self._annotations(obj)
        text = delta.get(key)
        if text:
            if type(text) is not str:
                self._fatal("field", f"delta {key!r} is not a string")
                return
            self.emit(hub.Delta(index, text))

    def _on_tool_call(self, obj: dict) -> None:
        index = self._index(obj)
        implicit = index is None
        if index is None:
            index = self._next_index
        elif index < 0:
            return
        if index in self._choice:
            self._fatal("block", f"tool.call reuses block index {index}")
            return
        call_id = self._field(obj, "id", str, fatal=True)
        name = self._field(obj, "name", str, fatal=True)
        arguments = self._field(obj, "arguments", str, fatal=True)
        if self._failed:
            return
        if call_id is None or name is None:
            self.violation("field", "tool.call without 'id' or 'name'")
        info = obj.get("llmbridge:block")
        info = dict(info) if type(info) is dict else {}
        info["id"], info["name"] = call_id, name
        self._open_block(index, "tool_call", info, "llmbridge:arguments", implicit)
        self._annotations(obj)
        if arguments:
            self.emit(hub.Delta(index, arguments))

    def _on_content_stop(self, obj: dict) -> None:
        index = self._index(obj)
        if index is not None and index < 0:
            return
        self._annotations(obj)
        choice = obj.get("llmbridge:choice")
        choice = choice if type(choice) is int else 0
        if index is None:
            for open_index in sorted(self._implicit):
                self._stop_block(open_index)
        elif index in self._keys:
            choice = self._choice[index]
            self._stop_block(index, obj.get("llmbridge:fidelity"), obj.get("llmbridge:extensions"))
        elif index in self._choice:
            self.violation("block", f"content.stop for block {index}, which is already stopped")
        else:  # a block that never had content: an empty text block
            self._open_block(index, "text", obj.get("llmbridge:block"), "text", False)
            self._stop_block(index)
        reason = obj.get("stop_reason")
        if reason is None:
            reason = obj.get("llmbridge:stop_reason")
        if reason is None:
            return
        if type(reason) is not str:
            self.violation("field", f"'stop_reason' has type {type(reason).__name__}")
            return
        if choice in self._finished:
            self.violation("stop-reason", f"a second stop_reason for choice {choice}; the first one stands")
            return
        self._finished.add(choice)
        self.emit(finish(reason, choice, obj))

    def _on_usage(self, obj: dict) -> None:
        self._annotations(obj)
        usage = hub.Usage(self._field(obj, "input_tokens", int), self._field(obj, "output_tokens", int))
        for name in USAGE_DETAILS:
            setattr(usage, name, self._field(obj, NS + name, int))
        ext = obj.get("llmbridge:extensions")
        usage.extensions = ext if type(ext) is dict and ext else None
        self.emit(usage)

    def _on_error(self, obj: dict) -> None:
        self._wire = _ERRORED
        err = obj.get("error")
        if type(err) is not dict:
            self.violation("field", "'error' is missing or not an object")
            err = {}
        for call in obj.get("llmbridge:partial_tool_calls") or ():
            if type(call) is dict and type(call.get("index")) is int and call["index"] not in self._choice:
                info = dict(call.get("llmbridge:block") or {})
                info["id"], info["name"] = call.get("id"), call.get("name")
                self._open_block(call["index"], "tool_call", info, "llmbridge:arguments", False)
                if type(call.get("arguments")) is str and call["arguments"]:
                    self.emit(hub.Delta(call["index"], call["arguments"]))
        self._annotations(obj)
        message = err.get("message")
        error_type = err.get("type")
        code = err.get("code")
        status = obj.get("llmbridge:status")
        self.emit(
            hub.Error(
                message if type(message) is str else "error event without a message",
                error_type if error_type in hub.ERROR_TYPES else "api_error",
                str(code)
                if code is not None
                else (error_type if type(error_type) is str and error_type not in hub.ERROR_TYPES else None),
                status if type(status) is int else None,
                obj.get("llmbridge:body"),
            )
        )

    def _on_stream_end(self, obj: dict) -> None:
        self._annotations(obj)
        request_id = self._field(obj, "request_id", str)
        if self._request_id is not None and request_id != self._request_id:
            self.violation("request-id", f"stream.end request_id {request_id!r} differs from stream.start's")
        if self._wire is not _ERRORED:
            for index in list(self._keys):
                if index not in self._implicit:
                    self.violation("block", f"block {index} has no content.stop")
                self._stop_block(index)
        self.finish_stream(request_id)


_HANDLERS = {
    "stream.start": StreamDecoder._on_stream_start,
    "content.delta": StreamDecoder._on_content_delta,
    "tool.call": StreamDecoder._on_tool_call,
    "content.stop": StreamDecoder._on_content_stop,
    "usage": StreamDecoder._on_usage,
    "error": StreamDecoder._on_error,
}  # stream.end is not here: on_event ends the wire state around its handler
