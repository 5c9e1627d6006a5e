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

import msgspec

__all__ = [
    "Decoder",
    "Event",
    "EventBoundaries",
    "encode",
    "encode_comment",
    "has_blank_line",
    "last_event_end",
    "marked_events",
    "next_event_end",
    "normalise_cr",
    "split_events",
]

_BOM = b"\xef\xbb\xbf"
# Above this size a chunk is searched for line ends with memchr (``bytes.find`` of one byte),
# not with a two-byte needle: CPython's general search looks at every byte (~1.5 ns each),
# and a 256 KiB read of a base64 image holds only a line end or two.
_BIG = 4096
# ... but only where line ends are sparse: a chunk of ordinary events (a line end every few
# dozen bytes) is split fastest by C's own str.split, and a Python loop over its line ends
# would cost more than the search it saves.  More line ends than this in a big chunk's first
# _BIG bytes picks the plain path; counting them there is cheap.
_SPARSE = 8


def _sparse(chunk: bytes, byte: int) -> bool:
    """Whether ``chunk`` is big and ``byte`` rare at its start (the memchr paths pay off)."""
    return len(chunk) >= _BIG and chunk.count(byte, 0, _BIG) <= _SPARSE


def has_blank_line(chunk: bytes) -> bool:
    """Whether ``chunk`` holds ``\\n\\n`` (at memchr speed for a big chunk with few line ends)."""
    if not _sparse(chunk, 10):
        return b"\n\n" in chunk
    at = chunk.find(10)
    while at != -1:
        if chunk.startswith(b"\n", at + 1):
            return True
        at = chunk.find(10, at + 1)
    return False


def _blank_line_spans(data: bytes) -> list[tuple[int, int]]:
    """Where the pieces of ``data.split(b"\\n\\n")`` are, finding the line ends with memchr."""
    out: list[tuple[int, int]] = []
    start = 0
    at = data.find(10)
    while at != -1:
        if data.startswith(b"\n", at + 1):
            out.append((start, at))
            start = at + 2
            at = data.find(10, start)
        else:
            at = data.find(10, at + 1)
    out.append((start, len(data)))
    return out


def normalise_cr(chunk: bytes) -> bytes:
    """CRLF and lone CR line ends as LF (a CR at the very end becomes LF; the caller drops
    the LF that may open the next chunk). A big chunk is cut at its few CRs with memchr."""
    if not _sparse(chunk, 13):
        chunk = chunk.replace(b"\r\n", b"\n")
        return chunk.replace(b"\r", b"\n") if 13 in chunk else chunk
    parts: list[bytes] = []
    start = 0
    at = chunk.find(13)
    while at != -1:
        parts.append(chunk[start:at])
        start = at + 2 if chunk.startswith(b"\n", at + 1) else at + 1
        parts.append(b"\n")
        at = chunk.find(13, start)
    parts.append(chunk[start:])
    return b"".join(parts)


class Event(msgspec.Struct, frozen=True, gc=False):
    """One dispatched event. ``id`` is the last event ID in force when it was dispatched."""

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


