"""Images as data, sans-I/O: checks on image bytes (base64 that decodes, a declared MIME type
that matches the magic number, a size limit) and OpenAI's Images stream read into
:class:`ImageEvent` values. Used by the gateway (images coming in and coming back from an
upstream) and by the client SDK (``Client.images``).
"""

from __future__ import annotations

import binascii
import re
from typing import Any

import msgspec

from . import hub, sse
from .dialects.base import json_decode

__all__ = [
    "CHECKED",
    "COMPLETED",
    "ImageEvent",
    "ImageStreamDecoder",
    "MAX_IMAGE_BYTES",
    "OUTPUT_FORMATS",
    "PARTIAL",
    "base64_size",
    "decode_base64",
    "image_problem",
    "sniff",
]

# The formats every vendor accepts as image input (OpenAI, Anthropic, Gemini: PNG, JPEG, GIF,
# WebP). Other declared image types (HEIC, AVIF …) are let through unchecked: we do not know
# their magic well enough to refuse them, and the upstream will say if it cannot read them.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
CHECKED = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg"}
_SPACE = re.compile(rb"\s+")


def sniff(data: bytes) -> str | None:
    """The image MIME type of ``data`` by its magic number (PNG, JPEG, GIF, WebP), or None."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def decode_base64(text: str | bytes) -> bytes:
    """Strict base64 (padding required, no stray characters); whitespace, which MIME-style
    encoders insert every 76 characters, is tolerated. Raises :class:`ValueError`."""
    raw = text.encode("ascii", "strict") if isinstance(text, str) else text
    try:
        return binascii.a2b_base64(raw, strict_mode=True)
    except binascii.Error:
        try:
            return binascii.a2b_base64(_SPACE.sub(b"", raw), strict_mode=True)
        except binascii.Error as exc:
            raise ValueError(f"not valid base64 ({exc})") from None


_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def base64_size(data: str | bytes) -> int | None:
    """The decoded size of strict base64 (standard alphabet, padding only at the end, a whole
    number of quads; whitespace tolerated), or ``None`` when it is not base64.

    One pass in C (``bytes.translate``) and no decoding: a 1 MB image is checked for a few
    copies' worth of CPU (bench/README.md, Embeddings and images).
    """
    try:
        raw = data.encode("ascii") if isinstance(data, str) else bytes(data)
    except UnicodeEncodeError:
        return None
    stray = raw.translate(None, _ALPHABET + b"=")
    if stray:
        if stray.strip():  # not only whitespace (MIME-style line breaks)
            return None
        raw = _SPACE.sub(b"", raw)
    n = len(raw)
    if n % 4:
        return None
    pad = 2 if raw.endswith(b"==") else 1 if raw.endswith(b"=") else 0
    if raw.find(b"=", 0, n - pad) != -1:
        return None
    return n // 4 * 3 - pad


def image_problem(data: str | bytes, declared: str | None, limit: int) -> str | None:
    """What is wrong with one base64 image (``None`` if nothing): not base64, over ``limit``
    decoded bytes, empty, or the bytes of another format than the ``declared`` MIME type
    (told by the magic number of the first decoded bytes)."""
    if len(data) // 4 * 3 > limit + 3:  # refuse before anything else: base64 is 4 chars per 3 bytes
        return f"image is over the limit of {limit} bytes ({len(data)} base64 characters)"
    size = base64_size(data)
    if size is None:
        return "image data is not valid base64"
    if size > limit:
        return f"image is {size} bytes, over the limit of {limit}"
    if not size:
        return "image data is empty"
    mime = _ALIASES.get((declared or "").lower(), (declared or "").lower())
    if mime in CHECKED:
        head = data[:32].encode() if isinstance(data, str) else bytes(data[:32])
        actual = sniff(binascii.a2b_base64(_SPACE.sub(b"", head)[:24]))
        if actual != mime:
            what = f"a {actual.split('/')[1].upper()} image" if actual else "not an image format we recognise"
            return f"declared {declared} but the bytes are {what}"
    return None


# --------------------------------------------------------------------------- OpenAI's Images stream

PARTIAL = "image_generation.partial_image"
COMPLETED = "image_generation.completed"
OUTPUT_FORMATS = ("png", "jpeg", "webp")
MAX_IMAGE_BYTES = 64 * 1024 * 1024  # one image in an Images answer


class ImageEvent:
    """One partial or final image, in the Images stream's terms.

    From :class:`ImageStreamDecoder`, the base64 stays inside ``raw`` (the upstream's SSE
    event, relayed as it came) and ``b64_json`` is cut out of it only when read: the relay
    path never makes a second megabyte-sized copy of it.
    """

    __slots__ = (
        "_b64",
        "_span",
        "b64_bytes",
        "background",
        "index",
        "output_format",
        "quality",
        "raw",
        "revised_prompt",
        "size",
        "type",
        "url",
        "usage",
    )

    def __init__(
        self,
        type: str,  # PARTIAL | COMPLETED
        b64_json: str | None,
        index: int = 0,  # partial_image_index for a partial; the image's number for a completed one
        output_format: str = "png",
        size: str | None = None,
        quality: str | None = None,
        background: str | None = None,
        usage: dict[str, Any] | None = None,
        url: str | None = None,  # dall-e answers with URLs when asked
        revised_prompt: str | None = None,
        raw: bytes | None = None,  # the upstream's SSE event, to relay untouched when it checked out
        span: tuple[int, int] | None = None,  # where the base64 sits in ``raw``, when b64_json is None
        b64_bytes: bytes | None = None,  # the base64 as ASCII bytes (checked), when b64_json is None
    ) -> None:
        self.type, self._b64, self.index, self.output_format = type, b64_json, index, output_format
        self.size, self.quality, self.background, self.usage = size, quality, background, usage
        self.url, self.revised_prompt, self.raw, self._span = url, revised_prompt, raw, span
        self.b64_bytes = b64_bytes

    @property
    def b64_json(self) -> str | None:
        if self._b64 is None:
            if self._span is not None and self.raw is not None:
                self._b64 = self.raw[self._span[0] : self._span[1]].decode("ascii")
            elif self.b64_bytes is not None:
                self._b64 = self.b64_bytes.decode("ascii")
        return self._b64

    @property
    def data(self) -> bytes:
        """The image's bytes (empty for a URL-only image)."""
        b64 = self.b64_json
        return decode_base64(b64) if b64 else b""

    def __repr__(self) -> str:
        size = self._span[1] - self._span[0] if self._span else len(self._b64 or self.b64_bytes or "")
        return f"ImageEvent({self.type!r}, index={self.index}, {self.output_format}, {size} base64 chars)"


