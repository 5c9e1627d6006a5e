"""Helpers shared by the cohere-v2, bedrock-converse and gemini-interactions codecs.

What a wire format cannot say natively rides under the ``"llmbridge"`` key of the
nearest wire object: hub events with no wire event at all (``events``), block fields
(``block``/``stop``), a finish reason without an exact word (``finish``), usage fields
(``usage``), stream-level fields (``start``) and the exact hub error (``error``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from .. import hub
from ..errors import RequestError
from .base import json_decode

# (a carried ResponseEnd must never end the stream early, so it is not read back)
_CARRIED = tuple(t for t in hub.EVENT_TYPES.values() if t is not hub.ResponseEnd)


def event_to_json(event: hub.Event) -> dict[str, Any]:
    """A hub event for the ``events``/``finish`` entries: :func:`llmbridge.hub.event_to_json`."""
    return hub.event_to_json(event)


def error_to_json(error: hub.Error) -> dict[str, Any]:
    """The exact hub error, for the ``error`` entry (the wire event already says it is one)."""
    return {k: v for k, v in hub.event_to_json(error).items() if k != "event"}


def event_from_json(data: Any) -> hub.Event | None:
    """The carried hub event ``data`` holds (never a ``ResponseEnd``), or None when it holds none."""
    return hub.event_from_json(data, kinds=_CARRIED)


def error_from_json(data: Any) -> hub.Error | None:
    """The hub error of an :func:`error_to_json` entry (it has no ``event`` tag), or None."""
    if type(data) is not dict:
        return None
    error = hub.event_from_json({**data, "event": "Error"}, kinds=(hub.Error,))
    return error if type(error) is hub.Error else None


def carried_events(ext: dict[str, Any]) -> list[hub.Event]:
    """The hub events an encoder queued under ``events`` (ones that had no wire event)."""
    return [e for e in map(event_from_json, ext.get("events") or ()) if e is not None]


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


def rest_fields(event: hub.Usage | hub.ResponseStart, native: set[str]) -> dict[str, Any] | None:
    """The set fields of ``event`` that its wire does not carry natively (``native``: those it does)."""
    rest = {f: v for f in event.__struct_fields__ if f not in native and (v := getattr(event, f)) is not None}
    return rest or None


def apply_rest(event: Any, rest: Any) -> Any:
    """``event`` with the fields carried in ``rest`` put back; unknown keys are not its business."""
    if type(rest) is not dict:
        return event
    changes = {k: v for k, v in rest.items() if k in event.__struct_fields__}
    try:
        return msgspec.structs.replace(event, **changes)
    except (TypeError, msgspec.ValidationError):
        return event


def apply_usage(usage: hub.Usage, rest: Any) -> hub.Usage:
    """``usage`` with what an encoder carried in ``rest`` put back: fields, ``no_<field>`` marks
    (where the wire had to write a number) and other namespaces' extensions."""
    if type(rest) is not dict:
        return usage
    own = usage.extensions  # the wire's own usage extras: merged with the carried ones, not replaced
    usage = apply_rest(usage, rest)
    for field in usage.__struct_fields__:
        if rest.get(f"no_{field}"):
            setattr(usage, field, None)
    carried = rest.get("extensions")
    usage.extensions = hub.merge_dicts(own, carried) if type(carried) is dict else own
    return usage


def apply_start(start: hub.ResponseStart, rest: Any) -> hub.ResponseStart:
    out = apply_rest(start, rest)
    if out is not start and rest.get("no_id"):
        out.id = None
    return out


def start_info(start: hub.ResponseStart, native: tuple[str, ...]) -> dict[str, Any]:
    """:func:`rest_fields`, plus ``no_<field>`` for each native field the start lacks (the wire
    writes ``""`` there, which must not come back as a value)."""
    rest = rest_fields(start, set(native)) or {}
    for key in native:
        if getattr(start, key) is None:
            rest[f"no_{key}"] = True
    return rest


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


def obj_at(data: dict[str, Any], key: str) -> dict[str, Any]:
    """The JSON object at ``data[key]``, or ``{}`` when there is none (lenient decoding)."""
    value = data.get(key)
    return value if type(value) is dict else {}


def finish_from_wire(word: str, to_hub: dict[str, str], tool_calls: bool) -> hub.Finish:
    """The hub Finish for a wire reason; a plain end after tool calls is ``tool_use`` (the hub rule)."""
    reason = to_hub.get(word, "other")
    return hub.Finish("tool_use" if reason == "end_turn" and tool_calls else reason, raw=word)


# --------------------------------------------------------------------------- requests and HTTP errors


def request_list(body: Any, key: str, what: str) -> list[Any]:
    """``body[key]``, the request's required list (of ``what``); RequestError naming it otherwise."""
    if type(body) is not dict:
        raise RequestError("request body must be a JSON object")
    value = body.get(key)
    if type(value) is not list:
        raise RequestError(f"required, a list of {what}", key)
    return value


def vendor_fields(name: str, body: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """Request fields the hub does not model, as ``"<dialect>:<field>"`` request extensions."""
    return {f"{name}:{k}": v for k, v in body.items() if k not in known}


def put_vendor_fields(
    body: dict[str, Any], name: str, extensions: dict[str, Any], skip: Callable[[str], bool] | None = None
) -> None:
    """The dialect's own request extensions back into ``body``, never over a field it has
    (``skip``: fields the caller places itself)."""
    prefix = name + ":"
    for key, value in extensions.items():
        if key.startswith(prefix) and not (skip and skip(key[len(prefix) :])):
            body.setdefault(key[len(prefix) :], value)


def arguments_object(text: str, fallback: Any) -> Any:
    """Tool-call argument JSON as the object these wires want (``""`` means ``{}``)."""
    try:
        return json_decode(text) if text.strip() else {}
    except msgspec.DecodeError:
        return fallback


def post_headers(request: hub.Request, stream_type: str, auth: dict[str, str]) -> dict[str, str]:
    headers = {"content-type": "application/json", **auth}
    if request.stream:
        headers["accept"] = stream_type
    return headers


def error_json(body: bytes) -> Any:
    """An HTTP error body as JSON, or None when it is empty or not JSON."""
    try:
        return json_decode(body) if body else None
    except msgspec.DecodeError:
        return None


def error_type(ext: dict[str, Any], status: int) -> str:
    """The hub error type an encoder carried in ``ext``, else the one for the HTTP status."""
    kind = ext.get("type")
    return kind if kind in hub.ERROR_TYPES else hub.error_type_for_status(status)


def plain_error(status: int, body: bytes, data: Any = None) -> hub.Error:
    """An error response not in the vendor's JSON shape: its text, typed by the status."""
    text = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    return hub.Error(text, hub.error_type_for_status(status), status=status, body=data if data else text)
