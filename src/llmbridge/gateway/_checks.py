"""What the gateway refuses before it forwards anything: bodies nested too deeply, request
parameters outside the ranges that no upstream would accept, and broken inline images.

Both checks are sans-I/O functions that raise :class:`~llmbridge.errors.RequestError` (a 400
in the client's dialect, naming the field), so one place serves all six endpoints:

- :func:`check_nesting` runs on the JSON-decoded body before a dialect reads it: the
  dialects' readers (and the encoders of the upstream request) recurse, and a body nested
  thousands of levels deep would end in ``RecursionError``. msgspec's decoder has its own
  guard (``RecursionError`` near 1,000 levels, which the caller also answers with 400); this
  bounds depth at a configurable, much lower level, at a fraction of the decoding cost.
- :func:`validate_request` runs on the decoded hub request. The dialect decoders check
  types (a string where a number goes); this checks ranges, once for every dialect, so a
  400-digit ``max_tokens`` or ``temperature = 1e308`` is never sent upstream.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from .. import hub
from ..errors import RequestError
from ..media import image_problem

__all__ = [
    "DEFAULT_MAX_JSON_DEPTH",
    "check_images",
    "FIELD_NAMES",
    "INT32",
    "INT64",
    "MAX_N",
    "MAX_STOP",
    "MAX_STOP_CHARS",
    "RANGES",
    "check_nesting",
    "nesting_exceeds",
    "validate_request",
]

DEFAULT_MAX_JSON_DEPTH = 128  # arrays + objects; real requests (tool schemas included) stay far below


def nesting_exceeds(body: Any, limit: int) -> bool:
    """Whether the decoded JSON ``body`` nests arrays/objects deeper than ``limit``.

    Level by level, without recursion: each element is looked at once, with one type
    check (a fraction of what reading the body into the hub costs). Never raises.
    """
    level = [body] if type(body) is dict or type(body) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        deeper: list[Any] = []
        append = deeper.append
        for container in level:
            for value in container.values() if type(container) is dict else container:
                kind = type(value)
                if kind is dict or kind is list:
                    append(value)
        level = deeper
    return False


def check_nesting(body: Any, limit: int) -> None:
    """Raise :class:`RequestError` (400) when ``body`` nests arrays/objects deeper than ``limit``.

    Bodies deeper than the decoder's own limit (msgspec stops near 1,000 levels with
    ``RecursionError``) never get here: the caller answers those with 400 too.
    """
    if nesting_exceeds(body, limit):
        raise RequestError(f"request body nests arrays and objects more than {limit} levels deep")


# --------------------------------------------------------------------------- parameter ranges

INT32 = 2**31 - 1
INT64 = 2**63 - 1
MAX_N = 128  # OpenAI's own limit on choices
MAX_STOP = 64  # stop sequences: vendors allow 4 (OpenAI) to a few thousand; 64 is generous
MAX_STOP_CHARS = 1024

# Range per hub field: (low, high, integer?). Integers are checked exactly (a 400-digit
# number is out of range, not truncated); floats must also be finite.
RANGES: dict[str, tuple[float, float, bool]] = {
    "max_tokens": (1, INT32, True),
    "n": (1, MAX_N, True),
    "top_k": (0, INT32, True),
    "seed": (-INT64 - 1, INT64, True),
    "temperature": (0.0, 2.0, False),
    "top_p": (0.0, 1.0, False),
    "presence_penalty": (-2.0, 2.0, False),
    "frequency_penalty": (-2.0, 2.0, False),
}

_RANGE_ITEMS = tuple(RANGES.items())
_RANGED = operator.attrgetter(*RANGES)  # the request's values of those fields, in one call
_UNSET = (None,) * len(RANGES)  # what _RANGED gives for a request that sets none of them
_UNSET_BUT_FIRST = _UNSET[1:]  # (max_tokens first: what validate_request passes over alone)
_NUMBER = (int, float)  # (a tuple: ``int | float`` would make a union object per call)

# The name a client used for a hub field, per dialect, for the message (default: the hub name).
_GEMINI = {
    "max_tokens": "generationConfig.maxOutputTokens",
    "n": "generationConfig.candidateCount",
    "top_k": "generationConfig.topK",
    "top_p": "generationConfig.topP",
    "temperature": "generationConfig.temperature",
    "seed": "generationConfig.seed",
    "presence_penalty": "generationConfig.presencePenalty",
    "frequency_penalty": "generationConfig.frequencyPenalty",
    "stop": "generationConfig.stopSequences",
}
FIELD_NAMES: dict[str, dict[str, str]] = {
    "openai-responses": {"max_tokens": "max_output_tokens"},
    "anthropic-messages": {"stop": "stop_sequences"},
    "gemini": _GEMINI,
    "llm-stream": {k: f"parameters.{k}" for k in ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop")}
    | {k: f"parameters.{k}" for k in ("presence_penalty", "frequency_penalty")},
    "mmsp": {k: f"config.{k}" for k in RANGES} | {"stop": "config.stop"},
}


def _field(request: hub.Request, dialect: str, name: str) -> str:
    if dialect == "openai-chat" and name == "max_tokens":
        return request.extensions.get("openai-chat:max_tokens_field") or "max_completion_tokens"
    return FIELD_NAMES.get(dialect, {}).get(name, name)


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def validate_request(request: hub.Request, dialect: str) -> None:
    """Raise :class:`RequestError` (400, naming the client's field) when a parameter of the
    decoded ``request`` is out of range: ``max_tokens`` 1..2^31-1, ``n`` 1..128,
    ``temperature`` 0..2, ``top_p`` 0..1, penalties -2..2, ``top_k`` 0..2^31-1, ``seed`` a
    64-bit integer, at most 64 stop sequences of at most 1,024 characters, a thinking budget
    -1..2^31-1. ``dialect`` is the request's dialect (for the field names). Returns nothing.
    """
    values = _RANGED(request)
    # (most requests set none of the eight, or one: the unset ones are passed over before
    # their range is unpacked, and a request that sets none skips the loop in one C compare)
    if values != _UNSET:
        # The usual one that sets any sets max_tokens alone (Anthropic's requests all do), an
        # integer in range, in every dialect (Anthropic's range starts lower): nothing to raise.
        first = values[0]
        if not (type(first) is int and 1 <= first <= INT32 and values[1:] == _UNSET_BUT_FIRST):
            for i, value in enumerate(values):
                if value is not None:
                    _check_range(request, dialect, _RANGE_ITEMS[i], value)
    stop = request.stop
    if stop:
        if len(stop) > MAX_STOP:
            raise RequestError(f"at most {MAX_STOP} stop sequences, not {len(stop)}", _field(request, dialect, "stop"))
        for i, sequence in enumerate(stop):
            if len(sequence) > MAX_STOP_CHARS:
                where = f"{_field(request, dialect, 'stop')}[{i}]"
                raise RequestError(f"longer than {MAX_STOP_CHARS} characters", where)
    thinking = request.thinking
    budget = thinking.get("budget_tokens") if thinking else None
    # -1 is Gemini's "dynamic" budget
    if budget is not None and (type(budget) is not int or not -1 <= budget <= INT32):
        raise RequestError(f"must be an integer from -1 to {INT32}", "thinking.budget_tokens")


def _check_range(request: hub.Request, dialect: str, field: tuple[str, tuple[float, float, bool]], value: Any) -> None:
    """Raise :class:`RequestError` unless ``value`` (not None) is a number of the kind and in
    the range ``field`` (an item of :data:`RANGES`) gives for it."""
    name, (low, high, integer) = field
    if type(value) is bool or not isinstance(value, int if integer else _NUMBER):
        raise RequestError(f"must be {'an integer' if integer else 'a number'}", _field(request, dialect, name))
    if name == "max_tokens" and dialect == "anthropic-messages":
        low = 0  # Anthropic takes 0: fill the prompt cache, generate nothing
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        shown = value if isinstance(value, float) or abs(value) < 10**20 else f"a {len(str(value))}-digit number"
        raise RequestError(
            f"must be {'an integer' if integer else 'a number'} from {_bound(low)} to {_bound(high)}, not {shown}",
            _field(request, dialect, name),
        )


def check_images(request: hub.Request, limit: int) -> str | None:
    """The first problem with an inline image of ``request`` (tool results included), as a
    message naming where it is, or ``None`` (the checks themselves: ``llmbridge.media``)."""
    # A request of text parts only (the usual one) has no image: seen in one plain loop; any
    # other part has the positions walked as below.
    for message in request.messages:
        for part in message.parts:
            if type(part) is not hub.TextPart:
                return _image_problem(request, limit)
    return None


def _image_problem(request: hub.Request, limit: int) -> str | None:
    """:func:`check_images`, every part looked at."""
    for m, message in enumerate(request.messages):
        for p, part in enumerate(message.parts):
            parts = part.content if isinstance(part, hub.ToolResultPart) else [part]
            for part_ in parts:
                if isinstance(part_, hub.ImagePart) and part_.data is not None:
                    problem = image_problem(part_.data, part_.media_type, limit)
                    if problem:
                        return f"messages[{m}].content[{p}]: {problem}"
    return None
