"""The UniEvent view: MMSP's stream grammar derived from hub events."""

from __future__ import annotations

import base64
import importlib
import importlib.util
import json
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import hub
from llmbridge.dialects.base import decode_all
from llmbridge.errors import IncompleteStreamError, ToolCallArgumentParseError, UpstreamError
from llmbridge.unievent import (
    Embedding,
    ImageUrl,
    InlineData,
    InlineThinking,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UniEvent,
    UniEventView,
    UsageMetadata,
    assemble_message,
    grammar_violations,
    item_from_dict,
    to_item_fidelity,
    view_events,
)

from .conftest import corpus_files

T0 = 1694502400000


def clock() -> int:
    return T0


def view(events: list[hub.Event]) -> list[UniEvent]:
    return view_events(events, clock)


def items(events: list[UniEvent]) -> list[dict]:
    return [i.to_dict() for e in events for i in e.content_items]


# --------------------------------------------------------------------------- generated hub streams


@st.composite
def hub_streams(draw, kinds=("text", "thinking", "tool_call", "data", "native")):
    """A hub stream of 0-5 blocks whose events interleave, plus what each block holds."""
    blocks = []
    for index in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(kinds))
        raw: object
        if kind == "tool_call":
            raw = draw(st.dictionaries(st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=6)), max_size=3))
            whole = json.dumps(raw)
        elif kind == "data":
            raw = draw(st.binary(max_size=16))
            whole = base64.b64encode(raw).decode()
        elif kind == "native":
            raw = {"q": draw(st.text(max_size=5))}
            whole = json.dumps(raw)
        else:
            raw = whole = draw(st.text(max_size=16))
        cuts = sorted(draw(st.lists(st.integers(0, len(whole)), max_size=4)))
        fragments = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
        start_fid = draw(st.sampled_from([None, {"mmsp": {"phase": "commentary"}}]))
        stop_fid = draw(st.sampled_from([None, {"anthropic-messages": {"signature": "sig"}}]))
        start = hub.BlockStart(
            index,
            kind,
            id=f"call_{index}" if kind == "tool_call" else None,
            name=f"tool{index}" if kind in ("tool_call", "native") else None,
            mime_type="image/png" if kind == "data" else None,
            fidelity=start_fid,
            extensions={"anthropic-messages": {"type": "server_tool_use"}} if kind == "native" else None,
        )
        events = [start] + [hub.Delta(index, f) for f in fragments] + [hub.BlockStop(index, stop_fid)]
        # a citation while the block is open, or one that arrives after it stopped
        where = draw(st.sampled_from([None, 1, len(events)]))
        if where is not None:
            events.insert(where, hub.Extension("anthropic-messages", {"cite": index}, index))
        fidelity = hub.merge_dicts(start_fid, stop_fid)
        # an item with nothing in it is left out, as MMSP leaves it out
        empty = kind in ("text", "thinking", "data") and not whole and not fidelity and where != 1
        blocks.append(
            {
                "kind": kind,
                "whole": whole,
                "raw": raw,
                "events": deque(events),
                "start": start,
                "fidelity": fidelity,
                "empty": empty,
            }
        )
    stream: list[hub.Event] = [hub.ResponseStart(id="resp_1", model="m")]
    pending = [b for b in blocks]
    while pending:
        b = pending[draw(st.integers(0, len(pending) - 1))]
        stream.append(b["events"].popleft())
        if not b["events"]:
            pending.remove(b)
    if draw(st.booleans()):
        stream.append(hub.Extension("openai-chat", {"logprobs": None}))
    stream.append(hub.Usage(input_tokens=draw(st.integers(0, 99)), output_tokens=draw(st.integers(0, 99))))
    stream.append(hub.Finish(draw(st.sampled_from(hub.FINISH_REASONS))))
    stream.append(hub.ResponseEnd())
    started = [e.index for e in stream if type(e) is hub.BlockStart]
    return stream, [blocks[i] for i in started]


