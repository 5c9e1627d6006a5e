"""The ``cohere-v2`` dialect: Cohere's v2 Chat API (``POST /v2/chat``).

Streams are SSE events named by their ``type``: ``message-start``, ``content-start``/
``-delta``/``-end`` (text and thinking content, numbered by ``index``), ``tool-plan-delta``
(the model's plan before tool calls; no start or end event), ``tool-call-start``/``-delta``/
``-end`` (numbered separately from content), ``citation-start``/``-end`` and ``message-end``
(``finish_reason``, ``usage``), the terminal event.  See docs/dialects/more.md.

Hub mapping: the tool plan is a thinking block with fidelity ``{"cohere-v2": {"tool_plan":
true}}`` (it is the model's reasoning about which tools to call); citations are
``Extension("cohere-v2", citation, index=<its content block>)``; billed units ride in
``Usage.extensions["cohere-v2"]``.
"""

from __future__ import annotations

from typing import Any

from .. import hub, sse
from ..errors import RequestError
from . import _bridge as br
from ._carrying import WIRE_KINDS, CarriedDecoding, CarryingEncoder
from .base import EXTENSION_KEY, SSEStreamDecoder, json_encode

__all__ = [
    "FINISH_TO_HUB",
    "FINISH_TO_WIRE",
    "NAME",
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
    "usage_from_wire",
    "usage_to_wire",
]

NAME = "cohere-v2"
STREAM_CONTENT_TYPE = "text/event-stream"

FINISH_TO_HUB = {
    "COMPLETE": "end_turn",
    "STOP_SEQUENCE": "stop_sequence",
    "MAX_TOKENS": "max_tokens",
    "TOOL_CALL": "tool_use",
    "ERROR": "error",
    "ERROR_TOXIC": "content_filter",
    "ERROR_LIMIT": "max_tokens",
    "TIMEOUT": "other",
    "USER_CANCEL": "other",
}
FINISH_TO_WIRE = {
    "end_turn": "COMPLETE",
    "stop_sequence": "STOP_SEQUENCE",
    "max_tokens": "MAX_TOKENS",
    "tool_use": "TOOL_CALL",
    "error": "ERROR",
    "content_filter": "ERROR_TOXIC",
}
_PLAN = {NAME: {"tool_plan": True}}


def _is_plan(fidelity: dict[str, Any] | None) -> bool:
    own = fidelity.get(NAME) if fidelity else None
    return type(own) is dict and own.get("tool_plan") is True


def usage_from_wire(raw: Any) -> hub.Usage:
    if type(raw) is not dict:
        return hub.Usage()
    tokens = br.obj_at(raw, "tokens")
    extra = {k: v for k, v in raw.items() if k not in ("tokens", "cached_tokens")}
    return hub.Usage(
        input_tokens=tokens.get("input_tokens"),
        output_tokens=tokens.get("output_tokens"),
        cache_read_tokens=raw.get("cached_tokens"),
        extensions={NAME: extra} if extra else None,
    )


def usage_to_wire(usage: hub.Usage) -> tuple[dict[str, Any], dict[str, Any] | None]:
    own, others = br.split_own(usage.extensions, NAME)
    wire: dict[str, Any] = dict(own)
    tokens = {
        k: v for k, v in (("input_tokens", usage.input_tokens), ("output_tokens", usage.output_tokens)) if v is not None
    }
    if tokens:
        wire["tokens"] = tokens
    if usage.cache_read_tokens is not None:
        wire["cached_tokens"] = usage.cache_read_tokens
    rest = br.rest_fields(usage, {"input_tokens", "output_tokens", "cache_read_tokens", "extensions"}) or {}
    if others:
        rest["extensions"] = others
    return wire, rest or None


# --------------------------------------------------------------------------- stream decoder


