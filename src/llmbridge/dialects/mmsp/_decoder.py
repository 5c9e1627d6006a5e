"""The mmsp stream decoder: ``data: <UniEvent JSON>`` lines -> hub events, checking MMSP's stream grammar."""

from __future__ import annotations

import base64
import enum
import json
from typing import Any

import msgspec

from ... import hub, sse
from ...unievent import (
    FINISH_FROM_MMSP,
    Embedding,
    InlineData,
    InlineThinking,
    Item,
    Text,
    Thinking,
    ToolCall,
    UniEvent,
    UsageMetadata,
    from_item_fidelity,
)
from ..base import EXTENSION_KEY, SSEStreamDecoder
from ._common import NAME, error_from_object, event_from_dict


class _Stream(enum.Enum):
    """Where a decoder is in MMSP's stream: ``START`` -> ``STREAMING`` with the first event (the
    hub ``ResponseStart`` is out); ``STREAMING`` -> ``STOPPED`` with the stop event, after which only
    ``[DONE]`` may come (it ends the hub stream; anything else is ``stop-last``)."""

    START = "start"
    STREAMING = "streaming"
    STOPPED = "stopped"


_START, _STREAMING, _STOPPED = _Stream.START, _Stream.STREAMING, _Stream.STOPPED


class _Open:
    """The group being read: its hub block and what it has carried so far."""

    __slots__ = ("call_id", "fast", "fidelity", "index", "kind", "mime_type", "name", "parts", "rest", "started")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.fast = _FAST.get(kind)  # (delta type, growing field) of a plain string fragment
        self.index = -1
        self.started = False
        self.parts: list[str] = []  # text / thinking / arguments, to check the .done against
        self.fidelity: dict | None = None
        self.rest = b""  # bytes not yet a whole base64 quantum
        self.name = ""
        self.call_id = ""
        self.mime_type = ""


_FAST = {
    "text": ("text.delta", "text"),
    "thinking": ("thinking.delta", "thinking"),
    "tool_call": ("tool_call.delta", "arguments"),
}


