"""Every entry of every dialect's finish-reason and usage maps, pinned from outside.

The corpus holds few finish words (end_turn, tool_use, max_tokens, pause_turn ...), so the
translation matrix cannot notice a wrong entry for the others.  Here:

- every one of the standard's stop_reasons goes through each dialect's encoder and is read
  by that dialect's SDK, which must show the word of the reader's lossy table (``SHOWS``),
  with the usage counts the standard means (all prompt tokens, all generated tokens);
- every finish word of each dialect, in a small hand-written wire body, goes through our
  decoder, which must give the stop_reason of the reader's hand-written table (``REASON``)
  and the usage the wire body states.

The tables are the readers' own (tests/readers), written from the vendors' documentation:
none is imported from llmbridge, so a wrong map entry cannot agree with itself.  `make
mutate` (tests/mutate.py) checks that each entry is pinned.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable

import pytest

from llmbridge import dialects, hub
from llmbridge.dialects.base import decode_all, encode_all
from llmbridge.dialects.eventstream import encode_frame
from tests.readers import Summary, reader, sources

ALL = dialects.NAMES + dialects.MORE_NAMES
USAGE = hub.Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4, reasoning_tokens=2)


def read(dialect: str, body: bytes) -> Summary:
    """``body`` read by ``dialect``'s SDK."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if dialect in sources.SHOWS:
            return {
                "cohere-v2": sources.read_cohere,
                "bedrock-converse": sources.read_bedrock,
                "gemini-interactions": sources.read_interactions,
            }[dialect](body)
        return reader(dialect).read(body)


def shows(dialect: str) -> dict[str, str]:
    return sources.SHOWS[dialect] if dialect in sources.SHOWS else reader(dialect).SHOWS


def reasons(dialect: str) -> dict[str, str]:
    return sources.REASONS[dialect] if dialect in sources.REASONS else reader(dialect).REASON


# ----------------------------------------------------------------------------- encoders


@pytest.mark.parametrize("reason", hub.FINISH_REASONS)
@pytest.mark.parametrize("dialect", ALL)
def test_the_sdk_shows_the_lossy_tables_word(dialect, reason):
    events = [
        hub.ResponseStart("r", "m"),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "hi"),
        hub.BlockStop(0),
        USAGE,
        hub.Finish(reason),
        hub.ResponseEnd(),
    ]
    got = read(dialect, encode_all(dialects.get(dialect).StreamEncoder(), events))
    assert got.stop == shows(dialect)[reason]
    assert (got.input_tokens, got.output_tokens) == (10, 5)


def test_every_lossy_table_covers_every_reason():
    for dialect in ALL:
        assert set(shows(dialect)) == set(hub.FINISH_REASONS), dialect


# ----------------------------------------------------------------------------- decoders
# One small wire body per dialect, hand-written after the vendor's documentation, with the
# finish word W: 10 prompt tokens of which 4 cached, 5 generated of which 2 reasoning.


def _sse(*objects: dict, named: bool = False) -> bytes:
    out = []
    for obj in objects:
        head = f"event: {obj.get('type') or obj.get('event_type')}\n" if named else ""
        out.append(f"{head}data: {json.dumps(obj)}\n\n")
    return "".join(out).encode()


def anthropic(word: str) -> bytes:
    return _sse(
        {
            "type": "message_start",
            "message": {
                "id": "m1",
                "type": "message",
                "role": "assistant",
                "model": "c",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 6, "cache_read_input_tokens": 4, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": word}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
        named=True,
    )


def openai_chat(word: str) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "g"}
    return (
        _sse(
            {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": word}]},
            {
                **chunk,
                "choices": [],
                "usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": 5,
                    "total_tokens": 15,
                    "prompt_tokens_details": {"cached_tokens": 4},
                    "completion_tokens_details": {"reasoning_tokens": 2},
                },
            },
        )
        + b"data: [DONE]\n\n"
    )


def openai_responses(word: str) -> bytes:
    status, _, why = word.partition(":")
    message = {
        "id": "msg_1",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "hi", "annotations": []}],
    }
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "g",
        "output": [],
        "status": "in_progress",
    }
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 15,
    }
    end = {
        **response,
        "status": status,
        "output": [message],
        "usage": usage,
        "incomplete_details": {"reason": why} if why else None,
        "error": {"code": "server_error", "message": "failed"} if status == "failed" else None,
    }
    terminal = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
    return _sse(
        {"type": "response.created", "sequence_number": 0, "response": response},
        {
            "type": "response.output_item.added",
            "sequence_number": 1,
            "output_index": 0,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 2,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "hi",
        },
        {"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": message},
        {"type": terminal[status], "sequence_number": 4, "response": end},
        named=True,
    )


