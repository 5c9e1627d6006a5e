"""The hub: the one representation every dialect converts to and from.

Streams
-------
A hub stream is a list of events with this grammar (checked by :func:`validate`)::

    ResponseStart (BlockStart | Delta | BlockStop | Usage | Finish | Extension)* [Error] ResponseEnd

* Blocks are numbered by ``index``, unique within the stream.  Blocks may be
  open at the same time (parallel tool calls stream interleaved, ``n > 1``
  choices run side by side); every ``Delta``/``BlockStop`` names an open block.
* ``Delta.text`` grows the block: text, thinking text, tool-call argument JSON
  fragments, base64 fragments of inline data, or the raw JSON fragments of a
  native block.
* ``fidelity`` is opaque per-vendor state that must survive a round trip
  (thinking signatures, encrypted reasoning, Gemini thought signatures),
  keyed by dialect name: ``{"anthropic-messages": {"signature": "..."}}``.
  It may be set on ``BlockStart`` and/or ``BlockStop``; the block's fidelity
  is the merge of both.
* ``extensions`` carry vendor data the hub does not model, keyed by dialect
  name.  A target that can express it natively does; any other carries it in
  its extension field, so nothing is silently lost.
* ``Usage`` may come several times; each one holds the totals known so far
  and its non-``None`` fields replace earlier values (never add them up).
* ``Finish`` ends a choice's turn (at most once per choice).
* ``Error`` is followed only by ``ResponseEnd``.  A source stream that ends
  without its terminal event decodes to ``Error(type="incomplete_stream")``.

Requests
--------
:class:`Request` holds messages with typed parts, tools, tool choice,
generation parameters, metadata and namespaced extensions.  System prompts
are ``system`` messages at the start of ``messages`` whatever the dialect; a
system message later in the conversation stays where the client put it (each
target says it in place or merges it into its one system prompt, in order).
``Message.extensions`` and ``ToolResultPart.extensions`` keep how the source
dialect spelled a message, so an upstream of that dialect gets it back as it
came.  ``thinking`` is the one place reasoning controls map to (see
:func:`thinking_effort`); ``llmbridge.dialects.fields`` names what a target drops.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import msgspec

__all__ = [
    "ERROR_STATUS",
    "ERROR_TYPES",
    "FINISH_REASONS",
    "Assembler",
    "Block",
    "BlockKind",
    "BlockStart",
    "BlockStop",
    "Delta",
    "Error",
    "Event",
    "Extension",
    "FilePart",
    "Finish",
    "FinishReason",
    "ImagePart",
    "Message",
    "NativePart",
    "Part",
    "Request",
    "Response",
    "ResponseEnd",
    "ResponseStart",
    "Role",
    "TextPart",
    "ThinkingPart",
    "Tool",
    "ToolCallPart",
    "ToolChoice",
    "ToolResultPart",
    "Usage",
    "Violation",
    "EFFORTS",
    "EFFORT_BUDGET",
    "assemble",
    "effort_for",
    "effort_for_budget",
    "error_type_for_status",
    "event_from_json",
    "event_to_json",
    "merge_dicts",
    "merge_usage",
    "response_events",
    "thinking_budget",
    "thinking_effort",
    "validate",
]

# --------------------------------------------------------------------------- stream events

BlockKind = Literal["text", "thinking", "tool_call", "data", "native"]

FinishReason = Literal[
    "end_turn",  # natural end (OpenAI "stop", Gemini STOP)
    "max_tokens",  # length limit
    "tool_use",  # the turn ends to run tools
    "stop_sequence",  # a stop sequence matched
    "content_filter",  # output withheld by a filter (Gemini SAFETY, RECITATION ...)
    "refusal",  # the model refused
    "pause_turn",  # a long server-tool turn paused; send it back to continue
    "error",  # the turn failed
    "other",  # a reason with no hub word; the vendor's word is in Finish.raw
]
FINISH_REASONS: tuple[str, ...] = get_args(FinishReason)

ERROR_TYPES = (
    "invalid_request",  # 400
    "authentication",  # 401
    "permission",  # 403
    "not_found",  # 404
    "request_too_large",  # 413
    "unsupported_media_type",  # 415
    "rate_limit",  # 429
    "api_error",  # 500 and anything unclassified
    "overloaded",  # 503 / 529
    "timeout",  # 504, upstream stall
    "incomplete_stream",  # the source ended without its terminal event
    "protocol_error",  # the source sent bytes that break its dialect
)


class ResponseStart(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    created: int | None = None  # Unix seconds
    request_id: str | None = None
    extensions: dict[str, Any] | None = None


class BlockStart(msgspec.Struct):
    index: int
    kind: BlockKind
    id: str | None = None  # tool call id, or the vendor's item id
    name: str | None = None  # tool name
    choice: int = 0
    mime_type: str | None = None  # for "data" blocks
    fidelity: dict[str, Any] | None = None
    extensions: dict[str, Any] | None = None


class Delta(msgspec.Struct):
    index: int
    text: str


class BlockStop(msgspec.Struct):
    index: int
    fidelity: dict[str, Any] | None = None
    extensions: dict[str, Any] | None = None


class Usage(msgspec.Struct):
    input_tokens: int | None = None  # all prompt tokens, cached ones included
    output_tokens: int | None = None  # all generated tokens, reasoning included
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_tokens: int | None = None
    extensions: dict[str, Any] | None = None


class Finish(msgspec.Struct):
    reason: FinishReason
    choice: int = 0
    raw: str | None = None  # the vendor's own word, e.g. "SAFETY", "refusal"
    stop_sequence: str | None = None


class Extension(msgspec.Struct):
    """Vendor data the hub does not model; ``index`` attaches it to a block (citations, logprobs)."""

    namespace: str  # a dialect name
    data: Any
    index: int | None = None


class Error(msgspec.Struct):
    message: str
    type: str = "api_error"  # one of ERROR_TYPES
    code: str | None = None
    status: int | None = None  # HTTP status where one applies
    body: Any = None  # the vendor's error object, for a same-dialect target


class ResponseEnd(msgspec.Struct):
    request_id: str | None = None


Event = ResponseStart | BlockStart | Delta | BlockStop | Usage | Finish | Extension | Error | ResponseEnd

ERROR_STATUS = {
    "invalid_request": 400,
    "authentication": 401,
    "permission": 403,
    "not_found": 404,
    "request_too_large": 413,
    "unsupported_media_type": 415,
    "rate_limit": 429,
    "api_error": 500,
    "overloaded": 503,
    "timeout": 504,
    "incomplete_stream": 502,
    "protocol_error": 502,
}


_TYPE_BY_STATUS = {
    400: "invalid_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    408: "timeout",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limit",
    500: "api_error",
    502: "api_error",
    503: "overloaded",
    504: "timeout",
    529: "overloaded",
}


def error_type_for_status(status: int) -> str:
    """The hub error type for an HTTP status."""
    known = _TYPE_BY_STATUS.get(status)
    if known is not None:
        return known
    return "invalid_request" if 400 <= status < 500 else "api_error"


def merge_usage(into: Usage | None, new: Usage) -> Usage:
    """Later non-None fields replace earlier ones."""
    if into is None:
        return msgspec.structs.replace(new)
    changes = {f: v for f in new.__struct_fields__ if (v := getattr(new, f)) is not None}
    if "extensions" in changes and into.extensions:
        changes["extensions"] = {**into.extensions, **changes["extensions"]}
    return msgspec.structs.replace(into, **changes)


def merge_dicts(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Merge namespaced dicts one level deep (fidelity, extensions)."""
    if not a:
        return dict(b) if b else None
    if not b:
        return dict(a)
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- hub events as JSON
#
# Codecs whose wire cannot say an event carry it as JSON under their extension key; this is
# the one spelling of that JSON (the class name under a tag key, then the fields).

