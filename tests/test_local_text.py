"""Detokenization of the embedded model, on scripted byte pieces (no model, no CPU dependence).

Each list of pieces below stands for a token sequence: a token's piece may end inside a
UTF-8 character, and generation may stop (max_tokens, end of generation, a stop sequence)
right there.
"""

from __future__ import annotations

import itertools

import pytest

from llmbridge.local.text import TextStream

JAPANESE = "こんにちは、世界".encode()  # 3 bytes a character


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def run(pieces: list[bytes], stops: tuple[str, ...] = ()) -> tuple[str, TextStream]:
    stream = TextStream(list(stops))
    out = []
    for piece in pieces:
        out.append(stream.feed(piece))
        if stream.stop is not None:  # generation stops at a stop sequence: no flush
            return "".join(out), stream
    return "".join(out) + stream.flush(), stream


def test_text_stream_waits_for_whole_utf8_characters():
    data = "héllo, 日本語 🙂!".encode()
    stream = TextStream()
    out = [stream.feed(data[i : i + 1]) for i in range(len(data))]
    assert "".join(out) + stream.flush() == "héllo, 日本語 🙂!"
    assert "\ufffd" not in "".join(out)


def test_text_stream_holds_back_a_possible_stop_sequence():
    stream = TextStream(["END", "o w"])
    assert stream.feed(b"Hel") == "Hel"
    assert stream.feed(b"lo") == "l"  # "o" might start "o w"
    assert stream.feed(b" there E") == "o there "
    assert stream.feed(b"ND and more") == ""
    assert stream.stop == "END"


@pytest.mark.parametrize("end", range(1, len(JAPANESE) + 1))
def test_generation_cut_inside_a_character_drops_it(end):
    # max_tokens or the end-of-generation token after `end` bytes, in 2-byte tokens.
    data = JAPANESE[:end]
    pieces = split(data, list(range(2, len(data), 2)))
    text, _ = run(pieces)
    whole = end - end % 3
    assert text == JAPANESE[:whole].decode()
    assert "\ufffd" not in text


@pytest.mark.parametrize("stops", [("。",), ("zz",), ("世界", "ちは")])
def test_held_text_and_a_cut_character_with_stop_sequences(stops):
    # The tail holds a possible stop prefix and half a character: the prefix is text, the half is not.
    pieces = [*split(b"ab z", [2]), "世".encode()[:2]]
    text, stream = run(pieces, stops)
    assert "\ufffd" not in text
    if stream.stop is None:
        assert text == "ab z"


def test_a_stop_sequence_split_across_a_character_boundary():
    data = "答えは世界です".encode()
    pieces = [data[i : i + 2] for i in range(0, len(data), 2)]
    text, stream = run(pieces, ("世界",))
    assert stream.stop == "世界" and text == "答えは"


def test_bytes_that_are_never_utf8_are_replaced_where_they_stand():
    # A byte that cannot start or continue a character is the model's own output: U+FFFD marks it.
    text, _ = run([b"ok ", b"\xff", b" fine"])
    assert text == "ok \ufffd fine"


def test_flush_resets_the_stream():
    stream = TextStream()
    assert stream.feed("日".encode()[:2]) == ""
    assert stream.flush() == ""
    assert stream.feed(b"next") == "next"  # the dropped bytes do not corrupt what follows
