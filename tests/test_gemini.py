"""The gemini dialect: corpus decoding, chunking independence, round trips, requests, responses,
errors, and google-genai reading what the encoder writes."""

from __future__ import annotations

import contextlib
import importlib
import json

import httpx
import pytest
from google.genai import errors as genai_errors
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import hub
from llmbridge.dialects import gemini
from llmbridge.dialects.base import decode_all, encode_all
from llmbridge.dialects.gemini._common import ArgsWriter, JSONArraySplitter
from llmbridge.errors import RequestError
from tests.conftest import CORPUS, corpus_files
from tests.readers import expected
from tests.readers import gemini as reader

FILES = corpus_files("gemini") + sorted((CORPUS / "other").glob("gemini*json-array-stream*.sse"))
IDS = [f.name for f in FILES]


def decode(data: bytes, chunks: list[bytes] | None = None) -> tuple[list[hub.Event], list[hub.Violation]]:
    d = gemini.StreamDecoder()
    out: list[hub.Event] = []
    for c in chunks if chunks is not None else [data]:
        out += d.feed(c)
    return out + d.close(), d.violations


def content(r: hub.Response) -> tuple:
    """What a round trip must keep."""
    blocks = [(b.kind, b.id, b.name, b.text, b.mime_type, b.fidelity, b.extensions, b.choice) for b in r.blocks]
    return blocks, r.finishes, r.usage, r.id, r.model, r.created, r.extensions, r.complete, r.error


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# --------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_corpus_decodes_clean(path):
    events, violations = decode(path.read_bytes())
    assert hub.validate(events) == []
    assert violations == []
    r = hub.assemble(events)
    assert r.complete and r.finish is not None
    assert r.id and r.model
    for b in r.blocks:
        assert b.closed
        if b.kind == "tool_call":
            assert isinstance(json.loads(b.text), dict)
            assert b.id


def _blocks(name: str) -> list[hub.Block]:
    events, _ = decode((CORPUS / "gemini" / name).read_bytes())
    return hub.assemble(events).blocks


def test_parallel_calls_get_unique_deterministic_ids():
    blocks = _blocks("gemini20-parallel-function-calls.sse")
    assert [(b.name, json.loads(b.text)) for b in blocks] == [
        ("get_current_temperature", {"city": "Paris"}),
        ("get_current_temperature", {"city": "London"}),
    ]
    assert len({b.id for b in blocks}) == 2
    assert [b.id for b in blocks] == [b.id for b in _blocks("gemini20-parallel-function-calls.sse")]


def test_streamed_partial_args_assemble_to_json():
    blocks = _blocks("vertex-streaming-function-call-args-nested.sse")
    [call] = blocks
    args = json.loads(call.text)
    assert args["recipe"]["name"] == "Lasagna"
    assert args["recipe"]["ingredients"][0] == {"amount": "16 oz", "name": "Lasagna noodles"}
    assert len(args["recipe"]["ingredients"]) == 10 and len(args["recipe"]["steps"]) == 10
    assert args["recipe"]["steps"][1].endswith("set aside.")
    assert call.fidelity[gemini.NAME]["thoughtSignature"].startswith("CmIB")
    calls = _blocks("vertex-gemini3flash-streaming-args-no-args-call.sse")
    assert [(b.kind, b.name, b.text) for b in calls[1:]] == [
        ("tool_call", "read_theme", "{}"),
        ("tool_call", "read_screen", '{"id":"A"}'),
        ("tool_call", "read_screen", '{"id":"B"}'),
        ("tool_call", "read_screen", '{"id":"C"}'),
    ]


def test_signatures_stay_on_their_blocks():
    [text] = _blocks("gemini3pro-text-then-empty-part-with-signature.sse")
    assert text.text.endswith("St**r**awbe**rr**y")
    assert text.fidelity[gemini.NAME]["thoughtSignature"].startswith("EpAICo0I")  # from the empty last part
    thinking, answer = _blocks("gemini25pro-thoughts.sse")
    assert thinking.kind == "thinking" and answer.kind == "text" and answer.fidelity
    [call] = _blocks("gemini3pro-function-call-thought-signature.sse")
    assert call.kind == "tool_call" and call.fidelity[gemini.NAME]["thoughtSignature"]


