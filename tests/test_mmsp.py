"""The mmsp dialect: UniEvent lines on the wire, requests, responses and errors."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import dialects, hub, replay
from llmbridge.dialects import mmsp
from llmbridge.dialects.base import decode_all, encode_all
from llmbridge.errors import RequestError
from llmbridge.gateway import config, create_app
from llmbridge.unievent import UniEvent, grammar_violations, view_events
from tests.conftest import CORPUS
from tests.gateway_util import replay_config, serving
from tests.readers import expected
from tests.readers import mmsp as reader

from .test_unievent import clock, corpus_cases, hub_streams, seed_hub_events


def encode(events: list[hub.Event]) -> bytes:
    return encode_all(mmsp.StreamEncoder(clock), events)


def decode(body: bytes) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = mmsp.StreamDecoder()
    return decode_all(decoder, body), decoder.violations


def lines(body: bytes) -> list[str]:
    return [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]


def comparable(response: hub.Response, parsed_arguments: bool = False) -> dict:
    """What an mmsp round trip must keep: every block's content, names, ids, fidelity; usage; finish.

    A whole response holds parsed tool arguments, so only their JSON value survives it.  An item
    with nothing in it is left out (as MMSP leaves it out); a note about it stays, stream-level.
    """
    blocks, notes = [], [(a.namespace, a.data) for a in response.annotations]
    for b in response.blocks:
        if b.kind in ("text", "thinking", "data") and not (b.text or b.fidelity or b.extensions or b.id or b.choice):
            notes += [(a.namespace, a.data) for a in b.annotations]
            continue
        text = json.loads(b.text or "{}") if parsed_arguments and b.kind == "tool_call" else b.text
        ident = b.id if b.kind in ("tool_call", "native") else None
        annotations = [(a.namespace, a.data) for a in b.annotations]
        blocks.append(
            (b.kind, text, b.name, ident, b.choice, b.fidelity or None, b.mime_type, b.extensions or None, annotations)
        )
    u = response.usage or hub.Usage()
    return {
        "blocks": blocks,
        "usage": (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens),
        "finishes": {c: (f.reason, f.stop_sequence) for c, f in response.finishes.items()},
        "error": (response.error.type, response.error.message) if response.error else None,
        "annotations": sorted(notes, key=repr),
        "start": (response.id, response.model),
    }


# --------------------------------------------------------------------------- streams


def test_the_wire_is_unievent_lines_then_done():
    body = encode(seed_hub_events({"mmsp": {"signature": "..."}}))
    data = lines(body)
    assert data[-1] == "[DONE]"
    events = [UniEvent.from_dict(json.loads(d)) for d in data[:-1]]
    assert grammar_violations(events) == []
    assert body.endswith(b"data: [DONE]\n\n") and b"\n\n\n" not in body


@given(hub_streams())
def test_the_hot_path_writes_exactly_what_the_view_gives(case):
    stream, _ = case
    slow = [msgspec.json.encode(e.to_dict()).decode() for e in view_events(stream, clock)]
    assert lines(encode(stream)) == [*slow, "[DONE]"]


@given(hub_streams())
def test_encode_then_decode_keeps_the_hub_content(case):
    stream, _ = case
    back, violations = decode(encode(stream))
    assert violations == []
    assert hub.validate(back) == []
    assert comparable(hub.assemble(back)) == comparable(hub.assemble(stream))


@given(hub_streams(), st.lists(st.integers(1, 40), max_size=30))
def test_decoding_does_not_depend_on_how_the_bytes_are_split(case, sizes):
    body = encode(case[0])
    whole, _ = decode(body)
    decoder = mmsp.StreamDecoder()
    pieces: list[hub.Event] = []
    at = 0
    for size in sizes:
        pieces += decoder.feed(body[at : at + size])
        at += size
    pieces += decoder.feed(body[at:]) + decoder.close()
    assert pieces == whole


@pytest.mark.parametrize(("source_decoder", "path"), corpus_cases())
def test_corpus_streams_survive_an_mmsp_round_trip(source_decoder, path):
    events = decode_all(source_decoder(), path.read_bytes())
    body = encode(events)
    back, violations = decode(body)
    assert violations == []
    assert hub.validate(back) == []
    source, result = hub.assemble(events), hub.assemble(back)
    if path.stem == "openai-image-generation-partial-image":  # its fixture elides the image's base64
        for r in (source, result):  # ("..."), which MMSP, carrying bytes, cannot keep as it was
            for block in r.blocks:
                block.text = "" if block.kind == "data" else block.text
    # nothing is lost, even where MMSP's grammar ends the stream early
    assert comparable(result) == comparable(source)
    # MMSP's own assembler agrees on every group of what went out
    mmsp_items_agree([UniEvent.from_dict(json.loads(d)) for d in lines(body) if d.startswith('{"role"')])
    want, got = expected(events, "mmsp"), reader.read(body)
    ends_in_error = json.loads(lines(body)[-2]).keys() == {"error"}
    assert lines(body)[-1] == "[DONE]"
    if source.error is None and not ends_in_error:
        # an MMSP client reads what the source said
        assert got.error is None
        assert (got.text, got.thinking or "", got.tool_calls, got.tool_call_ids) == (
            want.text,
            want.thinking or "",
            want.tool_calls,
            want.tool_call_ids,
        )
        assert (got.finish, got.input_tokens) == (want.finish, want.input_tokens)
        assert got.output_tokens == want.output_tokens or want.output_tokens is None
    else:
        # the source failed, or its tool arguments do not parse: an MMSP client sees the error
        assert ends_in_error and got.error is not None
        assert source.error is not None or "ToolCallArgumentParseError" in got.error


def broken(stream: list[hub.Event], data: st.DataObject) -> list[hub.Event]:
    """The stream failing somewhere: an upstream error, or a tool call whose arguments do not parse."""
    calls = [
        n
        for n, e in enumerate(stream)
        if type(e) is hub.BlockStop
        and e.index in {b.index for b in stream if type(b) is hub.BlockStart and b.kind == "tool_call"}
    ]
    if calls and data.draw(st.booleans()):
        at = data.draw(st.sampled_from(calls))
        return [*stream[:at], hub.Delta(stream[at].index, "]"), *stream[at:]]
    cut = data.draw(st.integers(1, len(stream) - 1))
    return [*stream[:cut], hub.Error("boom", "overloaded", status=529), hub.ResponseEnd()]


def settled(response: hub.Response) -> hub.Response:
    """A block the error cut off never got its end, where fidelity usually comes: leave it out."""
    for b in response.blocks:
        if not b.closed:
            b.fidelity = None
    return response


@given(hub_streams(), st.data())
def test_a_failure_anywhere_loses_nothing(case, data):
    events = broken(case[0], data)
    body = encode(events)
    assert json.loads(lines(body)[-2]).keys() == {"error"} and lines(body)[-1] == "[DONE]"
    back, violations = decode(body)
    assert violations == [] and hub.validate(back) == []
    assert comparable(settled(hub.assemble(back))) == comparable(settled(hub.assemble(events)))


def test_unparsable_arguments_become_an_error_event_then_done():
    events = [
        hub.ResponseStart(),
        hub.BlockStart(0, "tool_call", id="toolu_1", name="get_weather"),
        hub.Delta(0, '{"location": "Par'),
        hub.BlockStop(0),
        hub.Finish("max_tokens"),
        hub.ResponseEnd(),
    ]
    data = lines(encode(events))
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["type"] == "ToolCallArgumentParseError"
    assert (error["tool_name"], error["tool_call_id"], error["raw_arguments_length"]) == ("get_weather", "toolu_1", 17)
    assert all(json.loads(d).get("event_type") != "stop" for d in data[:-2])
    assert reader.read(encode(events)).error.startswith("UpstreamError(ToolCallArgumentParseError): ")
    # only MMSP's grammar failed: our decoder gets the whole source back from the error event
    back, violations = decode(encode(events))
    assert violations == [] and hub.validate(back) == []
    assert comparable(hub.assemble(back)) == comparable(hub.assemble(events))
    assert hub.assemble(back).complete


def test_a_failure_carries_the_blocks_that_were_still_waiting():
    events = [
        hub.ResponseStart(id="r"),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "Hel"),
        hub.BlockStart(1, "tool_call", id="c1", name="f"),
        hub.Delta(1, "[1]"),  # not an object
        hub.BlockStart(2, "thinking"),
        hub.Delta(2, "hm"),
        hub.BlockStop(1),
        hub.BlockStop(0),  # the call fails when its turn comes; thinking is still open
        hub.Delta(2, "m"),
        hub.BlockStop(2, fidelity={"anthropic-messages": {"signature": "s"}}),
        hub.Extension("anthropic-messages", {"cite": 1}, 0),
        hub.Usage(input_tokens=5, output_tokens=7),
        hub.Finish("tool_use"),
        hub.ResponseEnd(),
    ]
    body = encode(events)
    assert [json.loads(d).get("event_type") for d in lines(body)[:-2]] == ["delta"] * 3  # text, text.done, call
    back, violations = decode(body)
    assert violations == []
    assert comparable(hub.assemble(back)) == comparable(hub.assemble(events))
    error = hub.Error("boom", "api_error")
    cut = encode([*events[:7], error, hub.ResponseEnd()])
    back = decode(cut)[0]
    assert back[-2] == error
    assert [(b.kind, b.text) for b in hub.assemble(back).blocks] == [
        ("text", "Hel"),
        ("tool_call", "[1]"),
        ("thinking", "hm"),
    ]


def test_a_hub_error_becomes_an_error_event_that_decodes_back():
    error = hub.Error("Overloaded", "overloaded", "overloaded_error", 529, {"type": "overloaded_error"})
    body = encode([hub.ResponseStart(), hub.BlockStart(0, "text"), hub.Delta(0, "Hi"), error, hub.ResponseEnd()])
    assert json.loads(lines(body)[-2])["error"]["type"] == "UpstreamError"
    back, violations = decode(body)
    assert violations == []
    assert back[-2] == error and type(back[-1]) is hub.ResponseEnd
    # a second encode of the decoded error is the same MMSP object
    assert lines(encode(back)) == lines(body)


def test_a_foreign_mmsp_error_event_maps_to_hub_types():
    body = b'data: {"error": {"type": "AuthenticationError", "message": "bad key"}}\n\ndata: [DONE]\n\n'
    back, _ = decode(body)
    assert back[-2] == hub.Error(
        "bad key", "authentication", "AuthenticationError", None, {"type": "AuthenticationError", "message": "bad key"}
    )


@pytest.mark.parametrize(
    ("cut", "rule"),
    [(lambda d: d[:-1], "truncated"), (lambda d: d[:-2] + d[-1:], "stop-missing"), (lambda d: d[:3], "truncated")],
    ids=["no-done", "no-stop", "mid-stream"],
)
def test_a_stream_without_stop_or_done_is_incomplete(cut, rule):
    data = lines(encode(seed_hub_events({"mmsp": {"signature": "s"}})))
    back, violations = decode("".join(f"data: {d}\n\n" for d in cut(data)).encode())
    assert back[-2].type == "incomplete_stream" and type(back[-1]) is hub.ResponseEnd
    assert rule in [v.rule for v in violations]


def test_grammar_breaks_are_reported_and_still_decoded():
    def event(item, kind="delta"):
        return {
            "role": "assistant",
            "event_type": kind,
            "content_items": [item],
            "usage_metadata": None,
            "finish_reason": None,
        }

    stop = {
        "role": "assistant",
        "event_type": "stop",
        "content_items": [],
        "finish_reason": "stop",
        "usage_metadata": {"cached_tokens": None, "prompt_tokens": 1, "thoughts_tokens": None, "response_tokens": 2},
    }
    sent = [
        event({"type": "text.delta", "text": "a"}),
        event({"type": "thinking.delta", "thinking": "b"}),  # interleaves the open text group
        event({"type": "thinking.done", "thinking": "b"}),
        event({"type": "text.done", "text": "whole"}),  # a .done without fragments
        stop,
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in sent).encode() + b"data: [DONE]\n\n"
    back, violations = decode(body)
    assert {"interleave", "group"} <= {v.rule for v in violations}
    r = hub.assemble(back)
    assert [(b.kind, b.text) for b in r.blocks] == [("text", "a"), ("thinking", "b"), ("text", "whole")]
    assert r.complete and r.finish.reason == "end_turn" and r.usage.output_tokens == 2


def test_missing_tool_call_ids_are_generated_deterministically():
    item = {"type": "tool_call.delta", "name": "f", "arguments": "{}", "tool_call_id": ""}
    done = {"type": "tool_call.done", "name": "f", "arguments": {}, "tool_call_id": ""}
    stop = {"event_type": "stop", "content_items": [], "finish_reason": "tool_call", "usage_metadata": {}}
    body = (
        "".join(
            "data: " + json.dumps({"event_type": "delta", "content_items": [i]}) + "\n\n"
            for i in (item, done, item, done)
        ).encode()
        + f"data: {json.dumps(stop)}\n\ndata: [DONE]\n\n".encode()
    )
    ids = [b.id for b in hub.assemble(decode(body)[0]).blocks]
    assert ids == ["call_mmsp_1", "call_mmsp_2"] and ids == [b.id for b in hub.assemble(decode(body)[0]).blocks]


# --------------------------------------------------------------------------- requests

MMSP_REQUEST = {
    "model": "claude-sonnet-4-5",
    "messages": [
        {
            "role": "user",
            "content_items": [
                {"type": "text.done", "text": "Weather in Paris?"},
                {"type": "image_url.done", "image_url": "https://example.com/map.png"},
            ],
        },
        {
            "role": "assistant",
            "content_items": [
                {"type": "thinking.done", "thinking": "Let me check", "fidelity": {"signature": "sig"}},
                {
                    "type": "tool_call.done",
                    "name": "get_weather",
                    "arguments": {"location": "Paris"},
                    "tool_call_id": "toolu_1",
                },
            ],
        },
        {
            "role": "user",
            "content_items": [
                {"type": "tool_result.done", "text": "18C, sunny", "tool_call_id": "toolu_1"},
            ],
        },
    ],
    "config": {
        "max_tokens": 1024,
        "temperature": 0.2,
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
            }
        ],
        "tool_choice": ["get_weather"],
        "system_prompt": "Be brief.",
        "thinking_level": "medium",
        "trace_id": "t-1",
        "prompt_caching": "enable",
    },
}


def test_an_mmsp_request_decodes_to_the_hub():
    r = mmsp.decode_request(MMSP_REQUEST)
    assert r.model == "claude-sonnet-4-5" and r.stream
    assert [m.role for m in r.messages] == ["system", "user", "assistant", "tool"]
    assert r.system == "Be brief."
    assert r.messages[1].parts[1] == hub.ImagePart(url="https://example.com/map.png")
    thinking, call = r.messages[2].parts
    assert thinking == hub.ThinkingPart("Let me check", {"mmsp": {"signature": "sig"}})
    assert (call.id, call.name, json.loads(call.arguments)) == ("toolu_1", "get_weather", {"location": "Paris"})
    (result,) = r.messages[3].parts
    assert result.tool_call_id == "toolu_1" and result.content == [hub.TextPart("18C, sunny")]
    assert (r.max_tokens, r.temperature) == (1024, 0.2)
    assert r.tools[0].name == "get_weather" and r.tool_choice == hub.ToolChoice("tool", "get_weather")
    assert r.thinking == {"type": "enabled", "effort": "medium"}
    assert r.metadata == {"trace_id": "t-1"} and r.extensions == {"mmsp:prompt_caching": "enable"}


def test_an_mmsp_request_encodes_back_unchanged():
    assert mmsp.encode_request(mmsp.decode_request(MMSP_REQUEST)) == MMSP_REQUEST


def test_a_hub_request_survives_mmsp():
    request = hub.Request(
        model="m",
        messages=[
            hub.Message("system", [hub.TextPart("sys")]),
            hub.Message(
                "user",
                [
                    hub.TextPart("hi", extensions={"anthropic-messages": {"cache_control": {}}}),
                    hub.ImagePart("image/png", "iVBORw0KGgo=", detail="high"),
                    hub.FilePart("application/pdf", "JVBERi0=", name="a.pdf"),
                ],
            ),
            hub.Message(
                "assistant",
                [
                    hub.ThinkingPart("hmm", {"anthropic-messages": {"signature": "s"}}),
                    hub.NativePart("anthropic-messages", {"type": "server_tool_use", "id": "srv_1"}),
                    hub.ToolCallPart("c1", "f", '{"a": 1}'),
                    hub.ToolCallPart("c2", "g", "{}"),
                ],
            ),
            hub.Message("tool", [hub.ToolResultPart("c1", [hub.TextPart("one")], is_error=True, name="f")]),
            hub.Message("tool", [hub.ToolResultPart("c2", [hub.TextPart("two")])]),
        ],
        tools=[hub.Tool("f", "does f", {"type": "object", "properties": {}}, strict=True)],
        tool_choice=hub.ToolChoice("required"),
        stream=True,
        max_tokens=10,
        temperature=0.5,
        top_p=0.9,
        top_k=5,
        stop=["##"],
        seed=7,
        n=1,
        parallel_tool_calls=False,
        response_format={"type": "json_object"},
        thinking={"type": "enabled", "budget_tokens": 2000},
        metadata={"request_id": "r1"},
        extensions={"openai-chat:user": "u"},
    )
    body = mmsp.encode_request(request)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["config"]["system_prompt"] == "sys" and body["config"]["thinking_level"] == "low"
    assert mmsp.decode_request(json.loads(json.dumps(body))) == request


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": [{"role": "tool", "content_items": []}]}, "messages[0].role"),
        (
            {"model": "m", "messages": [{"role": "user", "content_items": [{"type": "video.done"}]}]},
            "messages[0].content_items[0].type",
        ),
        ({"model": "m", "messages": [], "config": {"max_tokens": "ten"}}, "config.max_tokens"),
        ({"model": "m", "messages": [], "config": {"tool_choice": "any"}}, "config.tool_choice"),
        ({"model": "m", "messages": [], "config": {"thinking_level": "huge"}}, "config.thinking_level"),
        ({"messages": []}, "model"),
        ({"model": "m", "messages": [], "config": {"llmbridge": {"tools": [1]}}}, "config.llmbridge"),
    ],
)
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(RequestError) as info:
        mmsp.decode_request(body)
    assert info.value.field == field and info.value.status == 400


def test_endpoint():
    url, headers = mmsp.endpoint(hub.Request(model="m"), base_url="http://127.0.0.1:25752/", api_key="k")
    assert url == "http://127.0.0.1:25752/v1/stream"
    assert mmsp.endpoint(hub.Request(), base_url="http://h/mmsp/v1", api_key=None)[0] == "http://h/mmsp/v1/stream"
    assert headers["authorization"] == "Bearer k" and headers["accept"] == "text/event-stream"


# --------------------------------------------------------------------------- responses and errors


@given(hub_streams())
def test_a_whole_response_is_the_assembled_message(case):
    stream, _ = case
    response = hub.assemble(stream)
    body = mmsp.encode_response(response)
    assert set(body) >= {"role", "content_items", "usage_metadata", "finish_reason"}
    assert all(i["type"].endswith(".done") for i in body["content_items"])
    back = mmsp.decode_response(json.loads(json.dumps(body)))
    assert hub.validate(back) == []
    assert comparable(hub.assemble(back), True) == comparable(response, True)


def test_an_error_response_round_trips():
    error = hub.Error("no such model", "not_found", status=404)
    status, body = mmsp.encode_error(error)
    assert status == 404 and body["error"]["type"] == "UpstreamError"
    assert mmsp.decode_error(status, json.dumps(body).encode()) == error
    events = mmsp.decode_response(body)
    assert events[-2] == hub.Error("no such model", "not_found", status=404) and type(events[-1]) is hub.ResponseEnd


@pytest.mark.parametrize(
    ("status", "body", "hub_type"),
    [
        (400, b'{"error": {"type": "InvalidRequestError", "message": "bad"}}', "invalid_request"),
        (401, b'{"error": {"type": "AuthenticationError", "message": "key"}}', "authentication"),
        (413, b'{"error": {"type": "InvalidRequestError", "message": "big"}}', "invalid_request"),
        (502, b'{"error": {"type": "UpstreamError", "message": "x", "status": 429}}', "rate_limit"),
        (503, b"<html>Service unavailable</html>", "overloaded"),
    ],
)
def test_decode_error_reads_mmsp_error_bodies(status, body, hub_type):
    error = mmsp.decode_error(status, body)
    assert error.type == hub_type and error.status == status and error.message


def test_encode_error_uses_mmsp_error_classes():
    assert mmsp.encode_error(hub.Error("bad", "invalid_request"))[1]["error"]["type"] == "InvalidRequestError"
    assert mmsp.encode_error(hub.Error("key", "authentication"))[0] == 401
    status, body = mmsp.encode_error(hub.Error("slow", "timeout"))
    assert status == 504 and body["error"]["error_type"] == "timeout"


# --------------------------------------------------------------------------- through the gateway

GATEWAY_CASES = {
    "anthropic-messages": ["claude-text-simple", "claude-thinking-then-tool-use"],
    "openai-chat": ["openai-gpt4o-parallel-tool-calls", "deepseek-reasoner-reasoning-content"],
    "openai-responses": ["openai-reasoning-function-call-usage"],
    "gemini": ["gemini25pro-thoughts", "gemini20-parallel-function-calls"],
}
GATEWAY_SOURCES = [(d, n) for d, names in GATEWAY_CASES.items() for n in names]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    # The replay upstream serves the corpus, plus each source translated to mmsp.
    root = tmp_path_factory.mktemp("replay")
    (root / "mmsp").mkdir()
    for dialect, name in GATEWAY_SOURCES:
        (root / dialect).mkdir(exist_ok=True)
        body = (CORPUS / dialect / f"{name}.sse").read_bytes()
        (root / dialect / f"{name}.sse").write_bytes(body)
        events = decode_all(dialects.get(dialect).StreamDecoder(), body)
        (root / "mmsp" / f"mmsp-{name}.sse").write_bytes(encode(events))
    models = {name: (dialect, name + "@chunk=64") for dialect, name in GATEWAY_SOURCES}
    models.update({f"mmsp-{name}": ("mmsp", f"mmsp-{name}@chunk=64") for _, name in GATEWAY_SOURCES})
    with serving(replay.create_app(root, seed=3)) as upstream:
        app = create_app(config.parse(replay_config(upstream.url, models)))
        with serving(app) as gw:
            yield gw


def source_summary(dialect: str, name: str):
    body = (CORPUS / dialect / f"{name}.sse").read_bytes()
    return expected(decode_all(dialects.get(dialect).StreamDecoder(), body))


@pytest.mark.parametrize(("dialect", "name"), GATEWAY_SOURCES, ids=[n for _, n in GATEWAY_SOURCES])
def test_an_mmsp_client_streams_from_any_upstream(gateway, dialect, name):
    request = {
        "model": name,
        "messages": [{"role": "user", "content_items": [{"type": "text.done", "text": "Hi"}]}],
        "config": {"max_tokens": 256},
    }
    response = httpx.post(gateway.url + "/mmsp/v1/stream", json=request, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    got, want = reader.read(response.content), source_summary(dialect, name)
    assert got.error is None
    assert (got.text, got.thinking or "", got.tool_calls, got.finish) == (
        want.text,
        want.thinking or "",
        want.tool_calls,
        want.finish,
    )
    assert got.input_tokens == want.input_tokens


@pytest.mark.parametrize(("dialect", "name"), GATEWAY_SOURCES, ids=[n for _, n in GATEWAY_SOURCES])
def test_the_anthropic_sdk_streams_from_an_mmsp_upstream(gateway, dialect, name):
    client = anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0)
    kwargs = {"model": f"mmsp-{name}", "max_tokens": 256, "messages": [{"role": "user", "content": "Hi"}]}
    with client.messages.stream(**kwargs) as s:
        for _ in s:
            pass
        message = s.get_final_message()
    want = source_summary(dialect, name)
    assert "".join(b.text for b in message.content if b.type == "text") == want.text
    assert "".join(b.thinking for b in message.content if b.type == "thinking") == (want.thinking or "")
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == want.tool_calls


def test_an_mmsp_client_gets_errors_in_mmsp_shape(gateway):
    bad = httpx.post(gateway.url + "/mmsp/v1/stream", json={"model": "x", "messages": "no"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "InvalidRequestError"
    assert "messages" in bad.json()["error"]["message"]
    unknown = httpx.post(gateway.url + "/mmsp/v1/stream", json={"model": "nope", "messages": []}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "UpstreamError"
    models = httpx.get(gateway.url + "/mmsp/v1/models", timeout=30)
    assert models.status_code == 200


def test_mmsps_own_client_lists_the_gateways_models(gateway):
    from mmsp.mmsp.client import MmspClient

    async def run() -> list[str]:
        return await MmspClient("x", api_key="k", base_url=gateway.url + "/mmsp/v1").list_models()

    listed = asyncio.run(run())
    assert listed and listed == [m["id"] for m in httpx.get(gateway.url + "/v1/models", timeout=30).json()["data"]]


# --------------------------------------------------------------------------- MMSP's own code as the judge


def mmsp_items_agree(events: list[UniEvent]) -> None:
    """MMSP's reference assembler, fed our deltas, closes each group where we do, with our .done."""
    from mmsp.stream_items import StreamItems
    from mmsp.wire import decode_wire

    items = StreamItems("llmbridge")
    for event in events:
        if event.event_type == "stop":
            assert items.end() == []
            continue
        (item,) = decode_wire(json.loads(json.dumps(event.to_dict())))["content_items"]
        if item["type"].endswith(".delta"):
            out = items.delta(item)
            assert all(i["type"].endswith(".delta") for i in out), "MMSP saw a new item begin inside a group"
        else:
            assert items.end() == [item]


