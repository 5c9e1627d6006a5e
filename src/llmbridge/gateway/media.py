"""Checks on image bytes: base64 that decodes, a declared MIME type that matches the bytes'
magic number, a size limit. Used on images coming in (every dialect's request, after it is
read into the hub) and on images coming back from an upstream (``/v1/images``).
"""

from __future__ import annotations

import binascii
import re

from .. import hub

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


def check_images(request: hub.Request, limit: int) -> str | None:
    """The first problem with an inline image of ``request`` (tool results included), as a
    message naming where it is, or ``None``."""
    for m, message in enumerate(request.messages):
        for p, part in enumerate(message.parts):
            parts = part.content if isinstance(part, hub.ToolResultPart) else [part]
            for part_ in parts:
                if isinstance(part_, hub.ImagePart) and part_.data is not None:
                    problem = image_problem(part_.data, part_.media_type, limit)
                    if problem:
                        return f"messages[{m}].content[{p}]: {problem}"
    return None
