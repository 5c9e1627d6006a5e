"""The llm-stream request envelope (``application/llm-request+json``) <-> hub.Request."""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import json_encode
from ._common import VERSION, bad_field, expect, opt_str

ROLES = ("system", "user", "assistant", "tool")
TOOL_CHOICE_MODES = ("auto", "none", "required")
NUMBER = (int, float)

# Generation parameters: the draft's own names, with the types they must have.
PARAMETERS: dict[str, tuple[type, ...]] = {
    "temperature": NUMBER,
    "top_p": NUMBER,
    "top_k": (int,),
    "max_tokens": (int,),
    "seed": (int,),
    "presence_penalty": NUMBER,
    "frequency_penalty": NUMBER,
}
# Hub request fields the draft does not name: carried in `extensions` under these keys.
REQUEST_EXTENSIONS = {
    "llmbridge:n": "n",
    "llmbridge:parallel_tool_calls": "parallel_tool_calls",
    "llmbridge:response_format": "response_format",
    "llmbridge:thinking": "thinking",
    "llmbridge:service_tier": "service_tier",
}


def _decode_part(part: Any, field: str) -> hub.Part | None:
    expect(part, (dict,), field, "an object")
    kind = part.get("type")
    expect(kind, (str,), f"{field}.type", "a string")
    ext = part.get("llmbridge:extensions")
    ext = expect(ext, (dict,), f"{field}.llmbridge:extensions", "an object") if ext is not None else None
    if kind == "text":
        return hub.TextPart(expect(part.get("text"), (str,), f"{field}.text", "a string"), ext)
    if kind in ("image", "audio", "file"):
        media_type = opt_str(part, "media_type", field)
        data = opt_str(part, "data", field)
        url = opt_str(part, "url", field)
        if (data is None) == (url is None):
            raise bad_field(field, f"a {kind} part needs exactly one of 'data' (base64) and 'url'")
        if data is not None and media_type is None:
            raise bad_field(f"{field}.media_type", f"is required with 'data' in a {kind} part")
        if kind == "image":
            return hub.ImagePart(media_type, data, url, opt_str(part, "llmbridge:detail", field), ext)
        return hub.FilePart(media_type, data, url, opt_str(part, "name", field), ext)
    if ":" in kind:
        return None  # another vendor's part type: ignored, as extensions are (§4.7)
    raise bad_field(f"{field}.type", f"unknown content part type {kind!r}")


def _decode_content(content: Any, field: str) -> list[hub.Part]:
    if content is None:
        return []
    if type(content) is str:
        return [hub.TextPart(content)]
    expect(content, (list,), field, "a string, an array of parts or null")
    parts = [_decode_part(p, f"{field}[{i}]") for i, p in enumerate(content)]
    return [p for p in parts if p is not None]


def decode_tool_call(call: Any, field: str) -> hub.ToolCallPart:
    expect(call, (dict,), field, "an object")
    call_id = expect(call.get("id"), (str,), f"{field}.id", "a string")
    name = expect(call.get("name"), (str,), f"{field}.name", "a string")
    arguments = call.get("arguments", "{}")
    if type(arguments) is dict:  # lenient: an object where the draft wants its JSON text
        arguments = json_encode(arguments).decode()
    expect(arguments, (str,), f"{field}.arguments", "a JSON string")
    fidelity = call.get("llmbridge:fidelity")
    return hub.ToolCallPart(call_id, name, arguments, fidelity if type(fidelity) is dict else None)


def _decode_extra_parts(parts: list[hub.Part], extra: Any, field: str) -> list[hub.Part]:
    """Insert the `llmbridge:parts` (thinking, native) at the positions they were taken from."""
    expect(extra, (list,), field, "an array")
    for i, item in enumerate(extra):
        where = f"{field}[{i}]"
        expect(item, (dict,), where, "an object")
        at = expect(item.get("at", len(parts)), (int,), f"{where}.at", "an integer")
        kind = item.get("type")
        if kind == "thinking":
            fidelity = item.get("fidelity")
            part: hub.Part = hub.ThinkingPart(
                expect(item.get("text", ""), (str,), f"{where}.text", "a string"),
                expect(fidelity, (dict,), f"{where}.fidelity", "an object") if fidelity is not None else None,
            )
        elif kind == "native":
            part = hub.NativePart(
                expect(item.get("namespace"), (str,), f"{where}.namespace", "a string"), item.get("data")
            )
        else:
            raise bad_field(f"{where}.type", f"unknown extension part type {kind!r}")
        parts.insert(at, part)
    return parts


