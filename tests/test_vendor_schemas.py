"""What we emit in a vendor's dialect, against that vendor's published schema.

Every JSON object the gateway sends (and the client SDK, which runs the same encoders) in
``openai-chat``, ``openai-responses``, ``anthropic-messages`` and ``gemini`` is checked
against the schema documents vendored in ``tests/schemas/`` (README.md there gives each
source and date): non-streaming bodies, each stream event, the response inside terminal
events, error bodies and error events, model lists, images and embeddings bodies.  The
streams are the whole translation matrix: every corpus capture (decoded as
``tests/test_matrix.py`` decodes it) encoded into every vendor dialect, as the gateway sends
it by default (no ``"llmbridge"`` extension data, ``gateway/_extensions.py``).

Where a vendor publishes no machine-readable schema we could vendor (Anthropic's stream
event envelopes, Gemini), the official SDK's typed models are the schema: pydantic
validation of ``anthropic.types`` and ``google.genai.types`` (the latter forbid unknown
fields).  ``test_a_removed_required_field_fails`` shows the checks bite.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import struct
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
from anthropic import types as anthropic_types
from anthropic.types import beta as anthropic_beta
from google.genai import types as genai_types
from hypothesis import given, settings
from pydantic import TypeAdapter, ValidationError
from referencing.jsonschema import DRAFT202012

from llmbridge import dialects, hub, sse
from llmbridge.gateway import _embeddings as embeddings
from llmbridge.gateway import _extensions as extensions
from llmbridge.gateway import _images as images
from llmbridge.gateway import _replies as replies
from llmbridge.media import COMPLETED, ImageEvent
from tests.conftest import CORPUS
from tests.strategies import hub_streams
from tests.test_matrix import CASES, ELIDED_IMAGE, IDS, decode

SCHEMAS = Path(__file__).resolve().parent / "schemas"
VENDOR = ("openai-chat", "openai-responses", "anthropic-messages", "gemini")


# --------------------------------------------------------------------------- the schema documents


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` (still used in places of OpenAI's 3.1 document) as
    JSON Schema: null joins the type (and the enum)."""
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items()}
    if out.pop("nullable", False) is True:
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif kind is None:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def _or_null(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _openai_as_sent(doc: dict) -> dict:
    """Where OpenAI's document is stricter than OpenAI's own API, the API's bytes win: its
    Responses streams send ``"usage": null`` (until the end) and ``"user": null`` in every
    response object (tests/corpus/openai-responses/openai-*.sse), which the document types as
    a non-null object and string.  The Open Responses spec has both as required and nullable."""
    schemas = doc["components"]["schemas"]
    inline = schemas["Response"]["allOf"][2]["properties"]
    inline["usage"] = _or_null(inline["usage"])
    props = schemas["ModelResponseProperties"]["properties"]
    props["user"] = _or_null(props["user"])
    return doc


class OpenAPI:
    """One vendored OpenAPI document: a validator per component schema."""

    def __init__(self, filename: str) -> None:
        self.uri = f"urn:llmbridge-tests:{filename}"
        self.doc = _nullable(json.loads((SCHEMAS / filename).read_text()))
        if filename.startswith("openai-"):
            self.doc = _openai_as_sent(self.doc)
        resource = DRAFT202012.create_resource(self.doc)
        self.registry: referencing.Registry = referencing.Registry().with_resource(self.uri, resource)

    @functools.cache  # noqa: B019 - one instance per document, kept for the session
    def validator(self, name: str) -> jsonschema.Draft202012Validator:
        assert name in self.doc["components"]["schemas"], name
        schema = {"$ref": f"{self.uri}#/components/schemas/{name}"}
        return jsonschema.Draft202012Validator(schema, registry=self.registry)

    def problems(self, name: str, obj: Any) -> list[str]:
        found = sorted(self.validator(name).iter_errors(obj), key=lambda e: list(e.absolute_path))
        return [
            f"{name} at {'/'.join(map(str, e.absolute_path)) or '.'}: {e.message[:300]}"
            for e in found
            if not _excused(e.instance, e.absolute_path[-1] if e.absolute_path else None)
        ]


# The objects of the capture being translated, when the target is its own dialect: an object
# the vendor itself sent, relayed as it came (a native item, a provider's own usage fields), is
# the vendor's word against its document, not ours (OpenAI's own streams add items before their
# required fields are known; xAI's url_citation has no indices).
_VENDOR_SENT: ContextVar[frozenset[str]] = ContextVar("vendor_sent", default=frozenset())


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _excused(instance: Any, key: Any = None) -> bool:
    """Whether ``instance`` (found under ``key``) is the vendor's own: an object or array it
    sent, or a field it sent with this very value."""
    sent = _VENDOR_SENT.get()
    if not sent:
        return False
    if isinstance(instance, dict | list) and _canonical(instance) in sent:
        return True
    return isinstance(key, str) and _canonical({key: instance})[1:-1] in sent


def _objects(obj: Any) -> Iterator[Any]:
    if isinstance(obj, dict):
        yield obj
        for value in obj.values():
            yield from _objects(value)
    elif isinstance(obj, list):
        yield obj
        for value in obj:
            yield from _objects(value)


@functools.cache
def vendor_sent(path: Path) -> frozenset[str]:
    """Every JSON object and array in a capture (canonical text), for :func:`_excused`."""
    body = path.read_bytes()
    found: set[str] = set()
    if body.lstrip().startswith(b"["):  # Gemini's JSON-array stream
        roots: list[Any] = json.loads(body)
    else:
        roots = []
        decoder = sse.Decoder()
        for event in decoder.feed(body) + decoder.close():
            try:
                roots.append(json.loads(event.data))
            except ValueError:
                continue
    for root in roots:
        for obj in _objects(root):
            found.add(_canonical(obj))
            if isinstance(obj, dict):  # its fields one by one, as '"key":value'
                found.update(_canonical({k: v})[1:-1] for k, v in obj.items())
    return frozenset(found)


def vendor_event_types(path: Path) -> frozenset[str]:
    return frozenset(json.loads(o).get("type") for o in vendor_sent(path) if o.startswith("{") and '"type"' in o)


@functools.cache
def openai() -> OpenAPI:
    return OpenAPI("openai-openapi.json")


@functools.cache
def anthropic() -> OpenAPI:
    return OpenAPI("anthropic-openapi-excerpt.json")


@functools.cache
def openresponses() -> OpenAPI:
    return OpenAPI("openresponses-excerpt.json")


def check_response_object(obj: dict) -> list[str]:
    """A Responses response object: OpenAI's ``Response`` and Open Responses' ``ResponseResource``."""
    return openai().problems("Response", obj) + openresponses().problems("ResponseResource", obj)


@functools.cache
def responses_events() -> dict[str, str]:
    """Responses stream event type -> its schema (the members of ``ResponseStreamEvent``)."""
    schemas = openai().doc["components"]["schemas"]
    out = {}
    for ref in schemas["ResponseStreamEvent"]["anyOf"]:
        name = ref["$ref"].rsplit("/", 1)[1]
        kind = schemas[name]["properties"]["type"]
        out[kind.get("enum", [kind.get("const")])[0]] = name
    return out


@functools.cache
def _adapter(model: Any) -> TypeAdapter:
    return TypeAdapter(model)


def _pydantic(model: Any, obj: Any, what: str) -> list[str]:
    try:
        _adapter(model).validate_python(obj)
    except ValidationError as e:
        errors = [err for err in e.errors() if not _excused(err.get("input"), (err["loc"] or [None])[-1])]
        return [f"{what}: {err['loc']}: {err['msg']}" for err in errors][:5]
    return []


# Google's error body (AIP-193, google.rpc.Status as the Gemini API writes it).
_GOOGLE_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "status"],
            "properties": {
                "code": {"type": "integer"},
                "message": {"type": "string"},
                "status": {"type": "string", "pattern": "^[A-Z_]+$"},
                "details": {"type": "array", "items": {"type": "object", "required": ["@type"]}},
            },
        }
    },
}