def test_native_parts_and_grounding():
    blocks = _blocks("gemini3flash-code-execution.sse")
    assert [(b.kind, b.name) for b in blocks[:2]] == [("native", "executableCode"), ("native", "codeExecutionResult")]
    assert blocks[0].extensions[gemini.NAME]["executableCode"]["language"] == "PYTHON"
    events, _ = decode((CORPUS / "gemini" / "gemini25pro-google-search-grounding.sse").read_bytes())
    r = hub.assemble(events)
    assert any("groundingMetadata" in a.data for a in r.annotations)


def test_usage_semantics():
    events, _ = decode((CORPUS / "gemini" / "gemini25flash-url-context.sse").read_bytes())
    u = hub.assemble(events).usage
    # prompt 32 + tool-use prompt 4610; candidates 25 + thoughts 37
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens) == (32 + 4610, 25 + 37, 37)
    assert u.total_tokens == u.input_tokens + u.output_tokens


# Any split of a capture decodes the same: tests/test_dialect_contract.py, for every dialect.


def test_byte_by_byte_json_array():
    data = (CORPUS / "other" / "gemini3-json-array-stream-text.sse").read_bytes()
    assert decode(data, [data[i : i + 1] for i in range(len(data))])[0] == decode(data)[0]


# --------------------------------------------------------------------------- framing helpers


@given(st.lists(st.text(alphabet='{}[]",\\\n\r ab€', max_size=8), min_size=1, max_size=5), st.data())
def test_json_array_splitter(strings, data):
    elements = [{"s": s, "n": [i, {"x": s}]} for i, s in enumerate(strings)]
    body = ("[" + ",\r\n".join(json.dumps(e, ensure_ascii=False) for e in elements) + "]").encode()
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=10))
    splitter = JSONArraySplitter()
    got = [json.loads(x) for c in split_at(body, cuts) for x in splitter.feed(c)]
    assert got == elements and splitter.closed and not splitter.pending


def test_args_writer_values_and_paths():
    w = ArgsWriter()
    parts = [
        w.add({"jsonPath": "$.a", "stringValue": 'x"', "willContinue": True}),
        w.add({"jsonPath": "$.a", "stringValue": "y"}),
        w.add({"jsonPath": "$.b[0].c", "numberValue": 1.5}),
        w.add({"jsonPath": "$.b[1].c", "boolValue": True}),
        w.add({"jsonPath": "$['odd key']", "nullValue": "NULL_VALUE"}),
        w.finish(),
    ]
    assert json.loads("".join(parts)) == {"a": 'x"y', "b": [{"c": 1.5}, {"c": True}], "odd key": None}
    assert ArgsWriter().finish() == "{}"
    assert ArgsWriter().add({"jsonPath": "nope"}) is None


# --------------------------------------------------------------------------- truncation and errors


def test_truncated_stream_is_an_error():
    data = (CORPUS / "gemini" / "gemini20-text.sse").read_bytes()
    cut = data[: data.rfind(b"data:")]  # drop the chunk with finishReason
    events, violations = decode(cut)
    assert hub.validate(events) == []
    assert isinstance(events[-2], hub.Error) and events[-2].type == "incomplete_stream"
    assert [v.rule for v in violations] == ["truncated"]
    array = (CORPUS / "other" / "gemini3-json-array-stream-text.sse").read_bytes()
    events, violations = decode(array[:-3])
    assert events[-2].type == "incomplete_stream" and "truncated" in [v.rule for v in violations]
    events, violations = decode(array.rstrip()[:-1])  # every element, but no closing bracket
    assert events[-2].type == "incomplete_stream" and "array-unclosed" in [v.rule for v in violations]


def test_error_chunk_and_malformed_json():
    body = (
        b'data: {"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"}}],"responseId":"r1"}\r\n\r\n'
        b"data: {not json}\r\n\r\n"
        b'data: {"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}\r\n\r\n'
        b'data: {"candidates":[]}\r\n\r\n'
    )
    events, violations = decode(body)
    assert hub.validate(events) == []
    err = events[-2]
    assert (err.type, err.status, err.code) == ("overloaded", 503, "UNAVAILABLE")
    assert err.message == "The model is overloaded."
    assert [v.rule for v in violations] == ["json", "after-terminal"]
    assert [v.event for v in violations] == [1, 3]


def test_prompt_blocked_is_complete():
    body = b'data: {"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":5}}\n\n'
    events, violations = decode(body)
    r = hub.assemble(events)
    assert violations == [] and r.complete
    assert (r.finish.reason, r.finish.raw) == ("content_filter", "SAFETY")


