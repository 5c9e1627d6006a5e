"""Messages request bodies <-> hub.Request."""

from __future__ import annotations

import base64
from typing import Any

from ... import hub
from ...errors import RequestError
from ..base import json_decode, json_encode
from ._common import NAME

# Anthropic requires max_tokens; this is sent when the hub request has none.
DEFAULT_MAX_TOKENS = 4096
# Room left for the answer when a thinking budget is at or above max_tokens.
_ANSWER_ROOM = 1024
# Thinking budgets for an effort word (OpenAI reasoning_effort) when no budget is given: the hub's table.
EFFORT_BUDGET = hub.EFFORT_BUDGET
# service_tier: Anthropic's words <-> the hub's (OpenAI's)
_TIER_IN = {"auto": "auto", "standard_only": "default"}
_TIER_OUT = {"auto": "auto", "default": "standard_only", "priority": "auto", "flex": "standard_only", "scale": "auto"}
_MIN_BUDGET = 1024

_BODY_KEYS = frozenset(
    (
        "model",
        "messages",
        "system",
        "max_tokens",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "output_format",
        "service_tier",
    )
)
_PREFIX = NAME + ":"
# The body's keys in the client's order, so an Anthropic upstream gets the same bytes.
ORDER = _PREFIX + "$order"
# The client's anthropic-beta header (the gateway puts it here), sent on to an Anthropic upstream.
BETA = _PREFIX + "$beta"
_BLOCKS = "content_blocks"  # in a tool result's own extensions: its content was a list, not a string


_TURN_ROLES = frozenset(("user", "assistant"))


def _want(value: Any, kinds: type | tuple[type, ...], where: str, what: str) -> Any:
    """``value`` when it is of ``kinds`` (a bool is no number), else a RequestError naming ``where``."""
    if type(value) is kinds:  # (the usual call: one exact type, as JSON decodes it)
        return value
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (type(value) is bool and bool not in kinds):
        raise RequestError(f"expected {what}", where)
    return value


def _number(body: dict[str, Any], key: str, kinds: tuple[type, ...] = (int, float)) -> Any:
    value = body.get(key)
    if value is None or (type(value) is int and int in kinds):  # (None or an int: nothing to check)
        return value
    return _want(value, kinds, key, "an integer" if kinds == (int,) else "a number")


def _extras(block: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any] | None:
    extras = {k: v for k, v in block.items() if k not in known}
    return {NAME: extras} if extras else None


# --------------------------------------------------------------------------- decode


def decode_request(body: dict[str, Any], *, model: str | None = None) -> hub.Request:
    if type(body) is not dict:
        raise RequestError("expected a JSON object", "body")
    name = body.get("model") or model
    if name is not None and type(name) is not str:
        raise RequestError("expected a string", "model")
    request = hub.Request(name)
    system = body.get("system")
    if system is not None:
        request.messages.append(hub.Message("system", _content(system, "system", "user"), None, _form(system)))
    messages = body.get("messages")
    if type(messages) is not list:
        raise RequestError("expected a list" if messages is not None else "field required", "messages")
    out = request.messages
    for n, message in enumerate(messages):
        # The usual turn, a user or assistant message with string content, is one text part
        # spelled as a string: what the general steps below make of it, without them.
        if (
            type(message) is dict
            and type(content := message.get("content")) is str
            and (role := message.get("role")) in _TURN_ROLES
        ):
            out.append(hub.Message(role, [hub.TextPart(content)], None, {NAME: {"content": "string", "turn": True}}))
            continue
        _decode_turn(message, f"messages[{n}]", out)
    # exact bool: "stream": "false" is a truthy string, and must not start a stream
    stream = body.get("stream")
    request.stream = False if stream is None else _want(stream, bool, "stream", "a boolean")
    request.max_tokens = _number(body, "max_tokens", (int,))
    # The usual body has no key but these: no optional field (each step would be a no-op)
    # and none it does not know (kept as extensions), so neither is looked for.
    if not body.keys() <= _PLAIN_BODY:
        if not body.keys().isdisjoint(_OPTIONAL):
            _decode_optional(body, request)
        for key, value in body.items():
            if key not in _BODY_KEYS:
                request.extensions[_PREFIX + key] = value
    request.extensions[ORDER] = list(body)
    return request


