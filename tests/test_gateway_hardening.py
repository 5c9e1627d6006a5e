"""Issue 11's hardening items on the request side, over real HTTP: bodies nested thousands of
levels deep, loose types and out-of-range parameters, our extension data in vendor answers,
and the chat stream's error and usage chunks (gateway spec)."""

from __future__ import annotations

import json
import logging

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge import dialects, hub, replay
from llmbridge.dialects.base import decode_all
from llmbridge.errors import RequestError
from llmbridge.gateway import config, create_app
from llmbridge.gateway._checks import nesting_exceeds, validate_request
from tests.conftest import CORPUS
from tests.gateway_util import replay_config, serving
from tests.test_gateway_faults import ALL, assert_error_shape, request_for

HTTP = httpx.Client(timeout=10)
MODEL = "hf-novita-text"  # an openai-chat upstream: every endpoint but chat's translates
THINKING = "claude-thinking"  # an anthropic upstream with a signed thinking block
SEARCH = "claude-search"  # an anthropic upstream with server tool blocks and citations
TOOLS = "responses-code-interpreter"  # a Responses upstream with hosted-tool items (native blocks)
VENDOR = ["openai-chat", "openai-responses", "anthropic-messages", "gemini", "mmsp"]
BIG = int("9" * 400)


@pytest.fixture(scope="module")
def gw():
    with serving(replay.create_app(CORPUS, seed=5)) as up:
        raw = replay_config(
            up.url,
            {
                MODEL: ("openai-chat", MODEL),
                THINKING: ("anthropic-messages", "claude-thinking-then-tool-use"),
                "gemini-text": ("gemini", "gemini20-text"),
                SEARCH: ("anthropic-messages", "claude-web-search-citations"),
                TOOLS: ("openai-responses", "openai-code-interpreter-reasoning"),
            },
        )
        with serving(create_app(config.parse(raw))) as server:
            yield server


def post_text(gw, dialect: str, text: str, stream: bool = True) -> httpx.Response:
    path, _, headers = request_for(dialect, MODEL, stream)
    return HTTP.post(gw.url + path, content=text.encode(), headers={"content-type": "application/json", **headers})


def no_traceback(caplog) -> None:
    text = caplog.text
    assert "Traceback" not in text and "RecursionError" not in text and "internal error" not in text, text


# --------------------------------------------------------------------------- 4: deep JSON


@pytest.mark.parametrize("depth", [200, 5000])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", ALL)
def test_deeply_nested_body_is_400_in_the_endpoint_shape(gw, dialect, stream, depth, caplog):
    _, body, _ = request_for(dialect, MODEL, stream)
    text = json.dumps(body)[:-1] + ', "metadata": {"x": ' + "[" * depth + "]" * depth + "}}"
    with caplog.at_level(logging.INFO):
        response = post_text(gw, dialect, text, stream)
    assert_error_shape(dialect, response, 400, "invalid_request")
    assert "levels deep" in response.text
    no_traceback(caplog)


def test_nesting_limit_is_configurable_and_exact(gw):
    assert not nesting_exceeds({"a": [[[]]]}, 4) and nesting_exceeds({"a": [[[[]]]]}, 4)
    assert not nesting_exceeds("[[[[[[", 1)  # a string is no container
    raw = replay_config("http://127.0.0.1:9", {"m": ("openai-chat", "m")}, gateway={"max_json_depth": 3})
    app = create_app(config.parse(raw))
    with serving(app) as small:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": {"a": [[1]]}}
        response = HTTP.post(small.url + "/v1/chat/completions", json=body)
        assert_error_shape("openai-chat", response, 400, "invalid_request")
    with pytest.raises(config.ConfigError, match=r"gateway\.max_json_depth"):
        config.parse({"gateway": {"max_json_depth": 0}})


# --------------------------------------------------------------------------- 7: loose validation


def _set(dialect: str, body: dict, field: str, value: object) -> dict:
    """``body`` with a generation parameter set where ``dialect`` keeps it."""
    body = json.loads(json.dumps(body))
    if dialect == "gemini":
        body.setdefault("generationConfig", {})[field] = value
    elif dialect == "llm-stream" and field != "stream":
        body.setdefault("parameters", {})[field] = value
    elif dialect == "mmsp":
        body.setdefault("config", {})[field] = value
    else:
        body[field] = value
    return body


