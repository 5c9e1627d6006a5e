"""Gemini ``GenerateContentRequest`` bodies <-> hub requests, and the upstream endpoint."""

from __future__ import annotations

import json
import mimetypes
import re
from typing import Any

from ... import hub
from ...errors import RequestError
from ..fields import server_tool_type
from ._common import NAME

_IMAGE = "image/"

# generationConfig keys the hub models; the rest travel in extensions["gemini:generationConfig"].
_GEN_KEYS = frozenset(
    (
        "temperature",
        "topP",
        "topK",
        "maxOutputTokens",
        "stopSequences",
        "seed",
        "candidateCount",
        "presencePenalty",
        "frequencyPenalty",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "thinkingConfig",
    )
)
# Top-level keys handled here; any other travels as extensions["gemini:<key>"].
_TOP_KEYS = frozenset(("contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"))


def _snake_to_camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _camel(obj: Any) -> Any:
    """The REST API takes snake_case too (proto JSON); normalise object keys to camelCase.
    Values under ``args``, ``response``, schemas and ``parameters`` are user data: left alone."""
    if isinstance(obj, list):
        return [_camel(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        key = _snake_to_camel(k) if "_" in k else k
        user_data = key in (
            "args",
            "response",
            "responseSchema",
            "responseJsonSchema",
            "parameters",
            "parametersJsonSchema",
            "response_schema",
            "labels",
        )
        out[key] = v if user_data else _camel(v)
    return out


def _schema_to_json_schema(schema: Any) -> Any:
    """Gemini's OpenAPI ``Schema`` (types in capitals) -> JSON Schema (types in lower case)."""
    if isinstance(schema, list):
        return [_schema_to_json_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "type" and isinstance(v, str):
            out[k] = v.lower()
        elif k in ("properties", "$defs", "definitions") and isinstance(v, dict):
            out[k] = {name: _schema_to_json_schema(s) for name, s in v.items()}
        elif k in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[k] = _schema_to_json_schema(v)
        else:
            out[k] = v
    return out


# --------------------------------------------------------------------------- decode


def _texts_of(content: Any, field: str) -> list[hub.Part]:
    """The text parts of a ``Content`` (or a plain string), one hub part each, so a Gemini
    upstream gets them back as they came (and other targets see where one ends)."""
    if isinstance(content, str):
        return [hub.TextPart(content)]
    if not isinstance(content, dict):
        raise RequestError("expected an object with parts", field)
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise RequestError("expected a list", f"{field}.parts")
    return [hub.TextPart(p["text"]) for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _media(blob: Any, field: str, url: bool) -> hub.ImagePart | hub.FilePart:
    if not isinstance(blob, dict):
        raise RequestError("expected an object", field)
    mime = blob.get("mimeType")
    if url:
        if not isinstance(blob.get("fileUri"), str):
            raise RequestError("expected a string", f"{field}.fileUri")
        data, link = None, blob["fileUri"]
    else:
        if not isinstance(blob.get("data"), str):
            raise RequestError("expected a base64 string", f"{field}.data")
        data, link = blob["data"], None
    extra = {k: v for k, v in blob.items() if k not in ("mimeType", "data", "fileUri")}
    extensions = {NAME: extra} if extra else None
    if isinstance(mime, str) and mime.startswith(_IMAGE):
        return hub.ImagePart(media_type=mime, data=data, url=link, extensions=extensions)
    name = extra.pop("displayName", None) if extra else None
    return hub.FilePart(media_type=mime, data=data, url=link, name=name, extensions={NAME: extra} if extra else None)


def _response_content(resp: Any, fr: dict, field: str) -> tuple[list[hub.Part], bool]:
    """``functionResponse.response`` (+ multimodal ``parts``) -> hub parts and is_error."""
    is_error = False
    if isinstance(resp, dict) and len(resp) == 1 and ("output" in resp or "error" in resp):
        is_error = "error" in resp
        value = next(iter(resp.values()))
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(resp if resp is not None else {}, ensure_ascii=False)
    parts: list[hub.Part] = [hub.TextPart(text)]
    for j, p in enumerate(fr.get("parts") or ()):
        if isinstance(p, dict) and "inlineData" in p:
            parts.append(_media(p["inlineData"], f"{field}.parts[{j}].inlineData", False))
        elif isinstance(p, dict) and "fileData" in p:
            parts.append(_media(p["fileData"], f"{field}.parts[{j}].fileData", True))
    return parts, is_error


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    if not isinstance(body, dict):
        raise RequestError("expected a JSON object")
    body = _camel(body)
    req = hub.Request(model=model or body.get("model"))
    if isinstance(req.model, str) and req.model.startswith("models/"):
        req.model = req.model[len("models/") :]
    system = body.get("systemInstruction")
    if system is not None:
        req.messages.append(hub.Message("system", _texts_of(system, "systemInstruction")))
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise RequestError("expected a list", "contents")
    calls: list[tuple[str, str]] = []  # (id, name) of tool calls so far, to pair functionResponses
    answered: set[str] = set()
    n_calls = 0
    for i, content in enumerate(contents):
        field = f"contents[{i}]"
        if not isinstance(content, dict):
            raise RequestError("expected an object", field)
        role = content.get("role", "user")
        if role not in ("user", "model", "function"):
            raise RequestError(f"unknown role {role!r}; expected 'user' or 'model'", f"{field}.role")
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise RequestError("expected a list", f"{field}.parts")
        msg = hub.Message("assistant" if role == "model" else "user")
        results: list[hub.Part] = []
        for j, p in enumerate(parts):
            pf = f"{field}.parts[{j}]"
            if not isinstance(p, dict):
                raise RequestError("expected an object", pf)
            sig = p.get("thoughtSignature")
            fidelity = {NAME: {"thoughtSignature": sig}} if sig is not None else None
            if "text" in p:
                if not isinstance(p["text"], str):
                    raise RequestError("expected a string", f"{pf}.text")
                if p.get("thought"):
                    msg.parts.append(hub.ThinkingPart(p["text"], fidelity))
                else:
                    msg.parts.append(hub.TextPart(p["text"], fidelity))
            elif "inlineData" in p:
                msg.parts.append(_media(p["inlineData"], f"{pf}.inlineData", False))
            elif "fileData" in p:
                msg.parts.append(_media(p["fileData"], f"{pf}.fileData", True))
            elif "functionCall" in p:
                fc = p["functionCall"]
                if not isinstance(fc, dict) or not isinstance(fc.get("name"), str):
                    raise RequestError("expected an object with a name", f"{pf}.functionCall")
                args = fc.get("args", {})
                if not isinstance(args, dict):
                    raise RequestError("expected an object", f"{pf}.functionCall.args")
                n_calls += 1
                call_id = fc.get("id") or f"call_{n_calls}"
                if not fc.get("id"):  # an id of ours, for the hub: not sent back to Gemini
                    fidelity = {NAME: {**(fidelity or {}).get(NAME, {}), "synthetic_id": True}}
                calls.append((call_id, fc["name"]))
                msg.parts.append(hub.ToolCallPart(call_id, fc["name"], json.dumps(args, ensure_ascii=False), fidelity))
            elif "functionResponse" in p:
                fr = p["functionResponse"]
                if not isinstance(fr, dict) or not isinstance(fr.get("name"), str):
                    raise RequestError("expected an object with a name", f"{pf}.functionResponse")
                call_id = fr.get("id")
                if not call_id:  # pair with the oldest unanswered call of that name
                    call_id = next((c for c, n in calls if n == fr["name"] and c not in answered), None)
                    call_id = call_id or f"call_{fr['name']}"
                answered.add(call_id)
                content_parts, is_error = _response_content(fr.get("response"), fr, pf)
                synthetic = None if fr.get("id") else {NAME: {"synthetic_id": True}}
                results.append(hub.ToolResultPart(call_id, content_parts, is_error, fr["name"], synthetic))
            else:
                msg.parts.append(hub.NativePart(NAME, p))
        if results:
            req.messages.append(hub.Message("tool", results))
        if msg.parts:
            req.messages.append(msg)
    _decode_tools(body, req)
    _decode_generation(body, req)
    for key, value in body.items():
        if key not in _TOP_KEYS:
            req.extensions[f"{NAME}:{key}"] = value
    return req


def _decode_tools(body: dict, req: hub.Request) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestError("expected a list", "tools")
        other = []
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise RequestError("expected an object", f"tools[{i}]")
            decls = tool.get("functionDeclarations")
            if decls is None:
                other.append(tool)
                continue
            if not isinstance(decls, list):
                raise RequestError("expected a list", f"tools[{i}].functionDeclarations")
            for j, d in enumerate(decls):
                if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                    raise RequestError("expected an object with a name", f"tools[{i}].functionDeclarations[{j}]")
                extra = {
                    k: v for k, v in d.items() if k not in ("name", "description", "parameters", "parametersJsonSchema")
                }
                if "parametersJsonSchema" in d:
                    params = d["parametersJsonSchema"]
                elif "parameters" in d:
                    params = _schema_to_json_schema(d["parameters"])
                    extra["schemaField"] = "parameters"
                else:
                    params = {"type": "object", "properties": {}}
                req.tools.append(
                    hub.Tool(d["name"], d.get("description"), params, extensions={NAME: extra} if extra else None)
                )
            rest = {k: v for k, v in tool.items() if k != "functionDeclarations"}
            if rest:
                other.append(rest)
        if other:
            req.extensions[f"{NAME}:tools"] = other
    config = body.get("toolConfig")
    if config is not None:
        if not isinstance(config, dict):
            raise RequestError("expected an object", "toolConfig")
        fcc = config.get("functionCallingConfig")
        if fcc is not None:
            if not isinstance(fcc, dict):
                raise RequestError("expected an object", "toolConfig.functionCallingConfig")
            mode = fcc.get("mode", "AUTO")
            names = fcc.get("allowedFunctionNames") or []
            if mode == "AUTO" or mode == "MODE_UNSPECIFIED":
                req.tool_choice = hub.ToolChoice("auto")
            elif mode == "NONE":
                req.tool_choice = hub.ToolChoice("none")
            elif mode in ("ANY", "VALIDATED"):
                if len(names) == 1 and mode == "ANY":
                    req.tool_choice = hub.ToolChoice("tool", names[0])
                else:
                    req.tool_choice = hub.ToolChoice("required")
                    if names or mode != "ANY":
                        req.extensions[f"{NAME}:functionCallingConfig"] = fcc
            else:
                raise RequestError(f"unknown mode {mode!r}", "toolConfig.functionCallingConfig.mode")
        rest = {k: v for k, v in config.items() if k != "functionCallingConfig"}
        if rest:
            req.extensions[f"{NAME}:toolConfig"] = rest


def _decode_generation(body: dict, req: hub.Request) -> None:
    gen = body.get("generationConfig")
    if gen is None:
        return
    if not isinstance(gen, dict):
        raise RequestError("expected an object", "generationConfig")
    for key, attr, kind in (
        ("temperature", "temperature", (int, float)),
        ("topP", "top_p", (int, float)),
        ("topK", "top_k", (int, float)),
        ("maxOutputTokens", "max_tokens", int),
        ("seed", "seed", int),
        ("candidateCount", "n", int),
        ("presencePenalty", "presence_penalty", (int, float)),
        ("frequencyPenalty", "frequency_penalty", (int, float)),
    ):
        if key in gen:
            value = gen[key]
            if isinstance(value, bool) or not isinstance(value, kind):
                raise RequestError("expected a number", f"generationConfig.{key}")
            setattr(req, attr, int(value) if attr == "top_k" else value)
    stops = gen.get("stopSequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise RequestError("expected a list of strings", "generationConfig.stopSequences")
        req.stop = list(stops)
    mime = gen.get("responseMimeType")
    if "responseJsonSchema" in gen:
        req.response_format = {"type": "json_schema", "schema": gen["responseJsonSchema"]}
    elif "responseSchema" in gen:
        req.response_format = {"type": "json_schema", "schema": _schema_to_json_schema(gen["responseSchema"])}
        req.extensions[f"{NAME}:schemaField"] = "responseSchema"
    elif mime == "application/json":
        req.response_format = {"type": "json_object"}
    elif mime is not None and mime != "text/plain":
        req.extensions[f"{NAME}:responseMimeType"] = mime
    thinking = gen.get("thinkingConfig")
    if thinking is not None:
        if not isinstance(thinking, dict):
            raise RequestError("expected an object", "generationConfig.thinkingConfig")
        budget = thinking.get("thinkingBudget")
        level = thinking.get("thinkingLevel")
        out: dict[str, Any] = {}
        if budget == 0:
            out["type"] = "disabled"
        elif isinstance(budget, int) and budget > 0:
            out = {"type": "enabled", "budget_tokens": budget}
        elif budget == -1 or level is not None or thinking.get("includeThoughts"):
            out["type"] = "adaptive"
        if isinstance(level, str):
            out["effort"] = level.lower()
        req.thinking = out or None
        # None: the client did not say, so a Gemini upstream is not told either
        req.extensions[f"{NAME}:includeThoughts"] = thinking.get("includeThoughts")
        if budget == -1:
            req.extensions[f"{NAME}:dynamicBudget"] = True
    rest = {k: v for k, v in gen.items() if k not in _GEN_KEYS}
    if rest:
        req.extensions[f"{NAME}:generationConfig"] = rest


# --------------------------------------------------------------------------- encode


def _media_part(p: hub.ImagePart | hub.FilePart) -> dict:
    extra = dict((p.extensions or {}).get(NAME) or {})
    if isinstance(p, hub.FilePart) and p.name:
        extra.setdefault("displayName", p.name)
    if p.data is not None:
        return {"inlineData": {"mimeType": p.media_type or "application/octet-stream", "data": p.data, **extra}}
    if p.url is not None and p.url.startswith("data:"):
        head, _, data = p.url.partition(",")
        mime = head[5:].split(";")[0] or p.media_type or "application/octet-stream"
        return {"inlineData": {"mimeType": mime, "data": data, **extra}}
    out = {"fileUri": p.url or "", **extra}
    if p.media_type:
        out = {"mimeType": p.media_type, **out}
    elif isinstance(p, hub.ImagePart):  # Gemini needs the type of a fileData; most dialects send none with a URL
        out = {"mimeType": _image_type_of_url(p.url or ""), **out}
    return {"fileData": out}


def _image_type_of_url(url: str) -> str:
    """The image MIME type a URL's extension names; JPEG (the usual photo) when it names none."""
    guessed = mimetypes.guess_type(url.split("?", 1)[0])[0]
    return guessed if guessed and guessed.startswith("image/") else "image/jpeg"


def _response_of(part: hub.ToolResultPart) -> tuple[dict, list[dict]]:
    text = "".join(p.text for p in part.content if isinstance(p, hub.TextPart))
    media = [_media_part(p) for p in part.content if isinstance(p, (hub.ImagePart, hub.FilePart))]
    if part.is_error:
        return {"error": text}, media
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return (value if isinstance(value, dict) else {"output": text}), media


def _sig_of(fidelity: dict | None) -> str | None:
    ours = (fidelity or {}).get(NAME)
    return ours.get("thoughtSignature") if isinstance(ours, dict) else None


def encode_request(request: hub.Request) -> dict:
    body: dict[str, Any] = {}
    contents: list[dict] = []
    system: list[dict] = []
    names: dict[str, str] = {}  # tool call id -> name
    for i, msg in enumerate(request.messages):
        if msg.role == "system":
            system.extend({"text": p.text} for p in msg.parts if isinstance(p, hub.TextPart))
            continue
        role = "model" if msg.role == "assistant" else "user"
        parts: list[dict] = []
        for j, p in enumerate(msg.parts):
            if isinstance(p, hub.TextPart):
                part: dict[str, Any] = {"text": p.text}
                sig = _sig_of(p.extensions)
                if sig is not None:
                    part["thoughtSignature"] = sig
                parts.append(part)
            elif isinstance(p, hub.ThinkingPart):
                if role != "model":
                    continue
                part = {"text": p.text, "thought": True}
                sig = _sig_of(p.fidelity)
                if sig is not None:
                    part["thoughtSignature"] = sig
                elif not p.text:
                    continue  # another vendor's redacted/encrypted thinking: nothing Gemini can use
                parts.append(part)
            elif isinstance(p, hub.ToolCallPart):
                names[p.id] = p.name
                try:
                    args = json.loads(p.arguments) if p.arguments.strip() else {}
                except ValueError:
                    raise RequestError("arguments are not valid JSON", f"messages[{i}].parts[{j}].arguments") from None
                if not isinstance(args, dict):
                    raise RequestError("arguments must be a JSON object", f"messages[{i}].parts[{j}].arguments")
                part = {"functionCall": {"name": p.name, "args": args, "id": p.id}}
                if ((p.fidelity or {}).get(NAME) or {}).get("synthetic_id"):
                    del part["functionCall"]["id"]  # the client sent none
                sig = _sig_of(p.fidelity)
                if sig is not None:
                    part["thoughtSignature"] = sig
                parts.append(part)
            elif isinstance(p, hub.ToolResultPart):
                name = p.name or names.get(p.tool_call_id)
                if not name:
                    raise RequestError(
                        f"tool result for unknown call {p.tool_call_id!r}: Gemini needs the tool name",
                        f"messages[{i}].parts[{j}]",
                    )
                response, media = _response_of(p)
                fr: dict[str, Any] = {"name": name, "response": response, "id": p.tool_call_id}
                if ((p.extensions or {}).get(NAME) or {}).get("synthetic_id"):
                    del fr["id"]  # the client sent none
                if media:
                    fr["parts"] = media
                parts.append({"functionResponse": fr})
                role = "user"
            elif isinstance(p, (hub.ImagePart, hub.FilePart)):
                parts.append(_media_part(p))
            elif isinstance(p, hub.NativePart) and p.namespace == NAME:
                parts.append(p.data)
            # Other vendors' native blocks (server tool calls) have no Gemini form: left out.
        if not parts:
            continue
        if (
            msg.role == "tool"
            and contents
            and contents[-1]["role"] == "user"
            and all("functionResponse" in q for q in contents[-1]["parts"])
        ):
            contents[-1]["parts"].extend(parts)  # parallel results answer in one content
        else:
            contents.append({"role": role, "parts": parts})
    if _needs_signatures(request.model):
        for content in contents:
            calls = [p for p in content["parts"] if "functionCall" in p] if content["role"] == "model" else []
            if calls and not any("thoughtSignature" in p for p in calls):
                # Gemini 3 rejects replayed calls without a signature (HTTP 400); calls that came from
                # another vendor have none, so send Google's documented sentinel on the first one.
                calls[0]["thoughtSignature"] = SKIP_SIGNATURE
    body["contents"] = contents
    if system:
        body["systemInstruction"] = {"parts": system}
    ext = request.extensions
    tools: list[dict] = []
    if request.tools:
        decls = []
        for t in request.tools:
            if server_tool_type(t, NAME) is not None:
                continue  # another vendor's server tool (Anthropic web_search_...): left out, reported
            extra = dict((t.extensions or {}).get(NAME) or {})
            field = extra.pop("schemaField", "parametersJsonSchema")
            d: dict[str, Any] = {"name": t.name}
            if t.description is not None:
                d["description"] = t.description
            d[field] = t.parameters
            d.update(extra)
            decls.append(d)
        if decls:
            tools.append({"functionDeclarations": decls})
    tools.extend(ext.get(f"{NAME}:tools") or ())
    if tools:
        body["tools"] = tools
    tool_config = dict(ext.get(f"{NAME}:toolConfig") or {})
    if request.tool_choice is not None:
        tc = request.tool_choice
        fcc = ext.get(f"{NAME}:functionCallingConfig")
        if tc.mode == "none":
            fcc = {"mode": "NONE"}
        elif tc.mode == "tool":
            fcc = {"mode": "ANY", "allowedFunctionNames": [tc.name]}
        elif tc.mode == "required":
            fcc = fcc if isinstance(fcc, dict) else {"mode": "ANY"}
        else:
            fcc = {"mode": "AUTO"}
        tool_config["functionCallingConfig"] = fcc
    if tool_config:
        body["toolConfig"] = tool_config
    gen = _encode_generation(request)
    if gen:
        body["generationConfig"] = gen
    for key, value in ext.items():
        name, _, field = key.partition(":")
        if name == NAME and field not in (
            "tools",
            "toolConfig",
            "functionCallingConfig",
            "generationConfig",
            "schemaField",
            "includeThoughts",
            "responseMimeType",
            "dynamicBudget",
        ):
            body[field] = value
    return body


SKIP_SIGNATURE = "skip_thought_signature_validator"
_MAJOR = re.compile(r"gemini-(\d+)")


def _needs_signatures(model: str | None) -> bool:
    m = _MAJOR.search(model or "")
    return m is not None and int(m.group(1)) >= 3


def _encode_generation(request: hub.Request) -> dict:
    ext = request.extensions
    gen: dict[str, Any] = {}
    for attr, key in (
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("top_k", "topK"),
        ("max_tokens", "maxOutputTokens"),
        ("seed", "seed"),
        ("n", "candidateCount"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ):
        value = getattr(request, attr)
        if value is not None:
            gen[key] = value
    if request.stop:
        gen["stopSequences"] = list(request.stop)
    rf = request.response_format
    if rf is not None:
        if rf.get("type") == "json_schema" and rf.get("schema") is not None:
            gen["responseMimeType"] = "application/json"
            field = ext.get(f"{NAME}:schemaField", "responseJsonSchema")
            gen[field] = rf["schema"]
        elif rf.get("type") in ("json_object", "json_schema"):
            gen["responseMimeType"] = "application/json"
    elif ext.get(f"{NAME}:responseMimeType"):
        gen["responseMimeType"] = ext[f"{NAME}:responseMimeType"]
    th = request.thinking
    if th is not None:
        tc: dict[str, Any] = {}
        kind = th.get("type")
        # Gemini takes a budget or a level, never both (400): a budget when the client gave one,
        # else the effort word as a level (the hub's one effort table), else -1 (dynamic) for
        # adaptive thinking.
        effort = th.get("effort")
        if kind == "disabled" or effort == "none":
            tc["thinkingBudget"] = 0
        elif th.get("budget_tokens") is not None:
            tc["thinkingBudget"] = th["budget_tokens"]
        elif type(effort) is str and effort:
            tc["thinkingLevel"] = str(hub.effort_for("gemini", effort)).upper()
        elif kind == "adaptive" and (f"{NAME}:includeThoughts" not in ext or ext.get(f"{NAME}:dynamicBudget")):
            tc["thinkingBudget"] = -1
        include = ext.get(f"{NAME}:includeThoughts", kind != "disabled")
        if include is not None and (kind != "disabled" or f"{NAME}:includeThoughts" in ext):
            tc["includeThoughts"] = include
        if tc:
            gen["thinkingConfig"] = tc
    for k, v in (ext.get(f"{NAME}:generationConfig") or {}).items():
        gen.setdefault(k, v)
    return gen
