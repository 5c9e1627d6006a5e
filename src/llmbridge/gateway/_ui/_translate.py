"""The console's Translator: a pasted body decoded, validated and translated.  Sans-I/O.

:func:`analyze` takes the bytes a developer pasted (an SSE stream body, a non-streaming JSON
response, or a Gemini JSON-array stream) and returns a :class:`Report`: the source's SSE
events, the hub events they decode to, every problem (the same checks as ``llmbridge
validate``: the dialect decoder's violations, numbered by source SSE event, then
:func:`llmbridge.hub.validate`'s, numbered by hub event) and the translation.  Input that
is no stream at all gives a report with ``fatal`` set, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from ... import dialects, hub, sse
from ...dialects.base import DialectModule, json_decode

MAX_BYTES = 16 * 1024 * 1024  # larger bodies: `llmbridge translate` / `validate` on the command line
SHOWN = 2000  # source and hub events listed in a report; the rest are counted
DATA_SHOWN = 4000  # characters of one source event's data listed
# Source dialects the translator decodes: the six, plus the text-SSE extra sources.
SOURCES = (*dialects.NAMES, "cohere-v2", "gemini-interactions")
TARGETS = dialects.NAMES
_SNIFF = 256 * 1024  # bytes looked at to detect the dialect

_ANTHROPIC = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
}
_COHERE = {
    "message-start",
    "content-start",
    "content-delta",
    "content-end",
    "message-end",
    "tool-plan-delta",
    "tool-call-start",
    "tool-call-delta",
    "tool-call-end",
}


class NotAStream(ValueError):
    """The input is neither an SSE body nor a JSON response; the message says what it looks like."""


@dataclass
class Report:
    """What the Translator page shows; :meth:`to_dict` is the API's JSON."""

    source: str | None = None  # the dialect decoded from
    detected: bool = False  # ``source`` was detected, not given
    detection: str = ""  # why that dialect
    target: str | None = None
    shape: str = "sse"  # "sse" | "json" (a non-streaming response)
    frames: list[dict[str, Any]] = field(default_factory=list)  # source SSE events (or the JSON body)
    frames_total: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)  # hub events
    events_total: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""
    output_type: str = "text/event-stream"
    text: str = ""  # the answer's text, assembled
    fatal: str | None = None  # no analysis possible: why, readably
    hub_events: list[hub.Event] = field(default_factory=list, repr=False)  # all of them; not in the JSON

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.fatal is None and not self.problems,
            "source": self.source,
            "detected": self.detected,
            "detection": self.detection,
            "target": self.target,
            "shape": self.shape,
            "frames": self.frames,
            "frames_total": self.frames_total,
            "events": self.events,
            "events_total": self.events_total,
            "problems": self.problems,
            "output": self.output,
            "output_type": self.output_type,
            "text": self.text,
            "fatal": self.fatal,
        }


def event_dict(event: hub.Event) -> dict[str, Any]:
    """A hub event as JSON-ready data: ``{"event": "Delta", "index": 0, "text": "Hi"}``, no nulls."""
    data = msgspec.to_builtins(event)
    return {"event": type(event).__name__, **{k: v for k, v in data.items() if v is not None}}


def _sse_events(data: bytes) -> list[sse.Event]:
    decoder = sse.Decoder()
    return decoder.feed(data) + decoder.close()


def _json_body(data: bytes) -> Any:
    """``data`` as JSON when it is a JSON object or array, else ``None``."""
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        return None
    try:
        return json_decode(data)
    except msgspec.DecodeError:
        return None


