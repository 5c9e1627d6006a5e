"""The hub's own helpers: the stream validator, the assembler, usage merging, status mapping."""

from __future__ import annotations

from llmbridge import hub


def test_validator_accepts_a_well_formed_stream_with_interleaved_blocks():
    events = [
        hub.ResponseStart("r", "m"),
        hub.BlockStart(0, "tool_call", "a", "f"),
        hub.BlockStart(1, "tool_call", "b", "g"),
        hub.Delta(0, '{"x"'),
        hub.Delta(1, "{}"),
        hub.Delta(0, ": 1}"),
        hub.BlockStop(1),
        hub.BlockStop(0),
        hub.Usage(3, 4),
        hub.Finish("tool_use"),
        hub.ResponseEnd(),
    ]
    assert hub.validate(events) == []
    r = hub.assemble(events)
    assert [(b.id, b.text) for b in r.blocks] == [("a", '{"x": 1}'), ("b", "{}")]
    assert r.complete and r.finish.reason == "tool_use"


def test_validator_names_each_broken_rule():
    cases = {
        "start-first": [hub.Delta(0, "x"), hub.ResponseEnd()],
        "block-open": [hub.ResponseStart(), hub.Delta(3, "x"), hub.ResponseEnd()],
        "block-unique": [
            hub.ResponseStart(),
            hub.BlockStart(0, "text"),
            hub.BlockStop(0),
            hub.BlockStart(0, "text"),
            hub.BlockStop(0),
            hub.ResponseEnd(),
        ],
        "finish-once": [hub.ResponseStart(), hub.Finish("end_turn"), hub.Finish("end_turn"), hub.ResponseEnd()],
        "error-last": [hub.ResponseStart(), hub.Error("x"), hub.Usage(1, 1), hub.ResponseEnd()],
        "blocks-closed": [hub.ResponseStart(), hub.BlockStart(0, "text"), hub.ResponseEnd()],
        "after-end": [hub.ResponseStart(), hub.ResponseEnd(), hub.Usage()],
        "end-last": [hub.ResponseStart()],
    }
    for rule, events in cases.items():
        assert rule in [v.rule for v in hub.validate(events)], rule


def test_an_error_may_leave_blocks_open_and_is_never_complete():
    events = [
        hub.ResponseStart(),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "par"),
        hub.Error("cut", "incomplete_stream"),
        hub.ResponseEnd(),
    ]
    assert hub.validate(events) == []
    r = hub.assemble(events)
    assert not r.complete and r.error.type == "incomplete_stream" and r.blocks[0].text == "par"


def test_usage_fields_replace_never_add():
    u = hub.merge_usage(None, hub.Usage(input_tokens=10, output_tokens=1))
    u = hub.merge_usage(u, hub.Usage(output_tokens=7, reasoning_tokens=2))
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens) == (10, 7, 2)


def test_fidelity_merges_from_start_and_stop():
    events = [
        hub.ResponseStart(),
        hub.BlockStart(0, "thinking", fidelity={"gemini": {"a": 1}}),
        hub.Delta(0, "t"),
        hub.BlockStop(0, fidelity={"gemini": {"b": 2}, "anthropic-messages": {"signature": "s"}}),
        hub.ResponseEnd(),
    ]
    block = hub.assemble(events).blocks[0]
    assert block.fidelity == {"gemini": {"a": 1, "b": 2}, "anthropic-messages": {"signature": "s"}}


def test_response_events_round_trip():
    events = [
        hub.ResponseStart("r", "m", 5),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "hi"),
        hub.BlockStop(0),
        hub.Usage(1, 2),
        hub.Finish("end_turn"),
        hub.ResponseEnd(),
    ]
    again = hub.response_events(hub.assemble(events))
    assert hub.validate(again) == []
    assert hub.assemble(again) == hub.assemble(events)


def test_status_mapping():
    assert [hub.error_type_for_status(s) for s in (400, 401, 404, 418, 429, 500, 502, 503, 504, 529, 599)] == [
        "invalid_request",
        "authentication",
        "not_found",
        "invalid_request",
        "rate_limit",
        "api_error",
        "api_error",
        "overloaded",
        "timeout",
        "overloaded",
        "api_error",
    ]
