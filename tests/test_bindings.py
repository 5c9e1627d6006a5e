"""The binary and WebSocket bindings' sans-I/O codecs (docs/llm-stream-bindings.md).

Round trips over the real corpus (any SSE stream the gateway writes re-frames losslessly),
every bad-input case of the framing, the memory bound, and the WebSocket session machine.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge import bindings as b
from llmbridge import dialects, hub
from llmbridge.dialects import llm_stream
from llmbridge.dialects.base import decode_all, encode_all

CORPUS = Path(__file__).parent / "corpus"
SEED_EXAMPLE = (Path(__file__).parent / "data" / "llm-stream" / "seed-example.sse").read_bytes()


def corpus_as_llm_stream() -> list[tuple[str, bytes]]:
    """Every corpus stream translated to llm-stream SSE by our codecs (what the gateway sends)."""
    out = []
    for folder in sorted(CORPUS.iterdir()):
        if not folder.is_dir() or folder.name not in dialects.NAMES:
            continue
        codec = dialects.get(folder.name)
        for path in sorted(folder.glob("*.sse")):
            events = decode_all(codec.StreamDecoder(), path.read_bytes())
            out.append((f"{folder.name}/{path.stem}", encode_all(llm_stream.StreamEncoder(), events)))
    return out


CORPUS_STREAMS = corpus_as_llm_stream()


def frame(type_byte: int, payload: bytes) -> bytes:
    return struct.pack(">BI", type_byte, len(payload)) + payload


def envelope(kind: str, seq: int, **fields) -> bytes:
    return json.dumps({"v": "1.0", "seq": seq, "type": kind, **fields}).encode()


def good_frames() -> bytes:
    return (
        frame(1, envelope("stream.start", 0))
        + frame(2, envelope("content.delta", 1, index=0, delta={"text": "Hi ✓"}))
        + frame(4, envelope("content.stop", 2, index=0, stop_reason="end_turn"))
        + frame(7, envelope("stream.end", 3))
    )


def decode(data: bytes, **kw) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = b.BinaryStreamDecoder(**kw)
    events = decoder.feed(data) + decoder.close()
    assert hub.validate(events) == []
    return events, decoder.violations


def last_error(events: list[hub.Event]) -> hub.Error | None:
    errors = [e for e in events if type(e) is hub.Error]
    return errors[-1] if errors else None


# --------------------------------------------------------------------------- round trips


def test_corpus_is_not_empty():
    assert len(CORPUS_STREAMS) > 50


@pytest.mark.parametrize("name,sse_body", CORPUS_STREAMS, ids=[n for n, _ in CORPUS_STREAMS])
def test_binary_reframing_is_lossless_on_the_corpus(name, sse_body):
    framing = b.BinaryFraming()
    data = framing.feed(sse_body) + framing.close()
    sse_events = decode_all(llm_stream.StreamDecoder(), sse_body)
    bin_events, violations = decode(data)
    assert bin_events == sse_events
    assert violations == []


@pytest.mark.parametrize("name,sse_body", CORPUS_STREAMS[::7], ids=[n for n, _ in CORPUS_STREAMS[::7]])
def test_websocket_messages_decode_like_sse(name, sse_body):
    decoder = b.MessageStreamDecoder()
    events = []
    for event in decode_all_sse(sse_body):
        events += decoder.feed_message(event.data)
    events += decoder.close()
    assert events == decode_all(llm_stream.StreamDecoder(), sse_body)
    assert decoder.violations == []


def decode_all_sse(body: bytes):
    from llmbridge import sse

    d = sse.Decoder()
    return d.feed(body) + d.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60))
def test_any_chunking_gives_the_same_frames(cuts):
    data = SEED_FRAMES
    pieces, pos = [], 0
    for c in cuts:
        pieces.append(data[pos : pos + c])
        pos += c
    pieces.append(data[pos:])
    decoder = b.BinaryStreamDecoder()
    events = []
    for piece in pieces:
        events += decoder.feed(piece)
    events += decoder.close()
    assert events == decode_all(llm_stream.StreamDecoder(), SEED_EXAMPLE)


def _seed_frames() -> bytes:
    framing = b.BinaryFraming()
    return framing.feed(SEED_EXAMPLE) + framing.close()


SEED_FRAMES = _seed_frames()


def test_type_bytes_and_header():
    assert SEED_FRAMES[0] == 0x01 and struct.unpack(">I", SEED_FRAMES[1:5])[0] == SEED_FRAMES.index(b"}") - 4
    assert b.EVENT_TYPE_BYTES == {
        "stream.start": 1,
        "content.delta": 2,
        "tool.call": 3,
        "content.stop": 4,
        "usage": 5,
        "error": 6,
        "stream.end": 7,
    }
    assert b.encode_event("vendor:thing", b"{}")[0] == b.T_NAMED
    with pytest.raises(ValueError):
        b.encode_frame(300, b"")


def test_keepalive_comments_become_keepalive_frames_and_are_skipped():
    framing = b.BinaryFraming()
    out = framing.feed(b": keep-alive\n\n") + framing.feed(SEED_EXAMPLE) + framing.close()
    assert out.startswith(b.KEEPALIVE_FRAME)
    decoder = b.FrameDecoder()
    frames = decoder.feed(out)
    decoder.close()
    assert decoder.keepalives == 1 and frames[0].type == 1


def test_named_frame_for_an_unregistered_event_is_ignored_like_an_unknown_sse_event():
    body = good_frames()
    extra = frame(b.T_NAMED, envelope("vendor:progress", 1, pct=50))
    renumbered = (
        frame(1, envelope("stream.start", 0))
        + extra
        + frame(2, envelope("content.delta", 2, index=0, delta={"text": "Hi ✓"}))
        + frame(4, envelope("content.stop", 3, index=0, stop_reason="end_turn"))
        + frame(7, envelope("stream.end", 4))
    )
    events, violations = decode(renumbered)
    assert violations == [] and last_error(events) is None
    assert decode(body)[0] == events


def test_ignorable_reserved_type_bytes_are_skipped():
    data = good_frames()
    start_len = 5 + len(envelope("stream.start", 0))
    data = data[:start_len] + frame(0x08, b"anything") + frame(0x7F, b"") + data[start_len:]
    events, violations = decode(data)
    assert violations == [] and last_error(events) is None


# --------------------------------------------------------------------------- bad input: each a defined error


@pytest.mark.parametrize("type_byte", [0x00, 0x80, 0x99, 0xFF])
def test_unknown_must_understand_type_byte_is_a_protocol_error(type_byte):
    data = frame(1, envelope("stream.start", 0)) + frame(type_byte, b"{}") + good_frames()[5 + 44 :]
    events, violations = decode(data)
    error = last_error(events)
    assert error is not None and error.type == "protocol_error" and error.code == "unknown_type"
    assert [v.rule for v in violations][:1] == ["frame"]


def test_length_past_the_data_is_a_truncated_stream():
    data = frame(1, envelope("stream.start", 0)) + struct.pack(">BI", 2, 500) + b'{"v":"1.0"'
    events, violations = decode(data)
    error = last_error(events)
    assert error is not None and error.type == "incomplete_stream"
    assert any(v.rule == "frame" and "inside a frame" in v.message for v in violations)


def test_truncated_header_is_a_truncated_stream():
    events, _ = decode(good_frames()[:3])  # inside the first header
    assert last_error(events).type == "incomplete_stream"
    decoder = b.FrameDecoder()
    decoder.feed(b"\x01\x00\x00")
    with pytest.raises(b.FrameError) as exc:
        decoder.close()
    assert exc.value.code == "truncated"


def test_length_over_the_cap_is_refused_from_the_header_without_buffering():
    decoder = b.FrameDecoder(max_frame=1024)
    with pytest.raises(b.FrameError) as exc:
        decoder.feed(struct.pack(">BI", 2, 1025))
    assert exc.value.code == "frame_too_large"
    assert decoder.buffered == 0
    with pytest.raises(b.FrameError):  # dead after an error
        decoder.feed(b"")
    # a 4 GiB announcement costs nothing either
    decoder = b.FrameDecoder()
    with pytest.raises(b.FrameError):
        decoder.feed(struct.pack(">BI", 2, 2**32 - 1) + b"x" * 100)
    assert decoder.buffered == 0


def test_over_cap_through_the_stream_decoder():
    events, violations = decode(frame(1, envelope("stream.start", 0)) + struct.pack(">BI", 2, 10**9), max_frame=2**20)
    assert last_error(events).code == "frame_too_large"
    assert violations[0].rule == "frame"


def test_memory_stays_bounded_while_a_frame_arrives():
    decoder = b.FrameDecoder(max_frame=64 * 1024)
    decoder.feed(struct.pack(">BI", 2, 64 * 1024))
    for _ in range(63):
        assert decoder.feed(b"x" * 1024) == []
    assert decoder.buffered == 5 + 63 * 1024
    frames = decoder.feed(b"x" * 1024 + b"\x07")
    assert len(frames) == 1 and decoder.buffered == 1


@pytest.mark.parametrize(
    "data,code",
    [
        (frame(2, b""), "bad_length"),  # an event frame with no payload
        (frame(b.T_KEEPALIVE, b"{}"), "bad_length"),  # a keep-alive with one
        (frame(1, b"\xff\xfe{}"), "bad_payload"),  # not UTF-8
        (frame(2, envelope("usage", 0, input_tokens=1, output_tokens=1)), "type_mismatch"),  # byte vs JSON type
        (frame(b.T_NAMED, envelope("stream.start", 0)), "type_mismatch"),  # registered type sent as named
    ],
    ids=["empty-event", "keepalive-payload", "not-utf8", "byte-vs-type", "named-registered"],
)
def test_malformed_frames_are_protocol_errors(data, code):
    events, violations = decode(data + good_frames())
    error = last_error(events)
    assert error is not None and error.type == "protocol_error" and error.code == code, (error, violations)


def test_json_that_is_not_one_object_is_the_sse_rule():
    events, violations = decode(frame(1, b"[1,2]") + good_frames())
    assert last_error(events).type == "protocol_error"
    assert "json" in [v.rule for v in violations]


def test_empty_input_is_incomplete():
    events, violations = decode(b"")
    assert last_error(events).type == "incomplete_stream"
    assert "end-missing" in [v.rule for v in violations]


# --------------------------------------------------------------------------- the WebSocket session machine


def test_session_turns_cancel_and_closes():
    s = b.ServerSession(max_message=1000)
    assert s.receive_text('{"type":"cancel"}') == []  # nothing to cancel: ignored
    [start] = s.receive_text('{"model":"m","messages":[]}')
    assert isinstance(start, b.StartTurn) and start.request["model"] == "m" and s.state == "streaming"
    assert s.receive_text('{"type":"future-control"}') == []  # unknown control messages are ignored
    assert s.receive_text('{"type":"cancel"}') == [b.CancelTurn()]
    s.turn_over()
    assert s.state == "idle"
    [again] = s.receive_text('{"model":"m","messages":[]}')
    assert isinstance(again, b.StartTurn) and s.turns == 2
    assert s.receive_text('{"model":"m","messages":[]}') == [
        b.Close(b.CLOSE_BUSY, "a request arrived while a turn was streaming")
    ]
    assert s.state == "closed" and s.receive_text("{}") == []


def test_session_bad_messages():
    s = b.ServerSession(max_message=100)
    [err] = s.receive_text("{not json")
    assert isinstance(err, b.TurnError) and err.error.status == 400 and s.state == "idle"
    [err] = s.receive_text("[1]")
    assert isinstance(err, b.TurnError)
    [close] = s.receive_text("x" * 101)
    assert close.code == b.CLOSE_TOO_BIG
    s = b.ServerSession(max_message=100)
    [close] = s.receive_text("é" * 60)  # 60 characters, 120 bytes: the cap is in bytes
    assert close.code == b.CLOSE_TOO_BIG
    s = b.ServerSession(max_message=100)
    [close] = s.receive_bytes(b"{}")
    assert close.code == b.CLOSE_UNSUPPORTED_DATA == 1003
    s = b.ServerSession(max_message=100)
    s.receive_text('{"model":"m"}')
    [close] = s.receive_text("{oops")  # garbage mid-turn: no way to answer it in order
    assert close.code == b.CLOSE_BUSY


def test_turn_end_is_a_whole_stream():
    texts = b.turn_end(hub.Error("nope", "not_found", status=404), 0, started=False, request_id="r9")
    decoder = b.MessageStreamDecoder()
    events = []
    for t in texts:
        events += decoder.feed_message(t)
    events += decoder.close()
    assert decoder.violations == [] and decoder.wire_ended
    assert last_error(events).type == "not_found"
    assert [json.loads(t)["seq"] for t in texts] == [0, 1, 2]
    mid = b.turn_end(hub.Error("bye", "cancelled", "cancelled"), 7, started=True)
    assert [json.loads(t)["type"] for t in mid] == ["error", "stream.end"] and json.loads(mid[0])["seq"] == 7


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=40),
    st.sampled_from([b"\n", b"\r\n"]),
    st.booleans(),
)
def test_reframing_fast_path_equals_the_general_decoder(cuts, newline, extras):
    """Any SSE shape (CRLF, multi-line data, ids, comments, a last event without its blank
    line), split anywhere, frames to the events the WHATWG decoder sees."""
    from llmbridge import sse

    body = SEED_EXAMPLE
    if extras:
        body = b": keep-alive\n\n" + body.replace(b"data: {", b"id: 7\ndata: {", 1) + b'event: x\ndata: {"a":\ndata: 1}'
    body = body.replace(b"\n", newline)
    pieces, pos = [], 0
    for c in cuts:
        pieces.append(body[pos : pos + c])
        pos += c
    pieces.append(body[pos:])
    framing = b.BinaryFraming()
    out = b"".join(framing.feed(p) for p in pieces) + framing.close()
    frames = b.FrameDecoder().feed(out)
    d = sse.Decoder()
    events = d.feed(body) + d.close()
    assert [f.payload.decode() for f in frames] == [e.data for e in events]
    assert [f.type for f in frames] == [b.EVENT_TYPE_BYTES.get(e.event, b.T_NAMED) for e in events]


# --------------------------------------------------------------------------- the CLI


def cli(*args: str, stdin: bytes = b""):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "llmbridge", *args], input=stdin, capture_output=True, timeout=60)


def test_cli_translates_to_and_from_binary_and_validates():
    sse_body = (Path(__file__).parent / "data" / "llm-stream" / "seed-example.sse").read_bytes()
    framed = cli("translate", "--from", "llm-stream", "--to", "llm-stream-binary", stdin=sse_body)
    assert framed.returncode == 0 and framed.stdout == SEED_FRAMES
    assert cli("validate", "--format", "llm-stream-binary", stdin=framed.stdout).returncode == 0
    back = cli("translate", "--from", "llm-stream-binary", "--to", "llm-stream", stdin=framed.stdout)
    assert back.returncode == 0 and back.stdout == sse_body
    cut = cli("validate", "--format", "llm-stream-binary", stdin=framed.stdout[:-20])
    assert cut.returncode == 1 and b"frame: input ended inside a frame" in cut.stdout
    bad = cli("validate", "--format", "llm-stream-binary", stdin=b"\x99\x00\x00\x00\x02{}")
    assert bad.returncode == 1 and b"unknown_type" in bad.stdout
