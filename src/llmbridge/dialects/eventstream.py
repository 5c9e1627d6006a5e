"""AWS event stream framing (``application/vnd.amazon.eventstream``), sans-I/O.

A message is: total length (4 bytes, big-endian), headers length (4), CRC32 of those 8
bytes (4), headers, payload, CRC32 of everything before it (4).  A header is a name
(1-byte length + UTF-8), a type byte and a value: 0/1 true/false, 2 byte, 3 short,
4 int, 5 long, 6 bytes and 7 string (2-byte length first), 8 timestamp (ms, 8 bytes),
9 UUID (16).  :class:`Decoder` takes bytes cut anywhere and gives whole frames.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Decoder",
    "Frame",
    "HeaderError",
    "MAX_FRAME",
    "PRELUDE",
    "Problem",
    "encode_frame",
    "encode_headers",
    "parse_headers",
]

PRELUDE = 12
MAX_FRAME = 16 * 1024 * 1024  # the format's own limit is 16 MiB of payload

_FIXED = {2: (1, ">b"), 3: (2, ">h"), 4: (4, ">i"), 5: (8, ">q"), 8: (8, ">q")}


@dataclass
class Frame:
    headers: dict[str, Any]  # shared between frames with the same header bytes: do not mutate
    payload: bytes
    number: int = 0  # 0-based position in the stream


@dataclass
class Problem:
    frame: int  # the frame's number; -1 at end of input
    rule: str
    message: str
    fatal: bool = False  # framing is lost: nothing after this can be read


class HeaderError(ValueError):
    pass


def parse_headers(data: bytes) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    pos, end = 0, len(data)
    try:
        while pos < end:
            n = data[pos]
            name = data[pos + 1 : pos + 1 + n].decode("utf-8")
            pos += 1 + n
            kind = data[pos]
            pos += 1
            if kind in (0, 1):
                value: Any = kind == 0
            elif kind in _FIXED:
                size, fmt = _FIXED[kind]
                (value,) = struct.unpack_from(fmt, data, pos)
                pos += size
            elif kind in (6, 7):
                (size,) = struct.unpack_from(">H", data, pos)
                raw = data[pos + 2 : pos + 2 + size]
                if len(raw) != size:
                    raise HeaderError(f"header {name!r} runs past the headers")
                value = raw.decode("utf-8") if kind == 7 else bytes(raw)
                pos += 2 + size
            elif kind == 9:
                value = bytes(data[pos : pos + 16])
                pos += 16
            else:
                raise HeaderError(f"header {name!r} has unknown type {kind}")
            if pos > end:
                raise HeaderError(f"header {name!r} runs past the headers")
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise HeaderError(f"malformed headers ({exc})") from None
    return headers


def encode_headers(headers: dict[str, Any]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        raw = name.encode()
        out += bytes([len(raw)]) + raw
        if value is True or value is False:
            out.append(0 if value else 1)
        elif isinstance(value, int):
            out += b"\x04" + struct.pack(">i", value)
        elif isinstance(value, bytes):
            out += b"\x06" + struct.pack(">H", len(value)) + value
        else:
            data = str(value).encode()
            out += b"\x07" + struct.pack(">H", len(data)) + data
    return bytes(out)


def encode_frame(headers: dict[str, Any], payload: bytes) -> bytes:
    head = encode_headers(headers)
    total = PRELUDE + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + payload
    return body + struct.pack(">I", zlib.crc32(body))


class Decoder:
    """Bytes in, :class:`Frame` out; what breaks the format goes to ``problems``.

    A wrong prelude CRC or impossible lengths lose the framing (fatal: decoding stops);
    a wrong message CRC or bad headers are reported and the frame is still returned.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.frames = 0
        self.problems: list[Problem] = []
        self.broken = False
        self._headers: dict[bytes, dict[str, Any]] = {}  # streams repeat a few header blocks: parse each once

    def feed(self, data: bytes) -> list[Frame]:
        if self.broken:
            return []
        self._buf += data
        out: list[Frame] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= PRELUDE:
            total, head_len, crc = struct.unpack_from(">III", buf, pos)
            number = self.frames
            if zlib.crc32(buf[pos : pos + 8]) != crc:
                self._fatal(number, "prelude-crc", "prelude CRC32 does not match")
                break
            if total < PRELUDE + 4 + head_len or total > MAX_FRAME + PRELUDE + 4 + 128 * 1024:
                self._fatal(number, "frame-length", f"impossible lengths (total {total}, headers {head_len})")
                break
            if len(buf) - pos < total:
                break
            frame = bytes(buf[pos : pos + total])
            pos += total
            self.frames += 1
            (want,) = struct.unpack_from(">I", frame, total - 4)
            if zlib.crc32(frame[: total - 4]) != want:
                self.problems.append(Problem(number, "message-crc", "message CRC32 does not match"))
            raw = frame[PRELUDE : PRELUDE + head_len]
            headers = self._headers.get(raw)
            if headers is None:
                try:
                    headers = parse_headers(raw)
                    if len(self._headers) < 64:
                        self._headers[raw] = headers
                except HeaderError as exc:
                    self.problems.append(Problem(number, "headers", str(exc)))
                    headers = {}
            out.append(Frame(headers, frame[PRELUDE + head_len : total - 4], number))
        del buf[:pos]
        return out

    def _fatal(self, number: int, rule: str, message: str) -> None:
        self.problems.append(Problem(number, rule, message, fatal=True))
        self.broken = True
        self._buf.clear()

    def close(self) -> list[Frame]:
        if self._buf and not self.broken:
            self.problems.append(
                Problem(self.frames, "truncated-frame", f"input ends inside a frame ({len(self._buf)} bytes left over)")
            )
            self._buf.clear()
        return []