OUT_OF_RANGE = {
    "openai-chat": [
        ("max_tokens", 0),
        ("max_tokens", -3),
        ("max_completion_tokens", BIG),
        ("n", 10**6),
        ("temperature", 1e308),
        ("top_p", 7),
        ("presence_penalty", -100),
    ],
    "openai-responses": [("max_output_tokens", 0), ("max_output_tokens", BIG), ("temperature", 1e308), ("top_p", -1)],
    # (max_tokens 0 is Anthropic's own "only fill the prompt cache": accepted, see test_gateway_acceptance)
    "anthropic-messages": [("max_tokens", -1), ("max_tokens", BIG), ("temperature", 1e308), ("top_k", -5)],
    "gemini": [
        ("maxOutputTokens", 0),
        ("maxOutputTokens", BIG),
        ("candidateCount", 10**6),
        ("temperature", 1e308),
        ("topP", 2.5),
    ],
    "llm-stream": [("max_tokens", 0), ("max_tokens", BIG), ("temperature", 1e308), ("seed", BIG)],
    "mmsp": [("max_tokens", BIG), ("temperature", 1e308)],
}
CASES = [(d, f, v) for d, cases in OUT_OF_RANGE.items() for f, v in cases]


@pytest.mark.parametrize(("dialect", "field", "value"), CASES, ids=[f"{d}-{f}-{str(v)[:6]}" for d, f, v in CASES])
def test_out_of_range_parameters_are_400_naming_the_field(gw, dialect, field, value, caplog):
    path, body, headers = request_for(dialect, MODEL)
    with caplog.at_level(logging.INFO):
        response = HTTP.post(gw.url + path, json=_set(dialect, body, field, value), headers=headers)
    assert_error_shape(dialect, response, 400, "invalid_request")
    error = dialects.get(dialect).decode_error(400, response.content)
    assert field in error.message, error.message
    assert "9" * 30 not in error.message  # a 400-digit number is described, not echoed
    no_traceback(caplog)


STREAM_FLAGS = [
    (d, v)
    for d in ("openai-chat", "openai-responses", "anthropic-messages", "llm-stream")
    for v in ("yes", "false", 1, "true")
]


@pytest.mark.parametrize(("dialect", "value"), STREAM_FLAGS)
def test_a_stream_flag_that_is_not_a_boolean_is_400(gw, dialect, value):
    path, body, headers = request_for(dialect, MODEL)
    body["stream"] = value
    response = HTTP.post(gw.url + path, json=body, headers=headers)
    assert_error_shape(dialect, response, 400, "invalid_request")
    assert "stream" in dialects.get(dialect).decode_error(400, response.content).message


def test_llm_stream_says_which_number_is_wrong(gw):
    path, body, headers = request_for("llm-stream", MODEL)
    response = HTTP.post(gw.url + path, json=_set("llm-stream", body, "max_tokens", 1.5), headers=headers)
    assert_error_shape("llm-stream", response, 400, "invalid_request")
    message = dialects.get("llm-stream").decode_error(400, response.content).message
    assert "parameters.max_tokens" in message and "an integer" in message and "1.5" in message
    assert "a number, not a number" not in message


