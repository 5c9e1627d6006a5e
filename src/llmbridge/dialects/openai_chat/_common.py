"""Vocabulary shared by the openai-chat codecs: finish reasons, error types, usage."""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import EXTENSION_KEY

NAME = "openai-chat"
# Top-level chunk fields that are content (citations, filter and moderation verdicts): hub Extension
# events.  Other extra top-level fields describe the response: ResponseStart.extensions.
CONTENT_KEYS = frozenset(
    {
        "citations",
        "search_results",
        "images",
        "related_questions",
        "moderation",
        "prompt_filter_results",
    }
)

# OpenAI finish_reason -> hub reason.  "error" is OpenRouter's word (and the gateway spec's).
FINISH_FROM_WIRE = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
    "error": "error",
}

# hub reason -> OpenAI finish_reason; reasons missing here go out as "stop" plus the llmbridge key.
FINISH_TO_WIRE = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "content_filter": "content_filter",
    "error": "error",
}

ERROR_FROM_WIRE = {
    "invalid_request_error": "invalid_request",
    "authentication_error": "authentication",
    "permission_error": "permission",
    "not_found_error": "not_found",
    "rate_limit_error": "rate_limit",
    "insufficient_quota": "rate_limit",
    "tokens": "rate_limit",
    "server_error": "api_error",
    "api_error": "api_error",
    "overloaded_error": "overloaded",
    "timeout": "timeout",
}

ERROR_TO_WIRE = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "invalid_request_error",
    "unsupported_media_type": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "api_error": "server_error",
    "overloaded": "server_error",
    "timeout": "timeout",
    "incomplete_stream": "server_error",
    "protocol_error": "server_error",
}


def error_from_object(obj: Any, status: int | None = None, bridge: Any = None) -> hub.Error:
    """An OpenAI-shaped error object (``{"message", "type", "code"}``) as a hub error."""
    if not isinstance(obj, dict):
        return hub.Error(str(obj) if obj else "unknown error", "api_error", status=status, body=obj)
    message = obj.get("message")
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    code = obj.get("code")
    if status is None:
        for candidate in (obj.get("status_code"), obj.get("status"), code):
            if isinstance(candidate, int) and 100 <= candidate < 600:
                status = candidate
                break
    kind = None
    if isinstance(bridge, dict) and isinstance(bridge.get("type"), str) and bridge["type"] in hub.ERROR_TYPES:
        kind = bridge["type"]
        if isinstance(bridge.get("status"), int):
            status = bridge["status"]
    if kind is None:
        wire_type = obj.get("type")
        kind = ERROR_FROM_WIRE.get(wire_type if isinstance(wire_type, str) else "") or ERROR_FROM_WIRE.get(
            code if isinstance(code, str) else ""
        )
    if kind is None:
        kind = hub.error_type_for_status(status) if status and status != 502 else "api_error"
    return hub.Error(message, kind, None if code is None else str(code), status, obj)


def error_object(error: hub.Error) -> dict[str, Any]:
    """A hub error as an OpenAI error object, with the hub type kept under the llmbridge key."""
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]  # a whole error response body
    obj: dict[str, Any] = {
        "message": error.message,
        "type": ERROR_TO_WIRE.get(error.type, "server_error"),
        "param": body.get("param") if isinstance(body, dict) else None,
        "code": error.code,
    }
    if isinstance(body, dict):  # the vendor's other fields (Groq's failed_generation ...) ride along
        obj.update((k, v) for k, v in body.items() if k not in obj and k != EXTENSION_KEY)
        if body.get("code") is not None and str(body["code"]) == error.code:
            obj["code"] = body["code"]  # OpenRouter's numeric code stays a number
    obj[EXTENSION_KEY] = {"type": error.type, "status": error.status or hub.ERROR_STATUS.get(error.type, 500)}
    return obj


# --------------------------------------------------------------------------- usage

_USAGE_MAIN = ("prompt_tokens", "completion_tokens", "total_tokens")


_USAGE_PLAIN = frozenset(_USAGE_MAIN)