@pytest.mark.parametrize(
    ("word", "reason"),
    [
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "error"),
        ("LANGUAGE", "other"),
        ("OTHER", "other"),
    ],
)
def test_finish_reasons(word, reason):
    body = f'data: {{"candidates":[{{"content":{{"parts":[{{"text":"x"}}]}},"finishReason":"{word}"}}]}}\n\n'
    r = hub.assemble(decode(body.encode())[0])
    assert (r.finish.reason, r.finish.raw) == (reason, word)


def test_after_finish_violation():
    body = (
        b'data: {"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}]}\n\n'
        b'data: {"candidates":[{"content":{"parts":[{"text":"b"}]}}]}\n\n'
    )
    events, violations = decode(body)
    assert [v.rule for v in violations] == ["after-finish"] and hub.validate(events) == []


# --------------------------------------------------------------------------- encoder


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_round_trip_and_sdk(path):
    events, _ = decode(path.read_bytes())
    body = encode_all(gemini.StreamEncoder(), events)
    again, violations = decode(body)
    assert violations == []
    assert content(hub.assemble(again)) == content(hub.assemble(events))
    assert reader.read(body) == expected(events, "gemini")


def _other_dialect_files():
    out = []
    for name in ("openai-chat", "openai-responses", "anthropic-messages"):
        module = name.replace("-", "_")
        try:
            importlib.import_module(f"llmbridge.dialects.{module}").StreamDecoder  # noqa: B018
            files = corpus_files(name)
        except (ImportError, AttributeError, RuntimeError, OSError):
            continue
        out += [pytest.param(name, f, id=f"{name}/{f.name}") for f in files]
    return out


SDK_MAX_CHUNKS = 2000  # google-genai parses each chunk with pydantic; very long streams stay in the matrix


def _summary(b: hub.Block) -> tuple:
    text = b.text
    if b.kind == "tool_call":
        with contextlib.suppress(ValueError):
            text = json.loads(text or "{}")  # Gemini carries args as an object: spacing is not kept
    return b.kind, text, b.name, b.fidelity


@pytest.mark.parametrize(("dialect", "path"), _other_dialect_files())
def test_other_dialects_through_gemini(dialect, path):
    """decoder(X) -> gemini -> google-genai, and -> gemini decoder: the hub content survives."""
    from llmbridge.dialects import get

    events = decode_all(get(dialect).StreamDecoder(), path.read_bytes())
    body = encode_all(gemini.StreamEncoder(), events)
    again, _ = decode(body)
    assert hub.validate(again) == []
    a, b = hub.assemble(events), hub.assemble(again)
    keep = [_summary(x) for x in a.blocks]
    assert [_summary(x) for x in b.blocks] == keep
    assert [x.id for x in b.blocks if x.kind == "tool_call"] == [x.id for x in a.blocks if x.kind == "tool_call"]
    assert b.finishes == a.finishes and b.usage == a.usage
    assert (b.error is None) == (a.error is None) and (a.error is None or b.error.type == a.error.type)
    if body.count(b"\n\ndata: ") > SDK_MAX_CHUNKS:
        return  # long streams: the hub check above; the SDK path is the lead's matrix (test_matrix.py)
    got, want = reader.read(body), expected(events, "gemini")
    if path.stem == "openai-image-generation-partial-image":  # its fixture elides the image's base64 ("...")
        assert "base64" in (got.error or "")  # which google-genai rightly refuses in an inlineData part
        return
    if a.error is not None:
        assert got.error and got.error.split(":")[0] in ("ClientError", "ServerError", "APIError")
        got.error = want.error
    bad_args = [i for i, (_, args) in enumerate(want.tool_calls) if args is None]
    for i in bad_args:  # Gemini args must be an object; the raw text rides in our extension key
        assert got.tool_calls[i][1] == {}
        got.tool_calls[i] = want.tool_calls[i]
    assert got == want


def _stream(*events: hub.Event) -> list[hub.Event]:
    return [
        hub.ResponseStart("resp_1", "m", 1_700_000_000, "req-9", {"openai-chat": {"system_fingerprint": "fp"}}),
        *events,
        hub.ResponseEnd("req-9"),
    ]