def check_done_item(item: dict, block: dict) -> None:
    kind = block["kind"]
    start = block["start"]
    if kind == "native":
        assert item["type"] == "text.done" and item["text"] == ""
        carried = item["fidelity"]["llmbridge"]["block"]
        assert carried["text"] == block["whole"] and carried["name"] == start.name
        return
    assert item["type"] == {"data": "inline_data"}.get(kind, kind) + ".done"
    fidelity = {k: v for k, v in (item.get("fidelity") or {}).items() if k != "llmbridge"}
    assert (fidelity or None) == to_item_fidelity(block["fidelity"])
    if kind == "text":
        assert item["text"] == block["whole"]
    elif kind == "thinking":
        assert item["thinking"] == block["whole"]
    elif kind == "tool_call":
        assert (item["name"], item["tool_call_id"], item["arguments"]) == (start.name, start.id, block["raw"])
    else:
        assert base64.b64decode(item["data"]) == block["raw"]
        assert item["mime_type"] == "image/png"


@given(hub_streams())
def test_the_grammar_holds_for_interleaved_hub_blocks(case):
    stream, blocks = case
    out = view(stream)
    assert grammar_violations(out) == []
    assert [e.event_type for e in out].count("stop") == 1 and out[-1].event_type == "stop"
    assert all(len(e.content_items) == 1 for e in out[:-1])
    # groups in the order the blocks started; each .done is the block, whole
    dones = [i for i in items(out) if i["type"].endswith(".done")]
    blocks = [b for b in blocks if not b["empty"]]
    assert len(dones) == len(blocks)
    for item, block in zip(dones, blocks, strict=True):
        check_done_item(item, block)
    # the .done equals the concatenation of its fragments
    group: list[dict] = []
    for item in items(out):
        if item["type"].endswith(".delta"):
            group.append(item)
            continue
        if item["type"] == "text.done":
            assert item["text"] == "".join(g["text"] for g in group)
        elif item["type"] == "thinking.done":
            assert item["thinking"] == "".join(g["thinking"] for g in group)
        elif item["type"] == "tool_call.done":
            assert item["arguments"] == json.loads("".join(g["arguments"] for g in group) or "{}")
            assert group[0]["name"] and all(not g["name"] and not g["tool_call_id"] for g in group[1:])
        elif item["type"] == "inline_data.done":
            assert base64.b64decode(item["data"]) == b"".join(base64.b64decode(g["data"]) for g in group)
        carriers = [g for g in group if "fidelity" in g]
        assert len(carriers) <= 1 and (not carriers or carriers[0]["fidelity"] == item["fidelity"])
        group = []
    assert out[-1].usage_metadata is not None


@given(hub_streams(kinds=("text", "thinking")))
def test_the_live_group_streams_as_it_arrives_and_the_others_wait(case):
    stream, _ = case
    v = UniEventView(clock)
    order: list[int] = []  # blocks in start order that have not had their .done yet
    stopped: set[int] = set()
    for event in stream:
        out = v.feed(event)
        live = order[0] if order else None
        if type(event) is hub.BlockStart:
            order.append(event.index)
        elif type(event) is hub.Delta:
            if event.index == live and event.text:
                (item,) = [i.to_dict() for e in out for i in e.content_items]
                assert item.get("text", item.get("thinking")) == event.text
            else:
                assert out == []
        elif type(event) is hub.BlockStop:
            stopped.add(event.index)
            if event.index != live:
                assert out == []
            # the live group ends and every stopped block queued behind it follows, whole
            while order and order[0] in stopped:
                order.pop(0)


# --------------------------------------------------------------------------- MMSP's stream grammar


