"""Shared vocabulary of the anthropic-messages codecs: names, reason and error maps, usage,
and content blocks as hub block starts (for the stream decoder and whole responses)."""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub
from ..base import EXTENSION_KEY, json_encode

NAME = "anthropic-messages"
ANTHROPIC_VERSION = "2023-06-01"  # the anthropic-version header every request carries

# Anthropic stop_reason -> hub finish reason.
STOP_TO_HUB: dict[str, hub.FinishReason] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "model_context_window_exceeded": "max_tokens",
}

# hub finish reason -> Anthropic stop_reason; reasons missing here travel under EXTENSION_KEY.
HUB_TO_STOP = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "content_filter": "refusal",  # the nearest Anthropic word: output withheld
}

# Anthropic error type <-> hub error type.
ERROR_TO_HUB = {
    "invalid_request_error": "invalid_request",
    "authentication_error": "authentication",
    "billing_error": "permission",
    "permission_error": "permission",
    "not_found_error": "not_found",
    "request_too_large": "request_too_large",
    "rate_limit_error": "rate_limit",
    "api_error": "api_error",
    "timeout_error": "timeout",
    "overloaded_error": "overloaded",
}
HUB_TO_ERROR = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "request_too_large",
    "unsupported_media_type": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "api_error": "api_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
    "incomplete_stream": "api_error",
    "protocol_error": "api_error",
}
ERROR_STATUS = {"overloaded": 529}  # where Anthropic's status differs from hub.ERROR_STATUS


def finish_from_stop(stop_reason: str, stop_sequence: str | None = None) -> hub.Finish:
    return hub.Finish(STOP_TO_HUB.get(stop_reason, "other"), 0, stop_reason, stop_sequence)


def stop_from_finish(finish: hub.Finish) -> tuple[str, bool]:
    """The stop_reason for ``finish`` and whether decoding it gives ``finish`` back exactly."""
    raw = finish.raw
    if raw in STOP_TO_HUB and STOP_TO_HUB[raw] == finish.reason:
        return raw, True
    stop = HUB_TO_STOP.get(finish.reason, "end_turn")
    return stop, stop == finish.reason and raw in (None, stop)


# stop_from_finish's stop_reason as JSON, for each reason it can give (a plain message_delta's).
STOP_JSON = {stop: json_encode(stop) for stop in (*STOP_TO_HUB, *HUB_TO_STOP.values(), "end_turn")}


_USAGE_KNOWN = {"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}
# Usage fields the API reference has as required but nullable: null when the source did not say
# (and a null one read back says nothing).
USAGE_NULLABLE = ("cache_creation", "server_tool_use", "service_tier")
_SERVER_TOOL_COUNTS = ("web_fetch_requests", "web_search_requests")
_NULLS = dict.fromkeys(USAGE_NULLABLE)
_NO_USAGE = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}
_NO_USAGE_NONE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def usage_from_raw(raw: dict[str, Any]) -> hub.Usage:
    """Anthropic usage (running totals) -> hub usage; input counts cached tokens too."""
    read = raw.get("cache_read_input_tokens")
    write = raw.get("cache_creation_input_tokens")
    fresh = raw.get("input_tokens")
    total_in = None
    if fresh is not None or read is not None or write is not None:
        total_in = (fresh or 0) + (read or 0) + (write or 0)
    details = raw.get("output_tokens_details")
    reasoning = details.get("thinking_tokens") if type(details) is dict else None
    extras = {k: v for k, v in raw.items() if k not in _USAGE_KNOWN and not (v is None and k in USAGE_NULLABLE)}
    if reasoning is not None and len(details) == 1:
        del extras["output_tokens_details"]  # said by reasoning_tokens
    return hub.Usage(
        input_tokens=total_in,
        output_tokens=raw.get("output_tokens"),
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=reasoning,
        extensions={NAME: extras} if extras else None,
    )


