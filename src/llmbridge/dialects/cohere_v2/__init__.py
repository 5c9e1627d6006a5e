"""The ``cohere-v2`` dialect: Cohere's v2 Chat API (``POST /v2/chat``).

Streams are SSE events named by their ``type``: ``message-start``, ``content-start``/
``-delta``/``-end`` (text and thinking content, numbered by ``index``), ``tool-plan-delta``
(the model's plan before tool calls; no start or end event), ``tool-call-start``/``-delta``/
``-end`` (numbered separately from content), ``citation-start``/``-end`` and ``message-end``
(``finish_reason``, ``usage``), the terminal event.  Terminal rule: ``message-end``
(or an ``error`` event) ends the stream.  See docs/dialects/more.md.

Hub mapping: the tool plan is a thinking block with fidelity ``{"cohere-v2": {"tool_plan":
true}}`` (it is the model's reasoning about which tools to call); citations are
``Extension("cohere-v2", citation, index=<its content block>)``; billed units ride in
``Usage.extensions["cohere-v2"]``.

Files: ``_common`` (finish and usage maps, the tool-plan marker, error objects), ``_decoder``
(StreamDecoder), ``_encoder`` (StreamEncoder), ``_request`` (request bodies), ``_response``
(non-streaming ``/v2/chat`` bodies).
"""

from __future__ import annotations

from typing import Any

from ... import hub
from .. import _bridge as br
from ..base import EXTENSION_KEY
from ._common import FINISH_TO_HUB, FINISH_TO_WIRE, NAME, STATUS_FOR, error_from_object, usage_from_wire, usage_to_wire
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import decode_request, encode_request
from ._response import decode_response, encode_response

__all__ = [
    "FINISH_TO_HUB",
    "FINISH_TO_WIRE",
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
    "usage_from_wire",
    "usage_to_wire",
]


STREAM_CONTENT_TYPE = "text/event-stream"


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/v2/chat`` with a bearer token."""
    base = base_url.rstrip("/")
    url = base + ("/chat" if base.endswith("/v2") else "/v2/chat")
    auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return url, br.post_headers(request, STREAM_CONTENT_TYPE, auth)


def encode_error(error: hub.Error) -> tuple[int, dict]:
    """HTTP status and Cohere's ``{"message"}`` error body (the hub type carried under ``llmbridge``)."""
    status = error.status or STATUS_FOR.get(error.type) or hub.ERROR_STATUS.get(error.type, 500)
    body: dict[str, Any] = {"message": error.message}
    body[EXTENSION_KEY] = {"type": error.type, **({"code": error.code} if error.code else {})}
    return status, body


def decode_error(status: int, body: bytes) -> hub.Error:
    """An upstream's HTTP error response (Cohere's ``{"message"}`` body, or any text) to the hub."""
    data = br.error_json(body)
    if type(data) is not dict:
        return br.plain_error(status, body)
    return error_from_object(status, data)
