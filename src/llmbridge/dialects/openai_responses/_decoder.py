"""Responses stream (``event: response.*``) -> hub events.

One hub block per output item, except messages: one text block per content part.
Reasoning summary parts (or ``reasoning_text`` parts) of one item form one thinking
block, joined by a blank line.  Items the hub does not model become ``native``
blocks whose progress events travel as block-level :class:`hub.Extension` events.
An ``image_generation_call`` item with its final image becomes a ``data`` block (the
image's base64, its MIME type from ``output_format``), opened when the item is done, so
that every dialect shows it as an image; its progress events (partial images included)
wait for it and travel as the block's extensions, in order, so the encoder writes them
back where they were.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from ... import hub, sse
from ..base import EXTENSION_KEY, SSEStreamDecoder, json_decode, json_encode
from ._common import INCOMPLETE_FINISH, NAME, POSITIONAL, error_type, uncarry, usage_from

PART_SEPARATOR = "\n\n"  # between the summary parts of one reasoning item
IMAGE_ITEM = "image_generation_call"
IMAGE_FORMATS = ("png", "jpeg", "webp")


def _sniff_mime(b64: str) -> str:
    """The image type of base64 data by its first bytes (PNG when unknown: the tool's default)."""
    head = b64[:16]
    if head.startswith("/9j/"):
        return "image/jpeg"
    if head.startswith("UklGR"):
        return "image/webp"
    return "image/png"


# Response-object fields the hub models, or that must not travel (the system prompt, the tool list).
_RESPONSE_MODELED = frozenset(
    (
        "id",
        "object",
        "created_at",
        "model",
        "output",
        "usage",
        "status",
        "error",
        "incomplete_details",
        "output_text",
        "instructions",
        "tools",
        EXTENSION_KEY,
    )
)
_MESSAGE_MODELED = frozenset(("id", "type", "status", "role", "content", EXTENSION_KEY))


def _positionless(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in POSITIONAL}


class _Part:
    """A content part of a message: its text block."""

    __slots__ = ("announced", "index", "open", "streamed")

    def __init__(self, index: int) -> None:
        self.index = index
        self.streamed = False  # text arrived as deltas
        self.open = True
        self.announced = 0  # annotations seen as annotation.added events


class _Item:
    """An open output item: its hub block(s) and what has streamed into them."""

    __slots__ = (
        "closed",
        "done_keys",
        "ext",
        "id",
        "index",
        "last_key",
        "out",
        "parts",
        "progress",
        "streamed",
        "text_kind",
        "type",
    )

    def __init__(self, type_: str, id_: str | None, out: int | None = None) -> None:
        self.out = out  # output_index
        self.type = type_
        self.id = id_
        self.index = -1  # the hub block (all item kinds but message)
        self.parts: dict[int, _Part] = {}  # message: content_index -> its part
        self.streamed = False
        self.closed = False  # custom tool call: the closing '"}' went out
        self.last_key: tuple | None = None  # reasoning: the part the last delta went to
        self.done_keys: set = set()  # reasoning parts that have text
        self.text_kind = "summary"
        self.ext: dict | None = None  # message: block extensions shared by its parts
        self.progress: list[dict] = []  # image_generation_call: its events until its block opens


class StreamDecoder(SSEStreamDecoder):
    """openai-responses typed SSE events to hub events: one hub block per output item or content part.

    Terminal rule: ``response.completed``, ``response.incomplete``, ``response.failed`` or an
    ``error`` event ends the stream (the last two with a hub ``Error``); ``[DONE]`` before one
    of them is ``done-early``, and input that stops first gives ``truncated`` and
    ``Error(incomplete_stream)``.  Refuses, recording a violation: data that is not JSON or
    lacks a string ``type`` (``json``, ``missing-type``), a ``sequence_number`` that goes
    back (``sequence``), items or parts added twice, unknown or already done
    (``item-twice``, ``item-unknown``, ``item-closed``, ``part-twice``, ``part-closed``),
    missing fields (``missing-field``), unreadable ``llmbridge`` entries (``llmbridge``).
    """

    dialect = NAME

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._response_id: str | None = None
        self._next_index = 0
        self._items: dict[int, _Item] = {}  # by output_index
        self._by_id: dict[str, int] = {}  # item id -> output_index
        self._open_blocks: set[int] = set()
        self._tool_calls = 0
        self._pending_error: hub.Error | None = None
        self._refused = False
        self.whole_items = False  # items come whole, as output_item.done only (non-streaming bodies)
        self._seq: int | None = None
        self._carried: dict[int, int] = {}  # hub index in a carried event -> ours
        self._pending_reasoning: list[_Item] = []  # reasoning items whose block waits for its first part
        self._text_slots: dict[tuple, _Part] = {}  # (output_index, content_index) -> message part slot
        self._handlers = {
            "response.created": self._on_lifecycle,
            "response.queued": self._on_lifecycle,
            "response.in_progress": self._on_lifecycle,
            "response.output_item.added": self._on_item_added,
            "response.output_item.done": self._on_item_done,
            "response.content_part.added": self._on_part_added,
            "response.content_part.done": self._on_part_done,
            "response.output_text.delta": self._on_text_delta,
            "response.refusal.delta": self._on_text_delta,
            "response.output_text.done": self._on_text_done,
            "response.refusal.done": self._on_text_done,
            "response.output_text.annotation.added": self._on_annotation,
            "response.reasoning_summary_part.added": self._on_summary_part,
            "response.reasoning_summary_part.done": self._ignore,
            "response.reasoning_summary_text.delta": self._on_reasoning_delta,
            "response.reasoning_summary_text.done": self._on_reasoning_done,
            "response.reasoning_text.delta": self._on_reasoning_delta,
            "response.reasoning_text.done": self._on_reasoning_done,
            "response.function_call_arguments.delta": self._on_arguments_delta,
            "response.function_call_arguments.done": self._on_arguments_done,
            "response.custom_tool_call_input.delta": self._on_arguments_delta,
            "response.custom_tool_call_input.done": self._on_arguments_done,
            "response.completed": self._on_terminal,
            "response.incomplete": self._on_terminal,
            "response.failed": self._on_terminal,
            "error": self._on_error,
            "keepalive": self._ignore,
        }

    # ------------------------------------------------------------------ dispatch

    def on_event(self, event: sse.Event) -> None:
        data = event.data
        try:
            obj = json_decode(data)
        except msgspec.DecodeError:
            if data == "[DONE]":
                self.violation("done-early", "[DONE] before the terminal event")
            elif data:
                self.parse_json(event)  # records the violation
            return
        if type(obj) is not dict or type(obj.get("type")) is not str:
            self.violation("missing-type", "event without a string 'type'")
            return
        seq = obj.get("sequence_number")
        if type(seq) is int:
            if self._seq is not None and seq != self._seq + 1:
                self.violation("sequence", f"sequence_number {seq} after {self._seq}")
            self._seq = seq
        if obj["type"] == "response.output_text.delta":  # the hot path: one dict lookup, one event
            slot = self._text_slots.get((obj.get("output_index"), obj.get("content_index")))
            delta = obj.get("delta")
            if (
                slot is not None
                and slot.open
                and type(delta) is str
                and not obj.get("logprobs")
                and EXTENSION_KEY not in obj
            ):
                slot.streamed = True
                self._out.append(hub.Delta(slot.index, delta))
                return
        self.handle(obj)

    def handle(self, obj: dict) -> None:
        """Decode one parsed Responses event."""
        carried = obj.get(EXTENSION_KEY)
        if carried:
            self._replay(carried)
        kind = obj["type"]
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(obj)
        else:
            self._on_other(obj)

    def _ignore(self, obj: dict) -> None:
        pass

    def _ensure_started(self, response: dict | None = None) -> None:
        if self._started:
            return
        self._started = True
        response = response or {}
        self._response_id = response.get("id")
        own = response.get(EXTENSION_KEY) if isinstance(response.get(EXTENSION_KEY), dict) else {}
        filled = response[EXTENSION_KEY].get("filled") if own else None  # response fields our encoder filled in
        if not isinstance(filled, list):
            filled = []
        extras = {k: v for k, v in response.items() if k not in _RESPONSE_MODELED and v is not None and k not in filled}
        extensions = {NAME: extras} if extras and not own.get("defaults") else {}
        if isinstance(own.get("extensions"), dict):
            extensions.update(own["extensions"])
        made_up = [k for k in ("id", "created_at") if k in own and own[k] is None]  # by our encoder
        self.emit(
            hub.ResponseStart(
                id=None if "id" in made_up else response.get("id"),
                model=response.get("model"),
                created=None if "created_at" in made_up else response.get("created_at"),
                request_id=own.get("request_id"),
                extensions=extensions or None,
            )
        )

    def _start_block(self, kind: str, flush: bool = True, **fields: Any) -> int:
        if flush and self._pending_reasoning:  # reasoning items added earlier keep their place
            self._flush_reasoning()
        index = self._next_index
        self._next_index += 1
        self._open_blocks.add(index)
        self.emit(hub.BlockStart(index, kind, **fields))
        return index

    def _stop_block(self, index: int, fidelity: dict | None = None, extensions: dict | None = None) -> None:
        if index in self._open_blocks:
            self._open_blocks.discard(index)
            self.emit(hub.BlockStop(index, fidelity or None, extensions or None))

    def _item(self, obj: dict) -> _Item | None:
        """The item an event belongs to; a violation when it was never added."""
        out = obj.get("output_index")
        item = self._items.get(out) if type(out) is int else None
        if item is None:
            item_id = obj.get("item_id")
            out = self._by_id.get(item_id) if item_id else None
            item = self._items.get(out) if out is not None else None
        if item is None:
            self.violation("item-unknown", f"{obj['type']} for an output item that was not added")
        return item

    # ------------------------------------------------------------------ lifecycle

    def _on_lifecycle(self, obj: dict) -> None:
        response = obj.get("response")
        if not isinstance(response, dict):
            self.violation("missing-field", f"{obj['type']} without 'response'")
            response = None
        self._ensure_started(response)

    def _on_item_added(self, obj: dict) -> None:
        self._ensure_started()
        item = obj.get("item")
        out = obj.get("output_index")
        if not isinstance(item, dict) or type(item.get("type")) is not str:
            self.violation("missing-field", "output_item.added without an 'item' with a 'type'")
            return
        if type(out) is not int:
            self.violation("missing-field", "output_item.added without 'output_index'")
            out = max(self._items, default=-1) + 1
        if out in self._items:
            self.violation("item-twice", f"output_index {out} added twice")
        self._open_item(out, item)

    def _open_item(self, out: int, item: dict) -> _Item:
        kind, item_id = item["type"], item.get("id")
        own = item.get(EXTENSION_KEY) if isinstance(item.get(EXTENSION_KEY), dict) else {}
        state = _Item(kind, item_id, out)
        self._items[out] = state
        if item_id:
            self._by_id[item_id] = out
        if "id" in own and own["id"] is None:  # an id our encoder made up
            state.id = item_id = None
        if kind == "message":
            extras = {k: v for k, v in item.items() if k not in _MESSAGE_MODELED}
            state.ext = {NAME: {"item": extras}} if extras else None
        elif kind == "reasoning":  # its block starts with its first part, when we know what kind of text it holds
            state.ext = own
            self._pending_reasoning.append(state)
        elif kind == "function_call" or kind == "custom_tool_call":
            fidelity: dict[str, Any] = {"id": item_id} if item_id else {}
            if kind == "custom_tool_call":
                fidelity["custom"] = True
            state.index = self._start_block(
                "tool_call",
                id=None if "call_id" in own and own["call_id"] is None else item.get("call_id") or self._call_id(),
                name=item.get("name") or "",
                fidelity=hub.merge_dicts({NAME: fidelity} if fidelity else None, own.get("fidelity")),
                extensions=own.get("extensions"),
            )
        elif kind == IMAGE_ITEM:  # its data block opens when the final image is there (_close_item)
            # An image our encoder wrote for another dialect's data block: no item of ours to keep.
            state.ext = None if own.get("image") == "foreign" else {}
        else:
            state.index = self._start_block("native", id=item_id, name=kind, extensions={NAME: item})
        return state

    def _call_id(self) -> str:
        """A deterministic id for a call the source sent without one."""
        self._tool_calls += 1
        seed = hashlib.sha1((self._response_id or "").encode()).hexdigest()[:12]
        return f"call_{seed}_{self._tool_calls}"

    def _on_item_done(self, obj: dict) -> None:
        self._ensure_started()
        item = obj.get("item")
        out = obj.get("output_index")
        if not isinstance(item, dict) or type(item.get("type")) is not str:
            self.violation("missing-field", "output_item.done without an 'item' with a 'type'")
            return
        state = self._items.get(out) if type(out) is int else None
        if state is None and item.get("id") in self._by_id:
            state = self._items[self._by_id[item["id"]]]
        if state is None:  # a done-only item: decode it whole
            if not self.whole_items:
                self.violation("item-unknown", "output_item.done for an output item that was not added")
            if type(out) is not int:
                out = max(self._items, default=-1) + 1
            state = self._open_item(out, item)
        self._close_item(state, item)

    def _close_item(self, state: _Item, item: dict) -> None:
        own = item.get(EXTENSION_KEY) if isinstance(item.get(EXTENSION_KEY), dict) else {}
        kind = state.type
        if kind == "message":
            for n, part in enumerate(item.get("content") or []):
                if not isinstance(part, dict):
                    continue
                slot = state.parts.get(n)
                if slot is None:
                    slot = self._open_part(state, n, part)
                if slot.open:
                    self._finish_part(state, slot, part)
            for slot in state.parts.values():
                if slot.open:
                    self._finish_part(state, slot, None)
            return
        if kind == "reasoning":
            self._fill_reasoning(state, item)
            fields = {"id": state.id} if state.id else {}
            if item.get("encrypted_content") is not None:
                fields["encrypted_content"] = item["encrypted_content"]
            summary = item.get("summary") or []
            if len(summary) > 1:
                fields["summary"] = summary
            if own.get("own_id") is False:  # the item id was not ours (another vendor's, or made up)
                fields.pop("id", None)
            fidelity = hub.merge_dicts({NAME: fields} if fields else None, own.get("fidelity"))
            self._annotate(state.index, own)
            self._stop_block(state.index, fidelity, own.get("extensions"))
        elif kind == IMAGE_ITEM:
            self._close_image(state, item)
        elif kind == "function_call" or kind == "custom_tool_call":
            if not state.streamed and own.get("arguments") != "":
                self._arguments(state, item.get("arguments" if kind == "function_call" else "input") or "")
            self._end_arguments(state)
            self._annotate(state.index, own)
            self._stop_block(state.index, own.get("fidelity"), own.get("extensions"))
        else:
            self._stop_block(state.index, None, {NAME: item})

    def _close_image(self, state: _Item, item: dict) -> None:
        """The final image as one data block; an item without one (failed) as a native block."""
        result = item.get("result")
        own = item.get(EXTENSION_KEY) if isinstance(item.get(EXTENSION_KEY), dict) else {}
        meta = {k: v for k, v in item.items() if k not in ("result", EXTENSION_KEY)}
        if state.ext is None:  # another dialect's image: its progress events and item were ours
            state.progress = []
            fidelity, extensions = own.get("fidelity"), own.get("extensions")
        else:
            fidelity, extensions = None, {NAME: meta}
        if not isinstance(result, str) or (not result and state.ext is not None):
            state.index = self._start_block("native", id=state.id, name=IMAGE_ITEM, extensions={NAME: meta})
            self._progress(state)
            self._stop_block(state.index, None, {NAME: item})
            return
        fmt = item.get("output_format")
        mime = f"image/{fmt}" if fmt in IMAGE_FORMATS else _sniff_mime(result)
        state.index = self._start_block("data", id=state.id, mime_type=mime, extensions=extensions)
        self._progress(state)
        self.emit(hub.Delta(state.index, result))
        self._annotate(state.index, own)
        self._stop_block(state.index, fidelity)

    def _progress(self, state: _Item) -> None:
        for event in state.progress:
            self.emit(hub.Extension(NAME, event, state.index))
        state.progress = []

    # ------------------------------------------------------------------ message parts

    def _open_part(self, state: _Item, n: int, part: dict | None) -> _Part:
        ext = state.ext
        own = part.get(EXTENSION_KEY) if part is not None and isinstance(part.get(EXTENSION_KEY), dict) else {}
        if part is not None and part.get("type") == "refusal":
            self._refused = True
            ext = hub.merge_dicts(ext, {NAME: {"part_type": "refusal"}})
        ext = hub.merge_dicts(ext, own.get("extensions"))
        index = self._start_block("text", id=state.id, fidelity=own.get("fidelity"), extensions=ext)
        slot = _Part(index)
        state.parts[n] = slot
        if state.out is not None:
            self._text_slots[(state.out, n)] = slot
        return slot

    def _finish_part(self, state: _Item, slot: _Part, part: dict | None) -> None:
        index = slot.index
        own: dict = {}
        if part is not None:
            text = part.get("text") if part.get("type") != "refusal" else part.get("refusal")
            if not slot.streamed and text:
                self.emit(hub.Delta(index, text))
                slot.streamed = True
            for n, annotation in enumerate(part.get("annotations") or []):
                if n >= slot.announced:  # one the stream did not announce
                    self.emit(
                        hub.Extension(
                            NAME,
                            {
                                "type": "response.output_text.annotation.added",
                                "annotation_index": n,
                                "annotation": annotation,
                            },
                            index,
                        )
                    )
                    slot.announced = n + 1
            own = part.get(EXTENSION_KEY) if isinstance(part.get(EXTENSION_KEY), dict) else {}
            self._annotate(index, own)
        slot.open = False
        self._stop_block(index, own.get("fidelity"), own.get("extensions"))

    def _annotate(self, index: int, own: dict) -> None:
        """Other vendors' block-level Extension events, carried on the item or part."""
        for carried in own.get("annotations") or ():
            if isinstance(carried, dict) and isinstance(carried.get("namespace"), str):
                self.emit(hub.Extension(carried["namespace"], carried.get("data"), index))

    def _part(self, obj: dict, state: _Item) -> _Part:
        n = obj.get("content_index")
        n = n if type(n) is int else 0
        slot = state.parts.get(n)
        if slot is None:  # gateways that skip content_part.added
            slot = self._open_part(
                state, n, {"type": "refusal"} if obj["type"].startswith("response.refusal") else None
            )
        return slot

    def _on_part_added(self, obj: dict) -> None:
        state = self._item(obj)
        if state is not None and state.type == "reasoning":
            part = obj.get("part") if isinstance(obj.get("part"), dict) else {}
            self._start_reasoning(state, "reasoning_text" if part.get("type") == "reasoning_text" else "summary")
        if state is None or state.type != "message":
            return
        n = obj.get("content_index")
        n = n if type(n) is int else 0
        if n in state.parts:
            self.violation("part-twice", f"content part {n} added twice")
            return
        self._open_part(state, n, obj.get("part") if isinstance(obj.get("part"), dict) else None)

    def _on_part_done(self, obj: dict) -> None:
        state = self._item(obj)
        if state is None or state.type != "message":
            return
        slot = self._part(obj, state)
        if slot.open:
            self._finish_part(state, slot, obj.get("part") if isinstance(obj.get("part"), dict) else None)

    def _on_text_delta(self, obj: dict) -> None:
        state = self._item(obj)
        delta = obj.get("delta")
        if state is None or state.type != "message" or type(delta) is not str:
            if type(delta) is not str:
                self.violation("missing-field", f"{obj['type']} without a string 'delta'")
            return
        slot = self._part(obj, state)
        if not slot.open:
            self.violation("part-closed", f"{obj['type']} for a closed content part")
            return
        logprobs = obj.get("logprobs")
        if logprobs:
            self.emit(hub.Extension(NAME, {"logprobs": logprobs}, slot.index))
        slot.streamed = True
        self.emit(hub.Delta(slot.index, delta))

    def _on_text_done(self, obj: dict) -> None:
        state = self._item(obj)
        if state is None or state.type != "message":
            return
        slot = self._part(obj, state)
        text = obj.get("text") if obj["type"] == "response.output_text.done" else obj.get("refusal")
        if slot.open and not slot.streamed and text:
            slot.streamed = True
            self.emit(hub.Delta(slot.index, text))

    def _on_annotation(self, obj: dict) -> None:
        state = self._item(obj)
        if state is None or state.type != "message":
            return
        slot = self._part(obj, state)
        slot.announced += 1
        self.emit(hub.Extension(NAME, _positionless(obj), slot.index))

    # ------------------------------------------------------------------ reasoning

    def _flush_reasoning(self) -> None:
        pending, self._pending_reasoning = self._pending_reasoning, []
        for state in pending:
            self._start_reasoning(state, "summary")

    def _start_reasoning(self, state: _Item, text_kind: str) -> None:
        if state.index >= 0:
            return
        if state in self._pending_reasoning:  # the ones added before it start first
            at = self._pending_reasoning.index(state)
            earlier, self._pending_reasoning = self._pending_reasoning[:at], self._pending_reasoning[at + 1 :]
            for other in earlier:
                self._start_reasoning(other, "summary")
        state.text_kind = text_kind
        own = state.ext or {}
        fields = {"id": state.id} if state.id and own.get("own_id") is not False else {}
        if text_kind != "summary":
            fields["text_kind"] = text_kind
        fidelity = hub.merge_dicts({NAME: fields} if fields else None, own.get("fidelity"))
        state.index = self._start_block(
            "thinking", flush=False, id=state.id, fidelity=fidelity, extensions=own.get("extensions")
        )

    def _reasoning_text(self, state: _Item, key: tuple, text: str) -> None:
        self._start_reasoning(state, "reasoning_text" if key[0] == "content" else "summary")
        if state.last_key != key:
            if state.last_key is not None and state.done_keys:
                self.emit(hub.Delta(state.index, PART_SEPARATOR))
            state.last_key = key
        state.done_keys.add(key)
        self.emit(hub.Delta(state.index, text))

    def _key(self, obj: dict) -> tuple:
        if obj["type"].startswith("response.reasoning_text"):
            return ("content", obj.get("content_index") or 0)
        return ("summary", obj.get("summary_index") or 0)

    def _on_summary_part(self, obj: dict) -> None:
        state = self._item(obj)
        if state is not None and state.type == "reasoning":
            self._start_reasoning(state, "summary")

    def _on_reasoning_delta(self, obj: dict) -> None:
        state = self._item(obj)
        delta = obj.get("delta")
        if state is None or state.type != "reasoning" or type(delta) is not str:
            if type(delta) is not str:
                self.violation("missing-field", f"{obj['type']} without a string 'delta'")
            return
        if delta:
            self._reasoning_text(state, self._key(obj), delta)

    def _on_reasoning_done(self, obj: dict) -> None:
        state = self._item(obj)
        if state is None or state.type != "reasoning":
            return
        key = self._key(obj)
        text = obj.get("text")
        if key not in state.done_keys and type(text) is str and text:
            self._reasoning_text(state, key, text)

    def _fill_reasoning(self, state: _Item, item: dict) -> None:
        """Parts that only the final item holds (a part list that streamed is not repeated)."""
        for kind in ("summary", "content"):
            if any(key[0] == kind for key in state.done_keys):
                continue
            for n, part in enumerate(item.get(kind) or []):
                if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
                    self._reasoning_text(state, (kind, n), part["text"])
        self._start_reasoning(state, "summary")

    # ------------------------------------------------------------------ tool calls

    def _arguments(self, state: _Item, text: str) -> None:
        if state.type == "custom_tool_call":  # free text, carried as {"input": "..."}
            if not state.streamed:
                self.emit(hub.Delta(state.index, '{"input":"'))
            text = json_encode(text)[1:-1].decode()
        state.streamed = True
        if text:
            self.emit(hub.Delta(state.index, text))

    def _end_arguments(self, state: _Item) -> None:
        if state.type == "custom_tool_call" and not state.closed:
            if not state.streamed:
                self.emit(hub.Delta(state.index, '{"input":"'))
            self.emit(hub.Delta(state.index, '"}'))
            state.streamed = state.closed = True

    def _on_arguments_delta(self, obj: dict) -> None:
        state = self._item(obj)
        delta = obj.get("delta")
        if state is None or type(delta) is not str:
            if type(delta) is not str:
                self.violation("missing-field", f"{obj['type']} without a string 'delta'")
            return
        if state.index not in self._open_blocks:
            self.violation("item-closed", f"{obj['type']} for a closed item")
            return
        self._arguments(state, delta)

    def _on_arguments_done(self, obj: dict) -> None:
        state = self._item(obj)
        if state is None or state.streamed:
            return
        if (obj.get(EXTENSION_KEY) or {}).get("arguments") == "":  # "{}" on the wire for hub arguments ""
            state.streamed = True
            return
        text = obj.get("arguments") if obj["type"] == "response.function_call_arguments.done" else obj.get("input")
        if type(text) is str and text:
            self._arguments(state, text)

    # ------------------------------------------------------------------ everything else

    def _on_other(self, obj: dict) -> None:
        """Progress events of native items, and event types this decoder does not know."""
        self._ensure_started()
        out = obj.get("output_index")
        state = self._items.get(out) if type(out) is int else None
        if state is None and obj.get("item_id") in self._by_id:
            state = self._items[self._by_id[obj["item_id"]]]
        if state is not None and state.type == IMAGE_ITEM and state.index == -1:
            state.progress.append(_positionless(obj))
        elif state is not None and state.index in self._open_blocks:
            self.emit(hub.Extension(NAME, _positionless(obj), state.index))
        else:
            self.emit(hub.Extension(NAME, {k: v for k, v in obj.items() if k != "sequence_number"}))

    def _replay(self, carried: Any) -> None:
        """Hub events another dialect's data rode in on (see the encoder's side channel)."""
        if not isinstance(carried, dict):
            return
        self._ensure_started()
        for data in carried.get("events") or ():
            event = uncarry(data)
            if event is None:
                self.violation("llmbridge", "unreadable carried event")
                continue
            kind = type(event)
            if kind is hub.BlockStart:
                if self._pending_reasoning:
                    self._flush_reasoning()
                self._carried[event.index] = new = self._next_index
                self._next_index += 1
                self._open_blocks.add(new)
                event.index = new
            elif kind is hub.Delta or kind is hub.BlockStop or (kind is hub.Extension and event.index is not None):
                if event.index not in self._carried:
                    continue
                event.index = self._carried[event.index]
                if kind is hub.BlockStop:
                    self._open_blocks.discard(event.index)
            self.emit(event)

    def _on_error(self, obj: dict) -> None:
        self._ensure_started()
        error = obj.get("error") if isinstance(obj.get("error"), dict) else obj
        own = error.get(EXTENSION_KEY) if isinstance(error.get(EXTENSION_KEY), dict) else {}
        kind = own.get("type") if own.get("type") in hub.ERROR_TYPES else error_type(error)
        self._pending_error = hub.Error(
            message=str(error.get("message") or "error"),
            type=kind,
            code=None if "code" in own and own["code"] is None else error.get("code") or error.get("type"),
            status=own.get("status"),
            body=error,
        )

    def _on_terminal(self, obj: dict) -> None:
        response = obj.get("response")
        if not isinstance(response, dict):
            self.violation("missing-field", f"{obj['type']} without 'response'")
            response = {}
        self._ensure_started(response)
        if self._open_blocks:
            if obj["type"] != "response.failed":
                self.violation("items-open", f"{obj['type']} with output items still open")
            for state in self._items.values():
                if state.type == "message":
                    for slot in state.parts.values():
                        if slot.open:
                            self._finish_part(state, slot, None)
                elif state.index in self._open_blocks:
                    self._end_arguments(state)
            for index in sorted(self._open_blocks):
                self._stop_block(index)
        usage = usage_from(response.get("usage"))
        if usage is not None:
            self.emit(usage)
        own = response.get(EXTENSION_KEY) if isinstance(response.get(EXTENSION_KEY), dict) else {}
        status = response.get("status")
        finish = own.get("finish")
        failed_turn = isinstance(finish, dict) and finish.get("reason") == "error" and self._pending_error is None
        if (obj["type"] == "response.failed" or status == "failed") and not failed_turn:
            error = response.get("error") if isinstance(response.get("error"), dict) else {}
            pending = self._pending_error
            if pending is None:
                pending = hub.Error(
                    message=str(error.get("message") or "response failed"),
                    type=error_type(error),
                    code=error.get("code"),
                    body=error or None,
                )
            self._pending_error = None
            self._carried_finish(own.get("finish"))
            self.fail(pending)
            return
        if "finish" in own:  # a reason Responses has no status for, or none at all (null)
            self._carried_finish(own["finish"])
        elif obj["type"] == "response.incomplete" or status == "incomplete":
            raw = (response.get("incomplete_details") or {}).get("reason") or "incomplete"
            self.emit(hub.Finish(INCOMPLETE_FINISH.get(raw, "other"), raw=raw))
        else:
            calls = any(s.type in ("function_call", "custom_tool_call") for s in self._items.values())
            reason = "tool_use" if calls else "refusal" if self._refused else "end_turn"
            self.emit(hub.Finish(reason, raw=status))
        if self._pending_error is not None:
            self.fail(self._pending_error)
        else:
            self.finish_stream(own.get("request_id"))

    def _carried_finish(self, finish: Any) -> None:
        if isinstance(finish, dict) and finish.get("reason") in hub.FINISH_REASONS:
            self.emit(hub.Finish(finish["reason"], raw=finish.get("raw"), stop_sequence=finish.get("stop_sequence")))

    def on_truncated(self) -> None:
        if self._pending_error is not None:  # an `error` event is terminal on its own
            if not self._started:
                self._ensure_started()
            for index in sorted(self._open_blocks):
                self._stop_block(index)
            own = self._pending_error.body.get(EXTENSION_KEY) if isinstance(self._pending_error.body, dict) else None
            if isinstance(own, dict):
                usage = usage_from(own.get("usage"))
                if usage is not None:
                    self.emit(usage)
                self._carried_finish(own.get("finish"))
            self.fail(self._pending_error)
            return
        if not self._started:
            self._ensure_started()
        super().on_truncated()
