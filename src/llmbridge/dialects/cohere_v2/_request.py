"""cohere-v2 request bodies (``POST /v2/chat``) <-> hub requests."""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import RequestError
from .. import _bridge as br
from ..base import EXTENSION_KEY
from ._common import NAME, PLAN, is_plan

_REQUEST_KNOWN = {
    "model",
    "messages",
    "tools",
    "tool_choice",
    "stream",
    "max_tokens",
    "temperature",
    "p",
    "k",
    "stop_sequences",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "response_format",
    "thinking",
    EXTENSION_KEY,
}


def _content_parts(content: Any, where: str) -> list[hub.Part]:
    if content is None:
        return []
    if type(content) is str:
        return [hub.TextPart(content)] if content else []
    if type(content) is not list:
        raise RequestError("must be a string or a list of content parts", where)
    parts: list[hub.Part] = []
    for n, item in enumerate(content):
        if type(item) is not dict:
            raise RequestError("must be an object", f"{where}[{n}]")
        kind = item.get("type")
        if kind == "text":
            parts.append(hub.TextPart(item.get("text") or ""))
        elif kind == "thinking":
            parts.append(hub.ThinkingPart(item.get("thinking") or ""))
        elif kind == "image_url":
            image = br.obj_at(item, "image_url")
            url = image.get("url") or ""
            if url.startswith("data:") and ";base64," in url:
                media, data = url[5:].split(";base64,", 1)
                parts.append(hub.ImagePart(media_type=media, data=data, detail=image.get("detail")))
            else:
                parts.append(hub.ImagePart(url=url, detail=image.get("detail")))
        else:
            parts.append(hub.NativePart(NAME, item))
    return parts


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    messages = br.request_list(body, "messages", "messages")
    out: list[hub.Message] = []
    for n, m in enumerate(messages):
        where = f"messages[{n}]"
        if type(m) is not dict or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise RequestError("must be an object with role system, user, assistant or tool", where)
        role = m["role"]
        if role == "tool":
            if not m.get("tool_call_id"):
                raise RequestError("a tool message needs tool_call_id", f"{where}.tool_call_id")
            result = hub.ToolResultPart(m["tool_call_id"], _content_parts(m.get("content"), f"{where}.content"))
            out.append(hub.Message("tool", [result]))
            continue
        parts = _content_parts(m.get("content"), f"{where}.content")
        if role == "assistant":
            if m.get("tool_plan"):
                parts.insert(0, hub.ThinkingPart(m["tool_plan"], dict(PLAN)))
            for k, call in enumerate(m.get("tool_calls") or ()):
                fn = call.get("function") if type(call) is dict and type(call.get("function")) is dict else None
                if fn is None or not fn.get("name"):
                    raise RequestError("needs function.name", f"{where}.tool_calls[{k}]")
                call_id = call.get("id") or f"call_{n}_{k}"
                parts.append(hub.ToolCallPart(call_id, fn["name"], fn.get("arguments") or "{}"))
        out.append(hub.Message(role, parts))
    tools = []
    for n, t in enumerate(body.get("tools") or ()):
        fn = t.get("function") if type(t) is dict and type(t.get("function")) is dict else None
        if fn is None or not fn.get("name"):
            raise RequestError("needs function.name", f"tools[{n}]")
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        tools.append(hub.Tool(fn["name"], fn.get("description"), parameters))
    choice = {"REQUIRED": hub.ToolChoice("required"), "NONE": hub.ToolChoice("none")}.get(body.get("tool_choice") or "")
    fmt = body.get("response_format")
    response_format = None
    if type(fmt) is dict:
        if fmt.get("json_schema") is not None:
            response_format = {"type": "json_schema", "schema": fmt["json_schema"]}
        elif fmt.get("type") == "json_object":
            response_format = {"type": "json_object"}
    thinking = body.get("thinking")
    if type(thinking) is dict:
        thinking = {"type": thinking.get("type", "enabled"), "budget_tokens": thinking.get("token_budget")}
        thinking = {k: v for k, v in thinking.items() if v is not None}
    extensions = br.vendor_fields(NAME, body, _REQUEST_KNOWN)
    return hub.Request(
        model=model or body.get("model"),
        messages=out,
        tools=tools,
        tool_choice=choice,
        stream=bool(body.get("stream")),
        max_tokens=body.get("max_tokens"),
        temperature=body.get("temperature"),
        top_p=body.get("p"),
        top_k=body.get("k"),
        stop=list(body.get("stop_sequences") or ()),
        seed=body.get("seed"),
        presence_penalty=body.get("presence_penalty"),
        frequency_penalty=body.get("frequency_penalty"),
        response_format=response_format,
        thinking=thinking,
        extensions=extensions,
    )


