"""The anthropic-messages dialect: corpus decoding, chunking, round trips, requests, the official SDK."""

from __future__ import annotations

import itertools
import json

import anthropic
import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import hub
from llmbridge.dialects import anthropic_messages as am
from llmbridge.dialects.base import EncoderDispatch, EncoderState, decode_all, encode_all, json_encode
from llmbridge.errors import RequestError
from tests.conftest import CORPUS, corpus_files
from tests.readers import anthropic_messages as reader
from tests.readers import expected

FILES = corpus_files("anthropic-messages")
TRUNCATED_TOOL_INPUT = "claude37-fine-grained-tool-max-tokens.sse"
NS = "anthropic-messages"


def decode(data: bytes) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = am.StreamDecoder()
    return decode_all(decoder, data), decoder.violations


def corpus(name: str) -> list[hub.Event]:
    return decode((CORPUS / NS / name).read_bytes())[0]


def encode(events: list[hub.Event]) -> bytes:
    return encode_all(am.StreamEncoder(), events)


def wire_events(body: bytes) -> list[tuple[str, dict]]:
    out = []
    for chunk in body.decode().split("\n\n"):
        if chunk.strip():
            name, data = chunk.split("\n", 1)
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def assert_well_formed(body: bytes) -> None:
    """Anthropic's grammar: dense block indices, blocks never interleaved, one terminal event."""
    events = wire_events(body)
    names = [n for n, _ in events]
    assert names[0] in ("message_start", "error")
    assert names[-1] in ("message_stop", "error")
    open_block, next_index = None, 0
    for name, data in events:
        if name == "content_block_start":
            assert open_block is None and data["index"] == next_index
            open_block, next_index = data["index"], next_index + 1
        elif name == "content_block_delta":
            assert data["index"] == open_block
        elif name == "content_block_stop":
            assert data["index"] == open_block
            open_block = None


# --------------------------------------------------------------------------- corpus decoding


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_decodes_to_a_valid_hub_stream(path):
    events, violations = decode(path.read_bytes())
    assert hub.validate(events) == []
    assert type(events[0]) is hub.ResponseStart and type(events[-1]) is hub.ResponseEnd
    response = hub.assemble(events)
    assert response.complete and response.finish is not None
    if path.name == TRUNCATED_TOOL_INPUT:
        assert [v.rule for v in violations] == ["block-unclosed"]
    else:
        assert violations == []


def test_cache_usage_counts_cached_tokens_as_input():
    usage = hub.assemble(corpus("claude-cache-read-usage.sse")).usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        3 + 1217,
        1217,
        0,
        6,
    )


def test_thinking_signature_and_empty_thinking_delta():
    response = hub.assemble(corpus("claude-advisor-tool.sse"))
    thinking = response.blocks[0]
    assert thinking.kind == "thinking" and thinking.text == ""  # a signature-only block
    assert thinking.fidelity[NS]["signature"].startswith("EpADCokB")
    events = corpus("claude-thinking-signature.sse")
    assert not [e for e in events if type(e) is hub.Delta and e.text == ""]


def test_redacted_thinking_keeps_its_data():
    blocks = hub.assemble(corpus("claude-redacted-thinking.sse")).blocks
    assert [b.kind for b in blocks[:2]] == ["thinking", "thinking"]
    assert blocks[0].fidelity[NS]["redacted_data"].startswith("EqkECkYIBxgC") and blocks[0].text == ""


def test_tool_use_caller_and_empty_input():
    block = hub.assemble(corpus("claude-sonnet4-text-then-tool-use.sse")).blocks[1]
    assert block.kind == "tool_call" and block.name == "get_weather" and json.loads(block.text)
    assert block.extensions == {NS: {"caller": {"type": "direct"}}}
    empty = [b for b in hub.assemble(corpus("claude-tool-use-empty-input.sse")).blocks if b.kind == "tool_call"]
    assert empty and empty[0].text == ""  # "" means {}


def test_truncated_tool_input_keeps_partial_arguments():
    response = hub.assemble(corpus(TRUNCATED_TOOL_INPUT))
    tool = response.blocks[1]
    assert tool.closed and tool.text.startswith('{"filename": "taxes.txt') and tool.text.endswith("Filing taxes")
    assert response.finish.reason == "max_tokens"


def test_server_tool_blocks_are_native_with_raw_objects():
    response = hub.assemble(corpus("claude-web-search-citations.sse"))
    natives = [b for b in response.blocks if b.kind == "native"]
    assert {b.extensions[NS]["type"] for b in natives} == {"server_tool_use", "web_search_tool_result"}
    use = next(b for b in natives if b.extensions[NS]["type"] == "server_tool_use")
    assert use.extensions[NS]["input"] == json.loads(use.text)  # the final object folds in the streamed input
    citations = [a for b in response.blocks for a in b.annotations]
    assert citations and all(a.namespace == NS and a.data["type"] == "citations_delta" for a in citations)


def test_compaction_block_is_native_with_its_content():
    block = hub.assemble(corpus("claude-compaction.sse")).blocks[0]
    assert block.kind == "native" and block.name == "compaction"
    assert block.extensions[NS]["content"] == block.text and block.text.startswith("The user provided")