class ImageStreamDecoder:
    """Sans-I/O: an OpenAI Images SSE body in, checked :class:`ImageEvent` (or a hub error) out.

    Each partial and final image is checked (strict base64, the magic number against
    ``output_format``) and keeps its upstream bytes in ``raw`` so that it is relayed as it
    came. A missing ``[DONE]`` after a completed image is forgiven (OpenAI's own stream ends
    without one); a body that ends before any completed image is an ``incomplete_stream`` error.

    Events here are large (a partial image is ~1 MB of base64 on one ``data:`` line), so the
    common framing (LF line ends, one data line) is cut with ``bytes.find`` and the image is
    sliced out of the JSON rather than parsed as a 1 MB string; anything else (CR line ends,
    comments, several data lines) goes through the full WHATWG decoder (``llmbridge.sse``).
    """

    def __init__(self, upstream: str, max_event_bytes: int | None = None) -> None:
        self.upstream = upstream
        # One event larger than this ends the stream (what one stream may hold in memory).
        self.max_event_bytes = max_event_bytes or MAX_IMAGE_BYTES * 2
        self.completed = 0
        self.finished = False  # an error or [DONE] was seen
        self._parts: list[bytes] = []
        self._size = 0
        self._sse: sse.Decoder | None = None  # the slow path, for a body with CR line ends
        self._seen = 0  # bytes fed on the fast path

    def feed(self, chunk: bytes) -> list[ImageEvent | hub.Error]:
        if self.finished:
            return []
        # A server that ends lines with CR or CRLF does so from its first bytes on: only the
        # start of the body is looked at, so a 1 MB event is not scanned once more for it.
        if self._sse is None and not self._seen and 13 in chunk[:4096]:
            self._sse = sse.Decoder()
            pending, self._parts, self._size = b"".join(self._parts), [], 0
            return self._from_sse(self._sse.feed(pending + chunk))
        if self._sse is not None:
            return self._from_sse(self._sse.feed(chunk))
        self._seen += len(chunk)
        self._parts.append(chunk)
        self._size += len(chunk)
        # (an int membership test is a memchr; a bytes needle is a much slower search, and the
        # chunks of a base64 line hold no newline at all)
        if 10 not in chunk or (not sse.has_blank_line(chunk) and not (chunk[:1] == b"\n" and len(self._parts) > 1)):
            if self._size > self.max_event_bytes:
                return [self._broken(f"an event larger than {self.max_event_bytes} bytes")]
            return []
        # One join per event (its chunks), then only index arithmetic until the image is sliced out.
        buffer = b"".join(self._parts) if len(self._parts) > 1 else chunk
        out: list[ImageEvent | hub.Error] = []
        start = 0
        pos = start
        while not self.finished:
            end = buffer.find(b"\n", pos)  # memchr: a 1 MB line is skipped at memory speed
            if end == -1 or end + 1 >= len(buffer):
                break
            if buffer[end + 1] != 10:
                pos = end + 1
                continue
            out += self._block(buffer, start, end)
            start = pos = end + 2
        rest = buffer[start:] if start < len(buffer) and not self.finished else b""
        self._parts, self._size = ([rest], len(rest)) if rest else ([], 0)
        return out

    def close(self) -> list[ImageEvent | hub.Error]:
        out: list[ImageEvent | hub.Error] = []
        if self._sse is not None:
            out = self._from_sse(self._sse.close())
        elif self._parts and not self.finished:
            last = b"".join(self._parts).rstrip(b"\n")  # a last event without its blank line
            out = self._block(last, 0, len(last))
            if out and isinstance(out[-1], hub.Error) and out[-1].type == "protocol_error":
                out.pop()  # it was cut short: the body ended mid-event
                self.finished = False
        self._parts = []
        if not self.finished and not self.completed:
            message = f"upstream {self.upstream!r} ended before the image was complete"
            out.append(hub.Error(message, "incomplete_stream", status=502))
            self.finished = True
        return out

    # -- framing

    def _block(self, buffer: bytes, start: int, end: int) -> list[ImageEvent | hub.Error]:
        """The event in ``buffer[start:end]`` (LF-separated lines, without the blank line)."""
        event, data = "message", None
        pos = start
        while pos < end:
            nl = buffer.find(b"\n", pos, end)
            stop = end if nl == -1 else nl
            if buffer.startswith(b"data:", pos, stop):
                if data is not None:  # several data lines: let the full decoder join them
                    return self._from_sse(sse.Decoder().feed(buffer[start:end] + b"\n\n"))
                first = pos + 5
                data = (first + 1 if buffer.startswith(b" ", first, stop) else first, stop)
            elif buffer.startswith(b"event:", pos, stop):
                event = buffer[pos + 6 : stop].strip().decode("utf-8", "replace")
            pos = stop + 1
        if data is None:
            return []
        return self._event(event, buffer, data[0], data[1], (start, end + 2))

    def _from_sse(self, events: list[sse.Event]) -> list[ImageEvent | hub.Error]:
        out: list[ImageEvent | hub.Error] = []
        for e in events:
            if self.finished:
                break
            data = e.data.encode()
            out += self._event(e.event, data, 0, len(data), None)
        return out

    # -- one event

    def _event(
        self, name: str, buffer: bytes, d0: int, d1: int, raw: tuple[int, int] | None
    ) -> list[ImageEvent | hub.Error]:
        """The event whose data is ``buffer[d0:d1]``; ``raw`` is its whole span, to relay."""
        if d1 - d0 == 6 and buffer.startswith(b"[DONE]", d0):
            self.finished = True
            return []
        span, obj = _split_image(buffer, d0, d1)
        if not isinstance(obj, dict):
            return [self._broken("an event that is not a JSON object")]
        kind = obj.get("type")
        if kind == "error" or name == "error":
            self.finished = True
            return [_error(obj)]
        if kind not in (PARTIAL, COMPLETED):
            return []  # other event types: ignore, as the spec says
        fmt = str(obj["output_format"]) if obj.get("output_format") in OUTPUT_FORMATS else "png"
        problem: str | None
        if span is None:
            problem = "no b64_json"
        elif isinstance(span, bytes):  # the full parse: the image is its own object
            problem = image_problem(span, f"image/{fmt}", MAX_IMAGE_BYTES)
        else:
            problem = _image_in(buffer, span, f"image/{fmt}")
        if problem:
            return [self._broken(f"a broken image ({problem})")]
        index = obj.get("partial_image_index", self.completed) if kind == PARTIAL else self.completed
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
        b64: str | None = None
        where: tuple[int, int] | None = None
        if isinstance(span, bytes):
            b64 = span.decode("ascii")
            wire = b"event: " + kind.encode() + b"\ndata: " + buffer[d0:d1] + b"\n\n"
        elif raw is not None and raw == (0, len(buffer)):  # the usual case: the event is the buffer
            wire, where = buffer, span
        else:
            assert span is not None  # (a None span was a problem above)
            first = raw[0] if raw is not None else d0
            wire = buffer[first : raw[1]] if raw is not None else buffer[d0:d1]
            where = (span[0] - first, span[1] - first)
            if raw is None:
                wire = b"event: " + kind.encode() + b"\ndata: " + wire + b"\n\n"
                where = (where[0] + len(kind) + 14, where[1] + len(kind) + 14)
        event = ImageEvent(
            kind,
            b64,
            index if type(index) is int else 0,
            fmt,
            obj.get("size"),
            obj.get("quality"),
            obj.get("background"),
            usage,
            raw=wire,
            span=where,
        )
        if kind == COMPLETED:
            self.completed += 1
        return [event]

    def _broken(self, what: str) -> hub.Error:
        self.finished = True
        return hub.Error(f"upstream {self.upstream!r} sent {what}", "protocol_error", "bad_upstream_image", 502)