def usage_from_wire(raw: dict[str, Any]) -> hub.Usage:
    """OpenAI usage -> hub usage; fields the hub does not model stay in extensions."""
    if raw.keys() <= _USAGE_PLAIN:  # the three counts only (what the general path makes of them)
        get = raw.get  # (_int written out: three calls fewer)
        prompt, completion, total = get("prompt_tokens"), get("completion_tokens"), get("total_tokens")
        return hub.Usage(  # (positionally: a keyword costs more to bind)
            prompt if type(prompt) is int else None,
            completion if type(completion) is int else None,
            None,
            None,
            None,
            total if type(total) is int else None,
        )
    prompt = _int(raw.get("prompt_tokens"))
    completion = _int(raw.get("completion_tokens"))
    total = _int(raw.get("total_tokens"))
    pdet = raw.get("prompt_tokens_details") or {}
    cdet = raw.get("completion_tokens_details") or {}
    cached = _int(pdet.get("cached_tokens")) if isinstance(pdet, dict) else None
    if cached is None:
        cached = _int(raw.get("cached_tokens", raw.get("prompt_cache_hit_tokens")))
    written = _int(pdet.get("cache_write_tokens")) if isinstance(pdet, dict) else None
    reasoning = _int(cdet.get("reasoning_tokens")) if isinstance(cdet, dict) else None
    # xAI counts reasoning outside completion_tokens (total = prompt + completion + reasoning);
    # the hub counts every generated token as output.
    if (
        isinstance(prompt, int)
        and isinstance(completion, int)
        and isinstance(total, int)
        and reasoning
        and total == prompt + completion + reasoning
        and total != prompt + completion
    ):
        completion += reasoning
    rest: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _USAGE_MAIN or key == EXTENSION_KEY:
            continue
        if key == "prompt_tokens_details" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in ("cached_tokens", "cache_write_tokens")}
        elif key == "completion_tokens_details" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "reasoning_tokens"}
        if value != {}:
            rest[key] = value
    # Counts our encoder wrote as 0 only because OpenAI's usage requires them (usage_to_wire).
    bridge = raw.get(EXTENSION_KEY)
    unknown = bridge.get("none") if isinstance(bridge, dict) else None
    if isinstance(unknown, list):
        prompt = None if "input_tokens" in unknown else prompt
        completion = None if "output_tokens" in unknown else completion
    return hub.Usage(
        input_tokens=prompt,
        output_tokens=completion,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
        total_tokens=total,
        extensions={NAME: rest} if rest else None,
    )


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def usage_to_wire(usage: hub.Usage) -> dict[str, Any]:
    ext = usage.extensions or {}
    out: dict[str, Any] = {k: v for k, v in (ext.get(NAME) or {}).items() if not isinstance(v, dict)}
    prompt = usage.input_tokens or 0
    completion = usage.output_tokens or 0
    out["prompt_tokens"] = prompt
    out["completion_tokens"] = completion
    out["total_tokens"] = usage.total_tokens if usage.total_tokens is not None else prompt + completion
    own = ext.get(NAME) or {}
    pdet = dict(own.get("prompt_tokens_details") or {})
    if usage.cache_read_tokens is not None:
        pdet["cached_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens is not None:
        pdet["cache_write_tokens"] = usage.cache_write_tokens
    if pdet:
        out["prompt_tokens_details"] = pdet
    cdet = dict(own.get("completion_tokens_details") or {})
    if usage.reasoning_tokens is not None:
        cdet["reasoning_tokens"] = usage.reasoning_tokens
    if cdet:
        out["completion_tokens_details"] = cdet
    for key, value in own.items():
        if isinstance(value, dict) and key not in out:
            out[key] = value
    foreign = {k: v for k, v in ext.items() if k != NAME}
    bridge: dict[str, Any] = {"extensions": foreign} if foreign else {}
    # OpenAI's usage requires both counts: one the stream does not know goes out as 0 (what
    # the SDK shows) and is named here, so that our decoder gets "unknown" back, not 0.
    unknown = [name for name in ("input_tokens", "output_tokens") if getattr(usage, name) is None]
    if unknown:
        bridge["none"] = unknown
    if bridge:
        out[EXTENSION_KEY] = bridge
    return out


def usage_foreign(raw: dict[str, Any]) -> dict[str, Any] | None:
    bridge = raw.get(EXTENSION_KEY)
    if isinstance(bridge, dict) and isinstance(bridge.get("extensions"), dict):
        return bridge["extensions"]
    return None


# --------------------------------------------------------------------------- reasoning_details


def reasoning_fidelity(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Fidelity of a thinking block from OpenRouter ``reasoning_details`` fragments.

    The merged fragment (without its text) is kept under "openai-chat"; a signature or
    encrypted payload whose ``format`` names another vendor is also given in that vendor's
    own namespace, so a translation to it carries the thinking natively.
    """
    merged: dict[str, Any] = {}
    for item in items:
        for key, value in item.items():
            if key in ("text", "summary", "index") or value in ("", None):
                continue
            if key in ("signature", "data") and isinstance(value, str) and isinstance(merged.get(key), str):
                merged[key] += value
            else:
                merged[key] = value
    if not merged:
        return None
    out: dict[str, Any] = {NAME: merged}
    fmt = str(merged.get("format") or "")
    if fmt.startswith("anthropic"):
        if merged.get("signature"):
            out["anthropic-messages"] = {"signature": merged["signature"]}
        elif merged.get("type") == "reasoning.encrypted" and merged.get("data"):
            out["anthropic-messages"] = {"redacted_data": merged["data"]}
    elif fmt.startswith("openai-responses") and merged.get("type") == "reasoning.encrypted":
        out["openai-responses"] = {"encrypted_content": merged.get("data"), "id": merged.get("id")}
    elif fmt.startswith("google") and merged.get("signature"):
        out["gemini"] = {"thoughtSignature": merged["signature"]}
    return out


def status_error_type(status: int) -> str:
    """The hub error type for an HTTP error ``status`` with no readable error object."""
    # hub.error_type_for_status(502) answers "incomplete_stream"; an upstream 502 is an api_error
    return "api_error" if status == 502 else hub.error_type_for_status(status)
