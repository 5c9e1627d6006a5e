"""The openai-chat dialect: corpus decoding, chunking, round trips, requests, the official SDK."""

from __future__ import annotations

import itertools
import json

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import hub
from llmbridge.dialects import get
from llmbridge.dialects import openai_chat as oc
from llmbridge.dialects.base import decode_all, encode_all
from llmbridge.errors import RequestError
from tests.conftest import corpus_files
from tests.readers import expected
from tests.readers import openai_chat as reader

FILES = corpus_files("openai-chat")
BY_NAME = {f.stem: f for f in FILES}


def decode(data: bytes) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = oc.StreamDecoder()
    events = decode_all(decoder, data)
    return events, decoder.violations


def encode(events: list[hub.Event], **options) -> bytes:
    return encode_all(oc.StreamEncoder(**options), events)


def content(response: hub.Response) -> list[tuple]:
    """What a round trip must keep: blocks with their text, metadata and merged fidelity."""
    return [(b.choice, b.kind, b.id, b.name, b.text, b.fidelity) for b in response.blocks]


# --------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_corpus_decodes_clean(path):
    events, violations = decode(path.read_bytes())
    assert hub.validate(events) == []
    assert violations == []
    assert type(events[0]) is hub.ResponseStart and type(events[-1]) is hub.ResponseEnd
    r = hub.assemble(events)
    assert r.blocks, "every corpus stream has content"
    for block in r.blocks:
        if block.kind == "tool_call":
            assert block.id and block.name
            json.loads(block.text or "{}")


# file -> (block kinds of choice 0, finish reason, input tokens, output tokens, error type)
FACTS = {
    "alibaba-qwen3-max-tool-call": (["tool_call"], "tool_use", 295, 22, None),
    "deepseek-reasoner-reasoning-then-tool-call": (["thinking", "tool_call"], "tool_use", 339, 83, None),
    "groq-compound-web-search": (["thinking", "native", "thinking", "text"], "end_turn", 5003, 359, None),
    "groq-gpt-oss-error-event-after-text": (["thinking", "text"], None, None, None, "invalid_request"),
    "hf-together-deepseek-r1-think-tags": (["thinking", "text"], "end_turn", 10, 955, None),
    "mistral-magistral-thinking-content-array": (["thinking", "text"], "end_turn", 10, 232, None),
    "openai-gpt4o-max-tokens-length": (["text"], "max_tokens", 79, 1, None),
    "openai-gpt4o-parallel-tools-multiple": (["tool_call", "tool_call"], "tool_use", 149, 60, None),
    "openai-gpt4o-refusal": (["text"], "refusal", 79, 11, None),
    "openrouter-claude-reasoning-details": (["thinking", "text"], "end_turn", 43, 36, None),
    "openrouter-minimax-error-midstream": (["thinking"], "max_tokens", 43, 10, "invalid_request"),
    "openrouter-novita-kimi-k2-tool-call-repeated-id": (["tool_call"], None, 57, 17, None),
    "openrouter-o3-reasoning-encrypted": (["thinking", "text"], "end_turn", 9, 104, None),
    "xai-grok3-mini-reasoning-tool-call": (["thinking", "tool_call"], "tool_use", 291, 222, None),
    "snowflake-cortex-claude-thinking": (["thinking", "text"], None, 45, 73, None),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_corpus_facts(name):
    kinds, finish, input_tokens, output_tokens, error = FACTS[name]
    r = hub.assemble(decode(BY_NAME[name].read_bytes())[0])
    assert [b.kind for b in r.choice_blocks(0)] == kinds
    assert (r.finish.reason if r.finish else None) == finish
    u = r.usage or hub.Usage()
    assert (u.input_tokens, u.output_tokens) == (input_tokens, output_tokens)
    assert (r.error.type if r.error else None) == error
    assert r.complete == (error is None)


def test_think_tags_split_into_thinking():
    r = hub.assemble(decode(BY_NAME["hf-together-deepseek-r1-think-tags"].read_bytes())[0])
    thinking, text = r.blocks
    assert thinking.text.startswith("\nOkay") and "<think>" not in thinking.text and "</think>" not in thinking.text
    assert "</think>" not in text.text and text.text.strip()


@given(st.lists(st.integers(1, 6), min_size=1, max_size=40), st.sampled_from(["", "  ", "\n"]))
def test_think_tags_any_split(sizes, lead):
    """Tags split at any point across deltas decode to the same blocks."""
    source = lead + "<think>\nI ponder </thi nk> things.</think>\n\nThe answer."
    pieces, at = [], 0
    for size in sizes:
        if at >= len(source):
            break
        pieces.append(source[at : at + size])
        at += size
    pieces.append(source[at:])
    chunks = [{"id": "x", "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces if p]
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    r = hub.assemble(decode(body)[0])
    assert [(b.kind, b.text) for b in r.blocks] == [
        ("thinking", "\nI ponder </thi nk> things."),
        ("text", "\n\nThe answer."),
    ]


def test_text_that_only_looks_like_a_tag_stays_text():
    body = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"<thin"}}]}\n\n'
    body += b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"g> is html"}}]}\n\ndata: [DONE]\n\n'
    r = hub.assemble(decode(body)[0])
    assert [(b.kind, b.text) for b in r.blocks] == [("text", "<thing> is html")]


def test_reasoning_details_fidelity():
    r = hub.assemble(decode(BY_NAME["openrouter-claude-reasoning-details"].read_bytes())[0])
    fid = r.blocks[0].fidelity
    assert fid["openai-chat"]["format"] == "anthropic-claude-v1"
    assert fid["anthropic-messages"]["signature"].startswith("Et0BCkgI")
    r = hub.assemble(decode(BY_NAME["openrouter-o3-reasoning-encrypted"].read_bytes())[0])
    thinking = r.blocks[0]
    assert thinking.kind == "thinking" and thinking.text == ""
    assert thinking.fidelity["openai-responses"]["id"].startswith("rs_")
    assert thinking.fidelity["openai-chat"]["type"] == "reasoning.encrypted"