def test_in_range_parameters_still_pass(gw):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2**31 - 1,
        "temperature": 0,
        "top_p": 1,
        "n": 1,
        "seed": -(2**63),
        "stream": False,
    }
    response = HTTP.post(gw.url + "/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text


def test_validate_request_is_one_function_for_every_dialect():
    validate_request(
        hub.Request(model="m", max_tokens=1, temperature=2.0, top_k=0, thinking={"budget_tokens": -1}), "gemini"
    )
    for name, value in [("max_tokens", -1), ("n", 129), ("temperature", float("nan")), ("top_p", float("inf"))]:
        with pytest.raises(RequestError, match=name):
            validate_request(hub.Request(model="m", **{name: value}), "anthropic-messages")
    validate_request(hub.Request(model="m", max_tokens=0), "anthropic-messages")  # Anthropic's cache-only call
    with pytest.raises(RequestError, match=r"max_completion_tokens"):  # the client's own field name
        validate_request(hub.Request(model="m", max_tokens=0), "openai-chat")
    with pytest.raises(RequestError, match=r"stop_sequences"):
        validate_request(hub.Request(model="m", stop=["x"] * 65), "anthropic-messages")


# --------------------------------------------------------------------------- 11: our extension data


def _raw(gw, dialect: str, model: str, headers: dict | None = None, stream: bool = True) -> httpx.Response:
    path, body, base = request_for(dialect, model, stream)
    response = HTTP.post(gw.url + path, json=body, headers={**base, **(headers or {})})
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("model", [MODEL, THINKING, "gemini-text", SEARCH, TOOLS])
@pytest.mark.parametrize("dialect", VENDOR)
def test_vendor_answers_carry_no_extension_data_unless_asked(gw, dialect, model, stream):
    plain = _raw(gw, dialect, model, stream=stream)
    assert b"llmbridge" not in plain.content
    if stream:  # what is left still decodes to a clean, complete answer
        events = decode_all(dialects.get(dialect).StreamDecoder(), plain.content)
        assert not any(isinstance(e, hub.Error) for e in events) and isinstance(events[-1], hub.ResponseEnd)


def test_the_header_turns_extension_data_on(gw):
    # a signed thinking block translated to chat: the signature has no chat field
    asked = _raw(gw, "openai-chat", THINKING, {"x-llmbridge-extensions": "1"})
    assert b'"llmbridge"' in asked.content
    assert b"llmbridge" not in _raw(gw, "openai-chat", THINKING, {"x-llmbridge-extensions": "0"}).content
    # llm-stream's own extension fields are part of that standard: always sent
    assert b"llmbridge:" in _raw(gw, "llm-stream", THINKING).content


def test_config_turns_extension_data_on():
    with serving(replay.create_app(CORPUS, seed=5)) as up:
        raw = replay_config(
            up.url, {THINKING: ("anthropic-messages", "claude-thinking-then-tool-use")}, gateway={"extensions": True}
        )
        with serving(create_app(config.parse(raw))) as gw:
            assert b'"llmbridge"' in _raw(gw, "openai-chat", THINKING).content
            assert b"llmbridge" not in _raw(gw, "openai-chat", THINKING, {"x-llmbridge-extensions": "false"}).content


def test_official_sdk_sees_no_extension_key(gw):
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model=THINKING,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    dumped = json.dumps([c.model_dump() for c in chunks])
    assert "llmbridge" not in dumped
    assert chunks[-1].usage is not None and chunks[-1].choices == []


# --------------------------------------------------------------------------- 8: a mid-stream error in chat


ANTHROPIC_ERROR_AFTER_TEXT = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","model":"c","content":[],"usage":{"input_tokens":7,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hello"}}\n\n'
    b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
)


@pytest.fixture(scope="module")
def failing_gw():
    async def messages(request: Request) -> Response:
        return Response(ANTHROPIC_ERROR_AFTER_TEXT, media_type="text/event-stream")

    with serving(Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])) as up:
        raw = {
            "upstreams": {"claude": {"format": "anthropic-messages", "base_url": up.url}},
            "models": [{"name": "m", "upstream": "claude"}],
        }
        with serving(create_app(config.parse(raw))) as gw:
            yield gw


