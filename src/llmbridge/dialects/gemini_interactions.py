"""The ``gemini-interactions`` dialect: Google's Gemini Interactions API (``POST /v1beta/interactions``).

Streams are SSE ``data:`` lines whose JSON names itself with ``event_type``:
``interaction.created``, ``interaction.status_update``, ``step.start``/``step.delta``/
``step.stop`` (numbered steps: ``model_output`` text, ``thought`` with ``thought_summary``
and ``thought_signature`` deltas, ``function_call`` with ``arguments_delta``, built-in tool
calls and results), ``interaction.completed`` (status, usage; the terminal event) and
``error``.  Nested objects use ``type``.  The legacy ``content.*`` and
``interaction.start``/``interaction.complete`` names decode the same way.

Hub mapping: thought steps are thinking blocks, their signature in fidelity
``{"gemini-interactions": {"signature": ...}}``; built-in tool steps are native blocks with
the raw step in ``extensions``; usage follows the Gemini rule (output tokens include thought
tokens); the completed interaction's other fields ride in a stream-level
``Extension("gemini-interactions", {"interaction": {...}})``.  See docs/dialects/more.md.
"""

from __future__ import annotations

from typing import Any

from .. import hub, sse
from ..errors import RequestError
from . import _bridge as br
from ._carrying import WIRE_KINDS, CarriedDecoding, CarryingEncoder
from .base import EXTENSION_KEY, SSEStreamDecoder, json_encode

