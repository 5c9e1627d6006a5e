"""openai-chat stream decoder: ``data: {chunk}`` lines ending in ``data: [DONE]`` -> hub events.

Blocks: content, refusal, reasoning and native blocks of a choice follow each other (a new
kind closes the open one); tool calls stay open until the choice finishes, since the wire
lets their argument fragments interleave by ``index``.  ``data: [DONE]`` is the terminal
event (the API reference ends every stream with it): a stream that stops without it decodes
to ``Error(incomplete_stream)`` even when a finish_reason and usage arrived.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub, sse
from ..base import EXTENSION_KEY, SSEStreamDecoder, json_decode
from ._common import (
    CONTENT_KEYS,
    FINISH_FROM_WIRE,
    NAME,
    error_from_object,
    reasoning_fidelity,
    usage_from_wire,
)

# Top-level chunk keys with a meaning of their own, or noise that changes on every chunk.
_CHUNK_KEYS = frozenset({"id", "object", "created", "model", "choices", "usage", "error", EXTENSION_KEY, "obfuscation"})
# Choice keys the decoder reads itself; the rest of a choice travels as an extension.
_CHOICE_HANDLED = frozenset(
    ("index", "delta", "finish_reason", "logprobs", "text", "token_ids", EXTENSION_KEY, "stop_reason")
)
_NOT_EXTRA = _CHUNK_KEYS | {"sla_metrics"}  # sla_metrics changes on every chunk: kept from the first only
_DELTA_SKIP = frozenset({"role", "token_id", "channel"})  # per-token decoding metadata
_DELTA_PLAIN = _DELTA_SKIP | {"content", "reasoning_content", "reasoning", "reasoning_details", "refusal", "tool_calls"}
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


# The hot chunk shape, decoded straight into structs (about half the cost of dicts): one more
# fragment for an open block, with every other field one that the general path skips (null,
# per-token metadata, or stream-level values already reported).  Any other key or type fails
# the decode and the chunk takes the general path, so these types are also the shape check.
# The fields are in the order the wire has them (msgspec looks a key up from the field after
# the last one found: in order, each key is found at the first try), and the values no one
# reads are ``Any``: an int or a short string is cheaper to make than a ``Raw`` of it.
class _HotFunction(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    arguments: str


class _HotCall(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    index: int
    function: _HotFunction


class _HotDelta(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    role: Any = None  # the _DELTA_SKIP keys (never read)
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[_HotCall] | None = None
    token_id: Any = None
    channel: Any = None


class _HotChoice(msgspec.Struct, forbid_unknown_fields=True, gc=False, kw_only=True):
    index: int = 0
    delta: _HotDelta
    finish_reason: str | None = None  # (not null: the general path; typed so the end decodes without raising)
    logprobs: None = None
    text: Any = None  # Together's legacy copy of the content: _choice skips it
    native_finish_reason: None = None
    seed: None = None
    token_ids: None = None


class _HotChunk(msgspec.Struct, forbid_unknown_fields=True, gc=False, kw_only=True):
    id: Any = None  # stream-level: read from the first chunk only
    object: Any = None
    created: Any = None
    model: Any = None
    choices: list[_HotChoice]
    usage: dict | None = None  # (not null: the general path)
    obfuscation: Any = None
    sla_metrics: Any = None  # reported from the first chunk only (_NOT_EXTRA)
    service_tier: str | None = None  # extras: reported when they change, so compared with _seen
    system_fingerprint: str | None = None
    provider: str | None = None


_hot_decode = msgspec.json.Decoder(_HotChunk).decode


class _StartChunk(msgspec.Struct, forbid_unknown_fields=True, gc=False, kw_only=True):
    """The first chunk of nearly every stream (``delta: {"role": "assistant", "content": ""}``):
    :class:`_HotChunk` with the stream-level fields that ``_start`` reads decoded, and typed as
    ``_start`` takes them (any other type fails the decode: the general path)."""

    id: str | None = None
    object: Any = None
    created: int | None = None
    model: str | None = None
    choices: list[_HotChoice]
    usage: dict | None = None
    obfuscation: Any = None
    sla_metrics: msgspec.Raw = msgspec.Raw()  # (present: the general path; _start reports it)
    service_tier: str | None = None
    system_fingerprint: str | None = None
    provider: str | None = None


_start_decode = msgspec.json.Decoder(_StartChunk).decode
_NOT_YET = 1 << 62  # _hot_skip until _start: every event to on_event
_Delta = hub.Delta
_HOT_BACKOFF = 8  # after chunks of other shapes, try the hot decode on at most every 8th event


class _Choice:
    __slots__ = (
        "background",
        "buf",
        "finished",
        "had_tools",
        "last",
        "n",
        "natives",
        "plain",
        "rd_index",
        "reasoned",
        "refused",
        "seq",
        "seq_items",
        "seq_kind",
        "seq_refusal",
        "think",
        "tool_blocks",
        "tool_ids",
        "tools",
    )

    def __init__(self, n: int) -> None:
        self.n = n
        self.plain = False  # plain content goes straight to the open text block (the hot path)
        self.seq: int | None = None  # the open sequential block (text, thinking, native, data)
        self.seq_kind = ""
        self.seq_refusal = False
        self.seq_items: list[dict] = []  # reasoning_details fragments of the open thinking block
        self.rd_index: Any = None
        self.tools: dict[int, int] = {}  # wire tool index -> open block
        self.tool_ids: dict[int, str] = {}
        self.tool_blocks: dict[int, int] = {}  # wire tool index -> its (latest) block, open or not
        self.natives: dict[Any, int] = {}  # executed_tools index -> open block
        self.think = "start"  # inline <think> parser: "start" | "think" | "text"
        self.buf = ""
        self.reasoned = False
        self.finished = False
        self.refused = False
        self.had_tools = False
        self.last: int | None = None  # the block opened last, for extensions
        self.background: list[int] = []  # blocks kept open under the llmbridge key (interleaved)


# (the paths every stream takes append to ``_out`` themselves: SSEStreamDecoder.emit is that
# append, one call more per event)


class StreamDecoder(SSEStreamDecoder):
    """openai-chat ``data: {chunk}`` lines to hub events (any number of choices and tool calls).

    Terminal rule: ``data: [DONE]`` ends the stream, not a chunk's ``finish_reason``; input
    that stops before it gives ``truncated`` and ``Error(incomplete_stream)`` + ``ResponseEnd``.
    An ``error`` chunk (or an SSE ``error`` event, even with plain-text data) ends it with that
    error.  Refuses, recording a violation and skipping the piece: data that is not JSON
    (``json``) or not an object (``json-object``), ``choices``/choice/``content``/
    ``tool_calls``/``reasoning_details``/``usage`` of the wrong shape, content for a choice
    after its finish (``after-finish``), anything after ``[DONE]`` (``after-terminal``).
    """

    dialect = NAME

    def __init__(self) -> None:
        super().__init__()
        self.started = False
        self._pending_ext: dict[str, Any] = {}
        self._seen: dict[str, Any] = {}  # top-level extras already reported
        self._choices: dict[int, _Choice] = {}
        self._next_block = 0
        self._refs: dict[Any, int] = {}  # llmbridge block refs -> block index
        self._last_usage: dict | None = None
        self._response_id = ""
        self._calls = 0
        # events left to on_event before the next hot try: the first event tries _hot_start, and
        # if that leaves it to on_event, none until _start
        self._hot_skip = 0
        self._hot_backoff = 1

    # ------------------------------------------------------------------ SSE events

    def feed(self, data: bytes) -> list[hub.Event]:
        # the base class's loop, without one call per event (this is the hot path)
        on_event, hot = self.on_event, self._hot
        for event in self._sse.feed(data):
            self.event_number += 1
            if self.ended:
                if event.data.strip() not in ("[DONE]", ""):
                    self.violation("after-terminal", f"event {event.event!r} after the terminal event")
            elif not hot(event):
                on_event(event)
        out, self._out = self._out, []
        return out

    def on_event(self, event: sse.Event) -> None:
        data = event.data
        if data[:1] != "{":
            stripped = data.strip()
            if stripped == "[DONE]":
                self._end()
                return
            if not stripped:
                return
        try:
            chunk = json_decode(data)
        except msgspec.DecodeError as exc:
            self.violation("json", f"data is not valid JSON ({exc})")
            if event.event == "error":  # an error event whose data is plain text is still an error
                self._error({"error": {"message": data.strip() or "error event"}})
            return
        if type(chunk) is not dict:
            self.violation("json-object", "data is not a JSON object")
            return
        if event.event == "error" or chunk.get("error"):
            self._error(chunk)
            return
        if not self.started and not self._maybe_start(chunk):
            return
        choices = chunk.get("choices")
        if choices:
            if type(choices) is not list:
                self.violation("choices", "choices is not a list")
            else:
                for choice in choices:
                    self._choice(choice)
        elif choices is None and "usage" not in chunk:
            self.violation("missing-field", "chunk without choices")
        seen = self._seen
        for key, value in chunk.items():  # fields beyond the standard ones: reported once per new value
            if key not in _NOT_EXTRA and value is not None and seen.get(key, _MISSING) != value:
                seen[key] = value
                self.emit(hub.Extension(NAME, {key: value}))
        bridge = chunk.get(EXTENSION_KEY)
        if isinstance(bridge, dict) and isinstance(bridge.get("extension"), dict):
            ext = bridge["extension"]
            self.emit(hub.Extension(ext.get("namespace") or NAME, ext.get("data")))
        usage = chunk.get("usage")
        if usage:
            self._usage(usage)
        elif (xg := chunk.get("x_groq")) and isinstance(xg, dict) and isinstance(xg.get("usage"), dict):
            self._usage(xg["usage"])

    def _hot(self, event: sse.Event) -> bool:
        """The hot path: text for the open text block, reasoning (or text inside ``<think>`` tags)
        for the open thinking block, or argument JSON for an open tool call.

        True when handled; False (before any change) leaves the event to on_event, which gives
        the same hub events.
        """
        if self._hot_skip:
            self._hot_skip -= 1
            return False
        data = event.data
        if data == "[DONE]":  # (what on_event does with it, whatever the event's name)
            self._end()
            return True
        if event.event == "error":
            return False
        if not self.started:
            return self._hot_start(data)
        try:
            chunk = _hot_decode(data)
        except msgspec.DecodeError:  # (ValidationError included) another shape: back off, since
            self._hot_skip = self._hot_backoff  # a failed decode costs more than a successful one
            self._hot_backoff = min(2 * self._hot_backoff, _HOT_BACKOFF)
            return False
        self._hot_backoff = 1
        seen = self._seen
        if (
            (chunk.service_tier is not None and seen.get("service_tier") != chunk.service_tier)
            or (chunk.system_fingerprint is not None and seen.get("system_fingerprint") != chunk.system_fingerprint)
            or (chunk.provider is not None and seen.get("provider") != chunk.provider)
        ):
            return False
        choices = chunk.choices
        if len(choices) != 1:
            # The usage chunk that ends nearly every stream (``choices: []``): on_event's
            # only step for it is _usage, since the struct admits no extras or bridge key.
            if choices or not chunk.usage:  # (an empty usage object: on_event skips it)
                return False
            self._usage(chunk.usage)
            return True
        if chunk.usage is not None:
            return False
        choice = choices[0]
        ch = self._choices.get(choice.index)
        if ch is None or ch.finished:
            return False
        delta = choice.delta
        if choice.finish_reason is not None:
            # The finish chunk with no fragment in its delta (``{}`` or role only): on_event
            # would only flush the <think> parser (which _finish does first) and finish.
            if (
                not choice.finish_reason
                or delta.content
                or delta.reasoning_content
                or delta.reasoning
                or delta.refusal
                or delta.tool_calls
            ):
                return False
            self._finish(ch, choice.finish_reason, _NO_CHOICE, None)
            return True
        content = delta.content
        reasoning = delta.reasoning_content or delta.reasoning
        refusal = delta.refusal
        calls = delta.tool_calls
        # One kind of fragment per chunk (more take the general path); each branch does what
        # _delta does for it, with the common case written out.
        if content:
            if reasoning or refusal or calls:
                return False
            if ch.plain:
                self._out.append(_Delta(ch.seq, content))  # type: ignore[arg-type]
            elif (
                ch.think == "think"
                and not ch.buf
                and ch.seq_kind == "thinking"
                and not ch.seq_refusal
                and "<" not in content
            ):
                # inside <think>: no "<" means no </think> and no partial tag for the parser to hold
                self._out.append(_Delta(ch.seq, content))  # type: ignore[arg-type]
            elif ch.think == "start" and not ch.buf and content[0] != "<" and not content[0].isspace():
                # the first text of the choice, which cannot open a <think> tag (nor be the space
                # before one): _content would end its parser and open the text block, as here
                ch.think = "text"
                self._seq(ch, "text", content)
            else:
                self._content(ch, content)  # the <think> parser's work
            return True
        if reasoning:
            if refusal or calls:
                return False
            if ch.buf:
                self._flush_think(ch)
            ch.reasoned = True
            if ch.seq_kind == "thinking" and not ch.seq_refusal:
                self._out.append(_Delta(ch.seq, reasoning))  # type: ignore[arg-type]
            else:
                self._seq(ch, "thinking", reasoning)
            return True
        if refusal:
            if calls:
                return False
            if ch.buf:
                self._flush_think(ch)
            ch.refused = True
            self._seq(ch, "text", refusal, refusal=True)
            return True
        if calls:
            if len(calls) != 1 or (block := ch.tools.get(calls[0].index)) is None:
                return False  # a call starts (or several at once): the general path
            if ch.buf:
                self._flush_think(ch)
            if args := calls[0].function.arguments:
                self._out.append(_Delta(block, args))
            return True
        # Nothing to add; but text the <think> parser holds is flushed by a role-only delta and not
        # by an empty one, which the struct does not tell apart.
        return not ch.buf

    def _hot_start(self, data: str) -> bool:
        """The first event, when it is the usual first chunk: one choice whose delta holds
        nothing or text, or a finish without a fragment; extras whose order _start_extras tells.

        Does what on_event does with it (``_start``, then ``_choice`` for a new choice) without
        the dict decode and walks; False (before any change) leaves it, and every event up to
        the start, to on_event.
        """
        self._hot_skip = _NOT_YET  # whatever happens below: _start resets it
        try:
            chunk = _start_decode(data)
        except msgspec.DecodeError:
            return False
        choices = chunk.choices
        if len(choices) != 1 or chunk.usage is not None or chunk.sla_metrics:
            return False
        choice = choices[0]
        delta = choice.delta
        reason = choice.finish_reason
        if (
            delta.reasoning_content
            or delta.reasoning
            or delta.refusal
            or delta.tool_calls
            or (reason is not None and (not reason or delta.content))
        ):
            return False
        tier, fingerprint, provider = chunk.service_tier, chunk.system_fingerprint, chunk.provider
        if tier is None and fingerprint is None and provider is None:
            pending: dict[str, Any] = {}
        else:
            extras = _start_extras(data, tier, fingerprint, provider)
            if extras is None:
                return False
            pending = extras
        self.started = True
        self._hot_skip = 0
        self._pending_ext = pending
        self._seen = dict(pending)
        rid = chunk.id or None
        self._response_id = rid or ""
        extensions = {NAME: pending} if pending else None
        self._out.append(hub.ResponseStart(rid, chunk.model or None, chunk.created or None, None, extensions))
        n = choice.index
        ch = self._choices[n] = _Choice(n)
        if reason is not None:
            self._finish(ch, reason, _NO_CHOICE, None)
        elif delta.content:
            self._content(ch, delta.content)
        return True

    # ------------------------------------------------------------------ stream level

    def _maybe_start(self, chunk: dict) -> bool:
        """Emit ResponseStart at the first chunk with content; fold earlier preambles (Azure) into it."""
        if chunk.get("choices") or chunk.get("usage") or chunk.get("id") or chunk.get("error"):
            self._start(chunk)
            return True
        for key, value in chunk.items():
            if key not in _CHUNK_KEYS and value is not None:
                self._pending_ext[key] = value
        return False

    def _start(self, chunk: dict) -> None:
        self.started = True
        self._hot_skip = 0
        for key, value in chunk.items():
            if key not in _CHUNK_KEYS and value is not None:
                self._pending_ext[key] = value
        content = {k: self._pending_ext.pop(k) for k in list(self._pending_ext) if k in CONTENT_KEYS}
        extensions: dict[str, Any] = {NAME: self._pending_ext} if self._pending_ext else {}
        self._seen = dict(self._pending_ext)
        bridge = chunk.get(EXTENSION_KEY)
        request_id = None
        if isinstance(bridge, dict):
            if isinstance(bridge.get("extensions"), dict):
                extensions.update(bridge["extensions"])
            request_id = bridge.get("request_id")
        rid = chunk.get("id") or None
        self._response_id = str(rid or "")
        created = chunk.get("created")
        self.emit(
            hub.ResponseStart(
                rid,
                chunk.get("model") or None,
                created if isinstance(created, int) and created else None,
                request_id,
                extensions or None,
            )
        )
        for key, value in content.items():  # content-like extras are Extension events, as they are later on
            self._seen[key] = value
            self.emit(hub.Extension(NAME, {key: value}))

    def _usage(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            self.violation("usage", "usage is not an object")
            return
        if raw == self._last_usage:
            return  # Perplexity repeats it on every chunk
        self._last_usage = raw
        usage = usage_from_wire(raw)
        foreign = raw.get(EXTENSION_KEY)
        if isinstance(foreign, dict) and isinstance(foreign.get("extensions"), dict):
            ext = dict(usage.extensions or {})
            ext.update(foreign["extensions"])
            own = ext.get(NAME)
            if isinstance(own, dict) and EXTENSION_KEY in own:
                own = {k: v for k, v in own.items() if k != EXTENSION_KEY}
                if own:
                    ext[NAME] = own
                else:
                    del ext[NAME]
            usage.extensions = ext or None
        self._out.append(usage)

    def _error(self, chunk: dict) -> None:
        if not self.started:
            self._start(chunk)
        if chunk.get("usage"):
            self._usage(chunk["usage"])
        for choice in self._choices.values():
            self._flush_think(choice)
        obj = chunk.get("error")
        if obj is None:
            obj = {k: v for k, v in chunk.items() if k != EXTENSION_KEY}
        bridge = obj.get(EXTENSION_KEY) if isinstance(obj, dict) else None
        if isinstance(obj, dict) and EXTENSION_KEY in obj:
            obj = {k: v for k, v in obj.items() if k != EXTENSION_KEY}
        self.fail(error_from_object(obj, bridge=bridge))

    def _end(self) -> None:
        if not self.started:
            self._start({})
        for choice in self._choices.values():
            self._close_choice(choice)
        self.finish_stream()

    def on_truncated(self) -> None:
        if not self.started:
            self._start({})
        for choice in self._choices.values():
            self._flush_think(choice)
        finished = any(c.finished for c in self._choices.values())
        self.violation("truncated", "stream ended without data: [DONE]", event=-1)
        why = " (after a finish_reason)" if finished else ""
        self.fail(hub.Error(f"stream ended without data: [DONE]{why}", "incomplete_stream"))

    # ------------------------------------------------------------------ blocks

    def _open(
        self,
        ch: _Choice,
        kind: str,
        id: str | None = None,
        name: str | None = None,
        mime_type: str | None = None,
        fidelity: dict | None = None,
        extensions: dict | None = None,
    ) -> int:
        index = self._next_block
        self._next_block += 1
        self._out.append(hub.BlockStart(index, kind, id, name, ch.n, mime_type, fidelity, extensions))
        ch.last = index
        return index

    def _close_seq(self, ch: _Choice, fidelity: dict | None = None, extensions: dict | None = None) -> None:
        if ch.seq is None:
            return
        if ch.seq_items:
            fidelity = hub.merge_dicts(reasoning_fidelity(ch.seq_items), fidelity)
            ch.seq_items = []
        self._out.append(hub.BlockStop(ch.seq, fidelity, extensions))
        ch.seq = None
        ch.seq_kind = ""
        ch.plain = False
        ch.rd_index = None

    def _seq(self, ch: _Choice, kind: str, text: str, refusal: bool = False) -> None:
        """Append text to the open block of ``kind``, opening one when another kind is open."""
        if ch.seq is None or ch.seq_kind != kind or ch.seq_refusal != refusal:
            if ch.seq is not None:
                self._close_seq(ch)
            ch.seq = self._open(ch, kind, extensions={NAME: {"refusal": True}} if refusal else None)
            ch.seq_kind = kind
            ch.seq_refusal = refusal
        ch.plain = kind == "text" and not refusal and ch.think == "text" and not ch.buf and not ch.finished
        if text:
            self._out.append(hub.Delta(ch.seq, text))

    def _close_choice(self, ch: _Choice) -> None:
        # (each step only where it has something to do: a choice is closed at its finish and
        # again at [DONE], when there is nothing left)
        if ch.buf or ch.think == "start":
            self._flush_think(ch)
        if ch.seq is not None:
            self._close_seq(ch)
        if ch.tools:
            for index in ch.tools.values():
                self.emit(hub.BlockStop(index))
            ch.tools.clear()
        if ch.natives:
            for index in ch.natives.values():
                self.emit(hub.BlockStop(index))
            ch.natives.clear()
        if ch.background:
            for index in ch.background:
                self.emit(hub.BlockStop(index))
            ch.background.clear()

    # ------------------------------------------------------------------ choices

    def _choice(self, choice: Any) -> None:
        if type(choice) is not dict:
            self.violation("choice-object", "choice is not an object")
            return
        n = choice.get("index", 0)
        if type(n) is not int:
            self.violation("missing-field", "choice without an integer index")
            n = 0
        ch = self._choices.get(n)
        if ch is None:
            ch = self._choices[n] = _Choice(n)
        bridge = choice.get(EXTENSION_KEY)
        if bridge is not None:
            self._bridge_before(ch, bridge)
        delta = choice.get("delta")
        if bridge is not None and type(bridge) is dict and "ref" in bridge and "delta" not in bridge and delta:
            # text of a block kept open beside the current one (interleaved blocks)
            target = self._refs.get(_key(bridge["ref"]))
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("refusal")
            if target is not None and isinstance(text, str):
                self.emit(hub.Delta(target, text))
                delta = {}
            else:
                self.violation("block-open", "llmbridge ref to an unknown block")
        if delta:
            if ch.finished and _has_content(delta):
                self.violation("after-finish", f"content for choice {n} after its finish_reason")
            self._delta(ch, delta)
        elif delta is None and "message" not in choice and choice.get("finish_reason") is None:
            self.violation("missing-field", "choice without delta")
        reason = choice.get("finish_reason")
        logprobs = choice.get("logprobs")
        if logprobs and (type(logprobs) is not dict or logprobs.get("content") or logprobs.get("refusal")):
            self.emit(hub.Extension(NAME, {"logprobs": logprobs}, ch.seq if ch.seq is not None else ch.last))
        if len(choice) > ("index" in choice) + ("delta" in choice) + ("finish_reason" in choice) + (
            "logprobs" in choice
        ):
            self._choice_extras(ch, choice)
        if bridge is not None:
            self._bridge_after(ch, bridge)
        if reason:
            self._finish(ch, reason, choice, bridge)

    def _delta(self, ch: _Choice, delta: dict) -> None:
        content = delta.get("content")
        if ch.buf and not content:
            self._flush_think(ch)  # something else arrives: what the tag parser held is text
        details = delta.get("reasoning_details")
        if details:
            self._reasoning_details(ch, details)
        else:
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                if type(reasoning) is str:
                    ch.reasoned = True
                    self._seq(ch, "thinking", reasoning)
                else:
                    self.violation("reasoning", "reasoning is not a string")
        if content:
            if type(content) is str:
                self._content(ch, content)
            elif type(content) is list:
                self._content_parts(ch, content)
            else:
                self.violation("content", "delta.content is neither a string nor a list")
        refusal = delta.get("refusal")
        if refusal and type(refusal) is str:
            ch.refused = True
            self._seq(ch, "text", refusal, refusal=True)
        calls = delta.get("tool_calls")
        if calls:
            self._tool_calls(ch, calls)
        for key in delta:
            if key not in _DELTA_PLAIN:
                self._delta_extras(ch, delta)
                break

    def _content(self, ch: _Choice, text: str) -> None:
        if ch.think == "text":
            self._seq(ch, "text", text)
            return
        if ch.reasoned:  # the provider separates reasoning itself: no inline tags
            ch.think = "text"
            self._seq(ch, "text", ch.buf + text)
            ch.buf = ""
            return
        buf = ch.buf + text
        if ch.think == "start":
            head = buf.lstrip()
            if not head or (len(head) < len(_THINK_OPEN) and _THINK_OPEN.startswith(head)):
                ch.buf = buf
                return
            if not head.startswith(_THINK_OPEN):
                ch.think, ch.buf = "text", ""
                self._seq(ch, "text", buf)
                return
            ch.think = "think"
            buf = head[len(_THINK_OPEN) :]
            self._seq(ch, "thinking", "")
        end = buf.find(_THINK_CLOSE)
        if end >= 0:
            ch.think, ch.buf = "text", ""
            self._seq(ch, "thinking", buf[:end])
            rest = buf[end + len(_THINK_CLOSE) :]
            if rest:
                self._seq(ch, "text", rest)
            return
        keep = _partial_suffix(buf, _THINK_CLOSE)
        ch.buf = buf[len(buf) - keep :] if keep else ""
        if len(buf) > keep:
            self._seq(ch, "thinking", buf[: len(buf) - keep])

    def _flush_think(self, ch: _Choice) -> None:
        if ch.buf:
            kind = "thinking" if ch.think == "think" else "text"
            buf, ch.buf = ch.buf, ""
            self._seq(ch, kind, buf)
        if ch.think == "start":
            ch.think = "text"

    def _content_parts(self, ch: _Choice, parts: list) -> None:
        """Mistral's content arrays: text and thinking parts."""
        for part in parts:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                self._content(ch, _str(part.get("text")) or "")
            elif kind == "thinking":
                ch.reasoned = True
                inner = part.get("thinking")
                if isinstance(inner, list):
                    text = "".join(_str(p.get("text")) or "" for p in inner if isinstance(p, dict))
                else:
                    text = inner if isinstance(inner, str) else ""
                self._seq(ch, "thinking", text)
            else:
                self.emit(hub.Extension(NAME, {"content_part": part}, ch.seq))

    def _reasoning_details(self, ch: _Choice, details: Any) -> None:
        if type(details) is not list:
            self.violation("reasoning", "reasoning_details is not a list")
            return
        ch.reasoned = True
        for item in details:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "reasoning.encrypted":
                self._close_seq(ch)
                index = self._open(ch, "thinking")
                self.emit(hub.BlockStop(index, reasoning_fidelity([item])))
                continue
            idx = item.get("index")
            if ch.seq_kind == "thinking" and ch.rd_index is not None and idx is not None and idx != ch.rd_index:
                self._close_seq(ch)
            text = item.get("text") if kind != "reasoning.summary" else item.get("summary")
            self._seq(ch, "thinking", text if isinstance(text, str) else "")
            ch.rd_index = idx
            ch.seq_items.append(item)

    def _tool_calls(self, ch: _Choice, calls: Any) -> None:
        if type(calls) is not list:
            self.violation("tool_calls", "tool_calls is not a list")
            return
        for position, call in enumerate(calls):
            if type(call) is not dict:
                self.violation("tool_calls", "tool call is not an object")
                continue
            k = call.get("index")
            if type(k) is not int:
                k = position if len(calls) > 1 or not ch.tools else max(ch.tools)
            fn = call.get("function")
            if type(fn) is not dict:
                fn = {}
            call_id = call.get("id") if type(call.get("id")) is str else None
            name = fn.get("name") if type(fn.get("name")) is str else None
            block = ch.tools.get(k)
            if block is not None and call_id and ch.tool_ids.get(k) and call_id != ch.tool_ids[k]:
                # a provider reusing the index for a new call: a new block
                self.emit(hub.BlockStop(block))
                block = None
            if block is None:
                self._flush_think(ch)
                self._close_seq(ch)
                if not call_id:
                    call_id = f"call_{self._response_id or 'llmbridge'}_{self._calls}"
                self._calls += 1
                if not name:
                    self.violation("missing-field", f"tool call {k} starts without a function name")
                block = self._open(ch, "tool_call", call_id, name)
                ch.tools[k] = ch.tool_blocks[k] = block
                ch.tool_ids[k] = call_id
                ch.had_tools = True
            args = fn.get("arguments")
            if args:
                if type(args) is not str:  # some providers send an object
                    from ..base import json_encode

                    args = json_encode(args).decode()
                self.emit(hub.Delta(block, args))

    def _delta_extras(self, ch: _Choice, delta: dict) -> None:
        for key, value in delta.items():
            if key in ("content", "reasoning_content", "reasoning", "reasoning_details", "refusal", "tool_calls"):
                continue
            if key in _DELTA_SKIP or value is None or value == [] or value == "":
                continue
            if key == "executed_tools" and isinstance(value, list):
                self._executed_tools(ch, value)
            elif key == "function_call" and isinstance(value, dict):
                self._tool_calls(ch, [{"index": 0, "function": value}])
            else:
                self.emit(hub.Extension(NAME, {key: value}, ch.seq if ch.seq is not None else ch.last))

    def _executed_tools(self, ch: _Choice, tools: list) -> None:
        """Groq compound's server-side tools: native blocks, closed when their output arrives."""
        for tool in tools:
            if not isinstance(tool, dict):
                continue
            k = _key(tool.get("index"))
            block = ch.natives.get(k)
            if block is None:
                self._flush_think(ch)
                self._close_seq(ch)
                block = self._open(
                    ch, "native", None, tool.get("type") or tool.get("name"), extensions={NAME: {"executed_tool": tool}}
                )
                ch.natives[k] = block
            if tool.get("output") is not None:
                self.emit(hub.BlockStop(block, extensions={NAME: {"executed_tool": tool}}))
                del ch.natives[k]

    def _choice_extras(self, ch: _Choice, choice: dict) -> None:
        for key, value in choice.items():
            if key in _CHOICE_HANDLED:
                continue
            if value is None or value == {} or value == []:
                continue
            if key == "native_finish_reason" and (not choice.get("finish_reason") or ch.finished):
                continue
            target = ch.seq if ch.seq is not None else ch.last
            self.emit(hub.Extension(NAME, {key: value}, None if key == "native_finish_reason" else target))

    def _finish(self, ch: _Choice, reason: Any, choice: dict, bridge: Any) -> None:
        if ch.finished:
            return  # OpenRouter repeats the finish chunk
        ch.finished = True
        self._close_choice(ch)
        raw = reason if type(reason) is str else str(reason)
        hub_reason = FINISH_FROM_WIRE.get(raw, "other")
        stop_sequence = None
        stop_reason = choice.get("stop_reason") if choice else None  # (the hot path's choice is {})
        if bridge is not None and isinstance(bridge, dict) and _key(bridge.get("finish")) in hub.FINISH_REASONS:
            hub_reason = bridge["finish"]
            raw = bridge["raw"] if isinstance(bridge.get("raw"), str) and bridge["raw"] else raw
        elif hub_reason == "end_turn":
            if ch.had_tools:
                hub_reason = "tool_use"
            elif ch.refused:
                hub_reason = "refusal"
            elif isinstance(stop_reason, str) and stop_reason:
                hub_reason = "stop_sequence"
        if stop_reason and isinstance(stop_reason, str):
            stop_sequence = stop_reason
        self._out.append(hub.Finish(hub_reason, ch.n, raw, stop_sequence))

    # ------------------------------------------------------------------ the llmbridge key on a choice

    def _bridge_before(self, ch: _Choice, bridge: Any) -> None:
        if not isinstance(bridge, dict):
            return
        keep = bridge.get("keep")
        if isinstance(keep, dict):  # the open block stays open, interleaved with the next ones
            self._flush_think(ch)
            kind, refusal = _kind(keep.get("kind")), bool(keep.get("refusal"))
            if ch.seq is not None and ch.seq_kind == kind and ch.seq_refusal == refusal:
                index = ch.seq
                ch.seq, ch.seq_kind, ch.rd_index, ch.plain = None, "", None, False
            else:  # it has had no text yet, so no block: open it now
                self._close_seq(ch)
                index = self._open(ch, kind, extensions={NAME: {"refusal": True}} if refusal else None)
            self._refs[_key(keep.get("ref"))] = index
            ch.background.append(index)
        block = bridge.get("block")
        if isinstance(block, dict):
            self._flush_think(ch)
            self._close_seq(ch)
            kind = _kind(block.get("kind"))
            extensions = _dict(block.get("extensions"))
            index = self._open(
                ch,
                kind,
                _str(block.get("id")),
                _str(block.get("name")),
                _str(block.get("mime_type")),
                _dict(block.get("fidelity")),
                extensions,
            )
            ch.seq, ch.seq_kind, ch.plain = index, kind, False
            ch.seq_refusal = bool((_dict((extensions or {}).get(NAME)) or {}).get("refusal"))
            if kind in ("text", "thinking"):
                ch.think = "text"
                ch.reasoned = ch.reasoned or kind == "thinking"
            if "ref" in block:
                self._refs[_key(block["ref"])] = index
        text = bridge.get("delta")
        if isinstance(text, str):
            target = self._refs.get(_key(bridge.get("ref")), ch.seq)
            if target is not None:
                self.emit(hub.Delta(target, text))

    def _bridge_after(self, ch: _Choice, bridge: Any) -> None:
        if not isinstance(bridge, dict):
            return
        ext = bridge.get("extension")
        if isinstance(ext, dict):
            target = ch.tool_blocks.get(_key(ext["tool"])) if "tool" in ext else self._refs.get(_key(ext.get("ref")))
            kind = ext.get("kind")
            if target is None and kind in ("text", "thinking"):
                if ch.seq is None or ch.seq_kind != kind:  # the block has had no text yet: open it now
                    self._flush_think(ch)
                    self._seq(ch, kind, "", bool(ext.get("refusal")))
                target = ch.seq
            if target is None:
                target = ch.seq if ch.seq is not None else ch.last
            self.emit(hub.Extension(ext.get("namespace") or NAME, ext.get("data"), target))
        stop = bridge.get("stop")
        if isinstance(stop, dict):
            fidelity, extensions = _dict(stop.get("fidelity")), _dict(stop.get("extensions"))
            tool = _key(stop.get("tool"))
            ref = self._refs.get(_key(stop.get("ref")))
            if tool is not None and tool in ch.tools:
                self.emit(hub.BlockStop(ch.tools.pop(tool), fidelity, extensions))
            elif ref is not None and ref in ch.background:
                ch.background.remove(ref)
                self.emit(hub.BlockStop(ref, fidelity, extensions))
            elif ch.seq is not None and ch.seq_kind == stop.get("kind", ch.seq_kind):
                self._flush_think(ch)
                self._close_seq(ch, fidelity, extensions)
            elif stop.get("kind") in ("text", "thinking"):  # a block without text (encrypted reasoning)
                self._flush_think(ch)
                self._close_seq(ch)
                self.emit(hub.BlockStop(self._open(ch, stop["kind"]), fidelity, extensions))
            else:
                self.violation("block-open", "llmbridge stop without an open block")


