"""Images and embeddings through a running gateway: the official SDKs (openai, google-genai,
mmsp) as clients, replay servers serving the image/embedding captures of tests/data as
upstreams, and the embedded local-embed model with no config."""

from __future__ import annotations

import base64
import json
import logging
import math
import struct

import httpx
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from llmbridge import replay, sse
from llmbridge.gateway import config, create_app
from llmbridge.media import sniff
from tests.gateway_util import replay_config, serving
from tests.readers import reader

from .conftest import ROOT

DATA = ROOT / "tests" / "data"
HTTP = httpx.Client(timeout=60)

MODELS = {
    # images
    "gpt-image": ("openai-chat", "gpt-image-stream"),
    "gpt-image-done": ("openai-responses", "gpt-image-done"),
    "gpt-image-error": ("openai-chat", "gpt-image-error"),
    "gpt-image-broken": ("openai-chat", "gpt-image-broken"),
    "gpt-image-wrong-format": ("openai-chat", "gpt-image-wrong-format"),
    "gpt-image-cut": ("openai-chat", "gpt-image-stream@truncate=900"),
    "nano": ("gemini", "gemini-image"),
    "nano-broken": ("gemini", "gemini-image-broken"),
    "nano-refusal": ("gemini", "gemini-image-refusal"),
    "claude-image": ("anthropic-messages", "nothing"),
    # embeddings
    "te3": ("openai-chat", "te3-small-batch3"),
    "te3-base64": ("openai-chat", "te3-small-batch3-base64"),
    "te3-short": ("openai-chat", "te3-small-short"),
    "gem-embed": ("gemini", "gemini-embedding-batch3"),
    "gem-malformed": ("gemini", "gemini-embedding-malformed"),
    "mmsp-embed": ("mmsp", "mmsp-embedding-batch3"),
    # fallback: the first upstream is overloaded, the second answers
    "te3-fallback": (
        ["rep-chat", "rep-gemini"],
        {"rep-chat": "te3-small-batch3@status=503", "rep-gemini": "gemini-embedding-batch3"},
    ),
    "gpt-image-fallback": (
        ["rep-chat", "rep-responses"],
        {"rep-chat": "gpt-image-stream@status=429", "rep-responses": "gpt-image-done"},
    ),
    # a Responses image_generation call, asked for on the chat endpoints
    "responses-image": ("openai-responses", "responses-image-gen"),
}


@pytest.fixture(scope="module")
def gateway():
    with serving(replay.create_app(DATA, seed=5)) as upstream:
        raw = replay_config(upstream.url, {k: v for k, v in MODELS.items() if not isinstance(v[0], list)})
        for name, (ups, targets) in MODELS.items():
            if isinstance(ups, list):
                raw["models"].append({"name": name, "upstreams": ups, "upstream_model": targets})
        raw["models"].append(
            {
                "name": "vectors",
                "upstream": "rep-gemini",
                "upstream_model": "gemini-embedding-batch3",
                "kind": "embedding",
            }
        )
        raw["gateway"] = {"max_image_bytes": 4096, "keepalive_seconds": 30}
        with serving(create_app(config.parse(raw))) as gw:
            yield gw


def oai(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)


def events(body: bytes) -> list[sse.Event]:
    d = sse.Decoder()
    return [*d.feed(body), *d.close()]


# --------------------------------------------------------------------------- images


def test_openai_sdk_streams_partial_images_then_the_final_one(gateway):
    stream = oai(gateway).images.generate(model="gpt-image", prompt="a cat", stream=True, partial_images=2)
    got = list(stream)
    assert [e.type for e in got] == ["image_generation.partial_image"] * 2 + ["image_generation.completed"]
    assert [e.partial_image_index for e in got[:2]] == [0, 1]
    for e in got:
        assert sniff(base64.b64decode(e.b64_json)) == "image/png"
    assert got[-1].usage.output_tokens == 4160 and got[-1].usage.input_tokens_details.text_tokens == 16