EVENT_TYPES: dict[str, type[Event]] = {t.__name__: t for t in get_args(Event)}


def event_to_json(event: Event, *, tag: str = "event", keep_none: bool = False) -> dict[str, Any]:
    """``event`` as a JSON-ready dict: its fields, then its class name under ``tag``.

    ``keep_none=False`` leaves out fields that are ``None`` (the smaller carried form); a
    codec whose wire already carries the long form keeps them, so its bytes stay the same.
    The dict is shallow (nested values are the event's own, not copies: encode it, do not
    mutate them); a deep ``to_builtins`` copy cost twice as much on annotated streams.
    """
    fields: dict[str, Any] = msgspec.structs.asdict(event)
    out = fields if keep_none else {k: v for k, v in fields.items() if v is not None}
    out[tag] = type(event).__name__
    return out


def event_from_json(data: object, *, tag: str = "event", kinds: Collection[type[Event]] | None = None) -> Event | None:
    """The hub event an :func:`event_to_json` dict holds, or ``None`` when it holds none.

    Never raises: ``data`` comes off a wire, so anything that is not a dict, names no event
    type (or one outside ``kinds``, when given), or has fields of the wrong types gives ``None``.
    """
    if type(data) is not dict:
        return None
    kind = EVENT_TYPES.get(data.get(tag))  # type: ignore[arg-type]  # any key: .get of a str-keyed dict
    if kind is None or (kinds is not None and kind not in kinds):
        return None
    try:
        return msgspec.convert({k: v for k, v in data.items() if k != tag}, kind)
    except (msgspec.ValidationError, TypeError):
        return None


