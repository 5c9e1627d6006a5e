"""The extra source dialects: cohere-v2, bedrock-converse (binary AWS event stream) and
gemini-interactions, on the real captures in corpus/other/ and on made-up streams."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import dialects, hub
from llmbridge.dialects import eventstream
from llmbridge.dialects.base import decode_all, encode_all
from tests.conftest import corpus_files

FILES = {
    "cohere-v2": [p for p in corpus_files("other") if p.name.startswith("cohere-v2-")],
    "bedrock-converse": [
        p for p in corpus_files("other", suffix=".eventstream") if p.name.startswith("bedrock-converse-stream-")
    ],
    "gemini-interactions": [p for p in corpus_files("other") if p.name.startswith("gemini-interactions-")],
}
CASES = [(name, path) for name, paths in FILES.items() for path in paths]
IDS = [path.stem for _, path in CASES]


def decode(name: str, body: bytes) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = dialects.get(name).StreamDecoder()
    events = decode_all(decoder, body)
    return events, decoder.violations


def encode(name: str, events: list[hub.Event]) -> bytes:
    return encode_all(dialects.get(name).StreamEncoder(), events)


def test_registered_apart_from_the_matrix_targets():
    assert dialects.MORE_NAMES == ("cohere-v2", "bedrock-converse", "gemini-interactions")
    assert not set(dialects.MORE_NAMES) & set(dialects.NAMES)
    # the module surface: tests/test_dialect_contract.py, for every dialect
    assert all(FILES.values()), "every format has corpus files"


@pytest.mark.parametrize(("name", "path"), CASES, ids=IDS)
def test_corpus_decodes_cleanly(name, path):
    events, violations = decode(name, path.read_bytes())
    assert violations == []
    assert hub.validate(events) == []
    r = hub.assemble(events)
    assert r.complete and r.finish is not None and r.usage is not None
    assert r.usage.input_tokens and r.usage.output_tokens


@pytest.mark.parametrize(("name", "path"), CASES, ids=IDS)
def test_corpus_round_trips_exactly(name, path):
    events, _ = decode(name, path.read_bytes())
    again, violations = decode(name, encode(name, events))
    assert violations == []
    assert again == events


# Any split of a capture decodes the same: tests/test_dialect_contract.py, for every dialect.


def test_what_the_captures_say():
    cohere, _ = decode("cohere-v2", FILES["cohere-v2"][1].read_bytes())  # tool call
    r = hub.assemble(cohere)
    plan, weather, attractions = r.blocks
    assert plan.kind == "thinking" and plan.fidelity == {"cohere-v2": {"tool_plan": True}}
    assert plan.text.startswith("I will use the weather tool")
    assert (weather.id, weather.name, weather.text) == (
        "weather_e8p4pn45zt0t",
        "weather",
        '{"location": "San Francisco"}',
    )
    assert attractions.name == "cityAttractions"
    assert r.finish.reason == "tool_use" and r.finish.raw == "TOOL_CALL"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cache_read_tokens) == (1549, 95, 1504)
    assert r.usage.extensions == {"cohere-v2": {"billed_units": {"input_tokens": 119, "output_tokens": 44}}}

    bedrock, _ = decode("bedrock-converse", FILES["bedrock-converse"][0].read_bytes())  # claude thinking
    r = hub.assemble(bedrock)
    thinking, text = r.blocks
    assert thinking.kind == "thinking" and thinking.text and thinking.fidelity["bedrock-converse"]["signature"]
    assert text.kind == "text" and text.text
    assert r.finish.reason == "end_turn"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (36, 73, 109)
    assert not any("p" in (b.extensions or {}).get("bedrock-converse", {}) for b in r.blocks)

    interactions, _ = decode("gemini-interactions", FILES["gemini-interactions"][0].read_bytes())
    r = hub.assemble(interactions)
    thought, call = r.blocks
    assert thought.kind == "thinking" and thought.fidelity["gemini-interactions"]["signature"].startswith("CiQB")
    assert (call.kind, call.id, call.name, call.text) == (
        "tool_call",
        "61nzpsv4",
        "getWeather",
        '{"location":"San Francisco"}',
    )
    assert r.finish.reason == "tool_use" and r.finish.raw == "requires_action"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.reasoning_tokens) == (53, 80, 65)


# --------------------------------------------------------------------------- made-up hub streams

MIXED = [
    hub.ResponseStart(id="resp_1", model="m-1", created=1700000000, extensions={"openai-chat": {"x": 1}}),
    hub.BlockStart(0, "thinking", fidelity={"anthropic-messages": {"signature": "sig"}}),
    hub.Delta(0, "hmm"),
    hub.BlockStop(0, fidelity={"gemini": {"thoughtSignature": "ts"}}),
    hub.BlockStart(1, "text", id="msg_1"),
    hub.Delta(1, "Hello"),
    hub.Extension("openai-responses", {"type": "url_citation", "url": "https://example.com"}, 1),
    hub.BlockStart(2, "tool_call", id="call_a", name="f"),
    hub.BlockStart(3, "tool_call", id="call_b", name="g"),
    hub.Delta(2, '{"a":'),
    hub.Delta(3, "{}"),
    hub.Delta(2, "1}"),
    hub.BlockStop(3),
    hub.BlockStop(2),
    hub.BlockStop(1),
    hub.BlockStart(
        4, "native", id="srvtoolu_1", name="web_search", extensions={"anthropic-messages": {"type": "server_tool_use"}}
    ),
    hub.Delta(4, '{"q":"x"}'),
    hub.BlockStop(4),
    hub.BlockStart(5, "text", choice=1),
    hub.Delta(5, "second choice"),
    hub.BlockStop(5),
    hub.Finish("pause_turn", raw="pause_turn"),
    hub.Finish("end_turn", choice=1),
    hub.Usage(input_tokens=100, output_tokens=20, cache_read_tokens=30, cache_write_tokens=5, reasoning_tokens=7),
    hub.ResponseEnd(),
]

ERRORED = [
    hub.ResponseStart(id="r"),
    hub.BlockStart(0, "text"),
    hub.Delta(0, "partial"),
    hub.Usage(input_tokens=3),
    hub.Error("overloaded, try later", "overloaded", code="x", status=503),
    hub.ResponseEnd(),
]

BARE = [hub.ResponseStart(), hub.BlockStart(0, "thinking"), hub.BlockStop(0), hub.ResponseEnd()]

# a carried (native) block first: the decoded blocks must not take its index
NATIVE_FIRST = [
    hub.ResponseStart(id="r"),
    hub.BlockStart(0, "native", id="x", name="code", extensions={"gemini": {"executableCode": {"code": "1"}}}),
    hub.BlockStop(0),
    hub.BlockStart(7, "text"),
    hub.Delta(7, "after"),
    hub.BlockStop(7),
    hub.BlockStart(1, "tool_call", id="c", name="f"),
    hub.BlockStop(1),
    hub.Finish("tool_use"),
    hub.ResponseEnd(),
]


@pytest.mark.parametrize("name", dialects.MORE_NAMES)
@pytest.mark.parametrize(
    "events", [MIXED, ERRORED, BARE, NATIVE_FIRST], ids=["mixed", "errored", "bare", "native-first"]
)
def test_hub_streams_round_trip(name, events):
    assert hub.validate(events) == []
    back, violations = decode(name, encode(name, events))
    assert violations == []
    assert hub.validate(back) == []
    a, b = hub.assemble(events), hub.assemble(back)
    assert [(x.kind, x.text, x.id, x.name, x.choice, x.fidelity, x.extensions) for x in a.blocks] == [
        (x.kind, x.text, x.id, x.name, x.choice, x.fidelity, x.extensions) for x in b.blocks
    ]
    assert [x.annotations for x in a.blocks] == [x.annotations for x in b.blocks]
    assert {c: f.reason for c, f in a.finishes.items()} == {c: f.reason for c, f in b.finishes.items()}
    assert all(f.raw is None or f == b.finishes[c] for c, f in a.finishes.items())  # (a raw word stays)
    assert a.usage == b.usage
    assert a.error == b.error
    assert (a.id, a.model, a.created, a.extensions) == (b.id, b.model, b.created, b.extensions)
    assert a.complete == b.complete
    assert [x.index for x in a.blocks] == [x.index for x in b.blocks]


def test_errors_take_each_vendors_own_form():
    cohere = encode("cohere-v2", ERRORED)
    assert b'"finish_reason":"ERROR"' in cohere and b'"error":"overloaded, try later"' in cohere
    interactions = encode("gemini-interactions", ERRORED)
    assert b'"event_type":"error"' in interactions and b'"status":"UNAVAILABLE"' in interactions
    frames = eventstream.Decoder().feed(encode("bedrock-converse", ERRORED))
    last = frames[-1].headers
    assert last[":message-type"] == "exception" and last[":exception-type"] == "serviceUnavailableException"


def test_vendor_errors_without_our_key():
    body = b'data: {"event_type":"error","error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}}\n\n'
    events, _ = decode("gemini-interactions", body)
    assert type(events[-2]) is hub.Error and events[-2].type == "rate_limit" and events[-2].message == "slow down"

    body = (
        b'event: message-start\ndata: {"id":"x","type":"message-start","delta":{"message":{}}}'
        b'\n\nevent: message-end\ndata: {"type":"message-end",'
        b'"delta":{"finish_reason":"ERROR","error":"boom"}}\n\n'
    )
    events, _ = decode("cohere-v2", body)
    assert type(events[-2]) is hub.Error and events[-2].message == "boom"

    frame = eventstream.encode_frame(
        {":exception-type": "throttlingException", ":content-type": "application/json", ":message-type": "exception"},
        b'{"message":"Too many requests"}',
    )
    events, violations = decode("bedrock-converse", frame)
    assert violations == [hub.Violation(0, "start-first", "event before messageStart")]
    error = events[-2]
    assert (error.type, error.code, error.status, error.message) == (
        "rate_limit",
        "throttlingException",
        429,
        "Too many requests",
    )


# --------------------------------------------------------------------------- broken input


@pytest.mark.parametrize(("name", "path"), CASES, ids=IDS)
def test_truncation_is_an_incomplete_stream(name, path):
    body = path.read_bytes()
    events, violations = decode(name, body[: len(body) * 2 // 3])
    assert hub.validate(events) == []
    assert type(events[-2]) is hub.Error and events[-2].type == "incomplete_stream"
    assert any(v.rule == "truncated" for v in violations)


def test_bad_json_is_a_violation_with_its_event_number():
    body = FILES["cohere-v2"][0].read_bytes().replace(b'{"type":"content-delta","index":0', b'{"type":', 1)
    _, violations = decode("cohere-v2", body)
    assert [(v.event, v.rule) for v in violations] == [(2, "json")]
    body = FILES["gemini-interactions"][0].read_bytes().replace(b'{"index":0,"event_type":"step.stop"}', b"{oops")
    _, violations = decode("gemini-interactions", body)
    assert [(v.event, v.rule) for v in violations][:1] == [(4, "json")]


def _frames(body: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each frame."""
    out, pos = [], 0
    while pos < len(body):
        (total,) = struct.unpack_from(">I", body, pos)
        out.append((pos, total))
        pos += total
    return out


