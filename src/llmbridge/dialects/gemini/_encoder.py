"""Hub events -> Gemini ``streamGenerateContent?alt=sse`` chunks, and hub responses ->
``generateContent`` bodies.

Framing: ``data: {...}`` + LF LF.  Google sends CRLF; every SSE parser (google-genai's
included) accepts both, and LF is what the other dialects here write.

Each text/thinking delta becomes one chunk with one part, as Gemini streams.  Tool calls,
inline data and native blocks are whole parts in Gemini, so they are buffered to their
``BlockStop``.  Usage rides on every chunk after it is known; finish reasons go on one last
chunk at ``ResponseEnd`` together with candidate-level extensions.  What Gemini cannot say
goes in the ``"llmbridge"`` key of the part / candidate / chunk (see docs/dialects/gemini.md).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub
from ..base import EXTENSION_KEY, EncoderDispatch, EncoderState
from ._common import (
    NAME,
    block_part,
    close_candidate,
    error_from_hub,
    format_time,
    parse_time,
    split_fidelity,
    usage_from_hub,
)

json_encode = msgspec.json.encode


class _Block:
    __slots__ = (
        "buf",
        "choice",
        "extensions",
        "fidelity",
        "id",
        "index",
        "kind",
        "live",
        "mime_type",
        "name",
        "parts",
        "sig",
        "start",
        "stop_event",
    )

    def __init__(self, e: hub.BlockStart) -> None:
        self.index = e.index
        self.kind = e.kind
        self.choice = e.choice
        self.id = e.id
        self.name = e.name
        self.mime_type = e.mime_type
        self.fidelity = e.fidelity
        self.extensions = e.extensions
        self.sig: str | None = None  # the start signature, until a part carries it
        self.start: dict | None = None  # our extension key for the first part
        self.parts = 0  # parts emitted
        self.buf: list[str] = []
        self.live = False  # first in its candidate's queue: text streams out as it comes
        self.stop_event: hub.BlockStop | None = None


class StreamEncoder(EncoderDispatch):
    """Hub events to Gemini ``streamGenerateContent`` SSE chunks (``data: {GenerateContentResponse}``).

    Gemini parts of one candidate cannot interleave, so per choice only the first open block
    streams; the others buffer until it is done.  Terminal rule (the wire has no terminal
    event): ``ResponseEnd`` flushes the buffered blocks and writes the last chunk, with every
    candidate's ``finishReason`` and the usage; an ``Error`` writes what was already said
    (finish, usage) and then Gemini's ``{"error": ...}`` chunk, the end.  Block fields Gemini
    has no place for ride under ``llmbridge`` on the part.  Refuses what is not a hub event
    (``TypeError``); after the end it writes nothing.
    """

    def __init__(self) -> None:
        self._tail = b""  # ,"modelVersion":..,"responseId":.. on every chunk
        self._first = b""  # stream-level extras for the first chunk
        self._usage = b""  # counts only, on every chunk
        self._usage_full = b""  # with our extension key, on the last chunk
        self._usage_hub: hub.Usage | None = None
        self._blocks: dict[int, _Block] = {}
        self._ordinals = 0
        self._written: dict[int, int] = {}  # hub index -> ordinal, for blocks already written
        self._last_part: dict[int, tuple[str, int] | None] = {}  # per choice: (kind, index) of the last part
        # Per choice, the blocks not yet fully written, in start order.  Gemini parts cannot
        # interleave, so only the first streams; the others buffer until it is done.
        self._queues: dict[int, list[_Block]] = {}
        self._finishes: dict[int, hub.Finish] = {}
        self._candidate_ext: dict[int, dict] = {}
        self._chunk_ext: dict[str, Any] = {}
        self._annotations: list[dict] = []
        self._state = EncoderState.IDLE  # no opening event on this wire: IDLE until CLOSED

    # -- chunks

    def _chunk(self, choice: int, part: bytes) -> bytes:
        first, self._first = self._first, b""
        return b"".join(
            (
                b'data: {"candidates":[{"content":{"parts":[',
                part,
                b'],"role":"model"},"index":',
                str(choice).encode(),
                b"}]",
                self._usage,
                self._tail,
                first,
                b"}\n\n",
            )
        )

    def _text_part(self, b: _Block, text: str, stop: dict | None = None) -> bytes:
        last = self._last_part.get(b.choice)
        if b.parts == 0 and b.start is None and last is not None and last[0] == b.kind:
            b.start = {}  # a marker: this part starts a new block, not the previous one's continuation
        self._last_part[b.choice] = (b.kind, b.index)
        if b.parts == 0:
            self._number(b)
        b.parts += 1
        if b.sig is None and b.start is None and stop is None:
            if b.kind == "thinking":
                return b'{"text":' + json_encode(text) + b',"thought":true}'
            return b'{"text":' + json_encode(text) + b"}"
        part: dict[str, Any] = {"text": text}
        if b.kind == "thinking":
            part["thought"] = True
        if b.sig is not None:
            part["thoughtSignature"] = b.sig
            b.sig = None
        ours: dict[str, Any] = {}
        if b.start is not None:
            ours["start"] = b.start
            b.start = None
        if stop is not None:
            ours["stop"] = stop
        if ours:
            part[EXTENSION_KEY] = ours
        return json_encode(part)

    # -- events

    # EncoderDispatch.encode calls these, one per hub event type.

    def on_delta(self, e: hub.Delta) -> bytes:
        b = self._blocks.get(e.index)
        if b is None:
            return b""
        if b.live and (b.kind == "text" or b.kind == "thinking"):
            if not e.text and b.sig is None and b.start is None:
                return b""
            return self._chunk(b.choice, self._text_part(b, e.text))
        b.buf.append(e.text)
        return b""

    def on_usage(self, e: hub.Usage) -> bytes:
        self._usage_hub = hub.merge_usage(self._usage_hub, e)
        meta = usage_from_hub(self._usage_hub)
        self._usage_full = b',"usageMetadata":' + json_encode(meta)
        ours = meta.get(EXTENSION_KEY)
        if ours and "extensions" in ours:  # other vendors' usage extras: once, on the last chunk
            meta = dict(meta)
            ours = {k: v for k, v in ours.items() if k != "extensions"}
            if ours:
                meta[EXTENSION_KEY] = ours
            else:
                del meta[EXTENSION_KEY]
        self._usage = b',"usageMetadata":' + json_encode(meta)
        return b""

    def on_finish(self, e: hub.Finish) -> bytes:
        self._finishes[e.choice] = e
        return b""

    def on_extension(self, e: hub.Extension) -> bytes:
        self._extension(e)
        return b""

    def on_response_start(self, e: hub.ResponseStart) -> bytes:
        self._response_start(e)
        return b""

    def on_error(self, e: hub.Error) -> bytes:
        self._state = EncoderState.CLOSED
        # What was already said (finish, usage) goes out first; then Gemini's error chunk.
        head = self._last_chunk(None, failed=True) if self._finishes or self._usage or self._annotations else b""
        return head + b"data: " + json_encode(error_from_hub(e)[1]) + b"\n\n"

    def on_response_end(self, e: hub.ResponseEnd) -> bytes:
        self._state = EncoderState.CLOSED
        held = b"".join(self._pump(c, everything=True) for c in list(self._queues))
        return held + self._last_chunk(e.request_id)

    def _response_start(self, e: hub.ResponseStart) -> None:
        tail = {}
        if e.model is not None:
            tail["modelVersion"] = e.model
        if e.id is not None:
            tail["responseId"] = e.id
        self._tail = json_encode(tail)[1:-1]
        if self._tail:
            self._tail = b"," + self._tail
        first: dict[str, Any] = {}
        exts = dict(e.extensions or {})
        ours = exts.pop(NAME, None)
        if isinstance(ours, dict):
            first.update(ours)
        mine: dict[str, Any] = {}
        if e.created is not None and "createTime" not in first:
            first["createTime"] = format_time(e.created)
            mine["time_from_created"] = True  # not the source's own createTime
        if exts:
            mine["extensions"] = exts
        if e.request_id is not None:
            mine["request_id"] = e.request_id
        if e.created is not None and parse_time(first["createTime"]) != e.created:
            mine["created"] = e.created
        if mine:
            first[EXTENSION_KEY] = mine
        self._first = b"," + json_encode(first)[1:-1] if first else b""

    def on_block_start(self, e: hub.BlockStart) -> bytes:
        b = self._blocks[e.index] = _Block(e)
        if e.kind == "text" or e.kind == "thinking":
            b.sig, foreign = split_fidelity(e.fidelity)
            start = {k: v for k, v in (("fidelity", foreign), ("extensions", e.extensions), ("id", e.id)) if v}
            if start:
                b.start = start
        queue = self._queues.setdefault(e.choice, [])
        queue.append(b)
        b.live = len(queue) == 1
        return b""

    def on_block_stop(self, e: hub.BlockStop) -> bytes:
        b = self._blocks.pop(e.index, None)
        if b is None:
            return b""
        b.stop_event = e
        return self._pump(b.choice) if b.live else b""

    def _pump(self, choice: int, everything: bool = False) -> bytes:
        """Write what the head of the queue allows: stopped blocks whole, then the next one live."""
        out = []
        queue = self._queues.get(choice) or []
        while queue:
            b = queue[0]
            text_like = b.kind == "text" or b.kind == "thinking"
            if text_like and b.buf:
                out.append(self._chunk(choice, self._text_part(b, "".join(b.buf))))
                b.buf.clear()
            if b.stop_event is None and not everything:
                b.live = True
                break
            queue.pop(0)
            out.append(self._stop(b, b.stop_event or hub.BlockStop(b.index)))
        return b"".join(out)

    def _stop(self, b: _Block, e: hub.BlockStop) -> bytes:
        if b.kind == "text" or b.kind == "thinking":
            stop_sig, foreign = split_fidelity(e.fidelity)
            stop: dict[str, Any] = {}
            if foreign:
                stop["fidelity"] = foreign
            if e.extensions:
                stop["extensions"] = e.extensions
            if stop_sig is not None:
                signed = split_fidelity(b.fidelity)[0] is not None
                if b.sig is None and (b.parts == 0 or not signed):
                    b.sig = stop_sig  # Gemini's own form: a (possibly empty) part carrying the signature
                elif b.sig != stop_sig or b.parts:
                    stop.setdefault("fidelity", {})[NAME] = {"thoughtSignature": stop_sig}
            if b.parts and b.sig is None and not stop:
                return b""
            if b.parts == 0 and b.start is None and b.sig is None and not stop:
                b.start = {}  # keep the empty block
            return self._chunk(b.choice, self._text_part(b, "", stop or None))
        self._last_part[b.choice] = None
        self._number(b)
        part = block_part(
            b.kind,
            "".join(b.buf),
            id=b.id,
            name=b.name,
            mime_type=b.mime_type,
            fidelity=b.fidelity,
            extensions=b.extensions,
            stop_fidelity=e.fidelity,
            stop_extensions=e.extensions,
        )
        return self._chunk(b.choice, json_encode(part))

    def _number(self, b: _Block) -> None:
        self._written[b.index] = self._ordinals
        self._ordinals += 1

    def _extension(self, e: hub.Extension) -> None:
        data = e.data
        if e.namespace == NAME and e.index is None and isinstance(data, dict):
            data = dict(data)
            if "promptFeedback" in data:
                self._chunk_ext["promptFeedback"] = data.pop("promptFeedback")
            choice = data.pop("candidate", 0)
            if data:
                self._candidate_ext.setdefault(choice if isinstance(choice, int) else 0, {}).update(data)
            return
        ann: dict[str, Any] = {"namespace": e.namespace, "data": data}
        if e.index is not None:
            ann["block"] = e.index  # made an ordinal when the last chunk is written
        self._annotations.append(ann)

    def _last_chunk(self, request_id: str | None, failed: bool = False) -> bytes:
        """The chunk with every finish, the usage and our notes; ``failed``: an error chunk follows."""
        candidates = []
        for choice in sorted(set(self._finishes) | set(self._candidate_ext)):
            candidates.append(close_candidate({}, choice, self._finishes.get(choice), self._candidate_ext.get(choice)))
        chunk: dict[str, Any] = {}
        if candidates:
            chunk["candidates"] = candidates
        chunk.update(self._chunk_ext)
        mine: dict[str, Any] = {}
        if self._annotations:
            for ann in self._annotations:
                if "block" in ann:
                    ann["block"] = self._written.get(ann["block"])
            mine["annotations"] = self._annotations
        if request_id is not None:
            mine["request_id"] = request_id
        if not self._finishes and not failed:
            mine["complete"] = True  # the source ended cleanly without a finish reason
        if mine:
            chunk[EXTENSION_KEY] = mine
        body = json_encode(chunk)[1:-1]
        rest = self._usage_full + self._tail + self._first
        if not body:
            rest = rest[1:]
        return b"data: {" + body + rest + b"}\n\n"
