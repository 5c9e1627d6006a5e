"""The ``mmsp`` dialect: MMSP's wire, ``POST /v1/stream`` ``{model, messages, config}`` ->
``data: <UniEvent JSON>`` lines.

A stream is the UniEvents of MMSP's stream grammar, one per SSE event.  Terminal rule:
``data: [DONE]`` ends every stream, after the ``stop`` event; an error after the stream
started is ``data: {"error": {"type", "message", ...}}`` then ``data: [DONE]``.  Bytes travel as
base64.  What MMSP has no field for travels under the JSON key ``"llmbridge"`` (on the
event, the item, the message or the config) or in an item's ``fidelity`` (see
docs/unievent.md).  A non-streaming response is the assembled message: ``{"role":
"assistant", "content_items": [.done items], "usage_metadata", "finish_reason"}``.

Files: ``_common`` (route, ``[DONE]``, error objects, hub events as JSON), ``_decoder``
(:class:`StreamDecoder`), ``_encoder`` (:class:`StreamEncoder`), ``_request``,
``_response``; the UniEvent grammar itself is :mod:`llmbridge.unievent`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub
from ..base import Served, json_decode
from ._common import DONE, NAME, PATH, error_from_object, error_object, event_from_dict, event_to_dict
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import decode_request, encode_request
from ._response import decode_response, encode_response, model_body, models_body

__all__ = [
    "GATEWAY",
    "DONE",
    "NAME",
    "PATH",
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
    "event_from_dict",
    "event_to_dict",
]

STREAM_CONTENT_TYPE = "text/event-stream"

# How the gateway serves this dialect (dialects.base.Served).
GATEWAY = Served(
    paths=("/mmsp/v1/stream",),
    models=models_body,
    model=model_body,
    relay_done=b"data: [DONE]\n\n",
)


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """MMSP serves one streaming route; a non-streaming call reads the stream and assembles it.

    MMSP's own clients take a base URL ending in ``/v1`` (as OpenAI's); one without it gets ``/v1`` added.
    """
    headers = {"content-type": "application/json", "accept": STREAM_CONTENT_TYPE}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    base = base_url.rstrip("/")
    return (base + "/stream" if base.endswith("/v1") else base + PATH), headers


def encode_error(error: hub.Error) -> tuple[int, dict[str, Any]]:
    """The HTTP status of ``error`` and ``{"error": <MMSP error object>}``."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status, {"error": error_object(error)}


def decode_error(status: int, body: bytes) -> hub.Error:
    """An MMSP HTTP error response (JSON or not) to the hub; its status is the HTTP one."""
    try:
        data = json_decode(body)
    except msgspec.DecodeError:
        text = body.decode("utf-8", "replace").strip()
        return hub.Error(text[:1000] or f"HTTP {status}", hub.error_type_for_status(status), status=status)
    obj = data.get("error", data) if isinstance(data, dict) else data
    error = error_from_object(obj, status)
    error.status = status
    return error
