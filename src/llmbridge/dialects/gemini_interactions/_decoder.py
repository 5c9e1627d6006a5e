"""gemini-interactions SSE stream -> hub events."""

from __future__ import annotations

from typing import Any

from ... import hub, sse
from .. import _bridge as br
from .._carrying import CarriedDecoding
from ..base import EXTENSION_KEY, SSEStreamDecoder
from ._common import GOOGLE_STATUS, NAME, STATUS_TO_HUB, arguments_text, usage_from_wire

_ALIASES = {
    "content.start": "step.start",
    "content.delta": "step.delta",
    "content.stop": "step.stop",
    "interaction.start": "interaction.created",
    "interaction.complete": "interaction.completed",
}


_INTERACTION_NATIVE = {"id", "status", "usage", "object", "model", "outputs", "steps", EXTENSION_KEY}


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
            text = arguments_text(step.get("arguments"))
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
            arguments = arguments_text(delta.get("arguments"))
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
                kind = GOOGLE_STATUS.get(body["status"], kind)
            error = hub.Error(
                str(body.get("message") or "interaction failed"),
                kind,
                code=str(code) if code is not None else None,
                status=status,
                body=body,
            )
        self.fail(error)
