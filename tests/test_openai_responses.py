"""The openai-responses dialect: corpus decoding, chunking, encoder round trips, the official SDK
reading what we write, requests, non-streaming bodies and errors."""

from __future__ import annotations

import json
import warnings

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import hub
from llmbridge.dialects import openai_responses as R
from llmbridge.dialects.base import decode_all, encode_all
from llmbridge.errors import RequestError
from tests.conftest import CORPUS, corpus_files
from tests.readers import expected
from tests.readers import openai_responses as reader

FILES = corpus_files("openai-responses")
NS = "openai-responses"


def load(name: str) -> bytes:
    return (CORPUS / "openai-responses" / f"{name}.sse").read_bytes()


def decode(body: bytes) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = R.StreamDecoder()
    events = decode_all(decoder, body)
    return events, decoder.violations


def content(events: list[hub.Event]) -> tuple:
    """What must survive a round trip: blocks, usage, finish, error, stream metadata."""
    r = hub.assemble(events)
    blocks = [
        (
            b.kind,
            b.id,
            b.name,
            b.choice,
            b.text,
            b.fidelity,
            b.extensions,
            [(a.namespace, a.data) for a in b.annotations],
        )
        for b in r.blocks
    ]
    error = (r.error.message, r.error.type, r.error.code) if r.error else None
    notes = [(a.namespace, a.data) for a in r.annotations]
    return blocks, r.usage, r.finishes, error, r.id, r.model, r.extensions, notes, r.complete


def roundtrip(events: list[hub.Event]) -> list[hub.Event]:
    again, violations = decode(encode_all(R.StreamEncoder(), events))
    assert violations == []
    assert hub.validate(again) == []
    return again


