"""Anthropic Messages stream -> hub events.

Wire grammar: ``message_start (content_block_start content_block_delta* content_block_stop)*
message_delta message_stop``, with ``ping`` anywhere and ``error`` as a terminal event.
Content blocks are numbered by ``index``; a hub block keeps its wire index unless a
continuation stream's pre-populated content already took that number.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub, sse
from ..base import EXTENSION_KEY, SSEStreamDecoder, json_decode
from ._common import (
    MESSAGE_KEYS,
    NAME,
    apply_usage_extra,
    block_start,
    citations,
    error_from_body,
    event_from_json,
    finish_from_stop,
    usage_from_raw,
)


def _with_ext(start: hub.BlockStart, ours: Any) -> hub.BlockStart:
    """Merge what our encoder carried under EXTENSION_KEY into a native block's start."""
    if type(ours) is not dict:
        return start
    return msgspec.structs.replace(
        start,
        id=start.id or ours.get("id"),
        fidelity=hub.merge_dicts(start.fidelity, ours.get("fidelity")),
        extensions=hub.merge_dicts(start.extensions, ours.get("extensions")),
    )


class _Open:
    __slots__ = ("index", "parts", "signature", "start", "wire_type")

    def __init__(self, index: int, wire_type: str, start: dict[str, Any]) -> None:
        self.index = index
        self.wire_type = wire_type
        self.start = start  # the raw block, for native blocks' final object
        self.signature: str | None = None
        self.parts: list[str] = []  # a native block's delta fragments


