"""The length-prefixed binary binding of LLM-Stream (docs/llm-stream-bindings.md §2), sans-I/O.

A frame is a type byte, a 4-byte big-endian payload length, then the payload: the same
UTF-8 JSON envelope the SSE binding carries in ``data:``.  :class:`FrameDecoder` cuts a byte
stream into frames under a size cap (a length over the cap is refused from the 5-byte
header alone, so a hostile length never makes us buffer); :class:`BinaryFraming` re-frames
the gateway's SSE output as frames; :class:`BinaryStreamDecoder` reads frames into hub
events through the same grammar checks as the SSE decoder.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .. import hub, sse
from ..dialects import llm_stream

__all__ = [
    "BINARY_MEDIA_TYPE",
    "DEFAULT_MAX_FRAME",
    "EVENT_TYPE_BYTES",
    "HEADER_SIZE",
    "KEEPALIVE_FRAME",
    "TYPE_EVENT_NAMES",
    "T_KEEPALIVE",
    "T_NAMED",
    "BinaryDialect",
    "BinaryFraming",
    "BinaryStreamDecoder",
    "BinaryStreamEncoder",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "encode_event",
    "encode_frame",
    "type_byte_for",
]

BINARY_MEDIA_TYPE = "application/llm-stream+binary"
HEADER_SIZE = 5  # type byte + uint32 length
MAX_LENGTH = 2**32 - 1  # what 4 bytes can say
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # payload cap a receiver applies unless configured (§2.4)
MIN_MAX_FRAME = 1024 * 1024  # receivers MUST accept payloads up to this size (§2.4)

# §2.2: the registered event types of the draft (§5.3 / §5.4), in lifecycle order.
EVENT_TYPE_BYTES: dict[str, int] = {
    "stream.start": 0x01,
    "content.delta": 0x02,
    "tool.call": 0x03,
    "content.stop": 0x04,
    "usage": 0x05,
    "error": 0x06,
    "stream.end": 0x07,
}
TYPE_EVENT_NAMES: dict[int, str] = {b: name for name, b in EVENT_TYPE_BYTES.items()}
T_NAMED = 0x40  # an event type without a byte of its own: the JSON "type" names it
T_KEEPALIVE = 0x41  # empty payload; the binary counterpart of an SSE comment line
KEEPALIVE_FRAME = bytes((T_KEEPALIVE, 0, 0, 0, 0))
_HEADER = struct.Struct(">BI")


def _ignorable(type_byte: int) -> bool:
    """Reserved values a receiver skips (§2.2): 0x08-0x3F and 0x42-0x7F."""
    return 0x08 <= type_byte <= 0x3F or 0x42 <= type_byte <= 0x7F


class FrameError(Exception):
    """The byte stream broke the framing rules; ``code`` names the rule (§2.5)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Frame(NamedTuple):
    type: int
    payload: bytes

    @property
    def event_name(self) -> str | None:
        """The event type this frame's byte stands for (``None`` for named and control frames)."""
        return TYPE_EVENT_NAMES.get(self.type)


def type_byte_for(event_type: str) -> int:
    """The type byte of an event type: its registered byte, else :data:`T_NAMED`."""
    return EVENT_TYPE_BYTES.get(event_type, T_NAMED)


def encode_frame(type_byte: int, payload: bytes) -> bytes:
    """One frame.  Raises ``ValueError`` for a type byte outside 0-255 or a payload over 2^32-1 bytes."""
    if not 0 <= type_byte <= 255:
        raise ValueError(f"type byte {type_byte} is not in 0-255")
    if len(payload) > MAX_LENGTH:
        raise ValueError(f"payload of {len(payload)} bytes does not fit a 4-byte length")
    return _HEADER.pack(type_byte, len(payload)) + payload


def encode_event(event_type: str, envelope_json: bytes) -> bytes:
    """The frame of one event whose envelope (``{"v","seq","type",...}``) is ``envelope_json``."""
    return encode_frame(type_byte_for(event_type), envelope_json)


