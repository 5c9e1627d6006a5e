"""Chat Completions request bodies <-> hub.Request."""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import RequestError
from ..base import EXTENSION_KEY, json_encode
from ..fields import OPENAI_SHARED, server_tool_type
from ._common import NAME

_KNOWN = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "n",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "service_tier",
        "metadata",
        "user",
        "functions",
        "function_call",
    }
)
_AUDIO_TYPES = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "opus": "audio/opus",
    "pcm16": "audio/pcm",
    "aac": "audio/aac",
    "ogg": "audio/ogg",
}
_AUDIO_FORMATS = {v: k for k, v in _AUDIO_TYPES.items()} | {"audio/mp3": "mp3"}


# --------------------------------------------------------------------------- decode


def decode_request(body: Any, *, model: str | None = None) -> hub.Request:
    if not isinstance(body, dict):
        raise RequestError("expected a JSON object", "body")
    name = body.get("model") or model
    if name is not None and not isinstance(name, str):
        raise RequestError("expected a string", "model")
    req = hub.Request(name)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise RequestError("required, a list of messages" if messages is None else "expected a list", "messages")
    out = req.messages
    for i, message in enumerate(messages):
        # The usual message, {"role": "user"|"system"|"assistant", "content": "text"} and nothing
        # else, is one text part: what _decode_message makes of it, without its walks.
        if (
            type(message) is dict
            and len(message) == 2
            and type(content := message.get("content")) is str
            and (role := message.get("role")) in _PLAIN_ROLES
        ):
            out.append(hub.Message(role, [hub.TextPart(content)]))
        else:
            out.extend(_decode_message(message, f"messages[{i}]"))
    # The usual body has no key but these (no tools, tool choice, optional field, unknown
    # field or our extension key): the steps for the others, each a no-op then, are skipped.
    plain = body.keys() <= _PLAIN_BODY
    if not plain:
        if "tools" in body or "functions" in body:  # (neither: no tools, nothing to report)
            req.tools, legacy_tools = _decode_tools(body)
            if legacy_tools:
                req.extensions[_X_TOOLS] = legacy_tools
        choice = body.get("tool_choice", body.get("function_call"))
        if choice is not None:
            req.tool_choice = _decode_tool_choice(choice, req, body)
    stream = body.get("stream")
    req.stream = stream if stream is True or stream is False else _typed(body, "stream", bool) or False
    if "max_completion_tokens" in body:
        req.max_tokens = _typed(body, "max_completion_tokens", int)
    elif body.get("max_tokens") is not None:
        req.max_tokens = _typed(body, "max_tokens", int)
        req.extensions[_X_MAX_TOKENS_FIELD] = "max_tokens"
    if not plain and not body.keys().isdisjoint(_OPTIONAL):  # (none of them: each step would be a no-op)
        _decode_optional(body, req)
    if isinstance(options := body.get("stream_options"), dict):
        req.extensions[_X_STREAM_OPTIONS] = options
    if not plain:
        for key, value in body.items():
            if key not in _KNOWN and key != EXTENSION_KEY:
                req.extensions[key if ":" in key else f"{NAME}:{key}"] = value
        bridge = body.get(EXTENSION_KEY)
        if isinstance(bridge, dict) and isinstance(bridge.get("extensions"), dict):
            req.extensions.update(bridge["extensions"])
    return req


_PLAIN_ROLES = frozenset(("user", "system", "assistant"))
# The keys of a body that decode_request reads without its steps for tools, optional fields
# and keys it does not know (all of them in _KNOWN).
_PLAIN_BODY = frozenset(("model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens"))
# Extension keys of this dialect that the request codec reads and writes (spelled once)
_X_TOOLS = f"{NAME}:tools"
_X_TOOL_CHOICE = f"{NAME}:tool_choice"
_X_STREAM_OPTIONS = f"{NAME}:stream_options"
_X_MAX_TOKENS_FIELD = f"{NAME}:max_tokens_field"

# The optional fields _decode_optional reads: each leaves the hub default when it is absent.
_OPTIONAL = frozenset(
    (
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "top_k",
        "seed",
        "n",
        "parallel_tool_calls",
        "stop",
        "response_format",
        "reasoning_effort",
        "metadata",
        "user",
        "service_tier",
    )
)


