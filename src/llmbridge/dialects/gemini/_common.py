"""Gemini wire details shared by the stream and response codecs: finish reasons, usage,
errors, the incremental JSON-array splitter, the ``partialArgs`` argument writer, and a
whole block as one part (the encoder's non-text blocks and every block of a response)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import msgspec

from ... import hub
from ..base import EXTENSION_KEY

NAME = "gemini"

json_encode = msgspec.json.encode
json_decode = msgspec.json.decode

# --------------------------------------------------------------------------- finish reasons

_FILTER = (
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "MODEL_ARMOR",
)
_ERROR = (
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
    "MISSING_THOUGHT_SIGNATURE",
    "MALFORMED_RESPONSE",
)
FINISH_TO_HUB: dict[str, str] = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}
FINISH_TO_HUB.update(dict.fromkeys(_FILTER, "content_filter"))
FINISH_TO_HUB.update(dict.fromkeys(_ERROR, "error"))
# Everything else (OTHER, LANGUAGE, NO_IMAGE, IMAGE_OTHER, FINISH_REASON_UNSPECIFIED ...) -> "other".

FINISH_FROM_HUB = {
    "end_turn": "STOP",
    "tool_use": "STOP",
    "stop_sequence": "STOP",
    "max_tokens": "MAX_TOKENS",
    "content_filter": "SAFETY",
    "refusal": "SAFETY",
    "error": "MALFORMED_RESPONSE",
    "pause_turn": "OTHER",
    "other": "OTHER",
}


def finish_to_hub(word: str, tool_calls: bool, choice: int) -> hub.Finish:
    reason = FINISH_TO_HUB.get(word, "other")
    if reason == "end_turn" and tool_calls:
        reason = "tool_use"
    return hub.Finish(reason, choice, word)


def finish_from_hub(finish: hub.Finish) -> tuple[str, dict | None]:
    """Gemini's word for a hub finish, and what it cannot say (for the extension key)."""
    raw = finish.raw
    if raw in FINISH_TO_HUB or raw in ("OTHER", "LANGUAGE", "NO_IMAGE", "IMAGE_OTHER"):
        word = raw
        if FINISH_TO_HUB.get(raw, "other") == finish.reason or (raw == "STOP" and finish.reason == "tool_use"):
            return word, None
    else:
        word = FINISH_FROM_HUB.get(finish.reason, "OTHER")
    extra: dict[str, Any] = {"reason": finish.reason}
    if finish.raw is not None:
        extra["raw"] = finish.raw
    if finish.stop_sequence is not None:
        extra["stop_sequence"] = finish.stop_sequence
    return word, extra


def close_candidate(
    candidate: dict[str, Any], choice: int, finish: hub.Finish | None, fields: dict[str, Any] | None
) -> dict[str, Any]:
    """``candidate`` with what its end says: ``finishReason`` (and under the extension key
    what Gemini's word cannot say), ``index``, and the candidate-level ``fields`` a decoder
    kept (grounding, safety ratings...) where the candidate has no such key yet.

    The streamed last chunk and the ``generateContent`` body end their candidates alike.
    """
    if finish is not None:
        word, extra = finish_from_hub(finish)
        candidate["finishReason"] = word
        if extra:
            candidate[EXTENSION_KEY] = {"finish": extra}
    candidate["index"] = choice
    for key, value in (fields or {}).items():
        candidate.setdefault(key, value)
    return candidate


# --------------------------------------------------------------------------- usage

_USAGE_COUNTS = (
    "promptTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
    "cachedContentTokenCount",
    "toolUsePromptTokenCount",
    "totalTokenCount",
)


def usage_to_hub(u: dict) -> hub.Usage | None:
    """``usageMetadata`` -> hub usage; ``None`` when it holds no counts (Vertex's mid-stream stubs)."""
    prompt = u.get("promptTokenCount")
    cand = u.get("candidatesTokenCount")
    thoughts = u.get("thoughtsTokenCount")
    total = u.get("totalTokenCount")
    tool_prompt = u.get("toolUsePromptTokenCount")
    if prompt is None and cand is None and thoughts is None and total is None:
        return None
    extras = {k: v for k, v in u.items() if k not in _USAGE_COUNTS and k != EXTENSION_KEY}
    if tool_prompt is not None:
        extras["toolUsePromptTokenCount"] = tool_prompt
    ours = u.get(EXTENSION_KEY) or {}
    return hub.Usage(
        # no promptTokenCount (our encoder's way to say unknown) is no count, not 0
        input_tokens=(prompt or 0) + (tool_prompt or 0) if prompt is not None or tool_prompt is not None else None,
        output_tokens=(cand or 0) + (thoughts or 0) if cand is not None or thoughts is not None else None,
        cache_read_tokens=u.get("cachedContentTokenCount"),
        cache_write_tokens=ours.get("cache_write_tokens"),
        reasoning_tokens=ours.get("reasoning_tokens", thoughts),
        total_tokens=ours.get("total_tokens", total),
        extensions={**(ours.get("extensions") or {}), **({NAME: extras} if extras else {})} or None,
    )


