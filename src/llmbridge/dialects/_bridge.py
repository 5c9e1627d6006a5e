"""Helpers shared by the cohere-v2, bedrock-converse and gemini-interactions codecs.

What a wire format cannot say natively rides under the ``"llmbridge"`` key of the
nearest wire object: hub events with no wire event at all (``events``), block fields
(``block``/``stop``), a finish reason without an exact word (``finish``), usage fields
(``usage``), stream-level fields (``start``) and the exact hub error (``error``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import hub

EXT = "llmbridge"

_EVENT_TYPES = {
    t.__name__: t
    for t in (
        hub.ResponseStart,
        hub.BlockStart,
        hub.Delta,
        hub.BlockStop,
        hub.Usage,
        hub.Finish,
        hub.Extension,
        hub.Error,
    )
}


def event_to_json(event: hub.Event) -> dict[str, Any]:
    out = {k: v for k, v in msgspec.to_builtins(event).items() if v is not None}
    out["event"] = type(event).__name__
    return out


def event_from_json(data: Any) -> hub.Event | None:
    if type(data) is not dict:
        return None
    kind = _EVENT_TYPES.get(data.get("event"))
    if kind is None:
        return None
    try:
        return msgspec.convert({k: v for k, v in data.items() if k != "event"}, kind)
    except msgspec.ValidationError:
        return None


def split_own(ns: dict[str, Any] | None, name: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the dialect's own entry as a dict, the other namespaces or None)."""
    if not ns:
        return {}, None
    own = ns.get(name)
    rest = {k: v for k, v in ns.items() if k != name}
    return (own if type(own) is dict else {}), (rest or None)


def block_info(start: hub.BlockStart, native: set[str], index: int | None = None) -> dict[str, Any] | None:
    """The BlockStart fields a wire block does not carry natively (``native``: field names it does).

    ``index`` is the hub index the decoder will give the block; when the source's differs it
    travels too, so blocks carried as hub events never collide with decoded ones."""
    info: dict[str, Any] = {} if index is None or index == start.index else {"index": start.index}
    for key in ("id", "name", "mime_type", "fidelity", "extensions"):
        value = getattr(start, key)
        if value is not None and key not in native:
            info[key] = value
    return info or None


def hub_index(info: dict[str, Any], default: int) -> int:
    index = info.get("index")
    return index if type(index) is int else default


def stop_info(stop: hub.BlockStop) -> dict[str, Any] | None:
    info = {k: v for k, v in (("fidelity", stop.fidelity), ("extensions", stop.extensions)) if v}
    return info or None


def usage_rest(usage: hub.Usage, native: set[str]) -> dict[str, Any] | None:
    rest = {f: v for f in usage.__struct_fields__ if f not in native and (v := getattr(usage, f)) is not None}
    return rest or None


def apply_usage(usage: hub.Usage, rest: Any) -> hub.Usage:
    if type(rest) is not dict:
        return usage
    changes = {k: v for k, v in rest.items() if k in hub.Usage.__struct_fields__}
    try:
        return msgspec.structs.replace(usage, **changes)
    except (TypeError, msgspec.ValidationError):
        return usage


def start_rest(start: hub.ResponseStart, native: set[str]) -> dict[str, Any] | None:
    rest = {f: v for f in start.__struct_fields__ if f not in native and (v := getattr(start, f)) is not None}
    return rest or None


def apply_start(start: hub.ResponseStart, rest: Any) -> hub.ResponseStart:
    if type(rest) is not dict:
        return start
    changes = {k: v for k, v in rest.items() if k in hub.ResponseStart.__struct_fields__}
    try:
        start = msgspec.structs.replace(start, **changes)
    except (TypeError, msgspec.ValidationError):
        return start
    if rest.get("no_id"):
        start.id = None
    return start


def error_from_json(data: Any) -> hub.Error | None:
    event = event_from_json({**data, "event": "Error"}) if type(data) is dict else None
    return event if type(event) is hub.Error else None


def exact_finish(finish: hub.Finish, wire_word: str | None, native_reason: str | None, calls: bool = False) -> bool:
    """Does ``wire_word`` decode back to the same Finish?  (Decoders turn end_turn into
    tool_use when tool calls were made, so ``calls`` says whether they were.)"""
    if finish.reason == "end_turn" and calls:
        return False
    return (
        wire_word is not None
        and native_reason == finish.reason
        and finish.raw in (None, wire_word)
        and finish.stop_sequence is None
    )
