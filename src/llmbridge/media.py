"""Images as data, sans-I/O: checks on image bytes (base64 that decodes, a declared MIME type
that matches the magic number, a size limit) and OpenAI's Images stream read into
:class:`ImageEvent` values. Used by the gateway (images coming in and coming back from an
upstream) and by the client SDK (``Client.images``).
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from . import hub, sse
from .dialects.base import json_decode

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


def image_problem(data: str, declared: str | None, limit: int) -> str | None:
    """What is wrong with one base64 image (``None`` if nothing): not base64, over ``limit``
    decoded bytes, or bytes of another format than the ``declared`` MIME type."""
    if len(data) // 4 * 3 > limit + 3:  # refuse before decoding: base64 is 4 chars per 3 bytes
        return f"image is {len(data) // 4 * 3} bytes, over the limit of {limit}"
    try:
        raw = decode_base64(data)
    except (ValueError, UnicodeEncodeError):
        return "image data is not valid base64"
    if len(raw) > limit:
        return f"image is {len(raw)} bytes, over the limit of {limit}"
    if not raw:
        return "image data is empty"
    mime = _ALIASES.get((declared or "").lower(), (declared or "").lower())
    if mime in CHECKED:
        actual = sniff(raw)
        if actual != mime:
            what = f"a {actual.split('/')[1].upper()} image" if actual else "not an image format we recognise"
            return f"declared {declared} but the bytes are {what}"
    return None


# --------------------------------------------------------------------------- OpenAI's Images stream

PARTIAL = "image_generation.partial_image"
COMPLETED = "image_generation.completed"
OUTPUT_FORMATS = ("png", "jpeg", "webp")
MAX_IMAGE_BYTES = 64 * 1024 * 1024  # one image in an Images answer


@dataclass
class ImageEvent:
    """One partial or final image, in the Images stream's terms."""

    type: str  # PARTIAL | COMPLETED
    b64_json: str | None
    index: int = 0  # partial_image_index for a partial; the image's number for a completed one
    output_format: str = "png"
    size: str | None = None
    quality: str | None = None
    background: str | None = None
    usage: dict[str, Any] | None = None
    url: str | None = None  # dall-e answers with URLs when asked
    revised_prompt: str | None = None
    raw: bytes | None = None  # the upstream's SSE event, to relay untouched when it checked out

    @property
    def data(self) -> bytes:
        """The image's bytes (empty for a URL-only image)."""
        return decode_base64(self.b64_json) if self.b64_json else b""


class ImageStreamDecoder:
    """Sans-I/O: an OpenAI Images SSE body in, checked :class:`ImageEvent` (or a hub error) out.

    Each partial and final image is checked (base64, magic number against ``output_format``)
    and keeps its upstream bytes in ``raw`` so that it is relayed as it came. A missing
    ``[DONE]`` after a completed image is forgiven (OpenAI's own stream ends without one);
    a body that ends before any completed image is an ``incomplete_stream`` error.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._sse = sse.Decoder()
        self.completed = 0
        self.finished = False  # an error or [DONE] was seen

    def feed(self, chunk: bytes) -> list[ImageEvent | hub.Error]:
        return self._events(self._sse.feed(chunk))

    def close(self) -> list[ImageEvent | hub.Error]:
        out = self._events(self._sse.close())
        if not self.finished and not self.completed:
            out.append(
                hub.Error(
                    f"upstream {self.upstream!r} ended before the image was complete", "incomplete_stream", status=502
                )
            )
            self.finished = True
        return out

    def _events(self, events: list[sse.Event]) -> list[ImageEvent | hub.Error]:
        out: list[ImageEvent | hub.Error] = []
        for e in events:
            if self.finished:
                break
            if e.data == "[DONE]":
                self.finished = True
                break
            try:
                obj = json_decode(e.data)
            except msgspec.DecodeError:
                out.append(self._broken("an event that is not JSON"))
                break
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind == "error" or e.event == "error":
                err = obj.get("error") if isinstance(obj, dict) and isinstance(obj.get("error"), dict) else obj
                err = err if isinstance(err, dict) else {}
                status = 400 if err.get("type") == "invalid_request_error" else 502
                out.append(
                    hub.Error(
                        str(err.get("message") or "upstream error"),
                        hub.error_type_for_status(status),
                        err.get("code"),
                        status,
                        body=obj,
                    )
                )
                self.finished = True
                break
            if kind not in (PARTIAL, COMPLETED):
                continue  # other event types: ignore, as the spec says
            fmt = obj.get("output_format") if obj.get("output_format") in OUTPUT_FORMATS else "png"
            b64 = obj.get("b64_json")
            problem = image_problem(b64, f"image/{fmt}", MAX_IMAGE_BYTES) if isinstance(b64, str) else "no b64_json"
            if problem:
                out.append(self._broken(f"a broken image ({problem})"))
                break
            index = obj.get("partial_image_index", self.completed) if kind == PARTIAL else self.completed
            raw = b"event: " + kind.encode() + b"\ndata: " + e.data.encode() + b"\n\n"
            usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
            out.append(
                ImageEvent(
                    kind,
                    b64,
                    index if type(index) is int else 0,
                    fmt,
                    obj.get("size"),
                    obj.get("quality"),
                    obj.get("background"),
                    usage,
                    raw=raw,
                )
            )
            if kind == COMPLETED:
                self.completed += 1
        return out

    def _broken(self, what: str) -> hub.Error:
        self.finished = True
        return hub.Error(f"upstream {self.upstream!r} sent {what}", "protocol_error", "bad_upstream_image", 502)
