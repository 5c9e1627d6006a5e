"""bedrock-converse event-stream frames -> hub events."""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub
from .. import _bridge as br
from .._carrying import CarriedDecoding
from ..base import EXTENSION_KEY, json_decode
from ..eventstream import Decoder as FrameDecoder
from ._common import EXCEPTION_TO_HUB, NAME, STOP_TO_HUB, apply_usage_rest, unpadded, usage_from_wire


class _Block:
    __slots__ = ("fidelity", "index", "kind")

    def __init__(self, index: int, kind: str) -> None:
        self.index = index
        self.kind = kind
        self.fidelity: dict[str, Any] = {}


class StreamDecoder(CarriedDecoding):
    """bedrock-converse AWS event-stream frames to hub events (not SSE: binary frames with CRCs).

    Terminal rule: ``metadata`` after ``messageStop`` ends the stream (usage and the finish
    go out then); an exception frame ends it with a hub ``Error``.  Input that stops first
    gives ``truncated`` and ``Error(incomplete_stream)``.  Refuses, recording a violation:
    frames that break the format (``prelude-crc``, ``message-crc``, ``frame-length``,
    ``headers``, ``truncated-frame``), payloads that are not JSON objects (``json``,
    ``json-object``), unknown event types (``unknown-event``), missing fields
    (``missing-field``), events before ``messageStart`` or blocks out of order
    (``start-first``, ``start-once``, ``block-unique``, ``block-open``), frames after the end.
    """

    dialect = NAME
    FIRST_EVENT = "messageStart"
    LAST_EVENT = "messageStop"

    def __init__(self) -> None:
        self._frames = FrameDecoder()
        self._out: list[hub.Event] = []
        self.violations: list[hub.Violation] = []
        self.event_number = -1
        self.ended = False
        self._started = False
        self._blocks: dict[int, _Block] = {}  # wire index -> open block
        self._seen: set[int] = set()
        self._next = 0  # hub indexes: wire indexes are used as they are; carried blocks may add others
        self._tool_calls = False
        self._finish: hub.Finish | None = None
        self._reported = 0

    # -- plumbing

    def feed(self, data: bytes) -> list[hub.Event]:
        for frame in self._frames.feed(data):
            self.event_number = frame.number
            if self.ended:
                self.violation("after-terminal", "frame after the terminal event")
                continue
            self._frame(frame.headers, frame.payload)
        self._report_problems()
        out, self._out = self._out, []
        return out

    def close(self) -> list[hub.Event]:
        self._frames.close()
        self._report_problems()
        if not self.ended:
            self.violation("truncated", "stream ended before its terminal event", event=-1)
            self._fail(hub.Error("upstream stream ended before its terminal event", "incomplete_stream"))
        out, self._out = self._out, []
        return out

    def _report_problems(self) -> None:
        for p in self._frames.problems[self._reported :]:
            self.violations.append(hub.Violation(p.frame, p.rule, p.message))
            if p.fatal and not self.ended:
                self._ensure_start()
                self._fail(hub.Error(f"broken event stream: {p.message}", "protocol_error"))
        self._reported = len(self._frames.problems)

    def violation(self, rule: str, message: str, event: int | None = None) -> None:
        self.violations.append(hub.Violation(self.event_number if event is None else event, rule, message))

    def emit(self, event: hub.Event) -> None:
        self._out.append(event)

    def _fail(self, error: hub.Error) -> None:
        self._out.append(error)
        self._out.append(hub.ResponseEnd())
        self.ended = True

    # -- frames

    def _frame(self, headers: dict[str, Any], payload: bytes) -> None:
        kind = headers.get(":message-type", "event")
        try:
            data = json_decode(payload) if payload else {}
        except msgspec.DecodeError as exc:
            self.violation("json", f"payload is not valid JSON ({exc})")
            return
        if type(data) is not dict:
            self.violation("json-object", "payload is not a JSON object")
            return
        ext = br.obj_at(data, EXTENSION_KEY)
        if kind == "exception" or kind == "error":
            self._exception(headers, data, ext)
            return
        name = headers.get(":event-type")
        if name != "messageStart":
            self._ensure_start()
        if ext:
            self._emit_carried(ext)
        if name == "contentBlockDelta":
            self._delta(data, ext)
        elif name == "contentBlockStart":
            self._block_start(data, ext)
        elif name == "contentBlockStop":
            self._block_stop(data, ext)
        elif name == "messageStart":
            if self._started:
                self.violation("start-once", "second messageStart")
            else:
                self._started = True
                self.emit(br.apply_start(hub.ResponseStart(), ext.get("start")))
        elif name == "messageStop":
            self._message_stop(data, ext)
        elif name == "metadata":
            self._metadata(data, ext)
        else:
            self.violation("unknown-event", f"unknown event type {name!r}")

    def _open(self, wire: Any, kind: str, ext: dict[str, Any], **fields: Any) -> _Block | None:
        if type(wire) is not int:
            self.violation("missing-field", "contentBlockIndex missing or not an integer")
            return None
        if wire in self._seen:
            self.violation("block-unique", f"content block {wire} started twice")
            return None
        info = self._block_fields(ext, fields)
        if "fidelity" in info:
            fields["fidelity"] = info["fidelity"]
        kind = info.get("kind", kind)
        block = _Block(br.hub_index(info, wire), kind)
        self._blocks[wire] = block
        self._seen.add(wire)
        if kind == "tool_call":
            self._tool_calls = True
            if not fields.get("id"):
                fields["id"] = None if info.get("no_id") else f"tooluse_{wire}"
        self.emit(hub.BlockStart(block.index, kind, **fields))
        return block

    def _block_start(self, data: dict[str, Any], ext: dict[str, Any]) -> None:
        start = br.obj_at(data, "start")
        tool = start.get("toolUse")
        if type(tool) is dict:
            self._open(data.get("contentBlockIndex"), "tool_call", ext, id=tool.get("toolUseId"), name=tool.get("name"))
        elif start or not ext.get("block"):
            self._open(data.get("contentBlockIndex"), "native", ext, extensions={NAME: unpadded(start)})
        else:
            self._open(data.get("contentBlockIndex"), "text", ext)

    def _delta(self, data: dict[str, Any], ext: dict[str, Any]) -> None:
        wire = data.get("contentBlockIndex")
        delta = br.obj_at(data, "delta")
        block = self._blocks.get(wire)
        if block is None:
            kind = "thinking" if "reasoningContent" in delta else "tool_call" if "toolUse" in delta else "text"
            if kind == "tool_call":
                self.violation("block-open", f"toolUse delta for block {wire}, which was never started")
            block = self._open(wire, kind, ext)
            if block is None:
                return
        text = delta.get("text")
        if type(text) is str:
            if text:
                self.emit(hub.Delta(block.index, text))
            return
        reasoning = delta.get("reasoningContent")
        if type(reasoning) is dict:
            if type(reasoning.get("text")) is str and reasoning["text"]:
                self.emit(hub.Delta(block.index, reasoning["text"]))
            if type(reasoning.get("signature")) is str:
                block.fidelity["signature"] = block.fidelity.get("signature", "") + reasoning["signature"]
            if type(reasoning.get("redactedContent")) is str:
                block.fidelity["redactedContent"] = reasoning["redactedContent"]
            return
        tool = delta.get("toolUse")
        if type(tool) is dict:
            if type(tool.get("input")) is str and tool["input"]:
                self.emit(hub.Delta(block.index, tool["input"]))
            return
        if "citation" in delta:
            self.emit(hub.Extension(NAME, {"citation": delta["citation"]}, block.index))
            return
        self.emit(hub.Extension(NAME, {"delta": unpadded(delta)}, block.index))

    def _block_stop(self, data: dict[str, Any], ext: dict[str, Any]) -> None:
        wire = data.get("contentBlockIndex")
        block = self._blocks.pop(wire, None)
        if block is None and "block" in ext:
            block = self._open(wire, "text", ext)
            self._blocks.pop(wire, None)
        if block is None:
            self.violation("block-open", f"contentBlockStop for block {wire}, which is not open")
            return
        self._emit_stop(block.index, ext.get("stop"), block.fidelity)

    def _close_blocks(self) -> None:
        self._close_open((block.index, block.fidelity) for block in self._blocks.values())
        self._blocks.clear()

    def _message_stop(self, data: dict[str, Any], ext: dict[str, Any]) -> None:
        self._close_blocks()
        carried = br.event_from_json(ext.get("finish"))
        reason = data.get("stopReason")
        if ext.get("finish") == {"event": "none"}:
            pass  # the source had no finish reason; Bedrock requires one
        elif type(carried) is hub.Finish:
            self._finish = carried
        elif type(reason) is str:
            self._finish = br.finish_from_wire(reason, STOP_TO_HUB, self._tool_calls)
        else:
            self.violation("missing-field", "messageStop without stopReason")
        if data.get("additionalModelResponseFields") is not None:
            self.emit(hub.Extension(NAME, {"additionalModelResponseFields": data["additionalModelResponseFields"]}))

    def _metadata(self, data: dict[str, Any], ext: dict[str, Any]) -> None:
        self._close_blocks()
        usage = usage_from_wire(data.get("usage"), data.get("metrics"))
        extra = {k: v for k, v in unpadded(data).items() if k not in ("usage", "metrics")}
        if extra:
            usage.extensions = hub.merge_dicts(usage.extensions, {NAME: extra})
        if "usage" in data and not (type(ext.get("usage")) is dict and ext["usage"].get("none")):
            self.emit(apply_usage_rest(usage, ext.get("usage")))
        if self._finish is not None:
            self.emit(self._finish)
        self._out.append(hub.ResponseEnd())
        self.ended = True

    def _exception(self, headers: dict[str, Any], data: dict[str, Any], ext: dict[str, Any]) -> None:
        self._ensure_start()
        self._emit_carried(ext)
        error = br.error_from_json(ext.get("error"))
        if error is None:
            name = headers.get(":exception-type") or headers.get(":error-code") or "internalServerException"
            kind, status = EXCEPTION_TO_HUB.get(name, ("api_error", 500))
            message = data.get("message") or data.get("Message") or headers.get(":error-message") or name
            error = hub.Error(str(message), kind, code=name, status=status, body=unpadded(data))
        self._fail(error)
