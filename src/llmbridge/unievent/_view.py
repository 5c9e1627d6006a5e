"""The UniEvent view: hub events in, UniEvents out (the grammar is in the package docstring)."""

from __future__ import annotations

import base64
import binascii
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from .. import hub
from ..dialects.base import EXTENSION_KEY
from ..errors import IncompleteStreamError, LLMBridgeError, ToolCallArgumentParseError, UpstreamError
from ._items import (
    FINISH_FROM_MMSP,
    FINISH_TO_MMSP,
    Embedding,
    InlineData,
    InlineThinking,
    Item,
    Message,
    Text,
    Thinking,
    ToolCall,
    UniEvent,
    UsageMetadata,
    to_item_fidelity,
)

_json_decode = msgspec.json.decode


def _now_ms() -> int:
    return int(time.time() * 1000)


class _B64Bytes:
    """Base64 text fragments in, the bytes of their complete 4-character quanta out."""

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        self._rest = ""

    def feed(self, text: str) -> bytes:
        text = self._rest + "".join(text.split())
        cut = len(text) - len(text) % 4
        self._rest = text[cut:]
        return _b64decode(text[:cut]) if cut else b""

    def close(self) -> bytes:
        rest, self._rest = self._rest, ""
        return _b64decode(rest) if rest else b""


def _b64decode(text: str) -> bytes:
    text = "".join(text.split())
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text)
    except binascii.Error:
        return base64.urlsafe_b64decode(text)


class _Group:
    """One hub block on its way to becoming a ``K.delta+ K.done`` group."""

    __slots__ = (
        "annotations",
        "b64",
        "carrier",
        "closed",
        "fidelity",
        "finished",
        "kind",
        "ordinal",
        "parts",
        "sent",
        "start",
        "stop_extensions",
        "streams",
    )

    def __init__(self, start: hub.BlockStart, kind: str, carrier: bool) -> None:
        self.start = start
        self.kind = kind  # the UniEvent kind
        self.carrier = carrier  # a block the grammar cannot express, carried in an empty text item
        # Images and inline thinking go out whole, one delta per item (MMSP: "every image is an item
        # of its own"), like carriers and vectors; text, thinking, arguments and audio stream.
        image = kind == "inline_data" and (start.mime_type or "").startswith("image/")
        self.streams = not (carrier or image or kind in ("embedding", "inline_thinking"))
        self.finished = False  # its .done went out, or it was empty and left out
        self.ordinal: int | None = None  # its place among the groups that went out
        self.parts: list[str] = []
        self.closed = False
        self.fidelity = start.fidelity
        self.stop_extensions: dict | None = None
        self.annotations: list[dict] = []
        self.sent = 0  # delta fragments emitted
        self.b64: _B64Bytes | None = _B64Bytes() if kind in ("inline_data", "inline_thinking") else None


_PLAIN = frozenset(("text", "thinking", "tool_call"))


def _mmsp_ext(extensions: dict | None) -> dict:
    value = extensions.get("mmsp") if extensions else None
    return value if isinstance(value, dict) else {}