SYNTHETIC = {
    "interleaved-calls-and-choices": _stream(
        hub.BlockStart(0, "tool_call", "call_a", "f"),
        hub.BlockStart(1, "tool_call", "call_b", "g"),
        hub.Delta(0, '{"x":'),
        hub.Delta(1, "{}"),
        hub.Delta(0, "1}"),
        hub.BlockStop(1),
        hub.BlockStop(0),
        hub.BlockStart(2, "text", choice=1),
        hub.Delta(2, "second choice"),
        hub.BlockStop(2),
        hub.Finish("tool_use", 0, "tool_calls"),
        hub.Finish("stop_sequence", 1, "stop", "END"),
        hub.Usage(10, 5, cache_read_tokens=2, cache_write_tokens=3, reasoning_tokens=1),
    ),
    "foreign-thinking-and-native": _stream(
        hub.BlockStart(0, "thinking"),
        hub.Delta(0, "hmm"),
        hub.BlockStop(0, {"anthropic-messages": {"signature": "sig=="}}),
        hub.BlockStart(1, "thinking", fidelity={"anthropic-messages": {"redacted_data": "xyz"}}),
        hub.BlockStop(1),
        hub.BlockStart(
            2,
            "native",
            "srvtoolu_1",
            "web_search",
            extensions={"anthropic-messages": {"type": "server_tool_use", "id": "srvtoolu_1"}},
        ),
        hub.Delta(2, '{"query":"q"}'),
        hub.BlockStop(2),
        hub.BlockStart(3, "text"),
        hub.Delta(3, "a"),
        hub.BlockStop(3),
        hub.BlockStart(4, "text", extensions={"anthropic-messages": {"citations": []}}),
        hub.Delta(4, "b"),
        hub.Extension("anthropic-messages", {"type": "citation"}, 4),
        hub.BlockStop(4),
        hub.BlockStart(5, "data", mime_type="image/png"),
        hub.Delta(5, "iVBO"),
        hub.Delta(5, "Rw=="),
        hub.BlockStop(5),
        hub.Finish("refusal", 0, "refusal"),
    ),
    "error-mid-stream": _stream(
        hub.BlockStart(0, "text"),
        hub.Delta(0, "partial"),
        hub.Error("upstream went away", "incomplete_stream"),
    ),
}


@pytest.mark.parametrize("name", list(SYNTHETIC))
def test_synthetic_streams(name):
    events = SYNTHETIC[name]
    assert hub.validate(events) == []
    body = encode_all(gemini.StreamEncoder(), events)
    again, violations = decode(body)
    assert hub.validate(again) == []
    a, b = hub.assemble(events), hub.assemble(again)
    if a.error is None:
        assert violations == []
        assert content(b) == content(a)
        assert [[(x.namespace, x.data) for x in blk.annotations] for blk in b.blocks] == [
            [(x.namespace, x.data) for x in blk.annotations] for blk in a.blocks
        ]
    else:
        assert b.error.type == a.error.type and b.blocks[0].text == "partial"
    got = reader.read(body)
    want = expected(events, "gemini")
    if a.error is not None:
        assert got.error.startswith("ServerError: 502")
        got.error = want.error
    assert got == want


def test_error_right_after_start_raises_in_sdk():
    events = [hub.ResponseStart(), hub.Error("slow down", "rate_limit", status=429), hub.ResponseEnd()]
    body = encode_all(gemini.StreamEncoder(), events)
    assert body.startswith(b'data: {"error":{"code":429,')
    with pytest.raises(genai_errors.ClientError) as info:
        list(reader.client_for(body).models.generate_content_stream(model="m", contents="hi"))
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"


# --------------------------------------------------------------------------- non-streaming


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_response_round_trip(path):
    events, _ = decode(path.read_bytes())
    r = hub.assemble(events)
    body = gemini.encode_response(r)
    back = hub.assemble(gemini.decode_response(json.loads(json.dumps(body))))
    assert [(b.kind, b.name, b.text) for b in back.blocks] == [
        (b.kind, b.name, b.text) for b in r.blocks if b.text or b.kind != "text" or b.fidelity
    ]
    assert back.finishes == r.finishes and back.usage == r.usage and back.complete
    sdk = reader.client_for(json.dumps(body).encode(), "application/json")
    resp = sdk.models.generate_content(model="m", contents="hi")
    assert (resp.text or "") == "".join(b.text for b in r.blocks if b.kind == "text")