@pytest.mark.parametrize("include_usage", [False, True])
def test_translated_chat_error_has_finish_reason_error_then_done(failing_gw, include_usage):
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "stream_options": {"include_usage": include_usage},
    }
    response = HTTP.post(failing_gw.url + "/v1/chat/completions", json=body)
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    error_chunk = json.loads(events[-2].removeprefix("data: "))
    assert error_chunk["error"]["message"] == "Overloaded"
    assert error_chunk["choices"] == [{"index": 0, "delta": {}, "finish_reason": "error"}]
    usage_chunk = json.loads(events[-3].removeprefix("data: "))  # usage goes out before the SDK raises
    assert usage_chunk["usage"]["prompt_tokens"] == 7
    assert (usage_chunk["choices"] == []) is include_usage
    # the official SDK raises at the error chunk, after the text
    client = openai.OpenAI(base_url=failing_gw.url + "/v1", api_key="x", max_retries=0)
    text = []
    with pytest.raises(openai.APIError, match="Overloaded"):
        for chunk in client.chat.completions.create(**body):
            text += [c.delta.content or "" for c in chunk.choices]
    assert "".join(text) == "Hello"
    helper = {k: v for k, v in body.items() if k != "stream"}
    with pytest.raises(openai.APIError, match="Overloaded"), client.chat.completions.stream(**helper) as stream:
        for _ in stream:  # the SDK's stream helper raises there too
            pass


def test_our_client_asks_for_extension_data():
    from llmbridge.client._core import prepare

    for dialect in ALL:
        _, headers, _ = prepare(dialects.get(dialect), hub.Request(model="m"), "http://127.0.0.1:9", None, None)
        assert headers["x-llmbridge-extensions"] == "1"


@pytest.mark.parametrize("dialect", VENDOR)
def test_blocks_without_a_wire_form_are_left_out_when_plain(dialect):
    """A generated image (data block) and another vendor's server-tool block have no form in
    most vendor wires but our "llmbridge" one: plain answers leave them out, keep the rest."""
    from llmbridge.gateway._extensions import PlainEncoder, plain_body, plain_response

    events = [
        hub.ResponseStart(id="r", model="m"),
        hub.BlockStart(0, "data", mime_type="image/png"),
        hub.Delta(0, "iVBORw0KGgo="),
        hub.BlockStop(0),
        hub.BlockStart(1, "native", name="web_search", extensions={"other-vendor": {"type": "server_tool_use"}}),
        hub.Delta(1, '{"q": "x"}'),
        hub.BlockStop(1),
        hub.BlockStart(2, "text"),
        hub.Delta(2, "hi"),
        hub.BlockStop(2),
        hub.Usage(input_tokens=3, output_tokens=1, extensions={"other-vendor": {"detail": 1}}),
        hub.Finish("end_turn"),
        hub.ResponseEnd(),
    ]
    codec = dialects.get(dialect)
    encoder = PlainEncoder(codec.StreamEncoder(), dialect)
    body = b"".join(encoder.encode(e) for e in events)
    # (the other vendor's block: Anthropic's usage has a "server_tool_use" count of its own)
    assert b"llmbridge" not in body and b'"type":"server_tool_use"' not in body
    decoded = hub.assemble(decode_all(codec.StreamDecoder(), body))
    assert decoded.complete and [b.text for b in decoded.blocks if b.kind == "text"] == ["hi"]
    whole = plain_body(codec.encode_response(plain_response(hub.assemble(events), dialect)))
    assert "llmbridge" not in json.dumps(whole) and '"type": "server_tool_use"' not in json.dumps(whole)


@pytest.mark.parametrize("dialect", [d for d in VENDOR if d != "mmsp"])  # (mmsp stamps each event's time)
def test_encoders_told_plain_write_what_stripping_would_leave(dialect):
    """A PlainEncoder tells its encoder that no "llmbridge" data goes out
    (``EncoderDispatch.extensions``), and the encoder may leave those entries out instead of
    writing them to be parsed out again: the bytes are the same either way, for every corpus
    stream decoded and encoded into ``dialect``."""
    from llmbridge.gateway._extensions import PlainEncoder

    codec = dialects.get(dialect)
    checked = 0
    for source in ("openai-chat", "openai-responses", "anthropic-messages", "gemini"):
        for path in sorted((CORPUS / source).glob("*.sse")):
            events = decode_all(dialects.get(source).StreamDecoder(), path.read_bytes())
            told, stripped = PlainEncoder(codec.StreamEncoder(), dialect), PlainEncoder(codec.StreamEncoder(), dialect)
            stripped._inner.extensions = True  # type: ignore[union-attr]  # (the encoder writes it all)
            assert [told.encode(e) for e in events] == [stripped.encode(e) for e in events], path.name
            checked += 1
    assert checked > 50