def test_n_choices():
    r = hub.assemble(decode(BY_NAME["openai-gpt4o-n3-multiple-choices"].read_bytes())[0])
    assert sorted(r.finishes) == [0, 1, 2]
    assert [b.choice for b in r.blocks] == [0, 1, 2]
    assert all(b.text.startswith('{"') for b in r.blocks)


def test_extensions_kept():
    r = hub.assemble(decode(BY_NAME["perplexity-sonar-citations"].read_bytes())[0])
    assert [list(a.data) for a in r.annotations] == [["citations"]]  # once, though every chunk repeats it
    r = hub.assemble(decode(BY_NAME["openrouter-web-search-annotations"].read_bytes())[0])
    assert sum("annotations" in a.data for a in r.annotations + r.blocks[0].annotations) == 5
    r = hub.assemble(decode(BY_NAME["azure-gpt4o-mini-tool-call"].read_bytes())[0])
    assert "prompt_filter_results" in r.annotations[0].data and r.id.startswith("chatcmpl-")
    r = hub.assemble(decode(BY_NAME["openai-gpt4o-content-logprobs"].read_bytes())[0])
    assert [a.data["logprobs"]["content"][0]["token"] for a in r.blocks[0].annotations] == ["Foo", "!"]
    r = hub.assemble(decode(BY_NAME["openai-gpt5-moderation-trailing-chunk"].read_bytes())[0])
    assert "moderation" in r.annotations[0].data
    r = hub.assemble(decode(BY_NAME["groq-compound-web-search"].read_bytes())[0])
    native = next(b for b in r.blocks if b.kind == "native")
    assert native.name == "search" and "output" in native.extensions["openai-chat"]["executed_tool"]


def test_truncated_stream_is_an_error():
    data = BY_NAME["openai-gpt4o-text-include-usage"].read_bytes()
    data = data[: data.index(b"data: [DONE]")]  # finish_reason and usage arrived, [DONE] did not
    events, violations = decode(data)
    assert [v.rule for v in violations] == ["truncated"]
    assert type(events[-2]) is hub.Error and events[-2].type == "incomplete_stream"
    assert hub.validate(events) == []


def test_grammar_violations_recorded():
    body = (
        b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        b"data: {not json}\n\n"
        b'data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"late"}}]}\n\n'
        b'data: {"id":"x","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}'
        b"\n\n"
        b'data: {"id":"x"}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"id":"x","choices":[]}\n\n'
    )
    events, violations = decode(body)
    assert [(v.event, v.rule) for v in violations] == [
        (1, "json"),
        (3, "after-finish"),
        (4, "missing-field"),
        (5, "missing-field"),
        (7, "after-terminal"),
    ]
    assert hub.validate(events) == []


@pytest.mark.parametrize("eol", [b"\r\n", b"\r"])
def test_line_ends(eol):
    raw = BY_NAME["openrouter-claude-reasoning-details"].read_bytes()
    assert decode(raw.replace(b"\n", eol)) == decode(raw)


def test_plain_text_error_event():
    body = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}\n\nevent: error\ndata: upstream died\n\n'
    events, violations = decode(body)
    assert [v.rule for v in violations] == ["json"]
    assert events[-2] == hub.Error("upstream died", "api_error", body={"message": "upstream died"})


# Any split of a capture decodes the same: tests/test_dialect_contract.py, for every dialect.


# --------------------------------------------------------------------------- encoder


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_corpus_round_trip(path):
    events = decode(path.read_bytes())[0]
    again, violations = decode(encode(events))
    assert violations == []
    assert hub.validate(again) == []
    a, b = hub.assemble(events), hub.assemble(again)
    assert content(a) == content(b)
    assert a.finishes == b.finishes
    assert (a.id, a.model, a.created, a.extensions) == (b.id, b.model, b.created, b.extensions)
    assert a.usage == b.usage
    assert (a.error and (a.error.type, a.error.message, a.error.code)) == (
        b.error and (b.error.type, b.error.message, b.error.code)
    )
    if a.error is not None:
        assert a.error.body.items() <= b.error.body.items()  # the vendor's error object survives
    assert [x.data for x in a.annotations] == [x.data for x in b.annotations]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_sdk_reads_encoder_output(path):
    events = decode(path.read_bytes())[0]
    got = reader.read(encode(events))
    want = expected(events, "openai-chat")
    if want.error:
        assert got.error and got.error.startswith("APIError: ")
        got.error = want.error = None
    assert got == want


def sse_chunks(body: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: {")]


def test_wire_shape():
    events = decode(BY_NAME["deepseek-reasoner-reasoning-then-tool-call"].read_bytes())[0]
    chunks = sse_chunks(encode(events))
    assert encode(events).endswith(b"data: [DONE]\n\n")
    assert {(c["id"], c["created"], c["model"], c["object"]) for c in chunks} == {
        ("cca85624-4056-401f-b220-d77601d1f70d", 1764664568, "deepseek-reasoner", "chat.completion.chunk")
    }
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:] if c["choices"])
    call = next(
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    )
    assert call["index"] == 0 and call["type"] == "function" and call["id"] and call["function"]["name"]
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"]["prompt_tokens"] == 339 and last["usage"]["completion_tokens"] == 83
    assert last["usage"]["completion_tokens_details"]["reasoning_tokens"] == 39
    assert "prompt_tokens_details" in last["usage"]


def hub_stream(*middle: hub.Event, start: hub.ResponseStart | None = None) -> list[hub.Event]:
    return [start or hub.ResponseStart("resp_1", "m", 1700000000), *middle, hub.ResponseEnd()]