def test_stream_ends_with_done_whether_or_not_the_upstream_sent_one(gateway):
    for model in ("gpt-image", "gpt-image-done"):  # OpenAI's own stream has no [DONE]; the spec's has
        r = HTTP.post(gateway.url + "/v1/images", json={"model": model, "prompt": "x", "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        evs = events(r.content)
        assert evs[-1].data == "[DONE]" and [e.data for e in evs].count("[DONE]") == 1
        assert [e.event for e in evs[:-1]] == ["image_generation.partial_image"] * 2 + ["image_generation.completed"]


def test_not_streaming_gives_an_images_response(gateway):
    for model in ("gpt-image", "nano"):
        result = oai(gateway).images.generate(model=model, prompt="a cat", size="1024x1024")
        assert len(result.data) == 1 and sniff(base64.b64decode(result.data[0].b64_json)) == "image/png"
        assert result.usage.total_tokens > 0 and result.output_format == "png"


def test_gemini_image_parts_become_a_completed_event(gateway):
    got = list(oai(gateway).images.generate(model="nano", prompt="a banana", stream=True))
    assert [e.type for e in got] == ["image_generation.completed"]
    assert sniff(base64.b64decode(got[0].b64_json)) == "image/png"
    assert (got[0].usage.input_tokens, got[0].usage.output_tokens) == (12, 1301)


def test_n_images_from_gemini_are_n_calls(gateway):
    r = HTTP.post(gateway.url + "/v1/images/generations", json={"model": "nano", "prompt": "x", "n": 2})
    assert r.status_code == 200 and len(r.json()["data"]) == 2
    assert r.json()["usage"]["output_tokens"] == 2 * 1301


def test_an_error_event_replaces_the_final_image(gateway):
    stream = oai(gateway).images.generate(model="gpt-image-error", prompt="x", stream=True)
    seen = []
    with pytest.raises(openai.APIError, match="rejected by the safety system"):
        for event in stream:
            seen.append(event.type)
    assert seen == ["image_generation.partial_image"]
    r = HTTP.post(gateway.url + "/v1/images", json={"model": "gpt-image-error", "prompt": "x"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "moderation_blocked"


@pytest.mark.parametrize("model", ["gpt-image-broken", "gpt-image-wrong-format", "nano-broken"])
def test_a_broken_upstream_image_is_an_error_event_never_a_500(gateway, model, caplog):
    with caplog.at_level(logging.INFO, logger="llmbridge"):
        r = HTTP.post(gateway.url + "/v1/images", json={"model": model, "prompt": "x", "stream": True})
        assert r.status_code == 200
        evs = events(r.content)
        assert [e.event for e in evs][-2:] == ["error", "message"] and evs[-1].data == "[DONE]"
        assert "image_generation.completed" not in [e.event for e in evs]
        error = json.loads(evs[-2].data)["error"]
        assert error["code"] == "bad_upstream_image" and error["type"] == "server_error"
        r = HTTP.post(gateway.url + "/v1/images", json={"model": model, "prompt": "x"})
        assert r.status_code == 502 and "broken image" in r.json()["error"]["message"]
    assert "Traceback" not in caplog.text


def test_a_truncated_upstream_stream_is_an_error_event(gateway):
    r = HTTP.post(gateway.url + "/v1/images", json={"model": "gpt-image-cut", "prompt": "x", "stream": True})
    evs = events(r.content)
    assert evs[-2].event == "error" and "ended before the image was complete" in evs[-2].data


def test_refusal_text_is_quoted_in_the_error(gateway):
    r = HTTP.post(gateway.url + "/v1/images", json={"model": "nano-refusal", "prompt": "x"})
    assert r.status_code == 502 and "I can't create that image." in r.json()["error"]["message"]


def test_fallback_before_the_first_byte(gateway):
    got = list(oai(gateway).images.generate(model="gpt-image-fallback", prompt="x", stream=True))
    assert got[-1].type == "image_generation.completed"
    r = HTTP.post(gateway.url + "/v1/embeddings", json={"model": "te3-fallback", "input": ["a", "b", "c"]})
    assert r.status_code == 200 and len(r.json()["data"]) == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt": "x", "size": "999x999"}, "size"),
        ({"prompt": "x", "output_format": "bmp"}, "output_format"),
        ({"prompt": "x", "n": 0}, "n"),
        ({"prompt": "x", "n": 11}, "n"),
        ({"prompt": "x", "quality": "ultra"}, "quality"),
        ({"prompt": "x", "partial_images": 4}, "partial_images"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": "x", "background": "transparent", "output_format": "jpeg"}, "background"),
        ({"prompt": "x", "stream": True, "response_format": "url"}, "response_format"),
    ],
)
def test_bad_image_requests_are_400_before_the_stream(gateway, body, field):
    r = HTTP.post(gateway.url + "/v1/images", json={"model": "gpt-image", "stream": True, **body})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert r.json()["error"]["type"] == "invalid_request_error" and field in r.json()["error"]["message"]


def test_models_without_images(gateway):
    r = HTTP.post(gateway.url + "/v1/images", json={"model": "nope", "prompt": "x"})
    assert r.status_code == 404
    with serving(create_app()) as gw:  # the local model makes no images
        r = HTTP.post(gw.url + "/v1/images", json={"model": "local", "prompt": "x", "stream": True})
        assert r.status_code == 400 and r.json()["error"]["code"] == "no_image_model"


# --------------------------------------------------------------------------- image output across dialects


def test_a_responses_image_reaches_every_client_dialect_in_its_form(gateway):
    final = json.loads(
        next(
            line
            for line in (DATA / "openai-responses" / "responses-image-gen.sse").read_text().splitlines()
            if '"response.output_item.done"' in line
        )[6:]
    )["item"]["result"]
    # Gemini: an inlineData part, read by google-genai
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=gateway.url))
    parts = [
        p
        for chunk in client.models.generate_content_stream(model="responses-image", contents="draw")
        for c in chunk.candidates or []
        if c.content
        for p in c.content.parts or []
    ]
    blobs = [p.inline_data for p in parts if p.inline_data]
    assert len(blobs) == 1 and blobs[0].mime_type == "image/png" and blobs[0].data == base64.b64decode(final)
    # MMSP: one inline_data item, read by MMSP's own assembler
    r = HTTP.post(
        gateway.url + "/mmsp/v1/stream",
        json={
            "model": "responses-image",
            "messages": [{"role": "user", "content_items": [{"type": "text.done", "text": "draw"}]}],
        },
    )
    uni = [json.loads(e.data) for e in events(r.content) if e.data != "[DONE]"]
    items = [i for u in uni for i in u["content_items"] if i["type"] == "inline_data.done"]
    assert len(items) == 1 and items[0]["mime_type"] == "image/png" and items[0]["data"] == final
    assert reader("mmsp").read(r.content).error is None  # MMSP's own assembler reads the stream
    # LLM-Stream: the image in the draft's extension fields (docs/llm-stream.md)
    r = HTTP.post(
        gateway.url + "/v1/stream",
        json={"model": "responses-image", "messages": [{"role": "user", "content": "draw"}]},
        headers={"content-type": "application/llm-request+json"},
    )
    data = [json.loads(e.data) for e in events(r.content) if e.event == "content.delta"]
    assert "".join(d["delta"].get("llmbridge:data", "") for d in data) == final
    assert any((d.get("llmbridge:block") or {}).get("mime_type") == "image/png" for d in data)
    # Responses itself: relayed, the image_generation_call item as the upstream sent it
    done = [
        i
        for i in oai(gateway).responses.create(model="responses-image", input="draw").output
        if i.type == "image_generation_call"
    ]
    assert len(done) == 1 and done[0].result == final


# --------------------------------------------------------------------------- embeddings


def test_openai_sdk_embeddings_float_and_base64(gateway):
    want = json.loads((DATA / "openai-embeddings" / "te3-small-batch3.json").read_text())
    for model in ("te3", "te3-base64"):
        # the SDK asks for base64 when no format is given and decodes it; float or base64 on request
        for fmt in (openai.NOT_GIVEN, "float", "base64"):
            got = oai(gateway).embeddings.create(model=model, input=["a", "b", "c"], encoding_format=fmt)
            assert [d.index for d in got.data] == [0, 1, 2] and got.usage.prompt_tokens == 21
            for d, w in zip(got.data, want["data"], strict=True):
                vector = d.embedding
                if fmt == "base64":
                    raw = base64.b64decode(vector)
                    vector = struct.unpack(f"<{len(raw) // 4}f", raw)
                assert max(abs(x - y) for x, y in zip(vector, w["embedding"], strict=True)) < 1e-6


def test_embeddings_translate_any_to_any(gateway):
    # an OpenAI client on a Gemini upstream, a Gemini client on an OpenAI upstream
    got = oai(gateway).embeddings.create(model="gem-embed", input=["a", "b", "c"])
    assert len(got.data) == 3 and len(got.data[0].embedding) == 16
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=gateway.url))
    result = client.models.embed_content(model="te3", contents=["a", "b", "c"])
    assert len(result.embeddings) == 3 and len(result.embeddings[0].values) == 16
    # both API versions the SDK may use, and single embedContent
    for version in ("v1", "v1beta"):
        r = HTTP.post(
            f"{gateway.url}/{version}/models/gem-embed:batchEmbedContents",
            json={"requests": [{"content": {"parts": [{"text": t}]}} for t in "abc"]},
        )
        assert r.status_code == 200 and len(r.json()["embeddings"]) == 3


