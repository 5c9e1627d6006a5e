"""The stream-encoder skeleton shared by the cohere-v2, bedrock-converse and gemini-interactions codecs.

Each of those wires has events for text, thinking and tool-call blocks only; everything else
(other choices, native blocks, extensions, a second finish) is *carried*: queued as hub events
and written under the ``"llmbridge"`` key of the next wire object (see :mod:`._bridge`).  This
class holds that bookkeeping and the per-event dispatch; a dialect supplies the wire shapes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import hub
from . import _bridge as br
from .base import EXTENSION_KEY, EncoderDispatch, EncoderState

WIRE_KINDS = ("text", "thinking", "tool_call")  # block kinds these wires have events for
# The states as globals for the per-event checks (see EncoderState).
_IDLE, _OPEN, _CLOSED = EncoderState.IDLE, EncoderState.OPEN, EncoderState.CLOSED


class CarryingEncoder(EncoderDispatch):
    """Subclasses write ``_start_wire``, ``_block_start``, ``_delta``, ``_block_stop``, ``_end`` and
    ``_error``; the dispatch and the edges (after the end, not a hub event) are :class:`EncoderDispatch`'s."""

    def __init__(self) -> None:
        self._blocks: dict[int, Any] = {}  # hub index -> the dialect's record of the open wire block
        self._carried: set[int] = set()  # hub blocks carried as hub events
        self._pending: list[dict[str, Any]] = []  # hub events waiting for the next wire object
        self._usage: hub.Usage | None = None
        self._finish: hub.Finish | None = None
        self._state = _IDLE  # OPEN once the wire's opening event is out
        self._calls = False  # a tool call went on the wire (so its decoder reads a plain end as tool_use)

    # EncoderDispatch.encode calls these, one per hub event type; the wire's opening event
    # goes out before the first event's own bytes, whatever that event is.

    def on_response_start(self, event: hub.ResponseStart) -> bytes:
        return self._start(event)

    def on_delta(self, event: hub.Delta) -> bytes:
        return self._start() + self._delta(event)

    def on_block_start(self, event: hub.BlockStart) -> bytes:
        return self._start() + self._block_start(event)

    def on_block_stop(self, event: hub.BlockStop) -> bytes:
        return self._start() + self._block_stop(event)

    def on_usage(self, event: hub.Usage) -> bytes:
        head = self._start()
        self._usage = hub.merge_usage(self._usage, event)
        return head

    def on_finish(self, event: hub.Finish) -> bytes:
        head = self._start()
        if event.choice == 0 and self._finish is None:
            self._finish = event  # the wire says it at the end
        else:
            self._pending.append(br.event_to_json(event))
        return head

    def on_extension(self, event: hub.Extension) -> bytes:
        return self._start() + self._extension(event)

    def on_error(self, event: hub.Error) -> bytes:
        return self._start() + self._error(event)

    def on_response_end(self, event: hub.ResponseEnd) -> bytes:
        return self._start() + self._end()

    def _start(self, event: hub.ResponseStart | None = None) -> bytes:
        if self._state is not _IDLE:
            return b""
        self._state = _OPEN
        return self._start_wire(event or hub.ResponseStart())

    def _ext(self, body: dict[str, Any], **more: Any) -> dict[str, Any]:
        """``body`` with the pending hub events and the non-empty ``more`` under the extension key."""
        ours = {k: v for k, v in more.items() if v}
        if self._pending:
            ours["events"], self._pending = self._pending, []
        if ours:
            body[EXTENSION_KEY] = ours
        return body

    def _extension(self, e: hub.Extension) -> bytes:
        self._pending.append(br.event_to_json(e))
        return b""

    def _carry_start(self, e: hub.BlockStart) -> bytes:
        self._carried.add(e.index)
        self._pending.append(br.event_to_json(e))
        return b""

    def _carry(self, e: hub.Delta | hub.BlockStop) -> bytes:
        """A delta or stop of a block not on the wire: carried if its block was, else dropped
        (the block never started)."""
        if e.index in self._carried:
            if type(e) is hub.BlockStop:
                self._carried.discard(e.index)
            self._pending.append(br.event_to_json(e))
        return b""

    def _close_all(self) -> bytes:
        out = b"".join([self._block_stop(hub.BlockStop(i)) for i in list(self._blocks)])
        for index in sorted(self._carried):
            self._pending.append(br.event_to_json(hub.BlockStop(index)))
        self._carried.clear()
        return out

    def _finish_word(self, to_wire: dict[str, str], to_hub: dict[str, str], default: str) -> tuple[str, Any]:
        """The wire's word for the finish, and what to carry as ``finish``: the exact Finish when
        the word would not decode back to it, ``{"event": "none"}`` when there was none."""
        if self._finish is None:
            return default, {"event": "none"}
        word = to_wire.get(self._finish.reason, default)
        exact = br.exact_finish(self._finish, word, to_hub.get(word), self._calls)
        return word, None if exact else br.event_to_json(self._finish)

    def _carry_totals(self) -> None:
        """Before an error event: usage and finish have no wire event of their own left, so carry them."""
        if self._usage is not None:
            self._pending.append(br.event_to_json(self._usage))
        if self._finish is not None:
            self._pending.append(br.event_to_json(self._finish))
        self._state = _CLOSED


class CarriedDecoding:
    """Stream-decoder helpers for reading back what :class:`CarryingEncoder` wrote; mixed into
    decoders that have ``emit``, ``violation``, ``dialect``, ``_started`` and ``_tool_calls``."""

    FIRST_EVENT = ""  # the wire's opening event and its closing one, for violation messages
    LAST_EVENT = ""

    def _ensure_start(self) -> None:
        if not self._started:
            self._started = True
            self.violation("start-first", f"event before {self.FIRST_EVENT}")
            self.emit(hub.ResponseStart())

    def _emit_carried(self, ext: dict[str, Any]) -> None:
        for data in ext.get("events") or ():
            event = br.event_from_json(data)
            if event is not None:
                self.emit(event)

    def _emit_stop(self, index: int, stop: Any, own: dict[str, Any] | None = None) -> None:
        """BlockStop with the fidelity the wire carried natively (``own``) and what ``stop`` carried."""
        stop = stop if type(stop) is dict else {}
        fidelity = hub.merge_dicts({self.dialect: own} if own else None, stop.get("fidelity"))
        self.emit(hub.BlockStop(index, fidelity, stop.get("extensions")))

    def _close_open(self, blocks: Iterable[tuple[int, dict[str, Any] | None]]) -> None:
        """Stop blocks (hub index, own fidelity) the wire left open at its last event."""
        for index, own in blocks:
            self.violation("block-open", f"block {index} still open at {self.LAST_EVENT}")
            self.emit(hub.BlockStop(index, {self.dialect: own} if own else None))

    def _block_fields(self, ext: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        """The ``block`` entry (BlockStart fields the wire could not say); its id, name, mime
        type and extensions go into ``fields``."""
        info = br.obj_at(ext, "block")
        for key in ("id", "name", "mime_type", "extensions"):
            if key in info:
                fields[key] = info[key]
        return info