# --------------------------------------------------------------------------- assembled response


@dataclass
class Block:
    index: int
    kind: BlockKind
    id: str | None = None
    name: str | None = None
    choice: int = 0
    mime_type: str | None = None
    text: str = ""
    fidelity: dict[str, Any] | None = None
    extensions: dict[str, Any] | None = None
    annotations: list[Extension] = field(default_factory=list)  # block-level Extension events
    closed: bool = False


@dataclass
class Response:
    """A whole response: what a non-streaming call returns, or a stream folded up."""

    id: str | None = None
    model: str | None = None
    created: int | None = None
    request_id: str | None = None
    blocks: list[Block] = field(default_factory=list)
    usage: Usage | None = None
    finishes: dict[int, Finish] = field(default_factory=dict)  # by choice
    error: Error | None = None
    extensions: dict[str, Any] | None = None  # from ResponseStart
    annotations: list[Extension] = field(default_factory=list)  # stream-level Extension events
    complete: bool = False  # ResponseEnd seen without an Error

    @property
    def finish(self) -> Finish | None:
        return self.finishes.get(0)

    def choice_blocks(self, choice: int = 0) -> list[Block]:
        return [b for b in self.blocks if b.choice == choice]


class Assembler:
    """Folds hub events into a :class:`Response`."""

    def __init__(self) -> None:
        self.response = Response()
        self._open: dict[int, Block] = {}

    def feed(self, event: Event) -> None:
        r = self.response
        if type(event) is Delta:
            block = self._open.get(event.index)
            if block is not None:
                block.text += event.text
        elif type(event) is BlockStart:
            block = Block(
                event.index,
                event.kind,
                event.id,
                event.name,
                event.choice,
                event.mime_type,
                fidelity=dict(event.fidelity) if event.fidelity else None,
                extensions=dict(event.extensions) if event.extensions else None,
            )
            r.blocks.append(block)
            self._open[event.index] = block
        elif type(event) is BlockStop:
            block = self._open.pop(event.index, None)
            if block is not None:
                block.closed = True
                block.fidelity = merge_dicts(block.fidelity, event.fidelity)
                block.extensions = merge_dicts(block.extensions, event.extensions)
        elif type(event) is Usage:
            r.usage = merge_usage(r.usage, event)
        elif type(event) is Finish:
            r.finishes[event.choice] = event
        elif type(event) is Extension:
            target = self._open.get(event.index) if event.index is not None else None
            if target is None and event.index is not None:
                target = next((b for b in r.blocks if b.index == event.index), None)
            (target.annotations if target is not None else r.annotations).append(event)
        elif type(event) is ResponseStart:
            r.id, r.model, r.created, r.request_id = event.id, event.model, event.created, event.request_id
            r.extensions = event.extensions
        elif type(event) is Error:
            r.error = event
        elif type(event) is ResponseEnd:
            r.complete = r.error is None
            if event.request_id:
                r.request_id = event.request_id

    def feed_all(self, events: list[Event]) -> Response:
        for event in events:
            self.feed(event)
        return self.response


def assemble(events: list[Event]) -> Response:
    return Assembler().feed_all(events)


def response_events(response: Response) -> list[Event]:
    """A whole response as a hub stream (to stream a non-streamed answer)."""
    events: list[Event] = [
        ResponseStart(response.id, response.model, response.created, response.request_id, response.extensions)
    ]
    for b in response.blocks:
        events.append(BlockStart(b.index, b.kind, b.id, b.name, b.choice, b.mime_type, None, b.extensions))
        if b.text:
            events.append(Delta(b.index, b.text))
        events.extend(b.annotations)
        events.append(BlockStop(b.index, b.fidelity))
    events.extend(response.annotations)
    if response.usage is not None:
        events.append(response.usage)
    events.extend(response.finishes.values())
    if response.error is not None:
        events.append(response.error)
    events.append(ResponseEnd(response.request_id))
    return events