def test_an_mmsp_embedding_stream_serves_openai_and_gemini_clients(gateway):
    got = oai(gateway).embeddings.create(model="mmsp-embed", input=["a", "b", "c"])
    assert [len(d.embedding) for d in got.data] == [16] * 3 and got.usage.prompt_tokens == 9
    r = HTTP.post(
        gateway.url + "/v1beta/models/mmsp-embed:batchEmbedContents",
        json={"requests": [{"content": {"parts": [{"text": t}]}} for t in "abc"]},
    )
    assert r.status_code == 200 and r.json()["usageMetadata"]["promptTokenCount"] == 9
    r = HTTP.post(gateway.url + "/v1/embeddings", json={"model": "mmsp-embed", "input": ["only one"]})
    assert r.status_code == 502 and "expected 1 embeddings" in r.json()["error"]["message"]


def test_malformed_upstream_embeddings_are_a_502_in_the_clients_shape(gateway):
    r = HTTP.post(gateway.url + "/v1/embeddings", json={"model": "gem-malformed", "input": ["a", "b", "c"]})
    assert r.status_code == 502 and "malformed" in r.json()["error"]["message"]
    r = HTTP.post(gateway.url + "/v1/embeddings", json={"model": "te3-short", "input": ["a", "b", "c"]})
    assert r.status_code == 502
    body = {"content": {"parts": [{"text": "a"}]}}
    r = HTTP.post(gateway.url + "/v1beta/models/gem-malformed:embedContent", json=body)
    assert r.status_code == 502 and r.json()["error"]["status"] == "INTERNAL"