def _google_error(obj: Any) -> list[str]:
    return [f"google error: {e.message}" for e in jsonschema.Draft202012Validator(_GOOGLE_ERROR).iter_errors(obj)]


# --------------------------------------------------------------------------- one object, by dialect and role


def check_chat_chunk(obj: dict) -> list[str]:
    if "error" in obj and "choices" not in obj:  # OpenAI's own mid-stream error: the error object alone
        return openai().problems("Error", obj["error"])
    if "error" in obj:
        # The mid-stream error chunk is OpenRouter's shape (docs/gateway.md, "Errors"): OpenAI's
        # error object beside choices ending with finish_reason "error", a word OpenAI's enum
        # lacks (the SDK raises at the "error" key before it reads a choice).  The rest of the
        # chunk is held to the schema.
        choices = [{**c, "finish_reason": None} if c.get("finish_reason") == "error" else c for c in obj["choices"]]
        rest = {k: v for k, v in obj.items() if k != "error"}
        return openai().problems("Error", obj["error"]) + openai().problems(
            "CreateChatCompletionStreamResponse", {**rest, "choices": choices}
        )
    return openai().problems("CreateChatCompletionStreamResponse", obj)


_VENDOR_TYPES: ContextVar[frozenset[str]] = ContextVar("vendor_types", default=frozenset())


