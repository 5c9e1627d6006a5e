"""The exception hierarchy shared by the codecs, the gateway and the client."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfirmationRequired",
    "ConversationBusyError",
    "IncompleteStreamError",
    "LLMBridgeError",
    "ProtocolError",
    "RequestError",
    "ToolCallArgumentParseError",
    "ToolLoopError",
    "ToolNotDeclaredError",
    "TransportError",
    "UpstreamError",
]


class LLMBridgeError(Exception):
    """Base of every error this package raises on purpose."""


class RequestError(LLMBridgeError):
    """A request body that does not fit its dialect. ``field`` names where (``messages[2].content``)."""

    def __init__(self, message: str, field: str | None = None, status: int = 400, type: str = "invalid_request"):
        self.field = field
        self.status = status
        self.type = type
        super().__init__(f"{field}: {message}" if field else message)


class ProtocolError(LLMBridgeError):
    """Bytes that break a dialect's stream grammar. ``event`` is the 0-based event number."""

    def __init__(self, message: str, event: int | None = None, rule: str | None = None, partial: Any = None):
        self.event = event
        self.rule = rule
        self.partial = partial  # the client's assembled message so far, when raised mid-stream
        where = f"event {event}: " if event is not None else ""
        super().__init__(f"{where}{rule + ': ' if rule else ''}{message}")


class IncompleteStreamError(LLMBridgeError):
    """The stream ended before its terminal event. ``partial`` holds what arrived."""

    def __init__(self, message: str = "stream ended before its terminal event", partial: Any = None):
        self.partial = partial
        super().__init__(message)


class UpstreamError(LLMBridgeError):
    """An error reported by the other side: HTTP status and the dialect's error body."""

    def __init__(
        self, message: str, status: int | None = None, body: Any = None, type: str = "api_error", partial: Any = None
    ):
        self.status = status
        self.body = body
        self.type = type
        self.partial = partial
        super().__init__(message)


class ToolCallArgumentParseError(LLMBridgeError):
    """Tool-call arguments that do not parse to a JSON object (MMSP's stream grammar)."""

    def __init__(
        self,
        message: str,
        name: str | None = None,
        tool_call_id: str | None = None,
        arguments: str = "",
        partial: Any = None,
    ):
        self.name = name
        self.tool_call_id = tool_call_id
        self.arguments = arguments
        self.partial = partial
        super().__init__(message)


# --------------------------------------------------------------------------- client


class TransportError(LLMBridgeError):
    """The request never got an answer: connection refused, reset or timed out before any response."""

    def __init__(self, message: str, partial: Any = None):
        self.partial = partial
        super().__init__(message)


class ConversationBusyError(LLMBridgeError):
    """A second call on a conversation while its previous call is still streaming."""


class ToolNotDeclaredError(LLMBridgeError):
    """The model called a tool that was not declared in the request (LLM-Stream draft §8.2); never executed."""

    def __init__(self, name: str, tool_call_id: str | None = None):
        self.name = name
        self.tool_call_id = tool_call_id
        super().__init__(f"tool {name!r} was not declared in this request; not executed")


class ConfirmationRequired(LLMBridgeError):
    """A tool with side effects whose call was not confirmed by the caller's ``confirm`` callback."""

    def __init__(self, name: str, tool_call_id: str | None = None, reason: str = "not confirmed"):
        self.name = name
        self.tool_call_id = tool_call_id
        super().__init__(f"tool {name!r} has side effects and was not run: {reason}")


class ToolLoopError(LLMBridgeError):
    """The model still asked for tools after ``max_rounds`` calls. ``partial`` is the run so far."""

    def __init__(self, message: str, partial: Any = None):
        self.partial = partial
        super().__init__(message)