def test_decode_response_without_finish_is_incomplete():
    events = gemini.decode_response({"candidates": [{"content": {"parts": [{"text": "x"}]}}]})
    assert hub.validate(events) == [] and events[-2].type == "incomplete_stream"


# --------------------------------------------------------------------------- requests

REQUEST = {
    "contents": [
        {
            "role": "user",
            "parts": [
                {"text": "Weather in Paris?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/doc.pdf"}},
            ],
        },
        {
            "role": "model",
            "parts": [
                {"text": "thinking...", "thought": True, "thoughtSignature": "c2ln"},
                {
                    "functionCall": {"name": "weather", "args": {"city": "Paris"}, "id": "c1"},
                    "thoughtSignature": "c2lnMg==",
                },
                {"functionCall": {"name": "time", "args": {}, "id": "c2"}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "weather", "response": {"temp": 21}, "id": "c1"}},
                {"functionResponse": {"name": "time", "response": {"output": "noon"}, "id": "c2"}},
            ],
        },
        {"role": "model", "parts": [{"executableCode": {"language": "PYTHON", "code": "print(1)"}}]},
    ],
    "systemInstruction": {"parts": [{"text": "Be brief."}]},
    "tools": [
        {
            "functionDeclarations": [
                {
                    "name": "weather",
                    "description": "Weather",
                    "parametersJsonSchema": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
                {"name": "time", "parameters": {"type": "object", "properties": {}}},
            ]
        },
        {"googleSearch": {}},
    ],
    "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}},
    "generationConfig": {
        "temperature": 0.5,
        "topP": 0.9,
        "topK": 40,
        "maxOutputTokens": 256,
        "stopSequences": ["END"],
        "seed": 7,
        "candidateCount": 1,
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object"},
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
        "responseModalities": ["TEXT"],
    },
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
}


def test_request_decode():
    req = gemini.decode_request(REQUEST, model="gemini-2.5-flash")
    assert req.model == "gemini-2.5-flash"
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert req.system == "Be brief."
    user = req.messages[1].parts
    assert isinstance(user[1], hub.ImagePart) and isinstance(user[2], hub.FilePart) and user[2].url == "gs://b/doc.pdf"
    think, call, _ = req.messages[2].parts
    assert isinstance(think, hub.ThinkingPart) and think.fidelity == {"gemini": {"thoughtSignature": "c2ln"}}
    assert (call.id, call.name, json.loads(call.arguments)) == ("c1", "weather", {"city": "Paris"})
    r1, r2 = req.messages[3].parts
    assert (r1.tool_call_id, r1.name, r1.content[0].text) == ("c1", "weather", '{"temp": 21}')
    assert r2.content[0].text == "noon"
    assert isinstance(req.messages[4].parts[0], hub.NativePart)
    assert [t.name for t in req.tools] == ["weather", "time"]
    assert req.tool_choice == hub.ToolChoice("tool", "weather")
    assert (req.temperature, req.top_p, req.top_k, req.max_tokens, req.stop, req.seed, req.n) == (
        0.5,
        0.9,
        40,
        256,
        ["END"],
        7,
        1,
    )
    assert req.response_format == {"type": "json_schema", "schema": {"type": "object"}}
    assert req.thinking == {"type": "enabled", "budget_tokens": 1024}
    assert req.extensions["gemini:safetySettings"] == REQUEST["safetySettings"]
    assert req.extensions["gemini:tools"] == [{"googleSearch": {}}]


def test_request_round_trip():
    req = gemini.decode_request(REQUEST, model="gemini-2.5-flash")
    assert gemini.encode_request(req) == REQUEST


def test_request_snake_case_and_name_pairing():
    body = {
        "contents": [
            {"role": "model", "parts": [{"function_call": {"name": "f", "args": {"a_b": 1}}}]},
            {"role": "user", "parts": [{"function_response": {"name": "f", "response": {"x": 1}}}]},
        ],
        "system_instruction": {"parts": [{"text": "s"}]},
        "generation_config": {"max_output_tokens": 5},
    }
    req = gemini.decode_request(body)
    call = req.messages[1].parts[0]
    assert json.loads(call.arguments) == {"a_b": 1}  # user data keeps its keys
    assert req.messages[2].parts[0].tool_call_id == call.id and req.max_tokens == 5