def _decode_optional(body: dict, req: hub.Request) -> None:
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        setattr(req, key, _number(body, key))
    for key in ("top_k", "seed", "n"):
        setattr(req, key, _typed(body, key, int))
    req.parallel_tool_calls = _typed(body, "parallel_tool_calls", bool)
    stop = body.get("stop")
    if isinstance(stop, str):
        req.stop = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        req.stop = list(stop)
    elif stop is not None:
        raise RequestError("expected a string or a list of strings", "stop")
    req.response_format = _decode_response_format(body.get("response_format"))
    effort = body.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str):
            raise RequestError("expected a string", "reasoning_effort")
        req.thinking = {"type": "disabled"} if effort == "none" else {"type": "enabled", "effort": effort}
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise RequestError("expected an object", "metadata")
        req.metadata.update(metadata)
    if body.get("user") is not None:
        req.metadata["user_id"] = body["user"]
    tier = body.get("service_tier")
    if tier is not None:
        req.service_tier = _typed(body, "service_tier", str)


def _typed(body: dict, key: str, kind: type) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RequestError(f"expected {'an integer' if kind is int else 'a boolean'}", key)
    return value


def _number(body: dict, key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError("expected a number", key)
    return value


def _text_of(content: Any, where: str) -> list[hub.Part]:
    """System/developer/tool content: a string or a list of text parts."""
    if isinstance(content, str):
        return [hub.TextPart(content)]
    if isinstance(content, list):
        parts: list[hub.Part] = []
        for j, part in enumerate(content):
            parts.append(_decode_part(part, f"{where}[{j}]"))
        return parts
    raise RequestError("expected a string or a list", where)


_MESSAGE_KEYS = frozenset(
    ("role", "content", "name", "tool_calls", "tool_call_id", "function_call", "reasoning_content", "reasoning")
)


def _decode_message(message: Any, where: str) -> list[hub.Message]:
    messages = _decode_message_parts(message, where)
    if len(messages) == 1 and messages[0].role != "tool":
        # how the client spelled it (block content; fields the hub has no place for, such as
        # "refusal": null or "prefix"), so a Chat upstream gets it back the same
        form: dict[str, Any] = {}
        if isinstance(message.get("content"), list):
            form["parts"] = True
        extra = {
            k: v
            for k, v in message.items()
            if k not in _MESSAGE_KEYS and k != EXTENSION_KEY and not (k == "refusal" and isinstance(v, str) and v)
        }
        if extra:
            form["extra"] = extra
        if form:
            messages[0].extensions = {NAME: form}
    return messages


def _decode_message_parts(message: Any, where: str) -> list[hub.Message]:
    if not isinstance(message, dict):
        raise RequestError("expected an object", where)
    role = message.get("role")
    content = message.get("content")
    name = message.get("name")
    if role in ("system", "developer"):
        parts = _text_of(content, f"{where}.content")
        if role == "developer":
            for part in parts:
                if isinstance(part, hub.TextPart):
                    part.extensions = {**(part.extensions or {}), NAME: {"role": "developer"}}
        return [hub.Message("system", parts, name)]
    if role == "user":
        if content is None:
            raise RequestError("required", f"{where}.content")
        return [hub.Message("user", _text_of(content, f"{where}.content"), name)]
    if role in ("tool", "function"):
        call_id = message.get("tool_call_id") if role == "tool" else message.get("name")
        if not isinstance(call_id, str):
            raise RequestError("required, a string", f"{where}.{'tool_call_id' if role == 'tool' else 'name'}")
        parts = _text_of(content if content is not None else "", f"{where}.content")
        bridge = message.get(EXTENSION_KEY) if isinstance(message.get(EXTENSION_KEY), dict) else {}
        result = hub.ToolResultPart(call_id, parts, bool(bridge.get("is_error")), name if role == "function" else None)
        return [hub.Message("tool", [result])]
    if role == "assistant":
        return [hub.Message("assistant", _decode_assistant(message, where), name)]
    raise RequestError(f"unknown role {role!r}; expected system, developer, user, assistant or tool", f"{where}.role")


def _decode_assistant(message: dict, where: str) -> list[hub.Part]:
    parts: list[hub.Part] = []
    bridge = message.get(EXTENSION_KEY) if isinstance(message.get(EXTENSION_KEY), dict) else {}
    thinking = bridge.get("thinking")
    if isinstance(thinking, list):
        for t in thinking:
            if isinstance(t, dict):
                parts.append(hub.ThinkingPart(t.get("text") or "", t.get("fidelity")))
    else:
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            parts.append(hub.ThinkingPart(reasoning))
    content = message.get("content")
    if content is not None:
        parts.extend(_text_of(content, f"{where}.content"))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append(hub.TextPart(refusal, {NAME: {"refusal": True}}))
    calls = message.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise RequestError("expected a list", f"{where}.tool_calls")
        fidelity = bridge.get("tool_fidelity") if isinstance(bridge.get("tool_fidelity"), list) else []
        for j, call in enumerate(calls):
            at = f"{where}.tool_calls[{j}]"
            if not isinstance(call, dict):
                raise RequestError("expected an object", at)
            fn = call.get("function")
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise RequestError("expected a string", f"{at}.function.name")
            args = fn.get("arguments", "")
            if isinstance(args, dict):
                args = json_encode(args).decode()
            elif not isinstance(args, str):
                raise RequestError("expected a JSON string", f"{at}.function.arguments")
            call_id = call.get("id")
            if not isinstance(call_id, str):
                raise RequestError("required, a string", f"{at}.id")
            parts.append(
                hub.ToolCallPart(call_id, fn["name"], args or "{}", fidelity[j] if j < len(fidelity) else None)
            )
    fc = message.get("function_call")
    if isinstance(fc, dict) and isinstance(fc.get("name"), str):
        parts.append(hub.ToolCallPart(fc["name"], fc["name"], fc.get("arguments") or "{}"))
    for native in bridge.get("native") or []:
        if isinstance(native, dict):
            parts.append(hub.NativePart(native.get("namespace") or NAME, native.get("data")))
    return parts


def _data_url(url: str) -> tuple[str | None, str | None]:
    """``data:image/png;base64,AAAA`` -> (media type, base64 data)."""
    if not url.startswith("data:") or "," not in url:
        return None, None
    head, data = url[5:].split(",", 1)
    media = head.split(";", 1)[0] or None
    return media, data


def _decode_part(part: Any, where: str) -> hub.Part:
    if isinstance(part, str):
        return hub.TextPart(part)
    if not isinstance(part, dict):
        raise RequestError("expected an object", where)
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise RequestError("expected a string", f"{where}.text")
        extra = {k: v for k, v in part.items() if k not in ("type", "text")}
        return hub.TextPart(text, {NAME: extra} if extra else None)
    if kind == "refusal":
        return hub.TextPart(part.get("refusal") or "", {NAME: {"refusal": True}})
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            raise RequestError("expected a string", f"{where}.image_url.url")
        media, data = _data_url(url)
        detail = image.get("detail") if isinstance(image, dict) else None
        if data is not None:
            return hub.ImagePart(media_type=media, data=data, detail=detail)
        return hub.ImagePart(url=url, detail=detail)
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
            raise RequestError("expected an object with data", f"{where}.input_audio")
        fmt = str(audio.get("format") or "wav")
        return hub.FilePart(media_type=_AUDIO_TYPES.get(fmt, f"audio/{fmt}"), data=audio["data"])
    if kind == "file":
        file = part.get("file")
        if not isinstance(file, dict):
            raise RequestError("expected an object", f"{where}.file")
        media, data = _data_url(file.get("file_data") or "")
        ext = {NAME: {"file_id": file["file_id"]}} if file.get("file_id") else None
        return hub.FilePart(media_type=media, data=data, name=file.get("filename"), extensions=ext)
    raise RequestError(f"unknown part type {kind!r}", f"{where}.type")


def _decode_tools(body: dict) -> tuple[list[hub.Tool], list[Any]]:
    tools: list[hub.Tool] = []
    other: list[Any] = []
    raw = body.get("tools")
    if raw is None and isinstance(body.get("functions"), list):
        raw = [{"type": "function", "function": f} for f in body["functions"]]
    if raw is None:
        return tools, other
    if not isinstance(raw, list):
        raise RequestError("expected a list", "tools")
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise RequestError("expected an object", f"tools[{i}]")
        if tool.get("type", "function") != "function":
            other.append(tool)  # custom and hosted tools travel as they are
            continue
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RequestError("expected a string", f"tools[{i}].function.name")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise RequestError("expected an object", f"tools[{i}].function.parameters")
        extra = {k: v for k, v in fn.items() if k not in ("name", "description", "parameters", "strict")}
        tools.append(
            hub.Tool(
                fn["name"],
                fn.get("description"),
                params if params is not None else {"type": "object", "properties": {}},
                fn.get("strict"),
                {NAME: extra} if extra else None,
            )
        )
    return tools, other


def _decode_tool_choice(value: Any, req: hub.Request, body: dict) -> hub.ToolChoice | None:
    if value is None:
        return None
    if value in ("auto", "none", "required"):
        return hub.ToolChoice(value)
    if isinstance(value, dict):
        fn = value.get("function") if value.get("type") == "function" else value
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return hub.ToolChoice("tool", fn["name"])
        req.extensions[_X_TOOL_CHOICE] = value  # allowed_tools, custom ...
        return None
    raise RequestError('expected "auto", "none", "required" or an object naming a function', "tool_choice")


def _decode_response_format(value: Any) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise RequestError("expected an object with a type", "response_format")
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise RequestError("expected an object with a schema", "response_format.json_schema")
        out = {"type": "json_schema", "schema": spec.get("schema", {}), "name": spec.get("name")}
        if spec.get("strict") is not None:
            out["strict"] = spec["strict"]
        if spec.get("description") is not None:
            out["description"] = spec["description"]
        return out
    raise RequestError(f"unknown type {kind!r}", "response_format.type")


# --------------------------------------------------------------------------- encode


def encode_request(request: hub.Request) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if request.model is not None:
        body["model"] = request.model
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        # The usual message, one text part and no name or openai-chat form as a user, system
        # or assistant message, is {"role", "content": text}: what _encode_message makes of it.
        parts = message.parts
        if (
            len(parts) == 1
            and type(part := parts[0]) is hub.TextPart
            and part.extensions is None
            and message.name is None
            and ((ext := message.extensions) is None or NAME not in ext)
            and message.role in _PLAIN_ROLES
        ):
            messages.append({"role": message.role, "content": part.text})
        else:
            messages.extend(_encode_message(message))
    body["messages"] = messages
    # another vendor's server tools (Anthropic web_search_...) are no functions: left out, reported
    tools = [_encode_tool(t) for t in request.tools if server_tool_type(t, NAME) is None] if request.tools else []
    tools.extend(request.extensions.get(_X_TOOLS) or [])
    if tools:
        body["tools"] = tools
    tc = request.tool_choice
    if tc is not None:
        body["tool_choice"] = {"type": "function", "function": {"name": tc.name}} if tc.mode == "tool" else tc.mode
    elif _X_TOOL_CHOICE in request.extensions:
        body["tool_choice"] = request.extensions[_X_TOOL_CHOICE]
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {**(request.extensions.get(_X_STREAM_OPTIONS) or {}), "include_usage": True}
    if request.max_tokens is not None:
        field = request.extensions.get(_X_MAX_TOKENS_FIELD) or "max_completion_tokens"
        body[field] = request.max_tokens
    # (in this order; attribute reads, not a getattr per name)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.top_k is not None:
        body["top_k"] = request.top_k
    if request.seed is not None:
        body["seed"] = request.seed
    if request.presence_penalty is not None:
        body["presence_penalty"] = request.presence_penalty
    if request.frequency_penalty is not None:
        body["frequency_penalty"] = request.frequency_penalty
    if request.n is not None:
        body["n"] = request.n
    if request.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.stop:
        body["stop"] = list(request.stop)
    rf = request.response_format
    if rf:
        if rf.get("type") == "json_schema":
            spec = {"name": rf.get("name") or "response", "schema": rf.get("schema") or {}}
            for key in ("strict", "description"):
                if rf.get(key) is not None:
                    spec[key] = rf[key]
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
        else:
            body["response_format"] = {"type": rf.get("type") or "json_object"}
    if request.thinking:  # (no thinking dict says no effort)
        effort = hub.effort_for("openai", hub.thinking_effort(request.thinking))  # the hub's one effort table
        if effort is not None:
            body["reasoning_effort"] = effort
    if request.service_tier is not None:
        body["service_tier"] = request.service_tier
    if request.metadata:
        meta = {k: v for k, v in request.metadata.items() if k not in ("user_id", "request_id")}
        if request.metadata.get("user_id") is not None:
            body["user"] = request.metadata["user_id"]
        if meta:
            body["metadata"] = meta
    foreign = {}
    for key, value in request.extensions.items():
        vendor, _, name = key.partition(":")
        if vendor == NAME:
            if name not in ("tools", "tool_choice", "stream_options", "max_tokens_field"):
                body[name] = value
        else:
            foreign[key] = value
            if vendor == "openai-responses" and name in OPENAI_SHARED:  # spelled alike in both APIs
                body.setdefault(name, value)
            elif key == "openai-responses:text" and isinstance(value, dict) and "verbosity" in value:
                body.setdefault("verbosity", value["verbosity"])
    if foreign:
        body[EXTENSION_KEY] = {"extensions": foreign}
    return body


def _encode_tool(tool: hub.Tool) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        fn["description"] = tool.description
    fn["parameters"] = tool.parameters
    if tool.strict is not None:
        fn["strict"] = tool.strict
    fn.update((tool.extensions or {}).get(NAME) or {})
    return {"type": "function", "function": fn}


def _encode_part(part: hub.Part) -> dict[str, Any] | None:
    if isinstance(part, hub.TextPart):
        out = {"type": "text", "text": part.text}
        own = (part.extensions or {}).get(NAME) or {}
        out.update({k: v for k, v in own.items() if k not in ("role", "refusal")})
        return out
    if isinstance(part, hub.ImagePart):
        url = part.url if part.url else f"data:{part.media_type or 'image/png'};base64,{part.data or ''}"
        image = {"url": url}
        if part.detail:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, hub.FilePart):
        media = part.media_type or "application/octet-stream"
        if media.startswith("audio/") and part.data:
            return {
                "type": "input_audio",
                "input_audio": {"data": part.data, "format": _AUDIO_FORMATS.get(media, media.split("/", 1)[1])},
            }
        file: dict[str, Any] = {}
        file_id = ((part.extensions or {}).get(NAME) or {}).get("file_id")
        if file_id:
            file["file_id"] = file_id
        elif part.data is not None:
            file["file_data"] = f"data:{media};base64,{part.data}"
        elif part.url:
            file["file_data"] = part.url
        if part.name:
            file["filename"] = part.name
        return {"type": "file", "file": file}
    return None


