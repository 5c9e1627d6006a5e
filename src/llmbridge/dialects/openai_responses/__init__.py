"""The OpenAI Responses dialect (``POST /v1/responses``): ``event: response.*`` SSE streams."""

from __future__ import annotations

from ._common import NAME
from ._decoder import StreamDecoder, decode_response
from ._encoder import StreamEncoder, encode_response

STREAM_CONTENT_TYPE = "text/event-stream"

__all__ = ["NAME", "STREAM_CONTENT_TYPE", "StreamDecoder", "StreamEncoder", "decode_response", "encode_response"]
