"""Responses request bodies <-> :class:`hub.Request`.

Fields the hub does not model are kept as ``"openai-responses:<field>"`` extensions
(``store``, ``previous_response_id``, ``include``, hosted tools ...) and written back as
they were.  Hub fields with no Responses parameter (``stop``, ``seed``, ``top_k``, ``n``,
penalties) travel under ``"llmbridge"``; strip that key before sending to OpenAI itself.
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import RequestError
from ..base import EXTENSION_KEY, json_decode, json_encode
from ..fields import OPENAI_SHARED, server_tool_type
from ._common import NAME

PREFIX = NAME + ":"
_HANDLED = frozenset(
    (
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "stream",
        "max_output_tokens",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "metadata",
        "service_tier",
        EXTENSION_KEY,
    )
)
_CARRIED = ("top_k", "stop", "seed", "n", "presence_penalty", "frequency_penalty")
_OWN_KEYS = ("hosted_tools", "tool_choice", "text", "reasoning")  # extensions the encoder writes itself
HOSTED_AT = PREFIX + "$hosted_at"  # the built-in tools' places in the client's tools list
_EFFORTS = ("low", "medium", "high")

# ------------------------------------------------------------------------------------ decode


def _expect(value: Any, kind: type | tuple, where: str, what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        raise RequestError(f"expected {what}", where)
    return value


def _data_url(url: str) -> tuple[str | None, str | None]:
    """(media type, base64 data) of a ``data:`` URL, else (None, None)."""
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return head or None, data
    return None, None


def _content_part(part: Any, where: str) -> hub.Part:
    _expect(part, dict, where, "an object")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        text = _expect(part.get("text"), str, f"{where}.text", "a string")
        extras = {k: v for k, v in part.items() if k not in ("type", "text")}
        return hub.TextPart(text, {NAME: extras} if extras else None)
    if kind == "refusal":
        return hub.TextPart(
            _expect(part.get("refusal"), str, f"{where}.refusal", "a string"), {NAME: {"type": "refusal"}}
        )
    if kind == "input_image":
        url = part.get("image_url")
        media, data = _data_url(url) if isinstance(url, str) else (None, None)
        extras = {"file_id": part["file_id"]} if part.get("file_id") else None
        if url is None and extras is None:
            raise RequestError("expected 'image_url' or 'file_id'", where)
        return hub.ImagePart(media, data, None if data else url, part.get("detail"), {NAME: extras} if extras else None)
    if kind == "input_file":
        media, data = _data_url(part["file_data"]) if isinstance(part.get("file_data"), str) else (None, None)
        if data is None and isinstance(part.get("file_data"), str):
            data = part["file_data"]
        extras = {"file_id": part["file_id"]} if part.get("file_id") else None
        return hub.FilePart(media, data, part.get("file_url"), part.get("filename"), {NAME: extras} if extras else None)
    if kind == "input_audio":
        audio = _expect(part.get("input_audio"), dict, f"{where}.input_audio", "an object")
        return hub.FilePart(f"audio/{audio.get('format') or 'wav'}", audio.get("data"))
    raise RequestError(f"unknown content part type {kind!r}", f"{where}.type")


def _content(content: Any, where: str) -> list[hub.Part]:
    if isinstance(content, str):
        return [hub.TextPart(content)]
    _expect(content, list, where, "a string or a list")
    return [_content_part(p, f"{where}[{n}]") for n, p in enumerate(content)]


def _assistant(messages: list[hub.Message]) -> hub.Message:
    """The assistant message items of one turn merge into (calls, reasoning and text)."""
    if not messages or messages[-1].role != "assistant":
        messages.append(hub.Message("assistant"))
    return messages[-1]


def _input_item(item: Any, where: str, messages: list[hub.Message]) -> None:
    _expect(item, dict, where, "an object")
    kind = item.get("type")
    if kind in (None, "message") and "role" in item:
        role = item["role"]
        if role not in ("user", "assistant", "system", "developer"):
            raise RequestError(f"unknown role {role!r}", f"{where}.role")
        parts = _content(item.get("content"), f"{where}.content")
        # how the item was spelled, so a Responses upstream gets it back the same
        form: dict[str, Any] = {"role": role, "in_input": True}
        if "type" not in item:
            form["untyped"] = True
        if isinstance(item.get("content"), str):
            form["string"] = True
        for key in ("id", "status"):  # an output item sent back (Codex does)
            if item.get(key) is not None:
                form[key] = item[key]
        if role == "assistant":
            fresh = not messages or messages[-1].role != "assistant"
            _assistant(messages).parts.extend(parts)
            messages[-1].extensions = {NAME: form} if fresh else None  # (said once: one item, one spelling)
        else:
            messages.append(hub.Message("system" if role == "developer" else role, parts, None, {NAME: form}))
        return
    if kind == "function_call":
        own = {k: item[k] for k in ("id", "status") if item.get(k) is not None}
        fidelity = {NAME: own} if own else None
        _assistant(messages).parts.append(
            hub.ToolCallPart(
                _expect(item.get("call_id"), str, f"{where}.call_id", "a string"),
                _expect(item.get("name"), str, f"{where}.name", "a string"),
                _expect(item.get("arguments", ""), str, f"{where}.arguments", "a string") or "{}",
                fidelity,
            )
        )
    elif kind == "custom_tool_call":
        own = {"custom": True, **({"id": item["id"]} if item.get("id") else {})}
        _assistant(messages).parts.append(
            hub.ToolCallPart(
                _expect(item.get("call_id"), str, f"{where}.call_id", "a string"),
                _expect(item.get("name"), str, f"{where}.name", "a string"),
                json_encode({"input": _expect(item.get("input", ""), str, f"{where}.input", "a string")}).decode(),
                {NAME: own},
            )
        )
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        content = _content(output, f"{where}.output") if output is not None else []
        messages.append(
            hub.Message(
                "tool", [hub.ToolResultPart(_expect(item.get("call_id"), str, f"{where}.call_id", "a string"), content)]
            )
        )
    elif kind == "reasoning":
        summary = item.get("summary") or []
        _expect(summary, list, f"{where}.summary", "a list")
        texts = [p.get("text", "") for p in summary if isinstance(p, dict)]
        texts += [p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict)]
        own = {k: v for k, v in item.items() if k in ("id", "encrypted_content") and v is not None}
        if len(summary) > 1:
            own["summary"] = summary
        if item.get("content") and not summary:
            own["text_kind"] = "reasoning_text"
        _assistant(messages).parts.append(hub.ThinkingPart("\n\n".join(texts), {NAME: own} if own else None))
    elif isinstance(kind, str):  # hosted tool calls, item references ...: replayed as they are
        _assistant(messages).parts.append(hub.NativePart(NAME, item))
    else:
        raise RequestError("expected a message or an item with a 'type'", where)


def _tool(tool: Any, where: str) -> hub.Tool | None:
    _expect(tool, dict, where, "an object")
    kind = tool.get("type")
    if kind == "function":
        name = _expect(tool.get("name"), str, f"{where}.name", "a string")
        params = tool.get("parameters")
        params = _expect(params, dict, f"{where}.parameters", "an object") if params is not None else None
        extras = {k: v for k, v in tool.items() if k not in ("type", "name", "description", "parameters", "strict")}
        return hub.Tool(
            name,
            tool.get("description"),
            params or {"type": "object", "properties": {}},
            tool.get("strict"),
            {NAME: extras} if extras else None,
        )
    if kind == "custom":
        name = _expect(tool.get("name"), str, f"{where}.name", "a string")
        params = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
        extras = {k: v for k, v in tool.items() if k not in ("name", "description")}
        return hub.Tool(name, tool.get("description"), params, None, {NAME: extras})
    if not isinstance(kind, str):
        raise RequestError("expected a tool with a 'type'", f"{where}.type")
    return None  # a hosted tool: kept whole in the extensions


def _tool_choice(choice: Any, where: str) -> tuple[hub.ToolChoice | None, Any]:
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise RequestError(f"unknown tool_choice {choice!r}", where)
        return hub.ToolChoice(choice), None
    _expect(choice, dict, where, "a string or an object")
    if choice.get("type") in ("function", "custom") and isinstance(choice.get("name"), str):
        return hub.ToolChoice("tool", choice["name"]), None
    return None, choice  # allowed_tools, hosted tool types: no hub word


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    _expect(body, dict, "body", "a JSON object")
    request = hub.Request(model=body.get("model") or model)
    if request.model is not None:
        _expect(request.model, str, "model", "a string")
    messages: list[hub.Message] = []
    instructions = body.get("instructions")
    if instructions is not None:
        messages.append(hub.Message("system", [hub.TextPart(_expect(instructions, str, "instructions", "a string"))]))
    items = body.get("input")
    if items is None and not any(body.get(k) for k in ("prompt", "previous_response_id", "conversation")):
        raise RequestError("required", "input")
    if items is None:
        items = []
    if isinstance(items, str):
        messages.append(hub.Message("user", [hub.TextPart(items)]))
    else:
        _expect(items, list, "input", "a string or a list")
        for n, item in enumerate(items):
            _input_item(item, f"input[{n}]", messages)
    request.messages = messages
    hosted, hosted_at = [], []
    for n, tool in enumerate(_expect(body.get("tools") or [], list, "tools", "a list")):
        converted = _tool(tool, f"tools[{n}]")
        if converted is None:
            hosted.append(tool)
            hosted_at.append(n)
        else:
            request.tools.append(converted)
    if hosted:
        request.extensions[PREFIX + "hosted_tools"] = hosted
        request.extensions[HOSTED_AT] = hosted_at  # where they were among the tools
    if body.get("tool_choice") is not None:
        request.tool_choice, raw_choice = _tool_choice(body["tool_choice"], "tool_choice")
        if raw_choice is not None:
            request.extensions[PREFIX + "tool_choice"] = raw_choice
    # exact bool: "stream": "false" is a truthy string, and must not start a stream
    request.stream = False if body.get("stream") is None else _expect(body["stream"], bool, "stream", "a boolean")
    for field, name, kind, what in (
        ("max_output_tokens", "max_tokens", int, "an integer"),
        ("temperature", "temperature", (int, float), "a number"),
        ("top_p", "top_p", (int, float), "a number"),
        ("parallel_tool_calls", "parallel_tool_calls", bool, "a boolean"),
    ):
        if body.get(field) is not None:
            setattr(request, name, _expect(body[field], kind, field, what))
    text = body.get("text")
    if text is not None:
        _expect(text, dict, "text", "an object")
        fmt = text.get("format")
        if fmt is not None:
            fmt = _expect(fmt, dict, "text.format", "an object")
            if fmt.get("type") == "json_schema":
                request.response_format = {
                    "type": "json_schema",
                    "schema": _expect(fmt.get("schema"), dict, "text.format.schema", "an object"),
                    "name": fmt.get("name"),
                    "strict": fmt.get("strict"),
                }
                if fmt.get("description"):
                    request.response_format["description"] = fmt["description"]
            elif fmt.get("type") == "json_object":
                request.response_format = {"type": "json_object"}
            elif fmt.get("type") != "text":
                raise RequestError(f"unknown format type {fmt.get('type')!r}", "text.format.type")
        extras = {k: v for k, v in text.items() if k != "format"}
        if extras:
            request.extensions[PREFIX + "text"] = extras
    reasoning = body.get("reasoning")
    if reasoning is not None:
        _expect(reasoning, dict, "reasoning", "an object")
        effort = reasoning.get("effort")
        if effort == "none":
            request.thinking = {"type": "disabled"}
        elif effort is not None or reasoning.get("summary") is not None:
            request.thinking = {"type": "enabled"}
            if effort is not None:
                request.thinking["effort"] = (
                    effort if effort in _EFFORTS else ("low" if effort == "minimal" else "high")
                )
        extras = {k: v for k, v in reasoning.items() if v is not None and (k != "effort" or effort not in _EFFORTS)}
        if extras:
            request.extensions[PREFIX + "reasoning"] = extras
    if body.get("metadata") is not None:
        request.metadata = dict(_expect(body["metadata"], dict, "metadata", "an object"))
    if body.get("service_tier") is not None:
        request.service_tier = _expect(body["service_tier"], str, "service_tier", "a string")
    carried = body.get(EXTENSION_KEY)
    if isinstance(carried, dict):
        for name in _CARRIED:
            if carried.get(name) is not None:
                setattr(request, name, carried[name])
        if isinstance(carried.get("extensions"), dict):
            request.extensions.update(carried["extensions"])
    for key, value in body.items():
        if key not in _HANDLED:
            request.extensions[PREFIX + key] = value
    return request


# ------------------------------------------------------------------------------------ encode


def _encode_part(part: hub.Part, role: str) -> dict | None:
    if isinstance(part, hub.TextPart):
        own = (part.extensions or {}).get(NAME) or {}
        if own.get("type") == "refusal":
            return {"type": "refusal", "refusal": part.text}
        out = {"type": "output_text" if role == "assistant" else "input_text", "text": part.text}
        return {**out, **{k: v for k, v in own.items() if k != "type"}} if role == "assistant" else out
    if isinstance(part, hub.ImagePart):
        out = {"type": "input_image", "detail": part.detail or "auto"}
        if part.data is not None:
            out["image_url"] = f"data:{part.media_type or 'image/png'};base64,{part.data}"
        elif part.url is not None:
            out["image_url"] = part.url
        out.update((part.extensions or {}).get(NAME) or {})
        return out
    if isinstance(part, hub.FilePart):
        if part.media_type and part.media_type.startswith("audio/") and part.data is not None:
            return {"type": "input_audio", "input_audio": {"data": part.data, "format": part.media_type[6:]}}
        out = {"type": "input_file"}
        if part.data is not None:
            out["file_data"] = f"data:{part.media_type or 'application/octet-stream'};base64,{part.data}"
        if part.url is not None:
            out["file_url"] = part.url
        if part.name is not None:
            out["filename"] = part.name
        out.update((part.extensions or {}).get(NAME) or {})
        return out
    return None


def _encode_message(message: hub.Message, items: list[dict]) -> None:
    role = message.role
    if role == "tool":
        for part in message.parts:
            if isinstance(part, hub.ToolResultPart):
                parts = [p for p in (_encode_part(c, "user") for c in part.content) if p is not None]
                text_only = all(p["type"] == "input_text" for p in parts)
                output: Any = "".join(p["text"] for p in parts) if text_only else parts
                items.append({"type": "function_call_output", "call_id": part.tool_call_id, "output": output})
        return
    content: list[dict] = []

    def flush() -> None:
        if content:
            items.append(
                {"type": "message", "role": role if role != "system" else "developer", "content": list(content)}
            )
            content.clear()

    for part in message.parts:
        if isinstance(part, hub.ToolCallPart):
            flush()
            own = (part.fidelity or {}).get(NAME) or {}
            if own.get("custom"):
                try:
                    value = json_decode(part.arguments).get("input", part.arguments)
                except (ValueError, AttributeError):
                    value = part.arguments
                item = {"type": "custom_tool_call", "call_id": part.id, "name": part.name, "input": value}
            else:
                item = {"type": "function_call", "call_id": part.id, "name": part.name, "arguments": part.arguments}
            if own.get("id"):
                item["id"] = own["id"]
            if own.get("status") and item["type"] == "function_call":
                item["status"] = own["status"]
            items.append(item)
        elif isinstance(part, hub.ThinkingPart):
            own = (part.fidelity or {}).get(NAME)
            if not own or not own.get("id"):
                continue  # reasoning of another vendor: OpenAI cannot take it back (see docs)
            flush()
            item = {"type": "reasoning", "id": own["id"], "summary": []}
            if own.get("text_kind") == "reasoning_text":
                item["content"] = [{"type": "reasoning_text", "text": part.text}] if part.text else []
            elif isinstance(own.get("summary"), list):
                item["summary"] = own["summary"]
            elif part.text:
                item["summary"] = [{"type": "summary_text", "text": part.text}]
            if own.get("encrypted_content"):
                item["encrypted_content"] = own["encrypted_content"]
            items.append(item)
        elif isinstance(part, hub.NativePart):
            if part.namespace == NAME:
                flush()
                items.append(part.data)
        elif isinstance(part, hub.ToolResultPart):  # a tool result inside a user message
            flush()
            _encode_message(hub.Message("tool", [part]), items)
        else:
            encoded = _encode_part(part, role)
            if encoded is not None:
                content.append(encoded)
    flush()


def _form(message: hub.Message) -> dict[str, Any]:
    own = (message.extensions or {}).get(NAME)
    return own if isinstance(own, dict) else {}


def _respell(items: list[dict], n: int, form: dict[str, Any]) -> None:
    """The message item ``items[n]`` as the client spelled it (role word, no ``type``, string content)."""
    item = items[n]
    content = item["content"]
    if form.get("string") and len(content) == 1 and set(content[0]) == {"type", "text"}:
        content = content[0]["text"]
    role = form.get("role") if item["role"] in ("developer", "system") else item["role"]
    out = {} if form.get("untyped") else {"type": "message"}
    extra = {k: form[k] for k in ("id", "status") if k in form}
    items[n] = {**out, **({"id": extra.pop("id")} if "id" in extra else {}), "role": role or item["role"]}
    items[n].update(content=content, **extra)


def encode_request(request: hub.Request) -> dict:
    body: dict[str, Any] = {}
    if request.model is not None:
        body["model"] = request.model
    messages = request.messages
    lead = 0  # leading system messages are the instructions, unless the client put them in input
    while lead < len(messages) and messages[lead].role == "system" and not _form(messages[lead]).get("in_input"):
        lead += 1
    if lead:
        # one string: the system messages and their text blocks, a blank line between each
        texts = [p.text for m in messages[:lead] for p in m.parts if isinstance(p, hub.TextPart) and p.text]
        body["instructions"] = "\n\n".join(texts)
    items: list[dict] = []
    for message in messages[lead:]:
        start = len(items)
        _encode_message(message, items)
        form = _form(message)
        if form and len(items) == start + 1 and items[start].get("type") == "message":
            _respell(items, start, form)
    body["input"] = items
    ext = request.extensions
    tools: list[dict] = []
    for tool in request.tools:
        if server_tool_type(tool, NAME) is not None:
            continue  # another vendor's server tool (Anthropic web_search_...): left out, reported
        own = (tool.extensions or {}).get(NAME) or {}
        if own.get("type") == "custom":
            tools.append({"name": tool.name, **({"description": tool.description} if tool.description else {}), **own})
            continue
        out = {"type": "function", "name": tool.name, "parameters": tool.parameters}
        if tool.description is not None:
            out["description"] = tool.description
        if tool.strict is not None:
            out["strict"] = tool.strict
        tools.append({**out, **own})
    hosted = list(ext.get(PREFIX + "hosted_tools") or ())
    at = ext.get(HOSTED_AT)
    if isinstance(at, list) and len(at) == len(hosted) and all(isinstance(n, int) for n in at):
        for n, tool in sorted(zip(at, hosted, strict=True), key=lambda pair: pair[0]):
            tools.insert(n, tool)  # back where the client had them
    else:
        tools.extend(hosted)
    if tools:
        body["tools"] = tools
    if PREFIX + "tool_choice" in ext:
        body["tool_choice"] = ext[PREFIX + "tool_choice"]
    elif request.tool_choice is not None:
        choice = request.tool_choice
        custom = any(
            t.name == choice.name and ((t.extensions or {}).get(NAME) or {}).get("type") == "custom"
            for t in request.tools
        )
        body["tool_choice"] = (
            {"type": "custom" if custom else "function", "name": choice.name} if choice.mode == "tool" else choice.mode
        )
    if request.stream:
        body["stream"] = True
    for name, field in (
        ("max_tokens", "max_output_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
    ):
        value = getattr(request, name)
        if value is not None:
            body[field] = value
    text: dict[str, Any] = dict(ext.get(PREFIX + "text") or {})
    if "openai-chat:verbosity" in ext:  # Chat's top-level verbosity
        text.setdefault("verbosity", ext["openai-chat:verbosity"])
    for name in OPENAI_SHARED:  # spelled alike in both APIs
        if "openai-chat:" + name in ext:
            body.setdefault(name, ext["openai-chat:" + name])
    fmt = request.response_format
    if fmt is not None:
        if fmt.get("type") == "json_schema":
            text["format"] = {"type": "json_schema", "name": fmt.get("name") or "response", "schema": fmt.get("schema")}
            for key in ("strict", "description"):
                if fmt.get(key) is not None:
                    text["format"][key] = fmt[key]
        elif fmt.get("type") == "json_object":
            text["format"] = {"type": "json_object"}
    if text:
        body["text"] = text
    reasoning: dict[str, Any] = {}
    effort = hub.effort_for("openai", hub.thinking_effort(request.thinking))  # the hub's one effort table
    if effort is not None:
        reasoning["effort"] = effort
    if request.service_tier is not None:
        body["service_tier"] = request.service_tier
    reasoning.update(ext.get(PREFIX + "reasoning") or {})
    if reasoning:
        body["reasoning"] = reasoning
    if request.metadata:
        body["metadata"] = {
            k: v if isinstance(v, str) else json_encode(v).decode() for k, v in request.metadata.items()
        }
    for key, value in ext.items():
        name = key[len(PREFIX) :]
        if key.startswith(PREFIX) and not name.startswith("$") and name not in _OWN_KEYS:
            body[key[len(PREFIX) :]] = value
    carried: dict[str, Any] = {
        name: getattr(request, name) for name in _CARRIED if getattr(request, name) not in (None, [])
    }
    foreign = {k: v for k, v in ext.items() if not k.startswith(PREFIX)}
    if foreign:
        carried["extensions"] = foreign
    if carried:
        body[EXTENSION_KEY] = carried
    return body
