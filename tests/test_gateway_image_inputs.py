"""Images in, every pair of dialects: a request with a base64 image and one with an image URL,
sent to the gateway in each client dialect, must reach an upstream of each dialect as that
dialect's own image part, bytes and URL unchanged. Bad images (base64 that does not decode,
a declared MIME type the bytes contradict, over ``max_image_bytes``) are a 400 in the client's
dialect before anything goes upstream."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge import dialects, hub
from llmbridge.gateway import create_app
from llmbridge.gateway.config import parse
from llmbridge.media import image_problem, sniff
from tests.gateway_util import serving

DIALECTS = ["openai-chat", "openai-responses", "anthropic-messages", "gemini", "llm-stream", "mmsp"]
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic-messages": "/v1/messages",
    "gemini": "/v1beta/models/m-{up}:streamGenerateContent?alt=sse",
    "llm-stream": "/v1/stream",
    "mmsp": "/mmsp/v1/stream",
}
BASE = {"openai-chat": "/v1", "openai-responses": "/v1", "mmsp": "/mmsp"}  # what each endpoint() appends to
HTTP = httpx.Client(timeout=30)
LIMIT = 2048


def png(width: int = 4, height: int = 4) -> bytes:
    rows = b"".join(b"\x00" + b"".join(bytes((x * 60, y * 60, 200)) for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG = base64.b64encode(png()).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(40)).decode()
URL = "https://example.com/cat.png"


def ok_stream(dialect: str) -> bytes:
    """A short answer ("ok") in ``dialect``'s stream format, written by its own encoder."""
    events = [
        hub.ResponseStart("r1", "m"),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "ok"),
        hub.BlockStop(0),
        hub.Usage(3, 1),
        hub.Finish("end_turn"),
        hub.ResponseEnd(),
    ]
    encoder = dialects.stream_encoder(dialects.get(dialect), hub.Request(stream=True))
    return b"".join(encoder.encode(e) for e in events)


@pytest.fixture(scope="module")
def gateway():
    received: dict[str, dict] = {}

    async def anything(request: Request) -> Response:
        dialect = request.path_params["dialect"]
        received[dialect] = json.loads(await request.body())
        codec = dialects.get(dialect)
        return Response(ok_stream(dialect), media_type=getattr(codec, "STREAM_CONTENT_TYPE", "text/event-stream"))

    upstream_app = Starlette(routes=[Route("/{dialect}/{rest:path}", anything, methods=["POST"])])
    with serving(upstream_app) as upstream:
        raw = {
            "gateway": {"max_image_bytes": LIMIT},
            "upstreams": {d: {"format": d, "base_url": f"{upstream.url}/{d}{BASE.get(d, '')}"} for d in DIALECTS},
            "models": [{"name": f"m-{d}", "upstream": d, "upstream_model": f"m-{d}"} for d in DIALECTS],
        }
        with serving(create_app(parse(raw))) as gw:
            gw.received = received
            yield gw


def send(gw, client: str, up: str, image: hub.ImagePart) -> httpx.Response:
    """A request with one text and one image part, in ``client``'s dialect (its own encoder)."""
    request = hub.Request(
        model=f"m-{up}",
        stream=True,
        max_tokens=16,
        messages=[hub.Message("user", [hub.TextPart("What is this?"), image])],
    )
    body = dialects.get(client).encode_request(request)
    headers = {"content-type": "application/llm-request+json"} if client == "llm-stream" else {}
    if client == "anthropic-messages":
        headers["anthropic-version"] = "2023-06-01"
    return HTTP.post(gw.url + PATHS[client].format(up=up), json=body, headers=headers)


def images_received(gw, up: str) -> list[hub.ImagePart]:
    request = dialects.get(up).decode_request(gw.received.pop(up), model=f"m-{up}")
    return [p for m in request.messages for p in m.parts if isinstance(p, hub.ImagePart)]


@pytest.mark.parametrize("up", DIALECTS)
@pytest.mark.parametrize("client", DIALECTS)
def test_base64_and_url_images_cross_every_pair(gateway, client, up):
    r = send(gateway, client, up, hub.ImagePart("image/png", PNG))
    assert r.status_code == 200, r.text
    [image] = images_received(gateway, up)
    assert (image.media_type, image.data, image.url) == ("image/png", PNG, None)
    r = send(gateway, client, up, hub.ImagePart("image/png", url=URL))
    assert r.status_code == 200, r.text
    [image] = images_received(gateway, up)
    assert image.url == URL and image.data is None


BAD = {
    "bad base64": (hub.ImagePart("image/png", "iVBORw0KGgo*not~base64"), "not valid base64"),
    "MIME the bytes contradict": (hub.ImagePart("image/png", JPEG), "declared image/png but the bytes are a JPEG"),
    "over the size limit": (hub.ImagePart("image/png", base64.b64encode(png() + bytes(LIMIT)).decode()), "limit"),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("client", DIALECTS)
def test_bad_images_are_400_in_the_clients_dialect(gateway, client, case):
    image, words = BAD[case]
    gateway.received.clear()
    r = send(gateway, client, "openai-chat", image)
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    error = dialects.get(client).decode_error(400, r.content)
    assert error.type == "invalid_request" and words in error.message
    assert not gateway.received  # nothing went upstream


def test_image_checks():
    assert sniff(png()) == "image/png" and sniff(base64.b64decode(JPEG)) == "image/jpeg"
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp" and sniff(b"GIF89a...") == "image/gif"
    assert image_problem(PNG, "image/png", LIMIT) is None
    assert image_problem(PNG, "image/jpg", LIMIT) == "declared image/jpg but the bytes are a PNG image"
    assert image_problem(PNG, "image/heic", LIMIT) is None  # formats we cannot sniff are let through
    wrapped = "\n".join(PNG[i : i + 76] for i in range(0, len(PNG), 76))  # MIME-style line breaks
    assert image_problem(wrapped, "image/png", LIMIT) is None
    assert image_problem("", "image/png", LIMIT) == "image data is empty"
    assert "limit" in image_problem("A" * 40000, "image/png", LIMIT)  # refused before decoding
