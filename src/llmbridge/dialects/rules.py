"""The named rules a stream decoder (or :func:`llmbridge.hub.validate`) reports as broken.

Every :class:`llmbridge.hub.Violation` names one of these in ``rule``; :data:`RULES` says in
one line what each means, and ``llmbridge validate`` prints that line under the violations.
One break has one name in every dialect: a data payload that parses as JSON but is not an
object is :data:`JSON_OBJECT` whether the wire calls its unit a chunk, an event or a frame.
``tests/test_dialect_contract.py`` fails when a decoder reports a rule missing from here.

The names shared by several dialects are constants; the dialect-specific ones are only in
:data:`RULES` (their wire's own vocabulary: ``item-twice`` for Responses output items ...).
"""

from __future__ import annotations

__all__ = [
    "AFTER_TERMINAL",
    "BLOCK_OPEN",
    "BLOCK_UNIQUE",
    "FINISH_ONCE",
    "JSON",
    "JSON_OBJECT",
    "MISSING_FIELD",
    "RULES",
    "START_FIRST",
    "START_ONCE",
    "TRUNCATED",
    "UNKNOWN_EVENT",
    "meaning",
]

# -- shared by several dialects
JSON = "json"
JSON_OBJECT = "json-object"
TRUNCATED = "truncated"
AFTER_TERMINAL = "after-terminal"
START_FIRST = "start-first"
START_ONCE = "start-once"
BLOCK_OPEN = "block-open"
BLOCK_UNIQUE = "block-unique"
FINISH_ONCE = "finish-once"
MISSING_FIELD = "missing-field"
UNKNOWN_EVENT = "unknown-event"

RULES: dict[str, str] = {
    # shared
    JSON: "an event's data is not valid JSON",
    JSON_OBJECT: "an event's data is JSON but not an object (a chunk, event or frame must be one)",
    TRUNCATED: "the input ended before the wire's terminal event",
    AFTER_TERMINAL: "an event came after the wire's terminal event (it is ignored)",
    START_FIRST: "an event came before the wire's opening event",
    START_ONCE: "a second opening event (it is ignored)",
    BLOCK_OPEN: "an event names a block that is not open, or a block was still open at the end",
    BLOCK_UNIQUE: "a block was started again while, or after, it was open",
    FINISH_ONCE: "a second finish for the same choice (the first one stands)",
    MISSING_FIELD: "a required field is missing or has the wrong type",
    UNKNOWN_EVENT: "an event type the dialect does not define (it is ignored)",
    # llm-stream's binary binding (docs/llm-stream-bindings.md)
    "frame": "a binary frame is malformed: unknown must-understand type byte, length past the data or the cap",
    # the hub grammar (hub.validate; a decoder bug rather than bad input)
    "after-end": "an event after ResponseEnd (llm-stream: after stream.end)",
    "error-last": "an event other than the end after the error event",
    "blocks-closed": "blocks still open at ResponseEnd",
    "end-last": "the hub stream has no ResponseEnd",
    # llm-stream
    "end-missing": "llm-stream: the input ended before stream.end",
    "envelope": "llm-stream: 'type', 'v' or 'seq' missing, of the wrong type, or an unsupported version",
    "seq": "llm-stream: seq skipped (events lost), repeated or out of order",
    "seq-exhausted": "llm-stream: seq reached 2^53 and the stream is terminated",
    "event-name": "llm-stream: the SSE event name differs from the JSON type",
    "field": "llm-stream: a field of the event is missing or has the wrong type",
    "block": "llm-stream: a block index reused or used after its content.stop",
    "stop-reason": "llm-stream: a second stop_reason for a choice (the first one stands)",
    "request-id": "llm-stream: stream.end's request_id differs from stream.start's",
    # openai-chat
    "choices": "openai-chat: choices is not a list",
    "choice-object": "openai-chat: a choice is not an object",
    "content": "openai-chat: delta.content is neither a string nor a list",
    "reasoning": "openai-chat: reasoning_details is not a list",
    "tool_calls": "openai-chat: tool_calls is not a list of objects",
    "usage": "openai-chat: usage is not an object",
    "after-finish": "content for a choice (candidate) after its finish reason",
    # openai-responses
    "missing-type": "openai-responses: an event without a string 'type'",
    "sequence": "openai-responses: sequence_number not increasing",
    "done-early": "openai-responses: [DONE] before the terminal event",
    "item-twice": "openai-responses: an output_index added twice",
    "item-unknown": "openai-responses: an event for an output item that was not added",
    "item-closed": "openai-responses: an event for an output item already done",
    "items-open": "openai-responses: the terminal event came with output items still open",
    "part-twice": "openai-responses: a content part added twice",
    "part-closed": "openai-responses: an event for a content part already done",
    "llmbridge": "a carried llmbridge extension entry that does not read back (it is ignored)",
    # anthropic-messages
    "block-unclosed": "anthropic-messages: a content block not stopped before message_delta",
    # gemini
    "candidates-list": "gemini: candidates is not a list",
    "candidate-object": "gemini: a candidate is not an object",
    "parts-list": "gemini: content.parts is not a list",
    "part-object": "gemini: a part is not an object",
    "text-string": "gemini: part.text is not a string",
    "function-call": "gemini: functionCall is not an object",
    "function-call-name": "gemini: a functionCall without a name",
    "partial-arg": "gemini: a partialArgs entry that cannot be used",
    "partial-args-orphan": "gemini: partialArgs without a functionCall that started",
    "call-unterminated": "gemini: a streamed functionCall was not terminated",
    "chunk-shape": "gemini: a chunk whose shape cannot be read",
    "array-unclosed": "gemini (JSON array stream): the array was not closed",
    "array-garbage": "gemini (JSON array stream): bytes outside the array's elements",
    # mmsp
    "unievent": "mmsp: an event that is not a valid UniEvent",
    "one-item": "mmsp: a delta event without exactly one content item",
    "item-type": "mmsp: a content item type not allowed where it is",
    "interleave": "mmsp: an item inside another kind's open group",
    "group": "mmsp: a .done item without its .delta fragments",
    "group-open": "mmsp: the stop event while a group is open",
    "done-content": "mmsp: a .done item differs from its fragments",
    "fidelity": "mmsp: a .done item's fidelity differs from its fragments'",
    "tool-call-name": "mmsp: the first tool_call.delta has no name",
    "stop-missing": "mmsp: [DONE] before the stop event",
    "stop-last": "mmsp: an event after the stop event",
    "stop-items": "mmsp: the stop event carries content items",
    "stop-usage": "mmsp: the stop event has no usage_metadata",
    "stop-finish": "mmsp: a finish_reason outside stop, length, tool_call and unknown",
    "error": "mmsp: malformed llmbridge state on an error event",
    "response": "mmsp: a whole (non-streamed) message that cannot be read",
    # bedrock-converse (AWS event-stream frames)
    "prelude-crc": "bedrock-converse: a frame's prelude CRC32 does not match",
    "message-crc": "bedrock-converse: a frame's message CRC32 does not match",
    "frame-length": "bedrock-converse: a frame's lengths are impossible",
    "headers": "bedrock-converse: a frame's headers cannot be read",
    "truncated-frame": "bedrock-converse: the input ends inside a frame",
}


def meaning(rule: str) -> str:
    """The one-line meaning of ``rule``; ``""`` for a name that is not in :data:`RULES`."""
    return RULES.get(rule, "")
