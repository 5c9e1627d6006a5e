"""The UniEvent view: MMSP's stream grammar ("Streaming events", see docs/references.md) derived from hub events.

A UniEvent stream is ``delta_event* stop_event``.  Every delta event holds exactly one
content item; the items form groups ``K.delta+ K.done`` that never interleave; each
``.done`` item is the complete item (the assistant message is the list of them); the
``stop`` event comes last, once, with the usage and the finish reason.  A stream ends
with ``stop`` or with an exception, never both.

:class:`UniEventView` is sans-I/O: hub events in, UniEvents out.  Hub blocks may be
open at the same time; the view streams one group live and buffers the fragments of
the others, releasing each as its own group after the live one's ``.done`` (in the
order the blocks started).  What the grammar cannot express travels in ``fidelity``
under the key ``"llmbridge"`` (block-level) or in :attr:`UniEvent.llmbridge`
(stream-level); see docs/unievent.md.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import msgspec

from .. import hub
from ..dialects import MORE_NAMES
from ..dialects import NAMES as DIALECTS
from ..errors import IncompleteStreamError, LLMBridgeError, ToolCallArgumentParseError, UpstreamError

__all__ = [
    "Item",
    "Text",
    "Thinking",
    "ToolCall",
    "InlineData",
    "InlineThinking",
    "Embedding",
    "ImageUrl",
    "ToolResult",
    "UsageMetadata",
    "UniEvent",
    "Message",
    "UniEventView",
    "assemble_message",
    "item_from_dict",
    "view_events",
    "to_item_fidelity",
    "from_item_fidelity",
    "FINISH_TO_MMSP",
    "FINISH_FROM_MMSP",
    "grammar_violations",
]

_json_decode = msgspec.json.decode

# --------------------------------------------------------------------------- items


class Item:
    """A content item; ``done`` tells a ``K.done`` item from a ``K.delta`` fragment."""

    __slots__ = ("done", "fidelity")
    kind: ClassVar[str] = ""

    @property
    def type(self) -> str:
        return f"{self.kind}.done" if self.done else f"{self.kind}.delta"

    def _fields(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        d = {"type": self.type, **self._fields()}
        if self.fidelity is not None:
            d["fidelity"] = self.fidelity
        return d

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


class Text(Item):
    __slots__ = ("text",)
    kind = "text"

    def __init__(self, text: str = "", *, done: bool = False, fidelity: dict | None = None) -> None:
        self.text, self.done, self.fidelity = text, done, fidelity

    def _fields(self) -> dict[str, Any]:
        return {"text": self.text}


class Thinking(Item):
    __slots__ = ("thinking",)
    kind = "thinking"

    def __init__(self, thinking: str = "", *, done: bool = False, fidelity: dict | None = None) -> None:
        self.thinking, self.done, self.fidelity = thinking, done, fidelity

    def _fields(self) -> dict[str, Any]:
        return {"thinking": self.thinking}


class ToolCall(Item):
    """``arguments`` is a JSON text fragment on a delta and the parsed object on the done item."""

    __slots__ = ("arguments", "name", "tool_call_id")
    kind = "tool_call"

    def __init__(
        self,
        name: str = "",
        arguments: Any = "",
        tool_call_id: str = "",
        *,
        done: bool = False,
        fidelity: dict | None = None,
    ) -> None:
        self.name, self.arguments, self.tool_call_id = name, arguments, tool_call_id
        self.done, self.fidelity = done, fidelity

    def _fields(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "tool_call_id": self.tool_call_id}


class InlineData(Item):
    """Bytes (audio chunks, an image); base64 in JSON."""

    __slots__ = ("data", "mime_type")
    kind = "inline_data"

    def __init__(
        self, data: bytes = b"", mime_type: str = "", *, done: bool = False, fidelity: dict | None = None
    ) -> None:
        self.data, self.mime_type, self.done, self.fidelity = data, mime_type, done, fidelity

    def _fields(self) -> dict[str, Any]:
        return {"data": base64.b64encode(self.data).decode(), "mime_type": self.mime_type}


class InlineThinking(InlineData):
    __slots__ = ()
    kind = "inline_thinking"


class Embedding(Item):
    __slots__ = ("embedding",)
    kind = "embedding"

    def __init__(
        self, embedding: list[float] | None = None, *, done: bool = False, fidelity: dict | None = None
    ) -> None:
        self.embedding, self.done, self.fidelity = embedding or [], done, fidelity

    def _fields(self) -> dict[str, Any]:
        return {"embedding": self.embedding}


class ImageUrl(Item):
    """User input only (no delta form)."""

    __slots__ = ("image_url",)
    kind = "image_url"

    def __init__(self, image_url: str = "", *, done: bool = True, fidelity: dict | None = None) -> None:
        self.image_url, self.done, self.fidelity = image_url, done, fidelity

    def _fields(self) -> dict[str, Any]:
        return {"image_url": self.image_url}


class ToolResult(Item):
    """User input only (no delta form)."""

    __slots__ = ("images", "text", "tool_call_id")
    kind = "tool_result"

    def __init__(
        self,
        text: str = "",
        tool_call_id: str = "",
        images: list[str] | None = None,
        *,
        done: bool = True,
        fidelity: dict | None = None,
    ) -> None:
        self.text, self.tool_call_id, self.images = text, tool_call_id, images
        self.done, self.fidelity = done, fidelity

    def _fields(self) -> dict[str, Any]:
        d: dict[str, Any] = {"text": self.text}
        if self.images is not None:
            d["images"] = self.images
        d["tool_call_id"] = self.tool_call_id
        return d


ITEM_CLASSES: dict[str, type[Item]] = {
    c.kind: c for c in (Text, Thinking, ToolCall, InlineData, InlineThinking, Embedding, ImageUrl, ToolResult)
}


def item_from_dict(d: dict[str, Any]) -> Item:
    """An item from its JSON object; ``ValueError`` for an unknown type or a bad field."""
    kind, _, phase = str(d.get("type", "")).rpartition(".")
    cls = ITEM_CLASSES.get(kind)
    if cls is None or phase not in ("delta", "done"):
        raise ValueError(f"unknown content item type {d.get('type')!r}")
    done = phase == "done"
    fidelity = d.get("fidelity")
    if fidelity is not None and not isinstance(fidelity, dict):
        raise ValueError("fidelity must be an object")
    if cls is Text:
        return Text(_str(d, "text"), done=done, fidelity=fidelity)
    if cls is Thinking:
        return Thinking(_str(d, "thinking"), done=done, fidelity=fidelity)
    if cls is ToolCall:
        args = d.get("arguments", {} if done else "")
        if done and not isinstance(args, dict):
            raise ValueError("tool_call.done arguments must be an object")
        if not done and not isinstance(args, str):
            raise ValueError("tool_call.delta arguments must be a string")
        return ToolCall(_str(d, "name"), args, _str(d, "tool_call_id"), done=done, fidelity=fidelity)
    if cls is InlineData or cls is InlineThinking:
        try:
            data = base64.b64decode(_str(d, "data"), validate=True)
        except binascii.Error as exc:
            raise ValueError(f"data is not base64 ({exc})") from None
        return cls(data, _str(d, "mime_type"), done=done, fidelity=fidelity)
    if cls is Embedding:
        vector = d.get("embedding") or []
        if not isinstance(vector, list):
            raise ValueError("embedding must be a list")
        return Embedding(vector, done=done, fidelity=fidelity)
    if cls is ImageUrl:
        return ImageUrl(_str(d, "image_url"), done=done, fidelity=fidelity)
    images = d.get("images")
    return ToolResult(_str(d, "text"), _str(d, "tool_call_id"), images, done=done, fidelity=fidelity)


def _str(d: dict[str, Any], key: str) -> str:
    value = d.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


# --------------------------------------------------------------------------- events


class UsageMetadata(msgspec.Struct):
    """MMSP's usage: ``prompt_tokens`` counts cached tokens too; ``response_tokens`` excludes thoughts."""

    cached_tokens: int | None = None
    prompt_tokens: int | None = None
    thoughts_tokens: int | None = None
    response_tokens: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        return {
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "thoughts_tokens": self.thoughts_tokens,
            "response_tokens": self.response_tokens,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UsageMetadata:
        values = {}
        for key in cls.__struct_fields__:
            v = d.get(key)
            if v is not None and (type(v) is not int):
                raise ValueError(f"usage_metadata.{key} must be an integer")
            values[key] = v
        return cls(**values)

    @classmethod
    def from_hub(cls, usage: hub.Usage | None) -> UsageMetadata:
        if usage is None:
            return cls()
        response = usage.output_tokens
        if response is not None and usage.reasoning_tokens:
            response = max(0, response - usage.reasoning_tokens)
        return cls(usage.cache_read_tokens, usage.input_tokens, usage.reasoning_tokens, response)

    def to_hub(self) -> hub.Usage:
        output = self.response_tokens
        if output is not None and self.thoughts_tokens:
            output += self.thoughts_tokens
        elif output is None:
            output = self.thoughts_tokens
        return hub.Usage(
            input_tokens=self.prompt_tokens,
            output_tokens=output,
            cache_read_tokens=self.cached_tokens,
            reasoning_tokens=self.thoughts_tokens,
        )


class UniEvent:
    """One event: ``event_type`` ``"delta"`` (one item) or ``"stop"`` (usage and finish reason).

    ``llmbridge`` holds stream-level data MMSP has no field for (response id and model on
    the first event; the hub finish reason, usage details and annotations on the stop
    event).  It is written as the JSON key ``"llmbridge"`` only when set.
    """

    __slots__ = (
        "content_items",
        "created_at",
        "event_type",
        "finish_reason",
        "llmbridge",
        "role",
        "usage_metadata",
    )

    def __init__(
        self,
        event_type: str,
        content_items: list[Item] | None = None,
        usage_metadata: UsageMetadata | None = None,
        finish_reason: str | None = None,
        created_at: int | None = None,
        role: str = "assistant",
        llmbridge: dict | None = None,
    ) -> None:
        self.event_type = event_type
        self.content_items = content_items if content_items is not None else []
        self.usage_metadata = usage_metadata
        self.finish_reason = finish_reason
        self.created_at = created_at
        self.role = role
        self.llmbridge = llmbridge

    @property
    def item(self) -> Item | None:
        return self.content_items[0] if self.content_items else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "role": self.role,
            "event_type": self.event_type,
            "content_items": [i.to_dict() for i in self.content_items],
            "usage_metadata": self.usage_metadata.to_dict() if self.usage_metadata is not None else None,
            "finish_reason": self.finish_reason,
        }
        if self.created_at is not None:
            d["created_at"] = self.created_at
        if self.llmbridge is not None:
            d["llmbridge"] = self.llmbridge
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UniEvent:
        if not isinstance(d, dict):
            raise ValueError("a UniEvent must be a JSON object")
        event_type = d.get("event_type")
        if event_type not in ("delta", "stop"):
            raise ValueError(f"event_type must be 'delta' or 'stop', not {event_type!r}")
        items = d.get("content_items") or []
        if not isinstance(items, list):
            raise ValueError("content_items must be a list")
        usage = d.get("usage_metadata")
        created = d.get("created_at")
        llmbridge = d.get("llmbridge")
        return cls(
            event_type,
            [item_from_dict(i) if isinstance(i, dict) else _bad_item(i) for i in items],
            UsageMetadata.from_dict(usage) if isinstance(usage, dict) else None,
            d.get("finish_reason"),
            created if type(created) is int else None,
            d.get("role") or "assistant",
            llmbridge if isinstance(llmbridge, dict) else None,
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is UniEvent and other.to_dict() == self.to_dict()

    def __repr__(self) -> str:
        return f"UniEvent({self.to_dict()!r})"


def _bad_item(value: Any) -> Item:
    raise ValueError(f"a content item must be an object, not {type(value).__name__}")


class Message:
    """The assistant message a stream adds up to: the ``.done`` items, usage and finish reason."""

    __slots__ = ("content_items", "created_at", "finish_reason", "llmbridge", "usage_metadata")

    def __init__(
        self,
        content_items: list[Item] | None = None,
        usage_metadata: UsageMetadata | None = None,
        finish_reason: str | None = None,
        created_at: int | None = None,
        llmbridge: dict | None = None,
    ) -> None:
        self.content_items = content_items if content_items is not None else []
        self.usage_metadata = usage_metadata
        self.finish_reason = finish_reason
        self.created_at = created_at
        self.llmbridge = llmbridge

    @property
    def text(self) -> str:
        return "".join(i.text for i in self.content_items if type(i) is Text)

    @property
    def thinking(self) -> str:
        return "".join(i.thinking for i in self.content_items if type(i) is Thinking)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [i for i in self.content_items if type(i) is ToolCall]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "role": "assistant",
            "content_items": [i.to_dict() for i in self.content_items],
            "usage_metadata": self.usage_metadata.to_dict() if self.usage_metadata is not None else None,
            "finish_reason": self.finish_reason,
        }
        if self.created_at is not None:
            d["created_at"] = self.created_at
        if self.llmbridge is not None:
            d["llmbridge"] = self.llmbridge
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        items = [item_from_dict(i) for i in d.get("content_items") or []]
        usage = d.get("usage_metadata")
        created = d.get("created_at")
        llmbridge = d.get("llmbridge")
        return cls(
            items,
            UsageMetadata.from_dict(usage) if isinstance(usage, dict) else None,
            d.get("finish_reason"),
            created if type(created) is int else None,
            llmbridge if isinstance(llmbridge, dict) else None,
        )