def test_continuation_stream_with_prepopulated_content():
    events = corpus("claude-programmatic-tool-calling-part2of15.sse")
    response = hub.assemble(events)
    assert [(b.kind, b.name, json.loads(b.text)) for b in response.blocks] == [
        ("tool_call", "rollDie", {"player": "player2"})
    ]
    assert response.finish.reason == "tool_use"
    assert "container" in response.extensions[NS]


def test_stop_reasons():
    reasons = {p.name: hub.assemble(decode(p.read_bytes())[0]).finish.raw for p in FILES}
    assert reasons["claude-pause-turn-web-search.sse"] == "pause_turn"
    assert am._common.finish_from_stop("model_context_window_exceeded").reason == "max_tokens"
    assert am._common.finish_from_stop("refusal").reason == "refusal"
    assert am._common.finish_from_stop("something_new").reason == "other"


# --------------------------------------------------------------------------- grammar breaks


def sse(*events: tuple[str, dict | str]) -> bytes:
    return b"".join(f"event: {n}\ndata: {d if isinstance(d, str) else json.dumps(d)}\n\n".encode() for n, d in events)


START = (
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    },
)
TEXT_START = (
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
)
TEXT_DELTA = (
    "content_block_delta",
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
)


def test_error_event_mid_stream():
    body = sse(
        START,
        TEXT_START,
        TEXT_DELTA,
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    events, violations = decode(body)
    assert hub.validate(events) == [] and violations == []
    assert events[-2] == hub.Error(
        "Overloaded",
        "overloaded",
        "overloaded_error",
        None,
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )


def test_truncated_stream_is_an_error():
    events, violations = decode(sse(START, TEXT_START, TEXT_DELTA))
    assert type(events[-2]) is hub.Error and events[-2].type == "incomplete_stream"
    assert [v.rule for v in violations] == ["truncated"]


def test_grammar_violations_are_recorded():
    body = sse(
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
        ),
        START,
        ("content_block_stop", {"type": "content_block_stop", "index": 3}),
        ("content_block_delta", "{not json"),
        ("content_block_start", {"type": "content_block_start"}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}),
        ("message_stop", {"type": "message_stop"}),
        ("message_stop", {"type": "message_stop"}),
    )
    events, violations = decode(body)
    assert hub.validate(events) == []
    assert [(v.event, v.rule) for v in violations] == [
        (0, "start-first"),
        (0, "block-open"),
        (1, "start-once"),
        (2, "block-open"),
        (3, "json"),
        (4, "missing-field"),
        (7, "after-terminal"),
    ]


# Any split of a capture decodes the same: tests/test_dialect_contract.py, for every dialect.


# --------------------------------------------------------------------------- encode -> decode


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_round_trips_through_the_encoder(path):
    events = decode(path.read_bytes())[0]
    body = encode(events)
    assert_well_formed(body)
    again, violations = decode(body)
    assert hub.assemble(again) == hub.assemble(events)
    assert violations == ([] if path.name != TRUNCATED_TOOL_INPUT else violations)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_sdk_reads_corpus_and_encoder_output_alike(path):
    events = decode(path.read_bytes())[0]
    assert reader.read(path.read_bytes()) == expected(events)
    assert reader.read(encode(events)) == expected(events)


def parallel_tools() -> list[hub.Event]:
    """Two OpenAI-style tool calls streaming interleaved, usage after the finish."""
    return [
        hub.ResponseStart("chatcmpl-1", "gpt"),
        hub.BlockStart(0, "tool_call", "call_a", "get_weather"),
        hub.BlockStart(1, "tool_call", "call_b", "get_time"),
        hub.Delta(0, '{"city":'),
        hub.Delta(1, '{"tz":'),
        hub.Delta(0, '"Paris"}'),
        hub.Delta(1, '"CET"}'),
        hub.BlockStop(1),
        hub.BlockStop(0),
        hub.Finish("tool_use", raw="tool_calls"),
        hub.Usage(input_tokens=40, output_tokens=12, cache_read_tokens=10, total_tokens=52),
        hub.ResponseEnd(),
    ]


def test_interleaved_blocks_are_serialised_in_start_order():
    events = parallel_tools()
    body = encode(events)
    assert_well_formed(body)
    summary = reader.read(body)
    assert summary.tool_calls == [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]
    assert summary.finish == "tool" and (summary.input_tokens, summary.output_tokens) == (40, 12)
    starts = [d for n, d in wire_events(body) if n == "message_start"]
    assert starts[0]["message"]["usage"]["input_tokens"] == 0  # usage came last: carried in message_delta
    assert hub.assemble(decode(body)[0]) == hub.assemble(events)


def test_first_block_streams_live_while_later_ones_buffer():
    encoder = am.StreamEncoder()
    events = parallel_tools()
    out = [encoder.encode(e) for e in events[:5]]
    assert b'"partial_json":"{\\"city\\":"' in out[3]  # block 0's delta goes out at once
    assert out[4] == b""  # block 1's delta waits for block 0 to stop