def test_corrupt_message_crc_is_reported_with_its_frame_number():
    body = bytearray(FILES["bedrock-converse"][1].read_bytes())
    offset, total = _frames(bytes(body))[3]
    body[offset + total - 1] ^= 0xFF
    events, violations = decode("bedrock-converse", bytes(body))
    assert [(v.event, v.rule) for v in violations] == [(3, "message-crc")]
    assert hub.validate(events) == []


def test_corrupt_prelude_crc_loses_the_framing():
    body = bytearray(FILES["bedrock-converse"][1].read_bytes())
    offset, _ = _frames(bytes(body))[5]
    body[offset + 9] ^= 0x01
    events, violations = decode("bedrock-converse", bytes(body))
    assert [(v.event, v.rule) for v in violations] == [(5, "prelude-crc")]
    assert hub.validate(events) == []
    assert events[-2].type == "protocol_error"


def test_truncated_frame_and_bad_payload():
    body = FILES["bedrock-converse"][1].read_bytes()
    offset, total = _frames(body)[4]
    events, violations = decode("bedrock-converse", body[: offset + total // 2])
    assert [(v.event, v.rule) for v in violations] == [(4, "truncated-frame"), (-1, "truncated")]
    assert events[-2].type == "incomplete_stream"

    bad = eventstream.encode_frame({":event-type": "contentBlockDelta", ":message-type": "event"}, b"{nope")
    start = eventstream.encode_frame({":event-type": "messageStart", ":message-type": "event"}, b'{"role":"a"}')
    _, violations = decode("bedrock-converse", start + bad)
    assert [(v.event, v.rule) for v in violations] == [(1, "json"), (-1, "truncated")]


# --------------------------------------------------------------------------- the frame codec


@given(
    headers=st.dictionaries(
        st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) < 256),
        st.one_of(st.booleans(), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=40), st.text(max_size=40)),
        max_size=5,
    ),
    payload=st.binary(max_size=200),
    data=st.data(),
)
def test_frames_round_trip_in_any_chunking(headers, payload, data):
    body = eventstream.encode_frame(headers, payload) * 2
    cut = data.draw(st.integers(0, len(body)))
    decoder = eventstream.Decoder()
    frames = decoder.feed(body[:cut]) + decoder.feed(body[cut:])
    decoder.close()
    assert decoder.problems == []
    assert [(f.headers, f.payload, f.number) for f in frames] == [(headers, payload, 0), (headers, payload, 1)]