SEED_EXAMPLE = [
    ("delta", {"type": "thinking.delta", "thinking": "Let me"}),
    ("delta", {"type": "thinking.delta", "thinking": " check"}),
    ("delta", {"type": "thinking.delta", "thinking": "", "fidelity": {"signature": "..."}}),
    ("delta", {"type": "thinking.done", "thinking": "Let me check", "fidelity": {"signature": "..."}}),
    ("delta", {"type": "tool_call.delta", "name": "get_weather", "arguments": "", "tool_call_id": "toolu_1"}),
    ("delta", {"type": "tool_call.delta", "name": "", "arguments": '{"location": ', "tool_call_id": ""}),
    ("delta", {"type": "tool_call.delta", "name": "", "arguments": '"Paris"}', "tool_call_id": ""}),
    (
        "delta",
        {
            "type": "tool_call.done",
            "name": "get_weather",
            "arguments": {"location": "Paris"},
            "tool_call_id": "toolu_1",
        },
    ),
]


def seed_hub_events(fidelity: dict) -> list[hub.Event]:
    """The Claude turn of MMSP's stream grammar as hub events (as the Anthropic decoder gives them)."""
    return [
        hub.ResponseStart(),
        hub.BlockStart(0, "thinking"),
        hub.Delta(0, "Let me"),
        hub.Delta(0, " check"),
        hub.BlockStop(0, fidelity=fidelity),
        hub.BlockStart(1, "tool_call", id="toolu_1", name="get_weather"),
        hub.Delta(1, ""),
        hub.Delta(1, '{"location": '),
        hub.Delta(1, '"Paris"}'),
        hub.BlockStop(1),
        hub.Usage(input_tokens=10, output_tokens=5),
        hub.Finish("tool_use"),
        hub.ResponseEnd(),
    ]


def test_seed_001_claude_example_is_reproduced_exactly():
    out = view(seed_hub_events({"mmsp": {"signature": "..."}}))
    expected = [
        {
            "role": "assistant",
            "event_type": kind,
            "content_items": [item],
            "usage_metadata": None,
            "finish_reason": None,
            "created_at": T0,
        }
        for kind, item in SEED_EXAMPLE
    ]
    expected.append(
        {
            "role": "assistant",
            "event_type": "stop",
            "content_items": [],
            "usage_metadata": {
                "cached_tokens": None,
                "prompt_tokens": 10,
                "thoughts_tokens": None,
                "response_tokens": 5,
            },
            "finish_reason": "tool_call",
            "created_at": T0,
        }
    )
    assert [e.to_dict() for e in out] == expected
    assert grammar_violations(out) == []


def test_a_vendor_signature_keeps_its_namespace():
    out = view(seed_hub_events({"anthropic-messages": {"signature": "EqQB"}}))
    assert items(out)[2] == {
        "type": "thinking.delta",
        "thinking": "",
        "fidelity": {"anthropic-messages": {"signature": "EqQB"}},
    }
    assert items(out)[3]["fidelity"] == {"anthropic-messages": {"signature": "EqQB"}}


def test_json_shapes_round_trip_through_from_dict():
    for item in (
        Text("a"),
        Text("a", done=True, fidelity={"x": 1}),
        Thinking("t"),
        ToolCall("f", '{"a"', "c1"),
        ToolCall("f", {"a": 1}, "c1", done=True),
        InlineData(b"\x00\x01", "audio/L16"),
        InlineThinking(b"zz", "image/png", done=True),
        Embedding([0.5, 1.0]),
        Embedding([0.5], done=True),
        ImageUrl("https://x/y.png"),
        ToolResult("ok", "c1", ["https://x/y.png"]),
    ):
        assert item_from_dict(json.loads(json.dumps(item.to_dict()))) == item
    assert InlineData(b"hi", "image/png").to_dict() == {
        "type": "inline_data.delta",
        "data": "aGk=",
        "mime_type": "image/png",
    }
    for event in view(seed_hub_events({"mmsp": {"signature": "s"}})):
        assert UniEvent.from_dict(json.loads(json.dumps(event.to_dict()))) == event
    with pytest.raises(ValueError):
        item_from_dict({"type": "video.delta"})
    with pytest.raises(ValueError):
        UniEvent.from_dict({"event_type": "start"})


