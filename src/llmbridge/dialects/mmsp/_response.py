"""MMSP's non-streaming body (the assembled message, or ``{"error": ...}``) <-> hub events / hub.Response.

MMSP serves only a stream; this form is what a non-streaming call to the gateway answers,
read back through the stream decoder so both forms decode alike.
"""

from __future__ import annotations

import json
from typing import Any

from ... import hub
from ...unievent import UniEvent, UniEventView, assemble_message
from ..base import EXTENSION_KEY, decode_all
from ._common import DONE, error_object, exception_object
from ._decoder import StreamDecoder


def decode_response(body: dict) -> list[hub.Event]:
    """An assembled message (or ``{"error": ...}``) as a hub stream."""
    decoder = StreamDecoder()
    if isinstance(body, dict) and "error" in body and "content_items" not in body:
        decoder.feed_object(body)
        return decoder.feed(b"") + decoder.close()
    try:
        message = body if isinstance(body, dict) else {}
        items = message.get("content_items") or []
        created = message.get("created_at")
        first = True
        for item in items:
            fragment = _whole_fragment_dict(item)
            event: dict[str, Any] = {
                "role": "assistant",
                "event_type": "delta",
                "content_items": [fragment],
                "usage_metadata": None,
                "finish_reason": None,
            }
            if first and isinstance(message.get(EXTENSION_KEY), dict) and "response" in message[EXTENSION_KEY]:
                event[EXTENSION_KEY] = {"response": message[EXTENSION_KEY]["response"]}
            first = False
            decoder.feed_object(event)
            decoder.feed_object({**event, "content_items": [item], EXTENSION_KEY: None})
        stop: dict[str, Any] = {
            "role": "assistant",
            "event_type": "stop",
            "content_items": [],
            "usage_metadata": message.get("usage_metadata"),
            "finish_reason": message.get("finish_reason"),
            "created_at": created,
            EXTENSION_KEY: message.get(EXTENSION_KEY),
        }
        decoder.feed_object(stop)
    except (TypeError, AttributeError) as exc:
        decoder.violation("response", f"malformed message ({exc})")
    return decode_all(decoder, DONE)


def _whole_fragment_dict(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    d = dict(item)
    kind = str(d.get("type", "")).removesuffix(".done")
    d["type"] = f"{kind}.delta"
    if kind == "tool_call":
        d["arguments"] = json.dumps(d.get("arguments") or {}, ensure_ascii=False)
    return d


def encode_response(response: hub.Response) -> dict:
    """The assembled message; an error (or unparsable tool arguments) as ``{"error": ...}``."""
    view = UniEventView(lambda: (response.created or 0) * 1000)
    events: list[UniEvent] = []
    for event in hub.response_events(response):
        out, exc = view.step(event)
        events.extend(out)
        if exc is not None:
            obj = error_object(event) if type(event) is hub.Error else exception_object(exc)
            return {"error": obj}
    return assemble_message(events).to_dict()


def model_body(name: str) -> dict[str, Any]:
    """One model as MMSP's client reads it (``mmsp.mmsp.client.MmspClient.list_models``)."""
    return {"id": name, "object": "model", "owned_by": "llmbridge"}


def models_body(names: list[str]) -> dict[str, Any]:
    """MMSP's model list: OpenAI-shaped."""
    return {"object": "list", "data": [model_body(n) for n in names]}
