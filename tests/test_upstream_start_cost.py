"""Issue 23, round six: the cost of the upstream request (its decoding, checks, encoding and
head) and of the upstream answer's head. Each shortcut on the usual path is checked here
against the general path it passes by, over many inputs."""

from __future__ import annotations

import base64
import itertools
import math
from collections.abc import Callable

import pytest

from llmbridge import dialects, hub
from llmbridge.dialects.base import EXTENSION_KEY
from llmbridge.errors import RequestError
from llmbridge.gateway._checks import RANGES, _field, _image_problem, check_images, validate_request

# -- validate_request: the unset fields passed over, a request that sets none skips the loop

_TRIES = (None, 0, 1, -1, 0.5, 2.5, True, "1", float("inf"), float("nan"), 10**30, 2**31, -(2**63) - 1)


def _expected(name: str, value: object, dialect: str) -> bool:
    """Whether ``value`` of field ``name`` passes, as RANGES documents it (written out apart
    from the function: the type, finiteness and the bounds)."""
    low, high, integer = RANGES[name]
    if name == "max_tokens" and dialect == "anthropic-messages":
        low = 0
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return False
    return math.isfinite(value) and low <= value <= high


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic-messages", "gemini"])
def test_range_check_passes_over_unset_fields_only(dialect: str) -> None:
    """Every field alone and every pair of fields, each with values in and out of range or
    of the wrong kind: refused exactly when one is out, naming the first such field."""
    names = list(RANGES)
    for a, b in itertools.combinations_with_replacement(range(len(names)), 2):
        for va, vb in itertools.product(_TRIES, repeat=2):
            values = {names[a]: va, names[b]: vb} if a != b else {names[a]: va}
            bad = [n for n in names if n in values and not _expected(n, values[n], dialect)]
            request = hub.Request("m", **values)
            if not bad:
                validate_request(request, dialect)
                continue
            with pytest.raises(RequestError) as caught:
                validate_request(request, dialect)
            assert caught.value.field == _field(request, dialect, bad[0]), values


def test_stop_and_thinking_budget_still_checked() -> None:
    """The stop list and the thinking budget are looked at only when set; set, as before."""
    validate_request(hub.Request("m", stop=["x"] * 64, thinking={"budget_tokens": -1}), "openai-chat")
    validate_request(hub.Request("m", thinking={}), "openai-chat")
    with pytest.raises(RequestError, match="at most 64"):
        validate_request(hub.Request("m", stop=["x"] * 65), "openai-chat")
    with pytest.raises(RequestError, match="longer than"):
        validate_request(hub.Request("m", stop=["x", "y" * 1025]), "openai-chat")
    for budget in (-2, 2**31, True, 1.0):
        with pytest.raises(RequestError, match="budget_tokens"):
            validate_request(hub.Request("m", thinking={"budget_tokens": budget}), "openai-chat")


# -- check_images: a request of text parts only is passed in one loop

_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode()
_PARTS: list[hub.Part] = [
    hub.TextPart("hi"),
    hub.TextPart("", {"x": {"y": 1}}),
    hub.ImagePart("image/png", _PNG),
    hub.ImagePart("image/jpeg", _PNG),  # declared JPEG, the bytes a PNG
    hub.ImagePart("image/png", "not base64!"),
    hub.ImagePart("image/png", ""),
    hub.ImagePart(url="https://example.com/a.png"),
    hub.ThinkingPart("t"),
    hub.ToolCallPart("c", "f"),
    hub.ToolResultPart("c", [hub.TextPart("r")]),
    hub.ToolResultPart("c", [hub.TextPart("r"), hub.ImagePart("image/png", "!!")]),
    hub.ToolResultPart("c", [hub.ImagePart("image/gif", _PNG)]),
    hub.FilePart("application/pdf", "JVBERi0="),
    hub.NativePart("x", {}),
]


def test_image_check_on_text_only_requests_agrees_with_the_walk() -> None:
    """Every request of one to three messages of up to two parts drawn from text, images
    (good, mislabelled, not base64, empty, by URL), tool results with and without images and
    the other part kinds: the same answer (and position) as the walk over every part, and
    the images' limit still applies."""
    messages = [[hub.Message("user", list(parts))] for n in (1, 2) for parts in itertools.product(_PARTS, repeat=n)]
    messages.append([])
    for first, second in itertools.product(messages, messages[: len(_PARTS) + 1]):
        request = hub.Request("m", [*first, hub.Message("assistant", [hub.TextPart("a")]), *second])
        for limit in (10, 1000):
            assert check_images(request, limit) == _image_problem(request, limit), request
    assert check_images(hub.Request("m", [hub.Message("user", [hub.TextPart("a"), _PARTS[3]])]), 1000)


# -- decode_request: a body of the usual keys only skips the steps for the others

_VALUES: dict[str, list[object]] = {
    "model": ["m", 5, None, ""],
    "stream": [True, False, "false", None, 1],
    "stream_options": [{"include_usage": True}, "x", None],
    "max_tokens": [10, "x", None, True, 0],
    "max_completion_tokens": [10, None, 1.5],
    "system": ["be brief", [{"type": "text", "text": "s"}], 3],
    "temperature": [0.5, "hot"],
    "tools": [[{"type": "function", "function": {"name": "f"}}], [{"name": "f", "input_schema": {}}]],
    "user": ["u"],
    "metadata": [{"user_id": "u"}],
    EXTENSION_KEY: [{"extensions": {"x:y": 1}}],
    "other": [1],
}
_MESSAGES: list[object] = [
    [{"role": "user", "content": "hi"}],
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}],
    [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]}],
    [{"role": "user", "content": "hi", "name": "n"}],
    "not a list",
    None,
]


def _bodies_of(keys: list[str]) -> list[dict[str, object]]:
    """Bodies with ``messages`` and up to two more of ``keys``, each with each of its values."""
    out = []
    for messages in _MESSAGES:
        for n in (0, 1, 2):
            for chosen in itertools.combinations(keys, n):
                for values in itertools.product(*(_VALUES[k] for k in chosen)):
                    out.append({"messages": messages, **dict(zip(chosen, values, strict=True))})
    return out


def _decoded(decode: Callable[[object], hub.Request], body: object) -> object:
    try:
        request = decode(body)
    except (RequestError, TypeError, ValueError, KeyError, AttributeError) as exc:
        return type(exc), str(exc)
    return request, list(request.extensions.items())


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic-messages"])
def test_plain_body_decodes_as_the_general_steps_do(dialect: str) -> None:
    """Each body decodes as the same body with one unknown key more (which takes every step),
    less that key's extension: the same request, errors and extensions in the same order."""
    codec = dialects.get(dialect)
    extra = f"{dialect}:zz"
    for body in _bodies_of(list(_VALUES)):
        general = _decoded(codec.decode_request, {**body, "zz": 0})
        if isinstance(general[0], hub.Request):
            request = general[0]
            del request.extensions[extra]
            order = request.extensions.get(f"{dialect}:$order")
            if order is not None:
                order.remove("zz")
            general = request, list(request.extensions.items())
        assert _decoded(codec.decode_request, body) == general, body
