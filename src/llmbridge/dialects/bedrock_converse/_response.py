"""Non-streaming bedrock-converse bodies (``/converse``) <-> hub."""

from __future__ import annotations

from ... import hub
from ...errors import RequestError
from .. import _bridge as br
from ._common import HUB_TO_STOP, NAME, STOP_TO_HUB, parts_from_wire, parts_to_wire, usage_from_wire, usage_to_wire


def decode_response(body: dict) -> list[hub.Event]:
    body = body if type(body) is dict else {}
    output = br.obj_at(body, "output")
    message = br.obj_at(output, "message")
    events: list[hub.Event] = [hub.ResponseStart()]
    try:
        parts = parts_from_wire(message.get("content") or [], "output.message.content")
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
        "output": {"message": {"role": "assistant", "content": parts_to_wire(parts)}},
        "stopReason": HUB_TO_STOP.get(finish.reason, "end_turn") if finish else "end_turn",
        "usage": usage,
        "metrics": metrics,
    }
