"""The ``bedrock-converse`` dialect: AWS Bedrock's Converse API (``/model/{id}/converse-stream``).

Streams are binary AWS event-stream frames (:mod:`.eventstream`) whose ``:event-type``
header names the JSON payload: ``messageStart``, ``contentBlockStart`` (tool use),
``contentBlockDelta`` (``text``, ``reasoningContent`` {text, signature, redactedContent},
``toolUse`` {input}, ``citation``), ``contentBlockStop``, ``messageStop`` (``stopReason``)
and ``metadata`` (usage, metrics), the terminal event.  ``:message-type: exception``
frames carry errors (``:exception-type``).  Payloads carry a random ``p`` padding field.

Hub mapping: text and reasoning blocks have no start event, their first delta opens them;
reasoning signatures and redacted content go in fidelity ``{"bedrock-converse": {...}}``
on BlockStop; usage follows the hub rule (input tokens include cache reads and writes).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import hub
from ..errors import RequestError
from . import _bridge as br
from ._carrying import WIRE_KINDS, CarriedDecoding, CarryingEncoder
from .base import EXTENSION_KEY, json_decode, json_encode
from .eventstream import Decoder as FrameDecoder
from .eventstream import encode_frame

__all__ = [
    "EXCEPTION_TO_HUB",
    "HUB_TO_EXCEPTION",
    "HUB_TO_STOP",
    "NAME",
    "STOP_TO_HUB",
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

NAME = "bedrock-converse"
STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"

STOP_TO_HUB = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
    "model_context_window_exceeded": "max_tokens",
    "malformed_model_output": "error",
    "malformed_tool_use": "error",
}
HUB_TO_STOP = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "content_filter": "content_filtered",
}

EXCEPTION_TO_HUB = {
    "internalServerException": ("api_error", 500),
    "modelStreamErrorException": ("api_error", 424),
    "validationException": ("invalid_request", 400),
    "throttlingException": ("rate_limit", 429),
    "serviceUnavailableException": ("overloaded", 503),
    "accessDeniedException": ("permission", 403),
    "resourceNotFoundException": ("not_found", 404),
    "modelTimeoutException": ("timeout", 408),
    "modelNotReadyException": ("overloaded", 429),
}
HUB_TO_EXCEPTION = {
    "invalid_request": "validationException",
    "rate_limit": "throttlingException",
    "overloaded": "serviceUnavailableException",
    "permission": "accessDeniedException",
    "authentication": "accessDeniedException",
    "not_found": "resourceNotFoundException",
    "timeout": "modelTimeoutException",
    "incomplete_stream": "modelStreamErrorException",
    "protocol_error": "modelStreamErrorException",
}

_USAGE_NATIVE = {
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
    "extensions",
}


def _unpadded(obj: Any) -> Any:
    return {k: v for k, v in obj.items() if k not in ("p", EXTENSION_KEY)} if type(obj) is dict else obj


def usage_from_wire(raw: Any, metrics: Any = None) -> hub.Usage:
    raw = raw if type(raw) is dict else {}
    read, write = raw.get("cacheReadInputTokens"), raw.get("cacheWriteInputTokens")
    given = raw.get("inputTokens")
    total_in = None if given is None else given + (read or 0) + (write or 0)
    extra = {
        k: v
        for k, v in raw.items()
        if k not in ("inputTokens", "outputTokens", "totalTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
    }
    if metrics is not None:
        extra["metrics"] = metrics
    return hub.Usage(
        total_in, raw.get("outputTokens"), read, write, None, raw.get("totalTokens"), {NAME: extra} if extra else None
    )


def usage_to_wire(usage: hub.Usage | None) -> tuple[dict[str, Any], Any, dict[str, Any] | None]:
    """(usage, metrics, the rest for the extension key)."""
    usage = usage or hub.Usage()
    read, write = usage.cache_read_tokens, usage.cache_write_tokens
    given = max(0, (usage.input_tokens or 0) - (read or 0) - (write or 0))
    out = {
        "inputTokens": given,
        "outputTokens": usage.output_tokens or 0,
        "totalTokens": usage.total_tokens
        if usage.total_tokens is not None
        else given + (read or 0) + (write or 0) + (usage.output_tokens or 0),
    }
    if read is not None:
        out["cacheReadInputTokens"] = read
    if write is not None:
        out["cacheWriteInputTokens"] = write
    own, others = br.split_own(usage.extensions, NAME)
    metrics = own.get("metrics", {"latencyMs": 0})  # required on the wire
    out.update({k: v for k, v in own.items() if k != "metrics"})
    rest = br.rest_fields(usage, _USAGE_NATIVE) or {}
    if "metrics" not in own:
        rest["no_metrics"] = True
    for field in ("input_tokens", "output_tokens", "total_tokens"):
        if getattr(usage, field) is None:
            rest[f"no_{field}"] = True
    if others:
        rest["extensions"] = others
    return out, metrics, rest or None


def _apply_usage(usage: hub.Usage, rest: Any) -> hub.Usage:
    usage = br.apply_usage(usage, rest)
    if type(rest) is dict and rest.get("no_metrics") and usage.extensions and NAME in usage.extensions:
        own = {k: v for k, v in usage.extensions[NAME].items() if k != "metrics"}
        usage.extensions = (
            {**usage.extensions, NAME: own}
            if own
            else ({k: v for k, v in usage.extensions.items() if k != NAME} or None)
        )
    return usage


# --------------------------------------------------------------------------- stream decoder


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
            self._open(data.get("contentBlockIndex"), "native", ext, extensions={NAME: _unpadded(start)})
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
        self.emit(hub.Extension(NAME, {"delta": _unpadded(delta)}, block.index))

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
        extra = {k: v for k, v in _unpadded(data).items() if k not in ("usage", "metrics")}
        if extra:
            usage.extensions = hub.merge_dicts(usage.extensions, {NAME: extra})
        if "usage" in data and not (type(ext.get("usage")) is dict and ext["usage"].get("none")):
            self.emit(_apply_usage(usage, ext.get("usage")))
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
            error = hub.Error(str(message), kind, code=name, status=status, body=_unpadded(data))
        self._fail(error)


# --------------------------------------------------------------------------- stream encoder


def _event(name: str, body: dict[str, Any]) -> bytes:
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, json_encode(body))


class _Out:
    __slots__ = ("fidelity", "kind", "opened", "start", "wire")

    def __init__(self, wire: int, start: hub.BlockStart) -> None:
        self.wire = wire
        self.start = start
        self.kind = start.kind
        self.opened = start.kind == "tool_call"  # text and reasoning blocks open with their first delta
        self.fidelity: dict[str, Any] = {}


class StreamEncoder(CarryingEncoder):
    """Hub events to bedrock-converse event-stream frames (see :class:`CarryingEncoder`).

    Terminal rule: ``ResponseEnd`` closes the open blocks and writes ``messageStop``
    (``stopReason``) and ``metadata`` (usage, metrics); an ``Error`` writes the matching
    exception frame, the end.  Blocks other than text, thinking and tool calls, other
    choices and extensions are carried as hub events under ``llmbridge``.  Refuses what is
    not a hub event (``TypeError``); after the end it writes nothing.
    """

    def __init__(self) -> None:
        super().__init__()  # _blocks: hub index -> _Out
        self._wire = 0
        self._lazy: list[_Out] = []  # text and reasoning blocks not on the wire yet, in start order

    def _open_lazy(self, upto: _Out | None = None) -> bytes:
        """Put earlier-started blocks on the wire first (an empty delta opens them), so the
        decoder sees blocks start in the source's order."""
        out = []
        while self._lazy and self._lazy[0] is not upto:
            block = self._lazy.pop(0)
            if not block.opened:
                empty = {"text": ""} if block.kind == "text" else {"reasoningContent": {"text": ""}}
                out.append(self._frame_for(block, empty))
        if self._lazy and self._lazy[0] is upto:
            self._lazy.pop(0)
        return b"".join(out)

    def _start_wire(self, event: hub.ResponseStart) -> bytes:
        return _event("messageStart", self._ext({"role": "assistant"}, start=br.start_info(event, ())))

    def _info(self, block: _Out) -> dict[str, Any] | None:
        """The block's fields for the extension key, on its first wire event."""
        s = block.start
        native = {"id", "name"} if s.kind == "tool_call" else set()
        info = br.block_info(s, native, block.wire) or {}
        if s.kind == "tool_call" and s.id is None:
            info["no_id"] = True
        if s.kind != "tool_call":
            info["kind"] = s.kind
        return info or None

    def _block_start(self, e: hub.BlockStart) -> bytes:
        raw = (e.extensions or {}).get(NAME) if e.kind == "native" else None
        if e.choice == 0 and type(raw) is dict and raw:
            # a Bedrock block start of a kind the hub does not model: back on the wire as it came
            block = _Out(self._wire, e)
            block.opened = True
            self._wire += 1
            self._blocks[e.index] = block
            out = self._open_lazy()
            info = br.block_info(e, {"extensions"} if e.extensions == {NAME: raw} else set(), block.wire)
            body = {"contentBlockIndex": block.wire, "start": raw}
            return out + _event("contentBlockStart", self._ext(body, block=info))
        if e.choice != 0 or e.kind not in WIRE_KINDS:
            return self._open_lazy() + self._carry_start(e)
        block = _Out(self._wire, e)
        self._wire += 1
        self._blocks[e.index] = block
        if e.kind != "tool_call":
            self._lazy.append(block)
            return b""
        self._calls = True
        out = self._open_lazy()
        body = {
            "contentBlockIndex": block.wire,
            "start": {"toolUse": {"toolUseId": e.id or f"tooluse_{block.wire}", "name": e.name or ""}},
        }
        return out + _event("contentBlockStart", self._ext(body, block=self._info(block)))

    def _delta_frame(self, block: _Out, delta: dict[str, Any]) -> bytes:
        head = b"" if block.opened else self._open_lazy(block)
        return head + self._frame_for(block, delta)

    def _frame_for(self, block: _Out, delta: dict[str, Any]) -> bytes:
        body = {"contentBlockIndex": block.wire, "delta": delta}
        if not block.opened:
            block.opened = True
            return _event("contentBlockDelta", self._ext(body, block=self._info(block)))
        return _event("contentBlockDelta", self._ext(body))

    def _delta(self, e: hub.Delta) -> bytes:
        block = self._blocks.get(e.index)
        if block is None:
            return self._carry(e)
        if block.kind == "native":
            self._pending.append(br.event_to_json(e))
            return b""
        if block.kind == "text":
            return self._delta_frame(block, {"text": e.text})
        if block.kind == "thinking":
            return self._delta_frame(block, {"reasoningContent": {"text": e.text}})
        return self._delta_frame(block, {"toolUse": {"input": e.text}})

    def _block_stop(self, e: hub.BlockStop) -> bytes:
        block = self._blocks.pop(e.index, None)
        if block is None:
            return self._carry(e)
        out = b""
        fidelity = hub.merge_dicts(block.start.fidelity, e.fidelity)
        own, others = br.split_own(fidelity, NAME)
        if block.kind == "thinking":
            for key in ("redactedContent", "signature"):
                if type(own.get(key)) is str:
                    out += self._delta_frame(block, {"reasoningContent": {key: own[key]}})
            rest = {k: v for k, v in own.items() if k not in ("redactedContent", "signature")}
            others = hub.merge_dicts(others, {NAME: rest} if rest else None)
        elif own:
            others = hub.merge_dicts(others, {NAME: own})
        stop = {k: v for k, v in (("fidelity", others), ("extensions", e.extensions)) if v}
        body = {"contentBlockIndex": block.wire}
        more: dict[str, Any] = {"stop": stop}
        if not block.opened:
            out = self._open_lazy(block) + out
            block.opened = True
            more["block"] = self._info(block) or {"kind": block.kind}
        return out + _event("contentBlockStop", self._ext(body, **more))

    def _end(self) -> bytes:
        out = self._close_all()
        word, carried = self._finish_word(HUB_TO_STOP, STOP_TO_HUB, "end_turn")
        out += _event("messageStop", self._ext({"stopReason": word}, finish=carried))
        usage, metrics, rest = usage_to_wire(self._usage)
        if self._usage is None:
            rest = {"none": True}
        out += _event("metadata", self._ext({"usage": usage, "metrics": metrics}, usage=rest))
        self._done = True
        return out

    def _error(self, error: hub.Error) -> bytes:
        self._carry_totals()
        name = (
            error.code
            if error.code in EXCEPTION_TO_HUB
            else HUB_TO_EXCEPTION.get(error.type, "internalServerException")
        )
        body = self._ext({"message": error.message}, error=br.error_to_json(error))
        headers = {":exception-type": name, ":content-type": "application/json", ":message-type": "exception"}
        return encode_frame(headers, json_encode(body))


