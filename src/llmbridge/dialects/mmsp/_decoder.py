"""MMSP's wire: ``POST /v1/stream`` ``{model, messages, config}`` -> ``data: <UniEvent JSON>`` lines.

A stream is the UniEvents of MMSP's stream grammar, one per SSE event, then ``data: [DONE]``.  An
error after the stream started is ``data: {"error": {"type", "message", ...}}`` then
``data: [DONE]``.  Bytes travel as base64.  What MMSP has no field for travels under the
JSON key ``"llmbridge"`` (on the event, the item, the message or the config) or in an
item's ``fidelity`` (see docs/unievent.md).  A non-streaming response is the assembled
message: ``{"role": "assistant", "content_items": [.done items], "usage_metadata",
"finish_reason"}``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec

from ... import hub, sse
from ...errors import IncompleteStreamError, LLMBridgeError, RequestError, ToolCallArgumentParseError
from ...unievent import (
    FINISH_FROM_MMSP,
    Embedding,
    InlineData,
    InlineThinking,
    Item,
    Text,
    Thinking,
    ToolCall,
    UniEvent,
    UniEventView,
    UsageMetadata,
    assemble_message,
    from_item_fidelity,
    to_item_fidelity,
)
from ..base import SSEStreamDecoder, decode_all, json_decode, json_encode

__all__ = [
    "DONE",
    "NAME",
    "PATH",
    "STREAM_CONTENT_TYPE",
    "StreamDecoder",
    "StreamEncoder",
    "decode_error",
    "decode_request",
    "decode_response",
    "encode_error",
    "encode_request",
    "encode_response",
    "endpoint",
    "event_from_dict",
    "event_to_dict",
]

NAME = "mmsp"
STREAM_CONTENT_TYPE = "text/event-stream"
PATH = "/v1/stream"

DONE = b"data: [DONE]\n\n"

# --------------------------------------------------------------------------- errors

# MMSP's error classes (their ``type`` on the wire) and the hub's types.
_HUB_TO_MMSP = {
    "invalid_request": "InvalidRequestError",
    "request_too_large": "InvalidRequestError",
    "unsupported_media_type": "InvalidRequestError",
    "authentication": "AuthenticationError",
}
_MMSP_TO_HUB = {
    "InvalidRequestError": "invalid_request",
    "AuthenticationError": "authentication",
    "UnsupportedParameterError": "invalid_request",
    "UnsupportedOperationError": "invalid_request",
    "EmptyResponseError": "api_error",
    "StreamProtocolError": "protocol_error",
    "ToolCallArgumentParseError": "api_error",
    "UpstreamError": "api_error",
}


def _error_object(error: hub.Error) -> dict[str, Any]:
    body = error.body
    if isinstance(body, dict) and body.get("type") in _MMSP_TO_HUB and body.get("type") == error.code:
        return body  # an MMSP error passing through unchanged
    mmsp_type = _HUB_TO_MMSP.get(error.type, "UpstreamError")
    obj: dict[str, Any] = {"type": mmsp_type, "message": error.message}
    if mmsp_type == "UpstreamError":
        obj["status"] = error.status or hub.ERROR_STATUS.get(error.type, 500)
        obj["error_type"] = error.code or error.type
    extra = {
        k: v
        for k, v in (("type", error.type), ("code", error.code), ("status", error.status), ("body", body))
        if v is not None
    }
    obj["llmbridge"] = extra
    return obj


def _error_from_object(obj: Any, status: int | None = None) -> hub.Error:
    if not isinstance(obj, dict):
        return hub.Error(str(obj), hub.error_type_for_status(status) if status else "api_error", status=status)
    message = str(obj.get("message") or obj.get("type") or "error")
    extra = obj.get("llmbridge")
    if isinstance(extra, dict) and extra.get("type") in hub.ERROR_TYPES:
        return hub.Error(message, extra["type"], extra.get("code"), extra.get("status", status), extra.get("body"))
    mmsp_type = obj.get("type")
    upstream_status = obj.get("status") if type(obj.get("status")) is int else None
    if mmsp_type == "UpstreamError" and upstream_status:
        hub_type = hub.error_type_for_status(upstream_status)
    elif mmsp_type in _MMSP_TO_HUB:
        hub_type = _MMSP_TO_HUB[mmsp_type]
    else:
        hub_type = hub.error_type_for_status(status) if status else "api_error"
    code = mmsp_type if isinstance(mmsp_type, str) else None
    return hub.Error(message, hub_type, code, status or upstream_status, obj)


def encode_error(error: hub.Error) -> tuple[int, dict]:
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status, {"error": _error_object(error)}


def decode_error(status: int, body: bytes) -> hub.Error:
    try:
        data = json_decode(body)
    except msgspec.DecodeError:
        text = body.decode("utf-8", "replace").strip()
        return hub.Error(text[:1000] or f"HTTP {status}", hub.error_type_for_status(status), status=status)
    obj = data.get("error", data) if isinstance(data, dict) else data
    error = _error_from_object(obj, status)
    error.status = status
    return error


def _exception_object(exc: LLMBridgeError) -> dict[str, Any]:
    """The wire error for an exception the UniEvent view raised."""
    if isinstance(exc, ToolCallArgumentParseError):
        return {
            "type": "ToolCallArgumentParseError",
            "message": str(exc),
            "client": "llmbridge",
            "tool_name": exc.name or "",
            "tool_call_id": exc.tool_call_id or "",
            "raw_arguments_length": len(exc.arguments),
            "raw_arguments_preview": exc.arguments[:1000],
        }
    error_type = getattr(exc, "type", None) or "api_error"
    if isinstance(exc, IncompleteStreamError):
        error_type = "incomplete_stream"
    return _error_object(
        hub.Error(str(exc), error_type, status=getattr(exc, "status", None), body=getattr(exc, "body", None))
    )


# --------------------------------------------------------------------------- requests

_THINKING_LEVELS = ("none", "low", "medium", "high", "xhigh", "max")
_CONFIG_FIELDS = (
    "max_tokens",
    "temperature",
    "tools",
    "tool_choice",
    "thinking_level",
    "system_prompt",
    "trace_id",
    "llmbridge",
)
# Fields of hub.Request that MMSP's config has no key for: they travel in config["llmbridge"].
_EXTRA_FIELDS = (
    "top_p",
    "top_k",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "parallel_tool_calls",
    "response_format",
    "thinking",
    "metadata",
    "extensions",
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _data_url(url: str) -> tuple[str | None, str | None]:
    """(media type, base64 data) of a ``data:`` URL, else (None, None)."""
    if not url.startswith("data:") or "," not in url:
        return None, None
    head, data = url[5:].split(",", 1)
    if not head.endswith(";base64"):
        return None, None
    return head[: -len(";base64")] or None, data


def _part_from_item(item: Any, where: str) -> hub.Part | None:
    if not isinstance(item, dict):
        raise RequestError("a content item must be an object", where)
    kind = str(item.get("type", "")).removesuffix(".done")
    extra = item.get("llmbridge") if isinstance(item.get("llmbridge"), dict) else {}
    fidelity, fid_extra = from_item_fidelity(item.get("fidelity") if isinstance(item.get("fidelity"), dict) else None)
    if kind == "text":
        block = (fid_extra or {}).get("block")
        if isinstance(block, dict):
            return _native_part(block)
        return hub.TextPart(_text_field(item, "text", where), extensions=fidelity)
    if kind == "thinking":
        return hub.ThinkingPart(_text_field(item, "thinking", where), fidelity)
    if kind == "tool_call":
        args = item.get("arguments", {})
        if isinstance(args, dict):
            raw = (
                extra.get("arguments")
                if isinstance(extra.get("arguments"), str)
                else json.dumps(args, ensure_ascii=False)
            )
        elif isinstance(args, str):
            raw = args
        else:
            raise RequestError("arguments must be an object", f"{where}.arguments")
        call_id = _text_field(item, "tool_call_id", where)
        return hub.ToolCallPart(call_id, _text_field(item, "name", where), raw, fidelity)
    if kind == "tool_result":
        content: list[hub.Part] = []
        text = item.get("text")
        if isinstance(text, str):
            content.append(hub.TextPart(text))
        for n, image in enumerate(item.get("images") or []):
            if not isinstance(image, str):
                raise RequestError("an image must be a URL string", f"{where}.images[{n}]")
            content.append(_image_part(image))
        return hub.ToolResultPart(
            _text_field(item, "tool_call_id", where), content, bool(extra.get("is_error", False)), extra.get("name")
        )
    if kind == "image_url":
        part = _image_part(_text_field(item, "image_url", where))
        part.detail = extra.get("detail")
        return part
    if kind in ("inline_data", "inline_thinking"):
        mime = item.get("mime_type") or None
        data = item.get("data") or ""
        if not isinstance(data, str):
            raise RequestError("data must be base64 text", f"{where}.data")
        if kind == "inline_thinking":
            marker = {"mmsp": {"type": "inline_thinking", **({"fidelity": item["fidelity"]} if fidelity else {})}}
            return hub.FilePart(mime, data, extensions=marker)
        if mime and mime.startswith("image/") and not extra.get("url"):
            return hub.ImagePart(mime, data)
        return hub.FilePart(mime, data or None, extra.get("url"), extra.get("name"), extensions=fidelity)
    if kind == "embedding":
        return None  # an embedding is output only; nothing to send back
    raise RequestError(f"unknown content item type {item.get('type')!r}", f"{where}.type")


def _text_field(item: dict, key: str, where: str) -> str:
    value = item.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RequestError(f"{key} must be a string", f"{where}.{key}")
    return value


def _image_part(url: str) -> hub.ImagePart:
    media_type, data = _data_url(url)
    if data is not None:
        return hub.ImagePart(media_type, data)
    return hub.ImagePart(url=url)


def _native_part(block: dict) -> hub.NativePart:
    extensions = block.get("stop_extensions") or block.get("extensions") or {}
    namespace = next(iter(extensions), NAME) if isinstance(extensions, dict) else NAME
    data = extensions.get(namespace) if isinstance(extensions, dict) else None
    return hub.NativePart(namespace, data)


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise RequestError("required, a list of messages", "messages")
    config = body.get("config") or {}
    if not isinstance(config, dict):
        raise RequestError("must be an object", "config")
    request = hub.Request(model=body.get("model") or model, stream=True)
    if not isinstance(request.model, str) or not request.model:
        raise RequestError("required, a model name", "model")
    system = config.get("system_prompt")
    if system is not None:
        if not isinstance(system, str):
            raise RequestError("must be a string", "config.system_prompt")
        request.messages.append(hub.Message("system", [hub.TextPart(system)]))
    for m, message in enumerate(messages):
        where = f"messages[{m}]"
        if not isinstance(message, dict):
            raise RequestError("a message must be an object", where)
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise RequestError(f"role must be 'user' or 'assistant', not {role!r}", f"{where}.role")
        items = message.get("content_items")
        if items is None and isinstance(message.get("content"), str):
            items = [{"type": "text.done", "text": message["content"]}]
        if not isinstance(items, list):
            raise RequestError("required, a list of content items", f"{where}.content_items")
        parts = [p for i, item in enumerate(items) if (p := _part_from_item(item, f"{where}.content_items[{i}]"))]
        _append_parts(request.messages, role, parts)
    _decode_config(config, request)
    return request


def _append_parts(messages: list[hub.Message], role: str, parts: list[hub.Part]) -> None:
    """Tool results become ``tool`` messages (one per result), in order with the rest."""
    current: list[hub.Part] = []
    for part in parts:
        if isinstance(part, hub.ToolResultPart):
            if current:
                messages.append(hub.Message(role, current))
                current = []
            messages.append(hub.Message("tool", [part]))
        else:
            current.append(part)
    if current or not parts:
        messages.append(hub.Message(role, current))


def _decode_config(config: dict, request: hub.Request) -> None:
    for key, value in config.items():
        if value is None or key in _CONFIG_FIELDS:
            continue
        request.extensions[f"mmsp:{key}"] = value  # thinking_summary, prompt_caching, fast_mode ...
    max_tokens = config.get("max_tokens")
    if max_tokens is not None:
        if type(max_tokens) is not int or max_tokens < 1:
            raise RequestError("must be a positive integer", "config.max_tokens")
        request.max_tokens = max_tokens
    temperature = config.get("temperature")
    if temperature is not None:
        if not isinstance(temperature, int | float) or isinstance(temperature, bool):
            raise RequestError("must be a number", "config.temperature")
        request.temperature = float(temperature)
    for n, tool in enumerate(config.get("tools") or []):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise RequestError("a tool needs a name", f"config.tools[{n}]")
        params = tool.get("parameters") or {"type": "object", "properties": {}}
        request.tools.append(hub.Tool(tool["name"], tool.get("description"), params))
    choice = config.get("tool_choice")
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise RequestError("must be 'auto', 'none', 'required' or a list of tool names", "config.tool_choice")
        request.tool_choice = hub.ToolChoice(choice)
    elif isinstance(choice, list):
        if len(choice) == 1 and isinstance(choice[0], str):
            request.tool_choice = hub.ToolChoice("tool", choice[0])
        else:
            request.tool_choice = hub.ToolChoice("required")
            request.extensions["mmsp:tool_choice"] = choice
    elif choice is not None:
        raise RequestError("must be 'auto', 'none', 'required' or a list of tool names", "config.tool_choice")
    level = config.get("thinking_level")
    if level is not None:
        if level not in _THINKING_LEVELS:
            raise RequestError(f"must be one of {', '.join(_THINKING_LEVELS)}", "config.thinking_level")
        request.thinking = _thinking_from_level(level)
        if level in ("xhigh", "max"):
            request.extensions["mmsp:thinking_level"] = level
    if config.get("trace_id") is not None:
        request.metadata["trace_id"] = config["trace_id"]
    extra = config.get("llmbridge")
    if extra is not None:
        try:
            _decode_extras(extra, request)
        except (TypeError, ValueError, AttributeError) as exc:
            raise RequestError(f"malformed ({exc})", "config.llmbridge") from None


def _decode_extras(extra: dict, request: hub.Request) -> None:
    """Hub fields MMSP has no key for, as our own encoder wrote them."""
    for key in _EXTRA_FIELDS:
        if key in extra:
            if key in ("metadata", "extensions"):
                getattr(request, key).update(extra[key])
            else:
                setattr(request, key, extra[key])
    for n, tool_extra in (extra.get("tools") or {}).items():
        if int(n) < len(request.tools):
            request.tools[int(n)].strict = tool_extra.get("strict")
            request.tools[int(n)].extensions = tool_extra.get("extensions")


def _item_from_part(part: hub.Part) -> dict[str, Any] | None:
    if isinstance(part, hub.TextPart):
        d: dict[str, Any] = {"type": "text.done", "text": part.text}
        fidelity = to_item_fidelity(part.extensions)
        if fidelity:
            d["fidelity"] = fidelity
        return d
    if isinstance(part, hub.ThinkingPart):
        d = {"type": "thinking.done", "thinking": part.text}
        fidelity = to_item_fidelity(part.fidelity)
        if fidelity:
            d["fidelity"] = fidelity
        return d
    if isinstance(part, hub.ToolCallPart):
        try:
            args = json.loads(part.arguments) if part.arguments.strip() else {}
        except ValueError:
            args = None
        d = {
            "type": "tool_call.done",
            "name": part.name,
            "arguments": args if isinstance(args, dict) else {},
            "tool_call_id": part.id,
        }
        fidelity = to_item_fidelity(part.fidelity)
        if fidelity:
            d["fidelity"] = fidelity
        if not isinstance(args, dict):
            d["llmbridge"] = {"arguments": part.arguments}
        return d
    if isinstance(part, hub.ToolResultPart):
        texts = [p.text for p in part.content if isinstance(p, hub.TextPart)]
        images = [_image_url(p) for p in part.content if isinstance(p, hub.ImagePart)]
        d = {"type": "tool_result.done", "text": "\n".join(texts)}
        if images:
            d["images"] = images
        d["tool_call_id"] = part.tool_call_id
        extra = {k: v for k, v in (("is_error", part.is_error or None), ("name", part.name)) if v is not None}
        if extra:
            d["llmbridge"] = extra
        return d
    if isinstance(part, hub.ImagePart):
        d = {"type": "image_url.done", "image_url": _image_url(part)}
        if part.detail:
            d["llmbridge"] = {"detail": part.detail}
        return d
    if isinstance(part, hub.FilePart):
        marker = (part.extensions or {}).get("mmsp") or {}
        if marker.get("type") == "inline_thinking":
            d = {"type": "inline_thinking.done", "data": part.data or "", "mime_type": part.media_type or ""}
            if marker.get("fidelity"):
                d["fidelity"] = marker["fidelity"]
            return d
        d = {"type": "inline_data.done", "data": part.data or "", "mime_type": part.media_type or ""}
        extra = {k: v for k, v in (("url", part.url), ("name", part.name)) if v is not None}
        if extra:
            d["llmbridge"] = extra
        fidelity = to_item_fidelity(part.extensions)
        if fidelity:
            d["fidelity"] = fidelity
        return d
    if isinstance(part, hub.NativePart):
        block = {"kind": "native", "extensions": {part.namespace: part.data}}
        fidelity = {"llmbridge": {"block": block}}
        return {"type": "text.done", "text": "", "fidelity": fidelity}
    return None


def _image_url(part: hub.ImagePart) -> str:
    if part.url:
        return part.url
    return f"data:{part.media_type or 'application/octet-stream'};base64,{part.data or ''}"


def encode_request(request: hub.Request) -> dict:
    messages: list[dict[str, Any]] = []
    system: list[str] = []
    for message in request.messages:
        if message.role == "system":
            system.append(message.text)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        items = [d for p in message.parts if (d := _item_from_part(p)) is not None]
        # Consecutive tool results share one user message, as MMSP sends them.
        if message.role == "tool" and messages and messages[-1].get("_tool"):
            messages[-1]["content_items"].extend(items)
            continue
        entry: dict[str, Any] = {"role": role, "content_items": items}
        if message.role == "tool":
            entry["_tool"] = True
        messages.append(entry)
    for entry in messages:
        entry.pop("_tool", None)
    config: dict[str, Any] = {}
    if request.max_tokens is not None:
        config["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.tools:
        config["tools"] = [
            {"name": t.name, "description": t.description or "", "parameters": t.parameters} for t in request.tools
        ]
    ext = dict(request.extensions)
    choice = request.tool_choice
    if choice is not None:
        listed = ext.pop("mmsp:tool_choice", None)
        if listed is not None and choice.mode == "required":
            config["tool_choice"] = listed
        elif choice.mode == "tool":
            config["tool_choice"] = [choice.name]
        else:
            config["tool_choice"] = choice.mode
    level = ext.pop("mmsp:thinking_level", None) or _thinking_level(request.thinking)
    if level:
        config["thinking_level"] = level
    if system:
        config["system_prompt"] = "\n\n".join(system)
    metadata = dict(request.metadata)
    if "trace_id" in metadata:
        config["trace_id"] = metadata.pop("trace_id")
    for key in list(ext):
        if key.startswith("mmsp:"):
            config[key[5:]] = ext.pop(key)
    extra: dict[str, Any] = {}
    for key in _EXTRA_FIELDS:
        value = {"metadata": metadata, "extensions": ext}.get(key, getattr(request, key))
        if key == "thinking" and level and value == _thinking_from_level(level):
            continue  # thinking_level says it all
        if value not in (None, [], {}):
            extra[key] = value
    tools_extra = {
        str(n): {"strict": t.strict, "extensions": t.extensions}
        for n, t in enumerate(request.tools)
        if t.strict is not None or t.extensions
    }
    if tools_extra:
        extra["tools"] = tools_extra
    if extra:
        config["llmbridge"] = extra
    return {"model": request.model, "messages": messages, "config": config}


def _thinking_from_level(level: str) -> dict:
    if level == "none":
        return {"type": "disabled"}
    return {"type": "enabled", "effort": level if level in ("low", "medium") else "high"}


def _thinking_level(thinking: dict | None) -> str | None:
    if not thinking:
        return None
    if thinking.get("type") == "disabled":
        return "none"
    effort = thinking.get("effort")
    if effort in _THINKING_LEVELS:
        return effort
    budget = thinking.get("budget_tokens")
    if isinstance(budget, int):
        return "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"
    return "medium"


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """MMSP serves one streaming route; a non-streaming call reads the stream and assembles it.

    MMSP's own clients take a base URL ending in ``/v1`` (as OpenAI's); one without it gets ``/v1`` added.
    """
    headers = {"content-type": "application/json", "accept": STREAM_CONTENT_TYPE}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    base = base_url.rstrip("/")
    return (base + "/stream" if base.endswith("/v1") else base + PATH), headers


# --------------------------------------------------------------------------- streams


_EVENT_HEAD = b'data: {"role":"assistant","event_type":"delta","content_items":[{"type":'
_EVENT_TAIL = b'],"usage_metadata":null,"finish_reason":null,"created_at":'
# A plain fragment's event, as UniEvent.to_dict() encodes it: head + JSON string + tail + created_at + "}".
_FRAGMENT = {
    "text": (_EVENT_HEAD + b'"text.delta","text":', b"}" + _EVENT_TAIL),
    "thinking": (_EVENT_HEAD + b'"thinking.delta","thinking":', b"}" + _EVENT_TAIL),
    "tool_call": (_EVENT_HEAD + b'"tool_call.delta","name":"","arguments":', b',"tool_call_id":""}' + _EVENT_TAIL),
}


class StreamEncoder:
    """Hub events -> ``data: <UniEvent>`` lines, through :class:`UniEventView`.

    A failure ends the MMSP stream with an error event, as MMSP's stream grammar says, and that event
    carries under ``llmbridge`` whatever had not gone out, so our decoder loses nothing: the
    blocks still waiting, the usage and finish reasons so far, and, after tool arguments that
    do not parse, every hub event that followed (the error waits for the end of the stream).

    Terminal rule: ``ResponseEnd`` writes the stop event then ``data: [DONE]``; an ``Error``
    writes the ``{"error": ...}`` event then ``[DONE]``.  Refuses what is not a hub event
    (``TypeError``); after the end it writes nothing.
    """

    def __init__(self, clock: Any = None) -> None:
        self._view = UniEventView(clock)
        self._closed = False
        self._failure: dict | None = None  # the error of a tool call whose arguments do not parse
        self._after: list[dict] = []  # the hub events that came after it

    def encode(self, event: hub.Event) -> bytes:
        if self._closed:
            return b""
        if self._failure is not None:
            self._after.append(event_to_dict(event))
            return self._flush() if type(event) is hub.ResponseEnd else b""
        if type(event) is hub.Delta:
            kind = self._view.plain_fragment(event)
            if kind is not None:  # the hot path: the event's bytes without building it
                if not kind:
                    return b""
                head, tail = _FRAGMENT[kind]
                return b"".join((head, json_encode(event.text), tail, str(self._view.now()).encode(), b"}\n\n"))
        out, exc = self._view.step(event)
        chunks = [b"data: " + json_encode(e.to_dict()) + b"\n\n" for e in out]
        if exc is not None:
            chunks.append(self._fail(event, exc))
        elif type(event) is hub.ResponseEnd:
            chunks.append(DONE)
            self._closed = True
        return b"".join(chunks)

    def _fail(self, event: hub.Event, exc: LLMBridgeError) -> bytes:
        state = self._view.failure_state()
        if type(event) is hub.Error:
            obj = dict(_error_object(event))
            obj["llmbridge"] = {**(obj.get("llmbridge") or {}), **state}
            self._failure = obj
            return self._flush()
        # Only MMSP's grammar failed (tool arguments that do not parse): the source goes on, and
        # what follows travels with the error, which waits for the end.
        obj = _exception_object(exc)
        obj["llmbridge"] = {**(obj.get("llmbridge") or {}), **state, "resume": True, "after": self._after}
        self._failure = obj
        if type(event) is hub.ResponseEnd:
            self._after.append(event_to_dict(event))
            return self._flush()
        return b""

    def _flush(self) -> bytes:
        self._closed = True
        return b"data: " + json_encode({"error": self._failure}) + b"\n\n" + DONE


def event_to_dict(event: hub.Event) -> dict[str, Any]:
    """A hub event as JSON: its fields and ``"event"``, the class name (:func:`llmbridge.hub.event_to_json`)."""
    return hub.event_to_json(event, keep_none=True)


def event_from_dict(d: dict[str, Any]) -> hub.Event:
    """The hub event of an :func:`event_to_dict` dict; raises ``ValueError`` when it holds none."""
    event = hub.event_from_json(d)
    if event is None:
        raise ValueError(f"not a hub event: {str(d)[:80]}")
    return event


class _Open:
    """The group being read: its hub block and what it has carried so far."""

    __slots__ = ("call_id", "fast", "fidelity", "index", "kind", "mime_type", "name", "parts", "rest", "started")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.fast = _FAST.get(kind)  # (delta type, growing field) of a plain string fragment
        self.index = -1
        self.started = False
        self.parts: list[str] = []  # text / thinking / arguments, to check the .done against
        self.fidelity: dict | None = None
        self.rest = b""  # bytes not yet a whole base64 quantum
        self.name = ""
        self.call_id = ""
        self.mime_type = ""


_FAST = {
    "text": ("text.delta", "text"),
    "thinking": ("thinking.delta", "thinking"),
    "tool_call": ("tool_call.delta", "arguments"),
}


class StreamDecoder(SSEStreamDecoder):
    """``data: <UniEvent>`` lines -> hub events; each group becomes one hub block.

    Terminal rule: the stop event then ``data: [DONE]``; an ``{"error": ...}`` event ends
    the stream with a hub ``Error`` (and what rode on it under ``llmbridge``).  Input that
    stops first gives ``truncated`` and ``Error(incomplete_stream)``.  Refuses, recording a
    violation: events that are not UniEvents (``unievent``) or break MMSP's stream grammar
    (``one-item``, ``item-type``, ``interleave``, ``group``, ``group-open``, ``done-content``,
    ``fidelity``, ``tool-call-name``), ``[DONE]`` before the stop event (``stop-missing``),
    a stop event with items or without usage (``stop-items``, ``stop-usage``), events after
    it (``stop-last``).
    """

    dialect = NAME

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._stopped = False
        self._request_id: str | None = None
        self._group: _Open | None = None
        self._blocks = 0
        self._response_id = "mmsp"
        self._calls = 0

    def on_event(self, event: sse.Event) -> None:
        data = event.data
        if data[:1] != "{" and data.strip() == "[DONE]":
            if self._stopped:
                self.finish_stream(self._request_id)
            else:
                self.violation("stop-missing", "[DONE] before the stop event")
                self._start(None)
                self.fail(hub.Error("mmsp stream ended without its stop event", "incomplete_stream"))
            return
        obj = self.parse_json(event)
        if obj is None:
            return
        self.feed_object(obj)

    def feed_object(self, obj: Any) -> None:
        """One decoded ``data:`` JSON value."""
        g = self._group
        if g is not None and g.fast is not None and type(obj) is dict and self._fragment(g, obj):
            return
        if isinstance(obj, dict) and "error" in obj and "event_type" not in obj:
            error = obj["error"]
            extra = error.get("llmbridge") if isinstance(error, dict) else None
            self._start(None, extra.get("response") if isinstance(extra, dict) else None)
            if isinstance(extra, dict):
                try:
                    if self._carried(extra):
                        return  # the stream failed only for MMSP: everything after it came along
                except (KeyError, TypeError, ValueError, msgspec.ValidationError) as exc:
                    self.violation("error", f"malformed llmbridge state on the error ({exc})")
            self.fail(_error_from_object(error))
            return
        try:
            event = UniEvent.from_dict(obj)
        except ValueError as exc:
            self.violation("unievent", str(exc))
            return
        self._start(event)
        if self._stopped:
            self.violation("stop-last", "an event after the stop event")
            return
        if event.event_type == "stop":
            self._stop(event)
            return
        if len(event.content_items) != 1:
            self.violation("one-item", f"a delta event with {len(event.content_items)} items")
        for item in event.content_items:
            self._item(item)

    def _fragment(self, g: _Open, obj: dict) -> bool:
        """The hot path: a plain string fragment of the open group (no fidelity, nothing else)."""
        items = obj.get("content_items")
        if obj.get("event_type") != "delta" or type(items) is not list or len(items) != 1 or "llmbridge" in obj:
            return False
        item = items[0]
        kind, key = g.fast  # type: ignore[misc]
        if type(item) is not dict or item.get("type") != kind or "fidelity" in item:
            return False
        value = item.get(key)
        if type(value) is not str or (kind == "tool_call.delta" and (item.get("name") or item.get("tool_call_id"))):
            return False
        if value:
            if not g.started:
                self._begin(g)
            g.parts.append(value)
            self.emit(hub.Delta(g.index, value))
        return True

    # -- pieces

    def _start(self, event: UniEvent | None, info: Any = None) -> None:
        if self._started:
            return
        self._started = True
        if event is not None:
            info = (event.llmbridge or {}).get("response")
        if isinstance(info, dict):
            start = hub.ResponseStart(
                info.get("id"), info.get("model"), info.get("created"), info.get("request_id"), info.get("extensions")
            )
        else:
            start = hub.ResponseStart()
        if start.id:
            self._response_id = start.id
        self.emit(start)

    def _open(self, item: Item) -> _Open:
        g = self._group = _Open(item.kind)
        if type(item) is ToolCall:
            g.name, g.call_id = item.name, item.tool_call_id
        elif type(item) is InlineData or type(item) is InlineThinking:
            g.mime_type = item.mime_type
        return g

    def _begin(self, g: _Open, extra: dict | None = None) -> None:
        """Emit the group's BlockStart (deferred for text until its first content)."""
        if g.started:
            return
        g.started = True
        g.index = self._blocks
        self._blocks += 1
        kind = g.kind
        extra = extra or {}
        extensions = extra.get("extensions")
        if kind in ("text", "thinking", "tool_call"):
            hub_kind = kind
        elif kind == "inline_thinking":
            hub_kind = "data"
            extensions = hub.merge_dicts(extensions, {"mmsp": {"type": "inline_thinking"}})
        else:
            hub_kind = "data"
        call_id = name = None
        if kind == "tool_call":
            name = g.name
            call_id = g.call_id or self._new_call_id()
        self.emit(
            hub.BlockStart(
                g.index,
                hub_kind,
                call_id or extra.get("id"),
                name,
                mime_type=g.mime_type or None if hub_kind == "data" else None,
                extensions=extensions,
            )
        )

    def _new_call_id(self) -> str:
        self._calls += 1
        return f"call_{self._response_id}_{self._calls}"

    def _item(self, item: Item) -> None:
        g = self._group
        kind = item.kind
        if g is not None and g.kind != kind:
            self.violation("interleave", f"{item.type} inside an open {g.kind} group")
            self._close(g, g.fidelity)
            g = None
        if item.done:
            if g is None:
                if kind in ("image_url", "tool_result"):
                    self.violation("item-type", f"{item.type} in a response")
                    return
                self.violation("group", f"{item.type} without its .delta fragments")
                g = self._open(item)
                self._content(g, _whole_fragment(item))
            self._done(g, item)
            return
        if kind in ("image_url", "tool_result"):
            self.violation("item-type", f"{item.type} in a response")
            return
        if g is None:
            g = self._open(item)
            if type(item) is ToolCall and not item.name:
                self.violation("tool-call-name", "first tool_call.delta without a name")
        elif type(item) is ToolCall and (item.name or item.tool_call_id):
            self.violation("tool-call-name", "name or tool_call_id on a later tool_call fragment")
        if item.fidelity is not None:
            if g.fidelity is not None and g.fidelity != item.fidelity:
                self.violation("fidelity", "a second, different fidelity in one group")
            g.fidelity = item.fidelity
        self._content(g, item)

    def _content(self, g: _Open, item: Item) -> None:
        kind = type(item)
        if kind is Text or kind is Thinking:
            text = item.text if kind is Text else item.thinking  # type: ignore[attr-defined]
            g.parts.append(text)
            if text:
                self._begin(g)
                self.emit(hub.Delta(g.index, text))
            elif kind is Thinking:
                self._begin(g)
        elif kind is ToolCall:
            self._begin(g)
            if item.arguments:  # type: ignore[attr-defined]
                g.parts.append(item.arguments)  # type: ignore[attr-defined]
                self.emit(hub.Delta(g.index, item.arguments))  # type: ignore[attr-defined]
        elif kind is InlineData or kind is InlineThinking:
            self._begin(g)
            data = g.rest + item.data  # type: ignore[attr-defined]
            cut = len(data) - len(data) % 3
            g.rest = data[cut:]
            if cut:
                self.emit(hub.Delta(g.index, base64.b64encode(data[:cut]).decode()))
        elif kind is Embedding:
            g.parts.append(json.dumps(item.embedding))  # type: ignore[attr-defined]

    def _done(self, g: _Open, item: Item) -> None:
        fidelity = item.fidelity if item.fidelity is not None else g.fidelity
        if g.fidelity is not None and item.fidelity != g.fidelity:
            self.violation("fidelity", f"{item.type} fidelity differs from its fragment's")
        kind = type(item)
        if kind is Text and g.parts and item.text != "".join(g.parts):  # type: ignore[attr-defined]
            self.violation("done-content", "text.done differs from its fragments")
        elif kind is Thinking and item.thinking != "".join(g.parts):  # type: ignore[attr-defined]
            self.violation("done-content", "thinking.done differs from its fragments")
        elif kind is ToolCall:
            raw = "".join(g.parts)
            try:
                same = (json.loads(raw) if raw.strip() else {}) == item.arguments  # type: ignore[attr-defined]
            except ValueError:
                same = False
            if not same:
                self.violation("done-content", "tool_call.done arguments differ from its fragments")
        elif kind is Embedding:
            self._group = None
            index = self._blocks
            self._blocks += 1
            ext = {NAME: {"type": "embedding", "embedding": item.embedding}}  # type: ignore[attr-defined]
            self.emit(hub.BlockStart(index, "native", name="embedding", extensions=ext))
            self.emit(hub.BlockStop(index))
            return
        self._close(g, fidelity)

    def _close(self, g: _Open, fidelity: dict | None) -> None:
        self._group = None
        hub_fidelity, extra = from_item_fidelity(fidelity)
        extra = extra or {}
        block = extra.get("block")
        if isinstance(block, dict) and g.kind == "text" and not g.started:
            self._raw_block(block)
            return
        was_started = g.started
        self._begin(g, extra)
        if g.rest:
            self.emit(hub.Delta(g.index, base64.b64encode(g.rest).decode()))
        for a in extra.get("annotations") or ():
            if isinstance(a, dict):
                self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), g.index))
        stop_ext = extra.get("stop_extensions")
        if was_started and extra.get("extensions"):
            stop_ext = hub.merge_dicts(extra["extensions"], stop_ext)  # arrived after BlockStart went out
        self.emit(hub.BlockStop(g.index, hub_fidelity, stop_ext))

    def _raw_block(self, block: dict, close: bool = True) -> int:
        """A block carried whole (in an empty text item, or beside an error); its new index."""
        index = self._blocks
        self._blocks += 1
        self.emit(
            hub.BlockStart(
                index,
                str(block.get("kind", "native")),
                block.get("id"),
                block.get("name"),
                int(block.get("choice", 0)),
                block.get("mime_type"),
                block.get("fidelity"),
                block.get("extensions"),
            )
        )
        if block.get("text"):
            self.emit(hub.Delta(index, block["text"]))
        for a in block.get("annotations") or ():
            if isinstance(a, dict):
                self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), index))
        if close:
            self.emit(hub.BlockStop(index, None, block.get("stop_extensions")))
        return index

    def _carried(self, extra: dict) -> bool:
        """What our encoder carried beside its error; True when the source stream did not fail."""
        resume = bool(extra.get("resume"))
        indices = {int(k): v for k, v in (extra.get("ordinals") or {}).items()}
        if resume and self._group is not None:
            failed = extra.get("failed")
            if failed is not None and self._group.started:
                indices[int(failed)] = self._group.index
            self._close(self._group, self._group.fidelity)  # the call whose arguments MMSP could not parse
        live = extra.get("live")
        if isinstance(live, dict):
            g = self._group
            if live.get("sent") and g is not None and g.started:  # its fragments are in: only its notes
                indices[int(live["index"])] = g.index
                for a in live.get("annotations") or ():
                    self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), g.index))
            else:
                indices[int(live["index"])] = self._raw_block(live, close=False)
        for raw in extra.get("pending") or ():
            indices[int(raw["index"])] = self._raw_block(raw, close=bool(raw.get("closed")))
        for a in extra.get("annotations") or ():
            self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), a.get("index")))
        if extra.get("usage"):
            self.emit(msgspec.convert(extra["usage"], hub.Usage))
        for f in extra.get("finishes") or ():
            self.emit(hub.Finish(f["reason"], int(f.get("choice", 0)), f.get("raw"), f.get("stop_sequence")))
        if not resume:
            return False
        for d in extra.get("after") or ():
            event = event_from_dict(d)
            kind = type(event)
            if kind is hub.BlockStart:
                indices[event.index] = self._blocks
                event.index = self._blocks
                self._blocks += 1
            elif kind is hub.Delta or kind is hub.BlockStop or (kind is hub.Extension and event.index is not None):
                event.index = indices.get(event.index, event.index)
            elif kind is hub.ResponseEnd:
                self.finish_stream(event.request_id)
                return True
            self.emit(event)
            if kind is hub.Error:
                self.finish_stream()
                return True
        self.fail(hub.Error("mmsp stream ended without its stop event", "incomplete_stream"))
        return True

    def _stop(self, event: UniEvent) -> None:
        if event.content_items:
            self.violation("stop-items", "the stop event carries items")
        if self._group is not None:
            self.violation("group-open", f"stop while a {self._group.kind} group is open")
            self._close(self._group, self._group.fidelity)
        extra = event.llmbridge or {}
        for a in extra.get("annotations") or ():
            if isinstance(a, dict):
                self.emit(hub.Extension(a.get("namespace", NAME), a.get("data"), a.get("index")))
        usage_meta = event.usage_metadata
        if usage_meta is None:
            self.violation("stop-usage", "the stop event has no usage_metadata")
            usage_meta = UsageMetadata()
        usage = usage_meta.to_hub()
        details = extra.get("usage")
        if isinstance(details, dict):
            usage.cache_write_tokens = details.get("cache_write_tokens")
            usage.total_tokens = details.get("total_tokens")
            usage.extensions = details.get("extensions")
        if any(getattr(usage, f) is not None for f in usage.__struct_fields__):
            self.emit(usage)
        finish = extra.get("finish")
        reason = event.finish_reason
        if "finish" in extra and finish is None:
            pass  # the source had no finish reason
        elif isinstance(finish, dict) and finish.get("reason") in hub.FINISH_REASONS:
            self.emit(hub.Finish(finish["reason"], 0, finish.get("raw"), finish.get("stop_sequence")))
        elif reason in FINISH_FROM_MMSP:
            self.emit(hub.Finish(FINISH_FROM_MMSP[reason], 0, reason))
        else:
            self.violation("stop-finish", f"finish_reason {reason!r} is not stop, length, tool_call or unknown")
            self.emit(hub.Finish("other", 0, reason if isinstance(reason, str) else None))
        for f in extra.get("finishes") or ():
            if isinstance(f, dict) and f.get("reason") in hub.FINISH_REASONS:
                self.emit(hub.Finish(f["reason"], int(f.get("choice", 0)), f.get("raw"), f.get("stop_sequence")))
        self._request_id = extra.get("request_id")
        self._stopped = True


