"""LLM-Stream's companion bindings: length-prefixed binary frames and WebSocket messages.

Sans-I/O codecs for docs/llm-stream-bindings.md; the gateway, the client SDK and the
conformance suite are the shells that move their bytes.
"""

from __future__ import annotations

from ._frames import (
    BINARY_MEDIA_TYPE,
    DEFAULT_MAX_FRAME,
    EVENT_TYPE_BYTES,
    HEADER_SIZE,
    KEEPALIVE_FRAME,
    T_KEEPALIVE,
    T_NAMED,
    TYPE_EVENT_NAMES,
    BinaryFraming,
    BinaryStreamDecoder,
    Frame,
    FrameDecoder,
    FrameError,
    encode_event,
    encode_frame,
    type_byte_for,
)
from ._websocket import (
    CLOSE_BUSY,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_SLOW_CLIENT,
    CLOSE_TOO_BIG,
    CLOSE_UNAUTHORIZED,
    CLOSE_UNSUPPORTED_DATA,
    SUBPROTOCOL,
    CancelTurn,
    Close,
    MessageStreamDecoder,
    ServerSession,
    StartTurn,
    TurnError,
    cancel_message,
    turn_end,
)

__all__ = [
    "BINARY_MEDIA_TYPE",
    "CLOSE_BUSY",
    "CLOSE_INTERNAL",
    "CLOSE_NORMAL",
    "CLOSE_SLOW_CLIENT",
    "CLOSE_TOO_BIG",
    "CLOSE_UNAUTHORIZED",
    "CLOSE_UNSUPPORTED_DATA",
    "DEFAULT_MAX_FRAME",
    "EVENT_TYPE_BYTES",
    "HEADER_SIZE",
    "KEEPALIVE_FRAME",
    "SUBPROTOCOL",
    "TYPE_EVENT_NAMES",
    "T_KEEPALIVE",
    "T_NAMED",
    "BinaryFraming",
    "BinaryStreamDecoder",
    "CancelTurn",
    "Close",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "MessageStreamDecoder",
    "ServerSession",
    "StartTurn",
    "TurnError",
    "cancel_message",
    "encode_event",
    "encode_frame",
    "turn_end",
    "type_byte_for",
]