def test_assemble_message_is_the_done_items_with_usage_and_finish():
    out = view(seed_hub_events({"mmsp": {"signature": "s"}}))
    message = assemble_message(out)
    assert [i.type for i in message.content_items] == ["thinking.done", "tool_call.done"]
    assert message.thinking == "Let me check"
    assert message.tool_calls[0].arguments == {"location": "Paris"}
    assert message.finish_reason == "tool_call" and message.usage_metadata.prompt_tokens == 10
    assert assemble_message([e.to_dict() for e in out]).to_dict() == message.to_dict()


# --------------------------------------------------------------------------- tool-call arguments


@pytest.mark.parametrize(
    "arguments",
    ['{"location": ', '{"a": 1', "[1, 2]", '"Paris"', "42", "{bad json}", "null"],
    ids=["cut-short", "unclosed", "array", "string", "number", "malformed", "null"],
)
def test_arguments_that_are_not_an_object_raise_in_place_of_the_done(arguments):
    events = [
        hub.ResponseStart(),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "Hi"),
        hub.BlockStop(0),
        hub.BlockStart(1, "tool_call", id="toolu_1", name="get_weather"),
        hub.Delta(1, arguments),
        hub.BlockStop(1),
        hub.Finish("tool_use"),
        hub.ResponseEnd(),
    ]
    v = UniEventView(clock)
    seen: list[UniEvent] = []
    with pytest.raises(ToolCallArgumentParseError) as info:
        for event in events:
            seen.extend(v.feed(event))
    assert info.value.name == "get_weather" and info.value.tool_call_id == "toolu_1"
    assert info.value.arguments == arguments
    assert [i.type for i in info.value.partial.content_items] == ["text.done"]
    # everything before the exception was delivered, and no stop follows it
    assert [i["type"] for i in items(seen)] == ["text.delta", "text.done", "tool_call.delta", "tool_call.delta"]
    assert v.feed(hub.ResponseEnd()) == [] and v.close() == []


def test_empty_arguments_mean_an_empty_object():
    out = view(
        [
            hub.ResponseStart(),
            hub.BlockStart(0, "tool_call", id="c", name="now"),
            hub.BlockStop(0),
            hub.Finish("tool_use"),
            hub.ResponseEnd(),
        ]
    )
    assert items(out) == [
        {"type": "tool_call.delta", "name": "now", "arguments": "", "tool_call_id": "c"},
        {"type": "tool_call.done", "name": "now", "arguments": {}, "tool_call_id": "c"},
    ]


def test_an_exception_after_events_of_the_same_feed_is_raised_at_the_next_call():
    v = UniEventView(clock)
    v.feed(hub.ResponseStart())
    v.feed(hub.BlockStart(0, "text"))
    v.feed(hub.Delta(0, "a"))
    v.feed(hub.BlockStart(1, "tool_call", id="c", name="f"))
    v.feed(hub.Delta(1, "[1]"))
    v.feed(hub.BlockStop(1))
    out = v.feed(hub.BlockStop(0))  # ends the text, releases the waiting call, which fails
    assert [i["type"] for i in items(out)] == ["text.done", "tool_call.delta"]
    with pytest.raises(ToolCallArgumentParseError):
        v.feed(hub.ResponseEnd())


# --------------------------------------------------------------------------- errors and ends


def test_a_hub_error_raises_upstream_error_with_the_partial_message():
    v = UniEventView(clock)
    out = []
    events = [
        hub.ResponseStart(),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "Hel"),
        hub.BlockStop(0),
        hub.BlockStart(1, "text"),
        hub.Delta(1, "lo"),
        hub.Error("overloaded", "overloaded", status=529, body={"type": "overloaded_error"}),
        hub.ResponseEnd(),
    ]
    with pytest.raises(UpstreamError) as info:
        for e in events:
            out.extend(v.feed(e))
    assert info.value.type == "overloaded" and info.value.status == 529
    assert info.value.body == {"type": "overloaded_error"}
    assert info.value.partial.text == "Hello"  # the text cut off comes along
    assert all(e.event_type == "delta" for e in out)