SIGNED = {"anthropic-messages": {"signature": "sig=="}}
SYNTHETIC = {
    "thinking-foreign-fidelity": hub_stream(
        hub.BlockStart(0, "thinking"),
        hub.Delta(0, "hmm"),
        hub.BlockStop(0, SIGNED),
        hub.BlockStart(1, "thinking", fidelity={"anthropic-messages": {"redacted_data": "xx"}}),
        hub.BlockStop(1),
        hub.BlockStart(2, "text"),
        hub.Delta(2, "Hi"),
        hub.BlockStop(2),
        hub.BlockStart(3, "tool_call", "toolu_1", "get"),
        hub.Delta(3, '{"a":'),
        hub.Delta(3, "1}"),
        hub.Extension("gemini", {"on": "tool"}, 3),
        hub.BlockStop(3, {"gemini": {"thoughtSignature": "ts"}}),
        hub.Usage(10, 5, cache_read_tokens=4, reasoning_tokens=2),
        hub.Finish("tool_use", raw="tool_use"),
    ),
    "interleaved-tools": hub_stream(
        hub.BlockStart(0, "tool_call", "a", "f"),
        hub.BlockStart(1, "tool_call", "b", "g"),
        hub.Delta(0, '{"x"'),
        hub.Delta(1, '{"y"'),
        hub.Delta(0, ":1}"),
        hub.Delta(1, ":2}"),
        hub.BlockStop(1),
        hub.BlockStop(0),
        hub.Finish("tool_use"),
    ),
    "native-and-split-text": hub_stream(
        hub.BlockStart(0, "text"),
        hub.Delta(0, "one"),
        hub.BlockStop(0),
        hub.BlockStart(
            1,
            "native",
            "srvtoolu_1",
            "web_search",
            extensions={"anthropic-messages": {"type": "server_tool_use", "id": "srvtoolu_1"}},
        ),
        hub.Delta(1, '{"query":'),
        hub.Delta(1, '"x"}'),
        hub.BlockStop(1),
        hub.BlockStart(2, "text"),
        hub.Delta(2, "two"),
        hub.Extension("anthropic-messages", {"citation": 1}, 2),
        hub.BlockStop(2),
        hub.BlockStart(3, "text"),
        hub.Delta(3, "three"),
        hub.BlockStop(3),
        hub.Extension("gemini", {"grounding": True}),
        hub.Finish("pause_turn", raw="pause_turn"),
    ),
    "two-choices": hub_stream(
        hub.BlockStart(0, "text", choice=1),
        hub.Delta(0, "B"),
        hub.BlockStart(1, "text", choice=0),
        hub.Delta(1, "A"),
        hub.BlockStop(0),
        hub.BlockStop(1),
        hub.Finish("end_turn", 1),
        hub.Finish("max_tokens", 0),
    ),
    "error-mid-stream": hub_stream(
        hub.BlockStart(0, "text"),
        hub.Delta(0, "partial"),
        hub.Usage(3, 1),
        hub.Error("upstream went away", "overloaded", status=529),
    ),
    "error-right-away": hub_stream(hub.Error("no such model", "not_found", "model_not_found", 404)),
    "refusal-without-refusal-text": hub_stream(
        hub.BlockStart(0, "text"),
        hub.Delta(0, "No."),
        hub.BlockStop(0),
        hub.Finish("refusal", raw="refusal"),
    ),
    "stop-sequence": hub_stream(
        hub.BlockStart(0, "text", extensions={"openai-responses": {"id": "msg_1"}}),
        hub.Delta(0, "x"),
        hub.BlockStop(0),
        hub.Finish("stop_sequence", raw="stop_sequence", stop_sequence="END"),
    ),
}


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_round_trip(name):
    events = SYNTHETIC[name]
    assert hub.validate(events) == []
    body = encode(events)
    again, violations = decode(body)
    assert violations == [] and hub.validate(again) == []
    a, b = hub.assemble(events), hub.assemble(again)
    assert content(b) == content(a)
    assert [(x.choice, x.reason, x.stop_sequence) for x in b.finishes.values()] == [
        (x.choice, x.reason, x.stop_sequence) for x in a.finishes.values()
    ]
    assert all(x.raw == b.finishes[x.choice].raw for x in a.finishes.values() if x.raw)
    assert [x.extensions for x in b.blocks] == [x.extensions for x in a.blocks]
    assert [(x.namespace, x.data) for x in b.annotations] == [(x.namespace, x.data) for x in a.annotations]
    assert [[(x.namespace, x.data) for x in blk.annotations] for blk in b.blocks] == [
        [(x.namespace, x.data) for x in blk.annotations] for blk in a.blocks
    ]
    assert (b.error and (b.error.type, b.error.message, b.error.status)) == (
        a.error and (a.error.type, a.error.message, a.error.status or hub.ERROR_STATUS[a.error.type])
    )
    if a.usage:
        assert (b.usage.input_tokens, b.usage.output_tokens, b.usage.cache_read_tokens) == (
            a.usage.input_tokens,
            a.usage.output_tokens,
            a.usage.cache_read_tokens,
        )
    got = reader.read(body)
    want = expected(events, "openai-chat")
    if want.error:
        assert got.error and got.error.startswith("APIError: ")
        got.error = want.error = None
    assert got == want


OTHER_DIALECTS = ["anthropic-messages", "openai-responses", "gemini"]


def _other_corpus():
    out = []
    for dialect in OTHER_DIALECTS:
        try:
            get(dialect)
        except ImportError:
            continue
        out += [pytest.param(dialect, p, id=f"{dialect}/{p.stem}") for p in corpus_files(dialect)]
    return out