class FrameDecoder:
    """Bytes in (split anywhere), :class:`Frame` out; raises :class:`FrameError` on a broken stream.

    ``max_frame`` caps a payload: a header announcing more is refused at once, before any of
    the payload is buffered, so memory stays under ``max_frame + HEADER_SIZE`` plus one chunk.
    Keep-alive frames and frames with ignorable reserved type bytes are consumed silently.
    After an error the decoder is dead: every later call raises the same error.
    """

    __slots__ = ("_buf", "_error", "keepalives", "max_frame", "skipped")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame < 1:
            raise ValueError("max_frame must be positive")
        self.max_frame = max_frame
        self._buf = bytearray()
        self._error: FrameError | None = None
        self.keepalives = 0
        self.skipped = 0  # frames with reserved-but-ignorable type bytes

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not complete yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        size = len(buf)
        unpack = _HEADER.unpack_from
        try:
            while size - pos >= HEADER_SIZE:
                type_byte, length = unpack(buf, pos)
                self._check_header(type_byte, length)
                end = pos + HEADER_SIZE + length
                if end > size:
                    break
                if type_byte == T_KEEPALIVE:
                    self.keepalives += 1
                elif _ignorable(type_byte):
                    self.skipped += 1
                else:
                    frames.append(Frame(type_byte, bytes(buf[pos + HEADER_SIZE : end])))
                pos = end
        finally:
            if pos:
                del buf[:pos]
        return frames

    def _check_header(self, type_byte: int, length: int) -> None:
        if length > self.max_frame:
            self._die("frame_too_large", f"frame of {length} bytes is over the cap of {self.max_frame}")
        if type_byte == T_KEEPALIVE:
            if length:
                self._die("bad_length", f"keep-alive frame with a {length}-byte payload (must be empty)")
        elif type_byte in TYPE_EVENT_NAMES or type_byte == T_NAMED:
            if not length:
                self._die("bad_length", f"event frame 0x{type_byte:02x} with an empty payload")
        elif not _ignorable(type_byte):
            self._die("unknown_type", f"type byte 0x{type_byte:02x} is not defined (0x00 and 0x80-0xFF are fatal)")

    def close(self) -> None:
        """End of input: raises :class:`FrameError` (``truncated``) when a frame is incomplete."""
        if self._error is not None:
            raise self._error
        if self._buf:
            n = len(self._buf)
            if n < HEADER_SIZE:
                self._die("truncated", f"input ended inside a frame header ({n} of {HEADER_SIZE} bytes)")
            _, length = _HEADER.unpack_from(self._buf, 0)
            self._die("truncated", f"input ended inside a frame ({n - HEADER_SIZE} of {length} payload bytes)")

    def _die(self, code: str, message: str) -> None:
        self._error = FrameError(code, message)
        self._buf = bytearray()  # release whatever was held
        raise self._error


class BinaryFraming:
    """Re-frames LLM-Stream SSE bytes as binary frames: ``feed(bytes) -> bytes``, ``close() -> bytes``.

    The interface of the gateway's response framings (``JSONArrayFraming``).  Each SSE event
    becomes one frame, its ``data`` the payload unchanged; SSE comments (keep-alives) become
    one keep-alive frame per chunk.  The event name picks the type byte (the gateway's
    encoder always names events after their JSON ``type``).

    Fast path: the gateway's own encoder writes every event as ``event: X\ndata: Y\n\n``,
    which is cut with two ``find`` calls; any other shape (a relayed upstream's multi-line
    data, ``id:`` fields, CR line ends) goes through the full WHATWG decoder, so the result
    is the same for any input.
    """

    __slots__ = ("_comments", "_pending", "_sse")

    def __init__(self) -> None:
        self._sse: sse.Decoder | None = None  # the general decoder, once the input needed it
        self._pending = b""
        self._comments = 0

    def feed(self, data: bytes) -> bytes:
        if self._sse is not None:
            return self._general(self._sse.feed(data))
        if 13 in data or data.startswith(b"\xef\xbb\xbf"):  # CR line ends or a BOM: the general decoder
            self._sse = sse.Decoder()
            pending, self._pending = self._pending, b""
            return self._general(self._sse.feed(pending + data))
        buf = self._pending + data if self._pending else data
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._pending = buf
            return b""
        self._pending = buf[end + 2 :]
        parts = []
        pack = _HEADER.pack
        get = EVENT_TYPE_BYTES.get
        keepalive = False
        for block in buf[:end].split(b"\n\n"):
            if block.startswith(b"event: "):
                nl = block.find(b"\ndata: ")
                if nl > 0 and block.find(b"\n", nl + 7) < 0 and block.find(b"\n", 0, nl) < 0:
                    payload = block[nl + 7 :]
                    parts.append(pack(get(block[7:nl].decode(), T_NAMED), len(payload)))
                    parts.append(payload)
                    continue
            elif block.startswith(b":") and b"\n" not in block:
                keepalive = True
                continue
            elif not block.strip(b"\n"):
                continue
            # any other shape: the general decoder, one block at a time (events are independent)
            decoder = sse.Decoder()
            events = decoder.feed(block + b"\n\n")
            keepalive = keepalive or decoder.comments > 0
            for event in events:
                payload = event.data.encode()
                parts.append(pack(get(event.event, T_NAMED), len(payload)))
                parts.append(payload)
        if keepalive:
            parts.insert(0, KEEPALIVE_FRAME)
        return b"".join(parts)

    def close(self) -> bytes:
        if self._sse is not None:
            return self._general(self._sse.close())
        pending, self._pending = self._pending, b""
        if not pending.strip():
            return b""
        decoder = sse.Decoder()  # a last event without its blank line (the SSE decoder dispatches it)
        return self._with(decoder, decoder.feed(pending) + decoder.close())

    def keepalive(self) -> bytes:
        """The bytes of one keep-alive (for a shell that sends keep-alives itself)."""
        return KEEPALIVE_FRAME

    def _general(self, events: list[sse.Event]) -> bytes:
        assert self._sse is not None
        comments = self._sse.comments
        out = self._frames(events, comments != self._comments)
        self._comments = comments
        return out

    def _with(self, decoder: sse.Decoder, events: list[sse.Event]) -> bytes:
        return self._frames(events, decoder.comments > 0)

    @staticmethod
    def _frames(events: list[sse.Event], keepalive: bool) -> bytes:
        parts = [KEEPALIVE_FRAME] if keepalive else []
        pack = _HEADER.pack
        get = EVENT_TYPE_BYTES.get
        for event in events:
            payload = event.data.encode()
            parts.append(pack(get(event.event, T_NAMED), len(payload)))
            parts.append(payload)
        return b"".join(parts)


