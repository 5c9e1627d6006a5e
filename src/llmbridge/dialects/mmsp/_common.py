"""Vocabulary shared by the mmsp codecs: the route, the ``[DONE]`` line, MMSP's error
classes and the hub's, the error object both ways, and hub events as JSON (what an error
event carries under ``llmbridge`` when a stream fails only for MMSP's grammar).
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import IncompleteStreamError, LLMBridgeError, ToolCallArgumentParseError
from ..base import EXTENSION_KEY

NAME = "mmsp"
PATH = "/v1/stream"

DONE = b"data: [DONE]\n\n"

# MMSP's error classes (their ``type`` on the wire) and the hub's types.
HUB_TO_MMSP = {
    "invalid_request": "InvalidRequestError",
    "request_too_large": "InvalidRequestError",
    "unsupported_media_type": "InvalidRequestError",
    "authentication": "AuthenticationError",
}
MMSP_TO_HUB = {
    "InvalidRequestError": "invalid_request",
    "AuthenticationError": "authentication",
    "UnsupportedParameterError": "invalid_request",
    "UnsupportedOperationError": "invalid_request",
    "EmptyResponseError": "api_error",
    "StreamProtocolError": "protocol_error",
    "ToolCallArgumentParseError": "api_error",
    "UpstreamError": "api_error",
}


def error_object(error: hub.Error) -> dict[str, Any]:
    """MMSP's error object for ``error``: its MMSP class and message, the hub's fields under
    ``llmbridge``; an MMSP error passing through comes back unchanged."""
    body = error.body
    if isinstance(body, dict) and body.get("type") in MMSP_TO_HUB and body.get("type") == error.code:
        return body  # an MMSP error passing through unchanged
    mmsp_type = HUB_TO_MMSP.get(error.type, "UpstreamError")
    obj: dict[str, Any] = {"type": mmsp_type, "message": error.message}
    if mmsp_type == "UpstreamError":
        obj["status"] = error.status or hub.ERROR_STATUS.get(error.type, 500)
        obj["error_type"] = error.code or error.type
    extra = {
        k: v
        for k, v in (("type", error.type), ("code", error.code), ("status", error.status), ("body", body))
        if v is not None
    }
    obj[EXTENSION_KEY] = extra
    return obj


def error_from_object(obj: Any, status: int | None = None) -> hub.Error:
    """The hub Error of an MMSP error object (any JSON value) that came with HTTP ``status``."""
    if not isinstance(obj, dict):
        return hub.Error(str(obj), hub.error_type_for_status(status) if status else "api_error", status=status)
    message = str(obj.get("message") or obj.get("type") or "error")
    extra = obj.get(EXTENSION_KEY)
    if isinstance(extra, dict) and extra.get("type") in hub.ERROR_TYPES:
        return hub.Error(message, extra["type"], extra.get("code"), extra.get("status", status), extra.get("body"))
    mmsp_type = obj.get("type")
    upstream_status = obj.get("status") if type(obj.get("status")) is int else None
    if mmsp_type == "UpstreamError" and upstream_status:
        hub_type = hub.error_type_for_status(upstream_status)
    elif mmsp_type in MMSP_TO_HUB:
        hub_type = MMSP_TO_HUB[mmsp_type]
    else:
        hub_type = hub.error_type_for_status(status) if status else "api_error"
    code = mmsp_type if isinstance(mmsp_type, str) else None
    return hub.Error(message, hub_type, code, status or upstream_status, obj)


def exception_object(exc: LLMBridgeError) -> dict[str, Any]:
    """The wire error for an exception the UniEvent view raised."""
    if isinstance(exc, ToolCallArgumentParseError):
        return {
            "type": "ToolCallArgumentParseError",
            "message": str(exc),
            "client": "llmbridge",
            "tool_name": exc.name or "",
            "tool_call_id": exc.tool_call_id or "",
            "raw_arguments_length": len(exc.arguments),
            "raw_arguments_preview": exc.arguments[:1000],
        }
    error_type = getattr(exc, "type", None) or "api_error"
    if isinstance(exc, IncompleteStreamError):
        error_type = "incomplete_stream"
    return error_object(
        hub.Error(str(exc), error_type, status=getattr(exc, "status", None), body=getattr(exc, "body", None))
    )


def event_to_dict(event: hub.Event) -> dict[str, Any]:
    """A hub event as JSON: its fields and ``"event"``, the class name (:func:`llmbridge.hub.event_to_json`)."""
    return hub.event_to_json(event, keep_none=True)


def event_from_dict(d: dict[str, Any]) -> hub.Event:
    """The hub event of an :func:`event_to_dict` dict; raises ``ValueError`` when it holds none."""
    event = hub.event_from_json(d)
    if event is None:
        raise ValueError(f"not a hub event: {str(d)[:80]}")
    return event
