"""Hub events -> Anthropic Messages stream.

Anthropic content blocks never interleave and are numbered densely from 0 in the order
they start.  Hub blocks may interleave (parallel tool calls, several choices), so the
first open block streams live and blocks that start meanwhile are buffered, already
encoded, and flushed in start order when the live one stops.  ``message_start`` waits
for the first content so it can carry the input usage; ``message_delta`` waits for
``ResponseEnd`` because usage may follow the finish reason.  Hub data with no Anthropic
field travels under the ``"llmbridge"`` key of the nearest object (see docs/dialects).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ... import hub
from ..base import EXTENSION_KEY, EncoderDispatch, EncoderState, json_encode
from ._common import (
    NAME,
    STOP_JSON,
    error_body,
    event_to_json,
    stop_from_finish,
    usage_json,
    usage_object,
    usage_to_raw,
)

_DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_END = b"}}\n\n"
_TEXT_START = b'event: content_block_start\ndata: {"type":"content_block_start","index":'
_TEXT_START_END = b',"content_block":{"type":"text","text":""}}\n\n'
_PLAIN_START = b'event: message_start\ndata: {"type":"message_start","message":{"id":'
_PLAIN_START_MODEL = b',"type":"message","role":"assistant","model":'
_PLAIN_START_END = (
    b',"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,'
    b'"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0,'
    b'"cache_creation":null,"server_tool_use":null,"service_tier":null}}}\n\n'
)
_DELTA_HEAD = b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
_DELTA_SEQUENCE = b',"stop_sequence":'
_DELTA_USAGE = b'},"usage":'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":'
# The states as globals for the per-event checks (see EncoderState).
_IDLE, _OPEN, _CLOSED = EncoderState.IDLE, EncoderState.OPEN, EncoderState.CLOSED


# Wire indexes as JSON text, for the indexes nearly every stream has (str(n).encode() is two calls).
_INDEXES = tuple(str(n).encode() for n in range(32))


def sse(event: bytes, data: Any) -> bytes:
    return b"event: " + event + b"\ndata: " + json_encode(data) + b"\n\n"


def _split(ns: dict[str, Any] | None, own: bool) -> tuple[Any, dict[str, Any] | None]:
    """(this dialect's entry, the other namespaces) of a fidelity or extensions dict."""
    if not ns:
        return None, None
    if not own or NAME not in ns:
        return None, dict(ns)
    rest = {k: v for k, v in ns.items() if k != NAME}
    return ns[NAME], rest or None


class _Out:
    """One hub block on its way out as an Anthropic content block."""

    __slots__ = ("annotations", "chunks", "closed", "prefix", "start", "started", "text", "wire", "wire_type")

    def __init__(self, wire: int, start: hub.BlockStart) -> None:
        self.wire = wire
        self.start = start
        self.wire_type = ""
        self.prefix = b""  # content_block_delta bytes up to the delta's text
        self.chunks: list[bytes] = []  # encoded bytes waiting while another block is live
        self.closed = False
        self.started = False  # content_block_start written (thinking blocks start lazily)
        self.text = False  # a thinking block had text
        self.annotations: list[dict[str, Any]] = []


class StreamEncoder(EncoderDispatch):
    """Hub events to anthropic-messages SSE events.

    ``message_start`` waits for the first block (it carries the usage known by then); one
    content block streams at a time, the others queue.  Terminal rule: ``ResponseEnd``
    closes every block and writes ``message_delta`` (stop_reason, usage) and
    ``message_stop``; an ``Error`` writes what had arrived and then the ``error`` event, which
    is the end (Anthropic leaves blocks open on error).  Choices other than 0, annotations
    after their block and exact finish reasons ride under ``llmbridge``.  Refuses what is
    not a hub event (``TypeError``); after the end it writes nothing.
    """

    def __init__(self) -> None:
        self._start: hub.ResponseStart | None = None
        self._state = _IDLE  # OPEN once message_start is out (it waits for the first block)
        self._usage: hub.Usage | None = None
        self._finish: hub.Finish | None = None
        self._blocks: dict[int, _Out] = {}  # hub index -> choice 0 block
        self._wire = 0
        self._live: _Out | None = None
        self._queue: deque[_Out] = deque()
        self._late: list[dict[str, Any]] = []  # annotations after their block, stream-level ones
        self._others: list[dict[str, Any]] = []  # events of choices > 0
        self._other_blocks: set[int] = set()
        self._delta_extras: dict[str, Any] = {}
        self._tools = 0

    def encode(self, event: hub.Event) -> bytes:
        """The hot path without a call: more text for the block on the wire (what
        ``_route(_delta())`` gives).  Every other event goes to its ``on_*`` method through
        :meth:`EncoderDispatch.encode` (one dispatch chain for every encoder: a copy here
        saved a call for each of a stream's few other events, ~0.1 µs each, and would have
        to follow every change to the chain)."""
        if type(event) is hub.Delta and self._state is not _CLOSED:
            delta: hub.Delta = event  # type: ignore[assignment]  # narrowed by type()
            block = self._blocks.get(delta.index)
            if block is self._live and block is not None and block.started and delta.text:
                return block.prefix + json_encode(delta.text) + _END
            return self.on_delta(delta)
        return EncoderDispatch.encode(self, event)

    # EncoderDispatch.encode calls these, one per hub event type.

    def on_delta(self, event: hub.Delta) -> bytes:
        block = self._blocks.get(event.index)
        if block is self._live and block is not None and block.started and event.text:
            return block.prefix + json_encode(event.text) + _END
        if block is None:
            if event.index in self._other_blocks:
                self._others.append(event_to_json(event))
            return b""
        return self._route(block, self._delta(block, event.text))

    def on_usage(self, event: hub.Usage) -> bytes:
        self._usage = hub.merge_usage(self._usage, event)
        return b""

    def on_finish(self, event: hub.Finish) -> bytes:
        if event.choice == 0:
            self._finish = event
        else:
            self._others.append(event_to_json(event))
        return b""

    def on_response_start(self, event: hub.ResponseStart) -> bytes:
        self._start = event
        return b""

    # -- message frame

    def _message_start(self) -> bytes:
        if self._state is not _IDLE:
            return b""
        self._state = _OPEN
        start = self._start or hub.ResponseStart()
        ext = start.extensions
        if not self.extensions and self._usage is None and (not ext or NAME not in ext):
            # The usual start of a translated stream (plain, no usage yet, none of our fields
            # among the extensions): the general steps' bytes, with only the id and model to encode.
            id, model = json_encode(start.id or "msg_llmbridge"), json_encode(start.model or "")
            return _PLAIN_START + id + _PLAIN_START_MODEL + model + _PLAIN_START_END
        return self._start_general(start)

    def _start_general(self, start: hub.ResponseStart) -> bytes:
        # (the hub data beside the usage goes under our key: a plain client's is never made)
        usage, usage_extra = usage_to_raw(self._usage) if self.extensions else (usage_object(self._usage), None)
        message: dict[str, Any] = {
            "id": start.id or "msg_llmbridge",
            "type": "message",
            "role": "assistant",
            "model": start.model or "",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        own, foreign = _split(start.extensions, True) if start.extensions else (None, None)
        if type(own) is dict:
            for key, value in own.items():
                message.setdefault(key, value)
        if not self.extensions:  # (what PlainEncoder would strip: every stream has some)
            return sse(b"message_start", {"type": "message_start", "message": message})
        ours = {"request_id": start.request_id, "created": start.created, "extensions": foreign, "usage": usage_extra}
        ours = {k: v for k, v in ours.items() if v is not None}
        if start.id is None:
            ours["no_id"] = True
        if ours:
            message[EXTENSION_KEY] = ours
        return sse(b"message_start", {"type": "message_start", "message": message})

    def on_response_end(self, event: hub.ResponseEnd) -> bytes:
        if self._state is _OPEN and self._live is None and not self._queue:
            # The usual end (every block already stopped): _message_start and _close_all would
            # give b"" and [].
            data = self._message_delta() + _MESSAGE_STOP
            self._state = _CLOSED
            return data
        out = [self._message_start(), *self._close_all(), self._message_delta()]
        out.append(_MESSAGE_STOP)
        self._state = _CLOSED
        return b"".join(out)

    def on_error(self, error: hub.Error) -> bytes:
        out = [self._message_start()] if self._start is not None else []
        if self._finish is not None or self._late or self._others:
            # The turn had finished (or carried data waits): say so before the error.
            out.extend(self._close_all())
            out.append(self._message_delta())
        else:
            while self._queue:  # what arrived, in order; Anthropic leaves blocks open on error
                out.extend(self._queue.popleft().chunks)
        out.append(sse(b"error", error_body(error)))
        self._state = _CLOSED
        return b"".join(out)

    def _close_all(self) -> list[bytes]:
        """Close the live block and flush the buffered ones, closing any still open."""
        out = []
        if self._live is not None:
            self._live.closed = True
            out.append(self._stop_bytes(self._live, hub.BlockStop(self._live.start.index)))
            self._live = None
        while self._queue:
            block = self._queue.popleft()
            out.extend(block.chunks)
            if not block.closed:
                block.closed = True
                out.append(self._stop_bytes(block, hub.BlockStop(block.start.index)))
        return out

    def _message_delta(self) -> bytes:
        """The ``message_delta`` event's bytes (stop reason, usage, and what rides beside them)."""
        if not self.extensions and not self._delta_extras:
            # The usual end of a plain stream: the bytes _delta_general writes (the test of the
            # fast paths compares them), with only the values encoded and no dicts built around them.
            finish = self._finish
            if finish is None:
                stop = sequence = b"null"
            else:
                stop = STOP_JSON[stop_from_finish(finish)[0]]
                seq = finish.stop_sequence
                sequence = b"null" if seq is None else json_encode(seq)
            usage = usage_json(self._usage)
            return _DELTA_HEAD + stop + _DELTA_SEQUENCE + sequence + _DELTA_USAGE + usage + b"}\n\n"
        return self._delta_general()

    def _delta_general(self) -> bytes:
        delta: dict[str, Any] = {"stop_reason": None, "stop_sequence": None}
        exact = True
        if self._finish is not None:
            stop, exact = stop_from_finish(self._finish)
            delta["stop_reason"] = stop
            delta["stop_sequence"] = self._finish.stop_sequence
        extras = self._delta_extras
        if extras:
            for key, value in (extras.get("delta") or {}).items():
                delta.setdefault(key, value)
        usage, usage_extra = usage_to_raw(self._usage) if self.extensions else (usage_object(self._usage), None)
        body: dict[str, Any] = {"type": "message_delta", "delta": delta, "usage": usage}
        if extras:
            for key, value in extras.items():
                if key != "delta":
                    body.setdefault(key, value)
        if not self.extensions:  # (what PlainEncoder would strip: every stream has some)
            return sse(b"message_delta", body)
        # (only now: a translated finish is seldom exact, and a plain client never sees this)
        finish = self._finish  # (not exact: there is one)
        ours: dict[str, Any] = {"finish": event_to_json(finish)} if finish is not None and not exact else {}
        if usage_extra:
            ours["usage"] = usage_extra
        if self._late:
            ours["annotations"] = self._late
        if self._others:
            ours["events"] = self._others
        if ours:
            body[EXTENSION_KEY] = ours
        return sse(b"message_delta", body)

    # -- blocks

    def on_block_start(self, event: hub.BlockStart) -> bytes:
        if event.choice != 0:
            self._other_blocks.add(event.index)
            self._others.append(event_to_json(event))
            return b""
        if event.index in self._blocks:
            return b""
        head = self._message_start()
        block = _Out(self._wire, event)
        self._wire += 1
        self._blocks[event.index] = block
        body = self._start_bytes(block)
        if self._live is None:
            self._live = block
            return head + body
        self._queue.append(block)
        if body:
            block.chunks.append(body)
        return head

    def _start_bytes(self, block: _Out) -> bytes:
        start = block.start
        kind = start.kind
        wire = block.wire
        index = _INDEXES[wire] if wire < 32 else str(wire).encode()
        if kind == "text" and not (start.id or start.extensions or start.fidelity) and start.index == block.wire:
            # The usual block: nothing under our key, so its start is the same bytes every time.
            block.wire_type = "text"
            block.prefix = _DELTA + index + b',"delta":{"type":"text_delta","text":'
            block.started = True
            return _TEXT_START + index + _TEXT_START_END
        own_ext, foreign_ext = _split(start.extensions, kind != "data")
        if kind == "thinking":
            block.wire_type = "thinking"
            block.prefix = _DELTA + index + b',"delta":{"type":"thinking_delta","thinking":'
            return b""  # lazily: a thinking block without text may turn out redacted
        if kind == "text":
            content: dict[str, Any] = {"type": "text", "text": ""}
            delta_type = b"text_delta"
            key = b"text"
        elif kind == "tool_call":
            self._tools += 1
            content = {
                "type": "tool_use",
                "id": start.id or f"toolu_{(self._start and self._start.id) or 'llmbridge'}_{self._tools}",
                "name": start.name or "",
                "input": {},
            }
            delta_type = b"input_json_delta"
            key = b"partial_json"
        elif kind == "native" and type(own_ext) is dict and own_ext.get("type"):
            content = dict(own_ext)  # an Anthropic block: replay it as it came
            own_ext = None
            is_compaction = content.get("type") == "compaction"
            delta_type = b"compaction_delta" if is_compaction else b"input_json_delta"
            key = b"content" if is_compaction else b"partial_json"
        else:  # a block Anthropic has no type for
            foreign_ext = start.extensions
            own_ext = None
            data = {"kind": kind, "id": start.id, "name": start.name, "mime_type": start.mime_type}
            content = {"type": EXTENSION_KEY, EXTENSION_KEY: {k: v for k, v in data.items() if v is not None}}
            delta_type = b"llmbridge_delta"
            key = b"text"
        if type(own_ext) is dict:
            for k, v in own_ext.items():
                content.setdefault(k, v)
        ours = content.get(EXTENSION_KEY) if content.get("type") == EXTENSION_KEY else {}
        if kind == "text" and start.id:
            ours["id"] = start.id
        if start.index != block.wire:
            ours["index"] = start.index
        if start.fidelity:
            ours["fidelity"] = start.fidelity
        if foreign_ext:
            ours["extensions"] = foreign_ext
        if ours:
            content[EXTENSION_KEY] = ours
        block.wire_type = content["type"]
        block.prefix = _DELTA + index + b',"delta":{"type":"' + delta_type + b'","' + key + b'":'
        block.started = True
        return sse(
            b"content_block_start", {"type": "content_block_start", "index": block.wire, "content_block": content}
        )

    def _thinking_start(self, block: _Out, redacted: Any = None) -> bytes:
        block.started = True
        start = block.start
        _, foreign = _split(start.fidelity, True)
        if redacted is not None:
            content: dict[str, Any] = {"type": "redacted_thinking", "data": redacted}
            block.wire_type = "redacted_thinking"
        else:
            content = {"type": "thinking", "thinking": "", "signature": ""}
        ours: dict[str, Any] = {"id": start.id} if start.id else {}
        if start.index != block.wire:
            ours["index"] = start.index
        if foreign:
            ours["fidelity"] = foreign
        if start.extensions:
            ours["extensions"] = start.extensions
        if ours:
            content[EXTENSION_KEY] = ours
        return sse(
            b"content_block_start", {"type": "content_block_start", "index": block.wire, "content_block": content}
        )

    def _delta(self, block: _Out, text: str) -> bytes:
        if not text or block.closed:
            return b""
        if block.wire_type == "thinking":
            block.text = True
            if not block.started:
                return self._thinking_start(block) + block.prefix + json_encode(text) + _END
        return block.prefix + json_encode(text) + _END

    def _route(self, block: _Out, data: bytes) -> bytes:
        if block is self._live:
            return data
        if data:
            block.chunks.append(data)
        return b""

    def on_block_stop(self, event: hub.BlockStop) -> bytes:
        if event.index in self._other_blocks:
            self._others.append(event_to_json(event))
            return b""
        block = self._blocks.get(event.index)
        if block is None or block.closed:
            return b""
        block.closed = True
        data = self._stop_bytes(block, event)
        if block is not self._live:
            block.chunks.append(data)
            return b""
        self._live = None
        if not self._queue:  # (nearly always: no block started while this one was live)
            return data
        out = [data]
        while self._queue:
            nxt = self._queue.popleft()
            out.extend(nxt.chunks)
            nxt.chunks = []
            if not nxt.closed:
                self._live = nxt
                break
        return b"".join(out)

    def _stop_bytes(self, block: _Out, stop: hub.BlockStop) -> bytes:
        if block.wire_type == "text" and not (stop.fidelity or stop.extensions or block.annotations):
            # The usual text block: nothing under our key, so its stop is the same bytes every time.
            wire = block.wire
            return _STOP + (_INDEXES[wire] if wire < 32 else str(wire).encode()) + b"}\n\n"
        return self._stop_general(block, stop)

    def _stop_general(self, block: _Out, stop: hub.BlockStop) -> bytes:
        out = b""
        fidelity = stop.fidelity
        if block.wire_type == "thinking":
            merged = hub.merge_dicts(block.start.fidelity, fidelity) or {}
            own = merged.get(NAME) or {}
            if not block.started:
                redacted = own.get("redacted_data") if not block.text else None
                out = self._thinking_start(block, redacted)
            if block.wire_type == "thinking" and own.get("signature"):
                out += (
                    _DELTA
                    + str(block.wire).encode()
                    + b',"delta":{"type":"signature_delta","signature":'
                    + json_encode(own["signature"])
                    + _END
                )
            _, fidelity = _split(fidelity, True)
        body: dict[str, Any] = {"type": "content_block_stop", "index": block.wire}
        ours: dict[str, Any] = {}
        if fidelity:
            ours["fidelity"] = fidelity
        extensions = stop.extensions
        if extensions and block.wire_type not in ("text", "thinking", "redacted_thinking", "tool_use", EXTENSION_KEY):
            _, extensions = _split(extensions, True)  # an Anthropic block's final object: already streamed
        if extensions:
            ours["extensions"] = extensions
        if block.annotations:
            ours["annotations"] = block.annotations
        if ours:
            body[EXTENSION_KEY] = ours
        return out + sse(b"content_block_stop", body)

    def on_extension(self, event: hub.Extension) -> bytes:
        index = event.index
        if index is None:
            data = event.data
            if event.namespace == NAME and type(data) is dict and type(data.get("message_delta")) is dict:
                self._delta_extras = data["message_delta"]
            else:
                self._late.append(event_to_json(event))
            return b""
        if index in self._other_blocks:
            self._others.append(event_to_json(event))
            return b""
        block = self._blocks.get(index)
        if block is None:
            return b""
        if block.closed:
            self._late.append(event_to_json(_at_wire(event, block.wire)))
            return b""
        data = event.data
        if (
            event.namespace == NAME
            and type(data) is dict
            and str(data.get("type", "")).endswith("_delta")
            and block.started
            and block.wire_type != EXTENSION_KEY
        ):
            wire = {"type": "content_block_delta", "index": block.wire, "delta": data}
            return self._route(block, sse(b"content_block_delta", wire))
        block.annotations.append(event_to_json(event))
        return b""


def _at_wire(event: hub.Extension, wire: int) -> hub.Extension:
    return hub.Extension(event.namespace, event.data, wire)