def test_frame_crcs_are_the_formats():
    body = eventstream.encode_frame({":event-type": "x"}, b"{}")
    total, _head, crc = struct.unpack_from(">III", body)
    assert total == len(body) and crc == zlib.crc32(body[:8])
    assert struct.unpack(">I", body[-4:])[0] == zlib.crc32(body[:-4])


# --------------------------------------------------------------------------- requests, responses, errors

REQUEST = hub.Request(
    model="some-model",
    messages=[
        hub.Message("system", [hub.TextPart("Be brief.")]),
        hub.Message("user", [hub.TextPart("Weather in Paris?")]),
        hub.Message("assistant", [hub.ToolCallPart("call_1", "weather", '{"city":"Paris"}')]),
        hub.Message("tool", [hub.ToolResultPart("call_1", [hub.TextPart("sunny")], name="weather")]),
        hub.Message("assistant", [hub.TextPart("Sunny.")]),
    ],
    tools=[hub.Tool("weather", "Gets the weather", {"type": "object", "properties": {"city": {"type": "string"}}})],
    tool_choice=hub.ToolChoice("required"),
    max_tokens=100,
    temperature=0.5,
    top_p=0.9,
    top_k=40,
    stop=["END"],
    stream=True,
)


def _shape(request: hub.Request) -> tuple:
    messages = [
        (
            m.role,
            [
                (type(p).__name__, getattr(p, "text", None), getattr(p, "id", None), getattr(p, "tool_call_id", None))
                for p in m.parts
            ],
        )
        for m in request.messages
    ]
    return (
        request.model,
        messages,
        [(t.name, t.parameters) for t in request.tools],
        request.tool_choice.mode if request.tool_choice else None,
        request.max_tokens,
        request.temperature,
        request.top_p,
        request.top_k,
        request.stop,
    )