def sdk_client(body: bytes, content_type: str = "text/event-stream", status: int = 200) -> openai.OpenAI:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": content_type})

    return openai.OpenAI(
        base_url="http://test/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


# ------------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_corpus_decodes_clean(path):
    events, violations = decode(path.read_bytes())
    assert violations == []  # every file in the folder is a whole, well-formed stream
    assert hub.validate(events) == []
    r = hub.assemble(events)
    assert r.complete or r.error is not None
    assert r.finish is not None or r.error is not None


def test_text_usage_and_finish():
    r = hub.assemble(decode(load("openai-text"))[0])
    assert [b.kind for b in r.blocks] == ["text"]
    assert r.blocks[0].text == "The capital of France is Paris."
    assert r.blocks[0].id.startswith("msg_")
    assert r.finish.reason == "end_turn"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (278, 9, 287)
    assert r.id == "resp_67e554a21aa88191b65876ac5e5bbe0406c52f0e511c76ed" and r.model == "gpt-4o-2024-08-06"


def test_reasoning_usage_and_function_call():
    r = hub.assemble(decode(load("openai-reasoning-function-call-usage"))[0])
    assert r.usage.reasoning_tokens == 448 and r.usage.output_tokens == 469 and r.usage.cache_read_tokens == 0
    call = next(b for b in r.blocks if b.kind == "tool_call")
    assert call.id.startswith("call_") and call.fidelity[NS]["id"].startswith("fc_")
    assert isinstance(json.loads(call.text), dict)
    assert r.finish.reason == "tool_use"


def test_encrypted_reasoning_with_several_summary_parts():
    r = hub.assemble(decode(load("openai-reasoning-summary-encrypted"))[0])
    thinking = r.blocks[0]
    assert thinking.kind == "thinking"
    own = thinking.fidelity[NS]
    assert own["id"].startswith("rs_") and own["encrypted_content"]
    assert len(own["summary"]) == 4
    assert thinking.text == "\n\n".join(p["text"] for p in own["summary"])


def test_reasoning_text_of_open_models():
    r = hub.assemble(decode(load("deepseek-responses-reasoning-text"))[0])
    assert r.blocks[0].kind == "thinking" and r.blocks[0].text
    assert r.blocks[0].fidelity[NS]["text_kind"] == "reasoning_text"


def test_arguments_only_in_done_event():
    r = hub.assemble(decode(load("lmstudio-open-responses-tool-call"))[0])
    call = next(b for b in r.blocks if b.kind == "tool_call")
    assert json.loads(call.text)  # no argument deltas: the .done event supplies them


def test_data_before_event_and_sorted_keys():
    r = hub.assemble(decode(load("bedrock-mantle-function-call"))[0])
    assert [(b.kind, b.name) for b in r.blocks] == [("tool_call", "first_tool")]
    assert json.loads(r.blocks[0].text) == {}


def test_done_terminator_and_interleaved_items():
    events, violations = decode(load("openrouter-gpt-oss-reasoning-text"))
    assert violations == []
    r = hub.assemble(events)
    assert [b.kind for b in r.blocks] == ["thinking", "text"]
    assert r.blocks[1].text == "4" and "2+2" in r.blocks[0].text


def test_resumed_stream_without_created():
    events, _ = decode(load("openai-background-resume-starting-after"))
    assert type(events[0]) is hub.ResponseStart and events[0].id.startswith("resp_")
    assert hub.assemble(events).blocks[0].text


def test_insufficient_quota_is_an_error():
    r = hub.assemble(decode(load("openai-error-insufficient-quota-failed"))[0])
    assert r.error.type == "rate_limit" and r.error.code == "insufficient_quota"
    assert "quota" in r.error.message and not r.complete and r.finish is None


def test_annotations_logprobs_and_native_items():
    r = hub.assemble(decode(load("openai-web-search-annotations"))[0])
    assert [b.kind for b in r.blocks] == ["native", "native", "text"]
    assert r.blocks[0].name == "web_search_call" and r.blocks[0].extensions[NS]["type"] == "web_search_call"
    notes = r.blocks[2].annotations
    assert notes and notes[0].data["annotation"]["type"] == "url_citation"

    r = hub.assemble(decode(load("openai-logprobs"))[0])
    logprobs = [a.data["logprobs"] for a in r.blocks[0].annotations]
    assert "".join(lp[0]["token"] for lp in logprobs) == r.blocks[0].text

    r = hub.assemble(decode(load("openai-code-interpreter-reasoning"))[0])
    code = [b for b in r.blocks if b.kind == "native"]
    assert len(code) == 3 and code[0].extensions[NS]["code"].startswith("n = pow")
    kinds = [a.data["type"] for a in code[0].annotations]
    assert "response.code_interpreter_call_code.delta" in kinds

    # The image_generation tool's final image is a data block (every dialect shows it as an
    # image); its progress events (the partial image too) are its annotations, in order.
    r = hub.assemble(decode(load("openai-image-generation-partial-image"))[0])
    image = next(b for b in r.blocks if b.kind == "data")
    assert image.mime_type == "image/webp" and image.text.startswith("UklGR") and image.id.startswith("ig_")
    kinds = [a.data["type"].rsplit(".", 1)[1] for a in image.annotations]
    assert kinds == ["in_progress", "generating", "partial_image", "completed"]


# ------------------------------------------------------------------------------------ grammar violations


def test_truncated_stream_is_an_error():
    body = load("openai-text")
    events, violations = decode(body[: body.index(b"event: response.output_text.done")])
    assert [v.rule for v in violations] == ["truncated"]
    assert type(events[-2]) is hub.Error and events[-2].type == "incomplete_stream"
    assert hub.validate(events) == []


def _sse(*objs: dict | str) -> bytes:
    return b"".join(b"data: " + (o.encode() if isinstance(o, str) else json.dumps(o).encode()) + b"\n\n" for o in objs)


CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "m", "status": "in_progress"}}


def test_violations_are_recorded():
    body = _sse(
        CREATED,
        "{not json",
        {"type": "response.output_text.delta", "output_index": 5, "content_index": 0, "delta": "x"},
        {"no": "type"},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        },
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "content": []}},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "late"},
    )
    events, violations = decode(body)
    rules = ["json", "item-unknown", "missing-type", "item-unknown", "item-twice", "after-terminal"]
    assert [v.rule for v in violations] == rules
    assert [v.event for v in violations] == [1, 2, 3, 4, 5, 7]
    assert hub.validate(events) == []
    assert [b.kind for b in hub.assemble(events).blocks] == ["tool_call"]  # the done-only call is kept