@pytest.mark.parametrize(("dialect", "path"), _other_corpus())
def test_foreign_streams_round_trip(dialect, path):
    """Another dialect's decoder -> our encoder -> our decoder keeps the content, fidelity included."""
    source = get(dialect)
    events = decode_all(source.StreamDecoder(), path.read_bytes())
    body = encode(events)
    again, violations = decode(body)
    assert violations == [] and hub.validate(again) == []
    a, b = hub.assemble(events), hub.assemble(again)

    def kept(r):  # blocks with something in them (an empty text block without an id has nothing to keep)
        return [
            (x.choice, x.kind, x.id, x.text, x.fidelity)
            for x in r.blocks
            if x.text or x.fidelity or x.id or x.kind not in ("text", "thinking")
        ]

    assert kept(b) == kept(a)
    assert [(f.reason, f.raw) for f in b.finishes.values()] == [(f.reason, f.raw) for f in a.finishes.values()]
    assert (a.error is None) == (b.error is None)
    got = reader.read(body)
    want = expected(events, "openai-chat")
    if want.error:
        assert got.error and got.error.startswith("APIError: ")
        got.error = want.error = None
    assert got == want


def test_sdk_raw_iteration_and_error():
    events = decode(BY_NAME["openrouter-claude-reasoning-details"].read_bytes())[0]
    client = reader.client_for(encode(events))
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "2 + 2 = 4"
    thinking = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert thinking.startswith("This is a simple arithmetic question")
    assert chunks[-1].usage.prompt_tokens == 43
    client = reader.client_for(encode(SYNTHETIC["error-mid-stream"]))
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
    with pytest.raises(openai.APIError, match="upstream went away"):
        list(stream)


# --------------------------------------------------------------------------- non-streaming


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_response_round_trip(path):
    events = decode(path.read_bytes())[0]
    response = hub.assemble(events)
    body = oc.encode_response(response)
    again = oc.decode_response(json.loads(json.dumps(body)))
    assert hub.validate(again) == []
    r = hub.assemble(again)
    assert content(r) == content(response)
    assert {n: f.reason for n, f in r.finishes.items()} == {n: f.reason for n, f in response.finishes.items()}
    assert (r.usage and r.usage.output_tokens) == (response.usage and response.usage.output_tokens)
    if response.error is None:
        client = reader.client_for(json.dumps(body).encode(), "application/json")
        completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        choice = completion.choices[0] if completion.choices else None
        text = "".join(b.text for b in response.choice_blocks(0) if b.kind == "text")
        assert ((choice.message.content or "") + (choice.message.refusal or "")) == text


def test_decode_real_response_body():
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": "Calling.",
                    "refusal": None,
                    "annotations": [],
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        "system_fingerprint": "fp_1",
    }
    r = hub.assemble(oc.decode_response(body))
    assert [(b.kind, b.text, b.id) for b in r.blocks] == [("text", "Calling.", None), ("tool_call", "{}", "call_1")]
    assert r.finish.reason == "tool_use" and r.usage.total_tokens == 12
    assert r.extensions == {"openai-chat": {"system_fingerprint": "fp_1"}}


# --------------------------------------------------------------------------- requests

FULL_REQUEST = {
    "model": "gpt-4o",
    "messages": [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Look it up.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q":"x"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "Thanks", "name": "bob"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Search",
                "strict": True,
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            },
        }
    ],
    "tool_choice": {"type": "function", "function": {"name": "lookup"}},
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_completion_tokens": 100,
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 40,
    "seed": 7,
    "presence_penalty": 0.1,
    "frequency_penalty": 0.2,
    "n": 1,
    "parallel_tool_calls": False,
    "stop": ["END"],
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "out", "strict": True, "schema": {"type": "object"}},
    },
    "reasoning_effort": "high",
    "metadata": {"trace": "t1"},
    "user": "u-1",
    "logprobs": True,
    "top_logprobs": 2,
}


def test_request_decode():
    req = oc.decode_request(FULL_REQUEST)
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert req.system == "Be brief."
    image, url, audio, pdf = req.messages[1].parts[1:]
    assert (image.media_type, image.data, image.detail) == ("image/png", "iVBOR", "low")
    assert url.url == "https://x/y.png"
    assert (audio.media_type, audio.data) == ("audio/wav", "UklGR")
    assert (pdf.media_type, pdf.name) == ("application/pdf", "a.pdf")
    thinking, call = req.messages[2].parts
    assert thinking.text == "Look it up." and (call.id, call.name, call.arguments) == ("call_1", "lookup", '{"q":"x"}')
    result = req.messages[3].parts[0]
    assert result.tool_call_id == "call_1" and result.content[0].text == "a cat"
    assert req.tools[0].strict is True and req.tool_choice == hub.ToolChoice("tool", "lookup")
    assert (req.max_tokens, req.temperature, req.top_k, req.seed, req.stop) == (100, 0.5, 40, 7, ["END"])
    assert req.response_format == {"type": "json_schema", "schema": {"type": "object"}, "name": "out", "strict": True}
    assert req.thinking == {"type": "enabled", "effort": "high"}
    assert req.metadata == {"trace": "t1", "user_id": "u-1"}
    assert req.extensions["openai-chat:logprobs"] is True and req.extensions["openai-chat:top_logprobs"] == 2


def test_request_round_trip():
    body = oc.encode_request(oc.decode_request(FULL_REQUEST))
    assert body == FULL_REQUEST
    again = oc.decode_request(body)
    assert again == oc.decode_request(FULL_REQUEST)


