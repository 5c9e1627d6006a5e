"""Gemini ``GenerateContentResponse`` chunks -> hub events (streams and whole responses).

Completion rule: Gemini has no terminal event.  A stream is complete when every candidate
that appeared carried a ``finishReason`` (or ``promptFeedback.blockReason`` blocked the
prompt) and the body then ended; a body that ends before that is truncated and decodes to
``Error(type="incomplete_stream")``.  An ``{"error": ...}`` chunk ends the stream at once.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from ... import hub, sse
from ..base import EXTENSION_KEY, SSEStreamDecoder
from ._common import NAME, ArgsWriter, JSONArraySplitter, error_to_hub, finish_to_hub, parse_time, usage_to_hub

# Part keys that are attributes of a part rather than its payload.
_PART_ATTRS = frozenset(
    ("thoughtSignature", "thought", EXTENSION_KEY, "partMetadata", "videoMetadata", "mediaResolution")
)
# Candidate keys surfaced as an Extension (grounding, citations, safety, logprobs ...).
_CANDIDATE_HANDLED = frozenset(("content", "finishReason", "index", EXTENSION_KEY))
# Chunk keys read at the start of the stream; the others are kept as an extension.
_START_HANDLED = frozenset(
    ("candidates", "usageMetadata", "modelVersion", "responseId", "promptFeedback", EXTENSION_KEY, "error")
)


def _sig(part: dict) -> dict | None:
    sig = part.get("thoughtSignature")
    return {NAME: {"thoughtSignature": sig}} if sig is not None else None


class _Candidate:
    __slots__ = (
        "args",
        "block",
        "block_parts",
        "block_sig",
        "choice",
        "finished",
        "kind",
        "last_ext",
        "tool_calls",
    )

    def __init__(self, choice: int) -> None:
        self.choice = choice
        self.block: int | None = None  # the open text/thinking/streamed-call block
        self.kind = ""
        self.block_sig = False  # the open block already holds a signature
        self.block_parts = 0
        self.args: ArgsWriter | None = None  # a functionCall streamed with partialArgs
        self.tool_calls = False
        self.finished = False
        self.last_ext: dict[str, Any] = {}


class _State(enum.Enum):
    """Where a chunk stream is: no chunk yet, reading chunks, or ended by an ``{"error"}`` chunk."""

    IDLE = "idle"
    READING = "reading"
    FAILED = "failed"


_IDLE, _READING, _FAILED = _State.IDLE, _State.READING, _State.FAILED


class ChunkDecoder:
    """The state machine over parsed chunks; the stream decoder and ``decode_response`` share it.

    Its state is one :class:`_State` (``IDLE`` -> ``READING`` at the first chunk, -> ``FAILED``
    at an error chunk, which ends it); whether the stream is complete also depends on facts
    that are not states (a blocked prompt, our ``complete`` mark, each candidate's finish).
    """

    def __init__(self, emit, violation) -> None:
        self._emit = emit
        self._violation = violation
        self._state = _IDLE
        self.response_id: str | None = None
        self.candidates: dict[int, _Candidate] = {}
        self.blocked = False  # promptFeedback.blockReason
        self.marked_complete = False  # our extension key says the source ended cleanly
        self._next_block = 0
        self._calls = 0
        self._usage: dict | None = None
        self._ordinal: list[int] = []  # hub index of each block, in order (for our extension key)

    # -- chunks

    def chunk(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            self._violation("json-object", "a chunk must be a JSON object")
            return
        if "error" in obj:
            self.start(obj)
            self._state = _FAILED
            self._emit(error_to_hub(obj))
            return
        self.start(obj)
        cands = obj.get("candidates")
        if cands is not None and not isinstance(cands, list):
            self._violation("candidates-list", "candidates must be a list")
            cands = None
        for n, cand in enumerate(cands or ()):
            if isinstance(cand, dict):
                self._candidate(cand, n)
            else:
                self._violation("candidate-object", "a candidate must be an object")
        feedback = obj.get("promptFeedback")
        if isinstance(feedback, dict) and feedback and feedback.get("blockReason") and not self.blocked:
            self.blocked = True
            self._emit(hub.Extension(NAME, {"promptFeedback": feedback}))
            if 0 not in self.candidates:
                self.candidates[0] = _Candidate(0)
            c = self.candidates[0]
            if not c.finished:
                self._close(c)
                c.finished = True
                self._emit(hub.Finish("content_filter", 0, feedback["blockReason"]))
        usage = obj.get("usageMetadata")
        if isinstance(usage, dict) and usage != self._usage:
            self._usage = usage
            u = usage_to_hub(usage)
            if u is not None:
                self._emit(u)
        ours = obj.get(EXTENSION_KEY)
        if isinstance(ours, dict):
            if ours.get("complete"):
                self.marked_complete = True
            for ann in ours.get("annotations") or ():
                block = ann.get("block")
                index = self._ordinal[block] if isinstance(block, int) and block < len(self._ordinal) else None
                self._emit(hub.Extension(ann.get("namespace", NAME), ann.get("data"), index))

    @property
    def started(self) -> bool:
        """A chunk (or the caller's ``start``) opened the hub stream."""
        return self._state is not _IDLE

    @property
    def errored(self) -> bool:
        """An error chunk ended the stream."""
        return self._state is _FAILED

    def start(self, obj: dict) -> None:
        if self._state is not _IDLE:
            return
        self._state = _READING
        rid = obj.get("responseId")
        self.response_id = rid if isinstance(rid, str) else None
        extras = {k: v for k, v in obj.items() if k not in _START_HANDLED}
        ours = obj.get(EXTENSION_KEY)
        ours = ours if isinstance(ours, dict) else {}
        if ours.get("time_from_created"):
            extras.pop("createTime", None)
        extensions = ours.get("extensions")
        extensions = dict(extensions) if isinstance(extensions, dict) else {}
        if extras:
            extensions[NAME] = {**extensions.get(NAME, {}), **extras}
        created = ours.get("created", parse_time(obj.get("createTime")))
        model = obj.get("modelVersion")
        rid = ours.get("request_id")
        self._emit(
            hub.ResponseStart(
                self.response_id,
                model if isinstance(model, str) else None,
                created if isinstance(created, int) else None,
                rid if isinstance(rid, str) else None,
                extensions or None,
            )
        )

    def _candidate(self, cand: dict, n: int) -> None:
        choice = cand.get("index", n)
        if not isinstance(choice, int):
            choice = n
        c = self.candidates.get(choice)
        if c is None:
            c = self.candidates[choice] = _Candidate(choice)
        content = cand.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if parts:
            if c.finished:
                self._violation("after-finish", f"content for candidate {choice} after its finishReason")
            if not isinstance(parts, list):
                self._violation("parts-list", "content.parts must be a list")
                parts = ()
            for part in parts:
                if isinstance(part, dict):
                    self._part(c, part)
                else:
                    self._violation("part-object", "a part must be an object")
        changed = None
        for k, v in cand.items():
            if k not in _CANDIDATE_HANDLED and v and c.last_ext.get(k) != v:
                if changed is None:
                    changed = {}
                changed[k] = v
        if changed:
            c.last_ext.update(changed)
            if choice:
                changed["candidate"] = choice
            self._emit(hub.Extension(NAME, changed))
        word = cand.get("finishReason")
        if word is not None and not c.finished:
            self._close(c)
            c.finished = True
            ours = cand.get(EXTENSION_KEY) or {}
            mine = ours.get("finish")
            if isinstance(mine, dict) and mine.get("reason") in hub.FINISH_REASONS:
                self._emit(hub.Finish(mine["reason"], choice, mine.get("raw", word), mine.get("stop_sequence")))
            else:
                self._emit(finish_to_hub(str(word), c.tool_calls, choice))

    # -- parts

    def _new_block(self, c: _Candidate, kind: str, **fields: Any) -> int:
        index = self._next_block
        self._next_block += 1
        self._ordinal.append(index)
        self._emit(hub.BlockStart(index, kind, choice=c.choice, **fields))
        return index

    def _close(self, c: _Candidate, fidelity: dict | None = None, extensions: dict | None = None) -> None:
        if c.args is not None:
            self._violation("call-unterminated", "a streamed functionCall was not terminated")
            self._emit(hub.Delta(c.block, c.args.finish()))
            c.args = None
        if c.block is not None:
            self._emit(hub.BlockStop(c.block, fidelity, extensions))
            c.block = None
            c.kind = ""

    def _part(self, c: _Candidate, part: dict) -> None:
        ours = part.get(EXTENSION_KEY)
        if ours is None and c.args is None and len(part) == 1 and "text" in part:
            self._text(c, part, None)  # the hot path: a plain text part
            return
        if ours is not None and not isinstance(ours, dict):
            ours = None
        if "functionCall" in part:
            self._function_call(c, part, part["functionCall"], ours)
            return
        if c.args is not None:
            self._close(c)
        if "text" in part:
            self._text(c, part, ours)
        elif "inlineData" in part:
            self._close(c)
            blob = part["inlineData"] or {}
            start = (ours or {}).get("start") or {}
            fidelity = hub.merge_dicts(start.get("fidelity"), _sig(part))
            i = self._new_block(
                c, "data", mime_type=blob.get("mimeType"), fidelity=fidelity, extensions=start.get("extensions")
            )
            if blob.get("data"):
                self._emit(hub.Delta(i, blob["data"]))
            self._stop_whole(i, ours)
        elif ours and "native" in ours:
            # A vendor block of another dialect, carried in our extension key.
            self._close(c)
            nat = ours["native"]
            i = self._new_block(
                c,
                "native",
                id=nat.get("id"),
                name=nat.get("name"),
                fidelity=nat.get("fidelity"),
                extensions=nat.get("extensions"),
            )
            if nat.get("text"):
                self._emit(hub.Delta(i, nat["text"]))
            self._emit(hub.BlockStop(i, nat.get("stop_fidelity"), nat.get("stop_extensions")))
        else:
            payload = [k for k in part if k not in _PART_ATTRS]
            if not payload:
                if part.get("thoughtSignature") is None:
                    return
                if c.block is not None and not c.block_sig and c.kind != "tool_call":
                    self._close(c, _sig(part))  # a bare signature part ends the block
                else:  # nothing to hang it on: an empty text block keeps it
                    self._close(c)
                    self._emit(hub.BlockStop(self._new_block(c, "text", fidelity=_sig(part))))
                return
            # executableCode, codeExecutionResult, fileData, toolCall, toolResponse ...: Gemini's own
            self._close(c)
            name = payload[0]
            value = part[name]
            raw = {k: v for k, v in part.items() if k not in ("thoughtSignature", EXTENSION_KEY)}
            start = (ours or {}).get("start") or {}
            i = self._new_block(
                c,
                "native",
                id=value.get("id") if isinstance(value, dict) else None,
                name=name,
                fidelity=hub.merge_dicts(start.get("fidelity"), _sig(part)),
                extensions={NAME: raw, **(start.get("extensions") or {})},
            )
            self._stop_whole(i, ours)

    def _stop_whole(self, index: int, ours: dict | None) -> None:
        stop = (ours or {}).get("stop") or {}
        self._emit(hub.BlockStop(index, stop.get("fidelity"), stop.get("extensions")))

    def _text(self, c: _Candidate, part: dict, ours: dict | None) -> None:
        text = part["text"]
        if not isinstance(text, str):
            self._violation("text-string", "part.text must be a string")
            text = str(text)
        kind = "thinking" if part.get("thought") else "text"
        sig = part.get("thoughtSignature")
        start = ours.get("start") if ours else None
        stop = ours.get("stop") if ours else None
        if not text and sig is None and start is None and stop is None:
            return  # an empty part adds nothing (Gemini sends them next to other parts)
        continues = c.block is not None and c.kind == kind and start is None and not (sig is not None and c.block_sig)
        if continues:
            if text:
                self._emit(hub.Delta(c.block, text))
            c.block_parts += 1
            if sig is not None:
                self._close(c, _sig(part))  # a signature on a later part ends the block
                return
        else:
            self._close(c)
            start = start or {}
            fidelity = hub.merge_dicts(start.get("fidelity"), _sig(part))
            c.block = self._new_block(
                c, kind, id=start.get("id"), fidelity=fidelity, extensions=start.get("extensions")
            )
            c.kind = kind
            c.block_sig = sig is not None
            c.block_parts = 1
            if text:
                self._emit(hub.Delta(c.block, text))
        if stop is not None:
            self._close(c, stop.get("fidelity"), stop.get("extensions"))

    def _function_call(self, c: _Candidate, part: dict, call: Any, ours: dict | None) -> None:
        if not isinstance(call, dict):
            self._violation("function-call", "functionCall must be an object")
            return
        if c.args is not None and not call.get("name"):
            # The continuation of a call streamed with partialArgs.
            for arg in call.get("partialArgs") or ():
                text = c.args.add(arg) if isinstance(arg, dict) else None
                if text is None:
                    self._violation("partial-arg", f"unusable partialArg {arg!r}")
                elif text:
                    self._emit(hub.Delta(c.block, text))
            if not call.get("willContinue"):
                self._emit(hub.Delta(c.block, c.args.finish()))
                c.args = None
                self._emit(hub.BlockStop(c.block))
                c.block = None
                c.kind = ""
            return
        self._close(c)
        name = call.get("name")
        if not name:
            if call.get("partialArgs") or call.get("willContinue"):
                self._violation("partial-args-orphan", "partialArgs without a functionCall that started")
            elif call:
                self._violation("function-call-name", "functionCall without a name")
            return  # Vertex's empty {} terminators land here when no call is open
        call_id = call.get("id")
        if not call_id:
            self._calls += 1
            call_id = f"call_{self.response_id or 'gemini'}_{self._calls}"
        start = (ours or {}).get("start") or {}
        fidelity = hub.merge_dicts(start.get("fidelity"), _sig(part))
        c.tool_calls = True
        index = self._new_block(
            c, "tool_call", id=call_id, name=name, fidelity=fidelity, extensions=start.get("extensions")
        )
        if call.get("willContinue") or call.get("partialArgs"):
            c.args = ArgsWriter()
            c.block, c.kind = index, "tool_call"
            self._function_call(
                c, {}, {"partialArgs": call.get("partialArgs"), "willContinue": call.get("willContinue")}, None
            )
            return
        if isinstance(ours, dict) and isinstance(ours.get("arguments"), str):
            args = ours["arguments"]  # arguments that were not a JSON object at the source
        else:
            args = call.get("args")
            args = msgspec.json.encode(args).decode() if args is not None else "{}"
        self._emit(hub.Delta(index, args))
        self._stop_whole(index, ours)

    # -- end

    @property
    def complete(self) -> bool:
        if self.errored or self.marked_complete:
            return True
        if not self.candidates:
            return self.blocked
        return all(c.finished for c in self.candidates.values())

    def end(self) -> None:
        """Close what is open at the end of input (the caller decides truncation)."""
        for c in self.candidates.values():
            self._close(c)


class StreamDecoder(SSEStreamDecoder):
    """``streamGenerateContent`` bodies: SSE (``alt=sse``) or the incremental JSON array
    (no ``alt``), told apart by the first non-blank byte.

    Terminal rule (the wire has no terminal event): the input ends after every candidate
    seen has its ``finishReason`` (and, for the array, after the closing ``]``); an
    ``{"error": ...}`` chunk ends it with a hub ``Error``.  Otherwise ``truncated`` and
    ``Error(incomplete_stream)``.  Refuses, recording a violation: chunks that are not JSON
    objects (``json``, ``json-object``) or of a shape it cannot read (``chunk-shape``,
    ``candidates-list``, ``candidate-object``, ``parts-list``, ``part-object``,
    ``text-string``, ``function-call``...), content after a candidate's finish
    (``after-finish``), bytes outside the array (``array-garbage``), chunks after the end
    (``after-terminal``).
    """

    dialect = NAME

    def __init__(self) -> None:
        super().__init__()
        self._mode = ""  # "sse" | "array"
        self._pending = b""  # leading blank bytes, before the mode is known
        self._array: JSONArraySplitter | None = None
        self._chunks = ChunkDecoder(self.emit, self.violation)

    def feed(self, data: bytes) -> list[hub.Event]:
        if not self._mode:
            head = data.lstrip(b" \t\r\n\xef\xbb\xbf")
            if not head:
                self._pending += data
                return []
            data, self._pending = self._pending + data, b""
            self._mode = "array" if head[:1] in (b"[", b"{") else "sse"
            if self._mode == "array":
                self._array = JSONArraySplitter()
        if self._array is None:
            return super().feed(data)
        for element in self._array.feed(data):
            self.event_number += 1
            self._element(element)
        out, self._out = self._out, []
        return out

    def _element(self, data: bytes | str) -> None:
        if self.ended:
            self.violation("after-terminal", "a chunk after the error")
            return
        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            self.violation("json", f"chunk is not valid JSON ({exc})")
            return
        try:
            self._chunks.chunk(obj)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            # A shape we did not foresee (e.g. a mangled "llmbridge" key): report it, never raise.
            self.violation("chunk-shape", f"unexpected chunk shape ({type(exc).__name__}: {exc})")
        if self._chunks.errored:
            self.finish_stream()

    def on_event(self, event: sse.Event) -> None:
        if event.data.strip():
            self._element(event.data)

    def close(self) -> list[hub.Event]:
        if self._array is None:
            for event in self._sse.close():
                self._dispatch(event)
        else:
            if self._array.pending:
                self.violation("truncated", "the body ended inside a JSON element", event=-1)
            elif self._array.opened and not self._array.closed and not self.ended:
                self.violation("array-unclosed", "the JSON array was not closed", event=-1)
            if self._array.garbage:
                self.violation("array-garbage", "bytes outside the JSON array elements", event=-1)
        if not self.ended:
            if not self._chunks.started:
                self._chunks.start({})
            self._chunks.end()
            cut = self._array is not None and (self._array.pending or (self._array.opened and not self._array.closed))
            if self._chunks.complete and not cut:
                self.finish_stream()
            else:
                self.on_truncated()
        out, self._out = self._out, []
        return out