def test_sequence_gap_and_early_done():
    body = _sse({**CREATED, "sequence_number": 0}, {"type": "response.in_progress", "sequence_number": 2}, "[DONE]")
    events, violations = decode(body)
    assert [v.rule for v in violations] == ["sequence", "missing-field", "done-early", "truncated"]
    assert events[-2].type == "incomplete_stream"


def test_error_event_alone_is_terminal():
    events, violations = decode(_sse(CREATED, {"type": "error", "code": "server_error", "message": "boom"}))
    assert violations == []
    assert [type(e) for e in events] == [hub.ResponseStart, hub.Error, hub.ResponseEnd]
    assert events[1].message == "boom" and events[1].type == "api_error"


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "max_tokens"), ("content_filter", "content_filter")]
)
def test_incomplete(reason, finish):
    terminal = {
        "type": "response.incomplete",
        "response": {"id": "resp_1", "status": "incomplete", "incomplete_details": {"reason": reason}},
    }
    r = hub.assemble(decode(_sse(CREATED, terminal))[0])
    assert r.finish.reason == finish and r.finish.raw == reason and r.complete


# Any split of a capture decodes the same: tests/test_dialect_contract.py, for every dialect.


# ------------------------------------------------------------------------------------ encoder


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_corpus_round_trip(path):
    events = decode(path.read_bytes())[0]
    assert content(roundtrip(events)) == content(events)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_sdk_reads_encoder_output(path):
    events = decode(path.read_bytes())[0]
    got = reader.read(encode_all(R.StreamEncoder(), events))
    want = expected(events, "openai-responses")
    if want.error:  # the reader reports the SDK's exception, the hub its error type
        assert got.error and want.error.split(": ", 1)[1] in got.error
        got.error = want.error
    assert got == want


def _stream(*events: hub.Event) -> list[hub.Event]:
    return [hub.ResponseStart("resp_x", "m", 1700000000), *events]


FOREIGN = [
    # interleaved text and tool calls, thinking with another vendor's signature, usage with cache writes
    _stream(
        hub.BlockStart(0, "thinking"),
        hub.Delta(0, "Let me think."),
        hub.BlockStop(0, fidelity={"anthropic-messages": {"signature": "sig=="}}),
        hub.BlockStart(1, "text"),
        hub.Delta(1, "Calling "),
        hub.BlockStart(2, "tool_call", id="call_a", name="f"),
        hub.Delta(2, '{"x":'),
        hub.BlockStart(3, "tool_call", id="call_b", name="g"),
        hub.Delta(3, "{}"),
        hub.Delta(2, "1}"),
        hub.Delta(1, "tools."),
        hub.BlockStop(2),
        hub.BlockStop(3),
        hub.BlockStop(1),
        hub.Usage(100, 20, cache_read_tokens=60, cache_write_tokens=10, reasoning_tokens=5),
        hub.Finish("tool_use", raw="tool_use"),
        hub.ResponseEnd(),
    ),
    # another vendor's native block, a citation, inline data, a second choice, a stop sequence
    _stream(
        hub.BlockStart(
            0,
            "native",
            id="srvtoolu_1",
            name="web_search",
            extensions={"anthropic-messages": {"type": "server_tool_use", "id": "srvtoolu_1"}},
        ),
        hub.Delta(0, '{"query": "x"}'),
        hub.BlockStop(0),
        hub.BlockStart(1, "text", fidelity={"gemini": {"thoughtSignature": "abc"}}),
        hub.Delta(1, "Hi"),
        hub.Extension("anthropic-messages", {"type": "citation", "url": "u"}, 1),
        hub.BlockStop(1),
        hub.BlockStart(2, "data", mime_type="image/png"),
        hub.Delta(2, "iVBOR"),
        hub.BlockStop(2),
        hub.BlockStart(3, "text", choice=1),
        hub.Delta(3, "other choice"),
        hub.BlockStop(3),
        hub.Finish("stop_sequence", stop_sequence="END"),
        hub.Finish("end_turn", choice=1),
        hub.Extension("openai-chat", {"system_fingerprint": "fp"}),
        hub.ResponseEnd("req-1"),
    ),
    # an error mid-stream, after usage and a finish
    _stream(
        hub.BlockStart(0, "text"),
        hub.Delta(0, "par"),
        hub.Usage(5, 1),
        hub.Finish("max_tokens"),
        hub.Error("upstream died", "incomplete_stream"),
        hub.ResponseEnd(),
    ),
    # an error right after the start
    _stream(hub.Error("slow down", "rate_limit", code="rate_limit_exceeded", status=429), hub.ResponseEnd()),
    # finish reasons: length, filter, refusal, none at all; an empty tool call
    _stream(
        hub.BlockStart(0, "text"), hub.Delta(0, "cut"), hub.BlockStop(0), hub.Finish("max_tokens"), hub.ResponseEnd()
    ),
    _stream(hub.Finish("content_filter", raw="SAFETY"), hub.ResponseEnd()),
    _stream(hub.BlockStart(0, "text"), hub.Delta(0, "No."), hub.BlockStop(0), hub.Finish("refusal"), hub.ResponseEnd()),
    _stream(hub.BlockStart(0, "tool_call", id="c", name="noargs"), hub.BlockStop(0), hub.ResponseEnd()),
]


