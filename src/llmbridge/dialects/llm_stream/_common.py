"""Vocabulary shared by the llm-stream codecs: the version, media types and ``llmbridge:``
namespace, the delta key of each block kind, and the field helpers that the stream and the
whole-body forms share (usage, finish, errors, annotations; the checks of request and
response fields, which raise :class:`~llmbridge.errors.RequestError` naming the field).
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ...errors import RequestError
from ..base import EXTENSION_KEY

NAME = "llm-stream"
VERSION = "1.0"
REQUEST_CONTENT_TYPE = "application/llm-request+json"
RESPONSE_CONTENT_TYPE = "application/json"
ACCEPT_STREAM = 'text/event-stream; profile="llm-stream-1.0"'
SEQ_LIMIT = 2**53  # seq must stay below this (§8.4): the largest safe JSON integer is 2^53 - 1

# The prefix of every field the draft has no name for; conforming parsers skip such fields
# (§4.7).  The codecs spell the fields out in full ("llmbridge:stop_reason") so that they can be
# found next to docs/llm-stream.md; tests/test_llm_stream.py checks they all start with NS.
NS = f"{EXTENSION_KEY}:"
STOP_REASONS = frozenset(r for r in hub.FINISH_REASONS if r != "other")

# content.delta carries one growing field per block kind; only plain text of choice 0 uses
# the draft's own `text`, everything else a namespaced key that conforming parsers skip.
DELTA_KEY_BY_KIND = {
    "text": "text",
    "thinking": NS + "thinking",
    "data": NS + "data",
    "native": NS + "native",
    "tool_call": NS + "arguments",
}
KIND_BY_DELTA_KEY = {
    "text": "text",
    NS + "text": "text",
    NS + "thinking": "thinking",
    NS + "data": "data",
    NS + "native": "native",
    NS + "arguments": "tool_call",
}
OTHER_KIND_KEY = NS + "content"  # a block kind this version does not know

USAGE_DETAILS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "total_tokens")


def annotation(e: hub.Extension) -> dict:
    """An Extension event as an entry of ``llmbridge:annotations`` (namespace, data, index)."""
    out = {"namespace": e.namespace, "data": e.data}
    if e.index is not None:
        out["index"] = e.index
    return out


def usage_fields(u: hub.Usage) -> dict:
    """The fields of a ``usage`` event or object: the draft's two counts, the rest namespaced."""
    out: dict[str, Any] = {}
    if u.input_tokens is not None:
        out["input_tokens"] = u.input_tokens
    if u.output_tokens is not None:
        out["output_tokens"] = u.output_tokens
    for name in USAGE_DETAILS:
        value = getattr(u, name)
        if value is not None:
            out[NS + name] = value
    if u.extensions:
        out["llmbridge:extensions"] = u.extensions
    return out


def finish_fields(f: hub.Finish, out: dict) -> dict:
    """``out`` with the stop reason of ``f`` (a word the draft lacks goes out as ``other``,
    the word itself as ``llmbridge:raw_reason``); returns ``out``."""
    reason = f.reason if f.reason in STOP_REASONS else "other"
    # A stop_reason of another choice must not look like the end of the turn to plain parsers.
    out["stop_reason" if f.choice == 0 else "llmbridge:stop_reason"] = reason
    if f.raw is not None:
        out["llmbridge:raw_reason"] = f.raw
    if f.stop_sequence is not None:
        out["llmbridge:stop_sequence"] = f.stop_sequence
    return out


def finish(reason: str, choice: int, obj: dict) -> hub.Finish:
    """A stop_reason and its namespaced details; a word this version does not know is kept raw."""
    raw = obj.get("llmbridge:raw_reason")
    sequence = obj.get("llmbridge:stop_sequence")
    if reason not in hub.FINISH_REASONS:
        raw, reason = raw if type(raw) is str else reason, "other"
    return hub.Finish(reason, choice, raw if type(raw) is str else None, sequence if type(sequence) is str else None)


def finish_from(obj: dict, choice: int) -> hub.Finish | None:
    """The Finish of a response body or ``llmbridge:finishes`` entry; None without a stop reason."""
    reason = obj.get("stop_reason", obj.get("llmbridge:stop_reason"))
    return finish(reason, choice, obj) if type(reason) is str else None


def error_fields(e: hub.Error) -> dict:
    """The draft's error object: ``type``, ``message`` and ``code`` when there is one."""
    err: dict[str, Any] = {"type": e.type, "message": e.message}
    if e.code is not None:
        err["code"] = e.code
    return err


def error_from(status: int, body: Any) -> hub.Error:
    """The hub Error of an error body (any JSON value) that came with HTTP ``status`` (0: none)."""
    err = body.get("error") if type(body) is dict else None
    if type(err) is not dict:
        err = {"message": err} if type(err) is str else {}
    message = err.get("message")
    error_type = err.get("type")
    code = err.get("code")
    known = error_type in hub.ERROR_TYPES
    body_status = body.get("llmbridge:status") if type(body) is dict else None
    return hub.Error(
        message if type(message) is str else f"HTTP {status}" if status else "error",
        error_type if known else (hub.error_type_for_status(status) if status else "api_error"),
        str(code) if code is not None else (error_type if type(error_type) is str and not known else None),
        status or (body_status if type(body_status) is int else None),
        body,
    )


# -- field checks of request and response bodies


def bad_field(field: str, message: str) -> RequestError:
    """The error for a malformed ``field`` (the caller raises it)."""
    return RequestError(message, field=field)


def expect(value: Any, types: tuple[type, ...], field: str, what: str) -> Any:
    """``value`` when its exact type is one of ``types``; raises :class:`RequestError` saying
    it must be ``what`` otherwise."""
    # bool is an int subclass; exact type checks keep `true` out of numeric fields
    if type(value) not in types:
        # a float where an integer goes: say which ("an integer, not 1.5"), not "a number"
        shown = repr(value) if type(value) is float else _json_type(value)
        raise bad_field(field, f"must be {what}, not {shown}")
    return value


def _json_type(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def opt_str(obj: dict, key: str, field: str) -> str | None:
    """``obj[key]`` when it is a string, None when absent or null; raises when it is anything else."""
    value = obj.get(key)
    return None if value is None else expect(value, (str,), f"{field}.{key}", "a string")
