"""Hub events -> gemini-interactions SSE stream."""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from .._carrying import WIRE_KINDS, CarryingEncoder
from ..base import EncoderState, json_encode
from ._common import HUB_TO_GOOGLE, HUB_TO_STATUS, NAME, STATUS_TO_HUB, usage_to_wire


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json_encode(data) + b"\n\n"


class StreamEncoder(CarryingEncoder):
    """Hub events to gemini-interactions SSE events (see :class:`CarryingEncoder`).

    Terminal rule: ``ResponseEnd`` closes the open content and writes
    ``interaction.completed`` (status, usage); an ``Error`` writes the ``error`` event (usage
    and finish carried on it), the end.  What the wire cannot say is carried under ``llmbridge``.
    Refuses what is not a hub event (``TypeError``); after the end it writes nothing.
    """

    def __init__(self) -> None:
        super().__init__()  # _blocks: hub index -> (kind, wire index)
        self._wire = 0
        self._interaction: dict[str, Any] = {}
        self._start_event: hub.ResponseStart | None = None

    def _start_wire(self, event: hub.ResponseStart) -> bytes:
        self._start_event = event
        interaction = {
            "id": event.id or "",
            "status": "in_progress",
            "object": "interaction",
            "model": event.model or "",
        }
        rest = br.start_info(event, ("id", "model"))
        created = self._ext(
            {"interaction": interaction, "event_type": "interaction.created"}, start=self._start_fix(rest)
        )
        status = {"interaction_id": event.id or "", "status": "in_progress", "event_type": "interaction.status_update"}
        return _sse(created) + _sse(status)

    @staticmethod
    def _start_fix(rest: dict[str, Any]) -> dict[str, Any]:
        # (apply_start knows "no_id"; a missing model is put back as None explicitly)
        if rest.pop("no_model", False):
            rest["model"] = None
        return rest

    def _extension(self, e: hub.Extension) -> bytes:
        if (
            e.namespace == NAME
            and e.index is None
            and type(e.data) is dict
            and list(e.data) == ["interaction"]
            and not self._interaction
        ):
            self._interaction = dict(e.data["interaction"])  # fields of the completed interaction
            return b""
        return super()._extension(e)

    def _block_start(self, e: hub.BlockStart) -> bytes:
        raw = (e.extensions or {}).get(NAME) if e.kind == "native" else None
        if e.choice == 0 and type(raw) is dict and type(raw.get("type")) is str:
            # one of this API's own built-in tool steps: back on the wire as that step
            wire = self._wire
            self._wire += 1
            self._blocks[e.index] = ("native", wire)
            info = br.block_info(e, {"extensions"} if e.extensions == {NAME: raw} else set(), wire)
            return _sse(self._ext({"index": wire, "step": raw, "event_type": "step.start"}, block=info))
        if e.choice != 0 or e.kind not in WIRE_KINDS:
            return self._carry_start(e)
        wire = self._wire
        self._wire += 1
        self._blocks[e.index] = (e.kind, wire)
        if e.kind == "tool_call":
            self._calls = True
            step = {"id": e.id or f"call_{wire}", "type": "function_call", "name": e.name or "", "arguments": {}}
            info = br.block_info(e, {"id", "name"}, wire)
        else:
            step = {"type": "model_output" if e.kind == "text" else "thought"}
            info = br.block_info(e, set(), wire)
        return _sse(self._ext({"index": wire, "step": step, "event_type": "step.start"}, block=info))

    def _delta(self, e: hub.Delta) -> bytes:
        where = self._blocks.get(e.index)
        if where is None:
            return self._carry(e)
        kind, wire = where
        if kind == "native":
            self._pending.append(br.event_to_json(e))
            return b""
        if kind == "text":
            delta = {"text": e.text, "type": "text"}
        elif kind == "thinking":
            delta = {"content": {"type": "text", "text": e.text}, "type": "thought_summary"}
        else:
            delta = {"arguments": e.text, "type": "arguments_delta"}
        return _sse(self._ext({"index": wire, "delta": delta, "event_type": "step.delta"}))

    def _block_stop(self, e: hub.BlockStop) -> bytes:
        where = self._blocks.pop(e.index, None)
        if where is None:
            return self._carry(e)
        _, wire = where
        out = b""
        own, others = br.split_own(e.fidelity, NAME)
        if type(own.get("signature")) is str:
            delta = {"signature": own["signature"], "type": "thought_signature"}
            out += _sse(self._ext({"index": wire, "delta": delta, "event_type": "step.delta"}))
            own = {k: v for k, v in own.items() if k != "signature"}
        fidelity = hub.merge_dicts(others, {NAME: own} if own else None)
        stop = {k: v for k, v in (("fidelity", fidelity), ("extensions", e.extensions)) if v}
        return out + _sse(self._ext({"index": wire, "event_type": "step.stop"}, stop=stop))

    def _end(self) -> bytes:
        out = self._close_all()
        start = self._start_event or hub.ResponseStart()
        more: dict[str, Any] = {}
        status, more["finish"] = self._finish_word(HUB_TO_STATUS, STATUS_TO_HUB, "completed")
        interaction: dict[str, Any] = {"id": start.id or "", "status": status}
        if self._usage is not None:
            interaction["usage"], more["usage"] = usage_to_wire(self._usage)
        else:
            interaction["usage"] = {}
            more["no_usage"] = True
        if not self._interaction:
            more["no_interaction"] = True
        for key, value in self._interaction.items():
            interaction.setdefault(key, value)
        interaction.setdefault("object", "interaction")
        interaction.setdefault("model", start.model or "")
        self._state = EncoderState.CLOSED
        return out + _sse(self._ext({"interaction": interaction, "event_type": "interaction.completed"}, **more))

    def _error(self, error: hub.Error) -> bytes:
        self._carry_totals()
        status = error.status or hub.ERROR_STATUS.get(error.type, 500)
        body = {"code": status, "message": error.message, "status": HUB_TO_GOOGLE.get(error.type, "INTERNAL")}
        return _sse(self._ext({"error": body, "event_type": "error"}, error=br.error_to_json(error)))