class UniEventView:
    """Hub events in, UniEvents out; the grammar is in :mod:`llmbridge.unievent`'s docstring.

    :meth:`step` returns the UniEvents an event produced and the exception that ends the
    stream, if any (for codecs).  :meth:`feed` returns the UniEvents and raises that
    exception in stream order: at once when nothing precedes it, else at the next call.
    """

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or _now_ms
        self._groups: dict[int, _Group] = {}  # open blocks
        self._all: dict[int, _Group] = {}  # every block, for annotations that come late
        self._emitted = 0  # groups that went out (their ordinals; the mmsp decoder's block indices)
        self._calls = 0
        self._live: _Group | None = None
        self._queue: deque[_Group] = deque()
        self._usage: hub.Usage | None = None
        self._finishes: dict[int, hub.Finish] = {}
        self._annotations: list[dict] = []
        self._response: dict | None = None
        self._first = True
        self.message = Message()  # the .done items so far
        self.ended = False  # stop emitted or an exception raised
        self._pending: LLMBridgeError | None = None

    # -- public

    def feed(self, event: hub.Event) -> list[UniEvent]:
        pending = self._pending
        if pending is not None:
            self._pending = None
            raise pending
        out, exc = self.step(event)
        if exc is not None:
            if not out:
                raise exc
            self._pending = exc
        return out

    def close(self) -> list[UniEvent]:
        """End of input: raises :class:`IncompleteStreamError` when no ResponseEnd came."""
        if self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
        if not self.ended:
            self.ended = True
            raise IncompleteStreamError("hub stream ended without ResponseEnd", partial=self.partial())
        return []

    def step(self, event: hub.Event) -> tuple[list[UniEvent], LLMBridgeError | None]:
        out: list[UniEvent] = []
        if self.ended:
            return out, None
        try:
            self._handle(event, out)
        except LLMBridgeError as exc:
            self.ended = True
            return out, exc
        return out, None

    def plain_fragment(self, e: hub.Delta) -> str | None:
        """The hot path for codecs: when ``e`` only grows the live text, thinking or arguments,
        account for it and return that kind (``""``: nothing to send); else ``None`` (use
        :meth:`step`).  The caller then writes the delta event itself."""
        g = self._live
        if g is None or g.start.index != e.index or g.kind not in _PLAIN or not g.streams or self._first:
            return None
        if e.text:
            g.parts.append(e.text)
            g.sent += 1
            return g.kind
        return ""

    def now(self) -> int:
        return self._clock()

    def partial(self) -> Message:
        """The message so far (what an exception carries): the ``.done`` items, then the text
        and thinking of the blocks not done yet, in start order, as if done."""
        message = Message(list(self.message.content_items), self.message.usage_metadata)
        waiting = [g for g in (self._live, *self._queue) if g is not None and not g.finished and not g.carrier]
        for g in waiting:
            text = "".join(g.parts)
            if g.kind == "text" and text:
                message.content_items.append(Text(text, done=True))
            elif g.kind == "thinking" and (text or g.fidelity):
                message.content_items.append(Thinking(text, done=True, fidelity=to_item_fidelity(g.fidelity)))
        return message

    # -- dispatch

    def _handle(self, e: hub.Event, out: list[UniEvent]) -> None:
        # `type(e) is X` on each branch rather than an alias of type(e): mypy narrows only the former.
        if type(e) is hub.Delta:
            g = self._groups.get(e.index)
            if g is None or not e.text:
                return
            if g is self._live and g.streams:
                self._emit_fragment(g, e.text, out)
            g.parts.append(e.text)
        elif type(e) is hub.BlockStart:
            g = self._new_group(e)
            self._groups[e.index] = g
            self._all[e.index] = g
            if self._live is None:
                self._activate(g, out)
            else:
                self._queue.append(g)
        elif type(e) is hub.BlockStop:
            g = self._groups.pop(e.index, None)
            if g is None:
                return
            g.closed = True
            g.fidelity = hub.merge_dicts(g.fidelity, e.fidelity)
            g.stop_extensions = e.extensions
            if g is self._live:
                self._finish(g, out)
                self._advance(out)
        elif type(e) is hub.Usage:
            self._usage = hub.merge_usage(self._usage, e)
        elif type(e) is hub.Finish:
            self._finishes[e.choice] = e
        elif type(e) is hub.Extension:
            g = self._all.get(e.index) if e.index is not None else None
            entry: dict[str, Any] = {"namespace": e.namespace, "data": e.data}
            if g is not None and not g.finished:
                g.annotations.append(entry)
            else:
                if g is not None and g.ordinal is not None:  # a block already done: its place in the message
                    entry["index"] = g.ordinal
                elif g is None and e.index is not None:
                    entry["index"] = e.index
                self._annotations.append(entry)
        elif type(e) is hub.ResponseStart:
            info: dict[str, Any] = {
                k: v
                for k, v in (
                    ("id", e.id),
                    ("model", e.model),
                    ("created", e.created),
                    ("request_id", e.request_id),
                    ("extensions", e.extensions),
                )
                if v is not None
            }
            self._response = info or None
        elif type(e) is hub.Error:
            partial = self.partial()
            if e.type == "incomplete_stream":
                raise IncompleteStreamError(e.message, partial=partial)
            raise UpstreamError(e.message, status=e.status, body=e.body, type=e.type, partial=partial)
        elif type(e) is hub.ResponseEnd:
            self._end(e, out)
        else:  # the end of the chain costs valid events nothing (dialects._contracts: the encoder edges)
            raise TypeError(f"not a hub event: {type(e).__name__} {e!r:.80}")

    def _new_group(self, e: hub.BlockStart) -> _Group:
        carrier = False
        if e.choice != 0:
            kind, carrier = "text", True
        elif e.kind in ("text", "thinking", "tool_call"):
            kind = e.kind
        elif e.kind == "data":
            kind = "inline_thinking" if _mmsp_ext(e.extensions).get("type") == "inline_thinking" else "inline_data"
        elif e.kind == "native" and _mmsp_ext(e.extensions).get("type") == "embedding":
            kind = "embedding"
        else:
            kind, carrier = "text", True
        if kind == "tool_call" and not e.id:  # MMSP needs an id on every call; the same input, the same id
            self._calls += 1
            e = msgspec.structs.replace(e, id=f"call_{(self._response or {}).get('id', 'llmbridge')}_{self._calls}")
        return _Group(e, kind, carrier)

    # -- groups

    def _activate(self, g: _Group, out: list[UniEvent]) -> None:
        """``g`` becomes the live group; closed groups queued behind it follow at once."""
        while True:
            self._live = g
            if not g.closed:
                self._go_live(g, out)
                return
            self._finish(g, out)
            self._live = None
            if not self._queue:
                return
            g = self._queue.popleft()

    def _advance(self, out: list[UniEvent]) -> None:
        self._live = None
        if self._queue:
            self._activate(self._queue.popleft(), out)

    def _go_live(self, g: _Group, out: list[UniEvent]) -> None:
        """An open group starts streaming: its buffered fragments go out as one."""
        if not g.streams:
            return  # goes out whole when the block stops
        buffered = "".join(g.parts)
        if g.kind == "tool_call":
            s = g.start
            self._delta(ToolCall(s.name or "", buffered, s.id or ""), out)
            g.sent += 1
        elif buffered:
            self._emit_fragment(g, buffered, out)

    def _emit_fragment(self, g: _Group, text: str, out: list[UniEvent]) -> None:
        kind = g.kind
        if kind == "text":
            item: Item = Text(text)
        elif kind == "thinking":
            item = Thinking(text)
        elif kind == "tool_call":
            item = ToolCall("", text, "")
        else:
            data = g.b64.feed(text)  # type: ignore[union-attr]
            if not data:
                return
            item = (InlineData if kind == "inline_data" else InlineThinking)(data, g.start.mime_type or "")
        self._delta(item, out)
        g.sent += 1

    def _finish(self, g: _Group, out: list[UniEvent]) -> None:
        """The live group's block stopped: a last fragment if needed, then its ``.done`` item."""
        g.finished = True
        n = len(out)
        self._finish_group(g, out)
        if len(out) > n:
            g.ordinal = self._emitted
            self._emitted += 1
        g.parts = []

    def _finish_group(self, g: _Group, out: list[UniEvent]) -> None:
        s = g.start
        kind = g.kind
        if g.carrier:
            fidelity: dict | None = {EXTENSION_KEY: {"block": self._raw_block(g)}}
            self._delta(Text("", fidelity=fidelity), out)
            self._done(Text("", done=True, fidelity=fidelity), out)
            return
        if kind == "embedding":
            vector = _mmsp_ext(s.extensions).get("embedding") or []
            self._delta(Embedding(vector), out)
            self._done(Embedding(vector, done=True), out)
            return
        fidelity = to_item_fidelity(g.fidelity, self._extras(g))
        whole = "".join(g.parts)
        buffered = g.sent == 0  # nothing went out live: one fragment holds it all
        if buffered and not whole and not fidelity and kind != "tool_call":
            return  # an empty item is left out, as MMSP leaves it out (a vendor rejects it replayed)
        if kind == "text":
            if buffered or fidelity:
                self._delta(Text(whole if buffered else "", fidelity=fidelity), out)
            self._done(Text(whole, done=True, fidelity=fidelity), out)
        elif kind == "thinking":
            if buffered or fidelity:
                self._delta(Thinking(whole if buffered else "", fidelity=fidelity), out)
            self._done(Thinking(whole, done=True, fidelity=fidelity), out)
        elif kind == "tool_call":
            if buffered:
                self._delta(ToolCall(s.name or "", whole, s.id or "", fidelity=fidelity), out)
            elif fidelity:
                self._delta(ToolCall("", "", "", fidelity=fidelity), out)
            args = self._parse_arguments(g, whole)
            self._done(ToolCall(s.name or "", args, s.id or "", done=True, fidelity=fidelity), out)
        else:
            cls = InlineData if kind == "inline_data" else InlineThinking
            mime = s.mime_type or ""
            rest = _b64decode(whole) if buffered else g.b64.close()  # type: ignore[union-attr]
            if buffered or rest or fidelity:
                self._delta(cls(rest, mime, fidelity=fidelity), out)
            self._done(cls(_b64decode(whole), mime, done=True, fidelity=fidelity), out)

    def _parse_arguments(self, g: _Group, raw: str) -> dict:
        if not raw.strip():
            return {}
        name, call_id = g.start.name, g.start.id
        try:
            args = _json_decode(raw)
        except msgspec.DecodeError as exc:
            raise ToolCallArgumentParseError(
                f"arguments of tool call {call_id!r} ({name}) are not valid JSON: {exc}",
                name,
                call_id,
                raw,
                partial=self.partial(),
            ) from None
        if not isinstance(args, dict):
            raise ToolCallArgumentParseError(
                f"arguments of tool call {call_id!r} ({name}) parse to {type(args).__name__}, not an object",
                name,
                call_id,
                raw,
                partial=self.partial(),
            )
        return args

    def _extras(self, g: _Group) -> dict | None:
        """Block data the item has no field for, kept under ``fidelity.llmbridge``."""
        s = g.start
        extra: dict[str, Any] = {}
        if s.id is not None and g.kind != "tool_call":
            extra["id"] = s.id
        extensions = s.extensions
        if extensions and g.kind == "inline_thinking":
            extensions = {k: v for k, v in extensions.items() if k != "mmsp"} or None
        if extensions:
            extra["extensions"] = extensions
        if g.stop_extensions:
            extra["stop_extensions"] = g.stop_extensions
        if g.annotations:
            extra["annotations"] = g.annotations
        return extra or None

    def _raw_block(self, g: _Group) -> dict:
        s = g.start
        raw: dict[str, Any] = {"kind": s.kind}
        for key, value in (
            ("id", s.id),
            ("name", s.name),
            ("mime_type", s.mime_type),
            ("fidelity", g.fidelity),
            ("extensions", s.extensions),
            ("stop_extensions", g.stop_extensions),
        ):
            if value is not None:
                raw[key] = value
        if s.choice:
            raw["choice"] = s.choice
        text = "".join(g.parts)
        if text:
            raw["text"] = text
        if g.annotations:
            raw["annotations"] = g.annotations
        return raw

    def failure_state(self) -> dict[str, Any]:
        """What had not gone out when the stream failed, for a codec to carry beside its error.

        ``pending``: the blocks still waiting behind the live one, whole (with their hub
        ``index`` and whether they had ``closed``); ``live``: the block cut off while streaming
        (``sent``: some of it went out); ``usage``, ``finishes``, ``annotations``:
        the stream-level data so far; ``ordinals``: hub index -> place in the message of the
        blocks that went out; ``failed``: the hub index of the block that failed, if one did.
        """
        state: dict[str, Any] = {}
        pending = [{**self._raw_block(g), "index": g.start.index, "closed": g.closed} for g in self._queue]
        if pending:
            state["pending"] = pending
        if self._usage is not None:
            state["usage"] = msgspec.to_builtins(self._usage)
        if self._finishes:
            state["finishes"] = [_finish_dict(f) for f in self._finishes.values()]
        if self._annotations:
            state["annotations"] = self._annotations
        ordinals = {str(i): g.ordinal for i, g in self._all.items() if g.ordinal is not None}
        if ordinals:
            state["ordinals"] = ordinals
        if self._first and self._response:  # nothing went out: the response's id and model go here
            state["response"] = self._response
        live = self._live
        if live is not None and live.finished:
            state["failed"] = live.start.index
        elif live is not None:  # cut off while streaming: what went out of it, and what did not
            state["live"] = {**self._raw_block(live), "index": live.start.index, "sent": live.sent > 0}
        return state

    # -- output

    def _delta(self, item: Item, out: list[UniEvent]) -> None:
        event = UniEvent("delta", [item], None, None, self._clock())
        if self._first:
            self._stamp_first(event)
        out.append(event)

    def _done(self, item: Item, out: list[UniEvent]) -> None:
        self._delta(item, out)
        self.message.content_items.append(item)

    def _stamp_first(self, event: UniEvent) -> None:
        self._first = False
        if self._response:
            event.llmbridge = {"response": self._response}

    def _end(self, e: hub.ResponseEnd, out: list[UniEvent]) -> None:
        # Blocks still open at the end (a lenient source) are closed as they stand.
        for g in list(self._groups.values()):
            g.closed = True
        self._groups.clear()
        if self._live is not None:
            self._finish(self._live, out)
            self._advance(out)
        usage = UsageMetadata.from_hub(self._usage)
        finish = self._finishes.get(0)
        reason = FINISH_TO_MMSP.get(finish.reason, "unknown") if finish else "unknown"
        if (
            reason == "stop"
            and finish
            and finish.reason == "end_turn"
            and any(type(i) is ToolCall for i in self.message.content_items)
        ):
            reason = "tool_call"
        extra = self._stop_extras(finish, reason, e)
        stop = UniEvent("stop", [], usage, reason, self._clock(), llmbridge=extra)
        if self._first:
            self._first = False
            if self._response:
                stop.llmbridge = {"response": self._response, **(extra or {})}
        out.append(stop)
        self.message.usage_metadata, self.message.finish_reason = usage, reason
        self.message.created_at, self.message.llmbridge = stop.created_at, stop.llmbridge
        self.ended = True

    def _stop_extras(self, finish: hub.Finish | None, reason: str, end: hub.ResponseEnd) -> dict | None:
        extra: dict[str, Any] = {}
        if finish is None:
            extra["finish"] = None  # the source gave no finish reason; "unknown" stands in for it
        elif FINISH_FROM_MMSP.get(reason) != finish.reason or finish.raw not in (None, reason) or finish.stop_sequence:
            extra["finish"] = _finish_dict(finish)
        others = [_finish_dict(f) for c, f in self._finishes.items() if c != 0]
        if others:
            extra["finishes"] = others
        u = self._usage
        if u is not None:
            details = {
                k: v
                for k, v in (
                    ("cache_write_tokens", u.cache_write_tokens),
                    ("total_tokens", u.total_tokens),
                    ("extensions", u.extensions),
                )
                if v is not None
            }
            if details:
                extra["usage"] = details
        if self._annotations:
            extra["annotations"] = self._annotations
        if end.request_id is not None:
            extra["request_id"] = end.request_id
        return extra or None


def _finish_dict(f: hub.Finish) -> dict[str, Any]:
    d: dict[str, Any] = {"reason": f.reason}
    if f.choice:
        d["choice"] = f.choice
    if f.raw is not None:
        d["raw"] = f.raw
    if f.stop_sequence is not None:
        d["stop_sequence"] = f.stop_sequence
    return d


def view_events(events: Iterable[hub.Event], clock: Callable[[], int] | None = None) -> list[UniEvent]:
    """A whole hub stream as UniEvents; raises as :meth:`UniEventView.feed` does."""
    view = UniEventView(clock)
    out: list[UniEvent] = []
    for event in events:
        out.extend(view.feed(event))
    out.extend(view.close())
    return out