def test_request_from_hub_with_foreign_parts():
    req = hub.Request(
        model="m",
        messages=[
            hub.Message("system", [hub.TextPart("sys")]),
            hub.Message("user", [hub.TextPart("q")]),
            hub.Message(
                "assistant",
                [
                    hub.ThinkingPart("t", {"anthropic-messages": {"signature": "s"}}),
                    hub.ToolCallPart("toolu_1", "f", "{}", {"gemini": {"thoughtSignature": "g"}}),
                    hub.NativePart("anthropic-messages", {"type": "server_tool_use"}),
                ],
            ),
            hub.Message(
                "user",
                [
                    hub.ToolResultPart("toolu_1", [hub.TextPart("r")], is_error=True),
                    hub.TextPart("and then?"),
                ],
            ),
        ],
        thinking={"type": "enabled", "budget_tokens": 1024},
        extensions={"anthropic-messages:cache": {"x": 1}},
    )
    body = oc.encode_request(req)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert body["reasoning_effort"] == "low"
    back = oc.decode_request(json.loads(json.dumps(body)))
    assert back.messages[2].parts == req.messages[2].parts
    assert back.messages[3].parts[0].is_error
    assert back.extensions["anthropic-messages:cache"] == {"x": 1}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"model": "m"}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 5}]}, "messages[1].content"),
        ({"messages": [{"role": "wizard", "content": "a"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0].type"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "function": {}}]}]},
            "messages[0].tool_calls[0].function.name",
        ),
        ({"messages": [], "temperature": "hot"}, "temperature"),
        ({"messages": [], "max_tokens": 1.5}, "max_tokens"),
        ({"messages": [], "stop": 3}, "stop"),
        ({"messages": [], "tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0].function.name"),
        ({"messages": [], "tool_choice": "always"}, "tool_choice"),
        ({"messages": [], "response_format": {"type": "yaml"}}, "response_format.type"),
    ],
)
def test_bad_requests(body, field):
    with pytest.raises(RequestError) as info:
        oc.decode_request(body)
    assert info.value.field == field
    assert str(info.value).startswith(field + ": ")


def test_bad_content_message():
    with pytest.raises(RequestError, match=r"^messages\[1\]\.content: expected a string or a list$"):
        oc.decode_request({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": {"x": 1}}]})


def test_endpoint():
    url, headers = oc.endpoint(hub.Request(stream=True), base_url="https://api.openai.com/v1/", api_key="sk")
    assert url == "https://api.openai.com/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk" and headers["Accept"] == "text/event-stream"


# --------------------------------------------------------------------------- errors


def test_error_codec_with_sdk():
    error = hub.Error("slow down", "rate_limit", "rate_limit_exceeded")
    status, body = oc.encode_error(error)
    assert status == 429 and body["error"]["type"] == "rate_limit_error"
    back = oc.decode_error(status, json.dumps(body).encode())
    assert (back.type, back.message, back.code, back.status) == ("rate_limit", "slow down", "rate_limit_exceeded", 429)
    assert oc.decode_error(502, b"<html>bad gateway</html>").type == "api_error"
    plain = oc.decode_error(401, b'{"error": {"message": "bad key", "type": "invalid_request_error"}}')
    assert (plain.type, plain.status) == ("invalid_request", 401)

    def handler(request):
        return httpx.Response(status, json=body)

    client = openai.OpenAI(
        base_url="http://t/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with pytest.raises(openai.RateLimitError, match="slow down"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])


# --------------------------------------------------------------------------- any valid hub stream

_TEXT = st.text(st.sampled_from('ab <>{}"\\é\n'), min_size=0, max_size=6)
_FIDELITY = st.none() | st.sampled_from([SIGNED, {"openai-responses": {"encrypted_content": "e", "id": "rs_1"}}])


@st.composite
def hub_streams(draw) -> list[hub.Event]:
    """Valid hub streams: interleaved blocks of every kind, several choices, errors anywhere."""
    n_blocks = draw(st.integers(0, 5))
    specs = []
    for index in range(n_blocks):
        kind = draw(st.sampled_from(["text", "thinking", "tool_call", "native", "data"]))
        choice = draw(st.sampled_from([0, 0, 0, 1]))
        pieces = draw(st.lists(_TEXT, max_size=3))
        if kind == "tool_call":
            pieces = ['{"k":', json.dumps("".join(pieces)), "}"]
        specs.append((index, kind, choice, pieces, draw(_FIDELITY) if kind == "thinking" else None))
    # a schedule: start, deltas, stop of each block, interleaved but in order per block
    queues = [[("start", s)] + [("delta", s, p) for p in s[3]] + [("stop", s)] for s in specs]
    events: list[hub.Event] = [hub.ResponseStart("r", "m", 1)]
    open_kinds: set[tuple[int, str]] = set()  # a single content string: text blocks of a choice take turns

    def allowed(q):
        spec = q[0][1]
        return q[0][0] != "start" or spec[1] not in ("text", "thinking") or (spec[2], spec[1]) not in open_kinds

    while any(queues):
        q = draw(st.sampled_from([q for q in queues if q and allowed(q)]))
        step = q.pop(0)
        if step[0] == "start":
            open_kinds.add((step[1][2], step[1][1]))
        elif step[0] == "stop":
            open_kinds.discard((step[1][2], step[1][1]))
        index, kind, choice, _, fidelity = step[1]
        if step[0] == "start":
            name = "f" if kind == "tool_call" else "srv" if kind == "native" else None
            ext = {"anthropic-messages": {"type": "server_tool_use"}} if kind == "native" else None
            mime = "image/png" if kind == "data" else None
            events.append(
                hub.BlockStart(index, kind, f"id{index}" if name else None, name, choice, mime, extensions=ext)
            )
        elif step[0] == "delta":
            events.append(hub.Delta(index, step[2]))
            if draw(st.integers(0, 5)) == 0:
                events.append(hub.Extension("gemini", {"note": index}, draw(st.sampled_from([index, None]))))
        else:
            events.append(hub.BlockStop(index, fidelity))
    events.append(hub.Usage(draw(st.integers(0, 99)), draw(st.integers(0, 99))))
    for choice in sorted({s[2] for s in specs}):
        events.append(hub.Finish(draw(st.sampled_from(hub.FINISH_REASONS)), choice))
    if draw(st.booleans()):
        cut = draw(st.integers(1, len(events)))
        events = [e for e in events[:cut] if type(e) is not hub.Finish]
        events.append(hub.Error("boom", draw(st.sampled_from(hub.ERROR_TYPES))))
    events.append(hub.ResponseEnd())
    return events


@given(hub_streams())
def test_any_hub_stream(events):
    assert hub.validate(events) == []
    body = encode(events)
    again, violations = decode(body)
    assert violations == [] and hub.validate(again) == []
    a, b = hub.assemble(events), hub.assemble(again)

    def kept(r):
        blocks = [
            (x.choice, x.kind, x.text, x.fidelity, x.mime_type, [(e.namespace, e.data) for e in x.annotations])
            for x in r.blocks
            if x.text or x.fidelity or x.kind not in ("text", "thinking")  # empty ones have nothing to keep
        ]
        return sorted(blocks, key=lambda t: t[0])  # choices are independent; order within a choice is kept

    if a.error is None:
        assert kept(b) == kept(a)
        assert [(e.namespace, e.data) for e in b.annotations] == [(e.namespace, e.data) for e in a.annotations]
        assert {c: f.reason for c, f in b.finishes.items()} == {c: f.reason for c, f in a.finishes.items()}
    else:
        assert b.error.type == a.error.type
    got = reader.read(body)
    want = expected(events, "openai-chat")
    if want.error:
        assert got.error and got.error.startswith("APIError: ")
        got.error = want.error = None
        got.finish = want.finish = None  # cut short: the finish the reader saw is whatever came before
    assert got == want


@given(hub_streams())
def test_any_response_round_trip(events):
    response = hub.assemble(events)
    body = json.loads(json.dumps(oc.encode_response(response)))
    again = oc.decode_response(body)
    assert hub.validate(again) == []
    r = hub.assemble(again)

    def kept(resp):  # the body lists choices in order; tool-call arguments "" mean {}
        blocks = [
            (
                x.choice,
                x.kind,
                x.text or ("{}" if x.kind == "tool_call" else ""),
                x.fidelity,
                x.mime_type,
                [(e.namespace, e.data) for e in x.annotations],
            )
            for x in resp.blocks
            if x.text or x.fidelity or x.kind not in ("text", "thinking")
        ]
        return sorted(blocks, key=lambda b: b[0])

    assert kept(r) == kept(response)
    assert {c: f.reason for c, f in r.finishes.items()} == {c: f.reason for c, f in response.finishes.items()}
    assert (r.error and r.error.type) == (response.error and response.error.type)
    client = reader.client_for(json.dumps(body).encode(), "application/json")
    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert [c.index for c in completion.choices] == sorted(
        {b.choice for b in response.blocks} | set(response.finishes)
    ) or [0]


_WORD = st.text(st.sampled_from("abc xyz"), min_size=1, max_size=5)
_PARTS = {
    "system": st.lists(st.builds(hub.TextPart, _WORD), min_size=1, max_size=2),
    "user": st.lists(
        st.one_of(
            st.builds(hub.TextPart, _WORD),
            st.builds(hub.ImagePart, media_type=st.just("image/png"), data=st.just("iVBO"), detail=st.just("low")),
            st.builds(hub.ImagePart, url=st.just("https://x/i.png")),
            st.builds(hub.FilePart, media_type=st.just("audio/wav"), data=st.just("UklG")),
            st.builds(hub.FilePart, media_type=st.just("application/pdf"), data=st.just("JVBE"), name=st.just("a.pdf")),
        ),
        min_size=1,
        max_size=3,
    ),
    "assistant": st.lists(
        st.one_of(
            st.builds(hub.TextPart, _WORD),
            st.builds(hub.ThinkingPart, _WORD, st.none() | st.just(SIGNED)),
            st.builds(
                hub.ToolCallPart,
                _WORD.map(lambda s: "call_" + s.replace(" ", "")),
                _WORD,
                st.just('{"a":1}'),
                st.none() | st.just({"gemini": {"thoughtSignature": "t"}}),
            ),
        ),
        min_size=1,
        max_size=3,
    ),
    "tool": st.builds(lambda i, t, e: [hub.ToolResultPart(i, [hub.TextPart(t)], e)], _WORD, _WORD, st.booleans()),
}


@st.composite
def requests(draw) -> hub.Request:
    roles = draw(st.lists(st.sampled_from(["user", "assistant", "tool"]), min_size=1, max_size=4))
    messages = [hub.Message("system", draw(_PARTS["system"]))] if draw(st.booleans()) else []
    messages += [hub.Message(role, draw(_PARTS[role])) for role in roles]
    return hub.Request(
        model="m",
        messages=messages,
        tools=draw(
            st.lists(st.builds(hub.Tool, _WORD, st.none() | _WORD, strict=st.none() | st.booleans()), max_size=2)
        ),
        tool_choice=draw(
            st.none()
            | st.sampled_from([hub.ToolChoice("auto"), hub.ToolChoice("required"), hub.ToolChoice("tool", "f")])
        ),
        max_tokens=draw(st.none() | st.integers(1, 100)),
        temperature=draw(st.none() | st.floats(0, 2)),
        stop=draw(st.lists(_WORD, max_size=2)),
        seed=draw(st.none() | st.integers(0, 9)),
        thinking=draw(st.none() | st.sampled_from([{"type": "enabled", "effort": "low"}, {"type": "disabled"}])),
        metadata=draw(st.sampled_from([{}, {"user_id": "u"}, {"trace": "t"}])),
        extensions=draw(st.sampled_from([{}, {"anthropic-messages:top": 1}, {"openai-chat:logprobs": True}])),
    )


def _system_merged(req: hub.Request) -> list:
    """A system message with several text parts comes back as one string; compare the text."""
    return [(m.role, m.text if m.role == "system" else m.parts, m.name) for m in req.messages]


@given(requests())
def test_any_request_round_trip(req):
    body = json.loads(json.dumps(oc.encode_request(req)))
    back = oc.decode_request(body)
    assert _system_merged(back) == _system_merged(
        hub.Request(messages=[m if m.role == "system" else _plain_text_merged(m) for m in req.messages])
    )
    for key in ("model", "tools", "tool_choice", "max_tokens", "temperature", "stop", "seed", "thinking", "metadata"):
        assert getattr(back, key) == getattr(req, key), key
    assert {k: v for k, v in back.extensions.items()} == req.extensions


def _plain_text_merged(m: hub.Message) -> hub.Message:
    """What the wire keeps: plain user text as one string; assistant parts in Chat's order."""
    if m.role == "user" and all(isinstance(p, hub.TextPart) for p in m.parts):
        return hub.Message(m.role, [hub.TextPart("".join(p.text for p in m.parts))], m.name)
    if m.role == "assistant":
        texts = [p for p in m.parts if isinstance(p, hub.TextPart)]
        thinking = [p for p in m.parts if isinstance(p, hub.ThinkingPart)]
        calls = [p for p in m.parts if isinstance(p, hub.ToolCallPart)]
        merged: list = list(thinking)  # Chat Completions orders them: reasoning, content, tool calls
        if texts:
            merged.append(hub.TextPart("".join(p.text for p in texts)))
        return hub.Message(m.role, merged + calls, m.name)
    return m


def _body(*chunks: dict) -> bytes:
    lines = [b"data: " + json.dumps({"id": "c1", **c}).encode() + b"\n\n" for c in chunks]
    return b"".join(lines) + b"data: [DONE]\n\n"


def test_tool_call_quirks():
    call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = _body(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "a", **call}, {"index": 1, "id": "b", **call}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": []}}]},  # empty list
        # a provider giving every call index 0 (new id = new call), and one without an id
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", **call}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 5, **call}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
    events, violations = decode(body)
    assert violations == [] and hub.validate(events) == []
    r = hub.assemble(events)
    assert [(b.id, b.name, b.text) for b in r.blocks] == [
        ("a", "f", "{}"),
        ("b", "f", "{}"),
        ("c", "f", "{}"),
        ("call_c1_3", "f", "{}"),
    ]
    assert r.finish.reason == "tool_use" and r.finish.raw == "stop"
    again = decode(_body(*[{"choices": c["choices"]} for c in sse_chunks(encode(events)) if c["choices"]]))[0]
    assert [(b.id, b.text) for b in hub.assemble(again).blocks] == [(b.id, b.text) for b in r.blocks]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from(["", "x", "<think>", "stop", "tool_calls"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "index",
                    "id",
                    "content",
                    "delta",
                    "function",
                    "arguments",
                    "name",
                    "type",
                    "text",
                    "reasoning_details",
                    "tool_calls",
                    "finish_reason",
                    "llmbridge",
                    "block",
                    "stop",
                    "kind",
                    "ref",
                    "keep",
                    "logprobs",
                    "usage",
                    "error",
                    "refusal",
                    "reasoning",
                    "choices",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["id", "choices", "usage", "error", "llmbridge", "citations"]), _JSON, max_size=3
        ),
        max_size=5,
    )
)
def test_malformed_chunks_never_crash(chunks):
    """Whatever JSON arrives, the decoder answers with a valid hub stream (and violations)."""
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    events, _ = decode(body)
    assert hub.validate(events) == []
    encode(events)  # and the encoder takes what the decoder gave


_DELTA_KEYS = [
    "content",
    "refusal",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "tool_calls",
    "executed_tools",
    "function_call",
    "annotations",
    "role",
]
_shaped_choice = st.fixed_dictionaries(
    {"index": st.integers(0, 2), "delta": st.dictionaries(st.sampled_from(_DELTA_KEYS), _JSON, max_size=3)},
    optional={
        "finish_reason": _JSON,
        "logprobs": _JSON,
        "llmbridge": _JSON,
        "native_finish_reason": _JSON,
        "content_filter_results": _JSON,
        "stop_reason": _JSON,
    },
)


@given(
    st.lists(
        st.fixed_dictionaries(
            {"id": st.just("c"), "choices": st.lists(_shaped_choice, max_size=2)},
            optional={"usage": _JSON, "llmbridge": _JSON, "x_groq": _JSON},
        ),
        max_size=6,
    )
)
def test_malformed_choices_never_crash(chunks):
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    events, _ = decode(body)
    assert hub.validate(events) == []
    encode(events)


_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])},
    optional={
        "content": _JSON,
        "tool_calls": _JSON,
        "tool_call_id": _JSON,
        "name": _JSON,
        "llmbridge": _JSON,
        "reasoning_content": _JSON,
        "refusal": _JSON,
        "function_call": _JSON,
    },
)