class StreamDecoder(SSEStreamDecoder):
    """``data: <UniEvent>`` lines -> hub events; each group becomes one hub block.

    Terminal rule: the stop event then ``data: [DONE]``; an ``{"error": ...}`` event ends
    the stream with a hub ``Error`` (and what rode on it under ``llmbridge``).  Input that
    stops first gives ``truncated`` and ``Error(incomplete_stream)``.  Refuses, recording a
    violation: events that are not UniEvents (``unievent``) or break MMSP's stream grammar
    (``one-item``, ``item-type``, ``interleave``, ``group``, ``group-open``, ``done-content``,
    ``fidelity``, ``tool-call-name``), ``[DONE]`` before the stop event (``stop-missing``),
    a stop event with items or without usage (``stop-items``, ``stop-usage``), events after
    it (``stop-last``).
    """

    dialect = NAME

    def __init__(self) -> None:
        super().__init__()
        self._state = _START
        self._request_id: str | None = None
        self._group: _Open | None = None
        self._blocks = 0
        self._response_id = "mmsp"
        self._calls = 0

    def on_event(self, event: sse.Event) -> None:
        data = event.data
        if data[:1] != "{" and data.strip() == "[DONE]":
            if self._state is _STOPPED:
                self.finish_stream(self._request_id)
            else:
                self.violation("stop-missing", "[DONE] before the stop event")
                self._start(None)
                self.fail(hub.Error("mmsp stream ended without its stop event", "incomplete_stream"))
            return
        obj = self.parse_json(event)
        if obj is None:
            return
        self.feed_object(obj)

    def feed_object(self, obj: Any) -> None:
        """One decoded ``data:`` JSON value."""
        g = self._group
        if g is not None and g.fast is not None and type(obj) is dict and self._fragment(g, obj):
            return
        if isinstance(obj, dict) and "error" in obj and "event_type" not in obj:
            error = obj["error"]
            extra = error.get(EXTENSION_KEY) if isinstance(error, dict) else None
            self._start(None, extra.get("response") if isinstance(extra, dict) else None)
            if isinstance(extra, dict):
                try:
                    if self._carried(extra):
                        return  # the stream failed only for MMSP: everything after it came along
                except (KeyError, TypeError, ValueError, msgspec.ValidationError) as exc:
                    self.violation("error", f"malformed llmbridge state on the error ({exc})")
            self.fail(error_from_object(error))
            return
        try:
            event = UniEvent.from_dict(obj)
        except ValueError as exc:
            self.violation("unievent", str(exc))
            return
        self._start(event)
        if self._state is _STOPPED:
            self.violation("stop-last", "an event after the stop event")
            return
        if event.event_type == "stop":
            self._stop(event)
            return
        if len(event.content_items) != 1:
            self.violation("one-item", f"a delta event with {len(event.content_items)} items")
        for item in event.content_items:
            self._item(item)

    def _fragment(self, g: _Open, obj: dict) -> bool:
        """The hot path: a plain string fragment of the open group (no fidelity, nothing else)."""
        items = obj.get("content_items")
        if obj.get("event_type") != "delta" or type(items) is not list or len(items) != 1 or EXTENSION_KEY in obj:
            return False
        item = items[0]
        kind, key = g.fast  # type: ignore[misc]
        if type(item) is not dict or item.get("type") != kind or "fidelity" in item:
            return False
        value = item.get(key)
        if type(value) is not str or (kind == "tool_call.delta" and (item.get("name") or item.get("tool_call_id"))):
            return False
        if value:
            if not g.started:
                self._begin(g)
            g.parts.append(value)
            self.emit(hub.Delta(g.index, value))
        return True

    # -- pieces

    def _start(self, event: UniEvent | None, info: Any = None) -> None:
        if self._state is not _START:
            return
        self._state = _STREAMING
        if event is not None:
            info = (event.llmbridge or {}).get("response")
        if isinstance(info, dict):
            start = hub.ResponseStart(
                info.get("id"), info.get("model"), info.get("created"), info.get("request_id"), info.get("extensions")
            )
        else:
            start = hub.ResponseStart()
        if start.id:
            self._response_id = start.id
        self.emit(start)

    def _open(self, item: Item) -> _Open:
        g = self._group = _Open(item.kind)
        if type(item) is ToolCall:
            g.name, g.call_id = item.name, item.tool_call_id
        elif type(item) is InlineData or type(item) is InlineThinking:
            g.mime_type = item.mime_type
        return g

    def _begin(self, g: _Open, extra: dict | None = None) -> None:
        """Emit the group's BlockStart (deferred for text until its first content)."""
        if g.started:
            return
        g.started = True
        g.index = self._blocks
        self._blocks += 1
        kind = g.kind
        extra = extra or {}
        extensions = extra.get("extensions")
        if kind in ("text", "thinking", "tool_call"):
            hub_kind = kind
        elif kind == "inline_thinking":
            hub_kind = "data"
            extensions = hub.merge_dicts(extensions, {"mmsp": {"type": "inline_thinking"}})
        else:
            hub_kind = "data"
        call_id = name = None
        if kind == "tool_call":
            name = g.name
            call_id = g.call_id or self._new_call_id()
        self.emit(
            hub.BlockStart(
                g.index,
                hub_kind,
                call_id or extra.get("id"),
                name,
                mime_type=g.mime_type or None if hub_kind == "data" else None,
                extensions=extensions,
            )
        )

    def _new_call_id(self) -> str:
        self._calls += 1
        return f"call_{self._response_id}_{self._calls}"

    def _item(self, item: Item) -> None:
        g = self._group
        kind = item.kind
        if g is not None and g.kind != kind:
            self.violation("interleave", f"{item.type} inside an open {g.kind} group")
            self._close(g, g.fidelity)
            g = None
        if item.done:
            if g is None:
                if kind in ("image_url", "tool_result"):
                    self.violation("item-type", f"{item.type} in a response")
                    return
                self.violation("group", f"{item.type} without its .delta fragments")
                g = self._open(item)
                self._content(g, _whole_fragment(item))
            self._done(g, item)
            return
        if kind in ("image_url", "tool_result"):
            self.violation("item-type", f"{item.type} in a response")
            return
        if g is None:
            g = self._open(item)
            if type(item) is ToolCall and not item.name:
                self.violation("tool-call-name", "first tool_call.delta without a name")
        elif type(item) is ToolCall and (item.name or item.tool_call_id):
            self.violation("tool-call-name", "name or tool_call_id on a later tool_call fragment")
        if item.fidelity is not None:
            if g.fidelity is not None and g.fidelity != item.fidelity:
                self.violation("fidelity", "a second, different fidelity in one group")
            g.fidelity = item.fidelity
        self._content(g, item)

    def _content(self, g: _Open, item: Item) -> None:
        kind = type(item)
        if kind is Text or kind is Thinking:
            text = item.text if kind is Text else item.thinking  # type: ignore[attr-defined]
            g.parts.append(text)
            if text:
                self._begin(g)
                self.emit(hub.Delta(g.index, text))
            elif kind is Thinking:
                self._begin(g)
        elif kind is ToolCall:
            self._begin(g)
            if item.arguments:  # type: ignore[attr-defined]
                g.parts.append(item.arguments)  # type: ignore[attr-defined]
                self.emit(hub.Delta(g.index, item.arguments))  # type: ignore[attr-defined]
        elif kind is InlineData or kind is InlineThinking:
            self._begin(g)
            data = g.rest + item.data  # type: ignore[attr-defined]
            cut = len(data) - len(data) % 3
            g.rest = data[cut:]
            if cut:
                self.emit(hub.Delta(g.index, base64.b64encode(data[:cut]).decode()))
        elif kind is Embedding:
            g.parts.append(json.dumps(item.embedding))  # type: ignore[attr-defined]

    def _done(self, g: _Open, item: Item) -> None:
        fidelity = item.fidelity if item.fidelity is not None else g.fidelity
        if g.fidelity is not None and item.fidelity != g.fidelity:
            self.violation("fidelity", f"{item.type} fidelity differs from its fragment's")
        kind = type(item)
        if kind is Text and g.parts and item.text != "".join(g.parts):  # type: ignore[attr-defined]
            self.violation("done-content", "text.done differs from its fragments")
        elif kind is Thinking and item.thinking != "".join(g.parts):  # type: ignore[attr-defined]
            self.violation("done-content", "thinking.done differs from its fragments")
        elif kind is ToolCall:
            raw = "".join(g.parts)
            try:
                same = (json.loads(raw) if raw.strip() else {}) == item.arguments  # type: ignore[attr-defined]
            except ValueError:
                same = False
            if not same:
                self.violation("done-content", "tool_call.done arguments differ from its fragments")
        elif kind is Embedding:
            self._group = None
            index = self._blocks
            self._blocks += 1
            ext = {NAME: {"type": "embedding", "embedding": item.embedding}}  # type: ignore[attr-defined]
            self.emit(hub.BlockStart(index, "native", name="embedding", extensions=ext))
            self.emit(hub.BlockStop(index))
            return
        self._close(g, fidelity)

    def _close(self, g: _Open, fidelity: dict | None) -> None:
        self._group = None
        hub_fidelity, extra = from_item_fidelity(fidelity)
        extra = extra or {}
        block = extra.get("block")
        if isinstance(block, dict) and g.kind == "text" and not g.started:
            self._raw_block(block)
            return
        was_started = g.started
        self._begin(g, extra)
        if g.rest:
            self.emit(hub.Delta(g.index, base64.b64encode(g.rest).decode()))
        for a in extra.get("annotations") or ():
            if isinstance(a, dict):
                self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), g.index))
        stop_ext = extra.get("stop_extensions")
        if was_started and extra.get("extensions"):
            stop_ext = hub.merge_dicts(extra["extensions"], stop_ext)  # arrived after BlockStart went out
        self.emit(hub.BlockStop(g.index, hub_fidelity, stop_ext))

    def _raw_block(self, block: dict, close: bool = True) -> int:
        """A block carried whole (in an empty text item, or beside an error); its new index."""
        index = self._blocks
        self._blocks += 1
        self.emit(
            hub.BlockStart(
                index,
                str(block.get("kind", "native")),
                block.get("id"),
                block.get("name"),
                int(block.get("choice", 0)),
                block.get("mime_type"),
                block.get("fidelity"),
                block.get("extensions"),
            )
        )
        if block.get("text"):
            self.emit(hub.Delta(index, block["text"]))
        for a in block.get("annotations") or ():
            if isinstance(a, dict):
                self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), index))
        if close:
            self.emit(hub.BlockStop(index, None, block.get("stop_extensions")))
        return index

    def _carried(self, extra: dict) -> bool:
        """What our encoder carried beside its error; True when the source stream did not fail."""
        resume = bool(extra.get("resume"))
        indices = {int(k): v for k, v in (extra.get("ordinals") or {}).items()}
        if resume and self._group is not None:
            failed = extra.get("failed")
            if failed is not None and self._group.started:
                indices[int(failed)] = self._group.index
            self._close(self._group, self._group.fidelity)  # the call whose arguments MMSP could not parse
        live = extra.get("live")
        if isinstance(live, dict):
            g = self._group
            if live.get("sent") and g is not None and g.started:  # its fragments are in: only its notes
                indices[int(live["index"])] = g.index
                for a in live.get("annotations") or ():
                    self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), g.index))
            else:
                indices[int(live["index"])] = self._raw_block(live, close=False)
        for raw in extra.get("pending") or ():
            indices[int(raw["index"])] = self._raw_block(raw, close=bool(raw.get("closed")))
        for a in extra.get("annotations") or ():
            self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), a.get("index")))
        if extra.get("usage"):
            self.emit(msgspec.convert(extra["usage"], hub.Usage))
        for f in extra.get("finishes") or ():
            self.emit(hub.Finish(f["reason"], int(f.get("choice", 0)), f.get("raw"), f.get("stop_sequence")))
        if not resume:
            return False
        for d in extra.get("after") or ():
            event = event_from_dict(d)
            if type(event) is hub.BlockStart:
                indices[event.index] = self._blocks
                event.index = self._blocks
                self._blocks += 1
            elif type(event) is hub.Delta or type(event) is hub.BlockStop:
                event.index = indices.get(event.index, event.index)
            elif type(event) is hub.Extension:  # its index is optional: None stays None
                event.index = indices.get(event.index, event.index) if event.index is not None else None
            elif type(event) is hub.ResponseEnd:
                self.finish_stream(event.request_id)
                return True
            self.emit(event)
            if type(event) is hub.Error:
                self.finish_stream()
                return True
        self.fail(hub.Error("mmsp stream ended without its stop event", "incomplete_stream"))
        return True

    def _stop(self, event: UniEvent) -> None:
        if event.content_items:
            self.violation("stop-items", "the stop event carries items")
        if self._group is not None:
            self.violation("group-open", f"stop while a {self._group.kind} group is open")
            self._close(self._group, self._group.fidelity)
        extra = event.llmbridge or {}
        for a in extra.get("annotations") or ():
            if isinstance(a, dict):
                self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), a.get("index")))
        usage_meta = event.usage_metadata
        if usage_meta is None:
            self.violation("stop-usage", "the stop event has no usage_metadata")
            usage_meta = UsageMetadata()
        usage = usage_meta.to_hub()
        details = extra.get("usage")
        if isinstance(details, dict):
            usage.cache_write_tokens = details.get("cache_write_tokens")
            usage.total_tokens = details.get("total_tokens")
            usage.extensions = details.get("extensions")
        if any(getattr(usage, f) is not None for f in usage.__struct_fields__):
            self.emit(usage)
        finish = extra.get("finish")
        reason = event.finish_reason
        if "finish" in extra and finish is None:
            pass  # the source had no finish reason
        elif isinstance(finish, dict) and finish.get("reason") in hub.FINISH_REASONS:
            self.emit(hub.Finish(finish["reason"], 0, finish.get("raw"), finish.get("stop_sequence")))
        elif reason in FINISH_FROM_MMSP:
            self.emit(hub.Finish(FINISH_FROM_MMSP[reason], 0, reason))
        else:
            self.violation("stop-finish", f"finish_reason {reason!r} is not stop, length, tool_call or unknown")
            self.emit(hub.Finish("other", 0, reason if isinstance(reason, str) else None))
        for f in extra.get("finishes") or ():
            if isinstance(f, dict) and f.get("reason") in hub.FINISH_REASONS:
                self.emit(hub.Finish(f["reason"], int(f.get("choice", 0)), f.get("raw"), f.get("stop_sequence")))
        self._request_id = extra.get("request_id")
        self._state = _STOPPED


def _whole_fragment(item: Item) -> Item:
    """The delta fragment equivalent to a ``.done`` item (for a group sent without fragments)."""
    if type(item) is Text:
        return Text(item.text)
    if type(item) is Thinking:
        return Thinking(item.thinking)
    if type(item) is ToolCall:
        return ToolCall(item.name, json.dumps(item.arguments, ensure_ascii=False), item.tool_call_id)
    if type(item) is InlineData or type(item) is InlineThinking:
        return type(item)(item.data, item.mime_type)
    return item
