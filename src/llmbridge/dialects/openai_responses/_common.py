"""Names, maps and the ``llmbridge`` side channel shared by the Responses codecs."""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import EXTENSION_KEY

NAME = "openai-responses"

# Event fields that only place an event in the stream; dropped when an event is kept as data.
POSITIONAL = frozenset(("sequence_number", "output_index", "item_id", "content_index", "obfuscation"))

# Hub error type -> the Responses error "type"/"code" word; the reverse map adds OpenAI's other words.
ERROR_WORD = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "request_too_large",
    "unsupported_media_type": "unsupported_media_type",
    "rate_limit": "rate_limit_exceeded",
    "api_error": "server_error",
    "overloaded": "server_overloaded",
    "timeout": "timeout",
    "incomplete_stream": "incomplete_stream",
    "protocol_error": "protocol_error",
}
ERROR_TYPE = {word: kind for kind, word in ERROR_WORD.items()} | {
    "insufficient_quota": "rate_limit",
    "rate_limit_error": "rate_limit",
    "tokens": "rate_limit",
    "requests": "rate_limit",
    "invalid_prompt": "invalid_request",
    "invalid_api_key": "authentication",
    "model_not_found": "not_found",
    "vector_store_timeout": "timeout",
    "api_error": "api_error",
}


def error_type(error: dict, status: int | None = None) -> str:
    """The hub error type for an OpenAI error object."""
    for key in ("type", "code"):
        kind = ERROR_TYPE.get(error.get(key) or "")
        if kind:
            return kind
    return hub.error_type_for_status(status) if status else "api_error"


# Responses' incomplete_details.reason <-> hub finish reasons.
INCOMPLETE_FINISH = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}
FINISH_INCOMPLETE = {"max_tokens": "max_output_tokens", "content_filter": "content_filter"}

# -------------------------------------------------------------------------- hub events as JSON

_CARRIED = (hub.BlockStart, hub.Delta, hub.BlockStop, hub.Usage, hub.Finish, hub.Extension, hub.Error)


def carry(event: hub.Event) -> dict[str, Any]:
    """A hub event as a plain dict for the ``llmbridge`` side channel (class name under ``t``)."""
    return hub.event_to_json(event, tag="t")


def uncarry(data: Any) -> hub.Event | None:
    """The hub event of a :func:`carry` dict; ``None`` for anything else."""
    return hub.event_from_json(data, tag="t", kinds=_CARRIED)


def usage_from(usage: Any) -> hub.Usage | None:
    """Hub usage from a Responses ``usage`` object (input and output totals already include cached/reasoning)."""
    if not isinstance(usage, dict):
        return None
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    written = (usage.get("input_tokens_details") or {}).get("cache_write_tokens")
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    extra: dict[str, Any] = usage.get(EXTENSION_KEY) if isinstance(usage.get(EXTENSION_KEY), dict) else {}
    if extra.get("absent"):  # fields the source did not report, which Responses always has
        absent = set(extra["absent"])
        return hub.Usage(
            **{
                name: None if name in absent else value
                for name, value in (
                    ("input_tokens", usage.get("input_tokens")),
                    ("output_tokens", usage.get("output_tokens")),
                    ("cache_read_tokens", cached),
                    ("reasoning_tokens", reasoning),
                    ("total_tokens", usage.get("total_tokens")),
                    ("cache_write_tokens", extra.get("cache_write_tokens", written)),
                )
            },
            extensions=extra.get("extensions"),
        )
    return hub.Usage(
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=extra.get("cache_write_tokens", written),
        reasoning_tokens=reasoning,
        total_tokens=usage.get("total_tokens"),
        extensions=extra.get("extensions"),
    )


_REPORTED = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "reasoning_tokens",
    "total_tokens",
    "cache_write_tokens",
)


def usage_to(usage: hub.Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    inp, out = usage.input_tokens or 0, usage.output_tokens or 0
    body: dict[str, Any] = {
        "input_tokens": inp,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens or 0,
            "cache_write_tokens": usage.cache_write_tokens or 0,
        },
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.total_tokens if usage.total_tokens is not None else inp + out,
    }
    extra: dict[str, Any] = {}
    absent = [n for n in _REPORTED if getattr(usage, n) is None]
    if absent:
        extra["absent"] = absent
    if usage.extensions:
        extra["extensions"] = usage.extensions
    if extra:
        body[EXTENSION_KEY] = extra
    return body