def _without_ours(mapping: dict | None) -> dict | None:
    rest = {k: v for k, v in (mapping or {}).items() if k != NS}
    return rest or None


def foreign_content(events: list[hub.Event]) -> tuple:
    """Round-trip content of another dialect's stream; not compared: our own response fields
    (the defaults we wrote), the source vendor's raw finish word, usage numbers Responses
    always states (a total, zero cached/reasoning tokens)."""
    blocks, usage, finishes, error, rid, model, extensions, notes, complete = content(events)
    finishes = {c: (f.reason, f.stop_sequence) for c, f in finishes.items()}
    if usage is not None:
        usage = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens or 0,
            usage.cache_write_tokens,
            usage.reasoning_tokens or 0,
        )
    return blocks, usage, finishes, error, rid, model, _without_ours(extensions), notes, complete


@pytest.mark.parametrize("events", FOREIGN)
def test_foreign_streams_round_trip_and_read(events):
    assert hub.validate(events) == []
    again = roundtrip(events)
    assert foreign_content(again) == foreign_content(events)  # ids we made up do not come back
    got, want = reader.read(encode_all(R.StreamEncoder(), events)), expected(events, "openai-responses")
    if want.error:
        assert got.error.startswith("APIError: ") and want.error.split(": ", 1)[1] in got.error
        got.error = want.error
    assert got == want


def test_sdk_stream_helper_final_response():
    events = decode(load("openai-reasoning-summary-encrypted"))[0]
    body = encode_all(R.StreamEncoder(), events)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with sdk_client(body).responses.stream(model="m", input="hi") as stream:
            kinds = {event.type for event in stream}
            final = stream.get_final_response()
    assert {"response.reasoning_summary_text.delta", "response.output_text.delta", "response.completed"} <= kinds
    reasoning, message = final.output
    assert message.type == "message"
    assert reasoning.encrypted_content and len(reasoning.summary) == 4
    assert final.output_text == hub.assemble(events).blocks[1].text
    assert final.usage.output_tokens_details.reasoning_tokens == hub.assemble(events).usage.reasoning_tokens


def test_sdk_raw_stream_parses_every_event_and_raises_on_errors():
    events = FOREIGN[0]
    stream = sdk_client(encode_all(R.StreamEncoder(), events)).responses.create(model="m", input="x", stream=True)
    seen = list(stream)
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    assert all(type(e).__name__ != "BaseModel" for e in seen)
    calls = [e.item for e in seen if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("f", {"x": 1}), ("g", {})]
    stream = sdk_client(encode_all(R.StreamEncoder(), FOREIGN[7])).responses.create(model="m", input="x", stream=True)
    done = [e for e in stream if e.type == "response.function_call_arguments.done"]
    assert done[0].arguments == "{}"  # hub "" arguments: clients get "{}"
    with pytest.raises(openai.APIError, match="slow down"):
        list(sdk_client(encode_all(R.StreamEncoder(), FOREIGN[3])).responses.create(model="m", input="x", stream=True))


