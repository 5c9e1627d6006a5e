"""The llm-stream dialect: the LLM-Stream draft's example, grammar violations, round trips, envelope, response forms."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import hub
from llmbridge.dialects import llm_stream as ls
from llmbridge.dialects.base import decode_all, encode_all
from llmbridge.errors import RequestError

DATA = Path(__file__).parent / "data" / "llm-stream"
SEED_EXAMPLE = (DATA / "seed-example.sse").read_bytes()


def decode(body: bytes) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = ls.StreamDecoder()
    events = decode_all(decoder, body)
    assert hub.validate(events) == [], "the decoder must always produce a valid hub stream"
    return events, decoder.violations


def frame(event_type: str, seq: int, sse_name: str | None = None, **fields) -> bytes:
    obj = {"v": "1.0", "seq": seq, "type": event_type, **fields}
    return f"event: {sse_name or event_type}\ndata: {json.dumps(obj)}\n\n".encode()


def text_stream(*extra: bytes, end: bool = True) -> bytes:
    body = frame("stream.start", 0, request_id="r1") + frame("content.delta", 1, index=0, delta={"text": "Hi"})
    body += frame("content.stop", 2, index=0, stop_reason="end_turn")
    body += b"".join(extra)
    if end:
        body += frame("stream.end", 3 + len(extra), request_id="r1")
    return body


def rules(violations: list[hub.Violation]) -> list[str]:
    return [v.rule for v in violations]


# --------------------------------------------------------------------------- LLM-Stream draft §5.5


def test_seed_example_decodes_clean():
    events, violations = decode(SEED_EXAMPLE)
    assert violations == []
    r = hub.assemble(events)
    assert r.complete and r.request_id == "550e8400-..." and r.model == "example-model" and r.created == 1749292800
    assert [(b.kind, b.text) for b in r.blocks] == [("text", "The weather in Vienna is 24C and sunny.")]
    assert r.finish.reason == "end_turn"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (42, 8)


def test_seed_example_reencodes_byte_for_byte():
    events, _ = decode(SEED_EXAMPLE)
    assert encode_all(ls.StreamEncoder(), events) == SEED_EXAMPLE


def test_seed_tool_flow_response_without_indexes():
    """§4.8 Response 1: tool.call and content.stop without `index`."""
    body = frame("stream.start", 0) + frame(
        "tool.call", 1, id="call_1", name="get_weather", arguments='{"city":"Vienna"}'
    )
    body += frame("content.stop", 2, stop_reason="tool_use") + frame("stream.end", 3)
    events, violations = decode(body)
    assert violations == []
    r = hub.assemble(events)
    [call] = r.blocks
    assert (call.kind, call.id, call.name, json.loads(call.text)) == (
        "tool_call",
        "call_1",
        "get_weather",
        {"city": "Vienna"},
    )
    assert r.finish.reason == "tool_use" and r.complete


def test_seed_tool_flow_response_2_without_indexes():
    """§4.8 Response 2 (and a call before the text, both without `index`)."""
    body = frame("stream.start", 0) + frame("tool.call", 1, id="c", name="f", arguments="{}")
    body += frame("content.delta", 2, delta={"text": "The weather in Vienna is 24C."})
    body += frame("content.delta", 3, delta={"text": " Enjoy."})
    body += frame("content.stop", 4, stop_reason="end_turn") + frame("stream.end", 5)
    events, violations = decode(body)
    assert violations == []
    r = hub.assemble(events)
    assert [(b.index, b.kind, b.text) for b in r.blocks] == [
        (0, "tool_call", "{}"),
        (1, "text", "The weather in Vienna is 24C. Enjoy."),
    ]
    assert all(b.closed for b in r.blocks) and r.finish.reason == "end_turn"


# --------------------------------------------------------------------------- grammar violations


def test_missing_stream_start():
    body = frame("content.delta", 0, index=0, delta={"text": "x"}) + frame("content.stop", 1, index=0)
    body += frame("stream.end", 2)
    events, violations = decode(body)
    assert rules(violations) == ["start-first"] and violations[0].event == 0
    assert hub.assemble(events).blocks[0].text == "x"


def test_stream_start_not_seq_zero():
    body = frame("stream.start", 1) + frame("stream.end", 2)
    _, violations = decode(body)
    assert "start-first" in rules(violations) and "seq" in rules(violations)


def test_seq_gap_is_fatal():
    body = text_stream(end=False) + frame("stream.end", 5)
    events, violations = decode(body)
    assert rules(violations) == ["seq"] and violations[0].event == 3
    assert "lost" in violations[0].message
    assert type(events[-2]) is hub.Error and events[-2].type == "protocol_error"


def test_seq_repeat():
    body = text_stream(frame("usage", 2, output_tokens=1))
    _, violations = decode(body)
    assert "seq" in rules(violations)
    assert next(v for v in violations if v.rule == "seq").event == 3


def test_event_after_stream_end():
    body = text_stream() + frame("usage", 4, output_tokens=3)
    events, violations = decode(body)
    assert rules(violations) == ["after-end"] and violations[0].event == 4
    assert hub.assemble(events).complete  # what came before the end stands


def test_missing_stream_end():
    events, violations = decode(text_stream(end=False))
    assert rules(violations) == ["end-missing"] and violations[0].event == -1
    assert type(events[-2]) is hub.Error and events[-2].type == "incomplete_stream"
    assert not hub.assemble(events).complete


def test_empty_body():
    events, violations = decode(b"")
    assert rules(violations) == ["start-first", "end-missing"]
    assert [type(e) for e in events] == [hub.ResponseStart, hub.Error, hub.ResponseEnd]


def test_event_name_mismatch():
    body = frame("stream.start", 0) + frame("usage", 1, sse_name="tokens", output_tokens=1) + frame("stream.end", 2)
    events, violations = decode(body)
    assert rules(violations) == ["event-name"] and violations[0].event == 1
    assert hub.assemble(events).usage.output_tokens == 1  # the JSON type decides


def test_missing_event_line_is_a_name_violation():
    body = frame("stream.start", 0) + b'data: {"v":"1.0","seq":1,"type":"stream.end"}\n\n'
    _, violations = decode(body)
    assert rules(violations) == ["event-name"]
    assert "'message'" in violations[0].message


@pytest.mark.parametrize(
    "data",
    [
        '{"v":"1.0","seq":1,"type":"usage"',  # cut short
        '[{"v":"1.0","seq":1,"type":"usage"}]',  # not an object
        '{"v":"1.0","seq":1,"type":"usage"} {"v":"1.0","seq":2,"type":"usage"}',  # two objects
        '{"v":"1.0","seq":1,\ndata: "type":"usage"}',  # one envelope over two data lines is fine...
    ],
)
def test_data_not_one_json_object(data):
    body = frame("stream.start", 0) + f"event: usage\ndata: {data}\n\n".encode() + frame("stream.end", 2)
    events, violations = decode(body)
    if "\n" in data:  # ...for SSE joins them with a newline, which JSON allows between tokens
        assert violations == []
        return
    assert rules(violations) == ["json"] and violations[0].event == 1
    assert (events[-2].type, events[-2].code) == ("protocol_error", "json")
    assert events[-2].message.startswith("event 1: json: ")


def test_envelope_fields_missing_or_mistyped():
    body = frame("stream.start", 0) + b'event: usage\ndata: {"seq":1,"type":"usage"}\n\n'
    body += b'event: usage\ndata: {"v":"1.0","seq":"2","type":"usage"}\n\n' + frame("stream.end", 3)
    _, violations = decode(body)
    assert rules(violations) == ["envelope", "envelope"] and [v.event for v in violations] == [1, 2]


def test_unsupported_major_version():
    body = frame("stream.start", 0).replace(b'"1.0"', b'"2.0"') + frame("stream.end", 1)
    _, violations = decode(body)
    assert rules(violations) == ["envelope"]


def test_delta_for_stopped_block():
    body = text_stream(frame("content.delta", 3, index=0, delta={"text": "late"}))
    events, violations = decode(body)
    assert rules(violations) == ["block"] and violations[0].event == 3
    assert hub.assemble(events).error.type == "protocol_error"


def test_block_without_content_stop():
    body = frame("stream.start", 0) + frame("content.delta", 1, index=0, delta={"text": "x"})
    body += frame("stream.end", 2)
    events, violations = decode(body)
    assert rules(violations) == ["block"]
    assert hub.assemble(events).blocks[0].closed


def test_content_after_error_event():
    body = frame("stream.start", 0) + frame("error", 1, error={"type": "overloaded", "message": "busy"})
    body += frame("content.delta", 2, index=0, delta={"text": "x"}) + frame("stream.end", 3)
    events, violations = decode(body)
    assert rules(violations) == ["error-last"]
    r = hub.assemble(events)
    assert r.error == hub.Error("busy", "overloaded") and r.blocks == []


def test_unknown_types_and_fields_are_ignored():
    body = frame("stream.start", 0, future={"x": 1}) + frame("heartbeat", 1)
    body += frame("content.delta", 2, index=0, delta={"text": "a", "vendor:x": 1}, extra=True)
    body += frame("content.stop", 3, index=0, stop_reason="end_turn") + frame("stream.end", 4)
    events, violations = decode(body)
    assert violations == []
    assert hub.assemble(events).blocks[0].text == "a"


def test_unknown_stop_reason_is_kept_raw():
    body = frame("stream.start", 0) + frame("content.stop", 1, stop_reason="budget_exceeded")
    body += frame("stream.end", 2)
    events, violations = decode(body)
    assert violations == []
    assert hub.assemble(events).finish == hub.Finish("other", raw="budget_exceeded")


def test_error_event_decodes_then_ends():
    err = {"type": "rate_limit", "message": "slow down", "code": "tpm"}
    body = frame("stream.start", 0) + frame("error", 1, error=err) + frame("stream.end", 2)
    events, violations = decode(body)
    assert violations == []
    assert events[-2:] == [hub.Error("slow down", "rate_limit", "tpm"), hub.ResponseEnd()]


def test_error_event_then_truncation_keeps_one_error():
    body = frame("stream.start", 0) + frame("error", 1, error={"type": "overloaded", "message": "busy"})
    events, violations = decode(body)
    assert rules(violations) == ["end-missing"]
    assert [type(e) for e in events] == [hub.ResponseStart, hub.Error, hub.ResponseEnd]
    assert events[1].type == "overloaded"


# --------------------------------------------------------------------------- seq exhaustion (§8.4)


def test_encoder_never_reaches_the_seq_limit():
    encoder = ls.StreamEncoder()
    encoder.seq = ls.SEQ_LIMIT - 4
    out = encoder.encode(hub.ResponseStart()) + encoder.encode(hub.BlockStart(0, "text"))
    out += b"".join(encoder.encode(hub.Delta(0, "x")) for _ in range(3)) + encoder.encode(hub.ResponseEnd())
    objs = [json.loads(line[6:]) for line in out.decode().splitlines() if line.startswith("data: ")]
    assert [o["type"] for o in objs] == ["stream.start", "content.delta", "error", "stream.end"]
    assert objs[-1]["seq"] == 2**53 - 1
    assert objs[2]["error"]["code"] == "seq_exhausted"


def test_small_seq_limit_round_trip():
    encoder, decoder = ls.StreamEncoder(seq_limit=6), ls.StreamDecoder(seq_limit=6)
    events = [hub.ResponseStart(), hub.BlockStart(0, "text")] + [hub.Delta(0, str(i)) for i in range(10)]
    body = encode_all(encoder, [*events, hub.BlockStop(0), hub.ResponseEnd()])
    decoded = decode_all(decoder, body)
    assert decoder.violations == []
    assert hub.assemble(decoded).error.code == "seq_exhausted"
    assert hub.validate(decoded) == []


def test_decoder_terminates_at_seq_limit():
    body = frame("stream.start", 0) + frame("usage", 2**53, output_tokens=1) + frame("stream.end", 2**53 + 1)
    events, violations = decode(body)
    assert rules(violations)[0] == "seq-exhausted"
    assert hub.assemble(events).error.code == "seq_exhausted"


# --------------------------------------------------------------------------- the namespaced extension fields


def test_thinking_and_extras_are_invisible_to_plain_parsers():
    events = [
        hub.ResponseStart("resp_1", "m", request_id="req"),
        hub.BlockStart(0, "thinking", fidelity={"anthropic-messages": {"signature": "sig"}}),
        hub.Delta(0, "hmm"),
        hub.BlockStop(0),
        hub.BlockStart(1, "text"),
        hub.Delta(1, "Hello"),
        hub.Extension("openai-chat", {"logprob": -0.1}, 1),
        hub.BlockStop(1),
        hub.BlockStart(2, "text", choice=1),
        hub.Delta(2, "Other choice"),
        hub.BlockStop(2),
        hub.Finish("end_turn", choice=1),
        hub.Finish("end_turn"),
        hub.ResponseEnd(),
    ]
    body = encode_all(ls.StreamEncoder(), events)
    plain_text, stop_reasons = "", []
    for line in body.decode().splitlines():
        if line.startswith("data: "):
            obj = json.loads(line[6:])
            plain_text += (obj.get("delta") or {}).get("text", "")
            if "stop_reason" in obj:
                stop_reasons.append(obj["stop_reason"])
    assert plain_text == "Hello" and stop_reasons == ["end_turn"]
    decoded, violations = decode(body)
    assert violations == []
    assert hub.assemble(decoded) == hub.assemble(events)


def test_tool_call_is_one_event_after_its_arguments():
    events = [
        hub.ResponseStart("r"),
        hub.BlockStart(0, "tool_call", id="call_a", name="f"),
        hub.BlockStart(1, "tool_call", id="call_b", name="g"),
        hub.Delta(0, '{"a":'),
        hub.Delta(1, '{"b":2}'),
        hub.Delta(0, "1}"),
        hub.BlockStop(1),
        hub.BlockStop(0),
        hub.Finish("tool_use", raw="tool_calls"),
        hub.Usage(10, 5, cache_read_tokens=3, reasoning_tokens=1),
        hub.ResponseEnd(),
    ]
    body = encode_all(ls.StreamEncoder(), events)
    objs = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]
    calls = [o for o in objs if o["type"] == "tool.call"]
    assert [(c["id"], json.loads(c["arguments"])) for c in calls] == [("call_b", {"b": 2}), ("call_a", {"a": 1})]
    assert objs[-3]["stop_reason"] == "tool_use" and objs[-3]["index"] == 0
    assert objs[-2] == {
        "v": "1.0",
        "seq": 5,
        "type": "usage",
        "input_tokens": 10,
        "output_tokens": 5,
        "llmbridge:cache_read_tokens": 3,
        "llmbridge:reasoning_tokens": 1,
    }
    decoded, violations = decode(body)
    assert violations == []
    assert normalized(decoded) == normalized(events)


def test_error_carries_cut_off_tool_calls_without_emitting_them():
    events = [
        hub.ResponseStart(),
        hub.BlockStart(0, "tool_call", id="c", name="f"),
        hub.Delta(0, '{"x'),
        hub.Error("upstream died", "incomplete_stream"),
        hub.ResponseEnd(),
    ]
    body = encode_all(ls.StreamEncoder(), events)
    assert b"tool.call" not in body
    decoded, violations = decode(body)
    assert violations == []
    r = hub.assemble(decoded)
    assert r.blocks[0].text == '{"x' and not r.blocks[0].closed and r.error.type == "incomplete_stream"


# --------------------------------------------------------------------------- round trips of arbitrary hub streams

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1), st.text(max_size=6))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
json_object = st.dictionaries(st.text(max_size=5), json_value, min_size=1, max_size=3)
namespaced = st.dictionaries(
    st.sampled_from(["anthropic-messages", "gemini", "openai-responses"]), json_object, min_size=1, max_size=2
)
maybe = st.none

KINDS = ["text", "text", "thinking", "tool_call", "tool_call", "data", "native", "custom"]


@st.composite
def hub_streams(draw) -> list[hub.Event]:
    start = hub.ResponseStart(
        draw(maybe() | st.text(min_size=1, max_size=8)),
        draw(maybe() | st.text(max_size=8)),
        draw(maybe() | st.integers(0, 2**40)),
        draw(maybe() | st.text(min_size=1, max_size=8)),
        draw(maybe() | namespaced),
    )
    plans: list[list[hub.Event]] = []
    for index in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(KINDS))
        is_tool = kind == "tool_call"
        block = hub.BlockStart(
            index,
            kind,
            draw(maybe() | st.text(min_size=1, max_size=6)) if is_tool or draw(st.booleans()) else None,
            draw(maybe() | st.text(max_size=6)) if is_tool else None,
            draw(st.sampled_from([0, 0, 0, 1])),
            draw(maybe() | st.just("image/png")) if kind == "data" else None,
            draw(maybe() | namespaced),
            draw(maybe() | namespaced),
        )
        deltas: list[hub.Event] = [hub.Delta(index, t) for t in draw(st.lists(st.text(max_size=8), max_size=4))]
        annotations: list[hub.Event] = [
            hub.Extension("gemini", d, index) for d in draw(st.lists(json_value, max_size=1))
        ]
        stop = hub.BlockStop(index, draw(maybe() | namespaced), draw(maybe() | namespaced))
        plans.append([block, *annotations, *deltas, stop])
    choices = sorted({p[0].choice for p in plans} | {0})
    extras: list[hub.Event] = [
        hub.Finish(
            draw(st.sampled_from(hub.FINISH_REASONS)),
            c,
            draw(maybe() | st.text(max_size=6)),
            draw(maybe() | st.text(max_size=4)),
        )
        for c in choices
        if draw(st.booleans())
    ]
    extras += [
        hub.Usage(*draw(st.lists(maybe() | st.integers(0, 10**6), min_size=6, max_size=6)))
        for _ in range(draw(st.integers(0, 2)))
    ]
    extras += [hub.Extension("openai-chat", draw(json_value)) for _ in range(draw(st.integers(0, 1)))]
    # Interleave the blocks (each in its own order), then put the stream-level events after theirs.
    body: list[hub.Event] = []
    queues = [list(p) for p in plans]
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        body.append(queue.pop(0))
    for event in extras:
        body.insert(draw(st.integers(0, len(body))), event)
    # Finishes go after the blocks of their choice stopped (a Finish ends the choice's turn).
    finishes = [e for e in body if type(e) is hub.Finish]
    body = [e for e in body if type(e) is not hub.Finish] + finishes
    end = hub.ResponseEnd(draw(st.sampled_from([None, start.request_id])))
    if draw(st.integers(0, 3)) == 0:  # an error cuts the stream somewhere
        body = body[: draw(st.integers(0, len(body)))]
        body.append(
            hub.Error(
                draw(st.text(max_size=10)),
                draw(st.sampled_from(hub.ERROR_TYPES)),
                draw(maybe() | st.text(max_size=4)),
                draw(maybe() | st.integers(400, 599)),
                draw(maybe() | json_object),
            )
        )
    return [start, *body, end]


def normalized(events: list[hub.Event]) -> hub.Response:
    """The hub content a round trip must keep: blocks by index; a choice-0 tool call always has an
    id and JSON arguments (the draft requires both)."""
    r = copy.deepcopy(hub.assemble(events))
    r.blocks.sort(key=lambda b: b.index)
    for b in r.blocks:
        if b.kind == "tool_call" and b.choice == 0 and b.closed:
            b.id = b.id if b.id is not None else f"call_{r.id or 'llmbridge'}_{b.index}"
            b.name = b.name or ""
            b.text = b.text or "{}"
    return r


@given(hub_streams())
def test_round_trip_preserves_hub_content(events):
    assert hub.validate(events) == []
    body = encode_all(ls.StreamEncoder(), events)
    decoded, violations = decode(body)
    assert violations == []
    assert normalized(decoded) == normalized(events)


@given(hub_streams(), st.lists(st.integers(0, 10_000), max_size=12))
def test_decoding_does_not_depend_on_chunking(events, cuts):
    body = encode_all(ls.StreamEncoder(), events)
    whole = decode_all(ls.StreamDecoder(), body)
    points = sorted({c % (len(body) + 1) for c in cuts})
    decoder = ls.StreamDecoder()
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert [e for p in pieces for e in decoder.feed(p)] + decoder.close() == whole


@given(hub_streams())
def test_response_form_round_trip(events):
    response = hub.assemble(events)
    body = msgspec.json.decode(msgspec.json.encode(ls.encode_response(response)))
    assert body["type"] == "response" and body["v"] == "1.0"
    decoded = ls.decode_response(body)
    assert hub.validate(decoded) == [] or response.error is not None
    expected = normalized(events)
    for b in expected.blocks:
        b.closed = True  # a whole response has no open blocks
        if b.kind == "tool_call" and b.choice == 0:
            b.id = b.id if b.id is not None else f"call_{expected.id or 'llmbridge'}_{b.index}"
            b.name, b.text = b.name or "", b.text or "{}"
    assert normalized(decoded) == expected


# --------------------------------------------------------------------------- non-streaming form and errors


def test_response_form_of_the_seed_example():
    events, _ = decode(SEED_EXAMPLE)
    body = ls.encode_response(hub.assemble(events))
    assert body == {
        "v": "1.0",
        "type": "response",
        "model": "example-model",
        "created": 1749292800,
        "request_id": "550e8400-...",
        "content": [{"type": "text", "index": 0, "text": "The weather in Vienna is 24C and sunny."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 42, "output_tokens": 8},
    }


def test_error_body_round_trip():
    error = hub.Error("no such model", "not_found", "model_not_found")
    status, body = ls.encode_error(error)
    assert status == 404 and body == {
        "error": {"type": "not_found", "message": "no such model", "code": "model_not_found"}
    }
    decoded = ls.decode_error(status, msgspec.json.encode(body))
    assert (decoded.message, decoded.type, decoded.code, decoded.status) == (
        "no such model",
        "not_found",
        "model_not_found",
        404,
    )


def test_decode_error_of_foreign_bodies():
    assert ls.decode_error(429, b"Too many requests").type == "rate_limit"
    assert ls.decode_error(503, b'{"error": "down"}').message == "down"
    assert ls.decode_error(500, b"").type == "api_error"


# --------------------------------------------------------------------------- request envelope

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name, e.g. Vienna"},
            "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
}
SEED_REQUESTS = {
    "multi-turn": {
        "messages": [
            {"role": "system", "content": "You are a coding assistant."},
            {"role": "user", "content": "Write a Python function to sort a list."},
            {"role": "assistant", "content": "def sort_list(items):\n    return sorted(items)"},
            {"role": "user", "content": "Now make it sort in reverse order."},
        ]
    },
    "image": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is shown in this image?"},
                    {"type": "image", "media_type": "image/png", "data": "iVBORw0KGgo="},
                ],
            }
        ]
    },
    "tool-flow-1": {
        "messages": [{"role": "user", "content": "What is the weather in Vienna?"}],
        "tools": [WEATHER_TOOL],
    },
    "tool-flow-2": {
        "messages": [
            {"role": "user", "content": "What is the weather in Vienna?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": '{"city":"Vienna"}'}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Vienna: 24C, sunny"},
        ],
        "tools": [WEATHER_TOOL],
    },
    "metadata-extensions": {
        "model": "example-model",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "parameters": {"temperature": 0.7, "max_tokens": 100, "stop": "\n\n", "vendor_knob": 3},
        "metadata": {
            "request_id": "550e8400-e29b-41d4-a716-446655440000",
            "user_id": "user-12345",
            "session_id": "sess-67890",
        },
        "extensions": {
            "vendor:openai": {"logprobs": True},
            "vendor:anthropic": {"thinking": {"type": "enabled", "budget_tokens": 10000}},
        },
    },
}


@pytest.mark.parametrize("name", SEED_REQUESTS)
def test_seed_requests_round_trip(name):
    request = ls.decode_request(SEED_REQUESTS[name])
    assert request.stream is True  # the standard streams unless told otherwise
    again = ls.decode_request(msgspec.json.decode(msgspec.json.encode(ls.encode_request(request))))
    assert again == request


def test_seed_tool_flow_request_2_in_the_hub():
    request = ls.decode_request(SEED_REQUESTS["tool-flow-2"])
    _user, assistant, tool = request.messages
    assert assistant.parts == [hub.ToolCallPart("call_1", "get_weather", '{"city":"Vienna"}')]
    assert tool.parts == [hub.ToolResultPart("call_1", [hub.TextPart("Vienna: 24C, sunny")])]
    assert request.tools[0].parameters["required"] == ["city"]


def test_seed_metadata_and_extensions_in_the_hub():
    request = ls.decode_request(SEED_REQUESTS["metadata-extensions"])
    assert request.metadata["request_id"] == "550e8400-e29b-41d4-a716-446655440000"
    assert request.extensions["vendor:openai"] == {"logprobs": True}
    assert (request.temperature, request.max_tokens, request.stop) == (0.7, 100, ["\n\n"])


def test_hub_only_request_data_round_trips():
    request = hub.Request(
        model="m",
        stream=False,
        tool_choice=hub.ToolChoice("tool", "get_weather"),
        tools=[hub.Tool("get_weather", None, {"type": "object"}, strict=True, extensions={"x:y": 1})],
        messages=[
            hub.Message("system", [hub.TextPart("be brief", {"anthropic-messages": {"cache_control": {}}})]),
            hub.Message(
                "user",
                [
                    hub.TextPart("hi"),
                    hub.FilePart("audio/wav", "UklGRg=="),
                    hub.FilePart("application/pdf", url="https://x/y.pdf", name="y.pdf"),
                    hub.ImagePart(url="https://x/i.png", detail="low"),
                ],
                name="ann",
            ),
            hub.Message(
                "assistant",
                [
                    hub.ThinkingPart("let me think", {"anthropic-messages": {"signature": "sig"}}),
                    hub.TextPart("calling"),
                    hub.NativePart("anthropic-messages", {"type": "server_tool_use", "id": "srv"}),
                    hub.ToolCallPart("c1", "get_weather", '{"city":"Vienna"}', {"gemini": {"thoughtSignature": "t"}}),
                    hub.ToolCallPart("c2", "get_weather", "{}"),
                ],
            ),
            hub.Message(
                "tool",
                [
                    hub.ToolResultPart("c1", [hub.TextPart("24C")], name="get_weather"),
                    hub.ToolResultPart("c2", [hub.TextPart("x"), hub.ImagePart("image/png", "AA==")], is_error=True),
                ],
            ),
            hub.Message("user", [hub.ToolResultPart("c3", [hub.TextPart("r")]), hub.TextPart("and now?")]),
        ],
        top_k=40,
        seed=7,
        stop=["END"],
        n=2,
        parallel_tool_calls=False,
        response_format={"type": "json_object"},
        thinking={"type": "enabled", "budget_tokens": 512},
        metadata={"request_id": "r"},
        extensions={"vendor:x": [1]},
    )
    body = msgspec.json.decode(msgspec.json.encode(ls.encode_request(request)))
    assert all(":" in key for key in body["extensions"])
    assert ls.decode_request(body) == request


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]}, "messages[0].content[0].type"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "media_type": "image/png"}]}]},
            "messages[0].content[0]",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "name": "f", "arguments": 1}]}
                ]
            },
            "messages[0].tool_calls[0].arguments",
        ),
        ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"description": "d"}]}, "tools[0].name"),
        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"}, "tool_choice"),
        (
            {"messages": [{"role": "user", "content": "x"}], "parameters": {"temperature": "hot"}},
            "parameters.temperature",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "parameters": {"max_tokens": True}}, "parameters.max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "extensions": {"logprobs": True}}, "extensions.logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "metadata": []}, "metadata"),
        ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
        ({"messages": [{"role": "user", "content": "x"}], "v": "2.0"}, "v"),
    ],
)
def test_bad_envelopes_name_the_field(body, field):
    with pytest.raises(RequestError) as info:
        ls.decode_request(body)
    assert info.value.field == field and info.value.status == 400


def test_unknown_envelope_fields_and_vendor_parts_are_ignored():
    request = ls.decode_request(
        {
            "future": 1,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "vendor:sticker", "id": 9}],
                    "mood": "ok",
                }
            ],
        }
    )
    assert request.messages == [hub.Message("user", [hub.TextPart("a")])]


def test_endpoint():
    url, headers = ls.endpoint(hub.Request(stream=True), base_url="http://gw:8000/", api_key="k")
    assert url == "http://gw:8000/v1/stream"
    assert headers["Content-Type"] == "application/llm-request+json"
    assert headers["Accept"] == 'text/event-stream; profile="llm-stream-1.0"'
    assert headers["Authorization"] == "Bearer k"
    assert ls.endpoint(hub.Request(), base_url="http://gw/v1")[0] == "http://gw/v1/stream"


# --------------------------------------------------------------------------- hostile input never escapes as a crash


@given(hub_streams(), st.lists(st.tuples(st.integers(0, 10_000), st.binary(max_size=3)), min_size=1, max_size=4))
def test_garbled_streams_decode_to_a_valid_hub_stream(events, edits):
    body = bytearray(encode_all(ls.StreamEncoder(), events))
    for at, replacement in edits:
        at %= len(body) + 1
        body[at : at + len(replacement)] = replacement
    decoder = ls.StreamDecoder()
    decoded = decode_all(decoder, bytes(body))
    assert hub.validate(decoded) == []  # whatever the damage: no exception, a valid hub stream
    if hub.assemble(decoded).complete:
        assert not any(v.rule in ("json", "envelope", "seq", "end-missing") for v in decoder.violations)


def mutations(value):
    """The body with one value somewhere replaced by something else."""
    leaf = st.one_of(json_leaf, st.just([]), st.just({}), st.just({"type": "text"}))
    if isinstance(value, dict) and value:
        return st.sampled_from(sorted(value)).flatmap(
            lambda k: (leaf | mutations(value[k])).map(lambda v: {**value, k: v})
        )
    if isinstance(value, list) and value:
        return st.integers(0, len(value) - 1).flatmap(
            lambda i: (leaf | mutations(value[i])).map(lambda v: [*value[:i], v, *value[i + 1 :]])
        )
    return leaf


@given(st.sampled_from(sorted(SEED_REQUESTS)).flatmap(lambda name: mutations(SEED_REQUESTS[name])))
def test_mutated_envelopes_decode_or_raise_request_error(body):
    try:
        request = ls.decode_request(body)
    except RequestError as exc:
        assert exc.field
        return
    assert ls.decode_request(msgspec.json.decode(msgspec.json.encode(ls.encode_request(request)))) == request