def _whole_fragment(item: Item) -> Item:
    """The delta fragment equivalent to a ``.done`` item (for a group sent without fragments)."""
    if type(item) is Text:
        return Text(item.text)
    if type(item) is Thinking:
        return Thinking(item.thinking)
    if type(item) is ToolCall:
        return ToolCall(item.name, json.dumps(item.arguments, ensure_ascii=False), item.tool_call_id)
    if type(item) is InlineData or type(item) is InlineThinking:
        return type(item)(item.data, item.mime_type)
    return item


# --------------------------------------------------------------------------- whole responses


def decode_response(body: dict) -> list[hub.Event]:
    """An assembled message (or ``{"error": ...}``) as a hub stream."""
    decoder = StreamDecoder()
    if isinstance(body, dict) and "error" in body and "content_items" not in body:
        decoder.feed_object(body)
        return decoder.feed(b"") + decoder.close()
    try:
        message = body if isinstance(body, dict) else {}
        items = message.get("content_items") or []
        created = message.get("created_at")
        first = True
        for item in items:
            fragment = _whole_fragment_dict(item)
            event = {
                "role": "assistant",
                "event_type": "delta",
                "content_items": [fragment],
                "usage_metadata": None,
                "finish_reason": None,
            }
            if first and isinstance(message.get("llmbridge"), dict) and "response" in message["llmbridge"]:
                event["llmbridge"] = {"response": message["llmbridge"]["response"]}
            first = False
            decoder.feed_object(event)
            decoder.feed_object({**event, "content_items": [item], "llmbridge": None})
        stop = {
            "role": "assistant",
            "event_type": "stop",
            "content_items": [],
            "usage_metadata": message.get("usage_metadata"),
            "finish_reason": message.get("finish_reason"),
            "created_at": created,
            "llmbridge": message.get("llmbridge"),
        }
        decoder.feed_object(stop)
    except (TypeError, AttributeError) as exc:
        decoder.violation("response", f"malformed message ({exc})")
    return decode_all(decoder, DONE)


def _whole_fragment_dict(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    d = dict(item)
    kind = str(d.get("type", "")).removesuffix(".done")
    d["type"] = f"{kind}.delta"
    if kind == "tool_call":
        d["arguments"] = json.dumps(d.get("arguments") or {}, ensure_ascii=False)
    return d


def encode_response(response: hub.Response) -> dict:
    """The assembled message; an error (or unparsable tool arguments) as ``{"error": ...}``."""
    view = UniEventView(lambda: (response.created or 0) * 1000)
    events: list[UniEvent] = []
    for event in hub.response_events(response):
        out, exc = view.step(event)
        events.extend(out)
        if exc is not None:
            obj = _error_object(event) if type(event) is hub.Error else _exception_object(exc)
            return {"error": obj}
    return assemble_message(events).to_dict()