# --------------------------------------------------------------------------- requests

_REQUEST_KNOWN = {
    "modelId",
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "additionalModelRequestFields",
    EXTENSION_KEY,
}
_IMAGE_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}


def _parts_from_wire(content: Any, where: str) -> list[hub.Part]:
    if type(content) is not list:
        raise RequestError("must be a list of content blocks", where)
    parts: list[hub.Part] = []
    for n, block in enumerate(content):
        at = f"{where}[{n}]"
        if type(block) is not dict:
            raise RequestError("must be an object", at)
        if "text" in block:
            parts.append(hub.TextPart(block["text"]))
        elif type(block.get("image")) is dict:
            image = block["image"]
            source = br.obj_at(image, "source")
            media = _IMAGE_FORMATS.get(image.get("format", ""), f"image/{image.get('format', 'png')}")
            parts.append(
                hub.ImagePart(
                    media_type=media, data=source.get("bytes"), url=(source.get("s3Location") or {}).get("uri")
                )
            )
        elif type(block.get("toolUse")) is dict:
            use = block["toolUse"]
            if not use.get("toolUseId") or not use.get("name"):
                raise RequestError("toolUse needs toolUseId and name", at)
            parts.append(hub.ToolCallPart(use["toolUseId"], use["name"], json_encode(use.get("input", {})).decode()))
        elif type(block.get("toolResult")) is dict:
            result = block["toolResult"]
            inner: list[hub.Part] = []
            for item in result.get("content") or ():
                if type(item) is dict and "json" in item:
                    inner.append(hub.TextPart(json_encode(item["json"]).decode()))
                else:
                    inner += _parts_from_wire([item], f"{at}.toolResult.content")
            parts.append(hub.ToolResultPart(result.get("toolUseId") or "", inner, result.get("status") == "error"))
        elif type(block.get("reasoningContent")) is dict:
            reasoning = block["reasoningContent"]
            text = br.obj_at(reasoning, "reasoningText")
            fidelity = {
                k: v
                for k, v in (
                    ("signature", text.get("signature")),
                    ("redactedContent", reasoning.get("redactedContent")),
                )
                if v
            }
            parts.append(hub.ThinkingPart(text.get("text") or "", {NAME: fidelity} if fidelity else None))
        else:
            parts.append(hub.NativePart(NAME, block))
    return parts