class Decoder:
    """Bytes in, :class:`Event` out. Call :meth:`feed` per chunk and :meth:`close` at end of input."""

    __slots__ = ("_bom_done", "_last_lf", "_pending", "_skip_lf", "comments", "last_id", "retry", "unterminated")

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # bytes after the last blank line, line ends normalised to LF
        self._last_lf = False  # the pending bytes end with LF: a LF at the start of the next chunk ends a block
        self._skip_lf = False  # a chunk ended in CR: a LF at the start of the next belongs to it
        self._bom_done = False
        self.last_id = ""
        self.retry: int | None = None
        self.comments = 0  # comment lines seen (keep-alives, OpenRouter's ": PROCESSING")
        self.unterminated = False  # close() dispatched an event that had no blank line after it

    def feed(self, chunk: bytes) -> list[Event]:
        # (int membership is a memchr: much cheaper than a bytes needle)
        if self._skip_lf or 13 in chunk or not self._bom_done:
            if (
                not (self._bom_done or self._skip_lf or self._pending)
                and chunk[:1] not in (b"", b"\xef")
                and 13 not in chunk
            ):
                # The first chunk of nearly every stream: no BOM can start it (nor a CR be in
                # it), so _prepare would only say the BOM is done.
                self._bom_done = True
            else:
                chunk = self._prepare(chunk)
        if not chunk:
            return []
        # Most chunks end no event: keep them and return at once (the hot path for small chunks).
        # (the small-chunk test inline: a function call per chunk shows at 64-byte pieces)
        # A chunk that ends with its blank line (an upstream writing one event per chunk) ends
        # one: endswith answers at once, where a two-byte ``in`` looks at every byte (~0.25 µs
        # for a 140-byte chat chunk).
        if 10 not in chunk or (
            not chunk.endswith(b"\n\n")
            and (b"\n\n" not in chunk if len(chunk) < _BIG else not has_blank_line(chunk))
            and not (self._last_lf and chunk[0] == 10)
        ):
            self._pending.append(chunk)
            self._last_lf = chunk[-1] == 10
            return []
        pending = self._pending
        if pending:
            pending.append(chunk)
            chunk = b"".join(pending)
            pending.clear()
        end = chunk.rfind(b"\n\n")
        rest = chunk[end + 2 :]
        if rest:
            pending.append(rest)
            self._last_lf = rest[-1] == 10
        else:
            self._last_lf = False
        # One decode for all complete blocks: UTF-8 never puts a LF inside a character,
        # so splitting the text on blank lines is the same as splitting the bytes.
        # (when nothing follows the last blank line, decode it all: a trailing "" block is a no-op)
        whole = chunk[:end] if rest else chunk
        if len(whole) >= _BIG and _sparse(whole, 10):
            # str.split("\n\n") looks at every character; cut at the few line ends instead
            view = memoryview(whole)  # each block decoded straight from the buffer: no bytes copy of it first
            return self._events([str(view[a:b], "utf-8", "replace") for a, b in _blank_line_spans(whole)])
        text = whole.decode("utf-8", "replace")
        if text[:6] == "data: ":
            # The read of nearly every stream: "data: X" events only (one, or an unpaced
            # upstream's several).  Split on the blank line and the next "data: " at once, the
            # pieces are the events' data, and no piece holds a line end exactly when every
            # block is one "data: " line: what _events would give, without its per-block steps.
            datas = (text[6:] if rest else text[6:-2]).split("\n\ndata: ")
            for data in datas:
                if "\n" in data:
                    break  # another kind of block among them: the general loop
            else:
                last_id = self.last_id
                return [Event("message", data, last_id, None) for data in datas]
        return self._events(text.split("\n\n"))

    def _events(self, blocks: list[str]) -> list[Event]:
        """The events of ``blocks`` (the text between blank lines), in order; updates the
        last event ID, retry and comment count as the blocks say."""
        events: list[Event] = []
        last_id = self.last_id
        append = events.append
        for block in blocks:
            # Fast paths for the two shapes providers send: "data: X" and "event: E\ndata: X".
            if block[:6] == "data: ":
                if "\n" not in block:
                    append(Event("message", block[6:], last_id, None))
                    continue
            elif block[:7] == "event: ":
                head, _, line = block.partition("\n")
                if line[:6] == "data: " and len(head) > 7 and "\n" not in line:
                    append(Event(head[7:], line[6:], last_id, None))
                    continue
            elif not block:  # the "" after a read's last blank line: _block would dispatch nothing
                continue
            event = self._block(block)
            last_id = self.last_id
            if event is not None:
                events.append(event)
        return events

    def _prepare(self, chunk: bytes) -> bytes:
        """The rare cases: CR line ends (also split across chunks) and the leading BOM."""
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 10:
                chunk = chunk[1:]
        if 13 in chunk:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = normalise_cr(chunk)
        if not self._bom_done and chunk:
            head = b"".join(self._pending) + chunk if self._pending else chunk
            if len(head) < 3 and _BOM.startswith(head):
                self._pending[:] = [head]  # could still become a BOM
                return b""
            self._pending.clear()
            self._bom_done = True
            chunk = head[3:] if head.startswith(_BOM) else head
        return chunk

    def close(self) -> list[Event]:
        """End of input: dispatch a last event that was not followed by a blank line."""
        block = b"".join(self._pending)
        if not self._bom_done and block.startswith(_BOM):
            block = block[3:]
        self._bom_done = True
        self._pending.clear()
        self._last_lf = False
        block = block.rstrip(b"\n")
        if not block:
            return []
        event = self._block(block.decode("utf-8", "replace"))
        if event is None:
            return []
        self.unterminated = True
        return [event]

    def _block(self, text: str) -> Event | None:
        """Interpret the lines of one event block (its blank line already consumed)."""
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
            elif field == "retry" and value.isascii() and value.isdigit():
                self.retry = retry = int(value)
        if not data:
            return None
        return Event(event_type or "message", "\n".join(data), self.last_id, retry)