def foreign_events() -> list[hub.Event]:
    """What other dialects' decoders produce: foreign fidelity, native and data blocks, two choices."""
    return [
        hub.ResponseStart("resp_1", "gpt-5", 1700000000, "req-9", {"openai-responses": {"service_tier": "auto"}}),
        hub.BlockStart(0, "thinking", "rs_1", fidelity={"openai-responses": {"encrypted_content": "gAAA"}}),
        hub.Delta(0, "Let me think."),
        hub.BlockStop(0, fidelity={"openai-responses": {"id": "rs_1"}}),
        hub.BlockStart(1, "native", "ws_1", "web_search_call", extensions={"openai-responses": {"type": "x"}}),
        hub.Delta(1, '{"query":"q"}'),
        hub.BlockStop(1, extensions={"openai-responses": {"status": "completed"}}),
        hub.BlockStart(2, "data", mime_type="image/png"),
        hub.Delta(2, "iVBORw0KGgo="),
        hub.BlockStop(2),
        hub.BlockStart(3, "text", choice=1),
        hub.BlockStart(4, "text"),
        hub.Delta(3, "second choice"),
        hub.Delta(4, "Answer"),
        hub.Extension("openai-responses", {"annotation": {"url": "u"}}, 4),
        hub.BlockStop(4),
        hub.Extension("openai-chat", {"logprobs": []}, 4),  # after its block closed
        hub.BlockStop(3),
        hub.Extension("gemini", {"groundingMetadata": {}}),
        hub.Finish("content_filter", raw="SAFETY"),
        hub.Finish("end_turn", choice=1, raw="stop"),
        hub.Usage(input_tokens=9, output_tokens=4, reasoning_tokens=2, total_tokens=13),
        hub.ResponseEnd("req-9"),
    ]


def test_foreign_thinking_native_data_choices_and_reasons_round_trip():
    events = foreign_events()
    assert hub.validate(events) == []
    body = encode(events)
    assert_well_formed(body)
    again, violations = decode(body)
    assert violations == [] and hub.validate(again) == []
    back, original = hub.assemble(again), hub.assemble(events)
    back.blocks.sort(key=lambda b: b.index)  # choice 1 comes back after choice 0, same index
    assert back == original
    wire = wire_events(body)
    assert wire[-2][1]["delta"]["stop_reason"] == "refusal"  # the nearest word; the hub reason rides along
    summary = reader.read(body)
    assert (summary.text, summary.thinking, summary.finish) == ("Answer", "Let me think.", "filter")


def test_anthropic_fidelity_replays_natively():
    events = [
        hub.ResponseStart("msg_1", "claude"),
        hub.BlockStart(0, "thinking"),
        hub.Delta(0, "hmm"),
        hub.BlockStop(0, fidelity={NS: {"signature": "sig"}}),
        hub.BlockStart(1, "thinking"),
        hub.BlockStop(1, fidelity={NS: {"redacted_data": "RED"}}),
        hub.Finish("end_turn"),
        hub.ResponseEnd(),
    ]
    wire = wire_events(encode(events))
    assert {"type": "signature_delta", "signature": "sig"} in [d.get("delta") for _, d in wire]
    assert {"type": "redacted_thinking", "data": "RED"} in [d.get("content_block") for _, d in wire]
    assert "llmbridge" not in json.dumps([d for n, d in wire if n.startswith("content_block")])


def test_error_mid_stream_raises_the_sdk_exception():
    events = [
        hub.ResponseStart("msg_1", "claude"),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "partial"),
        hub.Error("Overloaded", "overloaded", status=529),
        hub.ResponseEnd(),
    ]
    body = encode(events)
    assert wire_events(body)[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
            "request_id": None,  # ErrorResponse: required, nullable
            "llmbridge": {"type": "overloaded", "status": 529},
        },
    )
    summary = reader.read(body)
    assert summary.error.startswith("APIStatusError") and summary.text == "partial"
    assert hub.assemble(decode(body)[0]).error == events[-2]
    client = reader.client_for(body)
    with pytest.raises(anthropic.APIStatusError):
        for _ in client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass


def test_error_right_after_response_start():
    body = encode([hub.ResponseStart("r"), hub.Error("bad key", "authentication"), hub.ResponseEnd()])
    assert [n for n, _ in wire_events(body)] == ["message_start", "error"]
    assert "AuthenticationError" in reader.read(body).error or "APIStatusError" in reader.read(body).error


def test_stream_without_usage_reads_as_unknown():
    events = [
        hub.ResponseStart("x"),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "hi"),
        hub.BlockStop(0),
        hub.Finish("end_turn"),
        hub.ResponseEnd(),
    ]
    body = encode(events)
    assert reader.read(body) == expected(events, "anthropic-messages")  # the SDK shows 0 for unknown
    assert (reader.read(body).input_tokens, reader.read(body).output_tokens) == (0, 0)
    assert hub.assemble(decode(body)[0]).usage is None  # our own key says they are unknown


def test_raw_sdk_stream_sees_every_event():
    body = (CORPUS / NS / "claude-thinking-then-tool-use.sse").read_bytes()
    client = reader.client_for(encode(decode(body)[0]))
    kinds = [
        e.type
        for e in client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}], stream=True
        )
    ]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds


