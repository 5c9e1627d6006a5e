"""Hub events -> cohere-v2 SSE stream."""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from .._carrying import WIRE_KINDS, CarryingEncoder
from ..base import EncoderState, json_encode
from ._common import FINISH_TO_HUB, FINISH_TO_WIRE, NAME, is_plan, usage_to_wire


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json_encode(data) + b"\n\n"


class StreamEncoder(CarryingEncoder):
    """Hub events to cohere-v2 SSE events (see :class:`CarryingEncoder`).

    Terminal rule: ``ResponseEnd`` closes the open blocks and writes ``message-end``
    (``finish_reason``, usage); an ``Error`` writes ``message-end`` with ``finish_reason``
    ``ERROR`` and the message, the end.  What the wire cannot say is carried under
    ``llmbridge``.  Refuses what is not a hub event (``TypeError``); after the end it
    writes nothing.
    """

    def __init__(self) -> None:
        super().__init__()  # _blocks: hub index -> (content | thinking | tool | plan, wire index)
        self._content = 0
        self._tools = 0
        self._citations = 0
        self._seq = 0  # blocks on the wire, in the order the decoder numbers them

    def _index(self) -> int:
        self._seq += 1
        return self._seq - 1

    def _start_wire(self, event: hub.ResponseStart) -> bytes:
        body = {
            "id": event.id or "",
            "type": "message-start",
            "delta": {
                "message": {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}
            },
        }
        return _sse("message-start", self._ext(body, start=br.start_info(event, ("id",))))

    def _block_start(self, e: hub.BlockStart) -> bytes:
        if e.choice != 0 or e.kind not in WIRE_KINDS:
            return self._carry_start(e)
        if e.kind == "tool_call":
            wire = self._tools
            self._tools += 1
            self._calls = True
            self._blocks[e.index] = ("tool", wire)
            info = br.block_info(e, {"id", "name"}, self._index())
            if e.id is None:
                info = {**(info or {}), "no_id": True}
            function = {"name": e.name or "", "arguments": ""}
            call = {"id": e.id or f"call_{wire}", "type": "function", "function": function}
            body = {"type": "tool-call-start", "index": wire, "delta": {"message": {"tool_calls": call}}}
            return _sse("tool-call-start", self._ext(body, block=info))
        if e.kind == "thinking" and is_plan(e.fidelity):
            self._blocks[e.index] = ("plan", 0)
            own, others = br.split_own(e.fidelity, NAME)
            rest = {k: v for k, v in own.items() if k != "tool_plan"}
            start = hub.BlockStart(
                e.index,
                e.kind,
                e.id,
                e.name,
                0,
                e.mime_type,
                hub.merge_dicts(others, {NAME: rest} if rest else None),
                e.extensions,
            )
            body = {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": ""}}}
            return _sse(
                "tool-plan-delta", self._ext(body, block=br.block_info(start, set(), self._index()) or {"plain": True})
            )
        wire = self._content
        self._content += 1
        self._blocks[e.index] = ("thinking" if e.kind == "thinking" else "content", wire)
        content = {"type": e.kind, e.kind: ""}
        body = {"type": "content-start", "index": wire, "delta": {"message": {"content": content}}}
        return _sse("content-start", self._ext(body, block=br.block_info(e, set(), self._index())))

    def _delta(self, e: hub.Delta) -> bytes:
        where = self._blocks.get(e.index)
        if where is None:
            return self._carry(e)
        kind, wire = where
        if kind == "tool":
            body = {
                "type": "tool-call-delta",
                "index": wire,
                "delta": {"message": {"tool_calls": {"function": {"arguments": e.text}}}},
            }
            return _sse("tool-call-delta", self._ext(body))
        if kind == "plan":
            body = {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": e.text}}}
            return _sse("tool-plan-delta", self._ext(body))
        key = "thinking" if kind == "thinking" else "text"
        body = {"type": "content-delta", "index": wire, "delta": {"message": {"content": {key: e.text}}}}
        return _sse("content-delta", self._ext(body))

    def _block_stop(self, e: hub.BlockStop) -> bytes:
        where = self._blocks.pop(e.index, None)
        if where is None:
            return self._carry(e)
        kind, wire = where
        info = br.stop_info(e)
        if kind == "plan":
            if not info:
                return b""  # the next non-plan event ends the plan
            body = {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": ""}}}
            return _sse("tool-plan-delta", self._ext(body, stop=info))
        name = "tool-call-end" if kind == "tool" else "content-end"
        return _sse(name, self._ext({"type": name, "index": wire}, stop=info))

    def _extension(self, e: hub.Extension) -> bytes:
        if e.namespace == NAME and type(e.data) is dict:
            wire = self._citations
            self._citations += 1
            body = {"type": "citation-start", "index": wire, "delta": {"message": {"citations": e.data}}}
            out = _sse("citation-start", self._ext(body, hub=br.event_to_json(e)))
            return out + _sse("citation-end", {"type": "citation-end", "index": wire})
        return super()._extension(e)

    def _end(self) -> bytes:
        out = self._close_all()
        delta: dict[str, Any] = {}
        more: dict[str, Any] = {}
        if self._finish is not None:  # (Cohere can end without a reason)
            delta["finish_reason"], more["finish"] = self._finish_word(FINISH_TO_WIRE, FINISH_TO_HUB, "COMPLETE")
        if self._usage is not None:
            delta["usage"], more["usage"] = usage_to_wire(self._usage)
        self._state = EncoderState.CLOSED
        return out + _sse("message-end", self._ext({"type": "message-end", "delta": delta}, **more))

    def _error(self, error: hub.Error) -> bytes:
        # Cohere ends a failed stream with message-end, finish_reason ERROR and the message.
        self._blocks.clear()  # (left open, as a failed stream leaves them)
        self._carried.clear()
        self._carry_totals()
        body = {"type": "message-end", "delta": {"finish_reason": "ERROR", "error": error.message}}
        return _sse("message-end", self._ext(body, error=br.error_to_json(error)))