# --------------------------------------------------------------------------- validation


class Violation(msgspec.Struct):
    """A broken rule: ``event`` is the 0-based number of the offending event (-1: end of stream)."""

    event: int
    rule: str
    message: str

    def __str__(self) -> str:
        where = "end of stream" if self.event < 0 else f"event {self.event}"
        return f"{where}: {self.rule}: {self.message}"


def validate(events: list[Event]) -> list[Violation]:
    """Check a hub stream against the grammar in this module's docstring.

    Returns the broken rules in stream order (empty for a valid stream); never raises.
    """
    out: list[Violation] = []
    open_blocks: set[int] = set()
    seen_blocks: set[int] = set()
    finished: set[int] = set()
    started = ended = errored = False
    for n, e in enumerate(events):
        name = type(e).__name__
        if ended:
            out.append(Violation(n, "after-end", f"{name} after ResponseEnd"))
            continue
        if isinstance(e, ResponseStart):
            if started:
                out.append(Violation(n, "start-once", "second ResponseStart"))
            started = True
            continue
        if not started:
            out.append(Violation(n, "start-first", f"{name} before ResponseStart"))
            started = True
        if errored and not isinstance(e, ResponseEnd):
            out.append(Violation(n, "error-last", f"{name} after Error"))
        if isinstance(e, BlockStart):
            if e.index in seen_blocks:
                out.append(Violation(n, "block-unique", f"block {e.index} started twice"))
            seen_blocks.add(e.index)
            open_blocks.add(e.index)
        elif isinstance(e, (Delta, BlockStop)):
            if e.index not in open_blocks:
                out.append(Violation(n, "block-open", f"{name} for block {e.index}, which is not open"))
            elif isinstance(e, BlockStop):
                open_blocks.discard(e.index)
        elif isinstance(e, Finish):
            if e.choice in finished:
                out.append(Violation(n, "finish-once", f"second Finish for choice {e.choice}"))
            finished.add(e.choice)
        elif isinstance(e, Error):
            errored = True
        elif isinstance(e, ResponseEnd):
            ended = True
            if open_blocks and not errored:
                out.append(Violation(n, "blocks-closed", f"blocks {sorted(open_blocks)} still open at ResponseEnd"))
    if not ended:
        out.append(Violation(-1, "end-last", "no ResponseEnd"))
    return out


# --------------------------------------------------------------------------- requests


@dataclass
class TextPart:
    text: str
    extensions: dict[str, Any] | None = None  # e.g. cache_control, citations


@dataclass
class ImagePart:
    media_type: str | None = None
    data: str | None = None  # base64
    url: str | None = None
    detail: str | None = None
    extensions: dict[str, Any] | None = None


@dataclass
class FilePart:
    """Audio, PDF and any other file input."""

    media_type: str | None = None
    data: str | None = None  # base64
    url: str | None = None
    name: str | None = None
    extensions: dict[str, Any] | None = None


@dataclass
class ThinkingPart:
    text: str = ""
    fidelity: dict[str, Any] | None = None  # signatures, encrypted or redacted reasoning


@dataclass
class ToolCallPart:
    id: str
    name: str
    arguments: str = "{}"  # JSON text of an object
    fidelity: dict[str, Any] | None = None


@dataclass
class ToolResultPart:
    tool_call_id: str
    content: list[Part] = field(default_factory=list)  # text and image parts
    is_error: bool = False
    name: str | None = None  # the tool's name (Gemini needs it)
    extensions: dict[str, Any] | None = None  # e.g. cache_control on an Anthropic tool_result


@dataclass
class NativePart:
    """A vendor block the hub does not model (server tool use and results), replayed as is."""

    namespace: str
    data: Any


Part = TextPart | ImagePart | FilePart | ThinkingPart | ToolCallPart | ToolResultPart | NativePart

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class Message:
    role: str  # Role
    parts: list[Part] = field(default_factory=list)
    name: str | None = None
    # How the source dialect spelled the message, for a same-dialect target (string or block
    # content, a system message inside the conversation), keyed by dialect name.
    extensions: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


@dataclass
class Tool:
    name: str
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None
    extensions: dict[str, Any] | None = None


@dataclass
class ToolChoice:
    mode: str = "auto"  # "auto" | "none" | "required" | "tool"
    name: str | None = None  # with mode "tool"