def test_request_from_other_dialect_hub():
    req = hub.Request(
        model="m",
        messages=[
            hub.Message("system", [hub.TextPart("sys")]),
            hub.Message("user", [hub.TextPart("hi"), hub.ImagePart(url="data:image/jpeg;base64,/9j/")]),
            hub.Message(
                "assistant",
                [
                    hub.ThinkingPart("t", {"anthropic-messages": {"signature": "s"}}),
                    hub.ToolCallPart("toolu_1", "f", '{"q": 1}'),
                ],
            ),
            hub.Message("tool", [hub.ToolResultPart("toolu_1", [hub.TextPart("plain")])]),
            hub.Message("tool", [hub.ToolResultPart("toolu_1", [hub.TextPart("bad")], is_error=True)]),
        ],
        tools=[hub.Tool("f", "does f", {"type": "object", "properties": {"q": {"type": "integer"}}})],
        tool_choice=hub.ToolChoice("required"),
        thinking={"type": "enabled", "budget_tokens": 2000},
        response_format={"type": "json_object"},
        stream=True,
    )
    body = gemini.encode_request(req)
    assert body["systemInstruction"] == {"parts": [{"text": "sys"}]}
    assert body["contents"][0]["parts"][1] == {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/"}}
    assert body["contents"][1]["parts"][1] == {"functionCall": {"name": "f", "args": {"q": 1}, "id": "toolu_1"}}
    responses = body["contents"][2]["parts"]
    assert [p["functionResponse"]["response"] for p in responses] == [{"output": "plain"}, {"error": "bad"}]
    assert all(p["functionResponse"]["name"] == "f" for p in responses)
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 2000, "includeThoughts": True}
    assert body["generationConfig"]["responseMimeType"] == "application/json"
    assert body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["properties"]["q"] == {"type": "integer"}
    url, headers = gemini.endpoint(req, base_url="https://generativelanguage.googleapis.com", api_key="k")
    assert url == "https://generativelanguage.googleapis.com/v1beta/models/m:streamGenerateContent?alt=sse"
    assert headers["x-goog-api-key"] == "k"
    req.stream = False
    assert (
        gemini.endpoint(req, base_url="http://h/v1beta/", api_key=None)[0] == "http://h/v1beta/models/m:generateContent"
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], None),
        ({}, "contents"),
        ({"contents": "hi"}, "contents"),
        ({"contents": [{"role": "user"}]}, "contents[0].parts"),
        ({"contents": [{"role": "bot", "parts": []}]}, "contents[0].role"),
        ({"contents": [{"parts": [{"text": 1}]}]}, "contents[0].parts[0].text"),
        ({"contents": [{"parts": ["x"]}]}, "contents[0].parts[0]"),
        ({"contents": [{"parts": [{"functionCall": {"args": {}}}]}]}, "contents[0].parts[0].functionCall"),
        ({"contents": [], "tools": {}}, "tools"),
        ({"contents": [], "generationConfig": {"temperature": "hot"}}, "generationConfig.temperature"),
        (
            {"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
            "toolConfig.functionCallingConfig.mode",
        ),
    ],
)
def test_bad_requests(body, field):
    with pytest.raises(RequestError) as info:
        gemini.decode_request(body)
    assert info.value.field == field


def test_encode_request_needs_tool_name():
    req = hub.Request(messages=[hub.Message("tool", [hub.ToolResultPart("nope", [hub.TextPart("x")])])])
    with pytest.raises(RequestError) as info:
        gemini.encode_request(req)
    assert info.value.field == "messages[0].parts[0]"


# --------------------------------------------------------------------------- errors


def test_error_codecs():
    status, body = gemini.encode_error(hub.Error("no such model", "not_found"))
    assert (status, body) == (404, {"error": {"code": 404, "message": "no such model", "status": "NOT_FOUND"}})
    err = gemini.decode_error(404, json.dumps(body).encode())
    assert (err.type, err.status, err.message, err.code) == ("not_found", 404, "no such model", "NOT_FOUND")
    array = json.dumps([{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}]).encode()
    assert gemini.decode_error(429, array).type == "rate_limit"
    assert gemini.decode_error(502, b"<html>bad gateway</html>").message == "<html>bad gateway</html>"
    status, body = gemini.encode_error(hub.Error("cut", "incomplete_stream"))
    assert status == 502 and gemini.decode_error(status, json.dumps(body).encode()).type == "incomplete_stream"