@pytest.mark.parametrize("end", ["error", "end"])
def test_a_stream_that_ends_before_its_start_still_opens(end):
    """A slow upstream's keep-alives committed the answer, then it failed (or ended empty):
    the stream still opens with response.created, and its terminal event names that response."""
    encoder = R.stream_encoder(hub.Request(model="gpt-x", messages=[]))
    events = (
        [hub.Error("upstream 'u' sent nothing for 1 s", "timeout", "upstream_timeout", 504)] if end == "error" else []
    )
    body = encode_all(encoder, [*events, hub.ResponseEnd()])
    seen = [json.loads(line[5:]) for line in body.decode().splitlines() if line.startswith("data:")]
    kinds = [e["type"] for e in seen]
    terminal = "response.failed" if end == "error" else "response.completed"
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == terminal
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
    created, last = seen[0]["response"], seen[-1]["response"]
    assert last["id"] == created["id"] and last["model"] == created["model"] == "gpt-x"
    assert created["object"] == "response" and created["status"] == "in_progress"
    if end == "error":  # the SDK raises the error, as it does on the vendor's own
        with (
            pytest.raises(openai.APIError, match="sent nothing"),
            sdk_client(body).responses.stream(model="m", input="hi") as stream,
        ):
            list(stream)
    decoded = decode_all(R.StreamDecoder(), body)
    assert decoded[0] == hub.ResponseStart(model="gpt-x")  # the made-up id and time: not the source's
    assert (hub.assemble(decoded).error is not None) == (end == "error")


def test_delta_fast_path_matches_generic_event():
    encoder = R.StreamEncoder()
    encoder.encode(hub.ResponseStart("resp_1"))
    encoder.encode(hub.BlockStart(0, "text"))
    chunk = encoder.encode(hub.Delta(0, 'a "quoted" \n line'))
    assert chunk.startswith(b"event: response.output_text.delta\ndata: ")
    data = json.loads(chunk.split(b"data: ", 1)[1])
    assert data == {
        "type": "response.output_text.delta",
        "item_id": data["item_id"],
        "output_index": 0,
        "content_index": 0,
        "delta": 'a "quoted" \n line',
        "logprobs": [],
        "sequence_number": 4,
    }


# ------------------------------------------------------------------------------------ non-streaming


def _completed_object(name: str) -> dict:
    for line in load(name).decode().splitlines():
        if line.startswith("data:") and '"response.completed"' in line:
            return json.loads(line[5:])["response"]
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    ["openai-text", "openai-reasoning-summary-encrypted", "openai-function-call", "openai-web-search-annotations"],
)
def test_decode_response_matches_stream(name):
    streamed = hub.assemble(decode(load(name))[0])
    whole = hub.assemble(R.decode_response(_completed_object(name)))
    assert [(b.kind, b.text, b.id, b.name) for b in whole.blocks] == [
        (b.kind, b.text, b.id, b.name) for b in streamed.blocks
    ]
    assert whole.usage == streamed.usage and whole.finish == streamed.finish


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_response_round_trip_and_sdk(path):
    assembled = hub.assemble(decode(path.read_bytes())[0])
    body = R.encode_response(assembled)
    again = hub.assemble(R.decode_response(body))
    assert [(b.kind, b.text, b.id, b.fidelity) for b in again.blocks] == [
        (b.kind, b.text, b.id, b.fidelity) for b in assembled.blocks
    ]
    assert again.usage == assembled.usage and (again.error is None) == (assembled.error is None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        parsed = sdk_client(json.dumps(body).encode(), "application/json").responses.create(model="m", input="x")
    texts = "".join(b.text for b in assembled.blocks if b.kind == "text")
    assert parsed.output_text == texts and parsed.id == body["id"]


# ------------------------------------------------------------------------------------ requests


FULL_REQUEST = {
    "model": "gpt-5",
    "instructions": "Be brief.",
    "input": [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "hmm"}],
            "encrypted_content": "enc",
        },
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get", "arguments": '{"a":1}'},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "code", "input": "print(1)"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "later"}]},
    ],
    "tools": [
        {
            "type": "function",
            "name": "get",
            "parameters": {"type": "object", "properties": {}},
            "description": "d",
            "strict": True,
        },
        {"name": "code", "description": "free", "type": "custom", "format": {"type": "text"}},
        {"type": "web_search"},
    ],
    "tool_choice": {"type": "function", "name": "get"},
    "stream": True,
    "max_output_tokens": 100,
    "temperature": 0.5,
    "top_p": 0.9,
    "parallel_tool_calls": False,
    "text": {
        "verbosity": "low",
        "format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": True},
    },
    "reasoning": {"effort": "high", "summary": "auto"},
    "metadata": {"k": "v"},
    "store": False,
    "previous_response_id": "resp_0",
    "include": ["reasoning.encrypted_content"],
}


