"""The WebSocket binding of LLM-Stream (docs/llm-stream-bindings.md §3), sans-I/O.

:class:`ServerSession` is one connection as the server sees it: client messages in, actions
out (start a turn, cancel it, close with a code).  The shell (``llmbridge.gateway._websocket``)
moves messages and runs turns; nothing here touches a socket or a clock.
:class:`MessageStreamDecoder` is the receiving side: one event envelope per text message,
checked by the same grammar as the SSE binding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from .. import hub, sse
from ..dialects import llm_stream
from ..dialects.base import json_decode, json_encode

__all__ = [
    "CLOSE_BUSY",
    "CLOSE_INTERNAL",
    "CLOSE_NORMAL",
    "CLOSE_SLOW_CLIENT",
    "CLOSE_TOO_BIG",
    "CLOSE_UNAUTHORIZED",
    "CLOSE_UNSUPPORTED_DATA",
    "SUBPROTOCOL",
    "CancelTurn",
    "Close",
    "MessageStreamDecoder",
    "ServerSession",
    "StartTurn",
    "TurnError",
    "cancel_message",
    "turn_end",
]

SUBPROTOCOL = "llm-stream.v1"

# §3.6 close codes.  RFC 6455 §7.4.1 codes where one fits; 4xxx (private use) for the rest,
# mirroring the HTTP status a client of the HTTP bindings would get.
CLOSE_NORMAL = 1000  # either side is done
CLOSE_UNSUPPORTED_DATA = 1003  # a binary message: this binding is text only
CLOSE_BUSY = 1008  # policy: a second request while a turn is streaming
CLOSE_TOO_BIG = 1009  # a client message over the server's cap
CLOSE_INTERNAL = 1011  # a server bug
CLOSE_UNAUTHORIZED = 4401  # no or wrong API key
CLOSE_SLOW_CLIENT = 4408  # the client did not read: a send stayed blocked past the server's limit


@dataclass(frozen=True, slots=True)
class StartTurn:
    """Run this request envelope (a JSON object, §4.2 of the draft) as a new turn."""

    request: dict


@dataclass(frozen=True, slots=True)
class CancelTurn:
    """Stop the turn in progress; end it with ``error`` (``cancelled``) and ``stream.end``."""


@dataclass(frozen=True, slots=True)
class TurnError:
    """Answer the message with a turn that failed before it started (the HTTP 4xx of this binding)."""

    error: hub.Error


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection with this code and reason (the reason is at most 123 bytes, RFC 6455)."""

    code: int
    reason: str


Action = StartTurn | CancelTurn | TurnError | Close


class ServerSession:
    """One WebSocket connection, server side.

    State: ``idle`` (waiting for a request), ``streaming`` (a turn is running), ``closed``.
    Feed it every client message (:meth:`receive_text`, :meth:`receive_bytes`) and tell it
    when the turn it started is over (:meth:`turn_over`); it returns what to do.
    """

    def __init__(self, max_message: int) -> None:
        self.max_message = max_message
        self.state = "idle"
        self.turns = 0

    def receive_text(self, text: str) -> list[Action]:
        """A text message.  Returns the actions: at most one of the four kinds."""
        if self.state == "closed":
            return []
        if len(text) > self.max_message or len(text.encode()) > self.max_message:
            return [self._close(CLOSE_TOO_BIG, f"message over {self.max_message} bytes")]
        try:
            obj = json_decode(text)
        except msgspec.DecodeError as exc:
            return self._not_a_request(f"message is not valid JSON: {exc}")
        if type(obj) is not dict:
            return self._not_a_request("message must be a JSON object")
        kind = obj.get("type")
        if type(kind) is str:  # a control message (request envelopes have no "type")
            if kind == "cancel":
                return [CancelTurn()] if self.state == "streaming" else []
            return []  # unknown control messages are ignored (§3.4)
        if self.state == "streaming":
            return [self._close(CLOSE_BUSY, "a request arrived while a turn was streaming")]
        self.state = "streaming"
        self.turns += 1
        return [StartTurn(obj)]

    def receive_bytes(self, data: bytes) -> list[Action]:
        """A binary message: this binding carries text only (§3.2)."""
        if self.state == "closed":
            return []
        return [self._close(CLOSE_UNSUPPORTED_DATA, "binary messages are not accepted; send JSON as text")]

    def turn_over(self) -> None:
        """The turn's ``stream.end`` went out."""
        if self.state == "streaming":
            self.state = "idle"

    def _not_a_request(self, message: str) -> list[Action]:
        if self.state == "streaming":
            return [self._close(CLOSE_BUSY, "a message that is neither cancel nor a request, mid-turn")]
        return [TurnError(hub.Error(message, "invalid_request", status=400))]

    def _close(self, code: int, reason: str) -> Close:
        self.state = "closed"
        return Close(code, reason[:120])


def cancel_message() -> str:
    """The client's cancel message."""
    return '{"type":"cancel"}'


def turn_end(error: hub.Error, seq: int, started: bool, request_id: str | None = None) -> list[str]:
    """The messages that end a turn with ``error``: ``stream.start`` first when none went out
    yet (every turn is a whole stream), then ``error`` and ``stream.end``."""
    out = []
    rid = {"request_id": request_id} if request_id else {}
    if not started:
        out.append(json_encode({"v": llm_stream.VERSION, "seq": seq, "type": "stream.start", **rid}).decode())
        seq += 1
    fields: dict[str, Any] = {"type": error.type, "message": error.message}
    if error.code:
        fields["code"] = error.code
    err: dict[str, Any] = {"v": llm_stream.VERSION, "seq": seq, "type": "error", "error": fields}
    if error.status:
        err["llmbridge:status"] = error.status
    out.append(json_encode(err).decode())
    out.append(json_encode({"v": llm_stream.VERSION, "seq": seq + 1, "type": "stream.end", **rid}).decode())
    return out


class MessageStreamDecoder(llm_stream.StreamDecoder):
    """One LLM-Stream turn received as messages (one envelope each) to hub events.

    :meth:`feed_message` takes a text message; :meth:`close` ends the input (a turn without
    ``stream.end`` is truncated: ``incomplete_stream``).  Every check of the SSE decoder
    applies; the event name is the JSON ``type`` (there is no separate name to disagree).
    ``wire_ended`` (the SSE decoder's) says the turn is over.
    """

    def feed_message(self, text: str) -> list[hub.Event]:
        name = "message"
        try:
            obj = json_decode(text)
            if type(obj) is dict and type(obj.get("type")) is str:
                name = obj["type"]
        except msgspec.DecodeError:
            pass  # the grammar check reports it
        self._dispatch(sse.Event(name, text))
        out, self._out = self._out, []
        return out