def check_responses_event(obj: dict) -> list[str]:
    name = responses_events().get(obj.get("type"))
    if name is None:
        if obj.get("type") in _VENDOR_TYPES.get():  # the vendor's own event, newer than its document
            return []
        return [f"Responses event type {obj.get('type')!r} is not in ResponseStreamEvent"]
    return openai().problems(name, obj)


def check_anthropic_event(obj: dict) -> list[str]:
    kind = obj.get("type")
    if kind == "error":  # the stream's error event: ErrorResponse's error object
        return anthropic().problems("ErrorResponse", {"request_id": None, **obj})
    if kind == "ping":
        return []
    model = _ANTHROPIC_EVENTS.get(kind)
    if model is None:
        return [f"anthropic event type {kind!r}"]
    return _pydantic(model, obj, f"anthropic {kind}")


# Each stream event type's model in the SDK's beta types (a superset of the others: server-tool
# blocks, context management).
_ANTHROPIC_EVENTS = {
    "message_start": anthropic_beta.BetaRawMessageStartEvent,
    "content_block_start": anthropic_beta.BetaRawContentBlockStartEvent,
    "content_block_delta": anthropic_beta.BetaRawContentBlockDeltaEvent,
    "content_block_stop": anthropic_beta.BetaRawContentBlockStopEvent,
    "message_delta": anthropic_beta.BetaRawMessageDeltaEvent,
    "message_stop": anthropic_beta.BetaRawMessageStopEvent,
}


def check_gemini_chunk(obj: dict) -> list[str]:
    if "error" in obj:
        return _google_error(obj)
    return _pydantic(genai_types.GenerateContentResponse, obj, "gemini GenerateContentResponse")


STREAM_CHECKS = {
    "openai-chat": check_chat_chunk,
    "openai-responses": check_responses_event,
    "anthropic-messages": check_anthropic_event,
    "gemini": check_gemini_chunk,
}


def check_body(dialect: str, body: dict) -> list[str]:
    """A non-streaming answer body (an error body when the answer was an error)."""
    if "error" in body and (dialect != "openai-responses" or "object" not in body):
        return check_error_body(dialect, body)
    if dialect == "openai-chat":
        return openai().problems("CreateChatCompletionResponse", body)
    if dialect == "openai-responses":
        return check_response_object(body)
    if dialect == "anthropic-messages":
        return anthropic().problems("Message", body)
    return check_gemini_chunk(body)


def check_error_body(dialect: str, body: Any) -> list[str]:
    if dialect in ("openai-chat", "openai-responses"):
        return openai().problems("ErrorResponse", body)
    if dialect == "anthropic-messages":
        return anthropic().problems("ErrorResponse", body)
    return _google_error(body)


def sse_objects(body: bytes) -> Iterator[dict]:
    decoder = sse.Decoder()
    for event in decoder.feed(body) + decoder.close():
        if event.data.strip() == "[DONE]":
            continue
        yield json.loads(event.data)


# --------------------------------------------------------------------------- what the gateway emits


