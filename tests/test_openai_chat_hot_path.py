"""The openai-chat decoder's hot path gives exactly what its general path gives.

The hot path (``StreamDecoder._hot``) handles the usual chunk -- one more fragment for an open
block -- without the general ``on_event``.  These tests decode the same bytes with it and with
it switched off, and compare every hub event and violation: over the corpus, and over
generated streams that mix the shapes the hot path takes with the ones it must leave alone.
"""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.dialects.openai_chat._decoder import StreamDecoder

from .conftest import corpus_files


class _GeneralOnly(StreamDecoder):
    def _hot(self, event):  # type: ignore[no-untyped-def]
        return False


def _decode(cls: type[StreamDecoder], body: bytes, size: int | None) -> tuple[list, list]:
    decoder = cls()
    events = []
    pieces = [body] if size is None else [body[i : i + size] for i in range(0, len(body), size)]
    for piece in pieces:
        events += decoder.feed(piece)
    events += decoder.close()
    return events, decoder.violations


def _same(body: bytes, size: int | None = None) -> None:
    assert _decode(StreamDecoder, body, size) == _decode(_GeneralOnly, body, size)


@pytest.mark.parametrize("path", corpus_files("openai-chat"), ids=lambda p: p.stem)
def test_corpus_hot_path_is_the_general_path(path):
    body = path.read_bytes()
    _same(body)
    _same(body, 61)


def test_the_hot_path_takes_the_usual_chunks():
    """(else the comparisons above would pass with a hot path that never runs)"""
    taken = []

    class Counting(StreamDecoder):
        def _hot(self, event):  # type: ignore[no-untyped-def]
            handled = super()._hot(event)
            taken.append(handled)
            return handled

    for path in corpus_files("openai-chat"):
        _decode(Counting, path.read_bytes(), None)
    assert sum(taken) > 0.8 * len(taken)


_TEXT = st.sampled_from(
    ["Hi", "", " there", "<think>", "</think>", "a<", "/think>", "<th", "ink>", "x\n", "<", " ", " <think>", "\n<th"]
)


def _chunk(choice: dict, **top: object) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
        **top,
    }


_CHOICE = st.one_of(
    st.builds(lambda t: {"index": 0, "delta": {"content": t}, "finish_reason": None}, _TEXT),
    st.builds(lambda t: {"index": 0, "delta": {"content": t}, "logprobs": None, "text": t, "seed": None}, _TEXT),
    st.builds(lambda t: {"index": 0, "delta": {"reasoning_content": t, "content": None}}, _TEXT),
    st.builds(lambda t: {"index": 0, "delta": {"reasoning": t, "channel": "analysis"}}, _TEXT),
    st.builds(lambda t: {"index": 0, "delta": {"refusal": t}}, _TEXT),
    st.builds(lambda t: {"index": 0, "delta": {"content": t, "reasoning_content": t}}, _TEXT),
    st.builds(
        lambda k, n: {"index": 0, "delta": {"tool_calls": [{"index": k, "id": f"c{n}", "function": {"name": "f"}}]}},
        st.integers(0, 1),
        st.integers(0, 3),
    ),
    st.builds(
        lambda k, a: {"index": 0, "delta": {"tool_calls": [{"index": k, "function": {"arguments": a}}]}},
        st.integers(0, 2),
        st.sampled_from(['{"a":', "1}", ""]),
    ),
    st.just({"index": 0, "delta": {"role": "assistant"}}),
    st.just({"index": 0, "delta": {}}),
    st.just({"index": 1, "delta": {"content": "second choice"}}),
    st.just({"index": 0, "delta": {"content": "x"}, "logprobs": {"content": [{"token": "x"}]}}),
    st.just({"index": 0, "delta": {}, "finish_reason": "stop"}),
    # finish chunks: the hot path takes those whose delta holds no fragment
    st.builds(
        lambda d, r: {"index": 0, "delta": d, "finish_reason": r, "logprobs": None},
        st.sampled_from([{}, {"role": "assistant"}, {"content": ""}, {"content": "x"}, {"tool_calls": []}]),
        st.sampled_from(["stop", "length", "tool_calls", "", "odd"]),
    ),
    st.just({"index": 1, "delta": {}, "finish_reason": "stop"}),
)