def _decode_turn(message: Any, where: str, out: list[hub.Message]) -> None:
    """One message of ``messages`` (any shape): its hub messages appended to ``out``."""
    _want(message, dict, where, "an object")
    role = message.get("role")
    if role not in ("user", "assistant", "system"):
        raise RequestError("expected 'user', 'assistant' or 'system'", f"{where}.role")
    if "content" not in message:
        raise RequestError("field required", f"{where}.content")
    content = message["content"]
    parts = _content(content, f"{where}.content", role)
    if role != "user":  # a system message inside the conversation stays where it is
        form = _form(content, in_messages=role == "system")
        out.append(hub.Message(role, parts, None, form))
        return
    first = len(out)
    pending: list[hub.Part] = []  # tool results become "tool" messages, in order
    for part in parts:
        if type(part) is hub.ToolResultPart:
            if pending:
                out.append(hub.Message("user", pending))
                pending = []
            out.append(hub.Message("tool", [part]))
        else:
            pending.append(part)
    if pending or not parts:
        out.append(hub.Message("user", pending))
    # the turn's first hub message says where the turn began and how its content was spelled
    out[first].extensions = _form(content) if len(out) == first + 1 else _form([])


_PLAIN_BODY = frozenset(("model", "messages", "system", "max_tokens", "stream"))  # (in _BODY_KEYS, not in _OPTIONAL)
# The optional fields _decode_optional reads: each leaves the hub default when it is absent.
_OPTIONAL = frozenset(
    (
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "service_tier",
        "output_format",
    )
)


def _decode_optional(body: dict[str, Any], request: hub.Request) -> None:
    request.temperature = _number(body, "temperature")
    request.top_p = _number(body, "top_p")
    request.top_k = _number(body, "top_k", (int,))
    stop = body.get("stop_sequences")
    if stop is not None:
        _want(stop, list, "stop_sequences", "a list of strings")
        request.stop = [_want(s, str, f"stop_sequences[{i}]", "a string") for i, s in enumerate(stop)]
    metadata = body.get("metadata")
    if metadata is not None:
        _want(metadata, dict, "metadata", "an object")
        request.metadata = dict(metadata)
    request.tools = [
        _tool(t, f"tools[{i}]") for i, t in enumerate(_want(body.get("tools") or [], list, "tools", "a list"))
    ]
    _tool_choice(body.get("tool_choice"), request)
    thinking = body.get("thinking")
    if thinking is not None:
        _want(thinking, dict, "thinking", "an object")
        if thinking.get("type") not in ("enabled", "disabled", "adaptive"):
            raise RequestError("expected 'enabled', 'disabled' or 'adaptive'", "thinking.type")
        request.thinking = dict(thinking)
    config = body.get("output_config")
    if config is not None:
        _want(config, dict, "output_config", "an object")
        if config.get("effort") is not None:
            request.thinking = {**(request.thinking or {}), "effort": config["effort"]}
        if config.get("format") is not None:
            request.response_format = _format(config["format"], "output_config.format")
        rest = {k: v for k, v in config.items() if k not in ("effort", "format")}
        if rest:
            request.extensions[_PREFIX + "output_config"] = rest
    tier = body.get("service_tier")
    if tier is not None:
        request.service_tier = _TIER_IN.get(_want(tier, str, "service_tier", "a string"), tier)
    if body.get("output_format") is not None:  # the structured-outputs beta's spelling
        request.response_format = _format(body["output_format"], "output_format")
        request.extensions[_PREFIX + "output_format"] = True


def _form(content: Any, *, in_messages: bool = False) -> dict[str, Any]:
    """How a message was spelled (string or block content; a system message inside
    ``messages``), so an Anthropic upstream gets it back the same."""
    own: dict[str, Any] = {"content": "string" if type(content) is str else "blocks", "turn": True}
    if in_messages:
        own["in_messages"] = True
    return {NAME: own}


def _format(value: Any, where: str) -> dict[str, Any]:
    _want(value, dict, where, "an object")
    if value.get("type") != "json_schema" or type(value.get("schema")) is not dict:
        raise RequestError("expected {'type': 'json_schema', 'schema': {...}}", where)
    return {"type": "json_schema", "schema": value["schema"]}


def _tool(tool: Any, where: str) -> hub.Tool:
    _want(tool, dict, where, "an object")
    name = tool.get("name")
    _want(name, str, f"{where}.name", "a string")
    kind = tool.get("type")
    if kind not in (None, "custom"):  # a server tool (web_search_..., code_execution_...): kept as is
        return hub.Tool(name, extensions={NAME: tool})
    schema = tool.get("input_schema")
    _want(schema, dict, f"{where}.input_schema", "an object")
    description = tool.get("description")
    if description is not None:
        _want(description, str, f"{where}.description", "a string")
    strict = tool.get("strict")
    return hub.Tool(name, description, schema, strict, _extras(tool, ("name", "description", "input_schema", "strict")))