def plain_stream(target: str, events: list[hub.Event], **options: Any) -> bytes:
    """The stream the gateway sends a ``target`` client by default (no extension data)."""
    module = dialects.get(target)
    encoder = extensions.PlainEncoder(module.StreamEncoder(**options), target)
    return b"".join(encoder.encode(e) for e in events)


def plain_body(target: str, events: list[hub.Event]) -> dict:
    """The non-streaming body the gateway sends a ``target`` client by default (an answer
    that ended in an error is an error body, ``Exchange.respond`` in gateway/_app.py)."""
    response = hub.assemble(events)
    if response.error is not None:
        return replies.error_body(target, response.error)[1]  # type: ignore[return-value]
    response = extensions.plain_response(response, target)
    return extensions.plain_body(dialects.get(target).encode_response(response))


def stream_problems(target: str, body: bytes) -> list[str]:
    check = STREAM_CHECKS[target]
    problems = []
    for n, obj in enumerate(sse_objects(body)):
        problems += [f"event {n} ({obj.get('type', '')}): {p}" for p in check(obj)]
        if target == "openai-responses" and isinstance(obj.get("response"), dict):  # created ... completed
            problems += [f"event {n} ({obj['type']}): {p}" for p in check_response_object(obj["response"])]
    return problems


@pytest.mark.parametrize("target", VENDOR)
@pytest.mark.parametrize(("source", "path"), CASES, ids=IDS)
def test_matrix_stream_events_validate(source, path, target):
    if target == "gemini" and path.stem in ELIDED_IMAGE:
        pytest.skip("the capture's image base64 was elided: not base64 (test_matrix.ELIDED_IMAGE)")
    events = decode(source, path.read_bytes())
    _VENDOR_SENT.set(vendor_sent(path) if source == target else frozenset())
    _VENDOR_TYPES.set(vendor_event_types(path) if source == target else frozenset())
    problems = stream_problems(target, plain_stream(target, events))
    if target == "openai-chat":  # without stream_options.include_usage the usage rides on a choice
        problems += stream_problems(target, plain_stream(target, events, include_usage=False))
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("target", VENDOR)
@pytest.mark.parametrize(("source", "path"), CASES, ids=IDS)
def test_matrix_bodies_validate(source, path, target):
    if target == "gemini" and path.stem in ELIDED_IMAGE:
        pytest.skip("the capture's image base64 was elided: not base64 (test_matrix.ELIDED_IMAGE)")
    events = decode(source, path.read_bytes())
    start = events[0] if events and isinstance(events[0], hub.ResponseStart) else None
    if target == "anthropic-messages" and start is not None and not start.model:
        pytest.xfail("Message.model is required non-empty: the source named no model, the gateway names none yet")
    _VENDOR_SENT.set(vendor_sent(path) if source == target else frozenset())
    problems = check_body(target, plain_body(target, events))
    assert not problems, "\n".join(problems[:20])


# --------------------------------------------------------------------------- errors


ERRORS = [
    hub.Error("bad field", "invalid_request", status=400),
    hub.Error("no key", "authentication"),
    hub.Error("no access", "permission"),
    hub.Error("model x not found", "not_found"),
    hub.Error("too big", "request_too_large"),
    hub.Error("slow down", "rate_limit", code="rate_limit_exceeded"),
    hub.Error("boom", "api_error"),
    hub.Error("busy", "overloaded"),
    hub.Error("too slow", "timeout"),
    hub.Error("cut", "incomplete_stream", status=502),
    hub.Error("garbled", "protocol_error", code="bad_upstream_image", status=502),
    hub.Error("415", "unsupported_media_type"),
]


@pytest.mark.parametrize("target", VENDOR)
@pytest.mark.parametrize("error", ERRORS, ids=[e.type for e in ERRORS])
def test_error_bodies_validate(target, error):
    status, body = replies.error_body(target, error)
    assert 400 <= status < 600
    assert not check_error_body(target, body)


def _stream_ending_in(error: hub.Error, *, text: bool) -> list[hub.Event]:
    events: list[hub.Event] = [hub.ResponseStart(id="r1", model="m", created=1)]
    if text:
        events += [hub.BlockStart(0, "text"), hub.Delta(0, "Hi"), hub.BlockStop(0)]
        events += [hub.Usage(input_tokens=3, output_tokens=1)]
    return [*events, error, hub.ResponseEnd()]


