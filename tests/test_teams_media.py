"""Images, embeddings and WebSocket turns through the team features, like chat: virtual key →
model list, RPM/TPM limits and budget before the upstream call, the upstream's usage in the
real ledger (SQLite; Postgres runs the same rows through the same ``Teams`` code in
test_teams_gateway) after it, and the refusals in the client's own dialect, read by the
official SDKs (openai, google-genai) and the WebSocket binding's client."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from websockets.sync.client import connect

from llmbridge import replay
from llmbridge.gateway import config, create_app
from tests.conftest import CORPUS, ROOT
from tests.gateway_util import replay_config, serving, wait_for

HTTP = httpx.Client(timeout=20)
MASTER = "master-" + "m" * 24
ADMIN = {"authorization": f"Bearer {MASTER}"}
DATA = ROOT / "tests" / "data"
PRICE = {"input": 1.0, "output": 10.0}  # USD per million tokens
MEDIA = {  # served by a replay of tests/data (the image and embedding captures)
    "te3": ("openai-chat", "te3-small-batch3"),  # usage: 21 prompt tokens
    "gem-embed": ("gemini", "gemini-embedding-batch3"),  # no usage (Gemini's batch answer has none)
    "gpt-image": ("openai-chat", "gpt-image-stream"),  # usage: 16 in, 4,160 out
    "gpt-image-error": ("openai-chat", "gpt-image-error"),
}
TE3_TOKENS = 21
IMAGE_USAGE = (16, 4160)


@pytest.fixture(scope="module")
def upstreams():
    with serving(replay.create_app(DATA, seed=5)) as media, serving(replay.create_app(CORPUS, seed=5)) as chat:
        yield media, chat


@pytest.fixture
def gw(upstreams, tmp_path):
    media, chat = upstreams
    raw = replay_config(
        media.url,
        MEDIA,
        gateway={"master_key": MASTER, "database_url": f"sqlite:///{tmp_path / 'ledger.db'}",
                 "ledger_flush_seconds": 0.05},
        extra_upstreams={"corpus-chat": {"format": "openai-chat", "base_url": chat.url + "/v1"}},
    )  # fmt: skip
    raw["models"] += [
        {"name": "mmsp-embed", "upstream": "rep-mmsp", "upstream_model": "mmsp-embedding-batch3", "kind": "embedding"},
        {"name": "chat", "upstream": "corpus-chat", "upstream_model": "hf-novita-text"},
    ]
    for entry in raw["models"]:
        entry["price"] = PRICE
    with serving(create_app(config.parse(raw))) as server:
        yield server


def new_key(gw, **fields) -> tuple[str, str]:
    r = HTTP.post(gw.url + "/admin/keys", json={"name": "media", **fields}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["key"]


def rows(gw, key_id: str, expect: int) -> dict[str, dict]:
    """The key's ledger rows by model, once ``expect`` requests are written (the ledger batches)."""

    def report() -> list[dict]:
        r = HTTP.get(gw.url + "/admin/usage", params={"by": "model", "key_id": key_id}, headers=ADMIN)
        assert r.status_code == 200, r.text
        return r.json()["data"]

    assert wait_for(lambda: sum(r["requests"] for r in report()) >= expect, timeout=10), report()
    return {r["model"]: r for r in report()}


def oai(gw, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)


def google(gw, key: str) -> genai.Client:
    return genai.Client(api_key=key, http_options=genai_types.HttpOptions(base_url=gw.url))


# --------------------------------------------------------------------------- the ledger