def gemini(word: str) -> bytes:
    return _sse(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "index": 0}]},
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "!"}]}, "finishReason": word, "index": 0}],
            "usageMetadata": {
                "promptTokenCount": 10,
                "cachedContentTokenCount": 4,
                "candidatesTokenCount": 3,
                "thoughtsTokenCount": 2,
                "totalTokenCount": 15,
            },
        },
    )


def llm_stream(word: str) -> bytes:
    events = [
        {"type": "stream.start", "id": "s1", "model": "m"},
        {"type": "content.delta", "index": 0, "role": "assistant", "delta": {"text": "hi"}},
        {"type": "usage", "input_tokens": 10, "output_tokens": 5},
        {"type": "content.stop", "index": 0, "stop_reason": word},
        {"type": "stream.end"},
    ]
    return _sse(*({"v": "1.0", "seq": n, **e} for n, e in enumerate(events)), named=True)


def mmsp(word: str) -> bytes:
    base = {"role": "assistant", "usage_metadata": None, "finish_reason": None, "created_at": 1}
    return (
        _sse(
            {**base, "event_type": "delta", "content_items": [{"type": "text.delta", "text": "hi"}]},
            {**base, "event_type": "delta", "content_items": [{"type": "text.done", "text": "hi"}]},
            {
                **base,
                "event_type": "stop",
                "content_items": [],
                "finish_reason": word,
                "usage_metadata": {"cached_tokens": 4, "prompt_tokens": 10, "thoughts_tokens": 2, "response_tokens": 3},
            },
        )
        + b"data: [DONE]\n\n"
    )


def cohere(word: str) -> bytes:
    return _sse(
        {"id": "c1", "type": "message-start", "delta": {"message": {"role": "assistant"}}},
        {"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "text", "text": ""}}}},
        {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "hi"}}}},
        {"type": "content-end", "index": 0},
        {
            "type": "message-end",
            "delta": {"finish_reason": word, "usage": {"tokens": {"input_tokens": 10, "output_tokens": 5}}},
        },
        named=True,
    )


def bedrock(word: str) -> bytes:
    def frame(kind: str, payload: dict) -> bytes:
        headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
        return encode_frame(headers, json.dumps(payload).encode())

    return b"".join(
        [
            frame("messageStart", {"role": "assistant"}),
            frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}}),
            frame("contentBlockStop", {"contentBlockIndex": 0}),
            frame("messageStop", {"stopReason": word}),
            frame(
                "metadata",
                {
                    "usage": {"inputTokens": 6, "cacheReadInputTokens": 4, "outputTokens": 5, "totalTokens": 15},
                    "metrics": {"latencyMs": 1},
                },
            ),
        ]
    )


def interactions(word: str) -> bytes:
    return _sse(
        {
            "interaction": {"id": "i1", "status": "in_progress", "object": "interaction", "model": "g"},
            "event_type": "interaction.created",
        },
        {"index": 0, "step": {"type": "model_output"}, "event_type": "step.start"},
        {"index": 0, "delta": {"text": "hi", "type": "text"}, "event_type": "step.delta"},
        {"index": 0, "event_type": "step.stop"},
        {
            "interaction": {
                "id": "i1",
                "status": word,
                "object": "interaction",
                "model": "g",
                "usage": {
                    "total_input_tokens": 10,
                    "total_cached_tokens": 4,
                    "total_output_tokens": 3,
                    "total_thought_tokens": 2,
                },
            },
            "event_type": "interaction.completed",
        },
    )


WIRE: dict[str, Callable[[str], bytes]] = {
    "anthropic-messages": anthropic,
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "gemini": gemini,
    "llm-stream": llm_stream,
    "mmsp": mmsp,
    "cohere-v2": cohere,
    "bedrock-converse": bedrock,
    "gemini-interactions": interactions,
}
# Words whose meaning is more than a finish reason: a failed response is an error event.
FAILS = {("openai-responses", "failed")}
# Words of Gemini's that the readers' table leaves to "other"
GEMINI_OTHERS = ("OTHER", "LANGUAGE", "FINISH_REASON_UNSPECIFIED")
WORDS = [(d, w) for d in ALL for w in reasons(d)] + [("gemini", w) for w in GEMINI_OTHERS]