@pytest.mark.parametrize("text", [False, True], ids=["at-once", "after-text"])
@pytest.mark.parametrize("target", VENDOR)
@pytest.mark.parametrize("error", ERRORS, ids=[e.type for e in ERRORS])
def test_error_events_validate(target, error, text):
    body = plain_stream(target, _stream_ending_in(error, text=text))
    problems = stream_problems(target, body)
    assert not problems, "\n".join(problems)
    assert b"llmbridge" not in body  # error objects too: no extension data unless asked


# --------------------------------------------------------------------------- model lists


NAMES = ["gpt-x", "claude-y", "local"]


def test_model_lists_validate():
    served = {name: dialects.served(name) for name in dialects.NAMES}
    for name in ("openai-chat", "openai-responses", "llm-stream"):  # OpenAI's shape
        assert not openai().problems("ListModelsResponse", served[name].models(NAMES))
        for model in served[name].models(NAMES)["data"]:
            assert not openai().problems("Model", model)
        assert not openai().problems("Model", served[name].model("local"))
    listing = served["anthropic-messages"].models(NAMES)
    assert not _pydantic(anthropic_types.ModelInfo, listing["data"][0], "anthropic ModelInfo")
    for key in ("data", "first_id", "last_id", "has_more"):  # the SDK's page: SyncPage's fields
        assert key in listing
    assert not _pydantic(anthropic_types.ModelInfo, served["anthropic-messages"].model("local"), "ModelInfo")
    listing = served["gemini"].models(NAMES)
    assert not list(jsonschema.Draft202012Validator(_GEMINI_MODELS).iter_errors(listing))
    assert not list(jsonschema.Draft202012Validator(_GEMINI_MODEL).iter_errors(served["gemini"].model("local")))


# Gemini's Model resource as its REST reference gives it (https://ai.google.dev/api/models#Model):
# google-genai's typed Model renames the REST fields (supportedGenerationMethods -> supported_actions),
# so it cannot check the REST shape.
_GEMINI_MODEL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "version"],
    "properties": {
        "name": {"type": "string", "pattern": "^models/[^/]+$"},
        "baseModelId": {"type": "string"},
        "version": {"type": "string"},
        "displayName": {"type": "string"},
        "description": {"type": "string"},
        "inputTokenLimit": {"type": "integer"},
        "outputTokenLimit": {"type": "integer"},
        "supportedGenerationMethods": {"type": "array", "items": {"type": "string"}},
        "thinking": {"type": "boolean"},
        "temperature": {"type": "number"},
        "maxTemperature": {"type": "number"},
        "topP": {"type": "number"},
        "topK": {"type": "integer"},
    },
}
_GEMINI_MODELS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"models": {"type": "array", "items": _GEMINI_MODEL}, "nextPageToken": {"type": "string"}},
}


# --------------------------------------------------------------------------- images and embeddings


def _image(**fields: Any) -> ImageEvent:
    b64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    usage = {
        "total_tokens": 5,
        "input_tokens": 2,
        "output_tokens": 3,
        "input_tokens_details": {"text_tokens": 2, "image_tokens": 0},
    }
    return ImageEvent(COMPLETED, b64, 0, "png", usage=usage, **fields)


@pytest.mark.parametrize(
    "fields", [{}, {"size": "1024x1024", "quality": "high", "background": "opaque"}], ids=["unsaid", "said"]
)
def test_image_events_validate(fields):
    """An ``image_generation.completed`` as the gateway writes it for a translated upstream
    (Gemini: the size, quality and background were never said) and for one that said them."""
    event = _image(**fields)
    obj = next(sse_objects(images.encode_event(event, 1700000000)))
    assert not openai().problems("ImageGenCompletedEvent", obj)
    assert not _pydantic(_openai_image_event(), obj, "openai ImageGenCompletedEvent")


def _openai_image_event() -> Any:
    from openai.types import ImageGenCompletedEvent

    return ImageGenCompletedEvent