def assemble_message(unievents: Iterable[UniEvent | dict]) -> Message:
    """The ``.done`` items in stream order, with the stop event's usage and finish reason."""
    message = Message()
    for event in unievents:
        if type(event) is not UniEvent:
            event = UniEvent.from_dict(event)  # type: ignore[arg-type]
        if event.event_type == "stop":
            message.usage_metadata, message.finish_reason = event.usage_metadata, event.finish_reason
            message.created_at = event.created_at
            message.llmbridge = hub.merge_dicts(message.llmbridge, event.llmbridge)
        else:
            if event.llmbridge:
                message.llmbridge = hub.merge_dicts(message.llmbridge, event.llmbridge)
            message.content_items.extend(i for i in event.content_items if i.done)
    return message


# --------------------------------------------------------------------------- fidelity and finish

FINISH_TO_MMSP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
}
FINISH_FROM_MMSP = {"stop": "end_turn", "length": "max_tokens", "tool_call": "tool_use", "unknown": "other"}

_DIALECTS = frozenset(DIALECTS + MORE_NAMES)  # fidelity namespaces kept whole


def to_item_fidelity(fidelity: dict | None, extra: dict | None = None) -> dict | None:
    """Hub fidelity as an item's: the ``mmsp`` namespace unwrapped, other namespaces kept whole."""
    if not fidelity and not extra:
        return None
    out: dict[str, Any] = {}
    if fidelity:
        for key, value in fidelity.items():
            if key == "mmsp" and isinstance(value, dict):
                out.update(value)
            else:
                out[key] = value
    if extra:
        out["llmbridge"] = extra
    return out or None