@given(hub_streams())
def test_mmsp_assembles_our_deltas_into_our_done_items(case):
    mmsp_items_agree(view_events(case[0], clock))


def mmsp_client_events(url: str, model: str, messages: list[dict]) -> list[dict]:
    from mmsp.mmsp.client import MmspClient

    async def run() -> list[dict]:
        client = MmspClient(model, api_key="k", base_url=url + "/mmsp/v1")
        return [e async for e in client.streaming_response(messages, {"max_tokens": 64})]

    return asyncio.run(run())


CLIENT_SOURCES = [
    s
    for s in GATEWAY_SOURCES
    if s[1] in ("claude-thinking-then-tool-use", "gemini25pro-thoughts", "openai-gpt4o-parallel-tool-calls")
]


@pytest.mark.parametrize(("dialect", "name"), CLIENT_SOURCES, ids=[n for _, n in CLIENT_SOURCES])
def test_mmsps_own_client_reads_the_gateway(gateway, dialect, name):
    from mmsp.mmsp.client import MmspClient

    user = {"role": "user", "content_items": [{"type": "text.done", "text": "Hi"}]}
    events = mmsp_client_events(gateway.url, name, [user])
    assert grammar_violations(events) == []
    want = source_summary(dialect, name)
    message = MmspClient(name, api_key="k", base_url="http://unused/v1").concat_uni_events_to_uni_message(events)
    done = message["content_items"]
    assert "".join(i["text"] for i in done if i["type"] == "text.done") == want.text
    assert "".join(i["thinking"] for i in done if i["type"] == "thinking.done") == (want.thinking or "")
    assert [(i["name"], i["arguments"]) for i in done if i["type"] == "tool_call.done"] == want.tool_calls
    assert message["usage_metadata"]["prompt_tokens"] == want.input_tokens
    # the message MMSP keeps as history is a request our gateway takes back, fidelity and all
    history = [user, message, {"role": "user", "content_items": [{"type": "text.done", "text": "Again"}]}]
    request = mmsp.decode_request({"model": name, "messages": json.loads(json.dumps(history)), "config": {}})
    assert [m.role for m in request.messages][:2] == ["user", "assistant"]
    again = mmsp_client_events(gateway.url, name, history)
    assert [e["event_type"] for e in again][-1] == "stop"
