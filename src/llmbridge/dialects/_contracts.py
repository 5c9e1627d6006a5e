"""The codec contracts as types: what every dialect module and its stream codecs provide.

``dialects/__init__.py`` says the contract in prose; these :class:`typing.Protocol`\\ s say it to
a type checker (and, being ``runtime_checkable``, to the contract test).  A dialect never
inherits from them: a class with the right methods *is* a :class:`StreamDecoder`.

The shared encoder rules live here too, so every encoder behaves the same at the edges:

* **After the end** (once an encoder has written its terminal event, for ``ResponseEnd`` or
  for an ``Error``), ``encode`` returns ``b""`` for whatever it is given: the wire is closed,
  and a late event is the source's fault, not a reason to break the client's stream.
* **Not a hub event** (anything outside :data:`llmbridge.hub.Event`) before the end raises
  ``TypeError`` via :func:`not_a_hub_event`: that is a programming error in the caller, and
  ``b""`` would hide it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn, Protocol, runtime_checkable

from .. import hub

__all__ = [
    "SURFACE",
    "DialectModule",
    "StreamDecoder",
    "StreamEncoder",
    "missing_surface",
    "not_a_hub_event",
]


@runtime_checkable
class StreamDecoder(Protocol):
    """Wire bytes in, hub events out; lenient (see ``dialects/__init__.py``).

    ``feed`` takes any split of the body (a chunk may end mid-event or mid-character) and
    returns the events completed so far; ``close`` ends the input and returns the rest, ending
    with ``ResponseEnd`` (after ``Error(type="incomplete_stream")`` when the wire's terminal
    event never came).  Neither raises on malformed input: breaks of the wire's grammar are
    appended to ``violations``.
    """

    violations: list[hub.Violation]

    def feed(self, data: bytes) -> list[hub.Event]: ...

    def close(self) -> list[hub.Event]: ...


@runtime_checkable
class StreamEncoder(Protocol):
    """Hub events in, wire bytes out: ``encode`` one event (``b""`` while it buffers).

    An ``Error`` becomes the wire's error event followed by its terminal event; what happens
    after the end and for a non-event is the same for every encoder (this module's docstring).
    """

    def encode(self, event: hub.Event) -> bytes: ...


# Aliases: inside DialectModule the names StreamDecoder/StreamEncoder are its own members.
_Decoder = StreamDecoder
_Encoder = StreamEncoder


class DialectModule(Protocol):
    """The surface every dialect module has (a module satisfies a protocol structurally).

    ``stream_encoder(request)`` is optional (``dialects.stream_encoder`` falls back to
    ``StreamEncoder()``), so it is not a member here.
    """

    NAME: str
    STREAM_CONTENT_TYPE: str
    StreamDecoder: Callable[[], _Decoder]
    StreamEncoder: Callable[[], _Encoder]

    def decode_request(self, body: dict[str, Any], *, model: str | None = None) -> hub.Request: ...

    def encode_request(self, request: hub.Request) -> dict[str, Any]: ...

    def endpoint(self, request: hub.Request, *, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]: ...

    def decode_response(self, body: dict[str, Any]) -> list[hub.Event]: ...

    def encode_response(self, response: hub.Response) -> dict[str, Any]: ...

    def encode_error(self, error: hub.Error) -> tuple[int, dict[str, Any]]: ...

    def decode_error(self, status: int, body: bytes) -> hub.Error: ...


# The names of DialectModule, for the runtime check (a Protocol with data members cannot
# be used with isinstance on a module).
SURFACE = (
    "NAME",
    "STREAM_CONTENT_TYPE",
    "StreamDecoder",
    "StreamEncoder",
    "decode_request",
    "encode_request",
    "endpoint",
    "decode_response",
    "encode_response",
    "encode_error",
    "decode_error",
)


def missing_surface(module: ModuleType) -> list[str]:
    """The names of :class:`DialectModule` that ``module`` lacks (empty: the whole surface)."""
    return [name for name in SURFACE if not hasattr(module, name)]


def not_a_hub_event(event: object) -> NoReturn:
    """The shared end of every encoder's dispatch: raises ``TypeError`` naming ``event``."""
    raise TypeError(f"not a hub event: {type(event).__name__} {event!r:.80}")