# --------------------------------------------------------------------------- non-streaming


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_response_round_trip_and_sdk_parse(path):
    streamed = hub.assemble(decode(path.read_bytes())[0])
    body = am.encode_response(streamed)
    again = hub.assemble(am.decode_response(json.loads(json.dumps(body))))
    for a, b in zip(streamed.blocks, again.blocks, strict=True):
        assert (a.kind, a.id, a.name, a.annotations) == (b.kind, b.id, b.name, b.annotations)
        if a.kind == "tool_call" and a.text != b.text:  # JSON re-serialised
            assert json.loads(b.text) == json.loads(a.text)
        elif a.kind == "native":
            assert a.extensions == b.extensions
        else:
            assert a.text == b.text
        assert hub.merge_dicts(a.fidelity, None) == b.fidelity
    assert (again.usage, again.finish, again.id) == (streamed.usage, streamed.finish, streamed.id)

    def handler(request):
        return httpx2.Response(200, json=body)

    client = anthropic.Anthropic(
        api_key="x", base_url="http://t", http_client=httpx2.Client(transport=httpx2.MockTransport(handler))
    )
    message = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert message.stop_reason == body["stop_reason"] and len(message.content) == len(body["content"])
    streamed = reader.read(path.read_bytes())
    # A cut-off tool input cannot be told apart in a whole body: the SDK parses it to {}.
    streamed.tool_calls = [(name, {} if args is None else args) for name, args in streamed.tool_calls]
    assert reader.summarize(message) == streamed


def response_client(body: dict) -> anthropic.Anthropic:
    def handler(request):
        return httpx2.Response(200, json=body)

    return anthropic.Anthropic(
        api_key="x", base_url="http://t", http_client=httpx2.Client(transport=httpx2.MockTransport(handler))
    )


@pytest.mark.parametrize("events", [foreign_events(), parallel_tools()], ids=["foreign", "parallel"])
def test_foreign_response_body_round_trips_and_parses(events):
    original = hub.assemble(events)
    body = json.loads(json.dumps(am.encode_response(original)))
    back = hub.assemble(am.decode_response(body))
    back.blocks.sort(key=lambda b: b.index)
    for block in original.blocks:
        block.fidelity = hub.merge_dicts(block.fidelity, None)  # response_events puts it all on BlockStop
    assert [(b.index, b.kind, b.id, b.name, b.choice, b.text, b.fidelity, b.annotations) for b in back.blocks] == [
        (b.index, b.kind, b.id, b.name, b.choice, b.text, b.fidelity, b.annotations) for b in original.blocks
    ]
    assert (back.usage, back.finishes, back.annotations, back.extensions, back.request_id, back.created) == (
        original.usage,
        original.finishes,
        original.annotations,
        original.extensions,
        original.request_id,
        original.created,
    )
    message = response_client(body).messages.create(
        model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
    )
    assert reader.summarize(message) == expected(events, "anthropic-messages")


def test_errors_codec():
    status, body = am.encode_error(hub.Error("slow down", "rate_limit"))
    error = {"type": "rate_limit_error", "message": "slow down"}
    assert status == 429 and body == {"type": "error", "error": error, "request_id": None}
    assert am.encode_error(hub.Error("busy", "overloaded"))[0] == 529
    error = am.decode_error(529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    assert (error.type, error.message, error.status, error.code) == (
        "overloaded",
        "Overloaded",
        529,
        "overloaded_error",
    )
    assert am.decode_error(502, b"<html>bad gateway</html>").type == "api_error"


# --------------------------------------------------------------------------- requests


RICH_REQUEST = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 2048,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/cat.jpg"}},
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
                    "title": "spec",
                },
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "RED"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "no clock"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
                    ],
                },
                {"type": "text", "text": "Thanks"},
            ],
        },
    ],
    "tools": [
        {
            "name": "get_weather",
            "description": "Weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
    ],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}},
    "stop_sequences": ["END"],
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 40,
    "metadata": {"user_id": "u-1"},
    "stream": True,
    "service_tier": "auto",
}


def test_request_decodes_every_field():
    r = am.decode_request(RICH_REQUEST)
    assert [m.role for m in r.messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert r.messages[0].parts[0].extensions == {NS: {"cache_control": {"type": "ephemeral"}}}
    image, url_image, pdf, text_doc = r.messages[1].parts[1:]
    assert (image.media_type, image.data, url_image.url) == ("image/png", "iVBOR", "https://x/cat.jpg")
    assert (pdf.media_type, pdf.name, text_doc.extensions[NS]["source"]["data"]) == ("application/pdf", "spec", "plain")
    thinking, redacted, _, call, _, native = r.messages[2].parts
    assert thinking.fidelity == {NS: {"signature": "sig"}} and redacted.fidelity == {NS: {"redacted_data": "RED"}}
    assert (call.id, call.name, json.loads(call.arguments)) == ("toolu_1", "get_weather", {"city": "Paris"})
    assert type(native) is hub.NativePart and native.data["type"] == "server_tool_use"
    result = r.messages[4].parts[0]
    assert result.is_error and [type(p) for p in result.content] == [hub.TextPart, hub.ImagePart]
    assert (r.tool_choice, r.parallel_tool_calls) == (hub.ToolChoice("required"), False)
    assert r.thinking == {"type": "enabled", "budget_tokens": 1024, "effort": "high"}
    assert r.response_format == {"type": "json_schema", "schema": {"type": "object"}}
    assert (r.max_tokens, r.stop, r.temperature, r.top_p, r.top_k, r.stream) == (2048, ["END"], 0.5, 0.9, 40, True)
    assert r.metadata == {"user_id": "u-1"} and r.extensions.pop("anthropic-messages:$order") == list(RICH_REQUEST)
    assert r.extensions == {} and r.service_tier == "auto"


def test_request_round_trip():
    assert am.encode_request(am.decode_request(RICH_REQUEST)) == RICH_REQUEST


def test_hub_request_encodes_for_anthropic():
    request = hub.Request(
        model="claude",
        messages=[
            hub.Message("system", [hub.TextPart("sys")]),
            hub.Message("user", [hub.ImagePart(url="data:image/jpeg;base64,/9j/")]),
            hub.Message(
                "assistant",
                [
                    hub.ThinkingPart("foreign", {"openai-responses": {"encrypted_content": "x"}}),
                    hub.ToolCallPart("call_1", "f", ""),
                    hub.ToolCallPart("call_2", "g", '{"a":1}'),
                ],
            ),
            hub.Message("tool", [hub.ToolResultPart("call_1", [hub.TextPart("one")])]),
            hub.Message("tool", [hub.ToolResultPart("call_2", [hub.TextPart("two")])]),
            hub.Message("user", [hub.TextPart("go on")]),
        ],
        tool_choice=hub.ToolChoice("tool", "f"),
        thinking={"effort": "low"},
        response_format={"type": "json_object"},
    )
    body = am.encode_request(request)
    assert body["max_tokens"] == am.DEFAULT_MAX_TOKENS and body["system"] == "sys"
    assert body["messages"][0]["content"][0]["source"] == {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}
    assert body["messages"][1]["content"] == [  # unsigned foreign thinking is left out
        {"type": "tool_use", "id": "call_1", "name": "f", "input": {}},
        {"type": "tool_use", "id": "call_2", "name": "g", "input": {"a": 1}},
    ]
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "one"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "two"},
            {"type": "text", "text": "go on"},
        ],
    }
    assert body["tool_choice"] == {"type": "tool", "name": "f"} and body["output_config"] == {"effort": "low"}
    budget = am.encode_request(hub.Request(thinking={"type": "enabled", "budget_tokens": 8000}))
    assert budget["max_tokens"] > 8000