def decode_request(body: dict, *, model: str | None = None) -> hub.Request:
    messages = br.request_list(body, "messages", "messages")
    out = [
        hub.Message("system", [hub.TextPart(s["text"])])
        for s in body.get("system") or ()
        if type(s) is dict and "text" in s
    ]
    for n, m in enumerate(messages):
        if type(m) is not dict or m.get("role") not in ("user", "assistant"):
            raise RequestError("must be an object with role user or assistant", f"messages[{n}]")
        parts = _parts_from_wire(m.get("content"), f"messages[{n}].content")
        results = [p for p in parts if isinstance(p, hub.ToolResultPart)]
        others = [p for p in parts if not isinstance(p, hub.ToolResultPart)]
        if results:
            out.append(hub.Message("tool", results))
        if others or not results:
            out.append(hub.Message(m["role"], others))
    tools = []
    tool_config = br.obj_at(body, "toolConfig")
    for n, t in enumerate(tool_config.get("tools") or ()):
        spec = t.get("toolSpec") if type(t) is dict else None
        if type(spec) is not dict or not spec.get("name"):
            raise RequestError("needs toolSpec.name", f"toolConfig.tools[{n}]")
        schema = (spec.get("inputSchema") or {}).get("json") or {"type": "object", "properties": {}}
        tools.append(hub.Tool(spec["name"], spec.get("description"), schema))
    choice = None
    wire_choice = tool_config.get("toolChoice")
    if type(wire_choice) is dict:
        if "any" in wire_choice:
            choice = hub.ToolChoice("required")
        elif "tool" in wire_choice:
            choice = hub.ToolChoice("tool", (wire_choice["tool"] or {}).get("name"))
        elif "auto" in wire_choice:
            choice = hub.ToolChoice("auto")
    config = br.obj_at(body, "inferenceConfig")
    extra = dict(body.get("additionalModelRequestFields") or {})
    thinking = extra.pop("thinking", None) if type(extra.get("thinking")) is dict else None
    top_k = extra.pop("top_k", None)
    extensions = br.vendor_fields(NAME, body, _REQUEST_KNOWN)
    if extra:
        extensions[f"{NAME}:additionalModelRequestFields"] = extra
    return hub.Request(
        model=model or body.get("modelId"),
        messages=out,
        tools=tools,
        tool_choice=choice,
        max_tokens=config.get("maxTokens"),
        temperature=config.get("temperature"),
        top_p=config.get("topP"),
        top_k=top_k,
        stop=list(config.get("stopSequences") or ()),
        thinking=thinking,
        extensions=extensions,
    )