@pytest.mark.parametrize(
    "body",
    [
        {"input": []},
        {"input": ""},
        {"input": ["ok", "  "]},
        {"input": [[1, 2, 3]]},
        {"input": 5},
        {"input": "x", "encoding_format": "int8"},
        {"input": "x", "dimensions": 0},
        {"input": ["x"] * 2049},
    ],
)
def test_bad_embedding_requests_are_400(gateway, body):
    r = HTTP.post(gateway.url + "/v1/embeddings", json={"model": "te3", **body})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_bad_gemini_embedding_requests_are_400_in_googles_shape(gateway):
    url = gateway.url + "/v1beta/models/gem-embed:batchEmbedContents"
    for body in ({"requests": []}, {"requests": [{"content": {"parts": [{"inlineData": {}}]}}]}, {"nope": 1}):
        r = HTTP.post(url, json=body)
        assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_mmsp_embedding_stream_from_an_upstream(gateway):
    r = HTTP.post(
        gateway.url + "/mmsp/v1/stream",
        json={"model": "vectors", "messages": [{"role": "user", "content": m} for m in ("a", "b", "c")]},
    )
    uni = [json.loads(e.data) for e in events(r.content) if e.data != "[DONE]"]
    kinds = [u["content_items"][0]["type"] if u["content_items"] else u["event_type"] for u in uni]
    assert kinds == ["embedding.delta", "embedding.done"] * 3 + ["stop"]
    assert uni[0]["content_items"][0]["embedding"] == uni[1]["content_items"][0]["embedding"]
    assert len(uni[1]["content_items"][0]["embedding"]) == 16