def encode(data: str, event: str | None = None, id: str | None = None, retry: int | None = None) -> bytes:
    """One event as bytes; multi-line data becomes several ``data:`` lines.

    Raises ``UnicodeEncodeError`` for text UTF-8 cannot hold (lone surrogates).
    """
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


# --------------------------------------------------------------------------- scanning raw SSE bytes
#
# What a relay needs without decoding: where whole events end (so it can send only whole
# events, and cap the one still open), where the events holding a marker are (so its watcher
# decodes only those), and events one by one (a rewrite of one kind of event). The decoder
# above normalises line ends first; these work on the bytes as they came, every line-end
# style included, since a relay must send them untouched.


class EventBoundaries:
    """Where complete SSE events end, found looking at each byte once; and the cap on one event.

    An event ends with a blank line: two line ends in a row, each one of CRLF, LF or CR.
    :meth:`feed` returns the offset just past the last event end in the new bytes (or -1), and
    keeps the last three bytes so that a blank line split across reads is still found.
    ``pending`` is the size of the event still open; it is what the cap bounds.
    """

    _ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r\n")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.pending = 0
        self._tail = b""

    def feed(self, data: bytes) -> int:
        n = len(data)
        if n < _BIG and 13 not in data:  # last_event_end's LF-only case, without the call
            end = data.rfind(b"\n\n")
            if end >= 0:
                end += 2
        else:
            end = last_event_end(data, 0, n)
        tail = self._tail
        if end < 0 and tail:
            # No blank line inside ``data``: one may have begun in the last read's final bytes.
            joint = tail + data[:3]
            for sep in self._ENDS:
                for i in range(len(tail)):
                    if joint.startswith(sep, i) and i + len(sep) > len(tail):
                        end = max(end, i + len(sep) - len(tail))
        self._tail = data[-3:] if len(data) >= 3 else (tail + data)[-3:]
        if end >= 0:
            self.pending = len(data) - end
            return end
        self.pending += len(data)
        return -1

    @property
    def over(self) -> bool:
        return self.pending > self.cap