_MISSING = object()
_EXTRA_NAMES = (
    ("service_tier", '"service_tier"'),
    ("system_fingerprint", '"system_fingerprint"'),
    ("provider", '"provider"'),
)


def _start_extras(data: str, *values: str | None) -> dict[str, Any] | None:
    """The first chunk's extras (``values`` by _EXTRA_NAMES, None where absent) in the order
    the chunk has them, as _start's walk of the decoded dict would put them; None when that
    order cannot be told from the text.

    Without a backslash in ``data`` no string holds an escape, so each key present is spelled
    as ``"name"`` where it stands; when that spelling occurs once, its place is the key's.
    """
    found = [
        (key, quoted, value) for (key, quoted), value in zip(_EXTRA_NAMES, values, strict=True) if value is not None
    ]
    if len(found) == 1:
        return {found[0][0]: found[0][2]}
    if "\\" in data:
        return None
    placed = []
    for key, quoted, value in found:
        at = data.find(quoted)
        if at < 0 or data.find(quoted, at + 1) >= 0:
            return None
        placed.append((at, key, value))
    placed.sort()
    return {key: value for _, key, value in placed}


_NO_CHOICE: dict[str, Any] = {}  # (what _finish reads of a hot finish chunk's choice: no stop_reason)


def _key(value: Any) -> Any:
    """A value usable as a dict key (refs and indexes from the wire may be anything)."""
    return value if type(value) in (int, str) else None


def _str(value: Any) -> str | None:
    return value if type(value) is str else None


def _dict(value: Any) -> dict | None:
    return value if type(value) is dict else None


def _kind(value: Any) -> str:
    return value if value in ("text", "thinking", "tool_call", "native", "data") else "text"


def _has_content(delta: dict) -> bool:
    return bool(
        delta.get("content")
        or delta.get("tool_calls")
        or delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("refusal")
    )


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0
