"""Hub events -> bedrock-converse event-stream frames."""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from .._carrying import WIRE_KINDS, CarryingEncoder
from ..base import EncoderState, json_encode
from ..eventstream import encode_frame
from ._common import EXCEPTION_TO_HUB, HUB_TO_EXCEPTION, HUB_TO_STOP, NAME, STOP_TO_HUB, usage_to_wire


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
        self._state = EncoderState.CLOSED
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