@pytest.mark.parametrize("error", ERRORS, ids=[e.type for e in ERRORS])
def test_image_error_events_validate(error):
    body = images.encode_error(error)
    obj = next(sse_objects(body))
    assert obj["type"] == "error" and not openai().problems("Error", obj["error"])
    assert b"llmbridge" not in body and body.endswith(b"data: [DONE]\n\n")


def test_images_body_validates():
    req = images.ImageRequest(model="img", prompt="a cat")
    body = images.response_body([_image()], req, 1700000000)
    assert not openai().problems("ImagesResponse", body)


def test_embeddings_bodies_validate():
    result = embeddings.EmbedResult(vectors=[[0.1, 0.2], [0.3, 0.4]], input_tokens=4)
    body = embeddings.openai_body(result, "local-embed", "float")
    assert not openai().problems("CreateEmbeddingResponse", body)
    # encoding_format "base64": the document types only the float arrays; the base64 string is
    # the same little-endian float32 values (what the SDK decodes)
    body = embeddings.openai_body(result, "local-embed", "base64")
    for item in body["data"]:
        raw = base64.b64decode(item["embedding"])
        item["embedding"] = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    assert not openai().problems("CreateEmbeddingResponse", body)
    single = embeddings.gemini_body(embeddings.EmbedResult(vectors=[[0.1, 0.2]], input_tokens=2), batch=False)
    assert not _pydantic(genai_types.ContentEmbedding, single["embedding"], "gemini ContentEmbedding")
    batch = embeddings.gemini_body(result, batch=True)
    for item in batch["embeddings"]:
        assert not _pydantic(genai_types.ContentEmbedding, item, "gemini ContentEmbedding")


# --------------------------------------------------------------------------- the checks bite


def _required_paths(check: Any, obj: Any) -> Iterator[tuple[str, ...]]:
    """Paths of keys in ``obj`` whose removal the ``check`` reports (a sample: top level and
    one level down)."""
    for key in list(obj):
        yield (key,)
        if isinstance(obj[key], dict):
            for sub in list(obj[key]):
                yield (key, sub)


def _without(obj: dict, path: tuple[str, ...]) -> dict:
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


TEXT = [
    hub.ResponseStart(id="r1", model="m", created=1),
    hub.BlockStart(0, "text"),
    hub.Delta(0, "Hello"),
    hub.BlockStop(0),
    hub.Usage(input_tokens=3, output_tokens=1),
    hub.Finish("end_turn"),
    hub.ResponseEnd(),
]


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("openai-responses", ("completed_at",)),  # Open Responses' required list
        ("openai-responses", ("presence_penalty",)),
        ("openai-responses", ("top_p",)),  # OpenAI's too
        ("openai-responses", ("temperature",)),
        ("openai-responses", ("output",)),
        ("openai-chat", ("choices",)),
        ("anthropic-messages", ("usage", "cache_creation")),
        ("anthropic-messages", ("content",)),
        ("anthropic-messages", ("stop_sequence",)),
    ],
)
def test_a_removed_required_field_fails(target, path):
    body = plain_body(target, TEXT)
    assert not check_body(target, body)
    broken = _without(body, path)
    assert check_body(target, broken), f"{target} without {'.'.join(path)} still validates"


def test_a_removed_required_field_fails_in_stream_events():
    objs = list(sse_objects(plain_stream("openai-chat", TEXT)))
    assert all(not check_chat_chunk(o) for o in objs)
    assert check_chat_chunk({**objs[1], "choices": [_without(objs[1]["choices"][0], ("finish_reason",))]})
    objs = list(sse_objects(plain_stream("openai-responses", TEXT)))
    completed = next(o for o in objs if o["type"] == "response.completed")
    assert not check_responses_event(completed)
    assert check_responses_event({**completed, "response": _without(completed["response"], ("top_p",))})
    assert check_responses_event(_without(completed, ("sequence_number",)))
    objs = list(sse_objects(plain_stream("anthropic-messages", TEXT)))
    assert check_anthropic_event(_without(objs[0], ("message",)))
    assert check_error_body("anthropic-messages", {"type": "error", "error": {"type": "api_error", "message": "x"}})
    assert check_gemini_chunk({"candidates": [{"index": "first"}]})
    assert check_gemini_chunk({"candidates": [], "llmbridge": {}})