def _wire_content(parts: list[hub.Part]) -> list[dict[str, Any]]:
    out = []
    for p in parts:
        if isinstance(p, hub.TextPart):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, hub.ThinkingPart):
            out.append({"type": "thinking", "thinking": p.text})
        elif isinstance(p, hub.ImagePart):
            url = p.url or f"data:{p.media_type or 'image/png'};base64,{p.data or ''}"
            image = {"url": url, **({"detail": p.detail} if p.detail else {})}
            out.append({"type": "image_url", "image_url": image})
        elif isinstance(p, hub.NativePart) and p.namespace == NAME:
            out.append(p.data)
        elif isinstance(p, hub.FilePart):
            out.append({"type": "document", "document": {"data": p.data or p.url or "", "id": p.name}})
    return out


def encode_request(request: hub.Request) -> dict:
    messages: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "tool":
            for p in m.parts:
                if isinstance(p, hub.ToolResultPart):
                    messages.append(
                        {"role": "tool", "tool_call_id": p.tool_call_id, "content": _wire_content(p.content) or ""}
                    )
            continue
        plan = "".join(p.text for p in m.parts if isinstance(p, hub.ThinkingPart) and is_plan(p.fidelity))
        content = [
            p
            for p in m.parts
            if not isinstance(p, hub.ToolCallPart | hub.ToolResultPart)
            and not (isinstance(p, hub.ThinkingPart) and is_plan(p.fidelity))
        ]
        message: dict[str, Any] = {"role": m.role}
        wire = _wire_content(content)
        if m.role == "system" or (wire and all(c["type"] == "text" for c in wire) and len(wire) == 1):
            message["content"] = "".join(c.get("text", "") for c in wire)
        elif wire or m.role != "assistant":
            message["content"] = wire
        calls = [p for p in m.parts if isinstance(p, hub.ToolCallPart)]
        if plan:
            message["tool_plan"] = plan
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
                for c in calls
            ]
        messages.append(message)
    body: dict[str, Any] = {"model": request.model or "", "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "parameters": t.parameters,
                    **({"description": t.description} if t.description else {}),
                },
            }
            for t in request.tools
        ]
    if request.tool_choice is not None and request.tool_choice.mode in ("required", "tool", "none"):
        body["tool_choice"] = "NONE" if request.tool_choice.mode == "none" else "REQUIRED"
    if request.stream:
        body["stream"] = True
    for key, value in (
        ("max_tokens", request.max_tokens),
        ("temperature", request.temperature),
        ("p", request.top_p),
        ("k", request.top_k),
        ("seed", request.seed),
        ("presence_penalty", request.presence_penalty),
        ("frequency_penalty", request.frequency_penalty),
    ):
        if value is not None:
            body[key] = value
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    fmt = request.response_format
    if fmt:
        body["response_format"] = (
            {"type": "json_object", "json_schema": fmt.get("schema")}
            if fmt.get("type") == "json_schema"
            else {"type": "json_object"}
        )
    if request.thinking:
        t = request.thinking
        body["thinking"] = {
            "type": "disabled" if t.get("type") == "disabled" else "enabled",
            **({"token_budget": t["budget_tokens"]} if t.get("budget_tokens") else {}),
        }
    br.put_vendor_fields(body, NAME, request.extensions)
    return body
