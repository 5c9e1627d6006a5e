"""The ``anthropic-messages`` dialect: Anthropic's Messages API (``POST /v1/messages``).

A small package: :mod:`.decoder` (stream -> hub), :mod:`.encoder` (hub -> stream),
:mod:`.request` (request bodies), :mod:`.response` (non-streaming and error bodies),
:mod:`.common` (reason, error and usage maps).  See docs/dialects/anthropic_messages.md.
"""

from __future__ import annotations

from ... import hub
from .common import NAME
from .decoder import StreamDecoder
from .encoder import StreamEncoder
from .request import DEFAULT_MAX_TOKENS, decode_request, encode_request
from .response import decode_error, decode_response, encode_error, encode_response

STREAM_CONTENT_TYPE = "text/event-stream"
ANTHROPIC_VERSION = "2023-06-01"

__all__ = [
    "NAME",
    "STREAM_CONTENT_TYPE",
    "DEFAULT_MAX_TOKENS",
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
    return url, headers