# --------------------------------------------------------------------------- through the gateway, over HTTP


def _request(dialect: str, model: str, stream: bool) -> tuple[str, dict]:
    user = [{"role": "user", "content": "hi"}]
    if dialect == "openai-chat":
        body: dict[str, Any] = {"model": model, "messages": user, "stream": stream}
        return "/v1/chat/completions", body
    if dialect == "openai-responses":
        return "/v1/responses", {"model": model, "input": "hi", "stream": stream}
    if dialect == "anthropic-messages":
        return "/v1/messages", {"model": model, "max_tokens": 64, "messages": user, "stream": stream}
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/v1beta/models/{model}:{method}", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def _check_answer(dialect: str, response: Any, stream: bool) -> list[str]:
    """Problems of one HTTP answer of the gateway in ``dialect``."""
    if response.status_code != 200:
        return check_error_body(dialect, response.json())
    if stream:
        return stream_problems(dialect, response.content)
    return check_body(dialect, response.json())


# Upstream answers of each dialect, as the replay server plays them: text, tools, thinking, an
# error event after text, a cut stream, an HTTP error.
_GATEWAY_CASES = {
    "anthropic-messages": ["claude-text-simple", "claude-thinking-then-tool-use", "claude-text-simple@status=500"],
    "openai-chat": ["hf-novita-text", "groq-gpt-oss-error-event-after-text", "azure-gpt4o-mini-tool-call"],
    "openai-responses": ["openai-text", "openai-function-call", "openai-text@truncate=400"],
    "gemini": ["gemini20-text", "gemini25pro-thoughts", "gemini20-text@status=429"],
}


@pytest.fixture(scope="module")
def gateway_url():
    from llmbridge import replay
    from llmbridge.gateway import config, create_app
    from tests.gateway_util import replay_config, serving

    with serving(replay.create_app(CORPUS, seed=3)) as up:
        models = {f"{d}.{n}": (d, n) for d, names in _GATEWAY_CASES.items() for n in names}
        with serving(create_app(config.parse(replay_config(up.url, models)))) as gw:
            yield gw.url


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", VENDOR)
def test_gateway_answers_validate(gateway_url, client, stream):
    """The gateway's own bytes (translated, relayed, errors before and after the start) in
    each vendor dialect, for upstreams of every vendor dialect."""
    import httpx

    problems = []
    with httpx.Client(timeout=30) as http:
        for dialect, names in _GATEWAY_CASES.items():
            for name in names:
                # a same-dialect upstream's answer is relayed or rebuilt from the vendor's own objects
                capture = CORPUS / dialect / f"{name.split('@')[0]}.sse"
                _VENDOR_SENT.set(vendor_sent(capture) if dialect == client else frozenset())
                _VENDOR_TYPES.set(vendor_event_types(capture) if dialect == client else frozenset())
                path, body = _request(client, f"{dialect}.{name}", stream)
                r = http.post(gateway_url + path, json=body)
                assert r.status_code < 500 or "@status=500" in name or "@truncate" in name, r.text
                problems += [f"{dialect}/{name}: {p}" for p in _check_answer(client, r, stream)]
                assert b"llmbridge" not in r.content, f"{dialect}/{name}: extension data in a plain answer"
        _VENDOR_SENT.set(frozenset())
        for path, body in (_request(client, "no-such-model", stream), (_request(client, "x", stream)[0], [1])):
            r = http.post(gateway_url + path, json=body)
            assert r.status_code in (400, 404)
            problems += [f"{path} {r.status_code}: {p}" for p in check_error_body(client, r.json())]
            assert b"llmbridge" not in r.content
    assert not problems, "\n".join(problems[:30])