def _decode_message(msg: Any, field: str) -> hub.Message:
    expect(msg, (dict,), field, "an object")
    role = msg.get("role")
    if role not in ROLES:
        raise bad_field(f"{field}.role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    name = opt_str(msg, "llmbridge:name", field)
    content = msg.get("content")
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if type(call_id) is not str or not call_id:
            raise bad_field(f"{field}.tool_call_id", "is required in a tool message (the id of the tool.call)")
        if content is None:
            raise bad_field(f"{field}.content", "is required in a tool message")
        result = hub.ToolResultPart(
            call_id,
            _decode_content(content, f"{field}.content"),
            expect(msg.get("llmbridge:is_error", False), (bool,), f"{field}.llmbridge:is_error", "a boolean"),
            opt_str(msg, "llmbridge:tool_name", field),
        )
        return hub.Message("tool", [result], name)
    if content is None and role != "assistant":
        raise bad_field(f"{field}.content", f"is required in a {role} message")
    parts = _decode_content(content, f"{field}.content")
    calls = msg.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise bad_field(f"{field}.tool_calls", "only assistant messages have tool calls")
        expect(calls, (list,), f"{field}.tool_calls", "an array")
        parts += [decode_tool_call(c, f"{field}.tool_calls[{i}]") for i, c in enumerate(calls)]
    elif content is None:
        raise bad_field(f"{field}.content", "may be null only when the message has tool_calls")
    if "llmbridge:parts" in msg:
        parts = _decode_extra_parts(parts, msg["llmbridge:parts"], f"{field}.llmbridge:parts")
    return hub.Message(role, parts, name)


def _decode_tool(tool: Any, field: str) -> hub.Tool:
    expect(tool, (dict,), field, "an object")
    name = tool.get("name")
    if type(name) is not str or not name:
        raise bad_field(f"{field}.name", "is required (a non-empty string)")
    out = hub.Tool(name, opt_str(tool, "description", field))
    if tool.get("parameters") is not None:
        out.parameters = expect(tool["parameters"], (dict,), f"{field}.parameters", "a JSON Schema object")
    strict = tool.get("llmbridge:strict")
    out.strict = expect(strict, (bool,), f"{field}.llmbridge:strict", "a boolean") if strict is not None else None
    ext = tool.get("llmbridge:extensions")
    out.extensions = expect(ext, (dict,), f"{field}.llmbridge:extensions", "an object") if ext is not None else None
    return out


def _decode_tool_choice(choice: Any) -> hub.ToolChoice:
    if type(choice) is str:
        if choice not in TOOL_CHOICE_MODES:
            raise bad_field("tool_choice", f'must be one of {", ".join(TOOL_CHOICE_MODES)} or {{"name": ...}}')
        return hub.ToolChoice(choice)
    expect(choice, (dict,), "tool_choice", 'a string or {"name": "<tool>"}')
    name = choice.get("name")
    if type(name) is not str or not name:
        raise bad_field("tool_choice.name", "is required (the tool to call)")
    return hub.ToolChoice("tool", name)


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    """An ``application/llm-request+json`` body to the hub; :class:`RequestError` names the bad field."""
    expect(body, (dict,), "body", "a JSON object")
    version = body.get("v", body.get("version"))
    if version is not None:
        expect(version, (str,), "v", "a string")
        if version.split(".", 1)[0] != "1":
            raise bad_field("v", f"unsupported version {version!r} (this implementation speaks 1.x)")
    req = hub.Request()
    req.model = opt_str(body, "model", "body") or model
    stream = body.get("stream", True)
    req.stream = expect(stream, (bool,), "stream", "a boolean")
    messages = body.get("messages")
    expect(messages, (list,), "messages", "an array of messages")
    if not messages:
        raise bad_field("messages", "must hold at least one message")
    for i, raw in enumerate(messages):
        message = _decode_message(raw, f"messages[{i}]")
        if type(raw) is dict and raw.get("llmbridge:continue") is True and req.messages:
            req.messages[-1].parts.extend(message.parts)  # one hub message split over several
        else:
            role = raw.get("llmbridge:role") if type(raw) is dict else None
            if role in ROLES and role != message.role:
                message.role = role
            req.messages.append(message)
    tools = body.get("tools")
    if tools is not None:
        expect(tools, (list,), "tools", "an array")
        req.tools = [_decode_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        req.tool_choice = _decode_tool_choice(body["tool_choice"])
    params = body.get("parameters")
    if params is not None:
        expect(params, (dict,), "parameters", "an object")
        for key, types in PARAMETERS.items():
            if params.get(key) is not None:
                what = "an integer" if types == (int,) else "a number"
                setattr(req, key, expect(params[key], types, f"parameters.{key}", what))
        stop = params.get("stop")
        if type(stop) is str:
            req.stop = [stop]
        elif stop is not None:
            expect(stop, (list,), "parameters.stop", "a string or an array of strings")
            for i, s in enumerate(stop):
                expect(s, (str,), f"parameters.stop[{i}]", "a string")
            req.stop = list(stop)
    metadata = body.get("metadata")
    if metadata is not None:
        expect(metadata, (dict,), "metadata", "an object")
        for key in ("request_id", "user_id", "session_id"):
            opt_str(metadata, key, "metadata")
        req.metadata = dict(metadata)
    extensions = body.get("extensions")
    if extensions is not None:
        expect(extensions, (dict,), "extensions", "an object")
        for key, value in extensions.items():
            vendor, _, name = key.partition(":")
            if not vendor or not name:
                raise bad_field(f"extensions.{key}", 'keys must be namespaced as "vendor:name"')
            attr = REQUEST_EXTENSIONS.get(key)
            if attr is None:
                req.extensions[key] = value
            else:
                setattr(req, attr, value)
    return req


def _encode_part(part: hub.Part) -> dict | None:
    # `type(part) is X`, not a `t = type(part)` alias: mypy narrows only the former.
    if type(part) is hub.TextPart:
        out: dict[str, Any] = {"type": "text", "text": part.text}
    elif type(part) is hub.ImagePart or type(part) is hub.FilePart:
        image = type(part) is hub.ImagePart
        kind = "image" if image else "audio" if (part.media_type or "").startswith("audio/") else "file"
        out = {"type": kind}
        if part.media_type is not None:
            out["media_type"] = part.media_type
        if part.data is not None:
            out["data"] = part.data
        if part.url is not None:
            out["url"] = part.url
        if type(part) is hub.ImagePart and part.detail is not None:
            out["llmbridge:detail"] = part.detail
        if type(part) is hub.FilePart and part.name is not None:
            out["name"] = part.name
    else:
        return None
    if part.extensions:
        out["llmbridge:extensions"] = part.extensions
    return out


def _encode_content(parts: list[hub.Part]) -> str | list[dict]:
    first = parts[0] if len(parts) == 1 else None
    if type(first) is hub.TextPart and not first.extensions:
        return first.text
    return [p for p in map(_encode_part, parts) if p is not None]


def _encode_message(message: hub.Message) -> list[dict]:
    """One hub message as one wire message, or several when it holds tool results."""
    results = [p for p in message.parts if type(p) is hub.ToolResultPart]
    rest = [p for p in message.parts if type(p) is not hub.ToolResultPart]
    out: list[dict] = []
    for result in results:
        wire: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": result.tool_call_id,
            "content": _encode_content(result.content),
        }
        if result.is_error:
            wire["llmbridge:is_error"] = True
        if result.name is not None:
            wire["llmbridge:tool_name"] = result.name
        out.append(wire)
    if rest or not results:
        content: list[hub.Part] = []
        calls: list[dict] = []
        extra: list[dict] = []
        for at, part in enumerate(rest):
            if type(part) is hub.ToolCallPart:
                call: dict[str, Any] = {"id": part.id, "name": part.name, "arguments": part.arguments}
                if part.fidelity:
                    call["llmbridge:fidelity"] = part.fidelity
                calls.append(call)
            elif type(part) is hub.ThinkingPart:
                item: dict[str, Any] = {"at": at, "type": "thinking", "text": part.text}
                if part.fidelity:
                    item["fidelity"] = part.fidelity
                extra.append(item)
            elif type(part) is hub.NativePart:
                extra.append({"at": at, "type": "native", "namespace": part.namespace, "data": part.data})
            else:
                content.append(part)
        role = "assistant" if calls else message.role
        wire = {"role": role, "content": _encode_content(content) if content or not calls else None}
        if message.role == "tool" and not calls:  # leftover parts of a tool message: keep them with it
            wire["role"] = "user"
        if calls:
            wire["tool_calls"] = calls
        if extra:
            wire["llmbridge:parts"] = extra
        if wire["role"] != message.role:
            wire["llmbridge:role"] = message.role
        out.append(wire)
    if message.name is not None:
        out[0]["llmbridge:name"] = message.name
    for wire in out[1:]:
        wire["llmbridge:continue"] = True
    if out[0]["role"] != message.role:
        out[0]["llmbridge:role"] = message.role
    return out


def encode_request(request: hub.Request) -> dict:
    """The hub request as an ``application/llm-request+json`` body."""
    body: dict[str, Any] = {"v": VERSION}
    if request.model is not None:
        body["model"] = request.model
    body["stream"] = request.stream
    body["messages"] = [wire for m in request.messages for wire in _encode_message(m)]
    if request.tools:
        tools = []
        for tool in request.tools:
            wire: dict[str, Any] = {"name": tool.name}
            if tool.description is not None:
                wire["description"] = tool.description
            wire["parameters"] = tool.parameters
            if tool.strict is not None:
                wire["llmbridge:strict"] = tool.strict
            if tool.extensions:
                wire["llmbridge:extensions"] = tool.extensions
            tools.append(wire)
        body["tools"] = tools
    if request.tool_choice is not None:
        choice = request.tool_choice
        body["tool_choice"] = {"name": choice.name} if choice.mode == "tool" else choice.mode
    params: dict[str, Any] = {k: getattr(request, k) for k in PARAMETERS if getattr(request, k) is not None}
    if request.stop:
        params["stop"] = list(request.stop)
    if params:
        body["parameters"] = params
    if request.metadata:
        body["metadata"] = dict(request.metadata)
    extensions = dict(request.extensions)
    for key, attr in REQUEST_EXTENSIONS.items():
        if getattr(request, attr) is not None:
            extensions[key] = getattr(request, attr)
    if extensions:
        body["extensions"] = extensions
    return body
