"""Content negotiation (LLM-Stream draft §7): which dialect reads the request, which one answers.

* ``Content-Type: application/llm-request+json`` on any endpoint: the body is a standard
  (``llm-stream``) request, and the answer is the standard stream, since the LLM-Stream draft's media type signals
  conformance by that request type plus a ``stream.start`` first event.
* ``Accept: text/event-stream; profile="llm-stream-1.0"`` on any endpoint: answer with the
  standard stream, whatever dialect the request body is in.
* ``application/json`` (any parameters) or no ``Content-Type``: the endpoint's own dialect.
* Anything else: 415, in the error shape of the dialect that would have answered.
"""

from __future__ import annotations

import functools

__all__ = [
    "KNOWN",
    "LLM_REQUEST",
    "PROFILE",
    "STANDARD",
    "UnsupportedMediaType",
    "error_dialect",
    "parse_media_type",
    "remember",
    "request_dialect",
    "response_dialect",
    "wants_standard_stream",
]

LLM_REQUEST = "application/llm-request+json"
PROFILE = "llm-stream-1.0"
STANDARD = "llm-stream"
_JSON_TYPES = ("application/json", "text/json")


class UnsupportedMediaType(Exception):
    def __init__(self, media_type: str):
        self.media_type = media_type
        super().__init__(f"unsupported request media type {media_type!r}; send application/json or {LLM_REQUEST}")


def parse_media_type(value: str) -> tuple[str, dict[str, str]]:
    """``'text/event-stream; profile="x"'`` -> ``('text/event-stream', {'profile': 'x'})``."""
    kind, _, rest = value.partition(";")
    params = {}
    for item in rest.split(";"):
        name, eq, val = item.partition("=")
        if eq:
            params[name.strip().lower()] = val.strip().strip('"')
    return kind.strip().lower(), params


def wants_standard_stream(accept: str | None) -> bool:
    if not accept or PROFILE not in accept:
        return False
    return _wants_standard_stream(accept)


# Clients send the same few Content-Type and Accept values request after request: their
# parsed forms are kept (a bounded cache: the values are the client's).
@functools.lru_cache(maxsize=64)
def _wants_standard_stream(accept: str) -> bool:
    for item in accept.split(","):
        kind, params = parse_media_type(item)
        if kind in ("text/event-stream", "*/*") and params.get("profile") == PROFILE:
            return True
    return False


@functools.lru_cache(maxsize=64)
def _media_kind(value: str) -> str:
    return parse_media_type(value)[0]


def request_dialect(content_type: str | None, endpoint_dialect: str) -> str:
    """The dialect that decodes the body; raises :class:`UnsupportedMediaType`."""
    if not content_type:
        return endpoint_dialect
    kind = _media_kind(content_type)
    if kind == LLM_REQUEST:
        return STANDARD
    if kind in _JSON_TYPES or (kind.startswith("application/") and kind.endswith("+json") and kind != LLM_REQUEST):
        return endpoint_dialect
    raise UnsupportedMediaType(kind)


def response_dialect(endpoint_dialect: str, request_dialect: str, accept: str | None) -> str:
    """The dialect of the answer."""
    if request_dialect == STANDARD or wants_standard_stream(accept):
        return STANDARD
    return endpoint_dialect


def error_dialect(endpoint_dialect: str, content_type: str | None, accept: str | None) -> str:
    """The dialect to report an error in before the request was read."""
    if wants_standard_stream(accept):
        return STANDARD
    if content_type and _media_kind(content_type) == LLM_REQUEST:
        return STANDARD
    return endpoint_dialect


# (endpoint dialect, Content-Type, Accept) -> (error_dialect, request_dialect, response_dialect)
# of a request negotiated before: clients send the same few pairs request after request, and
# one lookup answers what the three calls would (they read nothing else). Only pairs that
# negotiated (a 415 is asked again), and bounded: the values are the client's.
KNOWN: dict[tuple[str, str | None, str | None], tuple[str, str, str]] = {}
_MAX_KNOWN = 256
_MAX_KNOWN_CHARS = 256  # of a key's two header values together: the memo holds at most ~64 KB of them


def remember(key: tuple[str, str | None, str | None], errors: str, request: str, response: str) -> None:
    """Keep ``key``'s negotiated dialects in :data:`KNOWN` (while it has room, and if its
    header values are short: what a client sends there is bounded only by the head's size)."""
    _, content_type, accept = key
    if len(KNOWN) < _MAX_KNOWN and len(content_type or "") + len(accept or "") <= _MAX_KNOWN_CHARS:
        KNOWN[key] = (errors, request, response)