def usage_from_hub(u: hub.Usage) -> dict:
    ours = (u.extensions or {}).get(NAME) or {}
    out: dict[str, Any] = {}
    mine: dict[str, Any] = {}
    tool_prompt = ours.get("toolUsePromptTokenCount")
    if u.input_tokens is not None:
        out["promptTokenCount"] = max(u.input_tokens - (tool_prompt or 0), 0)
    thoughts = u.reasoning_tokens
    if u.output_tokens is not None:
        if thoughts is not None and thoughts > u.output_tokens:  # a source that counts them apart
            mine["reasoning_tokens"] = thoughts
            thoughts = u.output_tokens
        out["candidatesTokenCount"] = u.output_tokens - (thoughts or 0)
    if thoughts is not None:
        out["thoughtsTokenCount"] = thoughts
    if u.cache_read_tokens is not None:
        out["cachedContentTokenCount"] = u.cache_read_tokens
    if tool_prompt is not None:
        out["toolUsePromptTokenCount"] = tool_prompt
    if u.total_tokens is not None:
        out["totalTokenCount"] = u.total_tokens
    elif u.input_tokens is not None or u.output_tokens is not None:
        out["totalTokenCount"] = (u.input_tokens or 0) + (u.output_tokens or 0)
        mine["total_tokens"] = None  # the source did not say; Gemini clients expect one
    for k, v in ours.items():
        out.setdefault(k, v)
    if u.cache_write_tokens is not None:
        mine["cache_write_tokens"] = u.cache_write_tokens
    foreign = {k: v for k, v in (u.extensions or {}).items() if k != NAME}
    if foreign:
        mine["extensions"] = foreign
    if mine:
        out[EXTENSION_KEY] = mine
    return out


# --------------------------------------------------------------------------- errors

# google.rpc.Code names by hub error type, and back.
STATUS_FROM_HUB = {
    "invalid_request": "INVALID_ARGUMENT",
    "authentication": "UNAUTHENTICATED",
    "permission": "PERMISSION_DENIED",
    "not_found": "NOT_FOUND",
    "request_too_large": "INVALID_ARGUMENT",
    "unsupported_media_type": "INVALID_ARGUMENT",
    "rate_limit": "RESOURCE_EXHAUSTED",
    "api_error": "INTERNAL",
    "overloaded": "UNAVAILABLE",
    "timeout": "DEADLINE_EXCEEDED",
    "incomplete_stream": "INTERNAL",
    "protocol_error": "INTERNAL",
}
STATUS_TO_HUB = {
    "INVALID_ARGUMENT": "invalid_request",
    "FAILED_PRECONDITION": "invalid_request",
    "OUT_OF_RANGE": "invalid_request",
    "UNAUTHENTICATED": "authentication",
    "PERMISSION_DENIED": "permission",
    "NOT_FOUND": "not_found",
    "RESOURCE_EXHAUSTED": "rate_limit",
    "INTERNAL": "api_error",
    "UNKNOWN": "api_error",
    "UNAVAILABLE": "overloaded",
    "DEADLINE_EXCEEDED": "timeout",
    "CANCELLED": "api_error",
}


def error_to_hub(obj: Any, http_status: int | None = None) -> hub.Error:
    """A Gemini error object (``{"error": {code, message, status}}`` or its inner object)."""
    inner = obj.get("error", obj) if isinstance(obj, dict) else {}
    if not isinstance(inner, dict):
        inner = {"message": str(inner)}
    code = inner.get("code")
    status = code if isinstance(code, int) else http_status
    word = inner.get("status")
    ours = inner.get(EXTENSION_KEY) or {}
    if ours.get("type") in hub.ERROR_TYPES:
        kind = ours["type"]
    elif word in STATUS_TO_HUB:
        kind = STATUS_TO_HUB[word]
    elif status is not None:
        kind = hub.error_type_for_status(status)
    else:
        kind = "api_error"
    message = inner.get("message") or word or "unknown error"
    return hub.Error(str(message), kind, word if isinstance(word, str) else None, status, obj)