@given(
    st.fixed_dictionaries(
        {"messages": st.lists(_MESSAGE, max_size=3)},
        optional={
            "tools": _JSON,
            "tool_choice": _JSON,
            "stop": _JSON,
            "response_format": _JSON,
            "max_tokens": _JSON,
            "temperature": _JSON,
            "metadata": _JSON,
            "n": _JSON,
            "reasoning_effort": _JSON,
            "llmbridge": _JSON,
            "model": _JSON,
        },
    )
)
def test_bad_requests_raise_request_error(body):
    """Any body decodes or raises RequestError naming a field: never another exception."""
    try:
        req = oc.decode_request(body)
    except RequestError as exc:
        assert exc.field
        return
    oc.encode_request(req)


@given(
    st.fixed_dictionaries(
        {
            "id": st.just("c"),
            "choices": st.lists(
                st.fixed_dictionaries(
                    {
                        "index": st.integers(0, 1),
                        "message": st.dictionaries(st.sampled_from(_DELTA_KEYS), _JSON, max_size=3),
                    },
                    optional={"finish_reason": _JSON, "logprobs": _JSON},
                ),
                max_size=2,
            ),
        },
        optional={"usage": _JSON, "llmbridge": _JSON, "error": _JSON},
    )
)
def test_malformed_responses_never_crash(body):
    events = oc.decode_response(body)
    assert hub.validate(events) == []
    oc.encode_response(hub.assemble(events))


