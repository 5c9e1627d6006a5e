"""The wire dialects. Every dialect module has the same small surface:

``NAME``
    The dialect's name (``"openai-chat"`` ...).
``STREAM_CONTENT_TYPE``
    The media type of its streamed responses.
``decode_request(body: dict, *, model: str | None = None) -> hub.Request``
    A client's request body (already JSON-parsed) to the hub; raises
    :class:`llmbridge.errors.RequestError` naming the field.  ``model`` comes
    from the URL where the dialect puts it there (Gemini).
``encode_request(request: hub.Request) -> dict``
    The hub request as this dialect's body.
``endpoint(request, *, base_url, api_key) -> tuple[str, dict[str, str]]``
    Upstream URL and headers for sending ``request`` (streaming per ``request.stream``).
``StreamDecoder()``
    ``feed(bytes) -> list[hub.Event]``, ``close() -> list[hub.Event]``,
    ``violations: list[hub.Violation]``.  Lenient: real-world quirks decode;
    grammar breaks are recorded as violations; a missing terminal event
    becomes ``Error(type="incomplete_stream")`` + ``ResponseEnd``.
``StreamEncoder()``
    ``encode(event) -> bytes`` for one hub event (may return ``b""`` while it
    buffers); an ``Error`` becomes the dialect's error event followed by its
    terminal event.
``stream_encoder(request) -> StreamEncoder`` (optional)
    The encoder for the answer to a client's ``request``, where the request shapes the
    stream (OpenAI's ``stream_options.include_usage``); without it, ``StreamEncoder()``.
``decode_response(body: dict) -> list[hub.Event]``
    A non-streaming response body as a hub stream.
``encode_response(response: hub.Response) -> dict``
    An assembled response as this dialect's non-streaming body.
``encode_error(error: hub.Error) -> tuple[int, dict]``
    HTTP status and error body in this dialect's shape.
``decode_error(status: int, body: bytes) -> hub.Error``
    An upstream's HTTP error response to the hub.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, cast

from ._contracts import DialectModule, StreamEncoder, missing_surface

if TYPE_CHECKING:
    from .base import Served

__all__ = ["MORE_NAMES", "NAMES", "get", "served", "stream_encoder"]

NAMES = ("llm-stream", "openai-chat", "openai-responses", "anthropic-messages", "gemini", "mmsp")

_MODULES = {
    "llm-stream": "llm_stream",
    "openai-chat": "openai_chat",
    "openai-responses": "openai_responses",
    "anthropic-messages": "anthropic_messages",
    "gemini": "gemini",
    "mmsp": "mmsp",
    "cohere-v2": "cohere_v2",
    "bedrock-converse": "bedrock_converse",
    "gemini-interactions": "gemini_interactions",
}

# Source dialects beyond the six that the translation matrix targets and the gateway serves.
MORE_NAMES = ("cohere-v2", "bedrock-converse", "gemini-interactions")


def stream_encoder(module: DialectModule, request: object) -> StreamEncoder:
    """A stream encoder of dialect ``module`` for the answer to ``request``."""
    # A plain module's attributes are its __dict__ (ModuleType has no attribute of that name),
    # unless it has a module __getattr__: then, or for any other object, getattr.  The dict read
    # is ~50 ns; getattr of a missing name builds an AttributeError first (~800 ns, every
    # translated request, since only openai-chat has the factory).
    space = getattr(module, "__dict__", None)
    if type(module) is ModuleType and type(space) is dict and "__getattr__" not in space:
        factory = space.get("stream_encoder")
    else:
        factory = getattr(module, "stream_encoder", None)
    encoder: StreamEncoder = factory(request) if factory is not None else module.StreamEncoder()
    return encoder


_LOADED: dict[str, DialectModule] = {}


def get(name: str) -> DialectModule:
    """The module of dialect ``name``, typed by its contract; ``KeyError`` with the known names
    for an unknown one.

    The first call per dialect imports the module and checks it has the whole surface
    (``TypeError`` naming what is missing: a broken dialect, which the contract test finds
    first); later calls are one dict lookup.
    """
    loaded = _LOADED.get(name)  # import_module costs ~0.5 ms a call: the gateway asks twice a request
    if loaded is not None:
        return loaded
    try:
        module = _MODULES[name]
    except KeyError:
        raise KeyError(f"unknown dialect {name!r}; known: {', '.join(NAMES + MORE_NAMES)}") from None
    imported = importlib.import_module(f"{__name__}.{module}")
    missing = missing_surface(imported)
    if missing:
        raise TypeError(f"dialect {name!r} lacks {', '.join(missing)}")
    # missing_surface just found every member of DialectModule on the module: the cast says so.
    loaded = _LOADED[name] = cast(DialectModule, imported)
    return loaded


def served(name: str) -> Served:
    """How the gateway serves dialect ``name`` (its package's ``GATEWAY``: endpoint paths,
    keep-alive bytes, relay markers, model-list shapes). ``KeyError`` for a dialect the
    gateway does not serve (one of :data:`MORE_NAMES`, or unknown)."""
    if name not in NAMES:
        raise KeyError(f"the gateway serves no dialect {name!r}; it serves {', '.join(NAMES)}")
    traits: Served = getattr(get(name), "GATEWAY")  # noqa: B009  (not a member of DialectModule)
    return traits