def test_request_decode():
    r = R.decode_request(FULL_REQUEST)
    assert r.messages[0].role == "system" and r.messages[0].text == "Be brief."
    user = r.messages[1]
    assert [type(p).__name__ for p in user.parts] == ["TextPart", "ImagePart", "ImagePart", "FilePart"]
    assert user.parts[1].data == "AAAA" and user.parts[1].media_type == "image/png" and user.parts[2].url
    thinking, call, custom = r.messages[2].parts
    assert thinking.fidelity == {NS: {"id": "rs_1", "encrypted_content": "enc"}} and thinking.text == "hmm"
    assert (call.id, call.name, call.arguments) == ("call_1", "get", '{"a":1}')
    assert json.loads(custom.arguments) == {"input": "print(1)"} and custom.fidelity[NS]["custom"]
    assert r.messages[3].role == "tool" and r.messages[3].parts[0].content[0].text == "42"
    assert r.messages[4].text == "ok" and isinstance(r.messages[4].parts[1], hub.NativePart)
    assert r.messages[5].role == "system"
    assert [t.name for t in r.tools] == ["get", "code"] and r.extensions[f"{NS}:hosted_tools"] == [
        {"type": "web_search"}
    ]
    assert r.tool_choice == hub.ToolChoice("tool", "get")
    assert (r.max_tokens, r.temperature, r.top_p, r.parallel_tool_calls, r.stream) == (100, 0.5, 0.9, False, True)
    assert r.response_format == {"type": "json_schema", "schema": {"type": "object"}, "name": "x", "strict": True}
    assert r.thinking == {"type": "enabled", "effort": "high"} and r.metadata == {"k": "v"}
    assert r.extensions[f"{NS}:previous_response_id"] == "resp_0" and r.extensions[f"{NS}:store"] is False


def test_request_round_trip():
    r = R.decode_request(FULL_REQUEST)
    body = R.encode_request(r)
    assert R.decode_request(body) == r
    assert body["instructions"] == "Be brief." and body["previous_response_id"] == "resp_0"
    assert body["input"][1] == FULL_REQUEST["input"][1]  # reasoning replayed with its encrypted content
    assert body["input"][3] == {"type": "custom_tool_call", "call_id": "call_2", "name": "code", "input": "print(1)"}
    assert "llmbridge" not in body


