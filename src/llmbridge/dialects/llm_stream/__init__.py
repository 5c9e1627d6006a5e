"""The ``llm-stream`` dialect: LLM-Stream 1.0 (the LLM-Stream draft), the standard's request
envelope, SSE stream and response forms.

Terminal rule: ``stream.end`` ends every stream, after an ``error`` event when it failed; a
stream without it is truncated.  What the draft leaves open is decided in
``docs/llm-stream.md`` ("Implementation notes"); in short, hub data the draft has no field
for travels in ``llmbridge:``-namespaced fields, which conforming parsers ignore and these
codecs read back, so a round trip through ``llm-stream`` keeps the whole hub content.

Files: ``_common`` (version, media types, namespace, shared field helpers), ``_decoder``
(:class:`StreamDecoder`), ``_encoder`` (:class:`StreamEncoder`), ``_request`` (the request
envelope), ``_response`` (the non-streaming body); the HTTP errors are here.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub
from ..base import Served, json_decode, openai_model, openai_models
from ._common import (
    ACCEPT_STREAM,
    DELTA_KEY_BY_KIND,
    KIND_BY_DELTA_KEY,
    NAME,
    NS,
    OTHER_KIND_KEY,
    REQUEST_CONTENT_TYPE,
    RESPONSE_CONTENT_TYPE,
    SEQ_LIMIT,
    STOP_REASONS,
    USAGE_DETAILS,
    VERSION,
    error_fields,
    error_from,
)
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import (
    NUMBER,
    PARAMETERS,
    REQUEST_EXTENSIONS,
    ROLES,
    TOOL_CHOICE_MODES,
    decode_request,
    encode_request,
)
from ._response import decode_response, encode_response

__all__ = [
    "GATEWAY",
    "ACCEPT_STREAM",
    "DELTA_KEY_BY_KIND",
    "KIND_BY_DELTA_KEY",
    "NAME",
    "NS",
    "NUMBER",
    "OTHER_KIND_KEY",
    "PARAMETERS",
    "REQUEST_CONTENT_TYPE",
    "REQUEST_EXTENSIONS",
    "RESPONSE_CONTENT_TYPE",
    "ROLES",
    "SEQ_LIMIT",
    "STOP_REASONS",
    "STREAM_CONTENT_TYPE",
    "StreamDecoder",
    "StreamEncoder",
    "TOOL_CHOICE_MODES",
    "USAGE_DETAILS",
    "VERSION",
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
    paths=("/v1/stream",),
    models=openai_models,
    model=openai_model,
)


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None = None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/v1/stream`` (``/stream`` when ``base_url`` already ends in ``/v1``)."""
    base = base_url.rstrip("/")
    url = base + ("/stream" if base.endswith("/v1") else "/v1/stream")
    headers = {
        "Content-Type": REQUEST_CONTENT_TYPE,
        "Accept": ACCEPT_STREAM if request.stream else RESPONSE_CONTENT_TYPE,
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return url, headers


def encode_error(error: hub.Error) -> tuple[int, dict[str, Any]]:
    """``{"error": {"type", "message", "code"}}`` with the status of the error type."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status, {"error": error_fields(error)}


def decode_error(status: int, body: bytes) -> hub.Error:
    """An HTTP error response of an LLM-Stream endpoint (any JSON, or none) to the hub."""
    try:
        parsed = json_decode(body) if body else None
    except msgspec.DecodeError:
        text = body.decode("utf-8", "replace").strip()[:500]
        return hub.Error(text or f"HTTP {status}", hub.error_type_for_status(status), None, status, text or None)
    return error_from(status, parsed)