def _plain(part: hub.Part) -> bool:
    """A text part with nothing but our own role/refusal markers."""
    if not isinstance(part, hub.TextPart):
        return False
    ext = part.extensions
    return not ext or (list(ext) == [NAME] and set(ext[NAME]) <= {"role", "refusal"})


def _content(parts: list[hub.Part]) -> str | list[dict[str, Any]]:
    if len(parts) <= 1 and all(_plain(p) for p in parts):  # several text parts stay parts: not glued
        return "".join(p.text for p in parts)  # type: ignore[union-attr]
    return [e for p in parts if (e := _encode_part(p)) is not None]


def _encode_message(message: hub.Message) -> list[dict[str, Any]]:
    role = message.role
    out: list[dict[str, Any]] = []
    results = [p for p in message.parts if isinstance(p, hub.ToolResultPart)]
    for result in results:
        content = _content(result.content) if result.content else ""
        if result.is_error and isinstance(content, str):
            content = content or "error"
        msg: dict[str, Any] = {"role": "tool", "tool_call_id": result.tool_call_id, "content": content}
        if result.is_error:
            msg[EXTENSION_KEY] = {"is_error": True}
        out.append(msg)
    rest = [p for p in message.parts if not isinstance(p, hub.ToolResultPart)]
    if role == "tool" or (results and not rest):
        return out
    if role == "system":
        developer = any(
            isinstance(p, hub.TextPart) and ((p.extensions or {}).get(NAME) or {}).get("role") == "developer"
            for p in rest
        )
        msg = {"role": "developer" if developer else "system", "content": _content(rest)}
    elif role == "assistant":
        msg = _encode_assistant(rest)
    else:
        msg = {"role": "user", "content": _content(rest)}
    if message.name:
        msg["name"] = message.name
    form = (message.extensions or {}).get(NAME)
    if isinstance(form, dict):
        if form.get("parts") and isinstance(msg.get("content"), str) and msg["content"]:
            msg["content"] = [{"type": "text", "text": msg["content"]}]
        for key, value in (form.get("extra") or {}).items():
            msg.setdefault(key, value)
    out.append(msg)
    return out