_CHUNK = st.one_of(
    st.builds(_chunk, _CHOICE),
    st.builds(lambda c, fp: _chunk(c, system_fingerprint=fp), _CHOICE, st.sampled_from(["fp_1", "fp_2", None])),
    st.builds(lambda c, p: _chunk(c, provider=p), _CHOICE, st.sampled_from(["A", "B"])),
    st.builds(lambda c: _chunk(c, usage={"prompt_tokens": 1, "completion_tokens": 2}), _CHOICE),
    st.just({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
    # usage chunks: the hot path takes ``choices: []`` with a usage object
    st.just({"id": "chatcmpl-1", "choices": [], "usage": {}}),
    st.just({"id": "chatcmpl-1", "choices": [], "usage": None}),
    st.just({"id": "chatcmpl-1", "choices": []}),
    st.builds(
        lambda fp: {"id": "chatcmpl-1", "choices": [], "system_fingerprint": fp, "usage": {"total_tokens": 9}},
        st.sampled_from(["fp_1", "fp_2"]),
    ),
    st.just({"choices": [], "usage": {"prompt_tokens": 1, "llmbridge": {"none": ["output_tokens"]}}}),
)


def _body(chunks: list[dict], done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + (["data: [DONE]\n\n"] if done else [])
    return "".join(lines).encode()


def _content(text: str) -> dict:
    return _chunk({"index": 0, "delta": {"content": text}})


_ROLE_ONLY = _chunk({"index": 0, "delta": {"role": "assistant"}})
_EMPTY = _chunk({"index": 0, "delta": {}})
_CALL = _chunk({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}})
_ARGS = {"index": 0, "function": {"arguments": "{}"}}


@pytest.mark.parametrize(
    "chunks",
    [
        [_ROLE_ONLY, _content("<th"), _ROLE_ONLY, _content("x")],  # held tag text: a role-only delta flushes it
        [_ROLE_ONLY, _content("<th"), _EMPTY, _content("ink>a</th"), _EMPTY, _content("ink>b")],
        [_ROLE_ONLY, _content("<think>"), _content("a"), _content("b<"), _content("/think>c"), _content("d")],
        [_ROLE_ONLY, _content("<think>a"), _chunk({"index": 0, "delta": {"reasoning_content": "r"}})],
        [_ROLE_ONLY, _content("<th"), _chunk({"index": 0, "delta": {"reasoning_content": "r"}})],
        [_ROLE_ONLY, _content("<th"), _chunk({"index": 0, "delta": {"refusal": "no"}})],
        [
            _ROLE_ONLY,
            _content("<think>a"),
            _CALL,
            _content("b</th"),
            _chunk({"index": 0, "delta": {"tool_calls": [_ARGS]}}),
        ],
        [_ROLE_ONLY, _content("a"), _chunk({"index": 0, "delta": {"content": "b"}}, system_fingerprint="fp_2")],
        [_ROLE_ONLY, _content("a"), _chunk({"index": 0, "delta": {"refusal": "no"}}), _content("b")],
        # a choice's first text after the role chunk: only text that cannot begin a <think> tag
        # (nor be the space before one) opens the text block at once
        [_ROLE_ONLY, _content(" "), _content("<think>a</think>b")],
        [_ROLE_ONLY, _content("\n<think>"), _content("a")],
        [_ROLE_ONLY, _content("<"), _content("think>a")],
        [_ROLE_ONLY, _content("Hi"), _content("<think>a")],
    ],
)
def test_edge_streams_hot_path_is_the_general_path(chunks):
    _same(_body(chunks))


@settings(max_examples=150)
@given(st.lists(_CHUNK, max_size=14), st.booleans(), st.sampled_from([None, 5]))
def test_generated_streams_hot_path_is_the_general_path(chunks, done, size):
    _same(_body(chunks, done), size)


# First chunks: _hot_start takes the usual one (one choice, a delta of nothing or text, at most
# one extra) and must leave every other shape to on_event before changing anything.  Every
# combination below is decoded both ways, and the events are also compared as JSON, which
# (unlike ==) sees the order of an extensions dict.
_FIRST_DELTAS = [
    {"role": "assistant", "content": ""},
    {"role": "assistant"},
    {},
    {"content": None, "role": "assistant"},
    {"role": "assistant", "content": "Hi"},
    {"content": "<think>a"},
    {"content": "<th"},
    {"role": "assistant", "reasoning_content": "r"},
    {"role": "assistant", "reasoning": "r", "channel": "analysis"},
    {"role": "assistant", "refusal": "no"},
    {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
    {"content": ["x"]},
]
_FIRST_CHOICES = [
    {"index": i, "delta": d, "finish_reason": r, "logprobs": None}
    for d in _FIRST_DELTAS
    for r in (None, "stop", "", "length")
    for i in (0, 1)
] + [
    {"index": 0, "delta": {"role": "assistant", "content": ""}, "text": "", "seed": None, "token_ids": None},
    {"index": 0, "delta": {"role": "assistant"}, "native_finish_reason": None},
    {"delta": {"role": "assistant", "content": ""}},
    {"index": True, "delta": {"role": "assistant", "content": ""}},
    {"index": 0},
    {"index": 0, "delta": {"content": "x"}, "extra": 1},
    {"index": 0, "delta": {"content": "x"}, "logprobs": {"content": [{"token": "x"}]}},
]
_FIRST_META = [
    {"id": "chatcmpl-1", "created": 1700000000, "model": "m"},
    {"id": "", "created": 0, "model": ""},
    {"id": None, "created": None, "model": None},
    {"id": 7, "created": True, "model": "m"},
    {"created": 1.5},
    {"id": "chatcmpl-1", "created": -3},
    {},
]
_FIRST_EXTRAS = [
    {},
    {"system_fingerprint": "fp_1"},
    {"service_tier": "default"},
    {"provider": "P"},
    {"system_fingerprint": None},
    {"service_tier": "default", "system_fingerprint": "fp_1"},
    {"system_fingerprint": "fp_1", "service_tier": "default"},
    {"provider": "P", "system_fingerprint": "fp_1"},
    {"provider": "P", "service_tier": "default", "system_fingerprint": "fp_1"},
    {"system_fingerprint": "fp_1", "provider": "P", "service_tier": "default"},
    {"service_tier": "default", "system_fingerprint": "fp\\1"},  # a backslash: order not told from the text
    {"service_tier": "system_fingerprint", "system_fingerprint": "fp_1"},  # the name twice
    {"service_tier": "default", "system_fingerprint": "fp_1", "x": {"provider": 1}},
    {"sla_metrics": {"ttft": 1}},
    {"sla_metrics": None},
    {"obfuscation": "abc"},
    {"usage": None},
    {"usage": {"prompt_tokens": 1}},
    {"citations": ["u"]},
    {"llmbridge": {"request_id": "r"}},
    {"service_tier": 3},
]
_FIRST_REST = [
    _content("a"),
    _chunk({"index": 0, "delta": {}, "finish_reason": "stop"}, system_fingerprint="fp_1"),
    {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
]


def _same_json(body: bytes, size: int | None = None) -> None:
    hot, general = _decode(StreamDecoder, body, size), _decode(_GeneralOnly, body, size)
    assert hot == general
    assert msgspec.json.encode(hot) == msgspec.json.encode(general)


@pytest.mark.parametrize("choice", _FIRST_CHOICES, ids=lambda c: json.dumps(c)[:60])
def test_first_chunks_hot_path_is_the_general_path(choice):
    for meta in _FIRST_META:
        for extras in _FIRST_EXTRAS:
            first = {"object": "chat.completion.chunk", **meta, "choices": [choice], **extras}
            _same_json(_body([first, *_FIRST_REST]))
    _same_json(_body([{"choices": [choice]}, *_FIRST_REST], done=False), 7)
    for other in ({"choices": []}, {"id": "x", "choices": [], "prompt_filter_results": [{"prompt_index": 0}]}):
        _same_json(_body([other, {"id": "x", "choices": [choice]}, *_FIRST_REST]))


@pytest.mark.parametrize(
    "text",
    [
        # the key's name elsewhere: in a Raw field, in content (escaped quotes), a key spelled with an escape
        '{"id":"c","object":{"system_fingerprint":1},"service_tier":"default","system_fingerprint":"fp",%s}',
        '{"id":"c","system_fingerprint":"fp","service_tier":"default",%s,"obfuscation":"\\"service_tier\\""}',
        '{"id":"c","system_fingerprint":"fp","service_tier":"default",%s}',
        '{"id":"c","service_tier":"default","system_fingerprint":"fp",%s}',
        '{"id":"c","service\\u005ftier":"default","system_fingerprint":"fp",%s,"object":{"service_tier":1}}',
        '{"id":"c","service_tier":"a","system_fingerprint":"fp","service_tier":"b",%s}',
        '{"id":"c", "provider": "P" ,"service_tier" : "default","system_fingerprint":"fp",%s}',
    ],
)
def test_first_chunk_extras_in_their_order(text):
    choice = '"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]'
    body = ("data: " + text % choice + "\n\n").encode() + _body([_content("a")])
    _same_json(body)


def test_the_hot_path_takes_the_usual_first_chunk():
    """(else the comparisons above would pass with a _hot_start that never takes one)"""
    taken = []

    class Counting(StreamDecoder):
        def _hot_start(self, data):  # type: ignore[no-untyped-def]
            handled = super()._hot_start(data)
            taken.append(handled)
            return handled

    role = _chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})
    for extra in ({}, {"system_fingerprint": "fp_1"}, {"service_tier": "default", "system_fingerprint": "fp_1"}):
        _decode(Counting, _body([{**role, **extra}, _content("Hi")]), None)
    assert taken == [True, True, True]