def marked_events(data: bytes, start: int, markers: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """(begin, end) of each whole event of ``data[start:]`` holding a marker, in order, merged.

    ``data[start:]`` is whole events.  Each marker is searched for in C (``bytes.find``), and
    only around a hit are event boundaries looked for, so a stretch without markers costs
    one pass per marker and nothing per event.  Huge events (a base64 image) go event by
    event instead (:func:`_marked_huge`).
    """
    if len(data) - start > _HUGE_EVENT and next_event_end(data, start) - start > _HUGE_EVENT:
        return _marked_huge(data, start, markers)
    hits = []
    for marker in markers:
        at = data.find(marker, start)
        while at >= 0:
            hits.append(at)
            at = data.find(marker, at + len(marker))
    if not hits:
        return []
    hits.sort()
    spans: list[tuple[int, int]] = []
    if len(data) - start < _BIG and data.find(13, start) < 0:
        # LF line ends only (nearly every stream): last_event_end and next_event_end would each
        # search for the one separator; searched here, without two calls per hit
        n = len(data)
        for at in hits:
            if spans and at < spans[-1][1]:
                continue
            begin = data.rfind(b"\n\n", start, at)
            end = data.find(b"\n\n", at)
            spans.append((begin + 2 if begin >= 0 else start, end + 2 if end >= 0 else n))
        return spans
    for at in hits:
        if spans and at < spans[-1][1]:
            continue  # inside the event already taken
        begin = max(start, last_event_end(data, start, at))
        spans.append((begin, next_event_end(data, at)))
    return spans


# An event larger than this (a base64 image: a Responses partial image, a chat chunk with an
# image in our extension) is skimmed for markers only in its first and last _WINDOW bytes:
# the event name, the JSON "type", and what follows a big string value (finish_reason,
# usage) sit there, while nine marker passes over a megabyte of base64 cost ~3 ms.  A marker
# deep inside such an event is inside its payload, not structure the watcher needs.
_HUGE_EVENT = 64 * 1024
_WINDOW = 4096


def _marked_huge(data: bytes, start: int, markers: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """:func:`marked_events` event by event, for reads that begin with a huge event; back to
    the marker passes once the events are small again."""
    spans: list[tuple[int, int]] = []
    begin, n = start, len(data)
    while begin < n:
        end = next_event_end(data, begin)
        if end - begin <= _HUGE_EVENT:  # small events from here on: the usual passes
            return spans + marked_events(data, begin, markers)
        windows = ((begin, begin + _WINDOW), (end - _WINDOW, end))
        if any(data.find(marker, a, b) >= 0 for a, b in windows for marker in markers):
            spans.append((begin, end))
        begin = end
    return spans


# Above _BIG bytes (see the top of this module), blank lines are found by visiting the line
# ends with memchr (``bytes.find``/``rfind`` of one byte) instead of searching for each
# two-to-four-byte separator: a read of a base64 image (a Responses partial image, a Gemini
# inlineData part) holds few line ends.


def last_event_end(data: bytes, start: int, stop: int) -> int:
    """The offset just past the last blank line lying wholly in ``data[start:stop]``, or -1."""
    ends = EventBoundaries._ENDS
    if stop - start < _BIG:
        if data.find(13, start, stop) < 0:  # LF line ends only (nearly every stream): one separator
            at = data.rfind(b"\n\n", start, stop)
            return at + 2 if at >= 0 else -1
        best = -1
        for sep in ends:
            at = data.rfind(sep, start, stop)
            if at >= 0 and at + len(sep) > best:
                best = at + len(sep)
        return best
    nl, cr = data.rfind(10, start, stop), data.rfind(13, start, stop)
    while nl != -1 or cr != -1:
        pos = max(nl, cr)  # the last line end not yet looked at: does a separator end here?
        for sep in ends:
            first = pos + 1 - len(sep)
            if first >= start and data.startswith(sep, first):
                return pos + 1
        if pos == nl:
            nl = data.rfind(10, start, pos)
        else:
            cr = data.rfind(13, start, pos)
    return -1


def next_event_end(data: bytes, start: int) -> int:
    """The offset just past the first blank line at or after ``start`` (``len(data)`` if none)."""
    ends = EventBoundaries._ENDS
    if len(data) - start < _BIG:
        if data.find(13, start) < 0:  # LF line ends only (nearly every stream): one separator
            at = data.find(b"\n\n", start)
            return at + 2 if at >= 0 else len(data)
        found = [at + len(sep) for sep in ends if (at := data.find(sep, start)) >= 0]
        return min(found) if found else len(data)
    nl, cr = data.find(10, start), data.find(13, start)
    while nl != -1 or cr != -1:
        pos = cr if nl == -1 or (cr != -1 and cr < nl) else nl  # the next line end: a separator ending here?
        for sep in ends:
            first = pos + 1 - len(sep)
            if first >= start and data.startswith(sep, first):
                return pos + 1
        if pos == nl:
            nl = data.find(10, pos + 1)
        else:
            cr = data.find(13, pos + 1)
    return len(data)


def split_events(data: bytes) -> list[bytes]:
    """``data`` cut into whole events, each with its blank line (LF, CRLF or CR line ends),
    in order; bytes after the last blank line are the last item (an event still open)."""
    events: list[bytes] = []
    start, n = 0, len(data)
    while start < n:
        end = next_event_end(data, start)
        events.append(data[start:end])
        start = end
    return events
