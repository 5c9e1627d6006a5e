"""LLM-Stream 1.0 (the LLM-Stream draft): the standard request envelope, SSE stream and response forms.

What the draft leaves open is decided in ``docs/llm-stream.md`` ("Implementation notes").
In short: hub data the draft has no field for travels in ``llmbridge:``-namespaced fields,
which conforming parsers ignore and this module reads back, so a round trip through
``llm-stream`` keeps the whole hub content.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub, sse
from ...errors import RequestError
from ..base import SSEStreamDecoder, json_decode, json_encode, not_a_hub_event

__all__ = [
    "ACCEPT_STREAM",
    "DELTA_KEY_BY_KIND",
    "KIND_BY_DELTA_KEY",
    "NAME",
    "NS",
    "NUMBER",
    "OTHER_KIND_KEY",
    "PARAMETERS",
    "REQUEST_CONTENT_TYPE",
    "REQUEST_EXTENSIONS",
    "RESPONSE_CONTENT_TYPE",
    "ROLES",
    "SEQ_LIMIT",
    "STOP_REASONS",
    "STREAM_CONTENT_TYPE",
    "StreamDecoder",
    "StreamEncoder",
    "TOOL_CHOICE_MODES",
    "USAGE_DETAILS",
    "VERSION",
    "decode_error",
    "decode_request",
    "decode_response",
    "encode_error",
    "encode_request",
    "encode_response",
    "endpoint",
]

NAME = "llm-stream"
VERSION = "1.0"
STREAM_CONTENT_TYPE = "text/event-stream"
REQUEST_CONTENT_TYPE = "application/llm-request+json"
RESPONSE_CONTENT_TYPE = "application/json"
ACCEPT_STREAM = 'text/event-stream; profile="llm-stream-1.0"'
SEQ_LIMIT = 2**53  # seq must stay below this (§8.4): the largest safe JSON integer is 2^53 - 1

NS = "llmbridge:"
STOP_REASONS = frozenset(r for r in hub.FINISH_REASONS if r != "other")

# content.delta carries one growing field per block kind; only plain text of choice 0 uses
# the draft's own `text`, everything else a namespaced key that conforming parsers skip.
DELTA_KEY_BY_KIND = {
    "text": "text",
    "thinking": "llmbridge:thinking",
    "data": "llmbridge:data",
    "native": "llmbridge:native",
    "tool_call": "llmbridge:arguments",
}
KIND_BY_DELTA_KEY = {
    "text": "text",
    "llmbridge:text": "text",
    "llmbridge:thinking": "thinking",
    "llmbridge:data": "data",
    "llmbridge:native": "native",
    "llmbridge:arguments": "tool_call",
}
OTHER_KIND_KEY = "llmbridge:content"  # a block kind this version does not know

USAGE_DETAILS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "total_tokens")


def _frame(event_type: str, obj: dict) -> bytes:
    return b"event: " + event_type.encode() + b"\ndata: " + json_encode(obj) + b"\n\n"


def _delta_key(kind: str, choice: int) -> str:
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


def _annotation(e: hub.Extension) -> dict:
    out = {"namespace": e.namespace, "data": e.data}
    if e.index is not None:
        out["index"] = e.index
    return out


def _usage_fields(u: hub.Usage) -> dict:
    out: dict[str, Any] = {}
    if u.input_tokens is not None:
        out["input_tokens"] = u.input_tokens
    if u.output_tokens is not None:
        out["output_tokens"] = u.output_tokens
    for name in USAGE_DETAILS:
        value = getattr(u, name)
        if value is not None:
            out[NS + name] = value
    if u.extensions:
        out["llmbridge:extensions"] = u.extensions
    return out


def _finish_fields(f: hub.Finish, out: dict) -> dict:
    reason = f.reason if f.reason in STOP_REASONS else "other"
    # A stop_reason of another choice must not look like the end of the turn to plain parsers.
    out["stop_reason" if f.choice == 0 else "llmbridge:stop_reason"] = reason
    if f.raw is not None:
        out["llmbridge:raw_reason"] = f.raw
    if f.stop_sequence is not None:
        out["llmbridge:stop_sequence"] = f.stop_sequence
    return out


def _finish(reason: str, choice: int, obj: dict) -> hub.Finish:
    """A stop_reason and its namespaced details; a word this version does not know is kept raw."""
    raw = obj.get("llmbridge:raw_reason")
    sequence = obj.get("llmbridge:stop_sequence")
    if reason not in hub.FINISH_REASONS:
        raw, reason = raw if type(raw) is str else reason, "other"
    return hub.Finish(reason, choice, raw if type(raw) is str else None, sequence if type(sequence) is str else None)


def _error_fields(e: hub.Error) -> dict:
    err: dict[str, Any] = {"type": e.type, "message": e.message}
    if e.code is not None:
        err["code"] = e.code
    return err


# --------------------------------------------------------------------------- stream encoder


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
        return _frame(event_type, obj)

    def _exhausted(self) -> bytes:
        """§8.4: never send a seq at or above the limit; end with an error instead."""
        error = hub.Error(f"seq would exceed {self.seq_limit - 1}", "protocol_error", code="seq_exhausted")
        return self._terminate(error)

    def _terminate(self, error: hub.Error | None) -> bytes:
        out = b""
        if error is not None:
            fields: dict[str, Any] = {"error": _error_fields(error)}
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
        self._pending_start = None
        obj["delta"] = {self._keys[self._pending_start_index]: ""}
        return self._emit("content.delta", obj)

    def _flush_stop(self) -> bytes:
        obj = self._pending_stop
        self._pending_stop = None
        return self._emit("content.stop", obj)

    def encode(self, event: hub.Event) -> bytes:
        if self._ended:
            return b""
        kind = type(event)
        if kind is hub.Delta and not event.text:
            return b""  # nothing to say; an empty delta would only cost a seq
        out = b""
        if self._pending_start is not None:
            if kind is hub.Delta and event.index == self._pending_start_index:
                obj = self._pending_start
                self._pending_start = None
                obj["delta"] = {self._keys[event.index]: event.text}
                return self._emit("content.delta", obj)
            if kind is not hub.Extension:
                out = self._flush_start()
        if kind is hub.Delta:
            key = self._keys.get(event.index)
            if key is not None:
                if self._annotations or self.seq > self._last_regular:
                    delta = {"index": event.index, "role": "assistant", "delta": {key: event.text}}
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
                        str(event.index).encode(),
                        b',"role":"assistant","delta":{',
                        json_encode(key),
                        b":",
                        json_encode(event.text),
                        b"}}\n\n",
                    )
                )
            tool = self._tools.get(event.index)
            if tool is not None:
                tool.parts.append(event.text)
            return out
        if self._pending_stop is not None and kind is not hub.Usage and kind is not hub.Extension:
            if kind is hub.Finish and self._choice.get(self._pending_stop["index"]) == event.choice:
                obj = self._pending_stop
                self._pending_stop = None
                return out + self._emit("content.stop", _finish_fields(event, obj))
            out += self._flush_stop()
        if kind is hub.BlockStart:
            return out + self._block_start(event)
        if kind is hub.BlockStop:
            return out + self._block_stop(event)
        if kind is hub.Usage:
            return out + self._emit("usage", _usage_fields(event))
        if kind is hub.Extension:
            tool = self._tools.get(event.index) if event.index is not None else None
            (tool.annotations if tool is not None else self._annotations).append(_annotation(event))
            return out
        if kind is hub.Finish:
            fields: dict[str, Any] = {}
            if event.choice:
                fields["llmbridge:choice"] = event.choice
            return out + self._emit("content.stop", _finish_fields(event, fields))
        if kind is hub.ResponseStart:
            return out + self._stream_start(event)
        if kind is hub.Error:
            return out + self._terminate(event)
        if kind is hub.ResponseEnd:
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


# --------------------------------------------------------------------------- stream decoder


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
        self._hub_started = False  # ResponseStart emitted
        self._wire_started = False  # stream.start seen (or its absence reported)
        self._wire_ended = False  # stream.end seen
        self._errored = False  # an error event seen
        self._failed = False  # a fatal violation ended the hub stream
        self._request_id: str | None = None
        self._response_id: str | None = None
        self._keys: dict[int, str] = {}  # open block -> delta key
        self._choice: dict[int, int] = {}  # every block -> choice
        self._implicit: set[int] = set()  # open blocks that came without an index (§4.8 style)
        self._finished: set[int] = set()  # choices whose stop_reason arrived
        self._next_index = 0
        self._implicit_delta: int | None = None  # the block of content.delta events without index

    # -- driving

    def _dispatch(self, event: sse.Event) -> None:
        self.event_number += 1
        self.on_event(event)

    def close(self) -> list[hub.Event]:
        for event in self._sse.close():
            self._dispatch(event)
        if not self._wire_ended:
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
        if self._errored:
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
        if self._wire_ended:
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
        if self._fast and event.event == "content.delta" and self._delta_fast(obj):
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
        if not self._wire_started:
            self._wire_started = True
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
            self._wire_ended = True
        handler = _HANDLERS.get(event_type)
        if handler is None or self._failed:
            return  # unknown types are ignored (forward compatibility)
        if self._errored and event_type != "stream.end":
            self.violation("error-last", f"{event_type} after the error event")
            return
        handler(self, obj)

    @property
    def _fast(self) -> bool:
        return self._wire_started and not (self._failed or self._errored)

    def _delta_fast(self, obj: dict) -> bool:
        """A well-formed text delta of an open block, the bulk of every stream; False: take the full path."""
        seq = obj.get("seq")
        if seq != self._next_seq or type(seq) is not int or seq >= self.seq_limit or obj.get("v") != VERSION:
            return False
        index = obj.get("index")
        key = self._keys.get(index) if type(index) is int else None
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
        if implicit:
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
        if implicit:
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
        self.emit(_finish(reason, choice, obj))

    def _on_usage(self, obj: dict) -> None:
        self._annotations(obj)
        values = [self._field(obj, "input_tokens", int), self._field(obj, "output_tokens", int)]
        values += [self._field(obj, NS + name, int) for name in USAGE_DETAILS]
        ext = obj.get("llmbridge:extensions")
        self.emit(hub.Usage(*values, extensions=ext if type(ext) is dict and ext else None))

    def _on_error(self, obj: dict) -> None:
        self._errored = True
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
        if not self._errored:
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
    "stream.end": StreamDecoder._on_stream_end,
}


# --------------------------------------------------------------------------- request envelope

ROLES = ("system", "user", "assistant", "tool")
TOOL_CHOICE_MODES = ("auto", "none", "required")
NUMBER = (int, float)

# Generation parameters: the draft's own names, with the types they must have.
PARAMETERS: dict[str, tuple[type, ...]] = {
    "temperature": NUMBER,
    "top_p": NUMBER,
    "top_k": (int,),
    "max_tokens": (int,),
    "seed": (int,),
    "presence_penalty": NUMBER,
    "frequency_penalty": NUMBER,
}
# Hub request fields the draft does not name: carried in `extensions` under these keys.
REQUEST_EXTENSIONS = {
    "llmbridge:n": "n",
    "llmbridge:parallel_tool_calls": "parallel_tool_calls",
    "llmbridge:response_format": "response_format",
    "llmbridge:thinking": "thinking",
}


def _fail(field: str, message: str) -> RequestError:
    return RequestError(message, field=field)


def _expect(value: Any, types: tuple[type, ...], field: str, what: str) -> Any:
    # bool is an int subclass; exact type checks keep `true` out of numeric fields
    if type(value) not in types:
        # a float where an integer goes: say which ("an integer, not 1.5"), not "a number"
        shown = repr(value) if type(value) is float else _json_type(value)
        raise _fail(field, f"must be {what}, not {shown}")
    return value


def _json_type(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def _opt_str(obj: dict, key: str, field: str) -> str | None:
    value = obj.get(key)
    return None if value is None else _expect(value, (str,), f"{field}.{key}", "a string")


def _decode_part(part: Any, field: str) -> hub.Part | None:
    _expect(part, (dict,), field, "an object")
    kind = part.get("type")
    _expect(kind, (str,), f"{field}.type", "a string")
    ext = part.get("llmbridge:extensions")
    ext = _expect(ext, (dict,), f"{field}.llmbridge:extensions", "an object") if ext is not None else None
    if kind == "text":
        return hub.TextPart(_expect(part.get("text"), (str,), f"{field}.text", "a string"), ext)
    if kind in ("image", "audio", "file"):
        media_type = _opt_str(part, "media_type", field)
        data = _opt_str(part, "data", field)
        url = _opt_str(part, "url", field)
        if (data is None) == (url is None):
            raise _fail(field, f"a {kind} part needs exactly one of 'data' (base64) and 'url'")
        if data is not None and media_type is None:
            raise _fail(f"{field}.media_type", f"is required with 'data' in a {kind} part")
        if kind == "image":
            return hub.ImagePart(media_type, data, url, _opt_str(part, "llmbridge:detail", field), ext)
        return hub.FilePart(media_type, data, url, _opt_str(part, "name", field), ext)
    if ":" in kind:
        return None  # another vendor's part type: ignored, as extensions are (§4.7)
    raise _fail(f"{field}.type", f"unknown content part type {kind!r}")


def _decode_content(content: Any, field: str) -> list[hub.Part]:
    if content is None:
        return []
    if type(content) is str:
        return [hub.TextPart(content)]
    _expect(content, (list,), field, "a string, an array of parts or null")
    parts = [_decode_part(p, f"{field}[{i}]") for i, p in enumerate(content)]
    return [p for p in parts if p is not None]


def _decode_tool_call(call: Any, field: str) -> hub.ToolCallPart:
    _expect(call, (dict,), field, "an object")
    call_id = _expect(call.get("id"), (str,), f"{field}.id", "a string")
    name = _expect(call.get("name"), (str,), f"{field}.name", "a string")
    arguments = call.get("arguments", "{}")
    if type(arguments) is dict:  # lenient: an object where the draft wants its JSON text
        arguments = json_encode(arguments).decode()
    _expect(arguments, (str,), f"{field}.arguments", "a JSON string")
    fidelity = call.get("llmbridge:fidelity")
    return hub.ToolCallPart(call_id, name, arguments, fidelity if type(fidelity) is dict else None)


def _decode_extra_parts(parts: list[hub.Part], extra: Any, field: str) -> list[hub.Part]:
    """Insert the `llmbridge:parts` (thinking, native) at the positions they were taken from."""
    _expect(extra, (list,), field, "an array")
    for i, item in enumerate(extra):
        where = f"{field}[{i}]"
        _expect(item, (dict,), where, "an object")
        at = _expect(item.get("at", len(parts)), (int,), f"{where}.at", "an integer")
        kind = item.get("type")
        if kind == "thinking":
            fidelity = item.get("fidelity")
            part: hub.Part = hub.ThinkingPart(
                _expect(item.get("text", ""), (str,), f"{where}.text", "a string"),
                _expect(fidelity, (dict,), f"{where}.fidelity", "an object") if fidelity is not None else None,
            )
        elif kind == "native":
            part = hub.NativePart(
                _expect(item.get("namespace"), (str,), f"{where}.namespace", "a string"), item.get("data")
            )
        else:
            raise _fail(f"{where}.type", f"unknown extension part type {kind!r}")
        parts.insert(at, part)
    return parts


def _decode_message(msg: Any, field: str) -> hub.Message:
    _expect(msg, (dict,), field, "an object")
    role = msg.get("role")
    if role not in ROLES:
        raise _fail(f"{field}.role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    name = _opt_str(msg, "llmbridge:name", field)
    content = msg.get("content")
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if type(call_id) is not str or not call_id:
            raise _fail(f"{field}.tool_call_id", "is required in a tool message (the id of the tool.call)")
        if content is None:
            raise _fail(f"{field}.content", "is required in a tool message")
        result = hub.ToolResultPart(
            call_id,
            _decode_content(content, f"{field}.content"),
            _expect(msg.get("llmbridge:is_error", False), (bool,), f"{field}.llmbridge:is_error", "a boolean"),
            _opt_str(msg, "llmbridge:tool_name", field),
        )
        return hub.Message("tool", [result], name)
    if content is None and role != "assistant":
        raise _fail(f"{field}.content", f"is required in a {role} message")
    parts = _decode_content(content, f"{field}.content")
    calls = msg.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise _fail(f"{field}.tool_calls", "only assistant messages have tool calls")
        _expect(calls, (list,), f"{field}.tool_calls", "an array")
        parts += [_decode_tool_call(c, f"{field}.tool_calls[{i}]") for i, c in enumerate(calls)]
    elif content is None:
        raise _fail(f"{field}.content", "may be null only when the message has tool_calls")
    if "llmbridge:parts" in msg:
        parts = _decode_extra_parts(parts, msg["llmbridge:parts"], f"{field}.llmbridge:parts")
    return hub.Message(role, parts, name)


def _decode_tool(tool: Any, field: str) -> hub.Tool:
    _expect(tool, (dict,), field, "an object")
    name = tool.get("name")
    if type(name) is not str or not name:
        raise _fail(f"{field}.name", "is required (a non-empty string)")
    out = hub.Tool(name, _opt_str(tool, "description", field))
    if tool.get("parameters") is not None:
        out.parameters = _expect(tool["parameters"], (dict,), f"{field}.parameters", "a JSON Schema object")
    strict = tool.get("llmbridge:strict")
    out.strict = _expect(strict, (bool,), f"{field}.llmbridge:strict", "a boolean") if strict is not None else None
    ext = tool.get("llmbridge:extensions")
    out.extensions = _expect(ext, (dict,), f"{field}.llmbridge:extensions", "an object") if ext is not None else None
    return out


def _decode_tool_choice(choice: Any) -> hub.ToolChoice:
    if type(choice) is str:
        if choice not in TOOL_CHOICE_MODES:
            raise _fail("tool_choice", f'must be one of {", ".join(TOOL_CHOICE_MODES)} or {{"name": ...}}')
        return hub.ToolChoice(choice)
    _expect(choice, (dict,), "tool_choice", 'a string or {"name": "<tool>"}')
    name = choice.get("name")
    if type(name) is not str or not name:
        raise _fail("tool_choice.name", "is required (the tool to call)")
    return hub.ToolChoice("tool", name)


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    """An ``application/llm-request+json`` body to the hub; :class:`RequestError` names the bad field."""
    _expect(body, (dict,), "body", "a JSON object")
    version = body.get("v", body.get("version"))
    if version is not None:
        _expect(version, (str,), "v", "a string")
        if version.split(".", 1)[0] != "1":
            raise _fail("v", f"unsupported version {version!r} (this implementation speaks 1.x)")
    req = hub.Request()
    req.model = _opt_str(body, "model", "body") or model
    stream = body.get("stream", True)
    req.stream = _expect(stream, (bool,), "stream", "a boolean")
    messages = body.get("messages")
    _expect(messages, (list,), "messages", "an array of messages")
    if not messages:
        raise _fail("messages", "must hold at least one message")
    for i, raw in enumerate(messages):
        message = _decode_message(raw, f"messages[{i}]")
        if type(raw) is dict and raw.get("llmbridge:continue") is True and req.messages:
            req.messages[-1].parts.extend(message.parts)  # one hub message split over several
        else:
            role = raw.get("llmbridge:role") if type(raw) is dict else None
            if role in ROLES and role != message.role:
                message.role = role
            req.messages.append(message)
    tools = body.get("tools")
    if tools is not None:
        _expect(tools, (list,), "tools", "an array")
        req.tools = [_decode_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        req.tool_choice = _decode_tool_choice(body["tool_choice"])
    params = body.get("parameters")
    if params is not None:
        _expect(params, (dict,), "parameters", "an object")
        for key, types in PARAMETERS.items():
            if params.get(key) is not None:
                what = "an integer" if types == (int,) else "a number"
                setattr(req, key, _expect(params[key], types, f"parameters.{key}", what))
        stop = params.get("stop")
        if type(stop) is str:
            req.stop = [stop]
        elif stop is not None:
            _expect(stop, (list,), "parameters.stop", "a string or an array of strings")
            for i, s in enumerate(stop):
                _expect(s, (str,), f"parameters.stop[{i}]", "a string")
            req.stop = list(stop)
    metadata = body.get("metadata")
    if metadata is not None:
        _expect(metadata, (dict,), "metadata", "an object")
        for key in ("request_id", "user_id", "session_id"):
            _opt_str(metadata, key, "metadata")
        req.metadata = dict(metadata)
    extensions = body.get("extensions")
    if extensions is not None:
        _expect(extensions, (dict,), "extensions", "an object")
        for key, value in extensions.items():
            vendor, _, name = key.partition(":")
            if not vendor or not name:
                raise _fail(f"extensions.{key}", 'keys must be namespaced as "vendor:name"')
            attr = REQUEST_EXTENSIONS.get(key)
            if attr is None:
                req.extensions[key] = value
            else:
                setattr(req, attr, value)
    return req


def _encode_part(part: hub.Part) -> dict | None:
    t = type(part)
    if t is hub.TextPart:
        out: dict[str, Any] = {"type": "text", "text": part.text}
    elif t is hub.ImagePart or t is hub.FilePart:
        kind = "image" if t is hub.ImagePart else "audio" if (part.media_type or "").startswith("audio/") else "file"
        out = {"type": kind}
        if part.media_type is not None:
            out["media_type"] = part.media_type
        if part.data is not None:
            out["data"] = part.data
        if part.url is not None:
            out["url"] = part.url
        if t is hub.ImagePart and part.detail is not None:
            out["llmbridge:detail"] = part.detail
        if t is hub.FilePart and part.name is not None:
            out["name"] = part.name
    else:
        return None
    if part.extensions:
        out["llmbridge:extensions"] = part.extensions
    return out


def _encode_content(parts: list[hub.Part]) -> str | list[dict]:
    if len(parts) == 1 and type(parts[0]) is hub.TextPart and not parts[0].extensions:
        return parts[0].text
    return [p for p in map(_encode_part, parts) if p is not None]


def _encode_message(message: hub.Message) -> list[dict]:
    """One hub message as one wire message, or several when it holds tool results."""
    results = [p for p in message.parts if type(p) is hub.ToolResultPart]
    rest = [p for p in message.parts if type(p) is not hub.ToolResultPart]
    out: list[dict] = []
    for result in results:
        wire: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": result.tool_call_id,
            "content": _encode_content(result.content),
        }
        if result.is_error:
            wire["llmbridge:is_error"] = True
        if result.name is not None:
            wire["llmbridge:tool_name"] = result.name
        out.append(wire)
    if rest or not results:
        content: list[hub.Part] = []
        calls: list[dict] = []
        extra: list[dict] = []
        for at, part in enumerate(rest):
            t = type(part)
            if t is hub.ToolCallPart:
                call = {"id": part.id, "name": part.name, "arguments": part.arguments}
                if part.fidelity:
                    call["llmbridge:fidelity"] = part.fidelity
                calls.append(call)
            elif t is hub.ThinkingPart:
                item: dict[str, Any] = {"at": at, "type": "thinking", "text": part.text}
                if part.fidelity:
                    item["fidelity"] = part.fidelity
                extra.append(item)
            elif t is hub.NativePart:
                extra.append({"at": at, "type": "native", "namespace": part.namespace, "data": part.data})
            else:
                content.append(part)
        role = "assistant" if calls else message.role
        wire = {"role": role, "content": _encode_content(content) if content or not calls else None}
        if message.role == "tool" and not calls:  # leftover parts of a tool message: keep them with it
            wire["role"] = "user"
        if calls:
            wire["tool_calls"] = calls
        if extra:
            wire["llmbridge:parts"] = extra
        if wire["role"] != message.role:
            wire["llmbridge:role"] = message.role
        out.append(wire)
    if message.name is not None:
        out[0]["llmbridge:name"] = message.name
    for wire in out[1:]:
        wire["llmbridge:continue"] = True
    if out[0]["role"] != message.role:
        out[0]["llmbridge:role"] = message.role
    return out


def encode_request(request: hub.Request) -> dict:
    """The hub request as an ``application/llm-request+json`` body."""
    body: dict[str, Any] = {"v": VERSION}
    if request.model is not None:
        body["model"] = request.model
    body["stream"] = request.stream
    body["messages"] = [wire for m in request.messages for wire in _encode_message(m)]
    if request.tools:
        tools = []
        for tool in request.tools:
            wire: dict[str, Any] = {"name": tool.name}
            if tool.description is not None:
                wire["description"] = tool.description
            wire["parameters"] = tool.parameters
            if tool.strict is not None:
                wire["llmbridge:strict"] = tool.strict
            if tool.extensions:
                wire["llmbridge:extensions"] = tool.extensions
            tools.append(wire)
        body["tools"] = tools
    if request.tool_choice is not None:
        choice = request.tool_choice
        body["tool_choice"] = {"name": choice.name} if choice.mode == "tool" else choice.mode
    params: dict[str, Any] = {k: getattr(request, k) for k in PARAMETERS if getattr(request, k) is not None}
    if request.stop:
        params["stop"] = list(request.stop)
    if params:
        body["parameters"] = params
    if request.metadata:
        body["metadata"] = dict(request.metadata)
    extensions = dict(request.extensions)
    for key, attr in REQUEST_EXTENSIONS.items():
        if getattr(request, attr) is not None:
            extensions[key] = getattr(request, attr)
    if extensions:
        body["extensions"] = extensions
    return body


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None = None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/v1/stream`` (``/stream`` when ``base_url`` already ends in ``/v1``)."""
    base = base_url.rstrip("/")
    url = base + ("/stream" if base.endswith("/v1") else "/v1/stream")
    headers = {
        "Content-Type": REQUEST_CONTENT_TYPE,
        "Accept": ACCEPT_STREAM if request.stream else RESPONSE_CONTENT_TYPE,
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return url, headers


# --------------------------------------------------------------------------- non-streaming response


def _block_dict(b: hub.Block) -> dict:
    out: dict[str, Any] = {"index": b.index, "kind": b.kind, "text": b.text}
    for key in ("id", "name", "mime_type", "fidelity", "extensions"):
        value = getattr(b, key)
        if value is not None and value != {}:
            out[key] = value
    if b.choice:
        out["choice"] = b.choice
    return out


def _annotations_list(items: list[hub.Extension]) -> list[dict]:
    return [_annotation(a) for a in items]


def encode_response(response: hub.Response) -> dict:
    """An assembled response as the non-streaming body (``"type": "response"``, see docs)."""
    body: dict[str, Any] = {"v": VERSION, "type": "response"}
    for key in ("id", "model", "created", "request_id"):
        value = getattr(response, key)
        if value is not None:
            body[key] = value
    content: list[dict] = []
    calls: list[dict] = []
    other: list[dict] = []
    annotations = _annotations_list(response.annotations)
    for b in response.blocks:
        annotations += _annotations_list(b.annotations)
        extra = {k: v for k, v in (("llmbridge:fidelity", b.fidelity), ("llmbridge:extensions", b.extensions)) if v}
        if b.choice == 0 and b.kind == "text":
            if b.id is not None:
                extra["llmbridge:id"] = b.id
            content.append({"type": "text", "index": b.index, "text": b.text, **extra})
        elif b.choice == 0 and b.kind == "tool_call":
            call_id = b.id if b.id is not None else f"call_{response.id or 'llmbridge'}_{b.index}"
            calls.append({"index": b.index, "id": call_id, "name": b.name or "", "arguments": b.text or "{}", **extra})
        else:
            other.append(_block_dict(b))
    body["content"] = content
    if calls:
        body["tool_calls"] = calls
    finish = response.finishes.get(0)
    if finish is not None:
        _finish_fields(finish, body)
    more = [f for c, f in response.finishes.items() if c != 0]
    if more:
        body["llmbridge:finishes"] = [_finish_fields(f, {"choice": f.choice}) for f in more]
    if response.usage is not None:
        body["usage"] = _usage_fields(response.usage)
    if response.error is not None:
        body["error"] = _error_fields(response.error)
        if response.error.status is not None:
            body["llmbridge:status"] = response.error.status
        if response.error.body is not None:
            body["llmbridge:body"] = response.error.body
    if other:
        body["llmbridge:blocks"] = other
    if annotations:
        body["llmbridge:annotations"] = annotations
    if response.extensions:
        body["llmbridge:extensions"] = response.extensions
    return body


def _finish_from(obj: dict, choice: int) -> hub.Finish | None:
    reason = obj.get("stop_reason", obj.get("llmbridge:stop_reason"))
    return _finish(reason, choice, obj) if type(reason) is str else None


def decode_response(body: dict) -> list[hub.Event]:
    """A non-streaming body as a hub stream; :class:`RequestError` names a malformed field."""
    _expect(body, (dict,), "body", "a JSON object")
    if "error" in body and "content" not in body:
        return [hub.ResponseStart(), _response_error(body), hub.ResponseEnd()]
    r = hub.Response(
        _opt_str(body, "id", "body"),
        _opt_str(body, "model", "body"),
        body.get("created") if type(body.get("created")) is int else None,
        _opt_str(body, "request_id", "body"),
    )
    blocks: list[hub.Block] = []
    content = body.get("content") or []
    _expect(content, (list,), "content", "an array")
    for i, item in enumerate(content):
        _expect(item, (dict,), f"content[{i}]", "an object")
        text = _expect(item.get("text", ""), (str,), f"content[{i}].text", "a string")
        blocks.append(
            hub.Block(
                item.get("index", i) if type(item.get("index")) is int else i,
                "text",
                _opt_str(item, "llmbridge:id", f"content[{i}]"),
                text=text,
                fidelity=item.get("llmbridge:fidelity"),
                extensions=item.get("llmbridge:extensions"),
            )
        )
    calls = body.get("tool_calls") or []
    _expect(calls, (list,), "tool_calls", "an array")
    for i, call in enumerate(calls):
        part = _decode_tool_call(call, f"tool_calls[{i}]")
        index = call.get("index") if type(call.get("index")) is int else len(content) + i
        blocks.append(
            hub.Block(
                index,
                "tool_call",
                part.id,
                part.name,
                text=part.arguments,
                fidelity=call.get("llmbridge:fidelity"),
                extensions=call.get("llmbridge:extensions"),
            )
        )
    for i, item in enumerate(body.get("llmbridge:blocks") or []):
        _expect(item, (dict,), f"llmbridge:blocks[{i}]", "an object")
        blocks.append(
            hub.Block(
                item.get("index", len(blocks)),
                item.get("kind", "text"),
                item.get("id"),
                item.get("name"),
                item.get("choice", 0),
                item.get("mime_type"),
                item.get("text", ""),
                item.get("fidelity"),
                item.get("extensions"),
            )
        )
    blocks.sort(key=lambda b: b.index)
    by_index = {b.index: b for b in blocks}
    for a in body.get("llmbridge:annotations") or []:
        if type(a) is dict and type(a.get("namespace")) is str:
            ext = hub.Extension(a["namespace"], a.get("data"), a.get("index"))
            block = by_index.get(ext.index) if ext.index is not None else None
            (block.annotations if block is not None else r.annotations).append(ext)
    r.blocks = blocks
    finish = _finish_from(body, 0)
    if finish is not None:
        r.finishes[0] = finish
    for f in body.get("llmbridge:finishes") or []:
        if type(f) is dict and type(f.get("choice")) is int and (finish := _finish_from(f, f["choice"])):
            r.finishes[f["choice"]] = finish
    usage = body.get("usage")
    if type(usage) is dict:
        r.usage = hub.Usage(
            *(usage.get(k) for k in ("input_tokens", "output_tokens")),
            *(usage.get(NS + k) for k in USAGE_DETAILS),
            extensions=usage.get("llmbridge:extensions"),
        )
    if body.get("error") is not None:
        r.error = _response_error(body)
    ext = body.get("llmbridge:extensions")
    r.extensions = ext if type(ext) is dict and ext else None
    return hub.response_events(r)


# --------------------------------------------------------------------------- HTTP errors


def encode_error(error: hub.Error) -> tuple[int, dict]:
    """``{"error": {"type", "message", "code"}}`` with the status of the error type."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status, {"error": _error_fields(error)}


def _error_from(status: int, body: Any) -> hub.Error:
    err = body.get("error") if type(body) is dict else None
    if type(err) is not dict:
        err = {"message": err} if type(err) is str else {}
    message = err.get("message")
    error_type = err.get("type")
    code = err.get("code")
    known = error_type in hub.ERROR_TYPES
    body_status = body.get("llmbridge:status") if type(body) is dict else None
    return hub.Error(
        message if type(message) is str else f"HTTP {status}" if status else "error",
        error_type if known else (hub.error_type_for_status(status) if status else "api_error"),
        str(code) if code is not None else (error_type if type(error_type) is str and not known else None),
        status or (body_status if type(body_status) is int else None),
        body,
    )


def _response_error(body: dict) -> hub.Error:
    return msgspec.structs.replace(_error_from(0, body), body=body.get("llmbridge:body"))


def decode_error(status: int, body: bytes) -> hub.Error:
    """An HTTP error response of an LLM-Stream endpoint (any JSON, or none) to the hub."""
    try:
        parsed = json_decode(body) if body else None
    except msgspec.DecodeError:
        text = body.decode("utf-8", "replace").strip()[:500]
        return hub.Error(text or f"HTTP {status}", hub.error_type_for_status(status), None, status, text or None)
    return _error_from(status, parsed)