def test_gateway_model_lists_validate(gateway_url):
    import httpx

    with httpx.Client(timeout=30) as http:
        listing = http.get(gateway_url + "/v1/models").json()
        assert not openai().problems("ListModelsResponse", listing)
        one = http.get(gateway_url + "/v1/models/" + listing["data"][0]["id"]).json()
        assert not openai().problems("Model", one)
        page = http.get(gateway_url + "/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
        for model in page["data"]:
            assert not _pydantic(anthropic_types.ModelInfo, model, "anthropic ModelInfo")
        name = page["data"][0]["id"]
        one = http.get(gateway_url + "/v1/models/" + name, headers={"anthropic-version": "2023-06-01"}).json()
        assert not _pydantic(anthropic_types.ModelInfo, one, "anthropic ModelInfo")
        gemini = http.get(gateway_url + "/v1beta/models").json()
        assert not list(jsonschema.Draft202012Validator(_GEMINI_MODELS).iter_errors(gemini))
        one = http.get(gateway_url + "/v1beta/" + gemini["models"][0]["name"]).json()
        assert not list(jsonschema.Draft202012Validator(_GEMINI_MODEL).iter_errors(one))
        missing = http.get(gateway_url + "/v1/models/no-such-model")
        assert missing.status_code == 404 and not check_error_body("openai-chat", missing.json())


def test_embedded_model_answers_validate():
    """The embedded model (``local``) through the gateway, in each vendor dialect."""
    from tests.conftest import require_local_model

    require_local_model()
    import httpx

    from llmbridge.gateway import create_app
    from tests.gateway_util import serving

    problems = []
    with serving(create_app()) as gw, httpx.Client(timeout=120) as http:
        for client in VENDOR:
            for stream in (True, False):
                path, body = _request(client, "local", stream)
                if client == "openai-chat":
                    body["max_tokens"] = 8
                elif client == "openai-responses":
                    body["max_output_tokens"] = 8
                elif client == "gemini":
                    body["generationConfig"] = {"maxOutputTokens": 8}
                else:
                    body["max_tokens"] = 8
                r = http.post(gw.url + path, json=body)
                assert r.status_code == 200, r.text
                problems += [f"{client} stream={stream}: {p}" for p in _check_answer(client, r, stream)]
        r = http.post(gw.url + "/v1/embeddings", json={"model": "local-embed", "input": ["a", "b"]})
        assert r.status_code == 200 and not openai().problems("CreateEmbeddingResponse", r.json())
    assert not problems, "\n".join(problems[:30])


# --------------------------------------------------------------------------- any hub stream


@settings(max_examples=60)
@given(events=hub_streams(kinds=("text", "thinking", "tool_call", "data")))
@pytest.mark.parametrize("target", VENDOR)
def test_any_hub_stream_validates(target, events):
    """Beyond the captures: any valid hub stream (text, thinking, tool calls, images; two
    choices, foreign fidelity, any finish reason or error) encoded into each vendor dialect,
    streaming and whole.  (Native blocks are a vendor's own objects, which only its decoder
    makes whole: the captures cover them.)"""
    _VENDOR_SENT.set(frozenset())
    _VENDOR_TYPES.set(frozenset())
    problems = stream_problems(target, plain_stream(target, events))
    problems += check_body(target, plain_body(target, events))
    assert not problems, "\n".join(problems[:20])


def _required(doc: OpenAPI, name: str) -> set[str]:
    """The top-level required keys of a component (through ``allOf``)."""
    schema = doc.doc["components"]["schemas"][name]
    keys = set(schema.get("required", ()))
    for part in schema.get("allOf", ()):
        if "$ref" in part:
            keys |= _required(doc, part["$ref"].rsplit("/", 1)[1])
        keys |= set(part.get("required", ()))
    return keys


@pytest.mark.parametrize(
    ("target", "documents"),
    [
        ("openai-chat", [("openai", "CreateChatCompletionResponse")]),
        ("openai-responses", [("openai", "Response"), ("openresponses", "ResponseResource")]),
        ("anthropic-messages", [("anthropic", "Message")]),
    ],
)
def test_every_required_field_is_checked(target, documents):
    """Each required top-level field of the body, taken away, is a validation error."""
    body = plain_body(target, TEXT)
    assert not check_body(target, body)
    for doc_name, schema in documents:
        required = _required(globals()[doc_name](), schema)
        assert required and required <= set(body), sorted(required - set(body))
        for key in sorted(required):
            assert check_body(target, _without(body, (key,))), f"{target} without {key} still validates"