def _tool_choice(choice: Any, request: hub.Request) -> None:
    if choice is None:
        return
    _want(choice, dict, "tool_choice", "an object")
    kind = choice.get("type")
    modes = {"auto": "auto", "any": "required", "tool": "tool", "none": "none"}
    if kind not in modes:
        raise RequestError("expected 'auto', 'any', 'tool' or 'none'", "tool_choice.type")
    name = choice.get("name")
    if kind == "tool":
        _want(name, str, "tool_choice.name", "a string")
    request.tool_choice = hub.ToolChoice(modes[kind], name if kind == "tool" else None)
    if choice.get("disable_parallel_tool_use") is not None:
        request.parallel_tool_calls = not choice["disable_parallel_tool_use"]


def _content(content: Any, where: str, role: str) -> list[hub.Part]:
    if type(content) is str:
        return [hub.TextPart(content)]
    if type(content) is not list:
        raise RequestError("expected a string or a list", where)
    return [_part(block, f"{where}[{i}]", role) for i, block in enumerate(content)]


def _part(block: Any, where: str, role: str) -> hub.Part:
    _want(block, dict, where, "an object")
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if type(text) is not str:
            _want(text, str, f"{where}.text", "a string")
        # (two keys, "type" and "text": no extras to collect)
        return hub.TextPart(text, _extras(block, ("type", "text")) if len(block) > 2 else None)
    if kind in ("image", "document"):
        source = block.get("source")
        _want(source, dict, f"{where}.source", "an object")
        extras = _extras(block, ("type", "source", "title") if kind == "document" else ("type", "source"))
        source_type = source.get("type")
        if source_type == "base64":
            _want(source.get("data"), str, f"{where}.source.data", "a string")
            media, data, url = source.get("media_type"), source["data"], None
        elif source_type == "url":
            _want(source.get("url"), str, f"{where}.source.url", "a string")
            media, data, url = None, None, source["url"]
        elif source_type in ("text", "content", "file"):  # no hub field: the source travels as is
            media, data, url = source.get("media_type"), None, None
            extras = {NAME: {**(extras or {}).get(NAME, {}), "source": source}}
        else:
            raise RequestError("expected 'base64', 'url', 'text', 'content' or 'file'", f"{where}.source.type")
        if kind == "image":
            return hub.ImagePart(media, data, url, None, extras)
        return hub.FilePart(media or ("application/pdf" if data else None), data, url, block.get("title"), extras)
    if kind == "tool_use":
        _want(block.get("id"), str, f"{where}.id", "a string")
        _want(block.get("name"), str, f"{where}.name", "a string")
        args = block.get("input", {})
        _want(args, dict, f"{where}.input", "an object")
        return hub.ToolCallPart(
            block["id"], block["name"], json_encode(args).decode(), _extras(block, ("type", "id", "name", "input"))
        )
    if kind == "tool_result":
        _want(block.get("tool_use_id"), str, f"{where}.tool_use_id", "a string")
        inner = block.get("content")
        parts = [] if inner is None else _content(inner, f"{where}.content", role)
        extras = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content")}
        if type(inner) is list:
            extras[_BLOCKS] = True  # a list, even of one text block: sent back as a list
        error = bool(block.get("is_error", False))
        return hub.ToolResultPart(block["tool_use_id"], parts, error, extensions={NAME: extras} if extras else None)
    if kind == "thinking":
        _want(block.get("thinking"), str, f"{where}.thinking", "a string")
        signature = block.get("signature")
        return hub.ThinkingPart(block["thinking"], {NAME: {"signature": signature}} if signature else None)
    if kind == "redacted_thinking":
        _want(block.get("data"), str, f"{where}.data", "a string")
        return hub.ThinkingPart("", {NAME: {"redacted_data": block["data"]}})
    if type(kind) is not str:
        raise RequestError("expected a content block type", f"{where}.type")
    return hub.NativePart(NAME, block)  # server tool use and results, search results, containers ...


# --------------------------------------------------------------------------- encode


