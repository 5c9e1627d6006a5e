"""gemini-interactions request bodies (``POST /v1beta/interactions``) <-> hub requests."""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import RequestError
from .. import _bridge as br
from ..base import EXTENSION_KEY, json_encode
from ._common import NAME, arguments_text

_REQUEST_KNOWN = {
    "model",
    "input",
    "system_instruction",
    "tools",
    "generation_config",
    "stream",
    "response_format",
    EXTENSION_KEY,
}
_MEDIA = ("image", "audio", "document", "video")


def _content_from_wire(items: Any, where: str) -> list[hub.Part]:
    if type(items) is str:
        return [hub.TextPart(items)]
    if type(items) is not list:
        raise RequestError("must be a string or a list of content blocks", where)
    parts: list[hub.Part] = []
    for n, item in enumerate(items):
        if type(item) is not dict:
            raise RequestError("must be an object", f"{where}[{n}]")
        kind = item.get("type")
        if kind == "text":
            parts.append(hub.TextPart(item.get("text") or ""))
        elif kind == "image":
            parts.append(
                hub.ImagePart(item.get("mime_type"), item.get("data"), item.get("uri"), item.get("resolution"))
            )
        elif kind in _MEDIA:
            parts.append(hub.FilePart(item.get("mime_type"), item.get("data"), item.get("uri")))
        elif kind == "function_result":
            result = item.get("result")
            content = (
                _content_from_wire(result, f"{where}[{n}].result")
                if type(result) is list
                else [hub.TextPart(result if type(result) is str else json_encode(result).decode())]
            )
            parts.append(
                hub.ToolResultPart(item.get("call_id") or "", content, bool(item.get("is_error")), item.get("name"))
            )
        else:
            parts.append(hub.NativePart(NAME, item))
    return parts


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    if type(body) is not dict:
        raise RequestError("request body must be a JSON object")
    steps = body.get("input")
    if steps is None:
        raise RequestError("required", "input")
    messages: list[hub.Message] = []
    if type(body.get("system_instruction")) is str:
        messages.append(hub.Message("system", [hub.TextPart(body["system_instruction"])]))
    if type(steps) is str:
        steps = [{"type": "user_input", "content": [{"type": "text", "text": steps}]}]
    if type(steps) is not list:
        raise RequestError("must be a string or a list of steps", "input")

    def add(role: str, parts: list[hub.Part]) -> None:
        if messages and messages[-1].role == role and role != "system":
            messages[-1].parts += parts
        else:
            messages.append(hub.Message(role, parts))

    for n, step in enumerate(steps):
        where = f"input[{n}]"
        if type(step) is not dict:
            raise RequestError("must be an object", where)
        kind = step.get("type")
        if kind == "user_input" or step.get("role") == "user":
            parts = _content_from_wire(step.get("content") or [], f"{where}.content")
            results = [p for p in parts if isinstance(p, hub.ToolResultPart)]
            if results:
                add("tool", results)
            if len(results) < len(parts) or not parts:
                add("user", [p for p in parts if not isinstance(p, hub.ToolResultPart)])
        elif kind == "model_output" or step.get("role") == "model":
            add("assistant", _content_from_wire(step.get("content") or [], f"{where}.content"))
        elif kind == "thought":
            text = "".join(s.get("text", "") for s in step.get("summary") or () if type(s) is dict)
            fidelity = {NAME: {"signature": step["signature"]}} if step.get("signature") else None
            add("assistant", [hub.ThinkingPart(text, fidelity)])
        elif kind == "function_call":
            if not step.get("name"):
                raise RequestError("a function_call step needs a name", f"{where}.name")
            fidelity = {NAME: {"signature": step["signature"]}} if step.get("signature") else None
            arguments = arguments_text(step.get("arguments")) or "{}"
            add("assistant", [hub.ToolCallPart(step.get("id") or f"call_{n}", step["name"], arguments, fidelity)])
        else:
            add("assistant", [hub.NativePart(NAME, step)])
    tools = []
    for n, t in enumerate(body.get("tools") or ()):
        if type(t) is not dict:
            raise RequestError("must be an object", f"tools[{n}]")
        if t.get("type") == "function":
            if not t.get("name"):
                raise RequestError("a function tool needs a name", f"tools[{n}].name")
            tools.append(
                hub.Tool(t["name"], t.get("description"), t.get("parameters") or {"type": "object", "properties": {}})
            )
        else:
            tools.append(hub.Tool(t.get("type") or "", extensions={NAME: t}))
    config = br.obj_at(body, "generation_config")
    choice = None
    wire_choice = config.get("tool_choice")
    if type(wire_choice) is str:
        choice = hub.ToolChoice({"any": "required", "validated": "auto"}.get(wire_choice, wire_choice))
    elif type(wire_choice) is dict:
        allowed = wire_choice.get("allowed_tools") or {}
        names = allowed.get("tools") or []
        choice = hub.ToolChoice("tool", names[0]) if len(names) == 1 else hub.ToolChoice("required")
    fmt = None
    for entry in body.get("response_format") or ():
        if type(entry) is dict and entry.get("type") == "text" and entry.get("mime_type") == "application/json":
            fmt = {"type": "json_schema", "schema": entry["schema"]} if entry.get("schema") else {"type": "json_object"}
    thinking = {"type": "enabled", "effort": config["thinking_level"]} if config.get("thinking_level") else None
    extensions = br.vendor_fields(NAME, body, _REQUEST_KNOWN)
    extensions.update(
        {
            f"{NAME}:generation_config.{k}": v
            for k, v in config.items()
            if k
            not in (
                "temperature",
                "top_p",
                "top_k",
                "seed",
                "stop_sequences",
                "max_output_tokens",
                "thinking_level",
                "tool_choice",
            )
        }
    )
    return hub.Request(
        model=model or body.get("model"),
        messages=messages,
        tools=tools,
        tool_choice=choice,
        stream=bool(body.get("stream")),
        max_tokens=config.get("max_output_tokens"),
        temperature=config.get("temperature"),
        top_p=config.get("top_p"),
        top_k=config.get("top_k"),
        stop=list(config.get("stop_sequences") or ()),
        seed=config.get("seed"),
        response_format=fmt,
        thinking=thinking,
        extensions=extensions,
    )