def test_thinking_effort_from_other_dialects():
    enabled = am.encode_request(hub.Request(thinking={"type": "enabled", "effort": "high"}))
    assert enabled["thinking"] == {"type": "enabled", "budget_tokens": 16384} and "output_config" not in enabled
    assert enabled["max_tokens"] > 16384
    capped = am.encode_request(hub.Request(max_tokens=3000, thinking={"type": "enabled", "effort": "high"}))
    assert (capped["max_tokens"], capped["thinking"]["budget_tokens"]) == (3000, 1500)
    tiny = am.encode_request(hub.Request(max_tokens=500, thinking={"type": "enabled", "effort": "low"}))
    assert "thinking" not in tiny and tiny["max_tokens"] == 500


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"model": "m"}, "messages"),
        ({"messages": {}}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": 5}]}, "messages[1].content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]}]},
            "messages[0].content[0].source.type",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages[0].content[0].tool_use_id"),
        ({"messages": [], "max_tokens": "10"}, "max_tokens"),
        ({"messages": [], "temperature": True}, "temperature"),
        ({"messages": [], "tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"messages": [], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"messages": [], "thinking": {"type": "maybe"}}, "thinking.type"),
        ({"messages": [], "stop_sequences": "END"}, "stop_sequences"),
    ],
)
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(RequestError) as info:
        am.decode_request(body)
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")


def test_bad_hub_requests_raise():
    with pytest.raises(RequestError, match="not JSON"):
        am.encode_request(hub.Request(messages=[hub.Message("assistant", [hub.ToolCallPart("c", "f", "{x")])]))
    # audio: Anthropic has none, so it is left out (and reported by dialects.fields), not refused
    audio = hub.Request(messages=[hub.Message("user", [hub.TextPart("hear"), hub.FilePart("audio/wav", "UklG")])])
    assert am.encode_request(audio)["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hear"}]}]


def test_endpoint():
    url, headers = am.endpoint(hub.Request(stream=True), base_url="https://api.anthropic.com", api_key="k")
    assert url == "https://api.anthropic.com/v1/messages"
    assert headers["x-api-key"] == "k" and headers["anthropic-version"] and headers["accept"] == "text/event-stream"
    assert am.endpoint(hub.Request(), base_url="http://gw/v1/", api_key=None)[0] == "http://gw/v1/messages"


# --------------------------------------------------------------------------- any hub stream

KINDS = ("text", "thinking", "tool_call", "native", "data")
FOREIGN = st.sampled_from([None, {"openai-responses": {"id": "rs_1"}}, {"gemini": {"thoughtSignature": "c2ln"}}])


