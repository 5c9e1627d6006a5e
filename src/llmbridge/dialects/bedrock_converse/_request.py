"""bedrock-converse request bodies (``/model/{id}/converse[-stream]``) <-> hub requests."""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import RequestError
from .. import _bridge as br
from ..base import EXTENSION_KEY
from ._common import NAME, parts_from_wire, parts_to_wire

_REQUEST_KNOWN = {
    "modelId",
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "additionalModelRequestFields",
    EXTENSION_KEY,
}


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    messages = br.request_list(body, "messages", "messages")
    out = [
        hub.Message("system", [hub.TextPart(s["text"])])
        for s in body.get("system") or ()
        if type(s) is dict and "text" in s
    ]
    for n, m in enumerate(messages):
        if type(m) is not dict or m.get("role") not in ("user", "assistant"):
            raise RequestError("must be an object with role user or assistant", f"messages[{n}]")
        parts = parts_from_wire(m.get("content"), f"messages[{n}].content")
        results = [p for p in parts if isinstance(p, hub.ToolResultPart)]
        others = [p for p in parts if not isinstance(p, hub.ToolResultPart)]
        if results:
            out.append(hub.Message("tool", results))
        if others or not results:
            out.append(hub.Message(m["role"], others))
    tools = []
    tool_config = br.obj_at(body, "toolConfig")
    for n, t in enumerate(tool_config.get("tools") or ()):
        spec = t.get("toolSpec") if type(t) is dict else None
        if type(spec) is not dict or not spec.get("name"):
            raise RequestError("needs toolSpec.name", f"toolConfig.tools[{n}]")
        schema = (spec.get("inputSchema") or {}).get("json") or {"type": "object", "properties": {}}
        tools.append(hub.Tool(spec["name"], spec.get("description"), schema))
    choice = None
    wire_choice = tool_config.get("toolChoice")
    if type(wire_choice) is dict:
        if "any" in wire_choice:
            choice = hub.ToolChoice("required")
        elif "tool" in wire_choice:
            choice = hub.ToolChoice("tool", (wire_choice["tool"] or {}).get("name"))
        elif "auto" in wire_choice:
            choice = hub.ToolChoice("auto")
    config = br.obj_at(body, "inferenceConfig")
    extra = dict(body.get("additionalModelRequestFields") or {})
    thinking = extra.pop("thinking", None) if type(extra.get("thinking")) is dict else None
    top_k = extra.pop("top_k", None)
    extensions = br.vendor_fields(NAME, body, _REQUEST_KNOWN)
    if extra:
        extensions[f"{NAME}:additionalModelRequestFields"] = extra
    return hub.Request(
        model=model or body.get("modelId"),
        messages=out,
        tools=tools,
        tool_choice=choice,
        max_tokens=config.get("maxTokens"),
        temperature=config.get("temperature"),
        top_p=config.get("topP"),
        top_k=top_k,
        stop=list(config.get("stopSequences") or ()),
        thinking=thinking,
        extensions=extensions,
    )


def encode_request(request: hub.Request) -> dict:
    body: dict[str, Any] = {"messages": []}
    system = [{"text": m.text} for m in request.messages if m.role == "system"]
    if system:
        body["system"] = system
    for m in request.messages:
        if m.role == "system":
            continue
        role = "user" if m.role == "tool" else m.role
        content = parts_to_wire(m.parts)
        if body["messages"] and body["messages"][-1]["role"] == role:
            body["messages"][-1]["content"] += content  # Bedrock wants roles to alternate
        else:
            body["messages"].append({"role": role, "content": content})
    config = {
        k: v
        for k, v in (("maxTokens", request.max_tokens), ("temperature", request.temperature), ("topP", request.top_p))
        if v is not None
    }
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if config:
        body["inferenceConfig"] = config
    if request.tools:
        tool_config: dict[str, Any] = {
            "tools": [
                {
                    "toolSpec": {
                        "name": t.name,
                        "inputSchema": {"json": t.parameters},
                        **({"description": t.description} if t.description else {}),
                    }
                }
                for t in request.tools
            ]
        }
        c = request.tool_choice
        if c is not None and c.mode != "none":
            tool_config["toolChoice"] = (
                {"any": {}}
                if c.mode == "required"
                else {"tool": {"name": c.name}}
                if c.mode == "tool"
                else {"auto": {}}
            )
        body["toolConfig"] = tool_config
    extra = dict(request.extensions.get(f"{NAME}:additionalModelRequestFields") or {})
    if request.thinking:
        extra["thinking"] = request.thinking
    if request.top_k is not None:
        extra["top_k"] = request.top_k
    if extra:
        body["additionalModelRequestFields"] = extra
    br.put_vendor_fields(body, NAME, request.extensions, skip=lambda field: field == "additionalModelRequestFields")
    return body
