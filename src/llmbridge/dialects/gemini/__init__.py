"""The ``gemini`` dialect: Google Gemini ``generateContent`` / ``streamGenerateContent``.

Mapping tables and coverage notes: docs/dialects/gemini.md.
"""

from __future__ import annotations

import msgspec

from ... import hub
from ._decode import StreamDecoder, decode_response
from ._encode import StreamEncoder, encode_response
from ._request import decode_request, encode_request, endpoint
from ._wire import NAME, error_from_hub, error_to_hub

__all__ = [
    "NAME",
    "STREAM_CONTENT_TYPE",
    "StreamDecoder",
    "StreamEncoder",
    "decode_error",
    "decode_request",
    "decode_response",
    "encode_error",
    "encode_request",
    "encode_response",
    "endpoint",
]

STREAM_CONTENT_TYPE = "text/event-stream"


def encode_error(error: hub.Error) -> tuple[int, dict]:
    """HTTP status and ``{"error": {"code", "message", "status"}}``."""
    return error_from_hub(error)


def decode_error(status: int, body: bytes) -> hub.Error:
    """An upstream's HTTP error response (JSON object, JSON array of one, or not JSON at all)."""
    try:
        obj = msgspec.json.decode(body) if body else {}
    except msgspec.DecodeError:
        text = body.decode("utf-8", "replace").strip()
        return hub.Error(text or f"HTTP {status}", hub.error_type_for_status(status), None, status, text or None)
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if not isinstance(obj, dict) or "error" not in obj:
        return hub.Error(f"HTTP {status}", hub.error_type_for_status(status), None, status, obj)
    error = error_to_hub(obj, status)
    error.status = status
    if error.type == "api_error" and status != 500:
        error.type = hub.error_type_for_status(status)
    return error
