"""The exception hierarchy shared by the codecs, the gateway and the client."""

from __future__ import annotations

from typing import Any


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

    def __init__(self, message: str, event: int | None = None, rule: str | None = None):
        self.event = event
        self.rule = rule
        where = f"event {event}: " if event is not None else ""
        super().__init__(f"{where}{rule + ': ' if rule else ''}{message}")


class IncompleteStreamError(LLMBridgeError):
    """The stream ended before its terminal event. ``partial`` holds what arrived."""

    def __init__(self, message: str = "stream ended before its terminal event", partial: Any = None):
        self.partial = partial
        super().__init__(message)


class UpstreamError(LLMBridgeError):
    """An error reported by the other side: HTTP status and the dialect's error body."""

    def __init__(self, message: str, status: int | None = None, body: Any = None, type: str = "api_error",
                 partial: Any = None):
        self.status = status
        self.body = body
        self.type = type
        self.partial = partial
        super().__init__(message)


class ToolCallArgumentParseError(LLMBridgeError):
    """Tool-call arguments that do not parse to a JSON object (seed 001)."""

    def __init__(self, message: str, name: str | None = None, tool_call_id: str | None = None,
                 arguments: str = "", partial: Any = None):
        self.name = name
        self.tool_call_id = tool_call_id
        self.arguments = arguments
        self.partial = partial
        super().__init__(message)