def test_request_from_other_dialects():
    r = hub.Request(
        model="m",
        stream=True,
        stop=["END"],
        seed=7,
        top_k=40,
        messages=[
            hub.Message("system", [hub.TextPart("sys")]),
            hub.Message("user", [hub.TextPart("hi"), hub.FilePart("audio/wav", "UklG")]),
            hub.Message(
                "assistant",
                [
                    hub.ThinkingPart("t", {"anthropic-messages": {"signature": "s"}}),
                    hub.ToolCallPart("toolu_1", "f", '{"q":1}'),
                ],
            ),
            hub.Message("tool", [hub.ToolResultPart("toolu_1", [hub.TextPart("done")], is_error=True)]),
        ],
        tools=[hub.Tool("f", "does f", {"type": "object", "properties": {"q": {"type": "integer"}}})],
        tool_choice=hub.ToolChoice("required"),
        thinking={"type": "enabled", "budget_tokens": 2048},
        response_format={"type": "json_object"},
        extensions={"anthropic-messages:cache_control": {"type": "ephemeral"}},
    )
    body = R.encode_request(r)
    assert body["instructions"] == "sys" and body["tool_choice"] == "required"
    assert body["reasoning"] == {"effort": "low"} and body["text"] == {"format": {"type": "json_object"}}
    assert body["input"][0]["content"][1] == {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}
    assert [i["type"] for i in body["input"]] == ["message", "function_call", "function_call_output"]
    assert body["llmbridge"] == {
        "top_k": 40,
        "stop": ["END"],
        "seed": 7,
        "extensions": {"anthropic-messages:cache_control": {"type": "ephemeral"}},
    }
    back = R.decode_request(body)
    assert (back.stop, back.seed, back.top_k) == (["END"], 7, 40)
    assert back.extensions == r.extensions and back.tools == r.tools


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"model": "m"}, "input"),
        ({"input": 5}, "input"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": ["x"]}, "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_video"}]}]}, "input[0].content[0].type"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ({"input": "x", "max_output_tokens": "many"}, "max_output_tokens"),
        ({"input": "x", "temperature": True}, "temperature"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
    ],
)
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(RequestError) as info:
        R.decode_request(body)
    assert info.value.field == field and str(info.value).startswith(field + ": ")


def test_endpoint():
    url, headers = R.endpoint(hub.Request(stream=True), base_url="https://api.openai.com/v1/", api_key="sk")
    assert url == "https://api.openai.com/v1/responses"
    assert headers["authorization"] == "Bearer sk" and headers["accept"] == "text/event-stream"


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("error", "exception"),
    [
        (hub.Error("bad", "invalid_request"), openai.BadRequestError),
        (hub.Error("who", "authentication"), openai.AuthenticationError),
        (hub.Error("slow", "rate_limit", code="insufficient_quota"), openai.RateLimitError),
        (hub.Error("oops", "api_error"), openai.InternalServerError),
    ],
)
def test_error_bodies(error, exception):
    status, body = R.encode_error(error)
    decoded = R.decode_error(status, json.dumps(body).encode())
    assert (decoded.message, decoded.type, decoded.status) == (error.message, error.type, status)
    if error.code:
        assert decoded.code == error.code
    client = sdk_client(json.dumps(body).encode(), "application/json", status)
    with pytest.raises(exception, match=error.message):
        client.responses.create(model="m", input="x")


def test_decode_error_without_json():
    error = R.decode_error(502, b"<html>bad gateway</html>")
    assert error.status == 502 and "bad gateway" in error.message