def from_item_fidelity(fidelity: dict | None) -> tuple[dict | None, dict | None]:
    """An item's fidelity as (hub fidelity, our ``llmbridge`` extras): unknown keys go to ``mmsp``."""
    if not fidelity:
        return None, None
    out: dict[str, Any] = {}
    mmsp: dict[str, Any] = {}
    extra = None
    for key, value in fidelity.items():
        if key == "llmbridge":
            extra = value if isinstance(value, dict) else None
        elif key in _DIALECTS and key != "mmsp":
            out[key] = value
        else:
            mmsp[key] = value
    if mmsp:
        out["mmsp"] = mmsp
    return out or None, extra


# --------------------------------------------------------------------------- the view


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
    """Hub events in, UniEvents out; see the module docstring for the grammar.

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
        if self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
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
        kind = type(e)
        if kind is hub.Delta:
            g = self._groups.get(e.index)
            if g is None or not e.text:
                return
            if g is self._live and g.streams:
                self._emit_fragment(g, e.text, out)
            g.parts.append(e.text)
        elif kind is hub.BlockStart:
            g = self._new_group(e)
            self._groups[e.index] = g
            self._all[e.index] = g
            if self._live is None:
                self._activate(g, out)
            else:
                self._queue.append(g)
        elif kind is hub.BlockStop:
            g = self._groups.pop(e.index, None)
            if g is None:
                return
            g.closed = True
            g.fidelity = hub.merge_dicts(g.fidelity, e.fidelity)
            g.stop_extensions = e.extensions
            if g is self._live:
                self._finish(g, out)
                self._advance(out)
        elif kind is hub.Usage:
            self._usage = hub.merge_usage(self._usage, e)
        elif kind is hub.Finish:
            self._finishes[e.choice] = e
        elif kind is hub.Extension:
            g = self._all.get(e.index) if e.index is not None else None
            entry = {"namespace": e.namespace, "data": e.data}
            if g is not None and not g.finished:
                g.annotations.append(entry)
            else:
                if g is not None and g.ordinal is not None:  # a block already done: its place in the message
                    entry["index"] = g.ordinal
                elif g is None and e.index is not None:
                    entry["index"] = e.index
                self._annotations.append(entry)
        elif kind is hub.ResponseStart:
            info = {
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
        elif kind is hub.Error:
            partial = self.partial()
            if e.type == "incomplete_stream":
                raise IncompleteStreamError(e.message, partial=partial)
            raise UpstreamError(e.message, status=e.status, body=e.body, type=e.type, partial=partial)
        elif kind is hub.ResponseEnd:
            self._end(e, out)
        else:  # the end of the chain costs valid events nothing (dialects._contracts: the encoder edges)
            raise TypeError(f"not a hub event: {kind.__name__} {e!r:.80}")

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
            fidelity = {"llmbridge": {"block": self._raw_block(g)}}
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


# --------------------------------------------------------------------------- checking


def grammar_violations(events: list[UniEvent | dict]) -> list[str]:
    """Every way ``events`` breaks MMSP's stream grammar (an empty list when it conforms)."""
    problems: list[str] = []
    open_kind: str | None = None
    open_fidelity: Any = None
    fidelity_count = 0
    first = True
    stops = 0
    for n, event in enumerate(events):
        e = event.to_dict() if isinstance(event, UniEvent) else event
        where = f"event {n}"
        if stops:
            problems.append(f"{where}: event after stop")
        if e.get("event_type") == "stop":
            stops += 1
            if e.get("content_items"):
                problems.append(f"{where}: stop carries items")
            if not isinstance(e.get("usage_metadata"), dict):
                problems.append(f"{where}: stop without usage_metadata")
            if e.get("finish_reason") not in ("stop", "length", "tool_call", "unknown"):
                problems.append(f"{where}: bad finish_reason {e.get('finish_reason')!r}")
            if open_kind is not None:
                problems.append(f"{where}: stop while a {open_kind} group is open")
            continue
        items = e.get("content_items") or []
        if len(items) != 1:
            problems.append(f"{where}: {len(items)} items on a delta event")
            continue
        if e.get("usage_metadata") is not None or e.get("finish_reason") is not None:
            problems.append(f"{where}: usage or finish reason on a delta event")
        item = items[0]
        kind, _, phase = item["type"].rpartition(".")
        fid = item.get("fidelity")
        if phase == "delta":
            if open_kind is None:
                open_kind, open_fidelity, fidelity_count, first = kind, None, 0, True
                if kind == "tool_call" and not (item.get("name") and item.get("tool_call_id")):
                    problems.append(f"{where}: first tool_call.delta without name or tool_call_id")
            elif kind != open_kind:
                problems.append(f"{where}: {kind}.delta inside an open {open_kind} group (interleaving)")
            elif kind == "tool_call" and not first and (item.get("name") or item.get("tool_call_id")):
                problems.append(f"{where}: name/tool_call_id on a later tool_call fragment")
            first = False
            if fid is not None:
                fidelity_count += 1
                open_fidelity = fid
                if fidelity_count > 1:
                    problems.append(f"{where}: a second fragment with fidelity in one group")
        else:
            if open_kind != kind:
                problems.append(f"{where}: {kind}.done without its {kind}.delta group")
            elif fid != open_fidelity:
                problems.append(f"{where}: .done fidelity differs from the fragment's")
            if kind == "tool_call" and not isinstance(item.get("arguments"), dict):
                problems.append(f"{where}: tool_call.done arguments are not an object")
            open_kind = None
    if stops != 1:
        problems.append(f"end: {stops} stop events")
    return problems
