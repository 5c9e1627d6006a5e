"""cohere-v2 SSE stream -> hub events."""

from __future__ import annotations

from typing import Any

from ... import hub, sse
from .. import _bridge as br
from .._carrying import CarriedDecoding
from ..base import EXTENSION_KEY, SSEStreamDecoder
from ._common import FINISH_TO_HUB, NAME, PLAN, error_from_object, usage_from_wire


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
            self._plan = self._open("thinking", ext, fidelity=PLAN)
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
        self.fail(error_from_object(500, data))
