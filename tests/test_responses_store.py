"""Stored responses (issue 25): OpenAI's stateful Responses API over stateless upstreams.

The official ``openai`` SDK runs three turns chained by ``previous_response_id`` against the
gateway, whose upstreams are fakes on real sockets (Chat Completions, Messages, Gemini) that
record what they were sent: the third request upstream must carry the whole conversation.
Then ``GET`` / ``input_items`` / ``DELETE``, another key's 404, a restart, and two replicas on
one Postgres.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from llmbridge.gateway import config, create_app
from tests.gateway_util import serving, wait_for
from tests.store_util import FakeUpstreams

MASTER = "master-0123456789abcdef"
ADMIN = {"authorization": f"Bearer {MASTER}"}


@pytest.fixture(scope="module")
def upstreams():
    fake = FakeUpstreams()
    with serving(fake.app()) as server:
        server.fake = fake
        yield server


def gateway_config(up_url: str, db: Path | None = None, **gateway: object) -> config.Config:
    raw: dict = {
        "gateway": dict(gateway),
        "upstreams": {
            "chat": {"format": "openai-chat", "base_url": up_url + "/v1"},
            "claude": {"format": "anthropic-messages", "base_url": up_url},
            "gem": {"format": "gemini", "base_url": up_url},
            "resp": {"format": "openai-responses", "base_url": up_url + "/v1"},
        },
        "models": [
            {"name": "m-chat", "upstream": "chat"},
            {"name": "m-claude", "upstream": "claude"},
            {"name": "m-gemini", "upstream": "gem"},
            {"name": "m-resp", "upstream": "resp"},
            {"name": "m-cached", "upstream": "chat", "cache": {"mode": "exact", "ttl_seconds": 600}},
        ],
    }
    if db is not None:
        raw["gateway"].update(master_key=MASTER, database_url=f"sqlite:///{db}", ledger_flush_seconds=0.1)
    return config.parse(raw)


def new_key(url: str, **fields: object) -> str:
    r = httpx.post(url + "/admin/keys", json={"name": "k", **fields}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return r.json()["key"]


def text_of(body: dict) -> str:
    return json.dumps(body)


MODELS = {"openai-chat": "m-chat", "anthropic-messages": "m-claude", "gemini": "m-gemini"}


def three_turns(client: openai.OpenAI, model: str) -> list:
    first = client.responses.create(model=model, input="first question", instructions="be brief")
    second = client.responses.create(model=model, input="second question", previous_response_id=first.id)
    with client.responses.stream(
        model=model, input=[{"role": "user", "content": "third question"}], previous_response_id=second.id
    ) as stream:
        for _ in stream:
            pass
        third = stream.get_final_response()
    return [first, second, third]


@pytest.mark.parametrize("dialect", list(MODELS))
def test_three_turns_over_a_stateless_upstream(upstreams, tmp_path, dialect):
    fake = upstreams.fake
    with serving(create_app(gateway_config(upstreams.url, tmp_path / "gw.db"))) as gw:
        alice = openai.OpenAI(base_url=gw.url + "/v1", api_key=new_key(gw.url), max_retries=0)
        before = len(fake.received[dialect])
        first, second, third = three_turns(alice, MODELS[dialect])
        assert [r.id.startswith("resp_") for r in (first, second, third)] == [True] * 3
        assert len({first.id, second.id, third.id}) == 3
        # the objects say what happened, as OpenAI's do (created, not only fetched)
        assert (second.previous_response_id, third.previous_response_id) == (first.id, second.id)
        assert first.store is True and first.instructions == "be brief" and second.instructions is None
        assert first.output_text == f"reply {before + 1} from {dialect}"
        assert third.output_text == f"reply {before + 3} from {dialect}"
        sent = fake.received[dialect][before:]
        assert len(sent) == 3
        last = text_of(sent[2])  # the whole conversation, in the upstream's own shape
        for piece in ("first question", "second question", "third question",
                      f"reply {before + 1} from {dialect}", f"reply {before + 2} from {dialect}"):  # fmt: skip
            assert piece in last, piece
        assert "be brief" not in text_of(sent[1])  # instructions are not carried over (as OpenAI)
        assert "previous_response_id" not in last
        assert "third question" not in text_of(sent[1])

        got = alice.responses.retrieve(second.id)
        assert got.id == second.id and got.output_text == second.output_text
        assert got.previous_response_id == first.id
        items = alice.responses.input_items.list(second.id)
        assert [i.type for i in items.data] == ["message"]
        assert items.data[0].content[0].text == "second question"
        assert items.data[0].id.startswith("msg_")

        bob = openai.OpenAI(base_url=gw.url + "/v1", api_key=new_key(gw.url), max_retries=0)
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(second.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.input_items.list(second.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.delete(second.id)
        with pytest.raises(openai.BadRequestError) as refused:
            bob.responses.create(model=MODELS[dialect], input="hi", previous_response_id=second.id)
        assert refused.value.code == "previous_response_not_found"
        master = openai.OpenAI(base_url=gw.url + "/v1", api_key=MASTER, max_retries=0)
        assert master.responses.retrieve(second.id).id == second.id  # the master key sees every response

        alice.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            alice.responses.retrieve(first.id)
        # the conversation now starts after the deleted response
        fourth = alice.responses.create(model=MODELS[dialect], input="fourth", previous_response_id=third.id)
        assert fourth.output_text
        assert "first question" not in text_of(fake.received[dialect][-1])
        assert "second question" in text_of(fake.received[dialect][-1])


def test_an_openai_upstream_keeps_its_own_conversations_but_only_their_owner_continues_them(upstreams, tmp_path):
    seen = upstreams.fake.received["openai-responses"]
    with serving(create_app(gateway_config(upstreams.url, tmp_path / "gw.db"))) as gw:
        alice = openai.OpenAI(base_url=gw.url + "/v1", api_key=new_key(gw.url), max_retries=0)
        first = alice.responses.create(model="m-resp", input="kept upstream")
        assert first.id == f"resp_upstream{len(seen)}"  # the upstream's own id, relayed
        alice.responses.create(model="m-resp", input="go on", previous_response_id=first.id)
        assert seen[-1]["previous_response_id"] == first.id  # forwarded untouched
        assert "kept upstream" not in text_of(seen[-1])  # the upstream has the conversation
        bob = openai.OpenAI(base_url=gw.url + "/v1", api_key=new_key(gw.url), max_retries=0)
        calls = len(seen)
        with pytest.raises(openai.BadRequestError) as refused:
            bob.responses.create(model="m-resp", input="let me in", previous_response_id=first.id)
        assert refused.value.code == "previous_response_not_found" and len(seen) == calls
        bob.responses.create(model="m-resp", input="hi", previous_response_id="resp_made_elsewhere")
        assert seen[-1]["previous_response_id"] == "resp_made_elsewhere"  # unknown here: the upstream decides
        # a key that may not store: store=false reaches the OpenAI upstream too
        quiet = openai.OpenAI(base_url=gw.url + "/v1", api_key=new_key(gw.url, response_store=False), max_retries=0)
        quiet.responses.create(model="m-resp", input="forget me")
        assert seen[-1]["store"] is False


def test_a_store_that_is_down_is_a_clear_503_not_a_traceback(upstreams, caplog):
    class Down:
        async def get(self, *args):
            raise OSError("database is down")

        put = delete = purge = get

    app = create_app(gateway_config(upstreams.url))
    with serving(app) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        made = client.responses.create(model="m-chat", input="hi")
        app.state.gateway.memory.responses.backend = Down()
        for call in (
            lambda: client.responses.retrieve(made.id),
            lambda: client.responses.delete(made.id),
            lambda: client.responses.create(model="m-chat", input="more", previous_response_id=made.id),
        ):
            with pytest.raises(openai.InternalServerError) as failed:
                call()
            assert failed.value.status_code == 503 and failed.value.code == "store_unavailable"
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_input_items_pagination_and_order(upstreams):
    with serving(create_app(gateway_config(upstreams.url))) as gw:  # no database: the in-memory store
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        items = [{"role": "user", "content": f"part {n}"} for n in range(5)]
        made = client.responses.create(model="m-chat", input=items)
        page = client.responses.input_items.list(made.id, limit=2, order="asc")
        assert [i.content[0].text for i in page.data] == ["part 0", "part 1"] and page.has_more
        rest = client.responses.input_items.list(made.id, limit=10, order="asc", after=page.last_id)
        assert [i.content[0].text for i in rest.data] == ["part 2", "part 3", "part 4"] and not rest.has_more
        newest = client.responses.input_items.list(made.id, limit=1)  # default order: newest first
        assert newest.data[0].content[0].text == "part 4"
        r = httpx.get(gw.url + f"/v1/responses/{made.id}/input_items?limit=0")
        assert r.status_code == 400 and r.json()["error"]["param"] == "limit"
        r = httpx.get(gw.url + "/v1/responses/resp_nope")
        assert r.status_code == 404
        assert r.json() == {"error": {"message": "Response with id 'resp_nope' not found.",
                                      "type": "invalid_request_error", "param": None, "code": None}}  # fmt: skip
        deleted = httpx.delete(gw.url + f"/v1/responses/{made.id}")
        assert deleted.json() == {"id": made.id, "object": "response", "deleted": True}


def test_store_false_and_a_key_that_may_not_store(upstreams, tmp_path):
    with serving(create_app(gateway_config(upstreams.url, tmp_path / "gw.db"))) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=new_key(gw.url), max_retries=0)
        unstored = client.responses.create(model="m-chat", input="hi", store=False)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)
        no_store = openai.OpenAI(base_url=gw.url + "/v1", api_key=new_key(gw.url, response_store=False),
                                 max_retries=0)  # fmt: skip
        forced = no_store.responses.create(model="m-chat", input="hi")
        with pytest.raises(openai.NotFoundError):
            no_store.responses.retrieve(forced.id)
        r = httpx.post(gw.url + "/admin/keys", json={"name": "k", "response_store": "no"}, headers=ADMIN)
        assert r.status_code == 400 and "response_store" in r.text


def test_the_operator_can_turn_storing_off(upstreams):
    with serving(create_app(gateway_config(upstreams.url, response_store=False))) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        made = client.responses.create(model="m-chat", input="hi")
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(made.id)
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="m-chat", input="again", previous_response_id=made.id)


def test_stored_responses_survive_a_restart_and_are_not_in_the_ledger(upstreams, tmp_path):
    db = tmp_path / "gw.db"
    cfg = gateway_config(upstreams.url, db)
    with serving(create_app(cfg)) as gw:
        key = new_key(gw.url)
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
        first = client.responses.create(model="m-claude", input="a secret prompt 7731")
    with serving(create_app(cfg)) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
        assert client.responses.retrieve(first.id).output_text == first.output_text
        client.responses.create(model="m-claude", input="go on", previous_response_id=first.id)
    assert "a secret prompt 7731" in text_of(upstreams.fake.received["anthropic-messages"][-1])
    import sqlite3

    with sqlite3.connect(db) as conn:
        ledger = json.dumps(conn.execute("SELECT * FROM llmb_usage").fetchall())
    assert "7731" not in ledger and len(json.loads(ledger)) >= 2


def test_expired_responses_are_deleted(upstreams, tmp_path):
    import asyncio

    from llmbridge.gateway._responses_store import DatabaseResponses, Stored
    from llmbridge.gateway._teams.store import connect

    async def run() -> tuple[int, object, object]:
        store = connect(f"sqlite:///{tmp_path}/r.db")
        await store.open()
        try:
            rows = DatabaseResponses(store)
            await rows.put(Stored("resp_old", "open", 0.0, 10.0, None, None, [], {"object": {}}))
            await rows.put(Stored("resp_new", "open", 0.0, 4e9, None, None, [], {"object": {}}))
            gone = await rows.purge(100.0)
            return gone, await rows.get("resp_old", 0.0), await rows.get("resp_new", 100.0)
        finally:
            await store.close()

    gone, old, new = asyncio.run(run())
    assert gone == 1 and old is None and new is not None


async def _cache_rows(url: str) -> int:
    from llmbridge.gateway._teams.store import connect

    store = connect(url)
    await store.open()
    try:
        return int((await store.fetch("SELECT COUNT(*) FROM llmb_cache"))[0][0])
    finally:
        await store.close()


@contextmanager
def _postgres(tmp: Path) -> Iterator[str]:
    from tests.teams_util import postgres_server

    with postgres_server(tmp) as url:
        yield url


def test_two_replicas_on_one_postgres_continue_each_others_turns(upstreams, tmp_path):
    with _postgres(tmp_path) as url:
        raw_db = {"master_key": MASTER, "database_url": url, "key_refresh_seconds": 0.2}
        cfg = gateway_config(upstreams.url, **raw_db)
        with serving(create_app(cfg)) as one, serving(create_app(cfg)) as two:
            key = new_key(one.url)
            a = openai.OpenAI(base_url=one.url + "/v1", api_key=key, max_retries=0)
            b = openai.OpenAI(base_url=two.url + "/v1", api_key=key, max_retries=0)
            first = a.responses.create(model="m-gemini", input="asked on replica one")
            second = b.responses.create(model="m-gemini", input="and on two", previous_response_id=first.id)
            third = a.responses.create(model="m-gemini", input="back on one", previous_response_id=second.id)
            assert "asked on replica one" in text_of(upstreams.fake.received["gemini"][-1])
            assert "and on two" in text_of(upstreams.fake.received["gemini"][-1])
            assert b.responses.retrieve(third.id).id == third.id
            # the response cache on the same database: filled by one replica, read by the other
            question = [{"role": "user", "content": "cached across replicas"}]
            one_chat = openai.OpenAI(base_url=one.url + "/v1", api_key=key, max_retries=0).chat.completions
            two_chat = openai.OpenAI(base_url=two.url + "/v1", api_key=key, max_retries=0).chat.completions
            filled = one_chat.with_raw_response.create(model="m-cached", messages=question, temperature=0)
            assert filled.headers["x-llmbridge-cache"] == "miss"
            assert wait_for(lambda: asyncio.run(_cache_rows(url)) == 1)  # written in the background
            hit = two_chat.with_raw_response.create(model="m-cached", messages=question, temperature=0)
            assert hit.headers["x-llmbridge-cache"] == "hit"  # the other replica: from the database
            assert hit.parse().choices[0].message.content == filled.parse().choices[0].message.content


class _Recording:
    """An in-process upstream that keeps each hub request it is sent (the local model, wrapped)."""

    format = "local"

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.requests = []

    def stream(self, request):
        self.requests.append(request)
        return self.inner.stream(request)

    async def aclose(self):
        await self.inner.aclose()


def test_three_turns_over_the_local_model():
    from tests.conftest import require_local_model

    require_local_model()
    from llmbridge.gateway._upstream import build
    from llmbridge.gateway.config import default_config

    cfg = default_config()
    local = _Recording(build(cfg.upstreams["local"]))
    with serving(create_app(cfg, upstreams={"local": local})) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        first = client.responses.create(model="local", input="Name a fruit.", max_output_tokens=4)
        second = client.responses.create(
            model="local", input="Name a color.", previous_response_id=first.id, max_output_tokens=4
        )
        third = client.responses.create(
            model="local", input="Name a city.", previous_response_id=second.id, max_output_tokens=4
        )
        assert third.output_text and client.responses.retrieve(third.id).id == third.id
    messages = local.requests[-1].messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [messages[n].text for n in (0, 2, 4)] == ["Name a fruit.", "Name a color.", "Name a city."]
    assert messages[1].text == first.output_text and messages[3].text == second.output_text


AGENTS_PYTHON = Path(__file__).resolve().parent.parent / ".venv-clients" / "bin" / "python"


@pytest.mark.parametrize("dialect", list(MODELS))
def test_the_openai_agents_sdk_runs_three_turns(upstreams, tmp_path, dialect):
    """The OpenAI Agents SDK (in the client environment: it pins its own openai and websockets)
    chains three runs with previous_response_id over a stateless upstream; the third request
    upstream carries the whole conversation."""
    import subprocess

    if not AGENTS_PYTHON.exists():
        pytest.skip("the client environment is not installed: run `make clients`")
    script = Path(__file__).resolve().parent / "clients" / "py_agents.py"
    fake = upstreams.fake
    with serving(create_app(gateway_config(upstreams.url, tmp_path / "gw.db"))) as gw:
        before = len(fake.received[dialect])
        done = subprocess.run(
            [str(AGENTS_PYTHON), str(script), gw.url, new_key(gw.url), MODELS[dialect]],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode and "No module named 'agents'" in done.stderr:
            pytest.skip("the OpenAI Agents SDK is not installed: run `make clients`")
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout)
        assert len(set(out["ids"])) == 3 and all(i.startswith("resp_") for i in out["ids"])
        assert out["texts"] == [f"reply {before + n} from {dialect}" for n in (1, 2, 3)]
        sent = fake.received[dialect][before:]
        assert len(sent) == 3
        last = text_of(sent[2])
        for piece in ("first question", "second question", "third question",
                      f"reply {before + 1} from {dialect}", f"reply {before + 2} from {dialect}"):  # fmt: skip
            assert piece in last, piece