class StreamDecoder(SSEStreamDecoder):
    """anthropic-messages SSE events to hub events (choice 0, plus what rode under ``llmbridge``).

    Terminal rule: ``message_stop`` ends the stream, and so does an ``error`` event (with a
    hub ``Error``); input that stops first gives ``truncated`` and ``Error(incomplete_stream)``.
    Refuses, recording a violation: events before ``message_start`` (``start-first``), a
    second one (``start-once``), deltas or stops for blocks not open (``block-open``), a
    block started while open (``block-unique``) or still open at ``message_delta``/
    ``message_stop`` (``block-unclosed``, then closed), a second ``stop_reason``
    (``finish-once``), data that is not a JSON object (``json``, ``json-object``),
    unreadable ``llmbridge`` entries (``llmbridge``), anything after the end (``after-terminal``).
    """

    dialect = NAME

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._open: dict[int, _Open] = {}  # wire index -> open block
        self._wire_to_hub: dict[int, int] = {}
        self._used: set[int] = set()
        self._next = 0
        self._usage_raw: dict[str, Any] = {}
        self._finished = False
        self._start_stop: tuple[str, str | None] | None = None  # stop_reason already in message_start
        self._message_id = ""
        self._request_id: str | None = None
        self._tools = 0
        self._handlers = {
            "content_block_delta": self._on_block_delta,
            "content_block_start": self._on_block_start,
            "content_block_stop": self._on_block_stop,
            "message_start": self._on_message_start,
            "message_delta": self._on_message_delta,
            "message_stop": self._on_message_stop,
            "error": self._on_error,
        }

    # -- dispatch

    def on_event(self, event: sse.Event) -> None:
        if event.event == "ping":
            return
        try:
            data = json_decode(event.data)
        except msgspec.DecodeError as exc:
            self.violation("json", f"data is not valid JSON ({exc})")
            return
        if type(data) is not dict:
            self.violation("json-object", "data is not a JSON object")
            return
        kind = data.get("type") or event.event
        if kind == "content_block_delta" and self._started:  # the hot path
            self._on_block_delta(data)
            return
        handler = self._handlers.get(kind)
        if handler is None:
            if kind != "ping":
                self.violation("unknown-event", f"unknown event type {kind!r} ignored")
            return
        if not self._started and kind != "message_start" and kind != "error":
            self.violation("start-first", f"{kind} before message_start")
            self._start(hub.ResponseStart())
        handler(data)

    def _start(self, start: hub.ResponseStart) -> None:
        self._started = True
        self.emit(start)

    def _allocate(self, wire: int | None) -> int:
        """A hub index for a new block: its wire index when free."""
        if wire is not None and wire not in self._used:
            index = wire
        else:
            while self._next in self._used:
                self._next += 1
            index = self._next
        self._used.add(index)
        return index

    def _tool_id(self) -> str:
        self._tools += 1
        return f"toolu_{self._message_id or 'llmbridge'}_{self._tools}"

    # -- message events

    def _on_message_start(self, data: dict[str, Any]) -> None:
        if self._started:
            self.violation("start-once", "second message_start ignored")
            return
        message = data.get("message")
        if type(message) is not dict:
            self.violation("missing-field", "message_start without message")
            message = {}
        self._message_id = message.get("id") or ""
        ours = message.get(EXTENSION_KEY) if type(message.get(EXTENSION_KEY)) is dict else {}
        extras = {k: v for k, v in message.items() if k not in MESSAGE_KEYS}
        extensions = {NAME: extras} if extras else None
        if ours.get("extensions"):
            extensions = {**(extensions or {}), **ours["extensions"]}
        self._request_id = ours.get("request_id")
        self._start(
            hub.ResponseStart(
                None if ours.get("no_id") else message.get("id"),
                message.get("model"),
                ours.get("created"),
                self._request_id,
                extensions,
            )
        )
        usage = message.get("usage")
        if type(usage) is dict:
            self._emit_usage(usage, ours.get("usage"))
        content = message.get("content")
        if type(content) is list:  # a continuation stream: blocks already produced
            for block in content:
                if type(block) is dict:
                    self._emit_whole_block(block)
        stop = message.get("stop_reason")
        if type(stop) is str:
            self._start_stop = (stop, message.get("stop_sequence"))

    def _emit_whole_block(self, block: dict[str, Any]) -> None:
        start, text = block_start(block, self._allocate(None), self._tool_id(), whole=True)
        start = _with_ext(start, block.get(EXTENSION_KEY))
        self.emit(start)
        if text:
            self.emit(hub.Delta(start.index, text))
        for note in citations(block, start.index):
            self.emit(note)
        self.emit(hub.BlockStop(start.index))

    def _emit_usage(self, raw: dict[str, Any], extra: Any) -> None:
        self._usage_raw.update((k, v) for k, v in raw.items() if v is not None)
        usage = apply_usage_extra(usage_from_raw(self._usage_raw), extra if type(extra) is dict else None)
        if any(getattr(usage, f) is not None for f in usage.__struct_fields__):
            self.emit(usage)

    def _on_message_delta(self, data: dict[str, Any]) -> None:
        for wire in list(self._open):
            # Tool input cut off by max_tokens ends without content_block_stop: close it here.
            self.violation("block-unclosed", f"content block {wire} not stopped before message_delta")
            self._close_block(wire, {})
        ours = data.get(EXTENSION_KEY) if type(data.get(EXTENSION_KEY)) is dict else {}
        delta = data.get("delta")
        if type(delta) is not dict:
            self.violation("missing-field", "message_delta without delta")
            delta = {}
        extras = {k: v for k, v in delta.items() if k not in ("stop_reason", "stop_sequence") and v is not None}
        top = {k: v for k, v in data.items() if k not in ("type", "delta", "usage", EXTENSION_KEY)}
        if extras or top:
            self.emit(hub.Extension(NAME, {"message_delta": {"delta": extras, **top}}))
        for carried in ours.get("annotations") or ():
            self._emit_carried(carried, {})
        remap: dict[int, int] = {}
        for carried in ours.get("events") or ():
            self._emit_carried(carried, remap)
        usage = data.get("usage")
        if type(usage) is dict:
            self._emit_usage(usage, ours.get("usage"))
        finish = event_from_json(ours.get("finish"))
        stop = delta.get("stop_reason")
        if type(finish) is hub.Finish:
            self._finish(finish)
        elif type(stop) is str:
            self._finish(finish_from_stop(stop, delta.get("stop_sequence")))

    def _emit_carried(self, data: Any, remap: dict[int, int]) -> None:
        """Re-emit a hub event our encoder carried under EXTENSION_KEY (another choice, a late annotation)."""
        event = event_from_json(data)
        if event is None:
            self.violation("llmbridge", "unreadable carried event ignored")
            return
        index = getattr(event, "index", None)
        if index is not None:
            if type(event) is hub.BlockStart:
                remap[index] = self._allocate(index)
            mapped = remap.get(index, self._wire_to_hub.get(index) if type(event) is hub.Extension else None)
            if mapped is None:
                self.violation("llmbridge", f"carried event for unknown block {index} ignored")
                return
            event = msgspec.structs.replace(event, index=mapped)
        if type(event) is hub.Finish and event.choice == 0:
            return self._finish(event)
        self.emit(event)

    def _finish(self, finish: hub.Finish) -> None:
        if self._finished:
            self.violation("finish-once", "second stop_reason ignored")
            return
        self._finished = True
        self.emit(finish)

    def _on_message_stop(self, data: dict[str, Any]) -> None:
        for wire in list(self._open):
            self.violation("block-unclosed", f"content block {wire} not stopped before message_stop")
            self._close_block(wire, {})
        if not self._finished and self._start_stop is not None:
            self._finish(finish_from_stop(*self._start_stop))
        self.finish_stream(self._request_id)

    def _on_error(self, data: dict[str, Any]) -> None:
        if not self._started:
            self._start(hub.ResponseStart())
        self.fail(error_from_body(data))

    # -- content block events

    def _on_block_start(self, data: dict[str, Any]) -> None:
        wire = data.get("index")
        block = data.get("content_block")
        if type(wire) is not int or type(block) is not dict:
            self.violation("missing-field", "content_block_start without index or content_block")
            return
        if wire in self._open:
            self.violation("block-unique", f"content block {wire} started while open; closing it")
            self._close_block(wire, {})
        elif wire in self._wire_to_hub:
            self.violation("block-unique", f"content block {wire} started twice")
        ours = block.get(EXTENSION_KEY)
        preferred = ours.get("index") if type(ours) is dict else None  # the hub index our encoder renumbered
        index = self._allocate(preferred if type(preferred) is int else wire)
        self._wire_to_hub[wire] = index
        start, text = block_start(block, index, self._tool_id())
        start = _with_ext(start, block.get(EXTENSION_KEY))
        self._open[wire] = _Open(index, block.get("type") or "", block)
        self.emit(start)
        if text:
            self.emit(hub.Delta(index, text))

    def _on_block_delta(self, data: dict[str, Any]) -> None:
        wire = data.get("index")
        delta = data.get("delta")
        block = self._open.get(wire)  # type: ignore[arg-type]
        if block is None or type(delta) is not dict:
            self.violation("block-open", f"content_block_delta for block {wire}, which is not open")
            return
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
        elif kind == "input_json_delta":
            text = delta.get("partial_json")
        elif kind == "thinking_delta":
            text = delta.get("thinking")
        elif kind == "signature_delta":
            block.signature = delta.get("signature")
            return
        elif kind == "citations_delta":
            self.emit(hub.Extension(NAME, delta, block.index))
            return
        elif kind == "compaction_delta":
            text = delta.get("content")
        elif kind == "llmbridge_delta":
            text = delta.get("text")
        else:
            self.emit(hub.Extension(NAME, delta, block.index))
            return
        if type(text) is not str:
            if text is not None:
                self.violation("missing-field", f"{kind} without its text")
            return
        if text:
            if block.wire_type not in _KNOWN_TYPES:
                block.parts.append(text)
            self.emit(hub.Delta(block.index, text))

    def _on_block_stop(self, data: dict[str, Any]) -> None:
        wire = data.get("index")
        if wire not in self._open:
            self.violation("block-open", f"content_block_stop for block {wire}, which is not open")
            return
        self._close_block(wire, data.get(EXTENSION_KEY) if type(data.get(EXTENSION_KEY)) is dict else {})  # type: ignore[arg-type]

    def _close_block(self, wire: int, ours: dict[str, Any]) -> None:
        block = self._open.pop(wire)
        for carried in ours.get("annotations") or ():
            event = event_from_json(carried)
            if type(event) is hub.Extension:
                self.emit(msgspec.structs.replace(event, index=block.index))
        fidelity = {NAME: {"signature": block.signature}} if block.signature else None
        extensions = None
        if block.wire_type not in _KNOWN_TYPES:
            extensions = {NAME: _final_native(block.start, "".join(block.parts))}
        self.emit(
            hub.BlockStop(
                block.index,
                hub.merge_dicts(fidelity, ours.get("fidelity")),
                hub.merge_dicts(extensions, ours.get("extensions")),
            )
        )


_KNOWN_TYPES = frozenset(("text", "thinking", "redacted_thinking", "tool_use", EXTENSION_KEY))


def _final_native(start: dict[str, Any], streamed: str) -> dict[str, Any]:
    """A native block as a non-streaming response would hold it: streamed input or content folded in."""
    if not streamed:
        return start
    if start.get("type") == "compaction":
        return {**start, "content": streamed}
    try:
        return {**start, "input": json_decode(streamed)}
    except msgspec.DecodeError:
        return start
