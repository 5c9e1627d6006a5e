"""Non-streaming Responses bodies <-> hub: through the stream codecs, so both paths agree.

A response object is the stream's final ``response`` with every item whole: decoding replays
it as ``response.output_item.done`` events, encoding runs the hub events through the stream
encoder and keeps the ``response`` it would have sent with ``response.completed``.
"""

from __future__ import annotations

import msgspec

from ... import hub
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder


def decode_response(body: dict) -> list[hub.Event]:
    """A non-streaming response object as a hub stream (by replaying it as stream events)."""
    decoder = StreamDecoder()
    decoder.whole_items = True
    decoder.handle({"type": "response.created", "response": {**body, "output": []}})
    for n, item in enumerate(body.get("output") or []):
        if isinstance(item, dict) and type(item.get("type")) is str:
            decoder.handle({"type": "response.output_item.done", "output_index": n, "item": item})
    status = body.get("status")
    terminal = {"failed": "response.failed", "incomplete": "response.incomplete"}.get(status, "response.completed")
    decoder.handle({"type": terminal, "response": body})
    return decoder.feed(b"") + decoder.close()


def encode_response(response: hub.Response) -> dict:
    """An assembled response as a Responses object (what ``responses.create()`` returns)."""
    encoder = StreamEncoder()
    for event in hub.response_events(response):
        if type(event) is hub.BlockStart:  # fidelity up front, so items are written with their own ids
            block = next(b for b in response.blocks if b.index == event.index)
            event = msgspec.structs.replace(event, fidelity=block.fidelity)
        encoder.encode(event)
    return encoder.final_response or {}
