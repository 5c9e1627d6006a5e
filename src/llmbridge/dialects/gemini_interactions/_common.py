"""Vocabulary shared by the gemini-interactions codecs: status and usage maps, Google error statuses."""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from ..base import json_encode

NAME = "gemini-interactions"

STATUS_TO_HUB = {
    "completed": "end_turn",
    "requires_action": "tool_use",
    "incomplete": "max_tokens",
    "failed": "error",
    "cancelled": "other",
}
HUB_TO_STATUS = {
    "end_turn": "completed",
    "stop_sequence": "completed",
    "tool_use": "requires_action",
    "max_tokens": "incomplete",
    "error": "failed",
}


_USAGE_KEYS = {
    "total_input_tokens",
    "total_output_tokens",
    "total_thought_tokens",
    "total_cached_tokens",
    "total_tokens",
}


def usage_from_wire(raw: Any) -> hub.Usage:
    raw = raw if type(raw) is dict else {}
    out, thought = raw.get("total_output_tokens"), raw.get("total_thought_tokens")
    output = None if out is None and thought is None else (out or 0) + (thought or 0)
    extra = {k: v for k, v in raw.items() if k not in _USAGE_KEYS}
    return hub.Usage(
        raw.get("total_input_tokens"),
        output,
        raw.get("total_cached_tokens"),
        None,
        thought,
        raw.get("total_tokens"),
        {NAME: extra} if extra else None,
    )


def usage_to_wire(usage: hub.Usage) -> tuple[dict[str, Any], dict[str, Any] | None]:
    own, others = br.split_own(usage.extensions, NAME)
    wire: dict[str, Any] = {}
    if usage.total_tokens is not None:
        wire["total_tokens"] = usage.total_tokens
    if usage.input_tokens is not None:
        wire["total_input_tokens"] = usage.input_tokens
    wire.update(own)
    if usage.cache_read_tokens is not None:
        wire["total_cached_tokens"] = usage.cache_read_tokens
    if usage.output_tokens is not None:
        wire["total_output_tokens"] = max(0, usage.output_tokens - (usage.reasoning_tokens or 0))
    if usage.reasoning_tokens is not None:
        wire["total_thought_tokens"] = usage.reasoning_tokens
    rest = (
        br.rest_fields(
            usage,
            {"input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens", "total_tokens", "extensions"},
        )
        or {}
    )
    if usage.output_tokens is None and usage.reasoning_tokens is not None:
        rest["no_output_tokens"] = True
    if others:
        rest["extensions"] = others
    return wire, rest or None


def arguments_text(arguments: Any) -> str:
    if arguments is None or arguments == {}:
        return ""
    return arguments if type(arguments) is str else json_encode(arguments).decode()


GOOGLE_STATUS = {
    "INVALID_ARGUMENT": "invalid_request",
    "UNAUTHENTICATED": "authentication",
    "PERMISSION_DENIED": "permission",
    "NOT_FOUND": "not_found",
    "RESOURCE_EXHAUSTED": "rate_limit",
    "INTERNAL": "api_error",
    "UNAVAILABLE": "overloaded",
    "DEADLINE_EXCEEDED": "timeout",
}
HUB_TO_GOOGLE = {v: k for k, v in GOOGLE_STATUS.items()}