def test_embeddings_requests_show_up_in_the_ledger_with_their_tokens(gw):
    kid, secret = new_key(gw)
    got = oai(gw, secret).embeddings.create(model="te3", input=["a", "b", "c"])
    assert got.usage.prompt_tokens == TE3_TOKENS
    gem = google(gw, secret)  # (kept: a google-genai client closes its HTTP client when collected)
    gem.models.embed_content(model="gem-embed", contents=["a", "b", "c"])
    r = HTTP.post(
        gw.url + "/mmsp/v1/stream",
        json={"model": "mmsp-embed", "messages": [{"role": "user", "content": t} for t in "abc"]},
        headers={"authorization": f"Bearer {secret}"},
    )
    assert r.status_code == 200 and b"embedding.done" in r.content
    by_model = rows(gw, kid, 3)
    te3 = by_model["te3"]
    assert (te3["requests"], te3["errors"], te3["input_tokens"], te3["output_tokens"]) == (1, 0, TE3_TOKENS, 0)
    assert te3["cost_usd"] == pytest.approx(TE3_TOKENS * PRICE["input"] / 1e6)
    assert by_model["gem-embed"]["requests"] == 1 and by_model["gem-embed"]["errors"] == 0  # no usage to record
    assert by_model["mmsp-embed"]["requests"] == 1 and by_model["mmsp-embed"]["input_tokens"] == 9  # MMSP's stop


def test_image_requests_show_up_in_the_ledger_with_the_upstreams_usage(gw):
    kid, secret = new_key(gw)
    streamed = list(oai(gw, secret).images.generate(model="gpt-image", prompt="a cat", stream=True, partial_images=2))
    assert streamed[-1].type == "image_generation.completed"
    whole = oai(gw, secret).images.generate(model="gpt-image", prompt="a cat")
    assert whole.usage.output_tokens == IMAGE_USAGE[1]
    row = rows(gw, kid, 2)["gpt-image"]
    assert (row["requests"], row["errors"]) == (2, 0)
    assert (row["input_tokens"], row["output_tokens"]) == (2 * IMAGE_USAGE[0], 2 * IMAGE_USAGE[1])
    assert row["cost_usd"] == pytest.approx(2 * (IMAGE_USAGE[0] * 1.0 + IMAGE_USAGE[1] * 10.0) / 1e6)


def test_an_upstream_error_in_an_image_stream_is_a_ledger_error(gw):
    kid, secret = new_key(gw)
    r = HTTP.post(
        gw.url + "/v1/images",
        json={"model": "gpt-image-error", "prompt": "x", "stream": True},
        headers={"authorization": f"Bearer {secret}"},
    )
    assert r.status_code == 200 and b"event: error" in r.content
    row = rows(gw, kid, 1)["gpt-image-error"]
    assert (row["requests"], row["errors"]) == (1, 1)


def test_websocket_turns_are_metered_one_row_each(gw):
    kid, secret = new_key(gw)
    url = gw.url.replace("http://", "ws://") + "/v1/stream"
    with connect(url, additional_headers={"authorization": f"Bearer {secret}"}) as ws:
        for _ in range(2):
            ws.send(json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}))
            while json.loads(ws.recv(timeout=20))["type"] != "stream.end":
                pass
    row = rows(gw, kid, 2)["chat"]
    assert (row["requests"], row["errors"]) == (2, 0) and row["input_tokens"] > 0 and row["output_tokens"] > 0


def test_a_websocket_turn_over_the_rpm_limit_ends_with_an_error_the_connection_stays(gw):
    _, secret = new_key(gw, rpm_limit=1)
    url = gw.url.replace("http://", "ws://") + "/v1/stream"
    turn = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
    with connect(url, additional_headers={"authorization": f"Bearer {secret}"}) as ws:
        ends = []
        for _ in range(3):
            ws.send(turn)
            envelopes = []
            while not envelopes or envelopes[-1]["type"] != "stream.end":
                envelopes.append(json.loads(ws.recv(timeout=20)))
            ends.append(envelopes)
    assert ends[0][0]["type"] == "stream.start" and all(e["type"] != "error" for e in ends[0])
    for refused in ends[1:]:  # a whole stream of its own (start, error, end), on the same open connection
        assert [e["type"] for e in refused] == ["stream.start", "error", "stream.end"]
        assert refused[1]["error"]["type"] == "rate_limit" and refused[1]["llmbridge:status"] == 429


# --------------------------------------------------------------------------- limits and budgets