def _content_to_wire(parts: list[hub.Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, hub.TextPart):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, hub.ImagePart):
            item = {"type": "image", "mime_type": p.media_type, "data": p.data, "uri": p.url}
            out.append({k: v for k, v in item.items() if v is not None})
        elif isinstance(p, hub.FilePart):
            kind = next((m for m in _MEDIA if (p.media_type or "").startswith(m)), "document")
            item = {"type": kind, "mime_type": p.media_type, "data": p.data, "uri": p.url}
            out.append({k: v for k, v in item.items() if v is not None})
        elif isinstance(p, hub.ToolResultPart):
            text = "".join(c.text for c in p.content if isinstance(c, hub.TextPart))
            result = {"type": "function_result", "call_id": p.tool_call_id, "result": text}
            if p.name:
                result["name"] = p.name
            if p.is_error:
                result["is_error"] = True
            out.append(result)
        elif isinstance(p, hub.NativePart) and p.namespace == NAME:
            out.append(p.data)
    return out


def encode_request(request: hub.Request) -> dict:
    steps: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "system":
            continue
        if m.role in ("user", "tool"):
            steps.append({"type": "user_input", "content": _content_to_wire(m.parts)})
            continue
        content: list[hub.Part] = []
        for p in [*m.parts, None]:  # (None flushes the last text run)
            if p is not None and not isinstance(p, hub.ThinkingPart | hub.ToolCallPart | hub.NativePart):
                content.append(p)
                continue
            if content:
                steps.append({"type": "model_output", "content": _content_to_wire(content)})
                content = []
            own = ((getattr(p, "fidelity", None) or {}).get(NAME) or {}) if p is not None else {}
            if isinstance(p, hub.ThinkingPart):
                step = {"type": "thought", "summary": [{"type": "text", "text": p.text}] if p.text else []}
                steps.append({**step, **({"signature": own["signature"]} if own.get("signature") else {})})
            elif isinstance(p, hub.ToolCallPart):
                arguments = br.arguments_object(p.arguments, {})
                step = {"type": "function_call", "id": p.id, "name": p.name, "arguments": arguments}
                steps.append({**step, **({"signature": own["signature"]} if own.get("signature") else {})})
            elif isinstance(p, hub.NativePart) and p.namespace == NAME:
                steps.append(p.data)
    body: dict[str, Any] = {"model": request.model or "", "input": steps}
    if request.system:
        body["system_instruction"] = request.system
    if request.tools:
        body["tools"] = [
            (t.extensions or {}).get(NAME)
            or {
                "type": "function",
                "name": t.name,
                "parameters": t.parameters,
                **({"description": t.description} if t.description else {}),
            }
            for t in request.tools
        ]
    config = {
        k: v
        for k, v in (
            ("temperature", request.temperature),
            ("top_p", request.top_p),
            ("top_k", request.top_k),
            ("seed", request.seed),
            ("max_output_tokens", request.max_tokens),
        )
        if v is not None
    }
    if request.stop:
        config["stop_sequences"] = list(request.stop)
    if request.thinking and request.thinking.get("effort"):
        config["thinking_level"] = request.thinking["effort"]
    c = request.tool_choice
    if c is not None:
        config["tool_choice"] = (
            {"allowed_tools": {"mode": "any", "tools": [c.name]}}
            if c.mode == "tool"
            else {"required": "any"}.get(c.mode, c.mode)
        )
    for key, value in request.extensions.items():
        if key.startswith(f"{NAME}:generation_config."):
            config.setdefault(key.split(".", 1)[1], value)
    if config:
        body["generation_config"] = config
    fmt = request.response_format
    if fmt:
        entry = {"type": "text", "mime_type": "application/json"}
        if fmt.get("schema") is not None:
            entry["schema"] = fmt["schema"]
        body["response_format"] = [entry]
    if request.stream:
        body["stream"] = True
    br.put_vendor_fields(body, NAME, request.extensions, skip=lambda field: "generation_config." in field)
    return body