# ---------------------------------------------------------------- request codec fast paths
#
# decode_request and encode_request take the usual message ({"role", "content": "text"}) without
# _decode_message/_encode_message; these compare them with those functions over messages of
# every shape near the usual one (and as JSON too: key order is part of an upstream body).

from llmbridge.dialects.openai_chat import _request as ocr  # noqa: E402

_NEAR_MESSAGES = [
    {"role": role, "content": content, **extra}
    for role in ("user", "system", "assistant", "developer", "tool", "function", "bot")
    for content in ("hi", "", None, [{"type": "text", "text": "a"}], 3)
    for extra in (
        {},
        {"name": "n"},
        {"refusal": None},
        {"refusal": "no"},
        {"tool_call_id": "c"},
        {"reasoning_content": "r"},
        {"llmbridge": {"is_error": True}},
        {"prefix": True},
    )
] + [{"content": "hi"}, {"role": "user"}, {"role": "user", "content": "hi", "name": None}, "hi", None]


def _general_decode(message: object, i: int) -> object:
    try:
        return ocr._decode_message(message, f"messages[{i}]")
    except RequestError as exc:
        return ("error", str(exc), exc.field if hasattr(exc, "field") else None)


def _fast_decode(message: object, i: int) -> object:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}] * i + [message]}
    try:
        return oc.decode_request(body).messages[i:]
    except RequestError as exc:
        return ("error", str(exc), exc.field if hasattr(exc, "field") else None)


