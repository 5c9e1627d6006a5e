"""``llmbridge.media``: base64 and magic-number checks, and the Images stream decoder (any
chunking, LF or CRLF, comments, several data lines give the same events)."""

from __future__ import annotations

import base64
import binascii
import json

from hypothesis import given
from hypothesis import strategies as st

from llmbridge import hub
from llmbridge.media import COMPLETED, PARTIAL, ImageStreamDecoder, base64_size, image_problem

from .conftest import ROOT

STREAM = (ROOT / "tests" / "data" / "openai-images" / "gpt-image-stream.sse").read_bytes()


def decode(body: bytes, cuts: list[int]) -> list:
    decoder, out, last = ImageStreamDecoder("up"), [], 0
    for cut in [*sorted(cuts), len(body)]:
        out += decoder.feed(body[last:cut])
        last = cut
    return out + decoder.close()


def summary(items: list) -> list:
    return [(i.type, i.index, i.b64_json, i.output_format) if not isinstance(i, hub.Error) else i.type for i in items]


WANT = summary(decode(STREAM, []))


def test_the_capture_decodes_to_two_partials_and_a_final_image():
    items = decode(STREAM, [])
    assert [i.type for i in items] == [PARTIAL, PARTIAL, COMPLETED]
    assert b"".join(i.raw for i in items) == STREAM  # relayed byte for byte
    assert items[-1].usage["output_tokens"] == 4160


@given(st.lists(st.integers(0, len(STREAM)), max_size=30), st.sampled_from(["lf", "crlf", "comments", "lines"]))
def test_any_chunking_and_framing_gives_the_same_images(cuts, framing):
    body = STREAM
    if framing == "crlf":
        body = body.replace(b"\n", b"\r\n")
    elif framing == "comments":
        body = b": keep-alive\n\n" + body.replace(b"\n\n", b"\n: ping\n\n")
    elif framing == "lines":  # the JSON split over two data lines (joined by a newline, still JSON)
        body = body.replace(b'{"type"', b'{\ndata: "type"')
    assert summary(decode(body, [c * len(body) // len(STREAM) for c in cuts])) == WANT


def test_errors_and_endings():
    error = b'event: error\ndata: {"type":"error","error":{"type":"invalid_request_error","code":"x",'
    error += b'"message":"no"}}\n\n'
    [e] = decode(error, [])
    assert isinstance(e, hub.Error) and (e.status, e.code, e.message) == (400, "x", "no")
    [e] = decode(STREAM[:300], [])
    assert isinstance(e, hub.Error) and e.type == "incomplete_stream"
    items = decode(STREAM + b"data: [DONE]\n\n" + b"data: {not even json}\n\n", [])
    assert [i.type for i in items] == [PARTIAL, PARTIAL, COMPLETED]  # nothing is read after [DONE]
    [e] = decode(b"data: {not json}\n\n", [])
    assert isinstance(e, hub.Error) and e.code == "bad_upstream_image"
    assert decode(b'data: {"type":"image_generation.in_progress"}\n\n' + STREAM, [])[0].type == PARTIAL


def test_escaped_slashes_take_the_full_parse():
    obj = json.loads(STREAM.split(b"\n")[1][6:])
    text = json.dumps(obj).replace("/", "\\/").encode()
    [item] = decode(b"data: " + text + b"\n\n", [])[:1]
    assert item.b64_json == obj["b64_json"]


@given(st.binary(max_size=200))
def test_base64_size_agrees_with_the_strict_decoder(data):
    text = base64.b64encode(data)
    assert base64_size(text) == len(data)
    for broken in (text + b"A", text[:-1] + b"*", b"=" + text, text.replace(b"A", b"-")):
        try:
            ok = len(binascii.a2b_base64(broken, strict_mode=True))
        except binascii.Error:
            ok = None
        assert base64_size(broken) == ok, broken


def test_image_problem_words():
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(30)).decode()
    assert image_problem(png, "image/png", 100) is None
    assert image_problem(png, "image/webp", 100) == "declared image/webp but the bytes are a PNG image"
    assert image_problem(base64.b64encode(bytes(30)).decode(), "image/png", 100).endswith("recognise")
    assert image_problem(png + "====", "image/png", 100) == "image data is not valid base64"
    assert image_problem("é" * 8, "image/png", 100) == "image data is not valid base64"
    assert image_problem(png, "image/png", 36) == "image is 38 bytes, over the limit of 36"
    assert image_problem(png, "image/png", 10).startswith("image is over the limit of 10 bytes")
