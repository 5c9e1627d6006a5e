"""Vocabulary shared by the bedrock-converse codecs: stop-reason, exception and usage maps, and
Converse content blocks <-> hub parts (request messages and whole responses)."""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import RequestError
from .. import _bridge as br
from ..base import EXTENSION_KEY, json_encode

NAME = "bedrock-converse"

STOP_TO_HUB = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
    "model_context_window_exceeded": "max_tokens",
    "malformed_model_output": "error",
    "malformed_tool_use": "error",
}
HUB_TO_STOP = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "content_filter": "content_filtered",
}


EXCEPTION_TO_HUB = {
    "internalServerException": ("api_error", 500),
    "modelStreamErrorException": ("api_error", 424),
    "validationException": ("invalid_request", 400),
    "throttlingException": ("rate_limit", 429),
    "serviceUnavailableException": ("overloaded", 503),
    "accessDeniedException": ("permission", 403),
    "resourceNotFoundException": ("not_found", 404),
    "modelTimeoutException": ("timeout", 408),
    "modelNotReadyException": ("overloaded", 429),
}
HUB_TO_EXCEPTION = {
    "invalid_request": "validationException",
    "rate_limit": "throttlingException",
    "overloaded": "serviceUnavailableException",
    "permission": "accessDeniedException",
    "authentication": "accessDeniedException",
    "not_found": "resourceNotFoundException",
    "timeout": "modelTimeoutException",
    "incomplete_stream": "modelStreamErrorException",
    "protocol_error": "modelStreamErrorException",
}


_USAGE_NATIVE = {
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
    "extensions",
}


def unpadded(obj: Any) -> Any:
    return {k: v for k, v in obj.items() if k not in ("p", EXTENSION_KEY)} if type(obj) is dict else obj


def usage_from_wire(raw: Any, metrics: Any = None) -> hub.Usage:
    raw = raw if type(raw) is dict else {}
    read, write = raw.get("cacheReadInputTokens"), raw.get("cacheWriteInputTokens")
    given = raw.get("inputTokens")
    total_in = None if given is None else given + (read or 0) + (write or 0)
    extra = {
        k: v
        for k, v in raw.items()
        if k not in ("inputTokens", "outputTokens", "totalTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
    }
    if metrics is not None:
        extra["metrics"] = metrics
    return hub.Usage(
        total_in, raw.get("outputTokens"), read, write, None, raw.get("totalTokens"), {NAME: extra} if extra else None
    )


def usage_to_wire(usage: hub.Usage | None) -> tuple[dict[str, Any], Any, dict[str, Any] | None]:
    """(usage, metrics, the rest for the extension key)."""
    usage = usage or hub.Usage()
    read, write = usage.cache_read_tokens, usage.cache_write_tokens
    given = max(0, (usage.input_tokens or 0) - (read or 0) - (write or 0))
    out = {
        "inputTokens": given,
        "outputTokens": usage.output_tokens or 0,
        "totalTokens": usage.total_tokens
        if usage.total_tokens is not None
        else given + (read or 0) + (write or 0) + (usage.output_tokens or 0),
    }
    if read is not None:
        out["cacheReadInputTokens"] = read
    if write is not None:
        out["cacheWriteInputTokens"] = write
    own, others = br.split_own(usage.extensions, NAME)
    metrics = own.get("metrics", {"latencyMs": 0})  # required on the wire
    out.update({k: v for k, v in own.items() if k != "metrics"})
    rest = br.rest_fields(usage, _USAGE_NATIVE) or {}
    if "metrics" not in own:
        rest["no_metrics"] = True
    for field in ("input_tokens", "output_tokens", "total_tokens"):
        if getattr(usage, field) is None:
            rest[f"no_{field}"] = True
    if others:
        rest["extensions"] = others
    return out, metrics, rest or None


def apply_usage_rest(usage: hub.Usage, rest: Any) -> hub.Usage:
    usage = br.apply_usage(usage, rest)
    if type(rest) is dict and rest.get("no_metrics") and usage.extensions and NAME in usage.extensions:
        own = {k: v for k, v in usage.extensions[NAME].items() if k != "metrics"}
        usage.extensions = (
            {**usage.extensions, NAME: own}
            if own
            else ({k: v for k, v in usage.extensions.items() if k != NAME} or None)
        )
    return usage


IMAGE_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}