def encode_request(request: hub.Request) -> dict[str, Any]:
    body: dict[str, Any] = {"model": request.model or ""}
    system: list[dict[str, Any]] = []
    system_form = None
    turns: list[dict[str, Any]] = []
    for n, message in enumerate(request.messages):
        where = f"messages[{n}]"
        form = _own(message.extensions)
        if message.role == "system" and not form.get("in_messages"):
            # The system prompt: every system message but those an Anthropic client put inside
            # `messages` (Claude Code 2.1 does), which stay there; another dialect's later system
            # messages join it in order, as every Anthropic-compatible server takes that.
            system.extend(_blocks(message.parts, where, "user"))
            system_form = system_form or form.get("content")
            continue
        role = message.role if message.role in ("assistant", "system") else "user"
        blocks = _blocks(message.parts, where, role)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role and role != "system" and not form.get("turn"):
            last = turns[-1]  # Anthropic alternates roles: tool results join one user turn
            if type(last["content"]) is str:
                last["content"] = [{"type": "text", "text": last["content"]}]
            last["content"].extend(blocks)
        elif form.get("content") == "string" and len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
            turns.append({"role": role, "content": blocks[0]["text"]})
        else:
            turns.append({"role": role, "content": blocks})
    if system:
        plain = all(set(b) == {"type", "text"} for b in system) and system_form != "blocks"
        body["system"] = "\n\n".join(b["text"] for b in system) if plain else system
    body["messages"] = turns
    thinking = dict(request.thinking or {})
    effort = thinking.pop("effort", None)
    budget = thinking.get("budget_tokens")
    max_tokens = DEFAULT_MAX_TOKENS if request.max_tokens is None else request.max_tokens  # 0: only fill the cache
    if thinking.get("type") == "enabled" and type(budget) is not int:
        # Anthropic needs a budget (at least 1024, below max_tokens); another dialect's effort sets it.
        budget = EFFORT_BUDGET.get(effort, EFFORT_BUDGET["medium"])
        effort = None
        if request.max_tokens and budget >= request.max_tokens:
            budget = max(_MIN_BUDGET, request.max_tokens // 2)
        if request.max_tokens and budget >= request.max_tokens:
            thinking = {}  # no room to think within the client's limit
        else:
            thinking["budget_tokens"] = budget
    unsaid = request.max_tokens is None
    if thinking.get("type") == "enabled" and type(budget) is int and budget >= max_tokens and unsaid:
        max_tokens = budget + _ANSWER_ROOM
    body["max_tokens"] = max_tokens
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    for key in ("temperature", "top_p", "top_k"):
        if getattr(request, key) is not None:
            body[key] = getattr(request, key)
    if request.stream:
        body["stream"] = True
    user_id = request.metadata.get("user_id")
    if user_id is not None:
        body["metadata"] = {"user_id": user_id}
    if request.tools:
        body["tools"] = [_encode_tool(t) for t in request.tools]
    choice = _encode_tool_choice(request)
    if choice is not None:
        body["tool_choice"] = choice
    if thinking.get("type"):
        body["thinking"] = thinking
    config: dict[str, Any] = dict(request.extensions.get(_PREFIX + "output_config") or {})
    if effort == "none":
        body.setdefault("thinking", {"type": "disabled"})
    elif effort is not None:
        config["effort"] = hub.effort_for("anthropic", effort)
    fmt = request.response_format
    if fmt and fmt.get("type") == "json_schema" and type(fmt.get("schema")) is dict:
        if request.extensions.get(_PREFIX + "output_format"):
            body["output_format"] = {"type": "json_schema", "schema": fmt["schema"]}
        else:
            config["format"] = {"type": "json_schema", "schema": fmt["schema"]}
    if config:
        body["output_config"] = config
    if request.service_tier is not None:
        body["service_tier"] = _TIER_OUT.get(request.service_tier, request.service_tier)
    for key, value in request.extensions.items():
        name = key[len(_PREFIX) :]
        if key.startswith(_PREFIX) and not name.startswith("$") and name not in ("output_config", "output_format"):
            body.setdefault(name, value)
    order = request.extensions.get(ORDER)
    if type(order) is list:  # the client's key order first, then what the hub added
        rank = {key: n for n, key in enumerate(order)}
        body = dict(sorted(body.items(), key=lambda item: rank.get(item[0], len(rank))))
    return body


def _encode_tool(tool: hub.Tool) -> dict[str, Any]:
    own = (tool.extensions or {}).get(NAME)
    if type(own) is dict and own.get("type") not in (None, "custom"):
        return dict(own)
    out: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        out["description"] = tool.description
    out["input_schema"] = tool.parameters
    if tool.strict is not None:
        out["strict"] = tool.strict
    if type(own) is dict:
        out.update((k, v) for k, v in own.items() if k not in out)
    return out


def _encode_tool_choice(request: hub.Request) -> dict[str, Any] | None:
    choice = request.tool_choice
    out: dict[str, Any] | None = None
    if choice is not None:
        kind = {"auto": "auto", "required": "any", "tool": "tool", "none": "none"}.get(choice.mode, "auto")
        out = {"type": kind}
        if kind == "tool":
            out["name"] = choice.name or ""
    if request.parallel_tool_calls is not None and (out is None or out["type"] != "none"):
        out = out or {"type": "auto"}
        out["disable_parallel_tool_use"] = not request.parallel_tool_calls
    return out


def _own(extensions: dict[str, Any] | None) -> dict[str, Any]:
    own = (extensions or {}).get(NAME)
    return own if type(own) is dict else {}


def _blocks(parts: list[hub.Part], where: str, role: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        kind = type(part)
        if kind is hub.TextPart:
            if part.text:  # Anthropic rejects empty text blocks
                out.append({"type": "text", "text": part.text, **_own(part.extensions)})
        elif kind is hub.ImagePart or kind is hub.FilePart:
            if not _audio(part):  # Anthropic takes no audio: left out (dialects.fields reports it)
                out.append(_media(part, f"{where}.content[{i}]"))
        elif kind is hub.ToolCallPart:
            try:
                args = json_decode(part.arguments) if part.arguments.strip() else {}
            except ValueError:
                raise RequestError("tool call arguments are not JSON", f"{where}.tool_calls[{i}]") from None
            if type(args) is not dict:
                raise RequestError("tool call arguments are not a JSON object", f"{where}.tool_calls[{i}]")
            out.append({"type": "tool_use", "id": part.id, "name": part.name, "input": args, **_own(part.fidelity)})
        elif kind is hub.ToolResultPart:
            content = _blocks(part.content, f"{where}.content[{i}]", role)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.tool_call_id}
            own = dict(_own(getattr(part, "extensions", None)))  # (mypy cannot narrow `kind is`)
            as_list = own.pop(_BLOCKS, False)
            if len(content) == 1 and set(content[0]) == {"type", "text"} and not as_list:
                block["content"] = content[0]["text"]
            elif content or as_list:
                block["content"] = content
            if part.is_error:
                block["is_error"] = True
            block.update((k, v) for k, v in own.items() if k not in block)
            out.append(block)
        elif kind is hub.ThinkingPart:
            own = _own(part.fidelity)
            if own.get("redacted_data") is not None:
                out.append({"type": "redacted_thinking", "data": own["redacted_data"]})
            elif own.get("signature"):
                out.append({"type": "thinking", "thinking": part.text, "signature": own["signature"]})
            # Thinking without an Anthropic signature is left out: the API rejects unsigned thinking.
        elif kind is hub.NativePart and part.namespace == NAME and type(part.data) is dict:
            out.append(part.data)
        # Another vendor's native blocks mean nothing to Anthropic and are left out.
    return out


def _audio(part: hub.Part) -> bool:
    media = getattr(part, "media_type", None) or ""
    url = getattr(part, "url", None) or ""
    return type(part) is hub.FilePart and (media.startswith("audio/") or url.startswith("data:audio/"))


def _media(part: hub.ImagePart | hub.FilePart, where: str) -> dict[str, Any]:
    own = dict(_own(part.extensions))
    source = own.pop("source", None)
    image = type(part) is hub.ImagePart
    media = part.media_type
    data, url = part.data, part.url
    if url and url.startswith("data:"):  # data URLs (OpenAI style) become base64 sources
        head, _, data = url.partition(",")
        media = head[5:].split(";")[0] or media
        if ";base64" not in head:
            data = base64.b64encode(data.encode()).decode()
        url = None
    if source is None:
        if data is not None:
            if not image and media and media.startswith("text/"):
                source = {
                    "type": "text",
                    "media_type": "text/plain",
                    "data": base64.b64decode(data).decode("utf-8", "replace"),
                }
            else:
                source = {
                    "type": "base64",
                    "media_type": media or ("image/png" if image else "application/pdf"),
                    "data": data,
                }
        elif url:
            source = {"type": "url", "url": url}
        else:
            raise RequestError("expected data or a url", where)
    block: dict[str, Any] = {"type": "image" if image else "document", "source": source}
    if not image and part.name:
        block["title"] = part.name
    block.update((k, v) for k, v in own.items() if k not in block)
    return block