def test_truncation_raises_incomplete_stream_never_a_stop():
    with pytest.raises(IncompleteStreamError):
        view(
            [
                hub.ResponseStart(),
                hub.BlockStart(0, "text"),
                hub.Delta(0, "a"),
                hub.Error("cut", "incomplete_stream"),
                hub.ResponseEnd(),
            ]
        )
    v = UniEventView(clock)
    out = v.feed(hub.ResponseStart()) + v.feed(hub.BlockStart(0, "text")) + v.feed(hub.Delta(0, "a"))
    with pytest.raises(IncompleteStreamError) as info:
        v.close()
    assert "stop" not in [e.event_type for e in out]
    assert info.value.partial.content_items == [Text("a", done=True)]


def test_finish_reasons_map_and_keep_the_hub_word():
    def stop_for(finish: hub.Finish, tool: bool = False) -> UniEvent:
        blocks = [hub.BlockStart(0, "tool_call", id="c", name="f"), hub.BlockStop(0)] if tool else []
        return view([hub.ResponseStart(), *blocks, finish, hub.ResponseEnd()])[-1]

    assert stop_for(hub.Finish("end_turn", raw="stop")).finish_reason == "stop"
    assert stop_for(hub.Finish("max_tokens", raw="length")).finish_reason == "length"
    assert stop_for(hub.Finish("tool_use", raw="tool_calls")).finish_reason == "tool_call"
    # a source that says "stop" after calling tools still asked for tools
    assert stop_for(hub.Finish("end_turn", raw="stop"), tool=True).finish_reason == "tool_call"
    filtered = stop_for(hub.Finish("content_filter", raw="SAFETY"))
    assert filtered.finish_reason == "unknown"
    assert filtered.llmbridge["finish"] == {"reason": "content_filter", "raw": "SAFETY"}
    assert stop_for(hub.Finish("stop_sequence", raw="stop_sequence", stop_sequence="##")).llmbridge["finish"] == {
        "reason": "stop_sequence",
        "raw": "stop_sequence",
        "stop_sequence": "##",
    }
    missing = view([hub.ResponseStart(), hub.ResponseEnd()])[-1]
    assert missing.finish_reason == "unknown" and missing.usage_metadata == UsageMetadata()


def test_usage_semantics():
    u = hub.Usage(input_tokens=100, output_tokens=30, cache_read_tokens=60, cache_write_tokens=5, reasoning_tokens=10)
    meta = UsageMetadata.from_hub(u)
    assert meta.to_dict() == {"cached_tokens": 60, "prompt_tokens": 100, "thoughts_tokens": 10, "response_tokens": 20}
    back = meta.to_hub()
    assert (back.input_tokens, back.output_tokens, back.cache_read_tokens, back.reasoning_tokens) == (100, 30, 60, 10)
    stop = view([hub.ResponseStart(), hub.Usage(input_tokens=1), u, hub.ResponseEnd()])[-1]
    assert stop.usage_metadata == meta and stop.llmbridge["usage"] == {"cache_write_tokens": 5}


