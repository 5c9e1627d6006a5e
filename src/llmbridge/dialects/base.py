"""Shared machinery for dialect codecs: the contracts (re-exported from :mod:`._contracts`),
the SSE decoder base (event counting, violations, truncation) and whole-stream helpers."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from .. import hub, sse
from . import rules
from ._contracts import DialectModule, StreamDecoder, StreamEncoder, missing_surface, not_a_hub_event

__all__ = [
    "EXTENSION_KEY",
    "KEEPALIVE_COMMENT",
    "DialectModule",
    "Served",
    "EncoderDispatch",
    "EncoderState",
    "SSEStreamDecoder",
    "StreamDecoder",
    "StreamEncoder",
    "decode_all",
    "encode_all",
    "json_decode",
    "json_encode",
    "missing_surface",
    "not_a_hub_event",
    "openai_model",
    "openai_models",
    "strip_extensions",
]

json_decode = msgspec.json.decode
json_encode = msgspec.json.encode


class SSEStreamDecoder:
    """Base of the stream decoders of SSE dialects.

    Subclasses implement :meth:`on_event` and call :meth:`emit`, :meth:`violation`,
    :meth:`finish_stream` (terminal event seen) and :meth:`fail` (error).  ``event_number``
    is the 0-based number of the SSE event being handled, for messages and violations.
    """

    dialect = ""

    def __init__(self) -> None:
        self._sse = sse.Decoder()
        self._out: list[hub.Event] = []
        self.violations: list[hub.Violation] = []
        self.event_number = -1
        self.ended = False  # ResponseEnd emitted

    def feed(self, data: bytes) -> list[hub.Event]:
        for event in self._sse.feed(data):
            self._dispatch(event)
        out, self._out = self._out, []
        return out

    def close(self) -> list[hub.Event]:
        for event in self._sse.close():
            self._dispatch(event)
        if not self.ended:
            self.on_truncated()
        out, self._out = self._out, []
        return out

    def _dispatch(self, event: sse.Event) -> None:
        self.event_number += 1
        if self.ended:
            if event.data.strip() not in ("[DONE]", ""):
                self.violation(rules.AFTER_TERMINAL, f"event {event.event!r} after the terminal event")
            return
        self.on_event(event)

    # -- for subclasses

    def on_event(self, event: sse.Event) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_truncated(self) -> None:
        """Input ended before the terminal event: an error, never a clean end."""
        self.violation(rules.TRUNCATED, "stream ended before its terminal event", event=-1)
        self.fail(hub.Error("upstream stream ended before its terminal event", "incomplete_stream"))

    def parse_json(self, event: sse.Event) -> Any:
        """The event's data as JSON; a violation and ``None`` when it is not."""
        try:
            return json_decode(event.data)
        except msgspec.DecodeError as exc:
            self.violation(rules.JSON, f"data is not valid JSON ({exc})")
            return None

    def emit(self, event: hub.Event) -> None:
        self._out.append(event)

    def violation(self, rule: str, message: str, event: int | None = None) -> None:
        self.violations.append(hub.Violation(self.event_number if event is None else event, rule, message))

    def finish_stream(self, request_id: str | None = None) -> None:
        self._out.append(hub.ResponseEnd(request_id))
        self.ended = True

    def fail(self, error: hub.Error) -> None:
        self._out.append(error)
        self.finish_stream()


class EncoderState(enum.Enum):
    """Where a stream encoder is on its wire: one state instead of a flag per fact (as h11's).

    ``IDLE`` until the wire's opening event goes out, then ``OPEN`` (a wire without an opening
    event, such as Gemini's, may stay ``IDLE`` until the end); ``CLOSED`` once the terminal
    event (for ``ResponseEnd``, or an ``Error`` and what ends the wire after it) is written,
    from either.  Nothing leaves ``CLOSED``: every later event gives ``b""`` (see
    :mod:`._contracts`).  Hot paths compare with module-level aliases of the members
    (``_CLOSED = EncoderState.CLOSED``): on Python 3.11 ``EncoderState.CLOSED`` costs an enum
    class attribute lookup, several times a plain global's.
    """

    IDLE = "idle"
    OPEN = "open"
    CLOSED = "closed"


_CLOSED = EncoderState.CLOSED


