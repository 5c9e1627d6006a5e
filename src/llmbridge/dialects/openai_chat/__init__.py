"""The ``openai-chat`` dialect: OpenAI Chat Completions and its many compatible servers.

Streams are SSE ``data:`` chunks (``chat.completion.chunk`` objects); terminal rule:
``data: [DONE]`` ends the stream, not a chunk's ``finish_reason``, and an ``{"error": ...}``
chunk ends it with that error.  Files: ``_common`` (finish, usage and error maps),
``_decoder`` (StreamDecoder), ``_encoder`` (StreamEncoder, ``encode_events``), ``_request``
and ``_response`` (request and non-streaming bodies).  ``docs/dialects/openai_chat.md`` has
the field mapping and what travels under the ``llmbridge`` extension key.
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import EXTENSION_KEY, Served, json_decode, openai_model, openai_models
from ._common import NAME, error_from_object, error_object, status_error_type
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder, encode_events
from ._request import decode_request, encode_request
from ._response import decode_response, encode_response

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
    "encode_events",
    "encode_request",
    "encode_response",
    "endpoint",
]

STREAM_CONTENT_TYPE = "text/event-stream"

# How the gateway serves this dialect (dialects.base.Served).
GATEWAY = Served(
    paths=("/v1/chat/completions",),
    models=openai_models,
    model=openai_model,
    relay_markers=(
        b'"finish_reason":"',
        b'"finish_reason": "',
        b'"usage":{',
        b'"usage": {',
        b"error",
        b"[DONE]",
        b"event:",
    ),
    relay_done=b"data: [DONE]\n\n",
)


def stream_encoder(request: hub.Request) -> StreamEncoder:
    """The encoder for an answer to ``request``: OpenAI sends the usage chunk (``choices: []``)
    only when the client asked with ``stream_options.include_usage``; clients that index
    ``choices[0]`` on every chunk rely on that."""
    options = request.extensions.get(f"{NAME}:stream_options") or {}
    return StreamEncoder(include_usage=bool(options.get("include_usage")))


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``base_url`` is the API root that ends in ``/v1`` (``https://api.openai.com/v1``)."""
    headers = {
        "Content-Type": "application/json",
        "Accept": STREAM_CONTENT_TYPE if request.stream else "application/json",
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return base_url.rstrip("/") + "/chat/completions", headers


def encode_error(error: hub.Error) -> tuple[int, dict[str, Any]]:
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status, {"error": error_object(error)}


def decode_error(status: int, body: bytes) -> hub.Error:
    try:
        parsed = json_decode(body) if body else None
    except Exception:
        parsed = None
    if isinstance(parsed, list) and parsed and isinstance(parsed[0], dict):
        parsed = parsed[0]  # some gateways wrap the error body in a list
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        obj = parsed["error"]
        bridge = obj.get(EXTENSION_KEY)
        return error_from_object({k: v for k, v in obj.items() if k != EXTENSION_KEY}, status, bridge)
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):  # {"error": "message"} (Ollama ...)
        return hub.Error(parsed["error"], status_error_type(status), status=status, body=parsed)
    text = body.decode("utf-8", "replace").strip() if body else ""
    return hub.Error(text or f"HTTP {status}", status_error_type(status), status=status, body=parsed)
