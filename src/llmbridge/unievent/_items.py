"""The UniEvent item model: content items (``K.delta`` fragments and ``K.done`` items), the
events that carry them, MMSP's usage, the assembled :class:`Message`, and the vocabulary
that maps them to the hub (finish reasons, item fidelity)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any, ClassVar

import msgspec

from .. import hub
from ..dialects import MORE_NAMES
from ..dialects import NAMES as DIALECTS
from ..dialects.base import EXTENSION_KEY

# --------------------------------------------------------------------------- items


class Item:
    """A content item; ``done`` tells a ``K.done`` item from a ``K.delta`` fragment."""

    __slots__ = ("done", "fidelity")
    kind: ClassVar[str] = ""
    done: bool
    fidelity: dict | None

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
            d[EXTENSION_KEY] = self.llmbridge
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
        llmbridge = d.get(EXTENSION_KEY)
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
            d[EXTENSION_KEY] = self.llmbridge
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        items = [item_from_dict(i) for i in d.get("content_items") or []]
        usage = d.get("usage_metadata")
        created = d.get("created_at")
        llmbridge = d.get(EXTENSION_KEY)
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
        out[EXTENSION_KEY] = extra
    return out or None


def from_item_fidelity(fidelity: dict | None) -> tuple[dict | None, dict | None]:
    """An item's fidelity as (hub fidelity, our ``llmbridge`` extras): unknown keys go to ``mmsp``."""
    if not fidelity:
        return None, None
    out: dict[str, Any] = {}
    mmsp: dict[str, Any] = {}
    extra = None
    for key, value in fidelity.items():
        if key == EXTENSION_KEY:
            extra = value if isinstance(value, dict) else None
        elif key in _DIALECTS and key != "mmsp":
            out[key] = value
        else:
            mmsp[key] = value
    if mmsp:
        out["mmsp"] = mmsp
    return out or None, extra