def error_from_hub(error: hub.Error) -> tuple[int, dict]:
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and "message" in body["error"]:
        inner = body["error"]
        if isinstance(inner.get("code"), int) and isinstance(inner.get("status"), str):
            return inner["code"], body  # already Gemini's shape (a gemini source)
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    inner = {"code": status, "message": error.message, "status": STATUS_FROM_HUB.get(error.type, "INTERNAL")}
    if STATUS_TO_HUB.get(inner["status"]) != error.type or error.code is not None:
        inner[EXTENSION_KEY] = {"type": error.type, **({"code": error.code} if error.code is not None else {})}
    return status, {"error": inner}


# --------------------------------------------------------------------------- times


def parse_time(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def format_time(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- JSON-array streams

_INTERESTING = re.compile(rb'[\[\]{}"]')
_IN_STRING = re.compile(rb'["\\]')


class JSONArraySplitter:
    """Splits ``[{...},\\r\\n{...}]`` (streamGenerateContent without ``alt=sse``) into elements as
    bytes arrive.  Tracks string/escape/depth state, so it is chunking-independent; a top-level
    sequence of objects without the array brackets (a bare error object) works too."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0  # scan position in _buf
        self._start = -1  # start of the current element, -1 when between elements
        self._depth = 0  # nesting inside the top level (array brackets not counted)
        self._in_string = False
        self._escape = False
        self.opened = False  # the top-level '[' was seen
        self.closed = False  # the top-level ']' was seen
        self.garbage = False  # bytes that are neither elements nor separators

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos, n = self._pos, len(buf)
        while pos < n:
            if self._in_string:
                if self._escape:
                    self._escape = False
                    pos += 1
                    continue
                m = _IN_STRING.search(buf, pos)
                if m is None:
                    pos = n
                    break
                pos = m.end()
                if buf[m.start()] == 0x5C:  # backslash
                    self._escape = True
                else:
                    self._in_string = False
                continue
            if self._depth == 0:
                # Between elements: whitespace, commas, the array brackets.
                c = buf[pos]
                if c in b" \t\r\n,\xef\xbb\xbf":  # blanks, separators, a byte-order mark
                    pos += 1
                elif c == 0x5B and not self.opened and not self.closed:  # '['
                    self.opened = True
                    pos += 1
                elif c == 0x5D and self.opened and not self.closed:  # ']'
                    self.closed = True
                    pos += 1
                elif c == 0x7B and not self.closed:  # '{'
                    self._start = pos
                    self._depth = 1
                    pos += 1
                else:
                    self.garbage = True
                    pos += 1
                continue
            m = _INTERESTING.search(buf, pos)
            if m is None:
                pos = n
                break
            c = buf[m.start()]
            pos = m.end()
            if c == 0x22:  # '"'
                self._in_string = True
            elif c in b"{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    out.append(bytes(buf[self._start : pos]))
                    self._start = -1
        # Keep only the unfinished element.
        if self._start >= 0:
            del buf[: self._start]
            pos -= self._start
            self._start = 0
        else:
            buf.clear()
            pos = 0
        self._pos = pos
        return out

    @property
    def pending(self) -> bool:
        """An element was cut off by the end of input."""
        return self._start >= 0


# --------------------------------------------------------------------------- partialArgs

_PATH_TOKEN = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]")


def parse_json_path(path: str) -> list[str | int] | None:
    """``$.a.b[0]['c d']`` -> ``["a", "b", 0, "c d"]``; ``None`` when it is not such a path."""
    if not path.startswith("$"):
        return None
    tokens: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None:
            return None
        key, index, single, double = m.groups()
        if index is not None:
            tokens.append(int(index))
        else:
            tokens.append(key if key is not None else (single if single is not None else double))
        pos = m.end()
    return tokens


def _key(token: str | int) -> str:
    return json_encode(str(token)).decode() + ":"


class ArgsWriter:
    """Turns Vertex ``partialArgs`` (a value per JSON path, strings in pieces) into argument JSON
    text fragments, emitted as they arrive.  Paths come depth-first, so an open-container stack
    suffices: a path that leaves a container closes it."""

    def __init__(self) -> None:
        self.started = False
        self._stack: list[list] = []  # [token, is_array, members] for each open container
        self._open_string: list[str | int] | None = None

    def add(self, arg: dict) -> str | None:
        """One PartialArg -> the JSON text it adds; ``None`` when the arg is malformed."""
        path = parse_json_path(arg.get("jsonPath") or "")
        if not path:
            return None
        out: list[str] = []
        if not self.started:
            self.started = True
            self._stack = [[None, False, 0]]
            out.append("{")
        is_string = "stringValue" in arg
        if self._open_string is not None:
            if path == self._open_string and is_string:
                out.append(json_encode(arg["stringValue"]).decode()[1:-1])
                if not arg.get("willContinue"):
                    out.append('"')
                    self._open_string = None
                return "".join(out)
            out.append('"')
            self._open_string = None
        parents = path[:-1]
        current = [c[0] for c in self._stack[1:]]
        common = 0
        while common < len(parents) and common < len(current) and parents[common] == current[common]:
            common += 1
        while len(self._stack) - 1 > common:
            out.append("]" if self._stack.pop()[1] else "}")
        for i in range(common, len(parents)):
            self._member(out, parents[i])
            is_array = isinstance(path[i + 1], int)
            out.append("[" if is_array else "{")
            self._stack.append([parents[i], is_array, 0])
        self._member(out, path[-1])
        if is_string:
            text = json_encode(arg["stringValue"]).decode()
            if arg.get("willContinue"):
                out.append(text[:-1])
                self._open_string = path
            else:
                out.append(text)
        elif "numberValue" in arg:
            out.append(json_encode(arg["numberValue"]).decode())
        elif "boolValue" in arg:
            out.append("true" if arg["boolValue"] else "false")
        elif "nullValue" in arg:
            out.append("null")
        else:  # structValue / listValue, or a value we do not know: take it whole
            value = next((v for k, v in arg.items() if k not in ("jsonPath", "willContinue")), None)
            out.append(json_encode(value).decode())
        return "".join(out)

    def _member(self, out: list[str], token: str | int) -> None:
        parent = self._stack[-1]
        if parent[2]:
            out.append(",")
        parent[2] += 1
        if not parent[1]:
            out.append(_key(token))

    def finish(self) -> str:
        """Close what is open; ``{}`` when no argument arrived."""
        if not self.started:
            return "{}"
        out = ['"'] if self._open_string is not None else []
        self._open_string = None
        while self._stack:
            out.append("]" if self._stack.pop()[1] else "}")
        return "".join(out)


# --------------------------------------------------------------------------- whole parts


def split_fidelity(fidelity: dict | None) -> tuple[str | None, dict | None]:
    """Gemini's thought signature, and everything else (other vendors' fidelity)."""
    if not fidelity:
        return None, None
    ours = fidelity.get(NAME)
    sig = ours.get("thoughtSignature") if isinstance(ours, dict) else None
    rest = {k: v for k, v in fidelity.items() if k != NAME}
    if isinstance(ours, dict) and len(ours) > (sig is not None):
        rest[NAME] = {k: v for k, v in ours.items() if k != "thoughtSignature"}
    return sig, rest or None


def parse_args(text: str) -> tuple[dict, str | None]:
    """Argument JSON -> ``args`` object, plus the raw text when it is not an object."""
    if not text.strip():
        return {}, None
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return {}, text
    return (value, None) if isinstance(value, dict) else ({}, text)


def block_part(
    kind: str,
    text: str,
    *,
    id: str | None = None,
    name: str | None = None,
    mime_type: str | None = None,
    fidelity: dict | None = None,
    extensions: dict | None = None,
    stop_fidelity: dict | None = None,
    stop_extensions: dict | None = None,
) -> dict:
    """A whole non-text block as one Gemini part."""
    sig, foreign = split_fidelity(hub.merge_dicts(fidelity, stop_fidelity))
    part: dict[str, Any]
    ours: dict[str, Any] = {}
    if kind == "tool_call":
        args, raw = parse_args(text)
        call: dict[str, Any] = {"name": name or "", "args": args}
        if id:
            call["id"] = id
        part = {"functionCall": call}
        if raw is not None or json_encode(args).decode() != text:
            ours["arguments"] = text  # not an object, or spaced differently: keep the source's exact text
    elif kind == "data":
        part = {"inlineData": {"mimeType": mime_type or "application/octet-stream", "data": text}}
    elif kind == "native" and isinstance((extensions or {}).get(NAME), dict) and len(extensions) == 1:
        part = dict(extensions[NAME])  # one of Gemini's own parts, replayed as it came
        extensions = None
        if stop_extensions and set(stop_extensions) == {NAME}:
            stop_extensions = None
    elif kind == "native":
        native = {
            "id": id,
            "name": name,
            "fidelity": fidelity,
            "extensions": extensions,
            "text": text,
            "stop_fidelity": stop_fidelity,
            "stop_extensions": stop_extensions,
        }
        return {EXTENSION_KEY: {"native": {k: v for k, v in native.items() if v}}}
    else:  # text / thinking as one part (whole responses)
        part = {"text": text}
        if kind == "thinking":
            part["thought"] = True
    if sig is not None:
        part["thoughtSignature"] = sig
    start = {k: v for k, v in (("fidelity", foreign), ("extensions", extensions)) if v}
    if kind in ("text", "thinking") and id:
        start["id"] = id
    if start:
        ours["start"] = start
    if stop_extensions:
        ours["stop"] = {"extensions": stop_extensions}
    if ours:
        part[EXTENSION_KEY] = ours
    return part