@pytest.mark.parametrize("name", dialects.MORE_NAMES)
def test_requests_round_trip(name):
    module = dialects.get(name)
    body = module.encode_request(REQUEST)
    back = module.decode_request(body, model="some-model" if name == "bedrock-converse" else None)
    assert _shape(back) == _shape(REQUEST)
    assert module.encode_request(back) == body
    url, headers = module.endpoint(REQUEST, base_url="https://example.test", api_key="k")
    assert url.startswith("https://example.test/") and headers["accept"] == module.STREAM_CONTENT_TYPE


def test_request_shapes():
    cohere = dialects.get("cohere-v2").encode_request(REQUEST)
    assert cohere["messages"][0] == {"role": "system", "content": "Be brief."}
    assert cohere["tool_choice"] == "REQUIRED" and cohere["p"] == 0.9 and cohere["k"] == 40
    bedrock = dialects.get("bedrock-converse").encode_request(REQUEST)
    assert bedrock["system"] == [{"text": "Be brief."}]
    assert bedrock["messages"][1]["content"][0]["toolUse"]["input"] == {"city": "Paris"}
    assert bedrock["messages"][2]["content"][0]["toolResult"]["toolUseId"] == "call_1"
    assert bedrock["toolConfig"]["toolChoice"] == {"any": {}} and bedrock["inferenceConfig"]["maxTokens"] == 100
    assert bedrock["additionalModelRequestFields"] == {"top_k": 40}
    url, _ = dialects.get("bedrock-converse").endpoint(REQUEST, base_url="https://b.test", api_key=None)
    assert url == "https://b.test/model/some-model/converse-stream"
    interactions = dialects.get("gemini-interactions").encode_request(REQUEST)
    assert interactions["system_instruction"] == "Be brief."
    assert [s["type"] for s in interactions["input"]] == ["user_input", "function_call", "user_input", "model_output"]
    assert interactions["generation_config"]["tool_choice"] == "any"


