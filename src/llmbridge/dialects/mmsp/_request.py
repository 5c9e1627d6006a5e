"""MMSP's request body ``{model, messages, config}`` <-> hub.Request."""

from __future__ import annotations

import json
from typing import Any

from ... import hub
from ...errors import RequestError
from ...unievent import from_item_fidelity, to_item_fidelity
from ..base import EXTENSION_KEY
from ._common import NAME

_THINKING_LEVELS = ("none", "low", "medium", "high", "xhigh", "max")
_CONFIG_FIELDS = (
    "max_tokens",
    "temperature",
    "tools",
    "tool_choice",
    "thinking_level",
    "system_prompt",
    "trace_id",
    EXTENSION_KEY,
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
    "service_tier",
    "metadata",
    "extensions",
)


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
    value = item.get(EXTENSION_KEY)
    extra: dict[str, Any] = value if isinstance(value, dict) else {}
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
    extra = config.get(EXTENSION_KEY)
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
            d[EXTENSION_KEY] = {"arguments": part.arguments}
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
            d[EXTENSION_KEY] = extra
        return d
    if isinstance(part, hub.ImagePart):
        d = {"type": "image_url.done", "image_url": _image_url(part)}
        if part.detail:
            d[EXTENSION_KEY] = {"detail": part.detail}
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
            d[EXTENSION_KEY] = extra
        fidelity = to_item_fidelity(part.extensions)
        if fidelity:
            d["fidelity"] = fidelity
        return d
    if isinstance(part, hub.NativePart):
        block = {"kind": "native", "extensions": {part.namespace: part.data}}
        fidelity = {EXTENSION_KEY: {"block": block}}
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
        config[EXTENSION_KEY] = extra
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
