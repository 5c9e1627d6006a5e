"""The ``openai-responses`` dialect: OpenAI's Responses API (``POST /v1/responses``).

Streams are SSE ``event: response.*`` events; terminal rule: ``response.completed``,
``response.incomplete``, ``response.failed`` or an ``error`` event ends the stream (the last
two with a hub ``Error``).  Files: ``_common`` (error words, finish and usage maps, carried
hub events), ``_decoder`` (StreamDecoder), ``_encoder`` (StreamEncoder), ``_request``
(request bodies), ``_response`` (non-streaming response objects).
``docs/dialects/openai_responses.md`` has the mapping tables.
"""

from __future__ import annotations

import msgspec

from ... import hub
from ..base import Served, openai_model, openai_models
from ._common import ERROR_WORD, NAME, error_type
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import decode_request, encode_request
from ._response import decode_response, encode_response

STREAM_CONTENT_TYPE = "text/event-stream"


def stream_encoder(request: hub.Request) -> StreamEncoder:
    """The encoder for an answer to ``request``: a stream that fails before the answer's start
    still opens with ``response.created``, of a response that names the requested model."""
    return StreamEncoder(model=request.model)


# How the gateway serves this dialect (dialects.base.Served).
GATEWAY = Served(
    paths=("/v1/responses",),
    models=openai_models,
    model=openai_model,
    relay_markers=(
        b"response.created",
        b"response.in_progress",
        b"response.completed",
        b"response.incomplete",
        b"response.failed",
        b"output_item.",
        b"content_part.",
        b".done",
        b"error",
    ),
)

__all__ = [
    "GATEWAY",
    "NAME",
    "STREAM_CONTENT_TYPE",
    "StreamDecoder",
    "StreamEncoder",
    "decode_request",
    "decode_response",
    "decode_error",
    "encode_error",
    "encode_request",
    "encode_response",
    "endpoint",
]


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``{base_url}/responses`` (base_url as the SDK's, e.g. ``https://api.openai.com/v1``)."""
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    if request.stream:
        headers["accept"] = "text/event-stream"
    return base_url.rstrip("/") + "/responses", headers


def encode_error(error: hub.Error) -> tuple[int, dict]:
    """HTTP status and OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    word = ERROR_WORD.get(error.type, "server_error")
    return status, {"error": {"message": error.message, "type": word, "param": None, "code": error.code or word}}


def decode_error(status: int, body: bytes) -> hub.Error:
    try:
        parsed = msgspec.json.decode(body) if body else None
    except msgspec.DecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        text = body.decode("utf-8", "replace").strip() if body else ""
        return hub.Error(text or f"HTTP {status}", hub.error_type_for_status(status), status=status, body=parsed)
    kind = error_type(error, status) if status < 500 or error.get("type") else hub.error_type_for_status(status)
    if status == 429:
        kind = "rate_limit"
    return hub.Error(str(error.get("message") or f"HTTP {status}"), kind, error.get("code"), status, error)