def test_sdk_raises_on_http_error():
    status, body = gemini.encode_error(hub.Error("bad key", "authentication"))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body)

    from google import genai
    from google.genai import types

    client = genai.Client(
        api_key="x",
        http_options=types.HttpOptions(
            base_url="http://g.test", httpx_client=httpx.Client(transport=httpx.MockTransport(handler))
        ),
    )
    with pytest.raises(genai_errors.ClientError) as info:
        client.models.generate_content(model="m", contents="hi")
    assert info.value.code == 401


# --------------------------------------------------------------------------- any hub stream

_SIG = st.sampled_from([None, {"gemini": {"thoughtSignature": "c2ln"}}, {"anthropic-messages": {"signature": "a"}}])


@st.composite
def hub_streams(draw) -> list[hub.Event]:
    """Valid hub streams: up to five blocks of any kind, their events interleaved at random."""
    kinds = draw(st.lists(st.sampled_from(["text", "thinking", "tool_call", "data", "native"]), max_size=5))
    scripts = []
    for i, kind in enumerate(kinds):
        start = hub.BlockStart(i, kind, choice=draw(st.sampled_from([0, 0, 1])), fidelity=draw(_SIG))
        if kind == "tool_call":
            start.id, start.name = f"call_{i}", "f"
            deltas = ['{"a":', f"{i}}}"]
        elif kind == "data":
            start.mime_type, deltas = "image/png", ["iVBO", "Rw=="]
        elif kind == "native":
            start.name, start.extensions = "web_search", {"openai-responses": {"type": "web_search_call"}}
            deltas = draw(st.lists(st.sampled_from(['{"q":1}', "x"]), max_size=2))
        else:
            deltas = draw(st.lists(st.text(min_size=1, max_size=5), max_size=3))
        stop = hub.BlockStop(i, draw(_SIG) if kind in ("text", "thinking") else None)
        scripts.append([start, *(hub.Delta(i, d) for d in deltas), stop])
    events: list[hub.Event] = [hub.ResponseStart("r", "m")]
    while any(scripts):
        script = draw(st.sampled_from([s for s in scripts if s]))
        events.append(script.pop(0))
    if draw(st.booleans()):
        events.append(
            hub.Extension("openai-chat", {"logprobs": [1]}, draw(st.sampled_from([None, *range(len(kinds))])))
        )
    events += [hub.Finish(draw(st.sampled_from(["end_turn", "tool_use", "max_tokens", "refusal"])))]
    if any(e.choice for e in events if type(e) is hub.BlockStart):
        events.append(hub.Finish("stop_sequence", 1, stop_sequence="END"))
    events.append(hub.Usage(3, 4))
    if draw(st.integers(0, 4)) == 0:  # an error somewhere after the start
        cut = draw(st.integers(1, len(events)))
        events = [*events[:cut], hub.Error("boom", draw(st.sampled_from(hub.ERROR_TYPES)))]
    return [*events, hub.ResponseEnd()]


def _block(b: hub.Block) -> tuple:
    return (
        b.kind,
        b.id,
        b.name,
        b.text,
        b.mime_type,
        b.fidelity,
        b.extensions,
        b.choice,
        [(x.namespace, x.data) for x in b.annotations],
    )


@given(hub_streams())
def test_any_hub_stream_round_trips(events):
    assert hub.validate(events) == []
    body = encode_all(gemini.StreamEncoder(), events)
    again, violations = decode(body)
    assert violations == [] and hub.validate(again) == []
    a, b = hub.assemble(events), hub.assemble(again)
    if a.error is not None:  # what was complete before the error is kept; the error type too
        assert b.error.type == a.error.type and not b.complete
        assert b.finishes.keys() <= a.finishes.keys()
        return
    by_choice = lambda r: sorted(r.blocks, key=lambda blk: blk.choice)  # noqa: E731 (choices may interleave)
    assert [_block(x) for x in by_choice(b)] == [_block(x) for x in by_choice(a)]
    assert {c: f.reason for c, f in b.finishes.items()} == {c: f.reason for c, f in a.finishes.items()}
    assert b.usage == a.usage and b.complete
    assert [(x.namespace, x.data) for x in b.annotations] == [(x.namespace, x.data) for x in a.annotations]