@pytest.mark.parametrize(("dialect", "word"), WORDS, ids=[f"{d}-{w}" for d, w in WORDS])
def test_the_decoder_reads_each_finish_word_and_the_usage(dialect, word):
    events = decode_all(dialects.get(dialect).StreamDecoder(), WIRE[dialect](word))
    r = hub.assemble(events)
    if (dialect, word) in FAILS:
        assert r.error is not None
        return
    assert r.error is None and r.finish is not None
    assert r.finish.reason == reasons(dialect).get(word, "other")
    assert r.finish.raw in (word, word.partition(":")[2], None)
    assert (r.usage.input_tokens, r.usage.output_tokens) == (10, 5)


@pytest.mark.parametrize("dialect", ALL)
def test_the_decoder_counts_cached_and_reasoning_tokens_where_the_wire_says(dialect):
    word = next(iter(reasons(dialect)))
    r = hub.assemble(decode_all(dialects.get(dialect).StreamDecoder(), WIRE[dialect](word)))
    said_cached = dialect not in ("llm-stream", "cohere-v2")  # those bodies above state no cached count
    said_reasoning = dialect in ("openai-chat", "openai-responses", "gemini", "mmsp", "gemini-interactions")
    assert r.usage.cache_read_tokens == (4 if said_cached else None)
    assert r.usage.reasoning_tokens == (2 if said_reasoning else None)


# ----------------------------------------------------------------------------- word x target
# The corpus has no Gemini MAX_TOKENS, no Cohere STOP_SEQUENCE ...: each vendor word above,
# translated into every target and read by the target's SDK, completes the translation matrix.

SOURCE_WORDS = [(d, w) for d, w in WORDS if (d, w) not in FAILS]
# Words not written back even within their own dialect: the SDK shows these instead.
NOT_KEPT = {
    ("openai-chat", "function_call"): "tool_calls",  # the legacy word; calls go out as tool_calls deltas
    ("gemini", "FINISH_REASON_UNSPECIFIED"): "OTHER",  # "unspecified" is no reason to repeat
}


def shown(source: str, word: str, target: str) -> str:
    """The word the target's SDK shows for ``word`` of ``source``: the word itself within its
    dialect, or where the target has the same word with the same meaning (Bedrock's and
    Anthropic's model_context_window_exceeded); else the target's lossy table."""
    stop_reason = reasons(source).get(word, "other")
    if (source, word) in NOT_KEPT:
        return NOT_KEPT[source, word] if target == source else shows(target)[stop_reason]
    if target == source or reasons(target).get(word) == stop_reason:
        return word
    return shows(target)[stop_reason]


@pytest.mark.parametrize("target", dialects.NAMES)
@pytest.mark.parametrize(("source", "word"), SOURCE_WORDS, ids=[f"{d}-{w}" for d, w in SOURCE_WORDS])
def test_each_finish_word_reads_right_in_every_target(source, word, target):
    events = decode_all(dialects.get(source).StreamDecoder(), WIRE[source](word))
    got = read(target, encode_all(dialects.get(target).StreamEncoder(), events))
    assert got.stop == shown(source, word, target), f"{source} {word!r} as {target}"
    assert (got.input_tokens, got.output_tokens) == (10, 5)


# ----------------------------------------------------------------------------- our own extension
# What a dialect cannot say travels under our "llmbridge" key: our own decoder gets it back
# whole, even where the SDK shows only the lossy word (above).


@pytest.mark.parametrize("reason", hub.FINISH_REASONS)
@pytest.mark.parametrize("dialect", ALL)
def test_the_extension_brings_every_reason_and_unknown_count_back(dialect, reason):
    usage = hub.Usage(input_tokens=None, output_tokens=7, cache_read_tokens=None, reasoning_tokens=3)
    events = [
        hub.ResponseStart("r", "m"),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "hi"),
        hub.BlockStop(0),
        usage,
        hub.Finish(reason),
        hub.ResponseEnd(),
    ]
    codec = dialects.get(dialect)
    back = hub.assemble(decode_all(codec.StreamDecoder(), encode_all(codec.StreamEncoder(), events)))
    assert back.finish is not None and back.finish.reason == reason
    assert (back.usage.input_tokens, back.usage.output_tokens, back.usage.reasoning_tokens) == (None, 7, 3)


