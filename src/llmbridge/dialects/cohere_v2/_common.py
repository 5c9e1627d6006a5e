"""Vocabulary shared by the cohere-v2 codecs: finish and usage maps, the tool-plan marker, errors."""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from ..base import EXTENSION_KEY

NAME = "cohere-v2"

FINISH_TO_HUB = {
    "COMPLETE": "end_turn",
    "STOP_SEQUENCE": "stop_sequence",
    "MAX_TOKENS": "max_tokens",
    "TOOL_CALL": "tool_use",
    "ERROR": "error",
    "ERROR_TOXIC": "content_filter",
    "ERROR_LIMIT": "max_tokens",
    "TIMEOUT": "other",
    "USER_CANCEL": "other",
}
FINISH_TO_WIRE = {
    "end_turn": "COMPLETE",
    "stop_sequence": "STOP_SEQUENCE",
    "max_tokens": "MAX_TOKENS",
    "tool_use": "TOOL_CALL",
    "error": "ERROR",
    "content_filter": "ERROR_TOXIC",
}
PLAN = {NAME: {"tool_plan": True}}


def is_plan(fidelity: dict[str, Any] | None) -> bool:
    own = fidelity.get(NAME) if fidelity else None
    return type(own) is dict and own.get("tool_plan") is True


def usage_from_wire(raw: Any) -> hub.Usage:
    if type(raw) is not dict:
        return hub.Usage()
    tokens = br.obj_at(raw, "tokens")
    extra = {k: v for k, v in raw.items() if k not in ("tokens", "cached_tokens")}
    return hub.Usage(
        input_tokens=tokens.get("input_tokens"),
        output_tokens=tokens.get("output_tokens"),
        cache_read_tokens=raw.get("cached_tokens"),
        extensions={NAME: extra} if extra else None,
    )


def usage_to_wire(usage: hub.Usage) -> tuple[dict[str, Any], dict[str, Any] | None]:
    own, others = br.split_own(usage.extensions, NAME)
    wire: dict[str, Any] = dict(own)
    tokens = {
        k: v for k, v in (("input_tokens", usage.input_tokens), ("output_tokens", usage.output_tokens)) if v is not None
    }
    if tokens:
        wire["tokens"] = tokens
    if usage.cache_read_tokens is not None:
        wire["cached_tokens"] = usage.cache_read_tokens
    rest = br.rest_fields(usage, {"input_tokens", "output_tokens", "cache_read_tokens", "extensions"}) or {}
    if others:
        rest["extensions"] = others
    return wire, rest or None


STATUS_FOR = {
    "invalid_request": 400,
    "authentication": 401,
    "permission": 403,
    "not_found": 404,
    "rate_limit": 429,
    "api_error": 500,
    "overloaded": 503,
    "timeout": 504,
}


def error_from_object(status: int, data: dict[str, Any]) -> hub.Error:
    """A cohere-v2 error object (an HTTP error body, or an ``error`` event's data) to the hub."""
    ext = br.obj_at(data, EXTENSION_KEY)
    message = data.get("message") or data.get("error") or f"HTTP {status}"
    kind = "invalid_request" if status == 422 else br.error_type(ext, status)
    return hub.Error(str(message), kind, code=ext.get("code"), status=status, body=data)