@st.composite
def hub_streams(draw):
    """Valid hub streams: interleaved blocks, two choices, foreign data, usage anywhere, maybe an error."""
    n = draw(st.integers(0, 5))
    blocks = []
    for index in range(n):
        kind = draw(st.sampled_from(KINDS))
        own = {NS: {"signature": "sig"}} if kind == "thinking" and draw(st.booleans()) else None
        start = hub.BlockStart(
            index,
            kind,
            draw(st.sampled_from([None, f"id_{index}"])) if kind != "tool_call" else f"call_{index}",
            f"tool_{index}" if kind in ("tool_call", "native") else None,
            draw(st.sampled_from([0, 0, 1])),
            "image/png" if kind == "data" else None,
            draw(FOREIGN),
            {"openai-responses": {"type": "web_search_call"}} if kind == "native" else None,
        )
        texts = draw(st.lists(st.text(max_size=5), max_size=3)) if kind != "tool_call" else ['{"a":', "1}"]
        blocks.append((start, texts, hub.BlockStop(index, hub.merge_dicts(own, draw(FOREIGN)))))
    # Interleave: each block's own events stay in order, blocks mix freely.
    queues = [[b[0], *(hub.Delta(b[0].index, t) for t in b[1]), b[2]] for b in blocks]
    body = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        body.append(queue.pop(0))
        if type(body[-1]) is hub.Delta and draw(st.booleans()):
            body.append(hub.Extension("openai-chat", {"logprobs": [body[-1].text]}, body[-1].index))
    events = [hub.ResponseStart(draw(st.sampled_from([None, "resp_1"])), "model")]
    events += body
    if draw(st.booleans()):
        events.insert(draw(st.integers(1, len(events))), hub.Usage(input_tokens=7, output_tokens=3))
    reason = draw(st.sampled_from([None, *hub.FINISH_REASONS]))
    if reason:
        events.append(hub.Finish(reason, raw=draw(st.sampled_from([None, "stop", "SAFETY"]))))
    if any(b[0].choice == 1 for b in blocks):
        events.append(hub.Finish("end_turn", choice=1))
    if draw(st.booleans()):
        events.append(hub.Extension("gemini", {"groundingMetadata": {}}))
    if draw(st.integers(0, 4)) == 0:
        events.append(hub.Error("boom", draw(st.sampled_from(hub.ERROR_TYPES)), draw(st.sampled_from([None, "c"]))))
    events.append(hub.ResponseEnd())
    return events


@given(hub_streams())
def test_any_hub_stream_round_trips(events):
    assert hub.validate(events) == []
    body = encode(events)
    again, violations = decode(body)
    assert hub.validate(again) == []
    original, back = hub.assemble(events), hub.assemble(again)
    if original.error is None:
        assert_well_formed(body)
        assert violations == []
        back.blocks.sort(key=lambda b: b.index)
        original.blocks.sort(key=lambda b: b.index)
        for choice, finish in original.finishes.items():
            if finish.raw is None:  # the decoder names the Anthropic word
                original.finishes[choice] = back.finishes[choice]
                assert (finish.reason, finish.choice) == (back.finishes[choice].reason, choice)
        assert back == original
        whole = hub.assemble(am.decode_response(json.loads(json.dumps(am.encode_response(original)))))
        whole.blocks.sort(key=lambda b: b.index)
        assert [(b.index, b.kind, b.text, b.choice, b.annotations) for b in whole.blocks] == [
            (b.index, b.kind, b.text, b.choice, b.annotations) for b in original.blocks
        ]
        assert (whole.finishes, whole.usage, whole.id) == (original.finishes, original.usage, original.id)
    else:
        assert (back.error.type, back.error.message) == (original.error.type, "boom")
        assert wire_events(body)[-1][0] == "error"
    summary = reader.read(body)
    wanted = expected(events, "anthropic-messages")
    if original.error is None:
        assert summary == wanted
    else:
        assert summary.error.startswith("APIStatusError")


# ---------------------------------------------------------------- request codec fast paths
#
# decode_request takes the usual turn (a user or assistant message with string content) without
# _decode_turn, and a text block without its extras walk; these compare them with the general
# steps over messages of every shape near the usual ones.

from llmbridge.dialects.anthropic_messages import _request as amr  # noqa: E402

_NEAR_TURNS = [
    {"role": role, "content": content, **extra}
    for role in ("user", "assistant", "system", "tool", None)
    for content in (
        "hi",
        "",
        None,
        3,
        [],
        [{"type": "text", "text": "a"}],
        [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}],
        [{"type": "text", "text": 3}],
        [{"type": "text"}],
        [{"type": "text", "text": "a"}, {"type": "tool_result", "tool_use_id": "t", "content": "r"}],
    )
    for extra in ({}, {"name": "n"}, {"cache_control": {"type": "ephemeral"}})
] + [{"content": "hi"}, {"role": "user"}, "hi", None, ["user"]]


def _outcome(fn):  # type: ignore[no-untyped-def]
    try:
        return fn()
    except RequestError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("message", _NEAR_TURNS, ids=lambda m: json.dumps(m)[:50])
def test_request_decode_fast_path_is_the_general_path(message):
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}, message]}

    def general():  # type: ignore[no-untyped-def]
        out: list[hub.Message] = []
        amr._decode_turn(message, "messages[1]", out)
        return out

    fast = _outcome(lambda: am.decode_request(body).messages[1:])
    assert fast == _outcome(general)


@pytest.mark.parametrize(
    "value,kinds",
    [(v, k) for v in (1, 1.5, True, "s", None, [], {}) for k in (int, bool, str, list, dict, (int, float), (int,))],
)
def test_want_fast_check_is_the_general_check(value, kinds):
    def general():  # type: ignore[no-untyped-def]
        ks = kinds if isinstance(kinds, tuple) else (kinds,)
        if not isinstance(value, ks) or (type(value) is bool and bool not in ks):
            raise RequestError("expected x", "w")
        return value

    assert _outcome(lambda: amr._want(value, kinds, "w", "x")) == _outcome(general)


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": "a"},
        {"type": "text", "text": ""},
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"text": "a", "type": "text", "citations": []},
        {"type": "text", "text": 3},
        {"type": "text", "text": None},
        {"type": "text"},
        {"type": "text", "other": "a"},
    ],
    ids=json.dumps,
)
def test_text_block_fast_path_is_the_general_path(block):
    def general():  # type: ignore[no-untyped-def]
        amr._want(block.get("text"), str, "b.text", "a string")
        return hub.TextPart(block["text"], amr._extras(block, ("type", "text")))

    assert _outcome(lambda: amr._part(block, "b", "user")) == _outcome(general)