def test_bad_requests_name_the_field():
    from llmbridge.errors import RequestError

    with pytest.raises(RequestError, match=r"messages\[0\]"):
        dialects.get("cohere-v2").decode_request({"messages": [{"role": "robot"}]})
    with pytest.raises(RequestError, match=r"messages\[0\].content"):
        dialects.get("bedrock-converse").decode_request({"messages": [{"role": "user", "content": "x"}]})
    with pytest.raises(RequestError, match="input"):
        dialects.get("gemini-interactions").decode_request({"model": "m"})


@pytest.mark.parametrize(("name", "path"), CASES, ids=IDS)
def test_whole_responses_round_trip(name, path):
    module = dialects.get(name)
    events, _ = decode(name, path.read_bytes())
    body = module.encode_response(hub.assemble(events))
    back = module.decode_response(body)
    assert hub.validate(back) == []
    a, b = hub.assemble(events), hub.assemble(back)
    assert [(x.kind, x.text, x.name) for x in a.blocks] == [(x.kind, x.text, x.name) for x in b.blocks]
    assert a.finish.reason == b.finish.reason
    assert (a.usage.input_tokens, a.usage.output_tokens) == (b.usage.input_tokens, b.usage.output_tokens)


@pytest.mark.parametrize("name", dialects.MORE_NAMES)
@pytest.mark.parametrize("kind", ["invalid_request", "rate_limit", "overloaded", "api_error"])
def test_http_errors_round_trip(name, kind):
    module = dialects.get(name)
    status, body = module.encode_error(hub.Error("nope", kind))
    back = module.decode_error(status, dialects.base.json_encode(body))
    assert (back.type, back.message, back.status) == (kind, "nope", status)
    assert module.decode_error(502, b"<html>bad gateway</html>").status == 502


# --------------------------------------------------------------------------- AWS's own reader

_CLAUDE = [p for p in corpus_files("anthropic-messages") if "thinking" in p.name or "tool" in p.name][:6]
_CHAT = [p for p in corpus_files("openai-chat") if "tool" in p.name or "error" in p.name][:6]
SDK_SOURCES = [("anthropic-messages", p) for p in _CLAUDE] + [("openai-chat", p) for p in _CHAT] + CASES


def _botocore_events(body: bytes) -> list[dict]:
    """The body read by botocore's own event-stream parser with the ConverseStream output shape."""
    botocore_session = pytest.importorskip("botocore.session")
    from botocore.eventstream import EventStream
    from botocore.parsers import EventStreamJSONParser

    operation = botocore_session.get_session().get_service_model("bedrock-runtime").operation_model("ConverseStream")
    shape = operation.output_shape.members["stream"]

    class Raw:
        def stream(self):
            yield body

        def close(self):
            pass

    return list(EventStream(Raw(), shape, EventStreamJSONParser(), "ConverseStream"))


@pytest.mark.parametrize(("source", "path"), SDK_SOURCES, ids=[f"{s}/{p.stem}" for s, p in SDK_SOURCES])
def test_botocore_reads_the_bedrock_translation(source, path):
    events, _ = decode(source, path.read_bytes())
    r = hub.assemble(events)
    body = encode("bedrock-converse", events)
    if r.error is not None:
        from botocore.exceptions import EventStreamError

        with pytest.raises(EventStreamError):
            _botocore_events(body)
        return
    got = _botocore_events(body)
    text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in got if "contentBlockDelta" in e)
    assert text == "".join(b.text for b in r.choice_blocks(0) if b.kind == "text")
    names = [e["contentBlockStart"]["start"]["toolUse"]["name"] for e in got if "contentBlockStart" in e]
    assert names == [b.name for b in r.choice_blocks(0) if b.kind == "tool_call"]
    stop = next(e["messageStop"]["stopReason"] for e in got if "messageStop" in e)
    if r.finish is not None and r.finish.reason in ("end_turn", "tool_use", "max_tokens"):
        assert stop == r.finish.reason
    usage = got[-1]["metadata"]["usage"]
    if r.usage and r.usage.output_tokens is not None:
        assert usage["outputTokens"] == r.usage.output_tokens