def test_rpm_limit_refuses_the_next_embeddings_request_with_429_in_each_dialect(gw):
    _, secret = new_key(gw, rpm_limit=2)
    client = oai(gw, secret)
    for _ in range(2):
        client.embeddings.create(model="te3", input=["a", "b", "c"])
    with pytest.raises(openai.RateLimitError) as refused:
        client.embeddings.create(model="te3", input=["a", "b", "c"])
    assert refused.value.status_code == 429 and "requests per minute" in refused.value.message
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    gem = google(gw, secret)
    with pytest.raises(genai_errors.ClientError) as refused_gem:  # Google's own error shape, read by google-genai
        gem.models.embed_content(model="gem-embed", contents=["a", "b", "c"])
    assert refused_gem.value.code == 429 and refused_gem.value.status == "RESOURCE_EXHAUSTED"
    with pytest.raises(openai.RateLimitError):
        list(oai(gw, secret).images.generate(model="gpt-image", prompt="x", stream=True))


def test_tpm_limit_counts_the_embeddings_tokens(gw):
    # 21 tokens per te3 call (its usage); a 30-token limit lets one call through, then refuses
    _, secret = new_key(gw, tpm_limit=30)
    client = oai(gw, secret)
    client.embeddings.create(model="te3", input=["a", "b", "c"])
    client.embeddings.create(model="te3", input=["a", "b", "c"])  # 21 < 30 when admitted: the real count is after
    with pytest.raises(openai.RateLimitError) as refused:
        client.embeddings.create(model="te3", input=["a", "b", "c"])
    assert "tokens per minute" in refused.value.message


def test_a_budget_stops_an_image_key_within_one_request(gw):
    per_request = (IMAGE_USAGE[0] * 1.0 + IMAGE_USAGE[1] * 10.0) / 1e6
    kid, secret = new_key(gw, budget_usd=per_request * 2.5, budget_period="total")
    client = oai(gw, secret)
    statuses = []
    for _ in range(6):
        try:
            client.images.generate(model="gpt-image", prompt="x")
            statuses.append(200)
        except openai.PermissionDeniedError as exc:
            statuses.append(exc.status_code)
            assert "budget" in exc.message
            break
    assert 3 <= statuses.count(200) <= 4 and statuses[-1] == 403, statuses
    refused = rows(gw, kid, len(statuses))["gpt-image"]
    assert refused["errors"] == 1  # the refusal is a ledger row too


def test_a_key_limited_to_other_models_cannot_embed_or_draw(gw):
    _, secret = new_key(gw, models=["chat"])
    with pytest.raises(openai.PermissionDeniedError):
        oai(gw, secret).embeddings.create(model="te3", input=["a", "b", "c"])
    with pytest.raises(openai.PermissionDeniedError):
        oai(gw, secret).images.generate(model="gpt-image", prompt="x")
    with pytest.raises(openai.AuthenticationError):
        oai(gw, "sk-llmb-not-a-key").embeddings.create(model="te3", input=["a", "b", "c"])


# --------------------------------------------------------------------------- metrics and spans


def test_media_requests_in_the_metrics_and_as_genai_spans(gw):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client.parser import text_string_to_metric_families

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gw.app.state.gateway.teams.use_tracer_provider(provider)
    _, secret = new_key(gw)
    oai(gw, secret).embeddings.create(model="te3", input=["a", "b", "c"])
    list(oai(gw, secret).images.generate(model="gpt-image", prompt="a cat", stream=True))
    assert wait_for(lambda: len(exporter.get_finished_spans()) == 2, timeout=10)
    embeddings, image = exporter.get_finished_spans()
    assert (embeddings.name, image.name) == ("embeddings te3", "image_generation gpt-image")
    assert embeddings.attributes["gen_ai.operation.name"] == "embeddings"
    assert embeddings.attributes["gen_ai.usage.input_tokens"] == TE3_TOKENS
    assert image.attributes["gen_ai.usage.output_tokens"] == IMAGE_USAGE[1]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(HTTP.get(gw.url + "/metrics").text)
        for s in family.samples
    }
    assert samples[("llmbridge_requests_total", (("dialect", "openai-chat"), ("model", "te3"), ("status", "200")))] == 1
    assert samples[("llmbridge_tokens_total", (("direction", "input"), ("model", "te3")))] == TE3_TOKENS
    assert samples[("llmbridge_tokens_total", (("direction", "output"), ("model", "gpt-image")))] == IMAGE_USAGE[1]
    assert samples[("llmbridge_open_streams", ())] == 0