def classify(data: bytes) -> tuple[str, Any]:
    """``("sse", bytes)`` or ``("json", body)``; a Gemini JSON array becomes SSE bytes.

    Raises :class:`NotAStream` for anything else (HTML, plain text, an empty paste).
    """
    if not data.strip():
        raise NotAStream("The input is empty: paste a captured response body (SSE or JSON).")
    body = _json_body(data)
    if isinstance(body, dict):
        return "json", body
    if isinstance(body, list):
        if body and all(isinstance(x, dict) for x in body):
            # streamGenerateContent without alt=sse: one JSON array of chunks; as SSE it decodes alike.
            return "sse", b"".join(b"data: " + msgspec.json.encode(x) + b"\n\n" for x in body)
        raise NotAStream("The input is a JSON array, but not of objects: not a response body.")
    head = data[:_SNIFF]
    if not any(line.lstrip().startswith((b"data:", b"event:")) for line in head.splitlines()):
        text = head[:80].decode("utf-8", "replace").strip()
        raise NotAStream(
            "This is not an SSE stream (no 'data:' or 'event:' line) nor a JSON response body. "
            f"It starts with: {text!r}. Paste the raw response body of a streaming request."
        )
    return "sse", data


def detect(shape: str, payload: Any) -> tuple[str | None, str]:
    """The dialect of a classified input and the reason, or ``(None, why not)``."""
    if shape == "json":
        return _detect_json(payload)
    events = _sse_events(payload[:_SNIFF])
    for ev in events[:50]:
        name = ev.event
        if name.startswith("response."):
            return "openai-responses", f"event name {name!r}"
        if name in _ANTHROPIC:
            return "anthropic-messages", f"event name {name!r}"
        if name in _COHERE:
            return "cohere-v2", f"event name {name!r}"
        if name.startswith("interaction."):
            return "gemini-interactions", f"event name {name!r}"
        try:
            obj = json_decode(ev.data)
        except msgspec.DecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        kind = obj.get("type")
        if isinstance(kind, str):
            if kind.startswith("response."):
                return "openai-responses", f"data type {kind!r}"
            if kind in _ANTHROPIC:
                return "anthropic-messages", f"data type {kind!r}"
            if "seq" in obj and "v" in obj:
                return "llm-stream", f"data type {kind!r} with v and seq"
        if obj.get("object") == "chat.completion.chunk" or "choices" in obj:
            return "openai-chat", "data has choices"
        if "candidates" in obj or "usageMetadata" in obj:
            return "gemini", "data has candidates"
        if isinstance(obj.get("event_type"), str) and obj["event_type"].startswith("interaction"):
            return "gemini-interactions", f"event_type {obj['event_type']!r}"
        if "event_type" in obj and ("content_items" in obj or "role" in obj):
            return "mmsp", "data has event_type and content_items"
    # No telltale field: the dialect whose decoder finds the fewest problems.
    best: tuple[int, int, str] | None = None
    for name in SOURCES:
        decoder = dialects.get(name).StreamDecoder()
        try:
            decoded = decoder.feed(payload[:_SNIFF]) + decoder.close()
        except Exception:  # a decoder that chokes on a foreign stream is simply not the one
            continue
        score = (len(decoder.violations) + len(hub.validate(decoded)), -len(decoded), name)
        if best is None or score < best:
            best = score
    if best is not None and best[0] == 0:
        return best[2], "its decoder reads the stream without a problem"
    return None, "no dialect recognised: pick the source dialect"


def _detect_json(body: dict[str, Any]) -> tuple[str | None, str]:
    if "choices" in body:
        return "openai-chat", "body has choices"
    if body.get("object") == "response" or ("output" in body and isinstance(body.get("output"), list)):
        return "openai-responses", "body is a response object"
    if body.get("type") == "message" and "content" in body:
        return "anthropic-messages", "body is a message"
    if "candidates" in body:
        return "gemini", "body has candidates"
    if "v" in body and body.get("type") == "response":
        return "llm-stream", "body is an llm-stream response (v, type response)"
    if "content_items" in body or "event_type" in body:
        return "mmsp", "body has content_items"
    if "error" in body:
        return None, "the body is an error response, not an answer"
    return None, "no dialect recognised: pick the source dialect"