# --------------------------------------------------------------------------- any hub stream


@st.composite
def hub_streams(draw) -> list[hub.Event]:
    """Valid hub streams: interleaved blocks of every kind, fidelity, annotations, usage, finish or error."""
    text = st.text(max_size=8)
    events: list[hub.Event] = [hub.ResponseStart(id=draw(st.none() | st.just("r1")), model=draw(st.none() | text))]
    specs = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["text", "thinking", "tool_call", "native", "data"]),
                st.integers(0, 1),  # choice
                st.none() | st.fixed_dictionaries({"gemini": st.fixed_dictionaries({"thoughtSignature": text})}),
                st.lists(text, max_size=3),
            ),
            max_size=5,
        )
    )
    open_blocks = []
    for n, (kind, choice, fidelity, deltas) in enumerate(specs):
        extra = {"id": f"call_{n}", "name": "f"} if kind in ("tool_call", "native") else {}
        events.append(hub.BlockStart(n, kind, choice=choice, fidelity=fidelity, **extra))
        open_blocks.append((n, deltas))
        if draw(st.booleans()):  # interleave: flush an earlier block now
            m, pending = open_blocks.pop(0)
            events += [hub.Delta(m, d) for d in pending if d] + [hub.BlockStop(m)]
    for m, pending in open_blocks:
        events += [hub.Delta(m, d) for d in pending if d] + [hub.BlockStop(m)]
    if specs and draw(st.booleans()):
        events.append(hub.Extension("openai-chat", {"k": draw(text)}, 0))
    if draw(st.booleans()):
        events.append(hub.Usage(input_tokens=draw(st.integers(0, 50)), output_tokens=draw(st.integers(0, 50))))
    if draw(st.booleans()):
        events.append(hub.Error(draw(text), draw(st.sampled_from(hub.ERROR_TYPES))))
    elif draw(st.booleans()):
        events.append(hub.Finish(draw(st.sampled_from(hub.FINISH_REASONS))))
    events.append(hub.ResponseEnd())
    return events


def _content(events: list[hub.Event]) -> tuple:
    r = hub.assemble(events)
    blocks = [(b.index, b.kind, b.text, b.id, b.name, b.choice, b.fidelity, b.annotations) for b in r.blocks]
    usage = (r.usage.input_tokens, r.usage.output_tokens) if r.usage else None
    return blocks, usage, {c: f.reason for c, f in r.finishes.items()}, r.error, r.complete, r.id, r.model


@pytest.mark.parametrize("name", dialects.MORE_NAMES)
@given(events=hub_streams())
def test_any_hub_stream_round_trips(name, events):
    assert hub.validate(events) == []
    back, violations = decode(name, encode(name, events))
    assert violations == []
    assert hub.validate(back) == []
    assert _content(back) == _content(events)


# --------------------------------------------------------------------------- the command line


def test_cli_translates_and_validates_the_extra_dialects(tmp_path):
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "llmbridge", *args], capture_output=True, timeout=60)

    nova = FILES["bedrock-converse"][1]
    done = cli("translate", "--from", "bedrock-converse", "--to", "openai-chat", str(nova))
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(b"data: [DONE]\n\n") and b"Paris" in done.stdout
    assert cli("validate", "--format", "cohere-v2", str(FILES["cohere-v2"][1])).returncode == 0
    body = bytearray(nova.read_bytes())
    body[-1] ^= 0xFF  # the last frame's message CRC
    broken = tmp_path / "broken.eventstream"
    broken.write_bytes(bytes(body))
    done = cli("validate", "--format", "bedrock-converse", str(broken))
    assert done.returncode == 1 and b"message-crc" in done.stdout
    back = cli(
        "translate", "--from", "gemini-interactions", "--to", "bedrock-converse", str(FILES["gemini-interactions"][0])
    )
    assert back.returncode == 0 and eventstream.Decoder().feed(back.stdout)