@pytest.mark.parametrize("message", _NEAR_MESSAGES, ids=lambda m: json.dumps(m)[:50])
def test_request_decode_fast_path_is_the_general_path(message):
    assert _fast_decode(message, 1) == _general_decode(message, 1)


def _encoded(messages: list) -> tuple[bytes, bytes]:
    fast = oc.encode_request(hub.Request(model="m", messages=messages))["messages"]
    general = [m for message in messages for m in ocr._encode_message(message)]
    return json.dumps(fast).encode(), json.dumps(general).encode()


@pytest.mark.parametrize(
    "message",
    [
        hub.Message(role, parts, name, ext)
        for role in ("user", "system", "assistant", "tool")
        for parts in (
            [hub.TextPart("hi")],
            [hub.TextPart("")],
            [hub.TextPart("hi", {"openai-chat": {"role": "developer"}})],
            [hub.TextPart("no", {"openai-chat": {"refusal": True}})],
            [hub.TextPart("hi", {"anthropic-messages": {"cache_control": {"type": "ephemeral"}}})],
            [hub.TextPart("a"), hub.TextPart("b")],
            [hub.ThinkingPart("t")],
            [hub.ToolResultPart("c", [hub.TextPart("r")])],
            [],
        )
        for name in (None, "n")
        for ext in (
            None,
            {"openai-chat": {"parts": True}},
            {"openai-chat": {"extra": {"refusal": None}}},
            {"anthropic-messages": {"content": "string", "turn": True}},
        )
    ],
    ids=repr,
)
def test_request_encode_fast_path_is_the_general_path(message):
    fast, general = _encoded([message])
    assert fast == general


def test_request_fast_paths_over_a_decoded_conversation():
    body = {"model": "m", "messages": [m for m in _NEAR_MESSAGES if _general_decode(m, 0)[0] != "error"]}
    request = oc.decode_request(body)
    general = [m for i, message in enumerate(body["messages"]) for m in ocr._decode_message(message, f"messages[{i}]")]
    assert request.messages == general
    fast, general_bytes = _encoded(request.messages)
    assert fast == general_bytes


@pytest.mark.parametrize("stream", [True, False, None, "true", 1, 0, [], "absent"])
@pytest.mark.parametrize("extra", [{}, {"tools": []}, {"functions": []}, {"tool_choice": "auto"}, {"functions": 3}])
def test_request_decode_top_level_fast_paths(stream, extra):
    """stream, tools and tool_choice read as _typed/_decode_tools/_decode_tool_choice read them."""
    body: dict = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    if stream != "absent":
        body["stream"] = stream
    try:
        want: object = ocr._typed(body, "stream", bool) or False
    except RequestError as exc:
        want = str(exc)
    try:
        request = oc.decode_request(body)
    except RequestError as exc:
        assert str(exc) == want
        return
    assert request.stream is want
    assert (request.tools, request.tool_choice) == (
        ocr._decode_tools(body)[0],
        ocr._decode_tool_choice(body.get("tool_choice", body.get("function_call")), hub.Request(), body),
    )


_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


@pytest.mark.parametrize("keys", [k for n in range(4) for k in itertools.combinations(_COUNTS, n)])
def test_usage_from_wire_fast_path_is_the_general_path(keys):
    """A usage of the three counts only is read without the general walk; an empty llmbridge
    entry (which says nothing) sends the same usage down the general path."""
    from llmbridge.dialects.openai_chat._common import usage_from_wire

    for value in (0, 7, None, True, 1.5, "3", [1]):
        raw = dict.fromkeys(keys, value)
        assert usage_from_wire(raw) == usage_from_wire({**raw, "llmbridge": {}})