class StreamDecoder(CarriedDecoding, SSEStreamDecoder):
    """cohere-v2 SSE events (``message-start`` ... ``message-end``) to hub events.

    Terminal rule: ``message-end`` ends the stream (with a hub ``Error`` when its
    ``finish_reason`` is ``ERROR`` or an ``error`` event came); input that stops first gives
    ``truncated`` and ``Error(incomplete_stream)``.  Refuses, recording a violation: data
    that is not a JSON object (``json``, ``json-object``), unknown event types
    (``unknown-event``), events before ``message-start`` (``start-first``), a second one
    (``start-once``), blocks not open or started twice (``block-open``, ``block-unique``),
    anything after ``message-end`` (``after-terminal``).
    """

    dialect = NAME
    FIRST_EVENT = "message-start"
    LAST_EVENT = "message-end"

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._next = 0  # next hub block index
        self._content: dict[int, int] = {}  # wire content index -> hub index (open blocks)
        self._tools: dict[int, int] = {}
        self._by_content: dict[int, int] = {}  # every content block seen, for citations
        self._plan: int | None = None  # hub index of the open tool-plan block
        self._tool_calls = False

    def on_event(self, event: sse.Event) -> None:
        data = self.parse_json(event)
        if data is None:
            return
        if type(data) is not dict:
            self.violation("json-object", "event data is not a JSON object")
            return
        kind = data.get("type") or event.event
        ext = br.obj_at(data, EXTENSION_KEY)
        if kind != "message-start":
            self._ensure_start()
        if ext:
            self._emit_carried(ext)
        if kind != "tool-plan-delta" and self._plan is not None:
            self._close_plan(None)
        delta = br.obj_at(data, "delta")
        message = br.obj_at(delta, "message")
        index = data.get("index")
        if kind == "content-delta":
            hub_index = self._content.get(index)
            content = br.obj_at(message, "content")
            text = content.get("text", content.get("thinking"))
            if hub_index is None:
                self.violation("block-open", f"content-delta for content {index}, which is not open")
            elif type(text) is str and text:
                self.emit(hub.Delta(hub_index, text))
        elif kind == "tool-call-delta":
            hub_index = self._tools.get(index)
            call = br.obj_at(message, "tool_calls")
            function = br.obj_at(call, "function")
            arguments = function.get("arguments")
            if hub_index is None:
                self.violation("block-open", f"tool-call-delta for tool call {index}, which is not open")
            elif type(arguments) is str and arguments:
                self.emit(hub.Delta(hub_index, arguments))
        elif kind == "tool-plan-delta":
            self._plan_delta(message.get("tool_plan"), ext)
        elif kind == "content-start":
            self._content_start(index, message.get("content"), ext)
        elif kind == "tool-call-start":
            self._tool_start(index, message.get("tool_calls"), ext)
        elif kind in ("content-end", "tool-call-end"):
            table = self._content if kind == "content-end" else self._tools
            hub_index = table.pop(index, None)
            if hub_index is None:
                self.violation("block-open", f"{kind} for {index}, which is not open")
            else:
                self._emit_stop(hub_index, ext.get("stop"))
        elif kind == "citation-start":
            self._citation(message.get("citations"), ext)
        elif kind == "citation-end":
            pass
        elif kind == "message-start":
            self._message_start(data, message, ext)
        elif kind == "message-end":
            self._message_end(delta, ext)
        elif kind == "error" or ("error" in data and kind not in ("debug",)):
            self._error(data)
        elif kind != "debug":
            self.violation("unknown-event", f"unknown event type {kind!r}")

    def _message_start(self, data: dict[str, Any], message: dict[str, Any], ext: dict[str, Any]) -> None:
        if self._started:
            self.violation("start-once", "second message-start")
            return
        self._started = True
        start = br.apply_start(hub.ResponseStart(id=data.get("id")), ext.get("start"))
        self.emit(start)
        plan = message.get("tool_plan")
        if type(plan) is str and plan:
            self._plan_delta(plan, {})

    def _open(self, kind: str, ext: dict[str, Any], **fields: Any) -> int:
        info = self._block_fields(ext, fields)
        index = br.hub_index(info, self._next)
        self._next += 1
        fields["fidelity"] = hub.merge_dicts(fields.get("fidelity"), info.get("fidelity"))
        self.emit(hub.BlockStart(index, info.get("kind", kind), **fields))
        return index

    def _content_start(self, index: Any, content: Any, ext: dict[str, Any]) -> None:
        content = content if type(content) is dict else {}
        kind = "thinking" if content.get("type") == "thinking" else "text"
        if index in self._content:
            self.violation("block-unique", f"content {index} started twice")
        hub_index = self._open(kind, ext)
        self._content[index] = self._by_content[index] = hub_index
        text = content.get("text", content.get("thinking"))
        if type(text) is str and text:
            self.emit(hub.Delta(hub_index, text))

    def _tool_start(self, index: Any, call: Any, ext: dict[str, Any]) -> None:
        call = call if type(call) is dict else {}
        function = br.obj_at(call, "function")
        if index in self._tools:
            self.violation("block-unique", f"tool call {index} started twice")
        call_id = call.get("id") or f"call_{self.event_number}"
        hub_index = self._open("tool_call", ext, id=call_id, name=function.get("name"))
        self._tools[index] = hub_index
        self._tool_calls = True
        arguments = function.get("arguments")
        if type(arguments) is str and arguments:
            self.emit(hub.Delta(hub_index, arguments))

    def _plan_delta(self, text: Any, ext: dict[str, Any]) -> None:
        if "block" in ext and self._plan is not None:
            self._close_plan(None)
        if self._plan is None:
            self._plan = self._open("thinking", ext, fidelity=_PLAN)
        if type(text) is str and text:
            self.emit(hub.Delta(self._plan, text))
        if "stop" in ext:
            self._close_plan(ext["stop"])

    def _close_plan(self, stop: Any) -> None:
        self._emit_stop(self._plan, stop)
        self._plan = None

    def _citation(self, citation: Any, ext: dict[str, Any]) -> None:
        carried = br.event_from_json(ext.get("hub"))
        if carried is not None:
            self.emit(carried)
            return
        index = self._by_content.get(citation.get("content_index", 0)) if type(citation) is dict else None
        self.emit(hub.Extension(NAME, citation, index))

    def _message_end(self, delta: dict[str, Any], ext: dict[str, Any]) -> None:
        error = br.error_from_json(ext.get("error"))
        if error is None and delta.get("error"):
            error = hub.Error(str(delta["error"]), "api_error", body=delta)
        if error is None:
            self._close_open((i, None) for table in (self._content, self._tools) for i in table.values())
            self._content.clear()
            self._tools.clear()
        if "usage" in delta:
            self.emit(br.apply_usage(usage_from_wire(delta["usage"]), ext.get("usage")))
        if error is not None:
            self.fail(error)
            return
        finish = br.event_from_json(ext.get("finish"))
        reason = delta.get("finish_reason")
        if type(finish) is hub.Finish:
            self.emit(finish)
        elif type(reason) is str:
            self.emit(br.finish_from_wire(reason, FINISH_TO_HUB, self._tool_calls))
        self.finish_stream()

    def _error(self, data: dict[str, Any]) -> None:
        self.fail(decode_error(500, json_encode(data)))


