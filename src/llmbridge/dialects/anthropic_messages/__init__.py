"""The ``anthropic-messages`` dialect: Anthropic's Messages API (``POST /v1/messages``).

Streams are SSE events named like their ``type`` (``message_start``, ``content_block_*``,
``message_delta``); terminal rule: ``message_stop`` ends the stream, and so does an ``error``
event (with a hub ``Error``).  Files: ``_common`` (reason, error and usage maps, carried hub
events), ``_decoder`` (StreamDecoder), ``_encoder`` (StreamEncoder), ``_request`` (request
bodies), ``_response`` (non-streaming message bodies).  See docs/dialects/anthropic_messages.md.
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import Served, json_decode
from ._common import ANTHROPIC_VERSION, ERROR_STATUS, NAME, error_body, error_from_body
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import BETA, DEFAULT_MAX_TOKENS, decode_request, encode_request
from ._response import decode_response, encode_response, model_body, models_body

STREAM_CONTENT_TYPE = "text/event-stream"

# How the gateway serves this dialect (dialects.base.Served).
GATEWAY = Served(
    paths=("/v1/messages",),
    models=models_body,
    model=model_body,
    relay_markers=(b"message_", b"content_block_start", b"content_block_stop", b"error"),
)

__all__ = [
    "GATEWAY",
    "NAME",
    "STREAM_CONTENT_TYPE",
    "DEFAULT_MAX_TOKENS",
    "BETA",
    "decode_request",
    "encode_request",
    "endpoint",
    "StreamDecoder",
    "StreamEncoder",
    "decode_response",
    "encode_response",
    "encode_error",
    "decode_error",
]


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/v1/messages`` with Anthropic's auth and version headers."""
    base = base_url.rstrip("/")
    url = base + ("/messages" if base.endswith("/v1") else "/v1/messages")
    headers = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    if request.stream:
        headers["accept"] = STREAM_CONTENT_TYPE
    beta = request.extensions.get(BETA)
    if type(beta) is str and beta:  # the client's beta flags (context management, effort ...)
        headers["anthropic-beta"] = beta
    return url, headers


def encode_error(error: hub.Error) -> tuple[int, dict[str, Any]]:
    """HTTP status and Anthropic's ``{"type": "error", "error": {"type", "message"}}`` body."""
    status = error.status or ERROR_STATUS.get(error.type) or hub.ERROR_STATUS.get(error.type, 500)
    return status, error_body(error)


def decode_error(status: int, body: bytes) -> hub.Error:
    """An upstream's HTTP error response (Anthropic's error body, or any text) to the hub."""
    try:
        data: Any = json_decode(body) if body else None
    except ValueError:
        data = body.decode("utf-8", "replace")
    error = error_from_body(data, status)
    if error.status is None:
        error.status = status
    return error
