"""The SSE decoder against the WHATWG algorithm, real corpus files and arbitrary chunking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge import sse
from tests.conftest import corpus_files

SSE_FILES = corpus_files(suffix=".sse")


def decode(chunks: list[bytes]) -> tuple[list[sse.Event], bool]:
    d = sse.Decoder()
    out = []
    for c in chunks:
        out += d.feed(c)
    out += d.close()
    return out, d.unterminated


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def test_basic_fields():
    events, unterminated = decode([b"event: x\ndata: a\ndata:b\nid: 7\nretry: 10\n\n: comment\ndata: c\n\n"])
    assert events == [sse.Event("x", "a\nb", "7", 10), sse.Event("message", "c", "7", None)]
    assert not unterminated


@pytest.mark.parametrize("sep", [b"\n", b"\r", b"\r\n"])
def test_line_endings(sep):
    body = sep.join([b"event: e", b"data: 1", b"", b"data: 2", b"", b""])
    events, _ = decode([body])
    assert [(e.event, e.data) for e in events] == [("e", "1"), ("message", "2")]


def test_crlf_split_between_chunks():
    events, _ = decode([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"])
    assert [e.data for e in events] == ["a", "b"]


# ----------------------------------------------------------------------------- every boundary
# Each line terminator (CR, LF, CRLF) ending the field lines and each ending the blank line that
# dispatches, the body split at every byte position into two chunks: the events never change.
# A CR that ends one chunk while the next starts with LF is ONE terminator (the classic trap:
# read as two, the empty line between them dispatches an event too early).

TERMINATORS = {"CR": b"\r", "LF": b"\n", "CRLF": b"\r\n"}
BOUNDARY_CASES = [(line, blank) for line in TERMINATORS for blank in TERMINATORS]


def boundary_body(line: bytes, blank: bytes) -> bytes:
    """Two events, one of two data lines, then a comment and a one-line event."""
    return (
        b"event: e"
        + line
        + b"data: a"
        + line
        + b"data: b"
        + line
        + blank
        + b": note"
        + line
        + b"data: c"
        + line
        + blank
    )


def boundary_events(line: str, blank: str) -> tuple[list[sse.Event], bool]:
    """The events of boundary_body; and whether the stream ended inside an event."""
    if (line, blank) == ("CR", "LF"):
        # CR then LF is one CRLF line end, never a blank line: one event, left open at the end
        return [sse.Event("e", "a\nb\nc", "", None)], True
    return [sse.Event("e", "a\nb", "", None), sse.Event("message", "c", "", None)], False


@pytest.mark.parametrize(("line", "blank"), BOUNDARY_CASES, ids=[f"{a}-lines-{b}-blank" for a, b in BOUNDARY_CASES])
def test_every_two_chunk_split_of_every_terminator(line, blank):
    body = boundary_body(TERMINATORS[line], TERMINATORS[blank])
    for cut in range(len(body) + 1):
        assert decode([body[:cut], body[cut:]]) == boundary_events(line, blank), f"split at {cut}: {body[:cut]!r}"


@pytest.mark.parametrize(("line", "blank"), BOUNDARY_CASES, ids=[f"{a}-lines-{b}-blank" for a, b in BOUNDARY_CASES])
def test_every_terminator_byte_by_byte(line, blank):
    body = boundary_body(TERMINATORS[line], TERMINATORS[blank])
    assert decode([body[i : i + 1] for i in range(len(body))]) == boundary_events(line, blank)


def test_cr_at_a_chunk_end_then_lf_is_one_line_end():
    # read as two line ends, the LF would make an empty line and dispatch "a" alone
    assert decode([b"data: a\r", b"\ndata: b\r\n\r\n"]) == ([sse.Event("message", "a\nb", "", None)], False)
    # and with an empty chunk between the CR and the LF
    assert decode([b"data: a\r", b"", b"\ndata: b\n\n"]) == ([sse.Event("message", "a\nb", "", None)], False)


def test_cr_at_a_chunk_end_then_another_cr_is_the_blank_line():
    assert decode([b"data: a\r", b"\rdata: b\r\r"]) == (
        [sse.Event("message", "a", "", None), sse.Event("message", "b", "", None)],
        False,
    )


def test_cr_at_a_chunk_end_then_a_field_is_a_line_end():
    assert decode([b"data: a\r", b"data: b\n\n"]) == ([sse.Event("message", "a\nb", "", None)], False)


def test_cr_as_the_last_byte_of_the_stream_ends_the_line():
    # the blank line never came: the event is dispatched at close and reported unterminated
    assert decode([b"data: a\r"]) == ([sse.Event("message", "a", "", None)], True)
    assert decode([b"data: a\r\r"]) == ([sse.Event("message", "a", "", None)], False)


def test_lf_then_cr_is_two_line_ends():
    # LF CR is not a pair: the CR ends an empty line, which dispatches
    assert decode([b"data: a\n", b"\rdata: b\n\n"]) == (
        [sse.Event("message", "a", "", None), sse.Event("message", "b", "", None)],
        False,
    )


def test_bom_only_at_start_and_split():
    events, _ = decode([b"\xef", b"\xbb", b"\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n"])
    # a BOM after the start is part of the field name, so that line is an unknown field
    assert [e.data for e in events] == ["a"]


def test_utf8_split_inside_character():
    body = "data: größe €\n\n".encode()
    events, _ = decode([body[i : i + 1] for i in range(len(body))])
    assert events[0].data == "größe €"


def test_unterminated_last_event_is_dispatched_and_reported():
    events, unterminated = decode([b"data: a\n\ndata: b"])
    assert [e.data for e in events] == ["a", "b"]
    assert unterminated


def test_edge_cases_of_the_algorithm():
    body = b"data\n\ndata:\ndata\n\nid: a\x00b\ndata: x\n\nfield-without-colon\ndata:  two spaces\n\nevent: only\n\n"
    events, _ = decode([body])
    assert [e.data for e in events] == ["", "\n", "x", " two spaces"]
    assert events[2].id == ""  # an id holding NUL is ignored
    bad_retry, _ = decode([b"retry: 1x\ndata: a\n\n"])
    assert bad_retry[0].retry is None


def utf8_chars(excluded: str) -> st.SearchStrategy[str]:
    """Characters UTF-8 can hold (no lone surrogates), less ``excluded``."""
    return st.characters(blacklist_characters=excluded, blacklist_categories=("Cs",))


def test_encode_refuses_text_utf8_cannot_hold():
    # A lone surrogate has no UTF-8 form; JSON decoders here (msgspec) never produce one.
    with pytest.raises(UnicodeEncodeError):
        sse.encode("a\ud800")


def test_encode_round_trip_multiline():
    raw = sse.encode("line1\nline2\r\nline3", event="e", id="1")
    events, _ = decode([raw])
    assert events == [sse.Event("e", "line1\nline2\nline3", "1", None)]
    assert decode([sse.encode_comment("keep-alive")])[0] == []


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.text(alphabet=utf8_chars("\r\n:\x00"), min_size=1)),
            st.text(alphabet=utf8_chars("\r\x00"), max_size=40),
        ),
        max_size=8,
    ),
    st.lists(st.integers(min_value=0), max_size=12),
)
def test_encode_decode_round_trip(items, cuts):
    body = b"".join(sse.encode(data, event=ev) for ev, data in items)
    events, _ = decode(split_at(body, cuts))
    assert [(e.event, e.data) for e in events] == [(ev or "message", data) for ev, data in items]


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
@given(cuts=st.lists(st.integers(min_value=0), max_size=40))
@settings(max_examples=10)
def test_corpus_any_chunking_same_events(path, cuts):
    body = path.read_bytes()
    whole, unterminated = decode([body])
    if not body.lstrip().startswith(b"["):  # Gemini JSON-array streams are not SSE
        assert whole, "no events decoded"
    assert decode(split_at(body, cuts)) == (whole, unterminated)
    # byte by byte too (the first 16 KiB: every boundary kind occurs there, and large files stay fast)
    head = body[:16384]
    assert decode([head[i : i + 1] for i in range(len(head))]) == decode([head])


def test_marked_events_and_boundaries_lf_fast_paths_match_the_general_search():
    """marked_events and EventBoundaries.feed search a read without CR for "\\n\\n" themselves;
    the spans and ends must be those the general last_event_end/next_event_end give."""
    import random

    from llmbridge.sse import EventBoundaries, last_event_end, marked_events, next_event_end

    def reference(data: bytes, start: int, markers: tuple[bytes, ...]) -> list[tuple[int, int]]:
        hits = sorted(at for m in markers for at in _all(data, m, start))
        spans: list[tuple[int, int]] = []
        for at in hits:
            if spans and at < spans[-1][1]:
                continue
            spans.append((max(start, last_event_end(data, start, at)), next_event_end(data, at)))
        return spans

    def _all(data: bytes, marker: bytes, start: int) -> list[int]:
        out, at = [], data.find(marker, start)
        while at >= 0:
            out.append(at)
            at = data.find(marker, at + len(marker))
        return out

    rng = random.Random(23)
    markers = (b"X", b"[D]", b"e:")
    for _ in range(3000):
        alphabet = rng.choice([b"ab\n\nX", b"data: [D]\n", b"ab\r\nX\n", b"e:\n\n\n", b"abc"])
        data = bytes(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 40, 300])))
        start = rng.randrange(len(data) + 1)
        assert marked_events(data, start, markers) == reference(data, start, markers), (data, start)
        assert EventBoundaries(1 << 20).feed(data) == last_event_end(data, 0, len(data)), data


def _state(decoder: sse.Decoder) -> tuple:
    return tuple(getattr(decoder, name) for name in sse.Decoder.__slots__)


_PIECES = st.sampled_from(
    [b"\xef", b"\xbb", b"\xbf", b"\xef\xbb\xbf", b"\r", b"\n", b"\r\n", b"data: x", b"id: 1", b":"]
)


@given(st.lists(_PIECES, max_size=6).map(b"".join), st.lists(_PIECES, max_size=6).map(b"".join))
def test_first_chunk_shortcut_is_what_prepare_does(first, second):
    # The general path: the first chunk through _prepare, then fed as a chunk the shortcut
    # does not take (the BOM is done by then).  The shortcut must give the same events and state.
    fast = sse.Decoder()
    fast_events = fast.feed(first)
    general = sse.Decoder()
    prepared = general._prepare(first)
    skip_lf, general._skip_lf = general._skip_lf, False  # (said of what follows ``first``)
    general_events = general.feed(prepared) if general._bom_done else []
    general._skip_lf = skip_lf
    assert fast_events == general_events
    assert _state(fast) == _state(general)
    assert fast.feed(second) + fast.close() == general.feed(second) + general.close()
    assert _state(fast) == _state(general)


# A read of "data: " lines only is split on "\n\ndata: " at once (Decoder.feed's fast path);
# any other block among them sends the read to the general block loop (Decoder._events).
_BLOCKS = st.sampled_from(
    [
        "data: x",
        "data: ",
        'data: {"a": 1}',
        "data: data: y",
        "data: é ✓",
        "data: [DONE]",
        "data:x",
        "data:  two spaces",
        "data: a\ndata: b",
        "event: e\ndata: z",
        "id: 7\ndata: w",
        ": keep-alive",
        "retry: 5",
        "",
        "\ndata: after an empty line",
    ]
)


@given(st.lists(_BLOCKS, min_size=1, max_size=8), st.sampled_from(["", "data: open", "\n", "da"]))
@settings(max_examples=400)
def test_a_read_of_data_lines_is_what_the_block_loop_gives(blocks, tail):
    text = "\n\n".join(blocks) + "\n\n"
    fast = sse.Decoder()
    fast._bom_done = True  # (the BOM and CR steps come before the split: not what this compares)
    got = fast.feed((text + tail).encode())
    general = sse.Decoder()
    general._bom_done = True
    expected = general._events(text.split("\n\n"))
    assert got == expected
    assert (fast.last_id, fast.retry, fast.comments) == (general.last_id, general.retry, general.comments)
    assert fast.feed(b"\n\n") + fast.close() == general.feed((tail + "\n\n").encode()) + general.close()


@given(st.lists(_BLOCKS, min_size=1, max_size=8), st.lists(st.integers(min_value=0), max_size=6))
@settings(max_examples=200)
def test_reads_of_data_lines_split_anywhere_give_the_same_events(blocks, cuts):
    body = ("\n\n".join(blocks) + "\n\n").encode()
    assert decode(split_at(body, cuts)) == decode([body[i : i + 1] for i in range(len(body))])