# --------------------------------------------------------------------------- local-embed, no config


@pytest.fixture(scope="module")
def local():
    with serving(create_app()) as gw:
        yield gw


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_local_embed_is_listed_and_served_with_no_config(local):
    assert "local-embed" in [m.id for m in oai(local).models.list()]
    got = oai(local).embeddings.create(
        model="local-embed",
        input=[
            "How do I bake bread at home?",
            "Instructions for making a homemade loaf.",
            "How do I fix my car at home?",
        ],
    )
    v = [d.embedding for d in got.data]
    assert len(v[0]) == 384 and all(abs(math.sqrt(sum(x * x for x in e)) - 1) < 1e-3 for e in v)
    assert cos(v[0], v[1]) > cos(v[0], v[2])
    assert got.usage.prompt_tokens == got.usage.total_tokens > 0


def test_local_embed_through_gemini_and_mmsp(local):
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=local.url))
    result = client.models.embed_content(model="local-embed", contents=["one", "two"])
    assert [len(e.values) for e in result.embeddings] == [384, 384]
    r = HTTP.post(
        local.url + "/mmsp/v1/stream",
        json={
            "model": "local-embed",
            "messages": [
                {
                    "role": "user",
                    "content_items": [{"type": "text.done", "text": "first"}, {"type": "text.done", "text": "x"}],
                },
                {"role": "user", "content": "second"},
            ],
        },
    )
    uni = [json.loads(e.data) for e in events(r.content) if e.data != "[DONE]"]
    done = [
        u["content_items"][0]["embedding"]
        for u in uni
        if u["content_items"] and u["content_items"][0]["type"] == "embedding.done"
    ]
    assert len(done) == 2 and uni[-1]["event_type"] == "stop" and uni[-1]["usage_metadata"]["prompt_tokens"] > 0
    single = oai(local).embeddings.create(model="local-embed", input="second", encoding_format="float").data[0]
    assert max(abs(x - y) for x, y in zip(done[1], single.embedding, strict=True)) < 1e-5