@pytest.mark.parametrize(
    ("name", "raw", "wire"),
    [
        (
            "gemini-interactions",
            {"type": "google_search_call", "id": "s1", "arguments": {"queries": ["q"]}},
            b'"step":{"type":"google_search_call"',
        ),
        ("bedrock-converse", {"toolResult": {"toolUseId": "t1", "type": "web_search"}}, b'"start":{"toolResult"'),
    ],
)
def test_own_native_blocks_go_back_on_the_wire_as_they_came(name, raw, wire):
    events = [
        hub.ResponseStart(id="r"),
        hub.BlockStart(0, "native", id="s1", name="x", extensions={name: raw}),
        hub.Delta(0, '{"partial":1}'),
        hub.BlockStop(0),
        hub.BlockStart(1, "text"),
        hub.Delta(1, "done"),
        hub.BlockStop(1),
        hub.ResponseEnd(),
    ]
    body = encode(name, events)
    assert wire in body
    back, violations = decode(name, body)
    assert violations == []
    assert _content(back) == _content(events)


# --------------------------------------------------------------------------- Cohere's own SDK


def _cohere_events(body: bytes) -> list:
    cohere = pytest.importorskip("cohere")
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    transport = httpx.Client(transport=httpx.MockTransport(handler))
    client = cohere.ClientV2(api_key="k", base_url="http://cohere.test", httpx_client=transport)
    return list(client.chat_stream(model="m", messages=[{"role": "user", "content": "hi"}]))


@pytest.mark.parametrize(("source", "path"), SDK_SOURCES, ids=[f"{s}/{p.stem}" for s, p in SDK_SOURCES])
def test_cohere_sdk_reads_the_cohere_translation(source, path):
    events, _ = decode(source, path.read_bytes())
    r = hub.assemble(events)
    got = _cohere_events(encode("cohere-v2", events))
    end = got[-1]
    assert end.type == "message-end"
    if r.error is not None:
        assert end.delta.finish_reason == "ERROR" and end.delta.error == r.error.message
        return
    text = thinking = plan = ""
    calls: dict[int, list[str]] = {}
    for e in got:
        if e.type == "content-delta":
            content = e.delta.message.content
            text += content.text or ""
            thinking += content.thinking or ""
        elif e.type == "tool-plan-delta":
            plan += e.delta.message.tool_plan
        elif e.type == "tool-call-start":
            calls[e.index] = [e.delta.message.tool_calls.function.name, ""]
        elif e.type == "tool-call-delta":
            calls[e.index][1] += e.delta.message.tool_calls.function.arguments
    blocks = r.choice_blocks(0)
    assert text == "".join(b.text for b in blocks if b.kind == "text")
    assert thinking + plan == "".join(b.text for b in blocks if b.kind == "thinking")
    assert [n for n, _ in calls.values()] == [b.name for b in blocks if b.kind == "tool_call"]
    assert [a for _, a in calls.values()] == [b.text for b in blocks if b.kind == "tool_call"]
    if r.finish is not None and r.finish.reason in ("end_turn", "tool_use", "max_tokens"):
        words = {"end_turn": "COMPLETE", "tool_use": "TOOL_CALL", "max_tokens": "MAX_TOKENS"}
        assert end.delta.finish_reason == words[r.finish.reason]
    if r.usage and r.usage.output_tokens is not None:
        assert end.delta.usage.tokens.output_tokens == r.usage.output_tokens


# --------------------------------------------------------------------------- Google's own SDK


def _interactions_events(body: bytes) -> list:
    import httpx
    from google import genai
    from google.genai import types

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    http = httpx.Client(transport=httpx.MockTransport(handler))
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url="http://gemini.test", httpx_client=http))
    return list(client.interactions.create(model="gemini-2.5-flash", input="hi", stream=True))


