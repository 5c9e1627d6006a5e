"""Finished interactions (non-streaming bodies) <-> hub."""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from ._common import HUB_TO_STATUS, NAME, usage_to_wire
from ._decoder import StreamDecoder


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