def parts_from_wire(content: Any, where: str) -> list[hub.Part]:
    if type(content) is not list:
        raise RequestError("must be a list of content blocks", where)
    parts: list[hub.Part] = []
    for n, block in enumerate(content):
        at = f"{where}[{n}]"
        if type(block) is not dict:
            raise RequestError("must be an object", at)
        if "text" in block:
            parts.append(hub.TextPart(block["text"]))
        elif type(block.get("image")) is dict:
            image = block["image"]
            source = br.obj_at(image, "source")
            media = IMAGE_FORMATS.get(image.get("format", ""), f"image/{image.get('format', 'png')}")
            parts.append(
                hub.ImagePart(
                    media_type=media, data=source.get("bytes"), url=(source.get("s3Location") or {}).get("uri")
                )
            )
        elif type(block.get("toolUse")) is dict:
            use = block["toolUse"]
            if not use.get("toolUseId") or not use.get("name"):
                raise RequestError("toolUse needs toolUseId and name", at)
            parts.append(hub.ToolCallPart(use["toolUseId"], use["name"], json_encode(use.get("input", {})).decode()))
        elif type(block.get("toolResult")) is dict:
            result = block["toolResult"]
            inner: list[hub.Part] = []
            for item in result.get("content") or ():
                if type(item) is dict and "json" in item:
                    inner.append(hub.TextPart(json_encode(item["json"]).decode()))
                else:
                    inner += parts_from_wire([item], f"{at}.toolResult.content")
            parts.append(hub.ToolResultPart(result.get("toolUseId") or "", inner, result.get("status") == "error"))
        elif type(block.get("reasoningContent")) is dict:
            reasoning = block["reasoningContent"]
            text = br.obj_at(reasoning, "reasoningText")
            fidelity = {
                k: v
                for k, v in (
                    ("signature", text.get("signature")),
                    ("redactedContent", reasoning.get("redactedContent")),
                )
                if v
            }
            parts.append(hub.ThinkingPart(text.get("text") or "", {NAME: fidelity} if fidelity else None))
        else:
            parts.append(hub.NativePart(NAME, block))
    return parts


def parts_to_wire(parts: list[hub.Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, hub.TextPart):
            out.append({"text": p.text})
        elif isinstance(p, hub.ImagePart):
            fmt = (p.media_type or "image/png").split("/")[-1]
            source = {"bytes": p.data} if p.data else {"s3Location": {"uri": p.url}}
            out.append({"image": {"format": fmt, "source": source}})
        elif isinstance(p, hub.ToolCallPart):
            arguments = br.arguments_object(p.arguments, {EXTENSION_KEY: {"arguments": p.arguments}})
            out.append({"toolUse": {"toolUseId": p.id, "name": p.name, "input": arguments}})
        elif isinstance(p, hub.ToolResultPart):
            result = {"toolUseId": p.tool_call_id, "content": parts_to_wire(p.content) or [{"text": ""}]}
            if p.is_error:
                result["status"] = "error"
            out.append({"toolResult": result})
        elif isinstance(p, hub.ThinkingPart):
            own = (p.fidelity or {}).get(NAME) or {}
            if own.get("redactedContent"):
                out.append({"reasoningContent": {"redactedContent": own["redactedContent"]}})
            else:
                text = {"text": p.text, **({"signature": own["signature"]} if own.get("signature") else {})}
                out.append({"reasoningContent": {"reasoningText": text}})
        elif isinstance(p, hub.NativePart) and p.namespace == NAME:
            out.append(p.data)
    return out