def _parts_to_wire(parts: list[hub.Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, hub.TextPart):
            out.append({"text": p.text})
        elif isinstance(p, hub.ImagePart):
            fmt = (p.media_type or "image/png").split("/")[-1]
            source = {"bytes": p.data} if p.data else {"s3Location": {"uri": p.url}}
            out.append({"image": {"format": fmt, "source": source}})
        elif isinstance(p, hub.ToolCallPart):
            arguments = br.arguments_object(p.arguments, {EXTENSION_KEY: {"arguments": p.arguments}})
            out.append({"toolUse": {"toolUseId": p.id, "name": p.name, "input": arguments}})
        elif isinstance(p, hub.ToolResultPart):
            result = {"toolUseId": p.tool_call_id, "content": _parts_to_wire(p.content) or [{"text": ""}]}
            if p.is_error:
                result["status"] = "error"
            out.append({"toolResult": result})
        elif isinstance(p, hub.ThinkingPart):
            own = (p.fidelity or {}).get(NAME) or {}
            if own.get("redactedContent"):
                out.append({"reasoningContent": {"redactedContent": own["redactedContent"]}})
            else:
                text = {"text": p.text, **({"signature": own["signature"]} if own.get("signature") else {})}
                out.append({"reasoningContent": {"reasoningText": text}})
        elif isinstance(p, hub.NativePart) and p.namespace == NAME:
            out.append(p.data)
    return out


def encode_request(request: hub.Request) -> dict:
    body: dict[str, Any] = {"messages": []}
    system = [{"text": m.text} for m in request.messages if m.role == "system"]
    if system:
        body["system"] = system
    for m in request.messages:
        if m.role == "system":
            continue
        role = "user" if m.role == "tool" else m.role
        content = _parts_to_wire(m.parts)
        if body["messages"] and body["messages"][-1]["role"] == role:
            body["messages"][-1]["content"] += content  # Bedrock wants roles to alternate
        else:
            body["messages"].append({"role": role, "content": content})
    config = {
        k: v
        for k, v in (("maxTokens", request.max_tokens), ("temperature", request.temperature), ("topP", request.top_p))
        if v is not None
    }
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if config:
        body["inferenceConfig"] = config
    if request.tools:
        tool_config: dict[str, Any] = {
            "tools": [
                {
                    "toolSpec": {
                        "name": t.name,
                        "inputSchema": {"json": t.parameters},
                        **({"description": t.description} if t.description else {}),
                    }
                }
                for t in request.tools
            ]
        }
        c = request.tool_choice
        if c is not None and c.mode != "none":
            tool_config["toolChoice"] = (
                {"any": {}}
                if c.mode == "required"
                else {"tool": {"name": c.name}}
                if c.mode == "tool"
                else {"auto": {}}
            )
        body["toolConfig"] = tool_config
    extra = dict(request.extensions.get(f"{NAME}:additionalModelRequestFields") or {})
    if request.thinking:
        extra["thinking"] = request.thinking
    if request.top_k is not None:
        extra["top_k"] = request.top_k
    if extra:
        body["additionalModelRequestFields"] = extra
    br.put_vendor_fields(body, NAME, request.extensions, skip=lambda field: field == "additionalModelRequestFields")
    return body


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/model/{modelId}/converse[-stream]``; a Bedrock API key goes as a bearer token
    (SigV4 signing is the caller's business)."""
    from urllib.parse import quote

    action = "converse-stream" if request.stream else "converse"
    url = f"{base_url.rstrip('/')}/model/{quote(request.model or '', safe='')}/{action}"
    auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return url, br.post_headers(request, STREAM_CONTENT_TYPE, auth)


# --------------------------------------------------------------------------- whole responses and errors


def decode_response(body: dict) -> list[hub.Event]:
    body = body if type(body) is dict else {}
    output = br.obj_at(body, "output")
    message = br.obj_at(output, "message")
    events: list[hub.Event] = [hub.ResponseStart()]
    try:
        parts = _parts_from_wire(message.get("content") or [], "output.message.content")
    except RequestError:
        parts = []
    for n, p in enumerate(parts):
        if isinstance(p, hub.TextPart):
            events += [hub.BlockStart(n, "text"), hub.Delta(n, p.text), hub.BlockStop(n)]
        elif isinstance(p, hub.ThinkingPart):
            events += [
                hub.BlockStart(n, "thinking"),
                *([hub.Delta(n, p.text)] if p.text else []),
                hub.BlockStop(n, p.fidelity),
            ]
        elif isinstance(p, hub.ToolCallPart):
            events += [
                hub.BlockStart(n, "tool_call", id=p.id, name=p.name),
                hub.Delta(n, p.arguments),
                hub.BlockStop(n),
            ]
        elif isinstance(p, hub.NativePart):
            events += [hub.BlockStart(n, "native", extensions={NAME: p.data}), hub.BlockStop(n)]
    if "usage" in body:
        events.append(usage_from_wire(body["usage"], body.get("metrics")))
    reason = body.get("stopReason")
    if type(reason) is str:
        calls = any(isinstance(p, hub.ToolCallPart) for p in parts)
        events.append(br.finish_from_wire(reason, STOP_TO_HUB, calls))
    events.append(hub.ResponseEnd())
    return events


def encode_response(response: hub.Response) -> dict:
    parts: list[hub.Part] = []
    for b in response.choice_blocks(0):
        if b.kind == "text":
            parts.append(hub.TextPart(b.text))
        elif b.kind == "thinking":
            parts.append(hub.ThinkingPart(b.text, b.fidelity))
        elif b.kind == "tool_call":
            parts.append(hub.ToolCallPart(b.id or f"tooluse_{b.index}", b.name or "", b.text or "{}"))
        elif b.kind == "native" and b.extensions and NAME in b.extensions:
            parts.append(hub.NativePart(NAME, b.extensions[NAME]))
    usage, metrics, _ = usage_to_wire(response.usage)
    finish = response.finish
    return {
        "output": {"message": {"role": "assistant", "content": _parts_to_wire(parts)}},
        "stopReason": HUB_TO_STOP.get(finish.reason, "end_turn") if finish else "end_turn",
        "usage": usage,
        "metrics": metrics,
    }


def encode_error(error: hub.Error) -> tuple[int, dict]:
    name = HUB_TO_EXCEPTION.get(error.type, "internalServerException")
    status = error.status or EXCEPTION_TO_HUB.get(name, ("api_error", 500))[1]
    return status, {"message": error.message, EXTENSION_KEY: {"type": error.type, "exception": name}}


def decode_error(status: int, body: bytes) -> hub.Error:
    data = br.error_json(body)
    if type(data) is not dict:
        return br.plain_error(status, body)
    ext = br.obj_at(data, EXTENSION_KEY)
    message = data.get("message") or data.get("Message") or f"HTTP {status}"
    kind = br.error_type(ext, status)
    return hub.Error(str(message), kind, code=ext.get("exception"), status=status, body=data)
