"""The replay server (``llmbridge replay DIR``): an upstream of every dialect serving captured bodies."""

from __future__ import annotations

import random
import time

import httpx
import pytest

from llmbridge import dialects, hub, replay
from llmbridge.dialects.base import decode_all
from llmbridge.gateway import config, create_app
from tests.conftest import CORPUS, corpus_files
from tests.gateway_util import replay_config, serving
from tests.readers import expected

HTTP = httpx.Client(timeout=10)
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic-messages": "/v1/messages",
    "llm-stream": "/v1/stream",
    "mmsp": "/mmsp/v1/stream",
}
FILES = {
    "anthropic-messages": "claude-text-simple",
    "openai-chat": "hf-novita-text",
    "openai-responses": "openai-text",
    "gemini": "gemini20-text",
}


@pytest.fixture(scope="module")
def rep():
    with serving(replay.create_app(CORPUS, seed=11)) as server:
        yield server


def ask(server, dialect: str, model: str, stream: bool = True) -> httpx.Response:
    if dialect == "gemini":
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return HTTP.post(f"{server.url}/v1beta/models/{model}:{method}", json={"contents": []})
    return HTTP.post(server.url + PATHS[dialect], json={"model": model, "stream": stream})


def test_chunks_are_random_deterministic_and_lossless():
    data = "héllo wörld — ünïcode ✓ ".encode() * 50
    a = replay.chunks(data, random.Random("1:x"), 16)
    assert a == replay.chunks(data, random.Random("1:x"), 16)
    assert a != replay.chunks(data, random.Random("2:x"), 16)
    assert b"".join(a) == data and max(map(len, a)) <= 16 and len(set(map(len, a))) > 3
    # some cuts fall inside a multi-byte UTF-8 character
    inside = 0
    for piece in a[:-1]:
        try:
            piece.decode()
        except UnicodeDecodeError:
            inside += 1
    assert inside


@pytest.mark.parametrize("dialect", list(FILES))
def test_serves_the_captured_body(rep, dialect):
    r = ask(rep, dialect, FILES[dialect])
    assert r.status_code == 200
    assert r.headers["content-type"].startswith(dialects.get(dialect).STREAM_CONTENT_TYPE)
    assert r.content == (CORPUS / dialect / f"{FILES[dialect]}.sse").read_bytes()


@pytest.mark.parametrize("dialect", list(FILES))
def test_non_streaming_request_gets_the_assembled_response(rep, dialect):
    r = ask(rep, dialect, FILES[dialect], stream=False)
    assert r.status_code == 200, r.text
    codec = dialects.get(dialect)
    got = expected(codec.decode_response(r.json()))
    want = expected(decode_all(codec.StreamDecoder(), (CORPUS / dialect / f"{FILES[dialect]}.sse").read_bytes()))
    assert (got.text, got.tool_calls, got.finish) == (want.text, want.tool_calls, want.finish)


@pytest.mark.parametrize("dialect", [*PATHS, "gemini"])
def test_unknown_model_is_404_in_the_dialect(rep, dialect):
    r = ask(rep, dialect, "no-such-capture")
    assert r.status_code == 404
    assert dialects.get(dialect).decode_error(404, r.content).type == "not_found"


@pytest.mark.parametrize("dialect", ["anthropic-messages", "openai-chat", "gemini"])
def test_status_fault(rep, dialect):
    r = ask(rep, dialect, FILES[dialect] + "@status=429")
    assert r.status_code == 429
    assert dialects.get(dialect).decode_error(429, r.content).type == "rate_limit"


def test_truncate_and_stall_faults(rep):
    r = ask(rep, "anthropic-messages", "claude-text-simple@truncate=123")
    assert r.content == (CORPUS / "anthropic-messages" / "claude-text-simple.sse").read_bytes()[:123]
    started = time.monotonic()
    r = ask(rep, "anthropic-messages", "claude-text-simple@stall=0.5")
    assert time.monotonic() - started >= 0.5
    assert r.content == (CORPUS / "anthropic-messages" / "claude-text-simple.sse").read_bytes()
    assert ask(rep, "anthropic-messages", "x@bogus=1").status_code == 400


def test_lists_the_names(rep):
    names = {m["id"] for m in HTTP.get(rep.url + "/v1/models").json()["data"]}
    assert names == {p.stem for p in corpus_files()}


def test_flat_directory_with_a_dialect(tmp_path):
    body = (CORPUS / "openai-chat" / "hf-novita-text.sse").read_bytes()
    (tmp_path / "capture-1.sse").write_bytes(body)
    with serving(replay.create_app(tmp_path, seed=1, dialect="openai-chat")) as server:
        r = HTTP.post(server.url + "/v1/chat/completions", json={"model": "capture-1", "stream": False})
        assert r.status_code == 200 and r.json()["object"] == "chat.completion"


def test_malformed_upstream_bytes_through_the_gateway(tmp_path):
    """Garbage from an upstream: an error status or an error event, never a 500 or a clean end."""
    folder = tmp_path / "anthropic-messages"
    folder.mkdir()
    good = (CORPUS / "anthropic-messages" / "claude-text-simple.sse").read_bytes()
    (folder / "garbage.sse").write_bytes(b"\x00\xff<html>502 Bad Gateway</html>\r\n")
    (folder / "broken-json.sse").write_bytes(good[:400] + b"\n\nevent: content_block_delta\ndata: {nope\n\n")
    with serving(replay.create_app(tmp_path, seed=1)) as up:
        raw = replay_config(up.url, {n: ("anthropic-messages", n) for n in ("garbage", "broken-json")})
        with serving(create_app(config.parse(raw))) as gw:
            for client, path in [("openai-chat", "/v1/chat/completions"), ("anthropic-messages", "/v1/messages")]:
                for name in ("garbage", "broken-json"):
                    body = {
                        "model": name,
                        "max_tokens": 9,
                        "stream": True,
                        "messages": [{"role": "user", "content": "x"}],
                    }
                    r = HTTP.post(gw.url + path, json=body)
                    assert r.status_code in (200, 502), r.text
                    assert "Traceback" not in r.text
                    codec = dialects.get(client)
                    if r.status_code == 502:
                        assert codec.decode_error(502, r.content).type in (
                            "incomplete_stream",
                            "protocol_error",
                            "api_error",
                        )
                    else:
                        response = hub.assemble(decode_all(codec.StreamDecoder(), r.content))
                        assert response.error is not None and not response.complete