@pytest.mark.parametrize(("source", "path"), SDK_SOURCES, ids=[f"{s}/{p.stem}" for s, p in SDK_SOURCES])
def test_google_sdk_reads_the_interactions_translation(source, path):
    events, _ = decode(source, path.read_bytes())
    r = hub.assemble(events)
    got = _interactions_events(encode("gemini-interactions", events))
    if r.error is not None:
        assert got[-1].event_type == "error" and got[-1].error.message == r.error.message
        return
    assert got[-1].event_type == "interaction.completed"
    kinds: dict[int, str] = {}
    text = thinking = ""
    calls: dict[int, list[str]] = {}
    for e in got:
        if e.event_type == "step.start":
            kinds[e.index] = e.step.type
            if e.step.type == "function_call":
                calls[e.index] = [e.step.name, ""]
        elif e.event_type == "step.delta":
            if e.delta.type == "text":
                text += e.delta.text
            elif e.delta.type == "thought_summary":
                thinking += e.delta.content.text
            elif e.delta.type == "arguments_delta":
                calls[e.index][1] += e.delta.arguments
    blocks = r.choice_blocks(0)
    assert text == "".join(b.text for b in blocks if b.kind == "text")
    assert thinking == "".join(b.text for b in blocks if b.kind == "thinking")
    assert list(calls.values()) == [[b.name, b.text] for b in blocks if b.kind == "tool_call"]
    if r.finish is not None and r.finish.reason in ("end_turn", "tool_use", "max_tokens"):
        words = {"end_turn": "completed", "tool_use": "requires_action", "max_tokens": "incomplete"}
        assert got[-1].interaction.status == words[r.finish.reason]
    if r.usage and r.usage.input_tokens is not None:
        assert got[-1].interaction.usage.total_input_tokens == r.usage.input_tokens


VENDOR_REQUESTS = {
    "cohere-v2": {
        "model": "command-a-03-2025",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "tool_plan": "I will call weather.",
                "tool_calls": [{"id": "w1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "w1", "content": [{"type": "text", "text": "sunny"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
        "documents": [{"id": "d1", "data": {"text": "x"}}],
        "citation_options": {"mode": "FAST"},
        "stream": True,
    },
    "bedrock-converse": {
        "messages": [
            {"role": "user", "content": [{"text": "Weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}},
                    {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}},
                ],
            },
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"json": {"temp": 20}}]}}]},
        ],
        "system": [{"text": "You are terse."}],
        "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
        "toolConfig": {"tools": [{"toolSpec": {"name": "weather", "inputSchema": {"json": {"type": "object"}}}}]},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        "guardrailConfig": {"guardrailIdentifier": "g", "guardrailVersion": "1"},
    },
    "gemini-interactions": {
        "model": "gemini-2.5-flash",
        "input": [
            {"type": "user_input", "content": [{"type": "text", "text": "Weather?"}]},
            {"type": "thought", "signature": "sig"},
            {"type": "function_call", "id": "c1", "name": "weather", "arguments": {"city": "Paris"}},
            {"type": "user_input", "content": [{"type": "function_result", "call_id": "c1", "result": "sunny"}]},
        ],
        "system_instruction": "You are terse.",
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}, {"type": "google_search"}],
        "generation_config": {"max_output_tokens": 512, "thinking_level": "low"},
        "previous_interaction_id": "v1_prev",
        "stream": True,
    },
}


@pytest.mark.parametrize("name", dialects.MORE_NAMES)
def test_vendor_request_bodies_decode_and_come_back(name):
    module = dialects.get(name)
    body = VENDOR_REQUESTS[name]
    request = module.decode_request(body, model="anthropic.claude" if name == "bedrock-converse" else None)
    assert request.system == "You are terse."
    roles = [m.role for m in request.messages]
    assert roles[:2] == ["system", "user"] and "tool" in roles
    call = next(p for m in request.messages for p in m.parts if isinstance(p, hub.ToolCallPart))
    assert call.name == "weather"
    result = next(p for m in request.messages for p in m.parts if isinstance(p, hub.ToolResultPart))
    assert result.tool_call_id == call.id
    again = module.encode_request(request)
    for key in body:  # vendor-only fields come back too
        assert key in again, key
    assert module.decode_request(again, model=request.model) == request


@pytest.mark.parametrize("name", ["cohere-v2", "bedrock-converse", "gemini-interactions"])
def test_usage_keeps_its_own_and_carried_extensions(name):
    module = dialects.get(name)
    extensions = {name: {"x": 1}, "other": {"y": 2}}
    events = [
        hub.ResponseStart("r", "m", 1),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "hi"),
        hub.BlockStop(0),
        hub.Usage(5, 3, extensions=extensions),
        hub.Finish("end_turn"),
        hub.ResponseEnd(),
    ]
    back = decode_all(module.StreamDecoder(), encode_all(module.StreamEncoder(), events))
    assert hub.assemble(back).usage.extensions == extensions
