"""The ``bedrock-converse`` dialect: AWS Bedrock's Converse API (``/model/{id}/converse-stream``).

Streams are binary AWS event-stream frames (:mod:`llmbridge.dialects.eventstream`) whose
``:event-type`` header names the JSON payload: ``messageStart``, ``contentBlockStart`` (tool
use), ``contentBlockDelta`` (``text``, ``reasoningContent`` {text, signature,
redactedContent}, ``toolUse`` {input}, ``citation``), ``contentBlockStop``, ``messageStop``
(``stopReason``) and ``metadata`` (usage, metrics).  Terminal rule: ``metadata`` after
``messageStop`` ends the stream; ``:message-type: exception`` frames (``:exception-type``)
end it with an error.  Payloads carry a random ``p`` padding field.

Hub mapping: text and reasoning blocks have no start event, their first delta opens them;
reasoning signatures and redacted content go in fidelity ``{"bedrock-converse": {...}}``
on BlockStop; usage follows the hub rule (input tokens include cache reads and writes).

Files: ``_common`` (stop-reason, exception and usage maps, content blocks <-> hub parts),
``_decoder`` (StreamDecoder), ``_encoder`` (StreamEncoder), ``_request`` (request bodies),
``_response`` (non-streaming ``/converse`` bodies); the binary framing is the shared
:mod:`llmbridge.dialects.eventstream`.  See docs/dialects/more.md.
"""

from __future__ import annotations

from ... import hub
from .. import _bridge as br
from ..base import EXTENSION_KEY
from ._common import EXCEPTION_TO_HUB, HUB_TO_EXCEPTION, HUB_TO_STOP, NAME, STOP_TO_HUB, usage_from_wire, usage_to_wire
from ._decoder import StreamDecoder
from ._encoder import StreamEncoder
from ._request import decode_request, encode_request
from ._response import decode_response, encode_response

__all__ = [
    "EXCEPTION_TO_HUB",
    "HUB_TO_EXCEPTION",
    "HUB_TO_STOP",
    "NAME",
    "STOP_TO_HUB",
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


STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"


def endpoint(request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """``POST {base_url}/model/{modelId}/converse[-stream]``; a Bedrock API key goes as a bearer token
    (SigV4 signing is the caller's business)."""
    from urllib.parse import quote

    action = "converse-stream" if request.stream else "converse"
    url = f"{base_url.rstrip('/')}/model/{quote(request.model or '', safe='')}/{action}"
    auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return url, br.post_headers(request, STREAM_CONTENT_TYPE, auth)


def encode_error(error: hub.Error) -> tuple[int, dict]:
    """HTTP status and Bedrock's ``{"message"}`` error body (exception name and hub type under ``llmbridge``)."""
    name = HUB_TO_EXCEPTION.get(error.type, "internalServerException")
    status = error.status or EXCEPTION_TO_HUB.get(name, ("api_error", 500))[1]
    return status, {"message": error.message, EXTENSION_KEY: {"type": error.type, "exception": name}}


def decode_error(status: int, body: bytes) -> hub.Error:
    """An upstream's HTTP error response (``{"message"}`` or ``{"Message"}``, or any text) to the hub."""
    data = br.error_json(body)
    if type(data) is not dict:
        return br.plain_error(status, body)
    ext = br.obj_at(data, EXTENSION_KEY)
    message = data.get("message") or data.get("Message") or f"HTTP {status}"
    kind = br.error_type(ext, status)
    return hub.Error(str(message), kind, code=ext.get("exception"), status=status, body=data)
