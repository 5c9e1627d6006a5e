"""Server-sent events: an incremental decoder and an encoder.

The decoder follows the WHATWG "event stream interpretation" algorithm
(https://html.spec.whatwg.org/multipage/server-sent-events.html) exactly:
LF, CR and CRLF line ends, comments, multi-line ``data``, ``event``, ``id``
(ignored when it holds NUL), ``retry`` (digits only), one leading BOM, and
UTF-8 decoded with replacement.  It is sans-I/O: feed it byte chunks split
anywhere (inside a CRLF, inside a UTF-8 character) and it returns the same
events however the bytes were split.

One deliberate addition to the standard: the standard discards a last event
that is not followed by a blank line.  Real providers send such streams, so
``close()`` dispatches it and sets ``unterminated`` so callers can report it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Event", "Decoder", "encode", "encode_comment"]

_BOM = b"\xef\xbb\xbf"


class Event(NamedTuple):
    """One dispatched event. ``id`` is the last event ID in force when it was dispatched."""

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


class Decoder:
    """Bytes in, :class:`Event` out. Call :meth:`feed` per chunk and :meth:`close` at end of input."""

    __slots__ = ("_buf", "_scan", "_skip_lf", "_bom_done", "last_id", "retry", "comments", "unterminated")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # where to resume searching for a blank line
        self._skip_lf = False  # a chunk ended in CR: a LF at the start of the next belongs to it
        self._bom_done = False
        self.last_id = ""
        self.retry: int | None = None
        self.comments = 0  # comment lines seen (keep-alives, OpenRouter's ": PROCESSING")
        self.unterminated = False  # close() dispatched an event that had no blank line after it

    def feed(self, chunk: bytes) -> list[Event]:
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            # Normalise line ends to LF; a trailing CR may be the first half of a CRLF.
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf
        buf += chunk
        if not self._bom_done:
            if len(buf) < 3 and _BOM.startswith(bytes(buf)):
                return []  # could still become a BOM
            if buf.startswith(_BOM):
                del buf[:3]
            self._bom_done = True
        end = buf.rfind(b"\n\n", self._scan)
        if end < 0:
            self._scan = max(0, len(buf) - 1)
            return []
        blocks = bytes(buf[:end]).split(b"\n\n")
        del buf[: end + 2]
        self._scan = 0
        events = []
        for block in blocks:
            event = self._block(block)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[Event]:
        """End of input: dispatch a last event that was not followed by a blank line."""
        if not self._bom_done and self._buf.startswith(_BOM):
            del self._buf[:3]
        self._bom_done = True
        block = bytes(self._buf).rstrip(b"\n")
        self._buf.clear()
        self._scan = 0
        if not block:
            return []
        event = self._block(block)
        if event is None:
            return []
        self.unterminated = True
        return [event]

    def _block(self, block: bytes) -> Event | None:
        """Interpret the lines of one event block (its blank line already consumed)."""
        text = block.decode("utf-8", "replace")
        data: list[str] = []
        event_type = ""
        retry = None
        for line in text.split("\n"):
            if line.startswith("data:"):  # the hot path
                data.append(line[6:] if line[5:6] == " " else line[5:])
                continue
            if not line:
                continue  # only a leading empty line reaches here: it dispatches nothing
            colon = line.find(":")
            if colon == 0:
                self.comments += 1
                continue
            if colon < 0:
                field, value = line, ""
            else:
                field, value = line[:colon], line[colon + 1 :]
                if value[:1] == " ":
                    value = value[1:]
            if field == "event":
                event_type = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                if "\0" not in value:
                    self.last_id = value
            elif field == "retry":
                if value.isascii() and value.isdigit():
                    self.retry = retry = int(value)
        if not data:
            return None
        return Event(event_type or "message", "\n".join(data), self.last_id, retry)


def encode(data: str, event: str | None = None, id: str | None = None, retry: int | None = None) -> bytes:
    """One event as bytes; multi-line data becomes several ``data:`` lines."""
    parts = []
    if event:
        parts.append(f"event: {event}\n")
    if id is not None:
        parts.append(f"id: {id}\n")
    if retry is not None:
        parts.append(f"retry: {retry}\n")
    if "\n" in data or "\r" in data:
        for line in data.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
            parts.append(f"data: {line}\n")
    else:
        parts.append(f"data: {data}\n")
    parts.append("\n")
    return "".join(parts).encode()


def encode_comment(text: str = "") -> bytes:
    """A comment line, as used for keep-alives."""
    return b"".join(b": " + line.encode() + b"\n" for line in text.split("\n")) + b"\n"