# ----------------------------------------------------------------------------- usage details
# Counts the 10/5 bodies above do not reach: cache writes, xAI's reasoning outside
# completion_tokens, DeepSeek's cache-hit field.  Each decoded by us (hub counts written by
# hand from the vendor's documentation), then written back and read by the dialect's SDK.


def _anthropic_usage(start: dict, end: dict) -> bytes:
    body = anthropic("end_turn").decode()
    body = body.replace(
        '"usage": {"input_tokens": 6, "cache_read_input_tokens": 4, "output_tokens": 1}',
        '"usage": ' + json.dumps(start),
    )
    return body.replace('"usage": {"output_tokens": 5}', '"usage": ' + json.dumps(end)).encode()


def _chat_usage(usage: dict) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "g"}
    return (
        _sse(
            {
                **chunk,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            },
            {**chunk, "choices": [], "usage": usage},
        )
        + b"data: [DONE]\n\n"
    )


USAGE_CASES = {
    "anthropic-cache-write": (
        "anthropic-messages",
        _anthropic_usage(
            {"input_tokens": 6, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 3, "output_tokens": 1},
            {"output_tokens": 5},
        ),
        hub.Usage(input_tokens=13, output_tokens=5, cache_read_tokens=4, cache_write_tokens=3),
        (13, 5),
    ),
    "anthropic-final-input-on-message-delta": (
        "anthropic-messages",
        _anthropic_usage(
            {"input_tokens": 0, "output_tokens": 1},
            {"input_tokens": 6, "cache_read_input_tokens": 4, "output_tokens": 5},
        ),
        hub.Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4, cache_write_tokens=None),
        (10, 5),
    ),
    "anthropic-no-cache-fields": (
        "anthropic-messages",
        _anthropic_usage({"input_tokens": 10, "output_tokens": 1}, {"output_tokens": 5}),
        hub.Usage(input_tokens=10, output_tokens=5),
        (10, 5),
    ),
    "anthropic-only-cache-reads": (
        "anthropic-messages",
        _anthropic_usage({"cache_read_input_tokens": 10, "output_tokens": 1}, {"output_tokens": 5}),
        hub.Usage(input_tokens=10, output_tokens=5, cache_read_tokens=10),
        (10, 5),
    ),
    "anthropic-only-cache-writes": (
        "anthropic-messages",
        _anthropic_usage({"cache_creation_input_tokens": 10, "output_tokens": 1}, {"output_tokens": 5}),
        hub.Usage(input_tokens=10, output_tokens=5, cache_write_tokens=10),
        (10, 5),
    ),
    "openai-chat-xai-reasoning-outside-completion": (
        "openai-chat",
        _chat_usage(
            {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "total_tokens": 15,
                "completion_tokens_details": {"reasoning_tokens": 2},
            }
        ),
        hub.Usage(input_tokens=10, output_tokens=5, reasoning_tokens=2, total_tokens=15),
        (10, 5),
    ),
    "openai-chat-reasoning-inside-completion": (
        "openai-chat",
        _chat_usage(
            {
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "total_tokens": 15,
                "completion_tokens_details": {"reasoning_tokens": 2},
            }
        ),
        hub.Usage(input_tokens=10, output_tokens=5, reasoning_tokens=2, total_tokens=15),
        (10, 5),
    ),
    "openai-chat-deepseek-cache-hit": (
        "openai-chat",
        _chat_usage({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "prompt_cache_hit_tokens": 4}),
        hub.Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4, total_tokens=15),
        (10, 5),
    ),
    "openai-chat-cache-write": (
        "openai-chat",
        _chat_usage(
            {
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "total_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 3},
            }
        ),
        hub.Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4, cache_write_tokens=3, total_tokens=15),
        (10, 5),
    ),
}


@pytest.mark.parametrize("case", list(USAGE_CASES))
def test_usage_details_decode_and_come_back(case):
    dialect, body, want, shown = USAGE_CASES[case]
    codec = dialects.get(dialect)
    usage = hub.assemble(decode_all(codec.StreamDecoder(), body)).usage
    counts = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
    assert [getattr(usage, c) for c in counts] == [getattr(want, c) for c in counts]
    if want.total_tokens is not None:
        assert usage.total_tokens == want.total_tokens
    again = encode_all(codec.StreamEncoder(), decode_all(codec.StreamDecoder(), body))
    back = hub.assemble(decode_all(codec.StreamDecoder(), again)).usage
    assert [getattr(back, c) for c in counts] == [getattr(usage, c) for c in counts]
    got = read(dialect, again)
    assert (got.input_tokens, got.output_tokens) == shown