_KEY = b'"b64_json"'


def _split_image(buffer: bytes, d0: int, d1: int) -> tuple[tuple[int, int] | bytes | None, Any]:
    """Where the image's base64 is in the JSON of ``buffer[d0:d1]`` (a ``(start, end)`` span;
    found without scanning it as a JSON string: base64 has no quote to end it early, and an
    escape in it sends us to the full parse, which returns the base64 as bytes), and the rest
    of the object; ``(None, None)`` when it is not JSON."""
    at = buffer.find(_KEY, d0, d1)
    if at != -1:
        quote = buffer.find(b'"', at + len(_KEY), d1)
        end = buffer.find(b'"', quote + 1, d1) if quote != -1 else -1
        if end != -1 and buffer[at + len(_KEY) : quote].strip() == b":" and buffer.find(b"\\", quote, end) == -1:
            try:
                rest = json_decode(buffer[d0:at] + b'"b64_json":null' + buffer[end + 1 : d1])
            except msgspec.DecodeError:
                return None, None
            return (quote + 1, end), rest
    try:
        obj = json_decode(buffer[d0:d1])
    except msgspec.DecodeError:
        return None, None
    b64 = obj.get("b64_json") if isinstance(obj, dict) else None
    return (b64.encode() if isinstance(b64, str) else None), obj


