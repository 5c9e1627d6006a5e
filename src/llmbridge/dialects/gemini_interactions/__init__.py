"""The ``gemini-interactions`` dialect: Google's Gemini Interactions API (``POST /v1beta/interactions``).

Streams are SSE ``data:`` lines whose JSON names itself with ``event_type``:
``interaction.created``, ``interaction.status_update``, ``step.start``/``step.delta``/
``step.stop`` (numbered steps: ``model_output`` text, ``thought`` with ``thought_summary``
and ``thought_signature`` deltas, ``function_call`` with ``arguments_delta``, built-in tool
calls and results), ``interaction.completed`` (status, usage) and ``error``.  Terminal rule:
``interaction.completed`` ends the stream; an ``error`` event (or a ``failed`` status) ends
it with a hub ``Error``.  Nested objects use ``type``.  The legacy ``content.*`` and
``interaction.start``/``interaction.complete`` names decode the same way.

Hub mapping: thought steps are thinking blocks, their signature in fidelity
``{"gemini-interactions": {"signature": ...}}``; built-in tool steps are native blocks with
the raw step in ``extensions``; usage follows the Gemini rule (output tokens include thought
tokens); the completed interaction's other fields ride in a stream-level
``Extension("gemini-interactions", {"interaction": {...}})``.

Files: ``_common`` (status, usage and Google error-status maps), ``_decoder``
(StreamDecoder), ``_encoder`` (StreamEncoder), ``_request`` (request bodies), ``_response``
(finished interactions).  See docs/dialects/more.md.
"""

from __future__ import annotations

from ... import hub
from .. import _bridge as br
from ._common import GOOGLE_STATUS, HUB_TO_GOOGLE, HUB_TO_STATUS, NAME, STATUS_TO_HUB, usage_from_wire, usage_to_wire
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import decode_request, encode_request
from ._response import decode_response, encode_response

__all__ = [
    "HUB_TO_STATUS",
    "NAME",
    "STATUS_TO_HUB",
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
    """``POST {base_url}/v1beta/interactions`` (or ``{base_url}/interactions`` when the base URL
    already ends in a ``v1…`` segment) with Google's API key header."""
    base = base_url.rstrip("/")
    # (google-genai's own client posts to /v1/interactions; the REST docs show /v1beta)
    versioned = base.rsplit("/", 1)[-1].startswith("v1")
    url = base + ("/interactions" if versioned else "/v1beta/interactions")
    auth = {"x-goog-api-key": api_key} if api_key else {}
    return url, br.post_headers(request, STREAM_CONTENT_TYPE, auth)


def encode_error(error: hub.Error) -> tuple[int, dict]:
    """HTTP status and Google's ``{"error": {"code", "message", "status"}}`` body."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status, {
        "error": {"code": status, "message": error.message, "status": HUB_TO_GOOGLE.get(error.type, "INTERNAL")}
    }


def decode_error(status: int, body: bytes) -> hub.Error:
    """An upstream's HTTP error response (Google's error object, a list of one, or any text) to the hub."""
    data = br.error_json(body)
    if type(data) is list and data and type(data[0]) is dict:
        data = data[0]
    inner = data.get("error") if type(data) is dict and type(data.get("error")) is dict else None
    if inner is None:
        return br.plain_error(status, body, data)
    kind = GOOGLE_STATUS.get(inner.get("status") or "", hub.error_type_for_status(status))
    return hub.Error(
        str(inner.get("message") or f"HTTP {status}"), kind, code=inner.get("status"), status=status, body=data
    )