def test_native_blocks_and_annotations_are_carried_not_dropped():
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    citation = {"type": "web_search_result_location", "url": "https://example.com"}
    out = view(
        [
            hub.ResponseStart(id="msg_1", model="claude"),
            hub.BlockStart(0, "native", id="srvtoolu_1", name="web_search", extensions={"anthropic-messages": server}),
            hub.Delta(0, '{"query": "x"}'),
            hub.BlockStop(0),
            hub.BlockStart(1, "text"),
            hub.Delta(1, "See"),
            hub.Extension("anthropic-messages", citation, 1),
            hub.BlockStop(1),
            hub.Extension("openai-chat", {"logprobs": []}),
            hub.ResponseEnd(),
        ]
    )
    assert grammar_violations(out) == []
    assert out[0].llmbridge == {"response": {"id": "msg_1", "model": "claude"}}
    native = items(out)[1]
    assert native["type"] == "text.done" and native["text"] == ""
    assert native["fidelity"]["llmbridge"]["block"] == {
        "kind": "native",
        "id": "srvtoolu_1",
        "name": "web_search",
        "extensions": {"anthropic-messages": server},
        "text": '{"query": "x"}',
    }
    text_done = items(out)[-1]
    assert text_done["fidelity"] == {
        "llmbridge": {"annotations": [{"namespace": "anthropic-messages", "data": citation}]}
    }
    assert out[-1].llmbridge["annotations"] == [{"namespace": "openai-chat", "data": {"logprobs": []}}]


def test_other_choices_travel_as_carried_blocks():
    out = view(
        [
            hub.ResponseStart(),
            hub.BlockStart(0, "text"),
            hub.BlockStart(1, "text", choice=1),
            hub.Delta(1, "B"),
            hub.Delta(0, "A"),
            hub.BlockStop(0),
            hub.BlockStop(1),
            hub.Finish("end_turn"),
            hub.Finish("max_tokens", choice=1),
            hub.ResponseEnd(),
        ]
    )
    message = assemble_message(out)
    assert message.text == "A"
    assert message.content_items[1].fidelity["llmbridge"]["block"]["choice"] == 1
    assert out[-1].llmbridge["finishes"] == [{"reason": "max_tokens", "choice": 1}]


# --------------------------------------------------------------------------- the corpus


def corpus_cases():
    cases = []
    for folder in ("anthropic-messages", "openai-chat", "openai-responses", "gemini"):
        try:
            module = importlib.import_module(f"llmbridge.dialects.{folder.replace('-', '_')}")
            decoder = module.StreamDecoder
            files = corpus_files(folder)
        except (ImportError, AttributeError, FileNotFoundError):
            continue  # that dialect has not landed yet
        cases += [pytest.param(decoder, f, id=f"{folder}/{f.name}") for f in files]
    # the standard has no captured corpus; its fixtures live with the tests
    local = sorted((Path(__file__).parent / "data" / "llm-stream").glob("*.sse"))
    if local and importlib.util.find_spec("llmbridge.dialects.llm_stream"):
        decoder = importlib.import_module("llmbridge.dialects.llm_stream").StreamDecoder
        cases += [pytest.param(decoder, f, id=f"llm-stream/{f.name}") for f in local]
    return cases


@pytest.mark.parametrize(("decoder", "path"), corpus_cases())
def test_every_corpus_stream_viewed_as_unievents_follows_the_grammar(decoder, path):
    events = decode_all(decoder(), path.read_bytes())
    source = hub.assemble(events)
    v = UniEventView(clock)
    out: list[UniEvent] = []
    failure = None
    for event in events:
        produced, failure = v.step(event)
        out.extend(produced)
        if failure is not None:
            break
    if failure is None:
        assert grammar_violations(out) == []
        message = assemble_message(out)
        blocks = source.choice_blocks(0)
        assert message.text == "".join(b.text for b in blocks if b.kind == "text")
        assert message.thinking == "".join(b.text for b in blocks if b.kind == "thinking")
        assert [c.tool_call_id for c in message.tool_calls] == [b.id for b in blocks if b.kind == "tool_call"]
        return
    # a stream ends with an exception only where the source failed or sent unusable arguments
    if isinstance(failure, ToolCallArgumentParseError):
        with pytest.raises(ValueError):
            parsed = json.loads(failure.arguments)
            if not isinstance(parsed, dict):
                raise ValueError("not an object")
    else:
        assert source.error is not None
    assert "stop" not in [e.event_type for e in out]
    assert [p for p in grammar_violations(out) if "stop" not in p] == []