class _GeneralStops(am.StreamEncoder):
    def _stop_bytes(self, block, stop):  # type: ignore[no-untyped-def]
        return self._stop_general(block, stop)


def _stop_streams() -> list[list[hub.Event]]:
    streams = [decode_all(am.StreamDecoder(), path.read_bytes()) for path in corpus_files("anthropic-messages")]
    for n in (1, 2, 11):
        for stop in (
            {},
            {"fidelity": {"x": {"a": 1}}},
            {"extensions": {"x": {"b": 2}}},
            {"extensions": {NAME_AM: {"c": 3}}},
        ):
            events: list[hub.Event] = [hub.ResponseStart("r", "m")]
            for i in range(n):
                events += [hub.BlockStart(i, "text"), hub.Delta(i, "t")]
                if i == 1:  # an annotation of the open block
                    events.append(hub.Extension("x", {"note": i}, i))
                events.append(hub.BlockStop(i, **stop))  # type: ignore[arg-type]
            events += [hub.Extension("x", {"late": True}, 0), hub.Finish("end_turn"), hub.ResponseEnd()]
            streams.append(events)
    return streams


NAME_AM = am.NAME


def test_text_block_stop_fast_path_is_the_general_path():
    for events in _stop_streams():
        for extensions in (True, False):
            fast, general = am.StreamEncoder(), _GeneralStops()
            fast.extensions = general.extensions = extensions
            assert encode_all(fast, events) == encode_all(general, events)


def test_usage_to_raw_without_usage_is_that_of_an_empty_usage():
    from llmbridge.dialects.anthropic_messages._common import usage_to_raw

    fast, general = usage_to_raw(None), usage_to_raw(hub.Usage())
    assert fast == general and json.dumps(fast) == json.dumps(general)
    fast[0]["input_tokens"] = 5  # fresh objects: a caller may change them
    fast[1]["none"].append("x")  # type: ignore[index]
    assert usage_to_raw(None) == general


@pytest.mark.parametrize("value", [None, 0, 5, -1, True, False, 1.5, "3", [], {}])
@pytest.mark.parametrize("kinds", [(int, float), (int,)])
def test_number_fast_check_is_the_general_check(value, kinds):
    def general():  # type: ignore[no-untyped-def]
        if value is None:
            return None
        return amr._want(value, kinds, "k", "an integer" if kinds == (int,) else "a number")

    assert _outcome(lambda: amr._number({"k": value}, "k", kinds)) == _outcome(general)


class _GeneralDispatch(am.StreamEncoder):
    """The encoder as it was before its own dispatch and its usual-end path: every event but
    the hot delta through EncoderDispatch.encode, and the end written by the general steps."""

    def encode(self, event):  # type: ignore[no-untyped-def]
        if type(event) is hub.Delta and self._state is not EncoderState.CLOSED:
            block = self._blocks.get(event.index)
            if block is self._live and block is not None and block.started and event.text:
                return block.prefix + json_encode(event.text) + b"}}\n\n"
        return EncoderDispatch.encode(self, event)

    def on_response_end(self, event):  # type: ignore[no-untyped-def]
        out = [self._message_start(), *self._close_all(), self._message_delta()]
        out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        self._state = EncoderState.CLOSED
        return b"".join(out)


def _dispatch_outcome(encoder: am.StreamEncoder, events: list) -> list:
    out: list = []
    for event in events:
        try:
            out.append(encoder.encode(event))
        except TypeError as exc:
            out.append(("TypeError", str(exc)))
    out.append(encoder._state)
    return out


def _with_edges(events: list) -> list:
    # a non-event before the end, events after the end (b"" once closed), a second end
    return [events[0], "not an event", *events[1:], hub.Delta(0, "late"), hub.ResponseEnd(), object()]


def test_own_dispatch_is_the_base_dispatch_on_corpus_and_stop_streams():
    from llmbridge.gateway._extensions import PlainEncoder

    for events in _stop_streams():
        for extensions in (True, False):
            fast, general = am.StreamEncoder(), _GeneralDispatch()
            fast.extensions = general.extensions = extensions
            assert _dispatch_outcome(fast, _with_edges(events)) == _dispatch_outcome(general, _with_edges(events))
        fast_plain, general_plain = PlainEncoder(am.StreamEncoder(), NS), PlainEncoder(_GeneralDispatch(), NS)
        assert encode_all(fast_plain, events) == encode_all(general_plain, events)  # type: ignore[arg-type]


@given(hub_streams(), st.booleans())
def test_own_dispatch_is_the_base_dispatch_on_generated_streams(events, extensions):
    fast, general = am.StreamEncoder(), _GeneralDispatch()
    fast.extensions = general.extensions = extensions
    assert _dispatch_outcome(fast, _with_edges(events)) == _dispatch_outcome(general, _with_edges(events))
    fast, general = am.StreamEncoder(), _GeneralDispatch()  # and without the edges: ends of every kind
    assert encode_all(fast, events) == encode_all(general, events)