__all__ = [
    "HUB_TO_STATUS",
    "NAME",
    "STATUS_TO_HUB",
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

NAME = "gemini-interactions"
STREAM_CONTENT_TYPE = "text/event-stream"

STATUS_TO_HUB = {
    "completed": "end_turn",
    "requires_action": "tool_use",
    "incomplete": "max_tokens",
    "failed": "error",
    "cancelled": "other",
}
HUB_TO_STATUS = {
    "end_turn": "completed",
    "stop_sequence": "completed",
    "tool_use": "requires_action",
    "max_tokens": "incomplete",
    "error": "failed",
}
_ALIASES = {
    "content.start": "step.start",
    "content.delta": "step.delta",
    "content.stop": "step.stop",
    "interaction.start": "interaction.created",
    "interaction.complete": "interaction.completed",
}
_USAGE_KEYS = {
    "total_input_tokens",
    "total_output_tokens",
    "total_thought_tokens",
    "total_cached_tokens",
    "total_tokens",
}
_INTERACTION_NATIVE = {"id", "status", "usage", "object", "model", "outputs", "steps", EXTENSION_KEY}


def usage_from_wire(raw: Any) -> hub.Usage:
    raw = raw if type(raw) is dict else {}
    out, thought = raw.get("total_output_tokens"), raw.get("total_thought_tokens")
    output = None if out is None and thought is None else (out or 0) + (thought or 0)
    extra = {k: v for k, v in raw.items() if k not in _USAGE_KEYS}
    return hub.Usage(
        raw.get("total_input_tokens"),
        output,
        raw.get("total_cached_tokens"),
        None,
        thought,
        raw.get("total_tokens"),
        {NAME: extra} if extra else None,
    )


def usage_to_wire(usage: hub.Usage) -> tuple[dict[str, Any], dict[str, Any] | None]:
    own, others = br.split_own(usage.extensions, NAME)
    wire: dict[str, Any] = {}
    if usage.total_tokens is not None:
        wire["total_tokens"] = usage.total_tokens
    if usage.input_tokens is not None:
        wire["total_input_tokens"] = usage.input_tokens
    wire.update(own)
    if usage.cache_read_tokens is not None:
        wire["total_cached_tokens"] = usage.cache_read_tokens
    if usage.output_tokens is not None:
        wire["total_output_tokens"] = max(0, usage.output_tokens - (usage.reasoning_tokens or 0))
    if usage.reasoning_tokens is not None:
        wire["total_thought_tokens"] = usage.reasoning_tokens
    rest = (
        br.rest_fields(
            usage,
            {"input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens", "total_tokens", "extensions"},
        )
        or {}
    )
    if usage.output_tokens is None and usage.reasoning_tokens is not None:
        rest["no_output_tokens"] = True
    if others:
        rest["extensions"] = others
    return wire, rest or None


def _arguments_text(arguments: Any) -> str:
    if arguments is None or arguments == {}:
        return ""
    return arguments if type(arguments) is str else json_encode(arguments).decode()


# --------------------------------------------------------------------------- stream decoder


class StreamDecoder(CarriedDecoding, SSEStreamDecoder):
    """gemini-interactions SSE events (``interaction.created`` ... ``interaction.completed``) to hub events.

    Terminal rule: ``interaction.completed`` ends the stream, and so does an ``error`` event
    (with a hub ``Error``, as does a ``failed`` status); input that stops first gives ``truncated`` and
    ``Error(incomplete_stream)``.  Refuses, recording a violation: data that is not a JSON
    object (``json``, ``json-object``), unknown event types (``unknown-event``), events
    before ``interaction.created`` (``start-first``), a second one (``start-once``), content
    for blocks not open or started twice (``block-open``, ``block-unique``), anything after
    the end (``after-terminal``).
    """

    dialect = NAME
    FIRST_EVENT = "interaction.created"
    LAST_EVENT = "interaction.completed"

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._open: dict[Any, tuple[int, dict[str, Any]]] = {}  # wire index -> (hub index, fidelity)
        self._seen: set[Any] = set()
        self._next = 0
        self._tool_calls = False
        self._id: str | None = None

    def on_event(self, event: sse.Event) -> None:
        data = self.parse_json(event)
        if data is None:
            return
        if type(data) is not dict:
            self.violation("json-object", "event data is not a JSON object")
            return
        kind = data.get("event_type") or (event.event if event.event != "message" else None)
        kind = _ALIASES.get(kind, kind)
        ext = br.obj_at(data, EXTENSION_KEY)
        if kind != "interaction.created":
            self._ensure_start()
        if ext:
            self._emit_carried(ext)
        if kind == "step.delta":
            self._delta(data.get("index"), data.get("delta"))
        elif kind == "step.start":
            self._start_step(data.get("index"), data.get("step", data.get("content")), ext)
        elif kind == "step.stop":
            self._stop_step(data.get("index"), ext)
        elif kind == "interaction.created":
            self._created(data.get("interaction"), ext)
        elif kind == "interaction.status_update":
            pass
        elif kind == "interaction.completed":
            self._completed(data.get("interaction"), ext)
        elif kind == "error":
            self._error(data, ext)
        else:
            self.violation("unknown-event", f"unknown event_type {kind!r}")

    def _created(self, interaction: Any, ext: dict[str, Any]) -> None:
        if self._started:
            self.violation("start-once", "second interaction.created")
            return
        self._started = True
        interaction = interaction if type(interaction) is dict else {}
        self._id = interaction.get("id")
        start = hub.ResponseStart(id=self._id, model=interaction.get("model"))
        self.emit(br.apply_start(start, ext.get("start")))

    def _start_step(self, index: Any, step: Any, ext: dict[str, Any]) -> None:
        step = step if type(step) is dict else {}
        if index in self._seen:
            self.violation("block-unique", f"step {index} started twice")
            return
        self._seen.add(index)
        kind = step.get("type")
        fields: dict[str, Any] = {}
        text = ""
        fidelity: dict[str, Any] = {}
        if kind == "model_output" or kind == "text":
            block = "text"
            for item in step.get("content") or ():
                if type(item) is dict and type(item.get("text")) is str:
                    text += item["text"]
            if type(step.get("text")) is str:
                text += step["text"]
        elif kind == "thought":
            block = "thinking"
            for item in step.get("summary") or ():
                if type(item) is dict and type(item.get("text")) is str:
                    text += item["text"]
        elif kind == "function_call":
            block = "tool_call"
            self._tool_calls = True
            fields["id"] = step.get("id") or f"call_{self._id or 'interaction'}_{index}"
            fields["name"] = step.get("name")
            text = _arguments_text(step.get("arguments"))
        else:
            block = "native"
            fields["id"] = step.get("id") or step.get("call_id")
            fields["name"] = kind
            fields["extensions"] = {NAME: step}
        if block != "native" and step.get("signature"):
            fidelity["signature"] = step["signature"]
        info = self._block_fields(ext, fields)
        hub_index = br.hub_index(info, self._next)
        self._next += 1
        self._open[index] = (hub_index, {})
        self.emit(
            hub.BlockStart(
                hub_index,
                info.get("kind", block),
                fidelity=hub.merge_dicts({NAME: fidelity} if fidelity else None, info.get("fidelity")),
                **fields,
            )
        )
        if text:
            self.emit(hub.Delta(hub_index, text))

    def _delta(self, index: Any, delta: Any) -> None:
        entry = self._open.get(index)
        if entry is None:
            self.violation("block-open", f"step.delta for step {index}, which is not open")
            return
        hub_index, fidelity = entry
        delta = delta if type(delta) is dict else {}
        kind = delta.get("type")
        if kind == "text" or (kind is None and type(delta.get("text")) is str):
            if delta.get("text"):
                self.emit(hub.Delta(hub_index, delta["text"]))
            if delta.get("annotations"):
                self.emit(hub.Extension(NAME, {"annotations": delta["annotations"]}, hub_index))
        elif kind == "arguments_delta":
            arguments = _arguments_text(delta.get("arguments"))
            if arguments:
                self.emit(hub.Delta(hub_index, arguments))
        elif kind == "thought_summary":
            content = br.obj_at(delta, "content")
            if type(content.get("text")) is str and content["text"]:
                self.emit(hub.Delta(hub_index, content["text"]))
        elif kind == "thought_signature":
            if type(delta.get("signature")) is str:
                fidelity["signature"] = fidelity.get("signature", "") + delta["signature"]
        else:
            self.emit(hub.Extension(NAME, {"delta": delta}, hub_index))

    def _stop_step(self, index: Any, ext: dict[str, Any]) -> None:
        entry = self._open.pop(index, None)
        if entry is None:
            self.violation("block-open", f"step.stop for step {index}, which is not open")
            return
        hub_index, fidelity = entry
        self._emit_stop(hub_index, ext.get("stop"), fidelity)

    def _completed(self, interaction: Any, ext: dict[str, Any]) -> None:
        self._close_open(self._open.values())
        self._open.clear()
        interaction = interaction if type(interaction) is dict else {}
        extra = {k: v for k, v in interaction.items() if k not in _INTERACTION_NATIVE}
        if extra and not ext.get("no_interaction"):
            self.emit(hub.Extension(NAME, {"interaction": extra}))
        if "usage" in interaction and not ext.get("no_usage"):
            self.emit(br.apply_usage(usage_from_wire(interaction["usage"]), ext.get("usage")))
        carried = br.event_from_json(ext.get("finish"))
        status = interaction.get("status")
        if type(carried) is hub.Finish:
            self.emit(carried)
        elif ext.get("finish") == {"event": "none"}:
            pass
        elif type(status) is str:
            self.emit(br.finish_from_wire(status, STATUS_TO_HUB, self._tool_calls))
        self.finish_stream()

    def _error(self, data: dict[str, Any], ext: dict[str, Any]) -> None:
        error = br.error_from_json(ext.get("error"))
        if error is None:
            body = data.get("error") if type(data.get("error")) is dict else data
            code = body.get("code")
            status = code if type(code) is int else None
            kind = hub.error_type_for_status(status) if status else "api_error"
            if type(body.get("status")) is str:
                kind = _GOOGLE_STATUS.get(body["status"], kind)
            error = hub.Error(
                str(body.get("message") or "interaction failed"),
                kind,
                code=str(code) if code is not None else None,
                status=status,
                body=body,
            )
        self.fail(error)


_GOOGLE_STATUS = {
    "INVALID_ARGUMENT": "invalid_request",
    "UNAUTHENTICATED": "authentication",
    "PERMISSION_DENIED": "permission",
    "NOT_FOUND": "not_found",
    "RESOURCE_EXHAUSTED": "rate_limit",
    "INTERNAL": "api_error",
    "UNAVAILABLE": "overloaded",
    "DEADLINE_EXCEEDED": "timeout",
}
_HUB_TO_GOOGLE = {v: k for k, v in _GOOGLE_STATUS.items()}


# --------------------------------------------------------------------------- stream encoder


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json_encode(data) + b"\n\n"


class StreamEncoder(CarryingEncoder):
    """Hub events to gemini-interactions SSE events (see :class:`CarryingEncoder`).

    Terminal rule: ``ResponseEnd`` closes the open content and writes
    ``interaction.completed`` (status, usage); an ``Error`` writes the ``error`` event (usage
    and finish carried on it), the end.  What the wire cannot say is carried under ``llmbridge``.
    Refuses what is not a hub event (``TypeError``); after the end it writes nothing.
    """

    def __init__(self) -> None:
        super().__init__()  # _blocks: hub index -> (kind, wire index)
        self._wire = 0
        self._interaction: dict[str, Any] = {}
        self._start_event: hub.ResponseStart | None = None

    def _start_wire(self, event: hub.ResponseStart) -> bytes:
        self._start_event = event
        interaction = {
            "id": event.id or "",
            "status": "in_progress",
            "object": "interaction",
            "model": event.model or "",
        }
        rest = br.start_info(event, ("id", "model"))
        created = self._ext(
            {"interaction": interaction, "event_type": "interaction.created"}, start=self._start_fix(rest)
        )
        status = {"interaction_id": event.id or "", "status": "in_progress", "event_type": "interaction.status_update"}
        return _sse(created) + _sse(status)

    @staticmethod
    def _start_fix(rest: dict[str, Any]) -> dict[str, Any]:
        # (apply_start knows "no_id"; a missing model is put back as None explicitly)
        if rest.pop("no_model", False):
            rest["model"] = None
        return rest

    def _extension(self, e: hub.Extension) -> bytes:
        if (
            e.namespace == NAME
            and e.index is None
            and type(e.data) is dict
            and list(e.data) == ["interaction"]
            and not self._interaction
        ):
            self._interaction = dict(e.data["interaction"])  # fields of the completed interaction
            return b""
        return super()._extension(e)

    def _block_start(self, e: hub.BlockStart) -> bytes:
        raw = (e.extensions or {}).get(NAME) if e.kind == "native" else None
        if e.choice == 0 and type(raw) is dict and type(raw.get("type")) is str:
            # one of this API's own built-in tool steps: back on the wire as that step
            wire = self._wire
            self._wire += 1
            self._blocks[e.index] = ("native", wire)
            info = br.block_info(e, {"extensions"} if e.extensions == {NAME: raw} else set(), wire)
            return _sse(self._ext({"index": wire, "step": raw, "event_type": "step.start"}, block=info))
        if e.choice != 0 or e.kind not in WIRE_KINDS:
            return self._carry_start(e)
        wire = self._wire
        self._wire += 1
        self._blocks[e.index] = (e.kind, wire)
        if e.kind == "tool_call":
            self._calls = True
            step = {"id": e.id or f"call_{wire}", "type": "function_call", "name": e.name or "", "arguments": {}}
            info = br.block_info(e, {"id", "name"}, wire)
        else:
            step = {"type": "model_output" if e.kind == "text" else "thought"}
            info = br.block_info(e, set(), wire)
        return _sse(self._ext({"index": wire, "step": step, "event_type": "step.start"}, block=info))

    def _delta(self, e: hub.Delta) -> bytes:
        where = self._blocks.get(e.index)
        if where is None:
            return self._carry(e)
        kind, wire = where
        if kind == "native":
            self._pending.append(br.event_to_json(e))
            return b""
        if kind == "text":
            delta = {"text": e.text, "type": "text"}
        elif kind == "thinking":
            delta = {"content": {"type": "text", "text": e.text}, "type": "thought_summary"}
        else:
            delta = {"arguments": e.text, "type": "arguments_delta"}
        return _sse(self._ext({"index": wire, "delta": delta, "event_type": "step.delta"}))

    def _block_stop(self, e: hub.BlockStop) -> bytes:
        where = self._blocks.pop(e.index, None)
        if where is None:
            return self._carry(e)
        _, wire = where
        out = b""
        own, others = br.split_own(e.fidelity, NAME)
        if type(own.get("signature")) is str:
            delta = {"signature": own["signature"], "type": "thought_signature"}
            out += _sse(self._ext({"index": wire, "delta": delta, "event_type": "step.delta"}))
            own = {k: v for k, v in own.items() if k != "signature"}
        fidelity = hub.merge_dicts(others, {NAME: own} if own else None)
        stop = {k: v for k, v in (("fidelity", fidelity), ("extensions", e.extensions)) if v}
        return out + _sse(self._ext({"index": wire, "event_type": "step.stop"}, stop=stop))

    def _end(self) -> bytes:
        out = self._close_all()
        start = self._start_event or hub.ResponseStart()
        more: dict[str, Any] = {}
        status, more["finish"] = self._finish_word(HUB_TO_STATUS, STATUS_TO_HUB, "completed")
        interaction: dict[str, Any] = {"id": start.id or "", "status": status}
        if self._usage is not None:
            interaction["usage"], more["usage"] = usage_to_wire(self._usage)
        else:
            interaction["usage"] = {}
            more["no_usage"] = True
        if not self._interaction:
            more["no_interaction"] = True
        for key, value in self._interaction.items():
            interaction.setdefault(key, value)
        interaction.setdefault("object", "interaction")
        interaction.setdefault("model", start.model or "")
        self._done = True
        return out + _sse(self._ext({"interaction": interaction, "event_type": "interaction.completed"}, **more))

    def _error(self, error: hub.Error) -> bytes:
        self._carry_totals()
        status = error.status or hub.ERROR_STATUS.get(error.type, 500)
        body = {"code": status, "message": error.message, "status": _HUB_TO_GOOGLE.get(error.type, "INTERNAL")}
        return _sse(self._ext({"error": body, "event_type": "error"}, error=br.error_to_json(error)))


# --------------------------------------------------------------------------- requests

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
            arguments = _arguments_text(step.get("arguments")) or "{}"
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


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/v1beta/interactions`` (or ``{base_url}/interactions`` when the base URL
    already ends in a ``v1…`` segment) with Google's API key header."""
    base = base_url.rstrip("/")
    # (google-genai's own client posts to /v1/interactions; the REST docs show /v1beta)
    versioned = base.rsplit("/", 1)[-1].startswith("v1")
    url = base + ("/interactions" if versioned else "/v1beta/interactions")
    auth = {"x-goog-api-key": api_key} if api_key else {}
    return url, br.post_headers(request, STREAM_CONTENT_TYPE, auth)


# --------------------------------------------------------------------------- whole responses and errors


def decode_response(body: dict) -> list[hub.Event]:
    """A finished interaction (``steps`` or the older ``outputs``) as a hub stream."""
    body = body if type(body) is dict else {}
    decoder = StreamDecoder()
    events: list[hub.Event] = [hub.ResponseStart(id=body.get("id"), model=body.get("model"))]
    decoder._started = True
    decoder._id = body.get("id")
    items = body.get("steps") if type(body.get("steps")) is list else body.get("outputs") or []
    n = 0
    for item in items:
        if type(item) is not dict or item.get("type") == "user_input":
            continue
        step = {"type": "model_output", "content": [item]} if item.get("type") == "text" else item
        decoder._start_step(n, step, {})
        decoder._stop_step(n, {})
        n += 1
    events += decoder._out
    decoder._out = []
    decoder._completed(body, {})
    return events + decoder._out


def encode_response(response: hub.Response) -> dict:
    steps: list[dict[str, Any]] = []
    for b in response.choice_blocks(0):
        own = (b.fidelity or {}).get(NAME) or {}
        signature = {"signature": own["signature"]} if own.get("signature") else {}
        if b.kind == "text":
            steps.append({"type": "model_output", "content": [{"type": "text", "text": b.text}]})
        elif b.kind == "thinking":
            steps.append(
                {"type": "thought", **signature, **({"summary": [{"type": "text", "text": b.text}]} if b.text else {})}
            )
        elif b.kind == "tool_call":
            arguments = br.arguments_object(b.text, {})
            steps.append(
                {
                    "type": "function_call",
                    "id": b.id or f"call_{b.index}",
                    "name": b.name or "",
                    "arguments": arguments,
                    **signature,
                }
            )
        elif b.kind == "native" and b.extensions and NAME in b.extensions:
            steps.append(b.extensions[NAME])
    finish = response.finish
    body: dict[str, Any] = {
        "id": response.id or "",
        "object": "interaction",
        "model": response.model or "",
        "status": HUB_TO_STATUS.get(finish.reason, "completed") if finish else "completed",
        "steps": steps,
    }
    if response.usage is not None:
        body["usage"], _ = usage_to_wire(response.usage)
    for a in response.annotations:
        if a.namespace == NAME and type(a.data) is dict and type(a.data.get("interaction")) is dict:
            for key, value in a.data["interaction"].items():
                body.setdefault(key, value)
    return body


def encode_error(error: hub.Error) -> tuple[int, dict]:
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status, {
        "error": {"code": status, "message": error.message, "status": _HUB_TO_GOOGLE.get(error.type, "INTERNAL")}
    }


def decode_error(status: int, body: bytes) -> hub.Error:
    data = br.error_json(body)
    if type(data) is list and data and type(data[0]) is dict:
        data = data[0]
    inner = data.get("error") if type(data) is dict and type(data.get("error")) is dict else None
    if inner is None:
        return br.plain_error(status, body, data)
    kind = _GOOGLE_STATUS.get(inner.get("status") or "", hub.error_type_for_status(status))
    return hub.Error(
        str(inner.get("message") or f"HTTP {status}"), kind, code=inner.get("status"), status=status, body=data
    )