class BinaryStreamDecoder(llm_stream.StreamDecoder):
    """Binary frames to hub events, with every check of the SSE decoder (docs/llm-stream.md §2).

    Framing errors (over the cap, unknown type byte, truncated, empty event frame, a type
    byte that disagrees with the JSON ``type``, a payload that is not UTF-8) are violations
    of rule ``frame`` and end the hub stream with ``Error(protocol_error, code=<rule>)`` —
    or ``incomplete_stream`` for a truncated input, as a truncated SSE body.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, seq_limit: int = llm_stream.SEQ_LIMIT) -> None:
        super().__init__(seq_limit=seq_limit)
        self.frames = FrameDecoder(max_frame)
        self._broken = False

    def feed(self, data: bytes) -> list[hub.Event]:
        if not self._broken:
            try:
                frames = self.frames.feed(data)
            except FrameError as exc:
                self._frame_error(exc)
            else:
                self._dispatch_frames(frames)
        out, self._out = self._out, []
        return out

    def close(self) -> list[hub.Event]:
        if not self._broken:
            try:
                self.frames.close()
            except FrameError as exc:
                if exc.code == "truncated" and not self.wire_ended:
                    self.violation("frame", str(exc), event=-1)
                    self._broken = True
                    # as a truncated SSE body: incomplete_stream, never a clean end
                else:
                    self._frame_error(exc)
        if not self.wire_ended:
            if self.event_number < 0:
                self.violation("start-first", "no stream.start: the stream is empty", event=-1)
            self.violation("end-missing", "stream ended before stream.end", event=-1)
            if not self.ended:
                self._end_with(hub.Error("stream ended before stream.end", "incomplete_stream"))
        out, self._out = self._out, []
        return out

    def _dispatch_frames(self, frames: list[Frame]) -> None:
        for frame in frames:
            try:
                data = frame.payload.decode()
            except UnicodeDecodeError as exc:
                self._frame_error(FrameError("bad_payload", f"payload is not UTF-8 ({exc.reason})"))
                return
            name = TYPE_EVENT_NAMES.get(frame.type)
            if name is None:  # T_NAMED: the JSON decides; the SSE decoder checks it is not a registered one
                name = _json_type(data) or "message"
                if name in EVENT_TYPE_BYTES:
                    byte = EVENT_TYPE_BYTES[name]
                    self._frame_error(FrameError("type_mismatch", f"{name!r} sent as a named frame, not 0x{byte:02x}"))
                    return
            # A type byte that disagrees with the JSON "type" shows up as the SSE decoder's
            # event-name violation; in this binding it is fatal (§2.3).
            before = len(self.violations)
            self._dispatch(sse.Event(name, data))
            if len(self.violations) != before and any(v.rule == "event-name" for v in self.violations[before:]):
                self._frame_error(FrameError("type_mismatch", "type byte disagrees with the JSON 'type'"))
                return

    def _frame_error(self, exc: FrameError) -> None:
        self._broken = True
        self.violation("frame", f"{exc.code}: {exc}")
        if not self.ended:
            self._end_with(hub.Error(f"binary framing: {exc}", "protocol_error", code=exc.code))
        self._failed = True


def _json_type(data: str) -> str | None:
    from ..dialects.base import json_decode

    try:
        obj = json_decode(data)
    except Exception:
        return None
    value = obj.get("type") if type(obj) is dict else None
    return value if type(value) is str else None


class BinaryStreamEncoder:
    """Hub events to binary frames: the llm-stream encoder, re-framed (what the gateway sends).

    ``encode(event) -> bytes`` like every dialect's ``StreamEncoder``; the frames of the
    stream's last event come out with ``ResponseEnd``.
    """

    def __init__(self, **kwargs: object) -> None:
        self._encoder = llm_stream.StreamEncoder(**kwargs)  # type: ignore[arg-type]
        self._framing = BinaryFraming()

    def encode(self, event: hub.Event) -> bytes:
        out = self._framing.feed(self._encoder.encode(event))
        if type(event) is hub.ResponseEnd:
            out += self._framing.close()
        return out


class BinaryDialect:
    """``llm-stream-binary`` for the CLI (``translate``, ``validate``): the binary binding seen
    through the dialect surface (``NAME``, ``StreamDecoder``, ``StreamEncoder``)."""

    NAME = "llm-stream-binary"
    StreamDecoder = BinaryStreamDecoder
    StreamEncoder = BinaryStreamEncoder