def _image_in(buffer: bytes, span: tuple[int, int], declared: str) -> str | None:
    """:func:`image_problem` for the base64 at ``buffer[span]``, without copying it out: one
    ``translate`` pass over the whole buffer finds every byte outside the base64 alphabet,
    and those must all lie outside the span (the JSON around it is short)."""
    a, b = span
    if (b - a) // 4 * 3 > MAX_IMAGE_BYTES + 3:
        return f"image is over the limit of {MAX_IMAGE_BYTES} bytes"
    keep = _ALPHABET + b"="
    if buffer.translate(None, keep) != buffer[:a].translate(None, keep) + buffer[b:].translate(None, keep):
        return "image data is not valid base64"
    n = b - a
    pad = 2 if buffer.startswith(b"==", b - 2, b) else 1 if buffer.startswith(b"=", b - 1, b) else 0
    if n % 4 or buffer.find(b"=", a, b - pad) != -1:
        return "image data is not valid base64"
    if n == 0:
        return "image data is empty"
    return (
        image_problem(buffer[a : a + min(n, 64)], declared, MAX_IMAGE_BYTES)
        if n > 64
        else image_problem(buffer[a:b], declared, MAX_IMAGE_BYTES)
    )


def _error(obj: dict[str, Any]) -> hub.Error:
    err: dict[str, Any] = obj["error"] if isinstance(obj.get("error"), dict) else obj
    status = 400 if err.get("type") == "invalid_request_error" else 502
    message = str(err.get("message") or "upstream error")
    return hub.Error(message, hub.error_type_for_status(status), err.get("code"), status, body=obj)