@given(hub_streams())
def test_any_hub_response_round_trips(events):
    a = hub.assemble(events)
    b = hub.assemble(gemini.decode_response(json.loads(json.dumps(gemini.encode_response(a)))))
    if a.error is not None:
        return  # a non-streamed body has no error form: the gateway answers with encode_error instead
    by_choice = lambda r: sorted(r.blocks, key=lambda blk: blk.choice)  # noqa: E731
    assert [_block(x) for x in by_choice(b)] == [_block(x) for x in by_choice(a)]
    assert {c: f.reason for c, f in b.finishes.items()} == {c: f.reason for c, f in a.finishes.items()}
    assert b.usage == a.usage


def test_request_built_by_the_sdk_decodes():
    """google-genai's own request body (it mixes camelCase and snake_case keys) reads back."""
    from google import genai
    from google.genai import types

    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["body"] = json.loads(request.content)
        return httpx.Response(
            200, json={"candidates": [{"content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}]}
        )

    http = httpx.Client(transport=httpx.MockTransport(handler))
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url="http://g.test", httpx_client=http))
    config = types.GenerateContentConfig(
        system_instruction="Be brief.",
        max_output_tokens=100,
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name="f", parameters_json_schema={"type": "object", "properties": {"a": {"type": "string"}}}
                    )
                ]
            )
        ],
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="NONE")),
        thinking_config=types.ThinkingConfig(thinking_budget=512, include_thoughts=True),
    )
    contents = [
        types.Content(role="user", parts=[types.Part(text="hi")]),
        types.Content(
            role="model",
            parts=[types.Part(function_call=types.FunctionCall(name="f", args={"a": "b"}), thought_signature=b"sig")],
        ),
        types.Content(
            role="user",
            parts=[types.Part(function_response=types.FunctionResponse(name="f", response={"output": "r"}))],
        ),
    ]
    assert client.models.generate_content(model="m", contents=contents, config=config).text == "ok"
    req = gemini.decode_request(seen["body"], model="m")
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    call, result = req.messages[2].parts[0], req.messages[3].parts[0]
    assert (call.name, json.loads(call.arguments), call.fidelity) == (
        "f",
        {"a": "b"},
        {"gemini": {"thoughtSignature": "c2ln", "synthetic_id": True}},  # the SDK sent no call id
    )
    assert (result.tool_call_id, result.name, result.content[0].text) == (call.id, "f", "r")
    assert req.tools[0].parameters["properties"] == {"a": {"type": "string"}}
    assert (req.tool_choice, req.thinking, req.max_tokens) == (
        hub.ToolChoice("none"),
        {"type": "enabled", "budget_tokens": 512},
        100,
    )


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)
_KEYS = [
    "candidates",
    "content",
    "parts",
    "text",
    "thought",
    "thoughtSignature",
    "functionCall",
    "name",
    "args",
    "partialArgs",
    "jsonPath",
    "willContinue",
    "finishReason",
    "index",
    "usageMetadata",
    "promptTokenCount",
    "error",
    "llmbridge",
    "start",
    "stop",
    "native",
    "annotations",
    "block",
    "inlineData",
    "promptFeedback",
]
_GEMINISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from(["", "x", "STOP", "$.a", "$.a[0]"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(_GEMINISH | _JSON, max_size=6))
def test_decoder_never_raises(chunks):
    """Any JSON in any Gemini-ish shape: the decoder reports, it does not raise, and its hub stream is valid."""
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    events, _ = decode(body)
    assert hub.validate(events) == []
    events = gemini.decode_response(chunks)
    assert hub.validate(events) == []


def test_gemini3_gets_the_signature_sentinel_for_foreign_calls():
    msgs = [
        hub.Message("user", [hub.TextPart("hi")]),
        hub.Message("assistant", [hub.ToolCallPart("toolu_1", "f", "{}"), hub.ToolCallPart("toolu_2", "f", "{}")]),
        hub.Message("tool", [hub.ToolResultPart("toolu_1", [hub.TextPart("a")]), hub.ToolResultPart("toolu_2", [])]),
    ]
    parts = gemini.encode_request(hub.Request(model="gemini-3-pro-preview", messages=msgs))["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts] == ["skip_thought_signature_validator", None]
    parts = gemini.encode_request(hub.Request(model="gemini-2.5-flash", messages=msgs))["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts] == [None, None]
    msgs[1].parts[1].fidelity = {"gemini": {"thoughtSignature": "real"}}
    parts = gemini.encode_request(hub.Request(model="gemini-3-pro-preview", messages=msgs))["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts] == [None, "real"]  # a real one is never overridden
