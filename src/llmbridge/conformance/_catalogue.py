"""The checks of the conformance suite: what each one tests, where the draft says so, how strongly.

Sections (§) are those of the LLM-Stream draft (the LLM-Stream draft); ``B§`` sections are those of
docs/llm-stream-bindings.md.  ``MUST`` checks fail the run; ``SHOULD`` checks are reported.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHECKS", "Check"]


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    section: str
    level: str  # "MUST" or "SHOULD"
    title: str


_ALL = [
    # -- negotiation and the request (§4, §7, §9)
    Check("request.media-type", "§4.1", "MUST", "a POST with Content-Type application/llm-request+json is answered"),
    Check("request.version-param", "§9.1", "MUST", "the optional media type parameter version=1.0 is accepted"),
    Check("request.unknown-fields", "§1.4", "MUST", "unknown request fields are ignored"),
    Check("request.unknown-parameters", "§4.5", "MUST", "unknown generation parameters are ignored"),
    Check("request.unknown-extensions", "§4.7", "MUST", "unknown extension namespaces are ignored"),
    Check("negotiation.415", "§7.2", "SHOULD", "an unsupported request media type gets 415"),
    Check(
        "negotiation.profile", "§7.3", "SHOULD", 'Accept: text/event-stream; profile="llm-stream-1.0" gets the stream'
    ),
    Check("negotiation.406", "B§2.1", "SHOULD", "an Accept header that admits no answer format gets 406"),
    Check(
        "errors.bad-request",
        "B§1.3",
        "SHOULD",
        "a malformed request gets a 4xx with a JSON error body, before any stream",
    ),
    Check("errors.unknown-model", "B§1.3", "SHOULD", "an unknown model gets a 4xx with a JSON error body"),
    Check("errors.large-request", "B§1.3", "MUST", "a large request is streamed or refused with a 4xx, never a 5xx"),
    # -- the stream (§4.9, §5)
    Check("stream.content-type", "§4.9", "MUST", "the stream's Content-Type is text/event-stream"),
    Check("stream.utf8", "§5.1", "MUST", "the body is UTF-8"),
    Check("stream.sse-lines", "§5.1", "MUST", "every line is an SSE field or comment (keep-alives are comments)"),
    Check("stream.one-json-object", "§5.1", "MUST", "each event's data is exactly one complete JSON object"),
    Check("envelope.fields", "§5.2", "MUST", 'every event carries v ("1.x"), seq (integer) and type (string)'),
    Check("envelope.event-name", "§5.2", "MUST", "the SSE event name equals the envelope's type"),
    Check("seq.order", "§5.2", "MUST", "seq starts at 0 and grows by exactly 1 (no gap, no repeat)"),
    Check("seq.safe", "§8.4", "SHOULD", "seq stays below 2^53"),
    Check("lifecycle.start-first", "§5.4", "MUST", "exactly one stream.start, first, with seq 0"),
    Check("lifecycle.one-end", "§5.4", "MUST", "exactly one stream.end, the last event"),
    Check("lifecycle.content-stop", "§5.4", "MUST", "every content block is terminated by content.stop"),
    Check("lifecycle.stop-reason", "§5.5", "SHOULD", "the last content.stop of a turn carries a stop_reason"),
    Check("delta.shape", "§5.3", "MUST", "content.delta has an integer index and a delta object"),
    Check("usage.shape", "§5.3", "MUST", "usage carries non-negative integer input_tokens and output_tokens"),
    Check("usage.present", "§5.4", "SHOULD", "the stream reports usage"),
    Check("error.shape", "§5.4", "MUST", "an error event has an error object with string type and message"),
    Check("error.last", "§5.4", "MUST", "nothing but stream.end follows an error event"),
    Check("request-id.echo", "§4.6", "SHOULD", "metadata.request_id is echoed in stream.start and stream.end"),
    Check("content.multibyte", "§5.1", "MUST", "multibyte (non-ASCII) content is accepted and streamed"),
    Check("tool.shape", "§4.8", "MUST", "tool.call has string id and name and arguments holding a JSON object"),
    Check("tool.stop-reason", "§4.8", "SHOULD", "a tool.call turn ends with content.stop stop_reason tool_use"),
    Check("tool.declared", "§8.2", "SHOULD", "tool.call names a tool declared in the request"),
    Check(
        "cancel.server-survives",
        "§5.4",
        "SHOULD",
        "after a client closes mid-stream the server serves the next request",
    ),
    # -- binary binding (docs/llm-stream-bindings.md §2)
    Check("binary.content-type", "B§2.1", "MUST", "Accept application/llm-stream+binary gets that Content-Type"),
    Check("binary.framing", "B§2.3", "MUST", "the body is whole frames: known type bytes, lengths within the data"),
    Check("binary.type-byte", "B§2.2", "MUST", "each frame's type byte matches its envelope's type"),
    Check("binary.stream", "B§2.3", "MUST", "the frames carry a conforming event stream (all §5 checks)"),
    # -- WebSocket binding (docs/llm-stream-bindings.md §3)
    Check("ws.subprotocol", "B§3.1", "SHOULD", "the server selects the llm-stream.v1 subprotocol when offered"),
    Check("ws.stream", "B§3.3", "MUST", "one event per text message; a turn is a conforming event stream"),
    Check("ws.turns", "B§3.3", "MUST", "several turns on one connection, each from seq 0"),
    Check("ws.cancel", "B§3.4", "MUST", "a cancel message ends the turn with error then stream.end"),
    Check("ws.bad-request", "B§3.5", "MUST", "a malformed request is answered by a failed turn, the connection kept"),
    Check("ws.binary-message", "B§3.2", "MUST", "a binary client message closes the connection with 1003"),
]

CHECKS: dict[str, Check] = {c.id: c for c in _ALL}