def test_local_embed_limits(local):
    r = HTTP.post(local.url + "/v1/embeddings", json={"model": "local-embed", "input": "word " * 400})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = HTTP.post(local.url + "/v1/embeddings", json={"model": "local-embed", "input": "x", "dimensions": 128})
    assert r.status_code == 400 and "384" in r.json()["error"]["message"]
    r = HTTP.post(
        local.url + "/v1/chat/completions",
        json={"model": "local-embed", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 400 and "embedding model" in r.json()["error"]["message"]
    r = HTTP.post(local.url + "/v1/embeddings", json={"model": "local", "input": "x"})
    assert r.status_code == 400 and "local-embed" in r.json()["error"]["message"]


def test_a_gemini_image_reaches_responses_chat_and_messages_clients(gateway):
    body = (DATA / "gemini" / "gemini-image.sse").read_text()
    final = next(json.loads(line[6:]) for line in body.splitlines() if "inlineData" in line)
    final = final["candidates"][0]["content"]["parts"][0]["inlineData"]["data"]
    # Responses: the image_generation tool's own item, read by the openai SDK
    response = oai(gateway).responses.create(model="nano", input="draw a banana")
    items = [i for i in response.output if i.type == "image_generation_call"]
    assert len(items) == 1 and items[0].result == final and items[0].status == "completed"
    with oai(gateway).responses.stream(model="nano", input="draw a banana") as stream:
        done = [i for i in stream.get_final_response().output if i.type == "image_generation_call"]
    assert done[0].result == final
    # Chat Completions and Messages have no image output: our extension, which their SDKs ignore,
    # sent to a client that asks for it (x-llmbridge-extensions; off by default, docs/gateway.md)
    r = HTTP.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "nano", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-llmbridge-extensions": "1"},
    )
    plain = HTTP.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "nano", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    )
    assert b"llmbridge" not in plain.content and plain.content.endswith(b"data: [DONE]\n\n")
    chunks = [json.loads(e.data) for e in events(r.content) if e.data != "[DONE]"]
    carried = [c["choices"][0]["llmbridge"] for c in chunks if c.get("choices") and "llmbridge" in c["choices"][0]]
    assert any((b.get("block") or {}).get("mime_type") == "image/png" for b in carried)
    assert "".join(b["delta"] for b in carried if "delta" in b) == final
    r = HTTP.post(
        gateway.url + "/v1/messages",
        json={"model": "nano", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
        headers={"anthropic-version": "2023-06-01", "x-llmbridge-extensions": "1"},
    )
    blocks = r.json()["content"]
    assert any(b["type"] == "llmbridge" for b in blocks), blocks


def test_config_keys_for_media():
    base = {"upstreams": {"u": {"format": "openai-chat", "base_url": "http://x/v1"}}}
    parsed = config.parse(
        {**base, "gateway": {"max_image_bytes": 1024}, "models": [{"name": "e", "upstream": "u", "kind": "embedding"}]}
    )
    assert parsed.gateway.max_image_bytes == 1024 and parsed.models["e"].kind == "embedding"
    with pytest.raises(config.ConfigError, match=r"models\[0\]\.kind"):
        config.parse({**base, "models": [{"name": "e", "upstream": "u", "kind": "vectors"}]})
    with pytest.raises(config.ConfigError, match=r"gateway\.max_image_bytes"):
        config.parse({**base, "gateway": {"max_image_bytes": 0}})
    default = config.default_config()
    assert default.models["local-embed"].kind == "embedding" and default.models["local"].kind == "chat"


def test_media_endpoints_need_the_key_when_one_is_set():
    raw = {
        "gateway": {"api_keys": ["sekret"]},
        "upstreams": {"local": {"format": "local"}},
        "models": [{"name": "local-embed", "upstream": "local", "kind": "embedding"}],
    }
    with serving(create_app(config.parse(raw))) as gw:
        for path, body in (
            ("/v1/embeddings", {"model": "local-embed", "input": "x"}),
            ("/v1/images", {"model": "local-embed", "prompt": "x"}),
        ):
            r = HTTP.post(gw.url + path, json=body)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = HTTP.post(gw.url + "/v1beta/models/local-embed:embedContent", json={"content": {"parts": [{"text": "x"}]}})
        assert r.status_code == 401 and r.json()["error"]["status"] == "UNAUTHENTICATED"
        r = HTTP.post(
            gw.url + "/v1/embeddings",
            json={"model": "local-embed", "input": "x"},
            headers={"authorization": "Bearer sekret"},
        )
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 384
