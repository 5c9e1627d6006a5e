"""Non-streaming cohere-v2 bodies <-> hub."""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from ._common import FINISH_TO_HUB, FINISH_TO_WIRE, NAME, PLAN, is_plan, usage_from_wire, usage_to_wire


def decode_response(body: dict) -> list[hub.Event]:
    """A non-streaming ``/v2/chat`` body as a hub stream."""
    if type(body) is not dict:
        body = {}
    message = br.obj_at(body, "message")
    events: list[hub.Event] = [hub.ResponseStart(id=body.get("id"))]
    index = 0
    if message.get("tool_plan"):
        events += [
            hub.BlockStart(0, "thinking", fidelity=dict(PLAN)),
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
        if b.kind == "thinking" and is_plan(b.fidelity):
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