# --------------------------------------------------------------------------- stream encoder


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json_encode(data) + b"\n\n"


class StreamEncoder(CarryingEncoder):
    """Hub events to cohere-v2 SSE events (see :class:`CarryingEncoder`).

    Terminal rule: ``ResponseEnd`` closes the open blocks and writes ``message-end``
    (``finish_reason``, usage); an ``Error`` writes ``message-end`` with ``finish_reason``
    ``ERROR`` and the message, the end.  What the wire cannot say is carried under
    ``llmbridge``.  Refuses what is not a hub event (``TypeError``); after the end it
    writes nothing.
    """

    def __init__(self) -> None:
        super().__init__()  # _blocks: hub index -> (content | thinking | tool | plan, wire index)
        self._content = 0
        self._tools = 0
        self._citations = 0
        self._seq = 0  # blocks on the wire, in the order the decoder numbers them

    def _index(self) -> int:
        self._seq += 1
        return self._seq - 1

    def _start_wire(self, event: hub.ResponseStart) -> bytes:
        body = {
            "id": event.id or "",
            "type": "message-start",
            "delta": {
                "message": {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}
            },
        }
        return _sse("message-start", self._ext(body, start=br.start_info(event, ("id",))))

    def _block_start(self, e: hub.BlockStart) -> bytes:
        if e.choice != 0 or e.kind not in WIRE_KINDS:
            return self._carry_start(e)
        if e.kind == "tool_call":
            wire = self._tools
            self._tools += 1
            self._calls = True
            self._blocks[e.index] = ("tool", wire)
            info = br.block_info(e, {"id", "name"}, self._index())
            if e.id is None:
                info = {**(info or {}), "no_id": True}
            function = {"name": e.name or "", "arguments": ""}
            call = {"id": e.id or f"call_{wire}", "type": "function", "function": function}
            body = {"type": "tool-call-start", "index": wire, "delta": {"message": {"tool_calls": call}}}
            return _sse("tool-call-start", self._ext(body, block=info))
        if e.kind == "thinking" and _is_plan(e.fidelity):
            self._blocks[e.index] = ("plan", 0)
            own, others = br.split_own(e.fidelity, NAME)
            rest = {k: v for k, v in own.items() if k != "tool_plan"}
            start = hub.BlockStart(
                e.index,
                e.kind,
                e.id,
                e.name,
                0,
                e.mime_type,
                hub.merge_dicts(others, {NAME: rest} if rest else None),
                e.extensions,
            )
            body = {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": ""}}}
            return _sse(
                "tool-plan-delta", self._ext(body, block=br.block_info(start, set(), self._index()) or {"plain": True})
            )
        wire = self._content
        self._content += 1
        self._blocks[e.index] = ("thinking" if e.kind == "thinking" else "content", wire)
        content = {"type": e.kind, e.kind: ""}
        body = {"type": "content-start", "index": wire, "delta": {"message": {"content": content}}}
        return _sse("content-start", self._ext(body, block=br.block_info(e, set(), self._index())))

    def _delta(self, e: hub.Delta) -> bytes:
        where = self._blocks.get(e.index)
        if where is None:
            return self._carry(e)
        kind, wire = where
        if kind == "tool":
            body = {
                "type": "tool-call-delta",
                "index": wire,
                "delta": {"message": {"tool_calls": {"function": {"arguments": e.text}}}},
            }
            return _sse("tool-call-delta", self._ext(body))
        if kind == "plan":
            body = {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": e.text}}}
            return _sse("tool-plan-delta", self._ext(body))
        key = "thinking" if kind == "thinking" else "text"
        body = {"type": "content-delta", "index": wire, "delta": {"message": {"content": {key: e.text}}}}
        return _sse("content-delta", self._ext(body))

    def _block_stop(self, e: hub.BlockStop) -> bytes:
        where = self._blocks.pop(e.index, None)
        if where is None:
            return self._carry(e)
        kind, wire = where
        info = br.stop_info(e)
        if kind == "plan":
            if not info:
                return b""  # the next non-plan event ends the plan
            body = {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": ""}}}
            return _sse("tool-plan-delta", self._ext(body, stop=info))
        name = "tool-call-end" if kind == "tool" else "content-end"
        return _sse(name, self._ext({"type": name, "index": wire}, stop=info))

    def _extension(self, e: hub.Extension) -> bytes:
        if e.namespace == NAME and type(e.data) is dict:
            wire = self._citations
            self._citations += 1
            body = {"type": "citation-start", "index": wire, "delta": {"message": {"citations": e.data}}}
            out = _sse("citation-start", self._ext(body, hub=br.event_to_json(e)))
            return out + _sse("citation-end", {"type": "citation-end", "index": wire})
        return super()._extension(e)

    def _end(self) -> bytes:
        out = self._close_all()
        delta: dict[str, Any] = {}
        more: dict[str, Any] = {}
        if self._finish is not None:  # (Cohere can end without a reason)
            delta["finish_reason"], more["finish"] = self._finish_word(FINISH_TO_WIRE, FINISH_TO_HUB, "COMPLETE")
        if self._usage is not None:
            delta["usage"], more["usage"] = usage_to_wire(self._usage)
        self._done = True
        return out + _sse("message-end", self._ext({"type": "message-end", "delta": delta}, **more))

    def _error(self, error: hub.Error) -> bytes:
        # Cohere ends a failed stream with message-end, finish_reason ERROR and the message.
        self._blocks.clear()  # (left open, as a failed stream leaves them)
        self._carried.clear()
        self._carry_totals()
        body = {"type": "message-end", "delta": {"finish_reason": "ERROR", "error": error.message}}
        return _sse("message-end", self._ext(body, error=br.error_to_json(error)))


# --------------------------------------------------------------------------- requests

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
                parts.insert(0, hub.ThinkingPart(m["tool_plan"], dict(_PLAN)))
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
        plan = "".join(p.text for p in m.parts if isinstance(p, hub.ThinkingPart) and _is_plan(p.fidelity))
        content = [
            p
            for p in m.parts
            if not isinstance(p, hub.ToolCallPart | hub.ToolResultPart)
            and not (isinstance(p, hub.ThinkingPart) and _is_plan(p.fidelity))
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


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/v2/chat`` with a bearer token."""
    base = base_url.rstrip("/")
    url = base + ("/chat" if base.endswith("/v2") else "/v2/chat")
    auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return url, br.post_headers(request, STREAM_CONTENT_TYPE, auth)


# --------------------------------------------------------------------------- whole responses and errors


def decode_response(body: dict) -> list[hub.Event]:
    """A non-streaming ``/v2/chat`` body as a hub stream."""
    if type(body) is not dict:
        body = {}
    message = br.obj_at(body, "message")
    events: list[hub.Event] = [hub.ResponseStart(id=body.get("id"))]
    index = 0
    if message.get("tool_plan"):
        events += [
            hub.BlockStart(0, "thinking", fidelity=dict(_PLAN)),
            hub.Delta(0, message["tool_plan"]),
            hub.BlockStop(0),
        ]
        index = 1
    content_index: dict[int, int] = {}
    for n, item in enumerate(message.get("content") or ()):
        if type(item) is not dict:
            continue
        kind = "thinking" if item.get("type") == "thinking" else "text"
        text = item.get(kind) or ""
        content_index[n] = index
        events += [hub.BlockStart(index, kind), *([hub.Delta(index, text)] if text else []), hub.BlockStop(index)]
        index += 1
    for n, call in enumerate(message.get("tool_calls") or ()):
        fn = call.get("function") or {}
        events.append(hub.BlockStart(index, "tool_call", id=call.get("id") or f"call_{n}", name=fn.get("name")))
        if fn.get("arguments"):
            events.append(hub.Delta(index, fn["arguments"]))
        events.append(hub.BlockStop(index))
        index += 1
    for citation in message.get("citations") or ():
        at = citation.get("content_index", 0) if type(citation) is dict else 0
        events.append(hub.Extension(NAME, citation, content_index.get(at)))
    if "usage" in body:
        events.append(usage_from_wire(body["usage"]))
    reason = body.get("finish_reason")
    if type(reason) is str:
        events.append(hub.Finish(FINISH_TO_HUB.get(reason, "other"), raw=reason))
    events.append(hub.ResponseEnd())
    return events


def encode_response(response: hub.Response) -> dict:
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    plan = ""
    citations = []
    for b in response.choice_blocks(0):
        if b.kind == "thinking" and _is_plan(b.fidelity):
            plan += b.text
        elif b.kind in ("text", "thinking"):
            content.append({"type": b.kind, b.kind: b.text})
        elif b.kind == "tool_call":
            calls.append(
                {
                    "id": b.id or f"call_{b.index}",
                    "type": "function",
                    "function": {"name": b.name or "", "arguments": b.text or "{}"},
                }
            )
        citations += [a.data for a in b.annotations if a.namespace == NAME]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if plan:
        message["tool_plan"] = plan
    if calls:
        message["tool_calls"] = calls
    if citations:
        message["citations"] = citations
    body: dict[str, Any] = {"id": response.id or "", "message": message}
    finish = response.finish
    body["finish_reason"] = FINISH_TO_WIRE.get(finish.reason, "COMPLETE") if finish else "COMPLETE"
    if response.usage is not None:
        body["usage"], _ = usage_to_wire(response.usage)
    return body


_STATUS_FOR = {
    "invalid_request": 400,
    "authentication": 401,
    "permission": 403,
    "not_found": 404,
    "rate_limit": 429,
    "api_error": 500,
    "overloaded": 503,
    "timeout": 504,
}


def encode_error(error: hub.Error) -> tuple[int, dict]:
    status = error.status or _STATUS_FOR.get(error.type) or hub.ERROR_STATUS.get(error.type, 500)
    body: dict[str, Any] = {"message": error.message}
    body[EXTENSION_KEY] = {"type": error.type, **({"code": error.code} if error.code else {})}
    return status, body


def decode_error(status: int, body: bytes) -> hub.Error:
    data = br.error_json(body)
    if type(data) is not dict:
        return br.plain_error(status, body)
    ext = br.obj_at(data, EXTENSION_KEY)
    message = data.get("message") or data.get("error") or f"HTTP {status}"
    kind = "invalid_request" if status == 422 else br.error_type(ext, status)
    return hub.Error(str(message), kind, code=ext.get("code"), status=status, body=data)