class EncoderDispatch:
    """The shared ``encode`` of stream encoders: one ``on_*`` method per hub event type.

    The edges are the same for every encoder (see :mod:`._contracts`): once ``_state`` is
    :attr:`EncoderState.CLOSED` (the subclass sets it when it writes its wire's terminal
    event) every event gives ``b""``; an object that is not a hub event raises ``TypeError``.
    The chain tests ``Delta`` first because it is nearly every event of a stream;
    ``type(x) is`` rather than ``isinstance`` because it is the fastest test and hub events
    are never subclassed.
    """

    _state = EncoderState.IDLE
    # False: the client takes no "llmbridge" data (the gateway's PlainEncoder, which strips what
    # is left of it from the bytes, sets this).  An encoder may then leave out the entries it
    # would write under EXTENSION_KEY instead of making them only to be parsed out again.
    extensions = True

    def encode(self, event: hub.Event) -> bytes:
        """The wire bytes for ``event`` (``b""`` while buffering and after the end)."""
        if self._state is _CLOSED:
            return b""
        kind = type(event)
        if kind is hub.Delta:
            return self.on_delta(event)  # type: ignore[arg-type]  # narrowed by kind
        if kind is hub.BlockStart:
            return self.on_block_start(event)  # type: ignore[arg-type]
        if kind is hub.BlockStop:
            return self.on_block_stop(event)  # type: ignore[arg-type]
        if kind is hub.Usage:
            return self.on_usage(event)  # type: ignore[arg-type]
        if kind is hub.Finish:
            return self.on_finish(event)  # type: ignore[arg-type]
        if kind is hub.Extension:
            return self.on_extension(event)  # type: ignore[arg-type]
        if kind is hub.ResponseStart:
            return self.on_response_start(event)  # type: ignore[arg-type]
        if kind is hub.Error:
            return self.on_error(event)  # type: ignore[arg-type]
        if kind is hub.ResponseEnd:
            return self.on_response_end(event)  # type: ignore[arg-type]
        not_a_hub_event(event)

    # -- one per event type, written by each encoder

    def on_delta(self, event: hub.Delta) -> bytes:
        raise NotImplementedError

    def on_block_start(self, event: hub.BlockStart) -> bytes:
        raise NotImplementedError

    def on_block_stop(self, event: hub.BlockStop) -> bytes:
        raise NotImplementedError

    def on_usage(self, event: hub.Usage) -> bytes:
        raise NotImplementedError

    def on_finish(self, event: hub.Finish) -> bytes:
        raise NotImplementedError

    def on_extension(self, event: hub.Extension) -> bytes:
        raise NotImplementedError

    def on_response_start(self, event: hub.ResponseStart) -> bytes:
        raise NotImplementedError

    def on_error(self, event: hub.Error) -> bytes:
        """Must write the wire's error and terminal events and set ``_state`` to ``CLOSED``."""
        raise NotImplementedError

    def on_response_end(self, event: hub.ResponseEnd) -> bytes:
        """Must write the wire's terminal event and set ``_state`` to ``CLOSED``."""
        raise NotImplementedError


def encode_all(encoder: StreamEncoder, events: list[hub.Event]) -> bytes:
    """Run a whole hub stream through a stream encoder; the wire bytes."""
    return b"".join([encoder.encode(e) for e in events])


def decode_all(decoder: StreamDecoder, data: bytes) -> list[hub.Event]:
    """Run a whole body through a stream decoder (``feed`` then ``close``); the hub events."""
    return decoder.feed(data) + decoder.close()


EXTENSION_KEY = "llmbridge"


def strip_extensions(body: Any, path: str = "") -> tuple[Any, list[str]]:
    """``body`` without its ``"llmbridge"`` keys, and where they were.

    Vendor APIs reject fields they do not know, so a request going to a real vendor
    endpoint must not carry our extension key; the paths say what was left out, so the
    caller can report it instead of losing it silently.
    """
    removed: list[str] = []
    if isinstance(body, dict):
        out = {}
        for key, value in body.items():
            where = f"{path}.{key}" if path else key
            if key == EXTENSION_KEY:
                removed.append(where)
                continue
            out[key], inner = strip_extensions(value, where)
            removed += inner
        return out, removed
    if isinstance(body, list):
        items = []
        for n, value in enumerate(body):
            item, inner = strip_extensions(value, f"{path}[{n}]")
            items.append(item)
            removed += inner
        return items, removed
    return body, removed


# --------------------------------------------------------------------------- how a gateway serves a dialect

# An SSE comment: what every SSE client skips (the LLM-Stream draft and the gateway spec name it).
KEEPALIVE_COMMENT = b": keep-alive\n\n"


@dataclass(frozen=True, slots=True)
class Served:
    """How a gateway serves a dialect to its clients: the dialect's traits that are not its
    codecs, kept beside them (each served dialect's ``GATEWAY``), so a gateway serves a new
    dialect by registering it, and a test fails when a served dialect has no endpoint.

    ``paths`` are its generation endpoints (POST; ``{version}`` and ``{model}`` name URL
    parts); ``keepalive`` the bytes its clients skip while an answer is silent;
    ``relay_markers`` what a relay's watcher must decode once an answer has started (a
    stretch of whole events holding none of them passes undecoded; ``None``: decode all);
    ``relay_done`` the terminal a relayed stream needs after an error event that is not
    terminal itself; ``models`` and ``model`` the shapes of its model list and of one model.
    """

    paths: tuple[str, ...]
    models: Callable[[list[str]], dict[str, Any]]
    model: Callable[[str], dict[str, Any]]
    keepalive: bytes = KEEPALIVE_COMMENT
    relay_markers: tuple[bytes, ...] | None = None
    relay_done: bytes | None = None


def openai_model(name: str) -> dict[str, Any]:
    """One model in OpenAI's shape (``GET /v1/models/{id}``), which OpenAI's two APIs and
    LLM-Stream share."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "llmbridge"}


def openai_models(names: list[str]) -> dict[str, Any]:
    """OpenAI's model list (``GET /v1/models``)."""
    return {"object": "list", "data": [openai_model(n) for n in names]}