@dataclass
class Request:
    model: str | None = None
    messages: list[Message] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    n: int | None = None
    parallel_tool_calls: bool | None = None
    # {"type": "json_schema", "schema": {...}, "name": str, "strict": bool} or {"type": "json_object"}
    response_format: dict[str, Any] | None = None
    # {"type": "enabled"|"disabled"|"adaptive", "budget_tokens": int, "effort": one of EFFORTS}:
    # the one place every dialect's reasoning control maps to (see thinking_effort/thinking_budget)
    thinking: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # request_id, user_id ... never sent to the model
    extensions: dict[str, Any] = field(default_factory=dict)  # "vendor:name" -> value
    # "auto" | "default" | "flex" | "priority" | "scale" (OpenAI's words; Anthropic's
    # "standard_only" is "default"); each codec says it in its own words or not at all
    service_tier: str | None = None

    @property
    def system(self) -> str:
        return "\n\n".join(m.text for m in self.messages if m.role == "system")


# --------------------------------------------------------------------------- reasoning effort
#
# The one table between the vendors' reasoning controls (docs/dialects/README.md, "Reasoning"):
# Anthropic thinking.budget_tokens / output_config.effort / thinking.type adaptive, Chat
# reasoning_effort, Responses reasoning.effort, Gemini thinkingConfig (thinkingBudget,
# thinkingLevel). The hub keeps what the client said (an effort word, a budget, or both);
# a codec asks these functions for the word or the budget its vendor takes.

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")  # in rising order
# The token budget an effort word stands for, where a vendor takes only a budget.
EFFORT_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32000, "max": 32000}
# The words each vendor takes: a word outside them becomes the nearest one it has.
_VENDOR_EFFORTS = {
    "openai": ("none", "minimal", "low", "medium", "high", "xhigh"),  # reasoning_effort, reasoning.effort
    "anthropic": ("low", "medium", "high", "xhigh", "max"),  # output_config.effort
    "gemini": ("minimal", "low", "medium", "high"),  # thinkingConfig.thinkingLevel (lower case here)
}


def effort_for_budget(budget: int) -> str:
    """The effort word for a thinking token budget: low up to 2,048 tokens, medium up to
    8,192, high above (the words every OpenAI reasoning model takes)."""
    if budget <= EFFORT_BUDGET["low"]:
        return "low"
    return "medium" if budget <= EFFORT_BUDGET["medium"] else "high"


def thinking_effort(thinking: dict[str, Any] | None) -> str | None:
    """The effort word a hub ``thinking`` dict says: ``"none"`` when disabled, its ``effort``,
    else the word for its ``budget_tokens`` (:func:`effort_for_budget`); ``None`` when it says
    none (no thinking dict, or adaptive thinking without an effort: the model decides)."""
    if not thinking:
        return None
    if thinking.get("type") == "disabled":
        return "none"
    effort = thinking.get("effort")
    if type(effort) is str and effort:
        return effort
    budget = thinking.get("budget_tokens")
    if type(budget) is int and budget > 0:
        return effort_for_budget(budget)
    return None


def thinking_budget(thinking: dict[str, Any] | None) -> int | None:
    """The token budget a hub ``thinking`` dict says: its ``budget_tokens``, else the budget
    for its effort (:data:`EFFORT_BUDGET`), ``0`` when disabled, ``None`` when it says none."""
    if not thinking:
        return None
    if thinking.get("type") == "disabled":
        return 0
    budget = thinking.get("budget_tokens")
    if type(budget) is int and budget > 0:
        return budget
    effort = thinking.get("effort")
    if effort == "none":
        return 0
    return EFFORT_BUDGET.get(effort) if type(effort) is str else None


def effort_for(vendor: str, effort: str | None) -> str | None:
    """``effort`` in ``vendor``'s words (``"openai"``, ``"anthropic"``, ``"gemini"``): the word
    itself when the vendor has it, else the nearest it has (``max`` is OpenAI's ``xhigh``,
    ``minimal`` is Anthropic's ``low``); an unknown word passes as is, ``None`` stays ``None``."""
    if effort is None or effort not in EFFORTS:
        return effort
    words = _VENDOR_EFFORTS[vendor]
    if effort in words:
        return effort
    rank = EFFORTS.index(effort)
    return min(words, key=lambda w: (abs(EFFORTS.index(w) - rank), -EFFORTS.index(w)))