def _encode_assistant(parts: list[hub.Part]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant"}
    texts = [
        p for p in parts if isinstance(p, hub.TextPart) and not ((p.extensions or {}).get(NAME) or {}).get("refusal")
    ]
    refusals = [p for p in parts if isinstance(p, hub.TextPart) and p not in texts]
    thinking = [p for p in parts if isinstance(p, hub.ThinkingPart)]
    calls = [p for p in parts if isinstance(p, hub.ToolCallPart)]
    natives = [p for p in parts if isinstance(p, hub.NativePart)]
    msg["content"] = _content(texts) if texts else None
    if refusals:
        msg["refusal"] = "".join(p.text for p in refusals)  # type: ignore[union-attr]
    bridge: dict[str, Any] = {}
    if thinking:
        msg["reasoning_content"] = "".join(p.text for p in thinking)
        if any(p.fidelity for p in thinking) or len(thinking) > 1:
            bridge["thinking"] = [{"text": p.text, "fidelity": p.fidelity} for p in thinking]
    if calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in calls
        ]
        if any(c.fidelity for c in calls):
            bridge["tool_fidelity"] = [c.fidelity for c in calls]  # by position: ids need not be unique
    if natives:
        bridge["native"] = [{"namespace": p.namespace, "data": p.data} for p in natives]
    if bridge:
        msg[EXTENSION_KEY] = bridge
    return msg