def analyze(data: bytes, source: str | None = None, target: str = "llm-stream") -> Report:
    """Decode ``data`` as ``source`` (detected when ``None``), validate, translate to ``target``.

    Returns a :class:`Report`; problems with the input are in it (``fatal`` when nothing
    could be decoded), never raised.  Raises ``KeyError`` for an unknown dialect name.
    """
    report = Report(target=target)
    if target not in TARGETS:
        raise KeyError(f"unknown target dialect {target!r}; one of {', '.join(TARGETS)}")
    if source is not None and source not in SOURCES:
        raise KeyError(f"unknown source dialect {source!r}; one of {', '.join(SOURCES)}")
    if len(data) > MAX_BYTES:
        report.fatal = (
            f"The input is {len(data) / 1e6:.1f} MB; the console takes up to {MAX_BYTES // (1024 * 1024)} MB. "
            "Use `llmbridge validate` and `llmbridge translate` on the command line for larger captures."
        )
        return report
    try:
        shape, payload = classify(data)
    except NotAStream as exc:
        report.fatal = str(exc)
        return report
    report.shape = shape
    if source is None:
        source, why = detect(shape, payload)
        if source is None:
            report.fatal = f"Cannot tell the dialect ({why})."
            return report
        report.detected, report.detection = True, why
    report.source = source
    codec = dialects.get(source)
    if shape == "json":
        _json(report, codec, payload)
    else:
        _stream(report, codec, payload)
    if report.fatal is None:
        _translate(report, target)
    return report


def _stream(report: Report, codec: DialectModule, data: bytes) -> None:
    frames = _sse_events(data)
    report.frames_total = len(frames)
    report.frames = [
        {"n": n, "event": f.event, "data": f.data[:DATA_SHOWN], "cut": len(f.data) > DATA_SHOWN}
        for n, f in enumerate(frames[:SHOWN])
    ]
    decoder = codec.StreamDecoder()
    try:
        events = decoder.feed(data) + decoder.close()
    except Exception as exc:  # a codec bug must not take the page down: say so
        report.fatal = f"The {report.source} decoder failed on this input ({type(exc).__name__}: {exc})."
        return
    _events(report, events)
    report.problems = [
        {"where": "source", "event": v.event, "rule": v.rule, "message": v.message, "text": str(v)}
        for v in decoder.violations
    ] + report.problems


def _json(report: Report, codec: DialectModule, body: dict[str, Any]) -> None:
    report.frames_total = 1
    report.frames = [{"n": 0, "event": "body", "data": msgspec.json.encode(body).decode()[:DATA_SHOWN], "cut": False}]
    try:
        events = codec.decode_response(body)
    except Exception as exc:  # not this dialect's shape after all
        report.fatal = f"This JSON is not a {report.source} response body ({type(exc).__name__}: {exc})."
        return
    _events(report, events)


def _events(report: Report, events: list[hub.Event]) -> None:
    report.events_total = len(events)
    report.events = [event_dict(e) for e in events[:SHOWN]]
    report.problems = [
        {"where": "hub", "event": v.event, "rule": v.rule, "message": v.message, "text": f"{v} (hub)"}
        for v in hub.validate(events)
    ]
    response = hub.assemble(events)
    report.text = "".join(b.text for b in response.blocks if b.kind == "text")[:100_000]
    report.hub_events = events


def _translate(report: Report, target: str) -> None:
    events = report.hub_events
    codec = dialects.get(target)
    try:
        if report.shape == "json":
            body = codec.encode_response(hub.assemble(events))
            report.output = msgspec.json.format(msgspec.json.encode(body)).decode()
            report.output_type = "application/json"
        else:
            encoder = codec.StreamEncoder()
            report.output = b"".join(encoder.encode(e) for e in events).decode("utf-8", "replace")
            report.output_type = getattr(codec, "STREAM_CONTENT_TYPE", "text/event-stream")
    except Exception as exc:  # say it in the page, not as a 500
        report.fatal = f"Translating to {target} failed ({type(exc).__name__}: {exc})."
