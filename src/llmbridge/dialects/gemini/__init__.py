"""The ``gemini`` dialect: Google Gemini ``generateContent`` / ``streamGenerateContent``.

Streams are ``GenerateContentResponse`` chunks, as SSE ``data:`` (``?alt=sse``) or as one
JSON array; terminal rule: the wire has no terminal event, so the stream is complete when
every candidate seen has its ``finishReason`` (and the array its closing ``]``); an
``{"error": ...}`` chunk ends it with a hub ``Error``.  Files: ``_common`` (finish, usage and
error maps, argument and part helpers, the JSON-array splitter), ``_decoder`` (StreamDecoder),
``_encoder`` (StreamEncoder), ``_request`` (request bodies), ``_response`` (``generateContent``
bodies).  Mapping tables and coverage notes: docs/dialects/gemini.md.
"""

from __future__ import annotations

import msgspec

from ... import hub
from ..base import Served
from ._common import NAME, error_from_hub, error_to_hub
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import decode_request, encode_request
from ._response import decode_response, encode_response, model_body, models_body

__all__ = [
    "GATEWAY",
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

# How the gateway serves this dialect (dialects.base.Served).
GATEWAY = Served(
    paths=("/{version}/models/{model}:generateContent", "/{version}/models/{model}:streamGenerateContent"),
    models=models_body,
    model=model_body,
    keepalive=b"\n",  # google-genai parses every non-empty line that is not data: as JSON
)


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


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``{base}/v1beta/models/{model}:streamGenerateContent?alt=sse`` or ``:generateContent``."""
    base = base_url.rstrip("/")
    if not base.rsplit("/", 1)[-1].startswith("v1"):
        base += "/v1beta"
    model = request.model or ""
    if model.startswith("models/"):
        model = model[len("models/") :]
    method = "streamGenerateContent?alt=sse" if request.stream else "generateContent"
    headers = {"content-type": "application/json"}
    if api_key:
        headers["x-goog-api-key"] = api_key
    return f"{base}/models/{model}:{method}", headers