_USAGE_EXTENSIONS = (
    None,
    {},
    {NAME_AM: {"service_tier": "standard"}},
    {NAME_AM: {"server_tool_use": {"web_search_requests": 2}}},
    {NAME_AM: {"server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}, "input_tokens": 9}},
    {NAME_AM: {"output_tokens_details": {"thinking_tokens": 3}}},
    {NAME_AM: {}},
    {"openai-chat": {"prompt_tokens_details": {"cached_tokens": 1}}},
    {NAME_AM: {"cache_creation": {"ephemeral_5m_input_tokens": 1}}, "gemini": {"x": 1}},
)


def test_usage_object_is_usage_to_raws_first():
    from llmbridge.dialects.anthropic_messages._common import usage_object, usage_to_raw

    usages = [None] + [
        hub.Usage(*counts, extensions=ext)  # type: ignore[arg-type]
        for counts in itertools.product((None, 0, 7), repeat=6)
        for ext in _USAGE_EXTENSIONS
    ]
    for usage in usages:
        alone, (raw, _) = usage_object(usage), usage_to_raw(usage)
        assert json.dumps(alone) == json.dumps(raw)  # (the order of the keys included)
        alone["input_tokens"] = -1  # a fresh object each time
        assert usage_object(usage) == raw


_START_TEXTS = (None, "", "msg_1", 'q"\\\n\u2028\x00é😀', "</script>", " ", "\x7f")
_START_EXTENSIONS = (
    None,
    {},
    {"openai-chat": {"service_tier": "default"}},
    {NAME_AM: {"container": None}},
    {NAME_AM: 1},
)


def test_plain_message_start_fast_path_is_the_general_path():
    # every combination (the shapes are few; a generated sample of 25 would miss some)
    for id, model, extensions, created, request_id, told, usage in itertools.product(
        _START_TEXTS,
        _START_TEXTS,
        _START_EXTENSIONS,
        (None, 1700000000),
        (None, "req_1"),
        (True, False),
        (None, hub.Usage(3, 0)),
    ):
        start = hub.ResponseStart(id, model, created, request_id, extensions)  # type: ignore[arg-type]
        fast, general = am.StreamEncoder(), am.StreamEncoder()
        fast.extensions = general.extensions = told
        fast._start = start
        fast._usage = general._usage = usage
        assert fast._message_start() == general._start_general(start)
        assert fast._state is EncoderState.OPEN and fast._message_start() == b""


def test_plain_message_start_without_a_response_start():
    fast, general = am.StreamEncoder(), am.StreamEncoder()
    fast.extensions = general.extensions = False
    assert fast._message_start() == general._start_general(hub.ResponseStart()) != b""


_FINISHES = [None] + [
    hub.Finish(reason, choice, raw, sequence)  # type: ignore[arg-type]
    for reason in (*hub.FINISH_REASONS, "unknown")
    for choice in (0, 1)
    for raw in (None, "stop", "end_turn", "max_tokens", "refusal", "x")
    for sequence in (None, "", "END", 'q"\\\n\u2028😀')
]


def test_plain_message_delta_fast_path_is_the_general_path():
    usages = [None] + [
        hub.Usage(*counts, extensions=ext)  # type: ignore[arg-type]
        for counts in itertools.product((None, 0, 7), repeat=3)
        for ext in _USAGE_EXTENSIONS
    ]
    usages.append(hub.Usage(8, 2, None, None, 3, 10))  # reasoning tokens: output_tokens_details
    for finish, usage, told, extras in itertools.product(
        _FINISHES, usages, (True, False), ({}, {"delta": {"x": 1}, "context_management": None})
    ):
        fast, general = am.StreamEncoder(), am.StreamEncoder()
        fast.extensions = general.extensions = told
        fast._finish = general._finish = finish
        fast._usage = general._usage = usage
        fast._delta_extras = general._delta_extras = extras
        assert fast._message_delta() == general._delta_general()


def test_usage_json_is_the_usage_objects_json():
    # the counts-only fast path (a struct in the dict's key order) against the dict it replaces
    from llmbridge.dialects.anthropic_messages._common import usage_json, usage_object

    counts = (None, 0, 1, 7, 300, -2, 2.5, True)
    usages = [None] + [
        hub.Usage(*values, extensions=ext)  # type: ignore[arg-type]
        for values in itertools.product(counts, counts, counts, counts, (None, 3))
        for ext in (None, {}, {NAME_AM: {"service_tier": "standard"}})
    ]
    for usage in usages:
        assert usage_json(usage) == json_encode(usage_object(usage)), usage


def test_wire_indexes_past_the_written_out_ones():
    events: list[hub.Event] = [hub.ResponseStart("r", "m")]
    for i in range(40):  # (indexes under 32 come from a table, the rest are formatted)
        events += [hub.BlockStart(i, "text"), hub.Delta(i, "t"), hub.BlockStop(i)]
    events += [hub.Finish("end_turn"), hub.ResponseEnd()]
    data = [
        json.loads(line[6:])
        for line in encode_all(am.StreamEncoder(), events).decode().split("\n")
        if line[:5] == "data:"
    ]
    for kind in ("content_block_start", "content_block_delta", "content_block_stop"):
        assert [d["index"] for d in data if d["type"] == kind] == list(range(40))
