"""openai-chat stream encoder: hub events -> ``chat.completion.chunk`` lines and ``data: [DONE]``.

Text goes out as ``delta.content`` (``delta.refusal`` for blocks flagged as refusals),
thinking as ``delta.reasoning_content``, tool calls as ``delta.tool_calls`` numbered per
choice from 0.  What Chat Completions cannot say (fidelity, native and data blocks, block
boundaries, foreign extensions, finish reasons it has no word for) rides on the choice under
the ``llmbridge`` key, which the official SDK keeps as an unknown field and ignores; the
decoder reads it back.  Usage is held to the end and always goes out (the gateway spec,
the gateway spec: "the last chunk before data: [DONE] carries usage"): as a ``choices: []`` chunk
when the client asked with ``stream_options.include_usage`` (OpenAI's own shape), else as a
chunk that keeps one choice with an empty delta, since clients that never asked index
``choices[0]`` on every chunk.  An error after the start is a chunk with the top-level
``error`` object and ``finish_reason: "error"`` on each unfinished choice (OpenRouter's shape;
the official SDK raises on the ``error`` key), then ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import EXTENSION_KEY, EncoderState, json_encode, not_a_hub_event
from ._common import CONTENT_KEYS, FINISH_TO_WIRE, NAME, error_object, usage_to_wire

_DONE = b"data: [DONE]\n\n"
# A choice's finish_reason is required (null until it finishes): written into the precomputed
# bytes of the hot path, so a delta costs nothing more.
_EMPTY_CHOICE = b'{"index":0,"delta":{},"finish_reason":null}'
# The states as globals for the per-event checks (see EncoderState).
_IDLE, _OPEN, _CLOSED = EncoderState.IDLE, EncoderState.OPEN, EncoderState.CLOSED
_CHOICE_NATIVE = ("logprobs", "content_filter_results")  # choice fields the SDK reads or ignores safely
_RESERVED = frozenset({"id", "object", "created", "model", "choices", "usage", "error", EXTENSION_KEY})


class _Block:
    __slots__ = (
        "choice",
        "current",
        "extensions",
        "fidelity",
        "field",
        "head",
        "kind",
        "open",
        "refusal",
        "tail",
        "tool",
    )

    def __init__(self, choice: int, kind: str) -> None:
        self.choice = choice
        self.current = True  # the decoder appends this choice's plain deltas to this block
        self.field = ""  # the delta field of text and thinking blocks
        self.open = True
        self.kind = kind
        self.head = b""
        self.tail = b""
        self.tool: int | None = None
        self.fidelity: dict | None = None
        self.extensions: dict | None = None
        self.refusal = False


class StreamEncoder:
    """Hub events to openai-chat ``data: {chunk}`` lines.

    ``include_usage`` shapes the final usage chunk, which is always sent (the gateway spec):
    ``choices: []`` (True) or one choice with an empty delta (False).  Terminal rule:
    ``ResponseEnd`` writes the usage chunk and ``data: [DONE]``; an ``Error`` writes the usage
    chunk, an ``{"error": ...}`` chunk with ``finish_reason: "error"`` and ``[DONE]`` (usage
    first: the SDK raises at the error chunk).  Block ids, interleaved blocks, foreign fidelity
    and exact finish reasons ride under ``llmbridge``.  Refuses what is not a hub event
    (``TypeError``); after the end it writes nothing.
    """

    def __init__(self, *, include_usage: bool = True) -> None:
        self.include_usage = include_usage
        self._finished: set[int] = set()  # choices whose finish_reason went out
        self._prefix = b""
        self._first_extra: dict[str, Any] = {}
        self._blocks: dict[int, _Block] = {}
        self._introduced: set[int] = set()
        self._tools: dict[int, int] = {}  # choice -> tool calls so far
        self._seq_kind: dict[int, str] = {}  # choice -> kind of the block the decoder would extend
        self._current: dict[int, int] = {}  # choice -> hub index of that block
        self._refused: set[int] = set()
        self._usage: hub.Usage | None = None
        self._state = _IDLE  # OPEN at the first event (the chunk head is known), CLOSED at [DONE]

    # ------------------------------------------------------------------ framing

    def _start(self, event: hub.ResponseStart | None) -> None:
        self._state = _OPEN
        rid = event.id if event and event.id else ""
        created = event.created if event and event.created else 0
        model = event.model if event and event.model else ""
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
        ext = dict(event.extensions or {}) if event else {}
        own = ext.pop(NAME, None) or {}
        if isinstance(own, dict):
            for key in ("system_fingerprint", "service_tier"):
                if key in own:
                    head[key] = own[key]
            self._first_extra = {k: v for k, v in own.items() if k not in head and k not in _RESERVED}
        bridge: dict[str, Any] = {}
        if ext:
            bridge["extensions"] = ext
        if event and event.request_id:
            bridge["request_id"] = event.request_id
        if bridge:
            self._first_extra[EXTENSION_KEY] = bridge
        self._prefix = b"data: " + json_encode(head)[:-1] + b',"choices":['

    def _chunk(self, choice_json: bytes) -> bytes:
        if self._first_extra:
            extra, self._first_extra = self._first_extra, {}
            return self._prefix + choice_json + b"]," + json_encode(extra)[1:] + b"\n\n"
        return self._prefix + choice_json + b"]}\n\n"

    def _top(self, fields: dict[str, Any]) -> bytes:
        """A chunk with ``choices: []`` and top-level ``fields`` (usage, errors, stream-level data)."""
        if self._first_extra:
            fields = {**self._first_extra, **fields}
            self._first_extra = {}
        return self._prefix + b"]," + json_encode(fields)[1:] + b"\n\n"

    def _choice(self, n: int, delta: dict[str, Any], **fields: Any) -> bytes:
        """One chunk for choice ``n``; the first delta of each choice carries the role."""
        out = b""
        if n not in self._introduced:
            for earlier in range(n):  # the SDK's accumulator indexes choices by position
                if earlier not in self._introduced:
                    self._introduced.add(earlier)
                    intro = {"index": earlier, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    out += self._chunk(json_encode(intro))
            self._introduced.add(n)
            delta = {"role": "assistant", **delta}
        obj = {"index": n, "delta": delta, "finish_reason": None}  # required, null until the finish
        obj.update(fields)
        return out + self._chunk(json_encode(obj))

    # ------------------------------------------------------------------ events

    def encode(self, event: hub.Event) -> bytes:
        kind = type(event)
        if kind is hub.Delta:
            block = self._blocks.get(event.index)  # emptied once the stream is over
            if block is None or not event.text:
                return b""
            if block.current and block.head:
                return block.head + json_encode(event.text) + block.tail
            if block.field:  # text of an interleaved block: on the wire as usual, routed by the ref
                return self._choice(block.choice, {block.field: event.text}, **{EXTENSION_KEY: {"ref": event.index}})
            return self._choice(block.choice, {}, **{EXTENSION_KEY: {"delta": event.text, "ref": event.index}})
        state = self._state
        if state is not _OPEN:  # one test on the common path; the rare ones inside
            if state is _CLOSED:
                return b""
            self._start(event if kind is hub.ResponseStart else None)
            if kind is hub.ResponseStart:
                return b""
        if kind is hub.BlockStart:
            return self._block_start(event)
        if kind is hub.BlockStop:
            return self._block_stop(event)
        if kind is hub.Usage:
            self._usage = hub.merge_usage(self._usage, event)
            return b""
        if kind is hub.Finish:
            return self._finish(event)
        if kind is hub.Extension:
            return self._extension(event)
        if kind is hub.Error:
            self._state = _CLOSED
            self._blocks.clear()
            usage = self._usage_chunk()  # first: the SDK raises at the error chunk
            # every choice still open ends with "error" (choice 0 when none started)
            open_choices = sorted(self._introduced - self._finished) or [0]
            choices = b",".join(b'{"index":%d,"delta":{},"finish_reason":"error"}' % n for n in open_choices)
            self._prefix += choices
            return usage + self._top({"error": error_object(event)}) + _DONE
        if kind is hub.ResponseEnd:
            self._state = _CLOSED
            self._blocks.clear()
            return self._usage_chunk() + _DONE
        not_a_hub_event(event)

    def _usage_chunk(self) -> bytes:
        if self._usage is None:
            return b""
        if self.include_usage:
            return self._top({"usage": usage_to_wire(self._usage)})
        chunk = self._chunk(_EMPTY_CHOICE)  # the prefix's top-level extras, if any, go first
        return chunk[:-3] + b',"usage":' + json_encode(usage_to_wire(self._usage)) + b"}\n\n"

    def _block_start(self, e: hub.BlockStart) -> bytes:
        n = e.choice
        block = _Block(n, e.kind)
        self._blocks[e.index] = block
        prefix = self._prefix + b'{"index":' + str(n).encode()
        keep = self._replace_current(n, None if e.kind == "tool_call" else e.index)
        if e.kind == "tool_call":
            k = self._tools.get(n, 0)
            self._tools[n] = k + 1
            block.tool = k
            block.fidelity, block.extensions = e.fidelity, e.extensions
            block.head = prefix + b',"delta":{"tool_calls":[{"index":' + str(k).encode() + b',"function":{"arguments":'
            block.tail = b'}}]},"finish_reason":null}]}\n\n'
            self._seq_kind.pop(n, None)
            call = {
                "index": k,
                "id": e.id or f"call_{e.index}",
                "type": "function",
                "function": {"name": e.name or "", "arguments": ""},
            }
            delta = {"content": None, "tool_calls": [call]} if n not in self._introduced else {"tool_calls": [call]}
            return self._choice(n, delta, **({EXTENSION_KEY: {"keep": keep}} if keep is not None else {}))
        refusal = bool(e.kind == "text" and e.extensions and (e.extensions.get(NAME) or {}).get("refusal"))
        block.refusal = refusal
        if refusal:
            self._refused.add(n)
        if e.kind in ("text", "thinking"):
            field = b'"refusal":' if refusal else b'"content":' if e.kind == "text" else b'"reasoning_content":'
            block.head = prefix + b',"delta":{' + field
            block.field = field[1:-2].decode()
            block.tail = b'},"finish_reason":null}]}\n\n'
            wire_kind = "refusal" if refusal else e.kind
            needs_marker = bool(
                e.fidelity
                or e.id
                or (e.extensions and not _only_refusal(e.extensions))
                or self._seq_kind.get(n) == wire_kind
                or keep is not None
            )
            self._seq_kind[n] = wire_kind
            if not needs_marker:
                if n in self._introduced:
                    return b""
                first = {"content": ""} if e.kind == "text" else {"content": None, "reasoning_content": ""}
                return self._choice(n, first)
        else:
            self._seq_kind[n] = e.kind
        marker: dict[str, Any] = {"kind": e.kind, "ref": e.index}
        for key in ("id", "name", "mime_type", "fidelity", "extensions"):
            value = getattr(e, key)
            if value is not None:
                marker[key] = value
        bridge: dict[str, Any] = {"block": marker}
        if keep is not None:
            bridge["keep"] = keep
        return self._choice(n, {}, **{EXTENSION_KEY: bridge})

    def _replace_current(self, n: int, index: int | None) -> dict[str, Any] | None:
        """Make ``index`` the block the decoder extends.  A replaced block that is still open
        (interleaved blocks) is returned as ``{"ref", "kind"}`` for the decoder to keep open."""
        previous = self._current.pop(n, None)
        if index is not None:
            self._current[n] = index
        if previous is None:
            return None
        block = self._blocks[previous]
        block.current = False
        if not block.open:
            return None
        keep: dict[str, Any] = {"ref": previous, "kind": block.kind}
        if block.refusal:
            keep["refusal"] = True
        return keep

    def _block_stop(self, e: hub.BlockStop) -> bytes:
        block = self._blocks.get(e.index)
        if block is None or not block.open:
            return b""
        block.open = False
        n = block.choice
        if block.tool is not None:
            fidelity = hub.merge_dicts(block.fidelity, e.fidelity)
            extensions = hub.merge_dicts(block.extensions, e.extensions)
            if not (fidelity or extensions):
                return b""
            stop: dict[str, Any] = {"tool": block.tool}
        else:
            fidelity, extensions = e.fidelity, e.extensions
            if block.current and not (fidelity or extensions):
                return b""
            stop = {"kind": block.kind, "ref": e.index}
            if block.current:
                self._replace_current(n, None)
            if self._seq_kind.get(n) == ("refusal" if block.refusal else block.kind):
                self._seq_kind.pop(n, None)
        if fidelity:
            stop["fidelity"] = fidelity
        if extensions:
            stop["extensions"] = extensions
        return self._choice(n, {}, **{EXTENSION_KEY: {"stop": stop}})

    def _finish(self, e: hub.Finish) -> bytes:
        n = e.choice
        word = FINISH_TO_WIRE.get(e.reason)
        fields: dict[str, Any] = {}
        if e.reason == "refusal" and n in self._refused and n not in self._tools:
            word = "stop"  # OpenAI's own refusals end with "stop" and carry delta.refusal
        elif word is None or (e.raw and e.raw != word) or (word == "stop" and self._derived(n, e) != e.reason):
            fields[EXTENSION_KEY] = {"finish": e.reason, "raw": e.raw or e.reason}
        if word is None:
            word = "content_filter" if e.reason == "refusal" else "stop"
        fields["finish_reason"] = word
        self._finished.add(n)
        if e.stop_sequence:
            fields["stop_reason"] = e.stop_sequence  # vLLM's field for the matched stop string
        self._seq_kind.pop(n, None)
        self._replace_current(n, None)
        return self._choice(n, {}, **fields)

    def _derived(self, n: int, e: hub.Finish) -> str:
        """What our decoder reads from finish_reason "stop" for this choice."""
        if n in self._tools:
            return "tool_use"
        if n in self._refused:
            return "refusal"
        return "stop_sequence" if e.stop_sequence else "end_turn"

    def _extension(self, e: hub.Extension) -> bytes:
        block = self._blocks.get(e.index) if e.index is not None else None
        if block is None:
            data = e.data
            if e.namespace == NAME and isinstance(data, dict) and data and data.keys() <= CONTENT_KEYS:
                return self._top(data)
            return self._top({EXTENSION_KEY: {"extension": {"namespace": e.namespace, "data": data}}})
        data = e.data
        if e.namespace == NAME and isinstance(data, dict) and len(data) == 1 and next(iter(data)) in _CHOICE_NATIVE:
            return self._choice(block.choice, {}, **data)
        ext = {"namespace": e.namespace, "data": data, "ref": e.index, "kind": block.kind}
        if block.tool is not None:
            ext["tool"] = block.tool
        if block.refusal:
            ext["refusal"] = True
        return self._choice(block.choice, {}, **{EXTENSION_KEY: {"extension": ext}})


def _only_refusal(extensions: dict) -> bool:
    return list(extensions) == [NAME] and extensions[NAME] == {"refusal": True}


def encode_events(events: list[hub.Event], **options: Any) -> bytes:
    encoder = StreamEncoder(**options)
    return b"".join([encoder.encode(e) for e in events])