def usage_to_raw(usage: hub.Usage | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Hub usage -> (Anthropic usage object, hub data Anthropic cannot say or ``None``)."""
    if usage is None:  # (message_start of nearly every stream: no usage yet) what hub.Usage() gives
        return {**_NO_USAGE, **_NULLS}, {"none": list(_NO_USAGE_NONE)}
    extra: dict[str, Any] = {}
    raw = _usage_object(usage, extra)
    if usage.total_tokens is not None:
        extra["total_tokens"] = usage.total_tokens
    none = [
        field
        for field, value in (
            ("input_tokens", usage.input_tokens),
            ("output_tokens", usage.output_tokens),
            ("cache_read_tokens", usage.cache_read_tokens),
            ("cache_write_tokens", usage.cache_write_tokens),
        )
        if value is None
    ]
    if none:
        extra["none"] = none
    ext = usage.extensions
    if ext:
        foreign = {k: v for k, v in ext.items() if k != NAME}
        if foreign:
            extra["extensions"] = foreign
    return raw, extra or None


def usage_object(usage: hub.Usage | None) -> dict[str, Any]:
    """``usage_to_raw(usage)[0]``, the Anthropic usage object alone: what a client that takes
    no ``"llmbridge"`` data gets (the hub data beside it would only be made to be dropped)."""
    if usage is None:
        return {**_NO_USAGE, **_NULLS}
    return _usage_object(usage, {})


class _PlainUsage(msgspec.Struct, gc=False):
    """The usage object of a usage with no extensions and no reasoning count: the keys and
    values of usage_object's dict, in its order (so json_encode writes the same bytes)."""

    input_tokens: Any
    cache_creation_input_tokens: Any
    cache_read_input_tokens: Any
    output_tokens: Any
    cache_creation: None = None
    server_tool_use: None = None
    service_tier: None = None


def usage_json(usage: hub.Usage | None) -> bytes:
    """``json_encode(usage_object(usage))``; for a usage with only counts (nearly every
    stream's) without the dicts built and merged on the way."""
    if usage is None or usage.extensions or usage.reasoning_tokens is not None:
        return json_encode(usage_object(usage))
    read = usage.cache_read_tokens or 0
    write = usage.cache_write_tokens or 0
    fresh = (usage.input_tokens or 0) - read - write  # (max(0, fresh) written out: a call less)
    return json_encode(_PlainUsage(fresh if fresh > 0 else 0, write, read, usage.output_tokens or 0))


def _usage_object(usage: hub.Usage, extra: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic usage object of ``usage``; server tool counts it had to fill are noted
    in ``extra`` (the first of usage_to_raw's hub data)."""
    read = usage.cache_read_tokens or 0
    write = usage.cache_write_tokens or 0
    raw: dict[str, Any] = {
        "input_tokens": max(0, (usage.input_tokens or 0) - read - write),
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "output_tokens": usage.output_tokens or 0,
    }
    ext = usage.extensions
    if not ext:  # (nearly every stream's usage: the nullable fields are null, nothing to fill)
        raw.update(_NULLS)
    else:
        own = ext.get(NAME)
        if own:
            raw.update((k, v) for k, v in own.items() if k not in _USAGE_KNOWN)
        for key in USAGE_NULLABLE:
            raw.setdefault(key, None)
        said = raw["server_tool_use"]
        if type(said) is dict:  # each count is required; 0 is the documented default
            filled = [k for k in _SERVER_TOOL_COUNTS if k not in said]
            if filled:
                raw["server_tool_use"] = {**dict.fromkeys(filled, 0), **said}
                extra["filled"] = filled  # (our decoder leaves them out again)
    if usage.reasoning_tokens is not None:
        details = raw.get("output_tokens_details")
        if type(details) is not dict or details.get("thinking_tokens") != usage.reasoning_tokens:
            raw["output_tokens_details"] = {**(details or {}), "thinking_tokens": usage.reasoning_tokens}
    return raw


def apply_usage_extra(usage: hub.Usage, extra: dict[str, Any] | None) -> hub.Usage:
    """Undo :func:`usage_to_raw`'s losses from the EXTENSION_KEY data it returned."""
    if not extra:
        return usage
    changes: dict[str, Any] = {f: None for f in extra.get("none", ()) if f in usage.__struct_fields__}
    if "total_tokens" in extra:
        changes["total_tokens"] = extra["total_tokens"]
    if extra.get("extensions"):
        changes["extensions"] = {**(usage.extensions or {}), **extra["extensions"]}
    filled = extra.get("filled")
    own = (usage.extensions or {}).get(NAME)
    if type(filled) is list and type(own) is dict and type(own.get("server_tool_use")) is dict:
        counts = {k: v for k, v in own["server_tool_use"].items() if k not in filled}
        extensions = changes.get("extensions", usage.extensions) or {}
        changes["extensions"] = {**extensions, NAME: {**own, "server_tool_use": counts}}
    return msgspec.structs.replace(usage, **changes) if changes else usage


def error_body(error: hub.Error) -> dict[str, Any]:
    """Anthropic's error object for a hub error; its own body is replayed as it was."""
    body = error.body
    if type(body) is dict and body.get("type") == "error" and type(body.get("error")) is dict:
        return body if "request_id" in body else {**body, "request_id": None}
    out: dict[str, Any] = {
        "type": "error",
        "error": {"type": HUB_TO_ERROR.get(error.type, "api_error"), "message": error.message},
        "request_id": None,  # required, nullable: the upstream's request id is not ours to make up
    }
    if ERROR_TO_HUB.get(out["error"]["type"]) != error.type or error.code or error.status or body is not None:
        ours = {"type": error.type, "code": error.code, "status": error.status, "body": body}
        out[EXTENSION_KEY] = {k: v for k, v in ours.items() if v is not None}
    return out


def _type_for_status(status: int | None) -> str:
    if not status or status == 502:  # a bad gateway is an upstream API error, not a cut stream
        return "api_error"
    return hub.error_type_for_status(status)


def error_from_body(body: Any, status: int | None = None) -> hub.Error:
    err = body.get("error") if type(body) is dict else None
    if type(err) is not dict:
        message = body if type(body) is str else "upstream error"
        return hub.Error(message, _type_for_status(status), None, status, body)
    kind = err.get("type")
    hub_type = ERROR_TO_HUB.get(kind) or _type_for_status(status)
    code: str | None = kind if type(kind) is str else None
    ours = body.get(EXTENSION_KEY)
    if type(ours) is dict:
        hub_type = ours.get("type") or hub_type
        code = ours.get("code")
        status = ours.get("status") or status
        body = ours.get("body")
    message = err.get("message")
    return hub.Error(message if type(message) is str else str(err), hub_type, code, status, body)


def event_to_json(event: hub.Event) -> dict[str, Any]:
    """A hub event as plain JSON, to carry it under EXTENSION_KEY (every field, ``None`` ones too)."""
    return hub.event_to_json(event, keep_none=True)


_CARRIED = (hub.BlockStart, hub.Delta, hub.BlockStop, hub.Finish, hub.Extension)


def event_from_json(data: Any) -> hub.Event | None:
    """The carried block, finish or annotation event ``data`` holds, or None."""
    return hub.event_from_json(data, kinds=_CARRIED)


# --------------------------------------------------------------------------- content blocks
# (a streamed block's content_block_start and a whole one, in a response or a continuation)

_TEXT_KEYS = frozenset(("type", "text"))
_WHOLE_TEXT_KEYS = frozenset(("type", "text", "citations"))
_THINKING_KEYS = frozenset(("type", "thinking", "signature", EXTENSION_KEY))
_TOOL_KEYS = frozenset(("type", "id", "name", "input", EXTENSION_KEY))
MESSAGE_KEYS = frozenset(
    ("id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage", EXTENSION_KEY)
)
# Message fields the API reference has as required but nullable: null when the source did not say.
MESSAGE_NULLABLE = ("context_management", "container")


def _extras(block: dict[str, Any], known: frozenset[str]) -> dict[str, Any] | None:
    extras = {k: v for k, v in block.items() if k not in known and k != EXTENSION_KEY}
    return {NAME: extras} if extras else None


def block_start(block: dict[str, Any], index: int, tool_id: str, whole: bool = False) -> tuple[hub.BlockStart, str]:
    """The hub BlockStart for an Anthropic content block, and the text it already holds.

    ``whole`` blocks (non-streaming, pre-populated) hold their final input or content, which
    becomes the text a streamed block would have had; their citations go out as Extensions
    (:func:`citations`), as streamed ones do.
    """
    kind = block.get("type")
    if kind == "text":
        start = hub.BlockStart(index, "text", extensions=_extras(block, _WHOLE_TEXT_KEYS if whole else _TEXT_KEYS))
        text = block.get("text")
        return start, text if type(text) is str else ""
    if kind == "thinking":
        sig = block.get("signature")
        fidelity = {NAME: {"signature": sig}} if sig else None
        text = block.get("thinking")
        return hub.BlockStart(index, "thinking", fidelity=fidelity), text if type(text) is str else ""
    if kind == "redacted_thinking":
        return hub.BlockStart(index, "thinking", fidelity={NAME: {"redacted_data": block.get("data")}}), ""
    if kind == "tool_use":
        start = hub.BlockStart(
            index,
            "tool_call",
            block.get("id") or tool_id,
            block.get("name") or "",
            extensions=_extras(block, _TOOL_KEYS),
        )
        args = block.get("input")
        return start, json_encode(args).decode() if args else ""
    if kind == EXTENSION_KEY:  # a hub block this dialect has no type for, carried by our encoder
        data = block.get(EXTENSION_KEY) or {}
        return hub.BlockStart(
            index,
            data.get("kind") or "native",
            data.get("id"),
            data.get("name"),
            0,
            data.get("mime_type"),
            data.get("fidelity"),
            data.get("extensions"),
        ), ""
    # server_tool_use, *_tool_result, mcp_*, compaction, and block types yet to come
    text = ""
    if whole:
        args, content = block.get("input"), block.get("content")
        text = json_encode(args).decode() if args else content if kind == "compaction" and type(content) is str else ""
    return hub.BlockStart(
        index,
        "native",
        block.get("id") or block.get("tool_use_id"),
        block.get("name") or kind,
        extensions={NAME: block},
    ), text


def citations(block: dict[str, Any], index: int) -> list[hub.Extension]:
    """A whole text block's citations, as the citations_delta Extensions a stream carries."""
    found = block.get("citations") if block.get("type") == "text" else None
    if type(found) is not list:
        return []
    return [hub.Extension(NAME, {"type": "citations_delta", "citation": c}, index) for c in found]