# ------------------------------------------------------------------------------------ any hub stream

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@st.composite
def hub_streams(draw) -> list[hub.Event]:
    """Valid hub streams as other dialects' decoders produce them: interleaved blocks of every
    kind, foreign fidelity and extensions, several choices, usage, finish, errors."""
    sequences = []
    for index in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["text", "text", "thinking", "tool_call", "native", "data"]))
        choice = draw(st.sampled_from([0, 0, 0, 1]))
        fidelity = draw(st.sampled_from([None, {"anthropic-messages": {"signature": "s"}}, {"gemini": {"x": 1}}]))
        if kind == "tool_call":
            args = draw(st.dictionaries(st.sampled_from("abc"), st.integers(), max_size=2))
            text = json.dumps(args) if args or draw(st.booleans()) else ""
            cut = draw(st.integers(0, len(text)))
            chunks = [c for c in (text[:cut], text[cut:]) if c]
            start = hub.BlockStart(index, kind, id=f"call_{index}", name="f", choice=choice)
        elif kind == "native":
            chunks = draw(st.lists(_TEXT, max_size=2))
            start = hub.BlockStart(
                index,
                kind,
                id=f"srv_{index}",
                name="web_search",
                choice=choice,
                extensions={"anthropic-messages": {"type": "server_tool_use"}},
            )
        else:
            chunks = draw(st.lists(_TEXT, max_size=3))
            start = hub.BlockStart(
                index,
                kind,
                choice=choice,
                mime_type="image/png" if kind == "data" else None,
                fidelity=fidelity if draw(st.booleans()) else None,
            )
        events = [start, *(hub.Delta(index, c) for c in chunks)]
        if draw(st.booleans()):
            events.append(hub.Extension("gemini", {"n": index}, index))
        events.append(hub.BlockStop(index, fidelity=fidelity if start.fidelity is None else None))
        sequences.append(events)
    body: list[hub.Event] = []
    while any(sequences):  # interleave, keeping each block's order
        pick = draw(st.sampled_from([s for s in sequences if s]))
        body.append(pick.pop(0))
    tail: list[hub.Event] = []
    if draw(st.booleans()):
        tail.append(hub.Usage(draw(st.integers(0, 99)), draw(st.integers(0, 99))))
    if draw(st.booleans()):
        tail.append(hub.Finish(draw(st.sampled_from(hub.FINISH_REASONS))))
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(body)))
        body, tail = body[:cut], [*tail, hub.Error("it broke", draw(st.sampled_from(hub.ERROR_TYPES)))]
    return [hub.ResponseStart("resp_h", "m"), *body, *tail, hub.ResponseEnd()]


@given(hub_streams())
def test_any_hub_stream_encodes_for_the_sdk_and_round_trips(events):
    assert hub.validate(events) == []
    body = encode_all(R.StreamEncoder(), events)
    again = roundtrip(events)
    want, got = foreign_content(events), foreign_content(again)
    if hub.assemble(events).error is not None:  # blocks left open by the error are closed on the wire
        want, got = want[1:], got[1:]
    assert got == want
    summary, expect = reader.read(body), expected(events, "openai-responses")
    if expect.error:
        assert summary.error.startswith("APIError: ")
        summary.error = expect.error
    assert summary == expect


def test_input_may_be_left_out_when_the_conversation_is_stored():
    r = R.decode_request({"model": "m", "previous_response_id": "resp_1"})
    assert r.messages == [] and R.encode_request(r) == {"model": "m", "input": [], "previous_response_id": "resp_1"}


def test_refusal_parts():
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "refusal", "refusal": ""}
    body = _sse(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_1",
            "part": part,
        },
        {"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "item_id": "msg_1", "delta": "I can"},
        {"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "item_id": "msg_1", "delta": "not."},
        {
            "type": "response.refusal.done",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_1",
            "refusal": "I cannot.",
        },
        {
            "type": "response.content_part.done",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_1",
            "part": {"type": "refusal", "refusal": "I cannot."},
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**item, "status": "completed", "content": [{"type": "refusal", "refusal": "I cannot."}]},
        },
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    )
    events, violations = decode(body)
    assert violations == []
    r = hub.assemble(events)
    assert r.blocks[0].text == "I cannot." and r.blocks[0].extensions == {NS: {"part_type": "refusal"}}
    assert r.finish.reason == "refusal"
    wire = encode_all(R.StreamEncoder(), events)
    assert b"response.refusal.delta" in wire
    assert content(roundtrip(events)) == content(events)
    with sdk_client(wire).responses.stream(model="m", input="x") as stream:
        final = stream.get_final_response()
    assert final.output[0].content[0].type == "refusal" and final.output[0].content[0].refusal == "I cannot."
    assert reader.read(wire).finish == "filter"


async def test_async_sdk_reads_the_stream():
    events = decode(load("openai-function-call"))[0]
    body = encode_all(R.StreamEncoder(), events)

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = openai.AsyncOpenAI(
        base_url="http://test/v1", api_key="x", http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    )
    async with client.responses.stream(model="m", input="x") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.function_call_arguments.delta"]
        final = await stream.get_final_response()
    call = final.output[0]
    assert call.type == "function_call" and "".join(deltas) == call.arguments
    assert json.loads(call.arguments) == json.loads(hub.assemble(events).blocks[0].text)
