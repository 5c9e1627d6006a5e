"""``Client.images`` / ``Client.embed`` and their async twins, against a running gateway whose
upstreams replay the captures of tests/data."""

from __future__ import annotations

import asyncio

import pytest

from llmbridge import replay
from llmbridge.client import AsyncClient, Client, Embeddings
from llmbridge.errors import UpstreamError
from llmbridge.gateway import config, create_app
from llmbridge.media import COMPLETED, PARTIAL, sniff
from tests.gateway_util import replay_config, serving

from .conftest import ROOT

MODELS = {
    "gpt-image": ("openai-chat", "gpt-image-stream"),
    "gpt-image-error": ("openai-chat", "gpt-image-error"),
    "nano": ("gemini", "gemini-image"),
    "te3": ("openai-chat", "te3-small-batch3"),
    "gem-embed": ("gemini", "gemini-embedding-batch3"),
}


@pytest.fixture(scope="module")
def gateway():
    with serving(replay.create_app(ROOT / "tests" / "data", seed=9)) as upstream:
        app = create_app(config.parse(replay_config(upstream.url, MODELS)))
        with serving(app) as gw:
            yield gw


@pytest.mark.parametrize("dialect", ["llm-stream", "openai-chat", "anthropic-messages", "mmsp"])
def test_images_stream_partials_then_final(gateway, dialect):
    with Client(gateway.url, dialect=dialect) as client:
        events = list(client.images("gpt-image", "a cat", partial_images=2))
    assert [e.type for e in events] == [PARTIAL, PARTIAL, COMPLETED]
    assert all(sniff(e.data) == "image/png" for e in events)
    assert events[-1].usage["output_tokens"] == 4160


def test_images_not_streaming_and_from_gemini(gateway):
    with Client(gateway.url) as client:
        [final] = client.images("nano", "a banana", stream=False)
        assert final.type == COMPLETED and sniff(final.data) == "image/png" and final.usage["input_tokens"] == 12
        lazy = client.images("gpt-image", "x")  # nothing is sent before the first next()
        assert next(lazy).type == PARTIAL
        lazy.close()


def test_image_errors_raise(gateway):
    with Client(gateway.url) as client:
        seen = []
        with pytest.raises(UpstreamError, match="safety system"):
            for event in client.images("gpt-image-error", "x"):
                seen.append(event.type)
        assert seen == [PARTIAL]
        with pytest.raises(UpstreamError) as info:
            list(client.images("gpt-image", "x", size="7x7"))
        assert info.value.status == 400 and info.value.type == "invalid_request"
        with pytest.raises(TypeError, match="colour"):
            client.images("gpt-image", "x", colour="red")


@pytest.mark.parametrize("dialect", ["llm-stream", "openai-chat", "gemini"])
def test_embed(gateway, dialect):
    with Client(gateway.url, dialect=dialect) as client:
        for model in ("te3", "gem-embed"):
            result = client.embed(model, ["a", "b", "c"])
            assert isinstance(result, Embeddings) and len(result.vectors) == 3 and len(result.vectors[0]) == 16
        result = client.embed("te3", ["a", "b", "c"])
        if dialect != "gemini":
            assert result.usage.input_tokens == 21
        with pytest.raises(UpstreamError) as info:
            client.embed("te3", [])
        assert info.value.status == 400


def test_async_twins(gateway):
    async def main():
        async with AsyncClient(gateway.url) as client:
            events = [e async for e in client.images("gpt-image", "a cat", partial_images=2)]
            assert [e.type for e in events] == [PARTIAL, PARTIAL, COMPLETED]
            finals = [e async for e in client.images("nano", "x", stream=False)]
            assert [e.type for e in finals] == [COMPLETED]
            with pytest.raises(UpstreamError, match="safety system"):
                async for _ in client.images("gpt-image-error", "x"):
                    pass
            result = await client.embed("te3", ["a", "b", "c"])
            with Client(gateway.url) as sync:
                assert sync.embed("te3", ["a", "b", "c"]).vectors == result.vectors
            # the replay answers three vectors whatever is asked: the gateway refuses the mismatch
            with pytest.raises(UpstreamError, match="expected 1 embeddings") as info:
                await client.embed("te3", "just one")
            assert info.value.status == 502

    asyncio.run(main())


def test_embed_local_model_with_no_config():
    with serving(create_app()) as gw, Client(gw.url) as client:
        result = client.embed(
            "local-embed",
            [
                "How do I bake bread at home?",
                "Instructions for making a homemade loaf.",
                "How do I fix my car at home?",
            ],
        )
    a, p, w = result.vectors
    assert sum(x * y for x, y in zip(a, p, strict=True)) > sum(x * y for x, y in zip(a, w, strict=True))
    assert result.usage.input_tokens > 0
