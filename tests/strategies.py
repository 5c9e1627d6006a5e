"""Hypothesis strategies shared by the codec tests: hub streams, byte splits, garbage input.

``hub_streams()`` draws *valid* hub streams (``hub.validate`` finds nothing) of the shapes
real decoders produce: blocks of every kind, interleaved, on one or two choices, with
foreign fidelity and block annotations, usage, a finish, or an error cutting the stream
short.  Dialect test modules with stricter needs keep their own strategies (the openai-chat
one keeps same-choice text blocks from overlapping, for its SDK reader); anything generic
belongs here.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from llmbridge import hub

__all__ = ["KINDS", "garbage", "hub_streams", "split", "splits", "texts"]

KINDS = ("text", "thinking", "tool_call", "native", "data")

# Text a wire may carry: any Unicode scalar value (no lone surrogates, which UTF-8 cannot say).
texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)

_FIDELITY = st.sampled_from(
    [None, {"anthropic-messages": {"signature": "s"}}, {"gemini": {"thoughtSignature": "c2ln"}}]
)


@st.composite
def hub_streams(draw: st.DrawFn, kinds: tuple[str, ...] = KINDS, choices: int = 2, errors: bool = True) -> list:
    """A valid hub stream: up to five blocks of ``kinds`` over ``choices`` choices, their
    events interleaved (each block's own order kept); maybe usage, a finish, and (when
    ``errors``) an ``Error`` after any prefix of the body."""
    sequences = []
    for index in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(kinds))
        choice = draw(st.sampled_from([0, 0, 0, *range(1, choices)]))
        if kind == "tool_call":
            args = draw(st.dictionaries(st.sampled_from("abc"), st.integers(), max_size=2))
            text = json.dumps(args)
            cut = draw(st.integers(0, len(text)))
            chunks = [c for c in (text[:cut], text[cut:]) if c]
            start = hub.BlockStart(index, "tool_call", id=f"call_{index}", name="f", choice=choice)
        elif kind == "native":
            chunks = [json.dumps({"q": draw(texts)})]
            start = hub.BlockStart(
                index,
                "native",
                id=f"srv_{index}",
                name="web_search",
                choice=choice,
                extensions={"anthropic-messages": {"type": "server_tool_use"}},
            )
        elif kind == "data":
            chunks = ["iVBO", "Rw=="][: draw(st.integers(0, 2))]  # base64 fragments that join to base64
            start = hub.BlockStart(index, "data", choice=choice, mime_type="image/png")
        else:
            chunks = [c for c in draw(st.lists(texts, max_size=3)) if c]
            start = hub.BlockStart(index, kind, choice=choice)  # type: ignore[arg-type]
        fidelity = draw(_FIDELITY) if kind in ("text", "thinking") else None
        events: list = [start, *(hub.Delta(index, c) for c in chunks)]
        if draw(st.integers(0, 3)) == 0:
            events.append(hub.Extension("gemini", {"n": index}, index))
        events.append(hub.BlockStop(index, fidelity))
        sequences.append(events)
    body: list = []
    while any(sequences):
        pick = draw(st.sampled_from([s for s in sequences if s]))
        body.append(pick.pop(0))
    tail: list = []
    if draw(st.booleans()):
        tail.append(hub.Usage(draw(st.integers(0, 99)), draw(st.integers(0, 99))))
    if draw(st.booleans()):  # a turn ends every choice it ran (a wire's terminal rule may need each)
        for choice in sorted({0} | {e.choice for e in body if type(e) is hub.BlockStart}):
            tail.append(hub.Finish(draw(st.sampled_from(hub.FINISH_REASONS)), choice))
    if errors and draw(st.integers(0, 3)) == 0:
        cut = draw(st.integers(0, len(body)))
        body, tail = body[:cut], [hub.Error("it broke", draw(st.sampled_from(hub.ERROR_TYPES)))]
    return [hub.ResponseStart("resp_1", "m"), *body, *tail, hub.ResponseEnd()]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (taken modulo its length + 1, any order, repeats allowed)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# Cut points for split(): a few anywhere, the rest small so cuts also land inside a UTF-8
# character or a CRLF.
splits = st.lists(st.integers(0, 1 << 20) | st.integers(0, 64), max_size=16)

# Input no decoder may raise on: random bytes, and wire-shaped pieces glued at random
# (SSE fields, JSON of the wrong shapes, half objects, the terminal markers too early).
_PIECES = st.sampled_from(
    [
        b"data: ",
        b"event: ",
        b"id: 1",
        b"retry: x",
        b": comment",
        b"\n",
        b"\r\n",
        b"\n\n",
        b"[DONE]",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b'"type":',
        b'"message_start"',
        b'"content_block_delta"',
        b'"response.completed"',
        b'"candidates":',
        b'"choices":',
        b'"delta":',
        b'"index":',
        b"null",
        b"1",
        b"-1",
        b'"x"',
        b"\xff\xfe",
        b"\xe2\x82",
        b"{}",
        b"[]",
        b'{"type":1}',
        b'{"choices":{}}',
        b'{"candidates":[1]}',
        b'{"v":"1.0","seq":0,"type":"stream.start"}',
        b'{"event_type":"x"}',
        b"\x00\x00\x00\x10",
        b":event-type",
        b"\x07",
    ]
)
garbage = st.binary(max_size=200) | st.lists(_PIECES, max_size=40).map(b"".join)
