"""Team gateway through real servers: admin API, virtual keys in every auth form, limits and
budgets in the client's dialect, the ledger against the streamed usage (SQLite and Postgres
run the same suite), metrics, GenAI spans, the ``llmbridge usage`` report."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time

import httpx
import pytest

from llmbridge import cli, dialects, hub, replay
from llmbridge.dialects.base import decode_all
from llmbridge.gateway import config, create_app
from llmbridge.gateway._teams import connect, keys
from tests.conftest import CORPUS
from tests.gateway_util import StalledHead, replay_config, serving, wait_for
from tests.teams_util import postgres_server
from tests.test_gateway_faults import request_for

HTTP = httpx.Client(timeout=20)
MASTER = "master-" + "x" * 24
ADMIN = {"authorization": f"Bearer {MASTER}"}
CLIENTS = ["openai-chat", "openai-responses", "anthropic-messages", "gemini", "llm-stream", "mmsp"]
# model name -> (upstream dialect, capture): usage with cached tokens, reasoning-free text, several vendors
MODELS = {
    "claude": ("anthropic-messages", "claude-cache-read-usage"),
    "chat": ("openai-chat", "hf-novita-text"),
    "resp": ("openai-responses", "openai-text"),
    "gem": ("gemini", "gemini20-text"),
    "slow": ("anthropic-messages", "claude-text-simple@stall=0.5"),
    "broken": ("anthropic-messages", "claude-text-simple@status=500"),
}
PRICE = {"input": 3.0, "output": 15.0, "cached": 0.3}
_db = itertools.count()


@pytest.fixture(scope="module")
def rep():
    with serving(replay.create_app(CORPUS, seed=5)) as server:
        yield server


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    with postgres_server(tmp_path_factory.mktemp("pg")) as url:
        yield url


def _fresh_pg_database(url: str) -> str:
    import asyncpg

    name = f"t{next(_db)}"

    async def create() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()

    asyncio.run(create())
    base, _, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return _fresh_pg_database(request.getfixturevalue("pg"))


def team_app(rep, database_url: str, **gateway):
    raw = replay_config(
        rep.url,
        {name: spec for name, spec in MODELS.items()},
        gateway={"master_key": MASTER, "database_url": database_url, "ledger_flush_seconds": 0.05, **gateway},
    )
    for entry in raw["models"]:
        entry["price"] = PRICE
    return create_app(config.parse(raw))


@pytest.fixture
def gw(rep, tmp_path):
    with serving(team_app(rep, f"sqlite:///{tmp_path / 'ledger.db'}", api_keys=["static-key-123"])) as server:
        yield server


def new_key(gw, **fields) -> tuple[str, str]:
    r = HTTP.post(gw.url + "/admin/keys", json={"name": "dev", **fields}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["key"]


def ask(gw, dialect: str, model: str, key: str | None, how: str = "bearer", stream: bool = True) -> httpx.Response:
    path, body, headers = request_for(dialect, model, stream)
    params = {}
    if key is not None:
        if how == "bearer":
            headers["authorization"] = f"Bearer {key}"
        elif how == "query":
            params["key"] = key
        else:
            headers[how] = key
    return HTTP.post(gw.url + path, json=body, headers=headers, params=params)


def error_of(dialect: str, r: httpx.Response) -> hub.Error:
    assert "Traceback" not in r.text
    return dialects.get(dialect).decode_error(r.status_code, r.content)


def capture_usage(model: str) -> hub.Usage:
    dialect, name = MODELS[model]
    usage = None
    for e in decode_all(dialects.get(dialect).StreamDecoder(), (CORPUS / dialect / f"{name}.sse").read_bytes()):
        if type(e) is hub.Usage:
            usage = hub.merge_usage(usage, e)
    assert usage is not None
    return usage


def usage(gw, **params) -> list[dict]:
    r = HTTP.get(gw.url + "/admin/usage", params=params, headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()["data"]


# --------------------------------------------------------------------------- admin API


def test_key_lifecycle_create_get_update_rotate_revoke(rep, database_url):
    with serving(team_app(rep, database_url)) as gw:
        check_key_lifecycle(gw)


def check_key_lifecycle(gw) -> None:
    r = HTTP.post(
        gw.url + "/admin/keys",
        json={"name": "alice", "models": ["claude"], "rpm_limit": 100, "tpm_limit": 100000, "budget_usd": 5,
              "budget_period": "month", "expires_at": "2099-01-01T00:00:00Z", "metadata": {"team": "search"}},
        headers=ADMIN,
    )  # fmt: skip
    assert r.status_code == 201, r.text
    made = r.json()
    kid, secret = made["id"], made["key"]
    assert made["models"] == ["claude"] and made["budget_period"] == "month" and made["metadata"] == {"team": "search"}
    assert made["expires_at"] == "2099-01-01T00:00:00Z" and made["revoked"] is False
    listed = HTTP.get(gw.url + "/admin/keys", headers=ADMIN).json()["data"]
    assert [k["id"] for k in listed] == [kid] and "key" not in listed[0]  # the secret is shown once only
    assert secret not in HTTP.get(gw.url + "/admin/keys", headers=ADMIN).text
    assert ask(gw, "anthropic-messages", "claude", secret).status_code == 200

    r = HTTP.patch(gw.url + f"/admin/keys/{kid}", json={"rpm_limit": None, "models": None}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["rpm_limit"] is None and r.json()["models"] is None
    assert ask(gw, "openai-chat", "chat", secret).status_code == 200  # every model now

    r = HTTP.post(gw.url + f"/admin/keys/{kid}/rotate", headers=ADMIN)
    assert r.status_code == 200 and r.json()["id"] == kid
    rotated = r.json()["key"]
    assert rotated != secret
    assert ask(gw, "openai-chat", "chat", secret).status_code == 401
    assert ask(gw, "openai-chat", "chat", rotated).status_code == 200

    # two priced requests; a stream is settled just after its last byte reaches the client
    assert wait_for(lambda: HTTP.get(gw.url + f"/admin/keys/{kid}", headers=ADMIN).json()["spend_usd"] > 0)

    r = HTTP.delete(gw.url + f"/admin/keys/{kid}", headers=ADMIN)
    assert r.status_code == 200 and r.json()["revoked"] is True
    refused = ask(gw, "anthropic-messages", "claude", rotated)
    assert refused.status_code == 401 and error_of("anthropic-messages", refused).type == "authentication"
    assert "revoked" in refused.text
    assert HTTP.patch(gw.url + f"/admin/keys/{kid}", json={"name": "x"}, headers=ADMIN).status_code == 409


@pytest.mark.parametrize(
    "method, path, body, status",
    [
        ("POST", "/admin/keys", b"{not json", 400),
        ("POST", "/admin/keys", [1, 2], 400),
        ("POST", "/admin/keys", {"name": "x", "rpm_limit": -5}, 400),
        ("POST", "/admin/keys", {"name": "x", "budget_usd": 1e300}, 400),
        ("POST", "/admin/keys", {"name": "x", "tpm_limit": "lots"}, 400),
        ("POST", "/admin/keys", {"name": "x", "expires_at": "soon"}, 400),
        ("POST", "/admin/keys", {"name": "x", "superuser": True}, 400),
        ("GET", "/admin/keys/key_nope", None, 404),
        ("PATCH", "/admin/keys/key_nope", {"name": "y"}, 404),
        ("DELETE", "/admin/keys/key_nope", None, 404),
        ("POST", "/admin/keys/key_nope/rotate", None, 404),
        ("GET", "/admin/usage?by=colour", None, 400),
        ("GET", "/admin/usage?since=yesterday-ish", None, 400),
    ],
)
def test_malformed_admin_requests_are_clear_4xx(gw, method, path, body, status):
    content = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    r = HTTP.request(method, gw.url + path, content=content, headers={**ADMIN, "content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["error"]["message"] and "Traceback" not in r.text


def test_admin_needs_the_master_key(gw):
    _, secret = new_key(gw)
    assert HTTP.get(gw.url + "/admin/keys").status_code == 401
    assert HTTP.get(gw.url + "/admin/keys", headers={"authorization": "Bearer sk-llmb-guess"}).status_code == 401
    for key in (secret, "static-key-123"):  # a working client key is still no admin
        for headers in ({"authorization": f"Bearer {key}"}, {"x-api-key": key}):
            r = HTTP.get(gw.url + "/admin/keys", headers=headers)
            assert r.status_code == 403, r.text
        assert HTTP.get(gw.url + "/admin/usage", headers={"authorization": f"Bearer {key}"}).status_code == 403
        assert HTTP.post(gw.url + "/admin/keys", json={"name": "me"}, headers={"x-api-key": key}).status_code == 403


def test_admin_is_404_when_team_features_are_off(rep):
    with serving(create_app(config.parse(replay_config(rep.url, {"chat": MODELS["chat"]})))) as plain:
        assert HTTP.get(plain.url + "/admin/keys", headers=ADMIN).status_code == 404
        assert HTTP.post(plain.url + "/v1/chat/completions", json={"model": "chat", "messages": []}).status_code == 200


# --------------------------------------------------------------------------- keys on the client endpoints


@pytest.mark.parametrize(
    "dialect, how",
    [
        ("openai-chat", "bearer"),
        ("anthropic-messages", "x-api-key"),
        ("gemini", "x-goog-api-key"),
        ("gemini", "query"),
        ("openai-responses", "bearer"),
        ("llm-stream", "bearer"),
    ],
)
def test_a_virtual_key_works_wherever_a_client_key_does(gw, dialect, how):
    _, secret = new_key(gw)
    assert ask(gw, dialect, "claude", secret, how).status_code == 200
    bad = ask(gw, dialect, "claude", secret[:-2] + "zz", how)
    assert bad.status_code == 401 and error_of(dialect, bad).type == "authentication"
    assert ask(gw, dialect, "claude", None).status_code == 401


def test_static_keys_and_the_master_key_still_work(gw):
    assert ask(gw, "openai-chat", "chat", "static-key-123").status_code == 200
    assert ask(gw, "openai-chat", "chat", MASTER).status_code == 200
    r = HTTP.get(gw.url + "/v1/models", headers={"authorization": "Bearer static-key-123"})
    assert r.status_code == 200
    _, secret = new_key(gw)
    assert HTTP.get(gw.url + "/v1/models", headers={"authorization": f"Bearer {secret}"}).status_code == 200
    assert HTTP.get(gw.url + "/v1/models").status_code == 401


def test_expired_key_and_model_not_allowed(gw):
    _, expired = new_key(gw, expires_at="2001-01-01T00:00:00Z")
    r = ask(gw, "anthropic-messages", "claude", expired)
    assert r.status_code == 401 and "expired" in error_of("anthropic-messages", r).message
    _, narrow = new_key(gw, models=["chat"])
    r = ask(gw, "gemini", "claude", narrow)
    assert r.status_code == 403 and error_of("gemini", r).type == "permission"
    listed = HTTP.get(gw.url + "/v1/models", headers={"authorization": f"Bearer {narrow}"}).json()["data"]
    assert [m["id"] for m in listed] == ["chat"]  # a key sees the models it may use
    assert HTTP.get(gw.url + "/v1/models/claude", headers={"authorization": f"Bearer {narrow}"}).status_code == 404
    assert HTTP.get(gw.url + "/v1/models/chat", headers={"authorization": f"Bearer {narrow}"}).status_code == 200


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic-messages", "gemini", "openai-responses"])
def test_rpm_limit_is_a_429_with_retry_after_in_the_clients_dialect(gw, dialect):
    _, secret = new_key(gw, rpm_limit=2)
    assert [ask(gw, dialect, "claude", secret).status_code for _ in range(2)] == [200, 200]
    r = ask(gw, dialect, "claude", secret)
    assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
    assert error_of(dialect, r).type == "rate_limit"


def test_tpm_limit_counts_the_real_usage(gw):
    # one claude answer reports 1,226 tokens: a 1,000-token limit lets exactly one through per minute
    # (TPM counts per UTC minute: a pair that straddles a minute boundary is tried again)
    for _ in range(2):
        _, secret = new_key(gw, tpm_limit=1000)
        minute = time.time() // 60
        assert ask(gw, "openai-chat", "claude", secret).status_code == 200
        r = ask(gw, "openai-chat", "claude", secret)
        if time.time() // 60 == minute:
            break
    assert r.status_code == 429 and "tokens per minute" in error_of("openai-chat", r).message


def test_a_budget_stops_a_key_within_one_request(gw):
    check_budget_stops_a_key(gw)


def check_budget_stops_a_key(gw) -> None:
    """Sequential requests on a key with a budget: refused (403) within one request of it."""
    u = capture_usage("claude")
    per_request = ((u.input_tokens - u.cache_read_tokens) * 3 + u.cache_read_tokens * 0.3 + u.output_tokens * 15) / 1e6
    budget = per_request * 3.5  # the 4th request crosses it; the 5th must be refused
    kid, secret = new_key(gw, budget_usd=budget, budget_period="total")  # no period boundary mid-test
    statuses = []
    for _ in range(8):
        r = ask(gw, "anthropic-messages", "claude", secret)
        statuses.append(r.status_code)
        if r.status_code != 200:
            break
    admitted = statuses.count(200)
    assert 4 <= admitted <= 5, statuses  # within one request of the limit
    assert statuses[-1] == 403 and error_of("anthropic-messages", r).type == "permission"
    spent = HTTP.get(gw.url + f"/admin/keys/{kid}", headers=ADMIN).json()["spend_usd"]
    assert budget <= spent <= budget + per_request * 1.01
    # raising the budget lets the key through again
    HTTP.patch(gw.url + f"/admin/keys/{kid}", json={"budget_usd": budget * 10}, headers=ADMIN)
    assert ask(gw, "anthropic-messages", "claude", secret).status_code == 200


def test_revoked_mid_stream_the_stream_finishes_the_next_request_is_refused(gw):
    kid, secret = new_key(gw)
    path, body, headers = request_for("anthropic-messages", "slow", True)
    with HTTP.stream("POST", gw.url + path, json=body, headers={**headers, "x-api-key": secret}) as r:
        assert r.status_code == 200
        chunks = r.iter_bytes()
        first = next(chunks)
        assert HTTP.delete(gw.url + f"/admin/keys/{kid}", headers=ADMIN).status_code == 200
        rest = b"".join(chunks)
    events = decode_all(dialects.get("anthropic-messages").StreamDecoder(), first + rest)
    assert type(events[-1]) is hub.ResponseEnd and not any(type(e) is hub.Error for e in events)
    assert ask(gw, "anthropic-messages", "claude", secret, "x-api-key").status_code == 401


# --------------------------------------------------------------------------- the ledger (both backends)


@pytest.mark.parametrize("client", CLIENTS)
def test_ledger_rows_match_the_streamed_usage(rep, database_url, client):
    with serving(team_app(rep, database_url)) as gw:
        kid, secret = new_key(gw)
        for model in ("claude", "chat", "resp", "gem"):
            r = ask(gw, client, model, secret, stream=True)
            assert r.status_code == 200, r.text
            want = capture_usage(model)
            seen = [e for e in decode_all(dialects.get(client).StreamDecoder(), r.content) if type(e) is hub.Usage]
            if seen:  # the client's dialect carries usage: what it streamed is what the ledger holds
                streamed = seen[-1]
                for e in seen[:-1]:
                    streamed = hub.merge_usage(e, streamed)
                assert (streamed.input_tokens, streamed.output_tokens) == (want.input_tokens, want.output_tokens)
        rows = {row["model"]: row for row in usage(gw, by="model")}
        store_rows = asyncio.run(_rows(database_url))
    assert sorted(rows) == ["chat", "claude", "gem", "resp"]
    for model, row in rows.items():
        want = capture_usage(model)
        assert row["requests"] == 1 and row["errors"] == 0
        assert (row["input_tokens"], row["output_tokens"]) == (want.input_tokens, want.output_tokens)
        assert row["cached_tokens"] == (want.cache_read_tokens or 0)
        cached = want.cache_read_tokens or 0
        expected_cost = ((want.input_tokens - cached) * 3 + cached * 0.3 + want.output_tokens * 15) / 1e6
        assert row["cost_usd"] == pytest.approx(expected_cost)
    assert len(store_rows) == 4
    for row in store_rows:
        assert row.key_id == kid and row.status == 200 and row.error_type is None
        assert row.dialect_out == client and row.upstream.startswith("rep-")
        assert row.ttft_ms is not None and 0 <= row.ttft_ms <= row.duration_ms
        assert row.request_id.startswith("req_")


async def _rows(url: str):
    store = connect(url)
    await store.open()
    try:
        return await store.rows()
    finally:
        await store.close()


def test_ledger_records_errors_and_non_streaming_requests(rep, database_url):
    with serving(team_app(rep, database_url)) as gw:
        _, secret = new_key(gw)
        assert ask(gw, "openai-chat", "broken", secret).status_code == 500
        assert ask(gw, "anthropic-messages", "claude", secret, stream=False).status_code == 200
        by_model = {row["model"]: row for row in usage(gw, by="model")}
        by_day = usage(gw, by="day")
        by_key = usage(gw, by="key")
    assert by_model["broken"]["errors"] == 1 and by_model["broken"]["cost_usd"] == 0
    assert by_model["claude"]["input_tokens"] == capture_usage("claude").input_tokens
    assert len(by_day) == 1 and by_day[0]["requests"] == 2 and len(by_day[0]["day"]) == 10
    assert by_key[0]["key_name"] == "dev" and by_key[0]["requests"] == 2


def test_migrations_are_idempotent_and_versioned(database_url):
    async def twice() -> int:
        for _ in range(2):
            store = connect(database_url)
            await store.open()
            await store.close()
        store = connect(database_url)
        await store.open()
        try:
            rec, _ = keys.create({"name": "m"})
            await store.insert_key(rec)
            return len(await store.list_keys())
        finally:
            await store.close()

    assert asyncio.run(twice()) == 1


def test_usage_report_filters_by_key_and_since(gw):
    a, sa = new_key(gw)
    _b, sb = new_key(gw)
    ask(gw, "openai-chat", "chat", sa)
    ask(gw, "openai-chat", "chat", sb)
    ask(gw, "openai-chat", "claude", sb)
    assert [r["requests"] for r in usage(gw, by="key", key_id=a)] == [1]
    assert sum(r["requests"] for r in usage(gw, by="key")) == 3
    assert usage(gw, by="model", since="2999-01-01") == []
    assert sum(r["requests"] for r in usage(gw, by="model", since="1h")) == 3


def test_a_virtual_key_sees_its_own_usage_and_nobody_elses(gw):
    a, sa = new_key(gw, budget_usd=100)
    b, sb = new_key(gw)
    ask(gw, "openai-chat", "chat", sa)
    ask(gw, "openai-chat", "claude", sb)
    ask(gw, "openai-chat", "claude", sb)
    mine = HTTP.get(
        gw.url + "/v1/key/usage", params={"by": "model", "key_id": b}, headers={"authorization": f"Bearer {sa}"}
    )
    assert mine.status_code == 200
    assert [(r["model"], r["requests"]) for r in mine.json()["data"]] == [("chat", 1)]  # key_id=b is ignored
    me = HTTP.get(gw.url + "/v1/key", headers={"x-api-key": sa}).json()
    assert me["id"] == a and me["spend_usd"] > 0 and "key" not in me
    assert HTTP.get(gw.url + "/v1/key/usage").status_code == 401
    assert HTTP.get(gw.url + "/v1/key/usage", headers={"authorization": "Bearer sk-llmb-nope"}).status_code == 401
    assert HTTP.get(gw.url + "/v1/key", headers=ADMIN).status_code == 400


def test_usage_cli_prints_the_same_report(gw, tmp_path, capsys):
    _, secret = new_key(gw)
    ask(gw, "openai-chat", "chat", secret)
    usage(gw)  # flushes the ledger
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["usage", "--database-url", db, "--by", "model", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == usage(gw, by="model")
    assert cli.main(["usage", "--database-url", db, "--by", "key", "--since", "7d"]) == 0
    text = capsys.readouterr().out
    assert "dev" in text and "cost_usd" in text
    assert cli.main(["usage", "--database-url", db, "--since", "whenever"]) == 2


# --------------------------------------------------------------------------- metrics and traces


def test_metrics_in_prometheus_text_format(gw):
    from prometheus_client.parser import text_string_to_metric_families

    _, secret = new_key(gw, rpm_limit=1)
    ask(gw, "openai-chat", "claude", secret)
    ask(gw, "openai-chat", "claude", secret)  # refused: rpm
    ask(gw, "openai-chat", "broken", MASTER)
    r = HTTP.get(gw.url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }
    want = capture_usage("claude")
    assert samples[("llmbridge_requests_total", (("dialect", "openai-chat"), ("model", "claude"), ("status", "200")))]
    assert samples[("llmbridge_tokens_total", (("direction", "input"), ("model", "claude")))] == want.input_tokens
    assert samples[("llmbridge_limit_rejections_total", (("reason", "rpm"),))] == 1
    assert samples[("llmbridge_upstream_errors_total", (("type", "api_error"), ("upstream", "rep-anthropic")))] == 1
    assert samples[("llmbridge_time_to_first_byte_seconds_count", (("model", "claude"),))] == 1
    assert samples[("llmbridge_open_streams", ())] == 0
    assert secret not in r.text


def test_genai_spans_without_prompt_content(gw):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gw.app.state.gateway.teams.use_tracer_provider(provider)
    _, secret = new_key(gw)
    path, body, headers = request_for("anthropic-messages", "claude", True)
    body["messages"] = [{"role": "user", "content": "a secret prompt"}]
    HTTP.post(gw.url + path, json=body, headers={**headers, "x-api-key": secret})
    ask(gw, "openai-chat", "broken", secret)
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["chat claude", "chat broken"]
    ok, failed = (dict(s.attributes) for s in spans)
    want = capture_usage("claude")
    assert ok["gen_ai.operation.name"] == "chat" and ok["gen_ai.request.model"] == "claude"
    assert ok["gen_ai.provider.name"] == "anthropic" and ok["gen_ai.request.max_tokens"] == 64
    assert ok["gen_ai.usage.input_tokens"] == want.input_tokens
    assert ok["gen_ai.usage.output_tokens"] == want.output_tokens
    assert ok["gen_ai.response.finish_reasons"] == ("end_turn",)  # the hub's word
    assert "error.type" not in ok and failed["error.type"] == "api_error"
    assert not any("secret prompt" in str(v) for s in spans for v in s.attributes.values())


def test_postgres_down_streams_go_on_the_ledger_buffers_then_catches_up(rep, tmp_path):
    """A real Postgres stopped under the gateway: requests still stream, rows wait, then land."""
    from tests.gateway_util import wait_for
    from tests.teams_util import postgres_restartable

    with postgres_restartable(tmp_path) as pg, serving(team_app(rep, pg.url)) as gw:
        _, secret = new_key(gw)
        teams = gw.app.state.gateway.teams
        assert ask(gw, "anthropic-messages", "claude", secret).status_code == 200
        assert wait_for(lambda: teams.ledger.pending == 0 and teams.ledger.written == 1)
        pg.stop()
        for _ in range(3):  # the key is known: streams never wait for the database
            assert ask(gw, "anthropic-messages", "claude", secret).status_code == 200
        assert wait_for(lambda: teams.ledger.failing)
        assert teams.ledger.pending == 3 and teams.ledger.dropped == 0
        assert HTTP.get(gw.url + "/admin/keys", headers=ADMIN).status_code == 503  # admin says so, clearly
        metrics = HTTP.get(gw.url + "/metrics").text
        assert "llmbridge_ledger_rows_pending 3.0" in metrics
        pg.start()
        assert wait_for(lambda: teams.ledger.pending == 0 and not teams.ledger.failing, timeout=30)
        assert sum(r["requests"] for r in usage(gw, by="model")) == 4


def test_prompt_content_in_spans_only_when_opted_in(rep, tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    app = team_app(rep, f"sqlite:///{tmp_path / 'l.db'}", trace_content=True)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app.state.gateway.teams.use_tracer_provider(provider)
    with serving(app) as gw:
        path, body, headers = request_for("openai-chat", "chat", True)
        body["messages"] = [{"role": "user", "content": "the opted-in prompt"}]
        assert HTTP.post(gw.url + path, json=body, headers={**headers, "x-api-key": MASTER}).status_code == 200
    (span,) = exporter.get_finished_spans()
    assert json.loads(span.attributes["gen_ai.input.messages"]) == [{"role": "user", "content": "the opted-in prompt"}]


def test_the_vendor_sdks_read_the_refusals_as_their_own_errors(gw):
    """The official SDKs, pointed at the gateway with a virtual key, raise their own error types."""
    import anthropic
    import openai
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types

    kid, secret = new_key(gw, rpm_limit=1)
    oa = openai.OpenAI(base_url=gw.url + "/v1", api_key=secret, max_retries=0)
    hello = [{"role": "user", "content": "hi"}]
    assert "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(
        model="chat", messages=hello, stream=True) if c.choices)  # fmt: skip
    with pytest.raises(openai.RateLimitError) as e:
        oa.chat.completions.create(model="chat", messages=hello, stream=True)
    assert 1 <= int(e.value.response.headers["retry-after"]) <= 60

    _, broke = new_key(gw, budget_usd=0)  # nothing to spend: refused from the first request
    an = anthropic.Anthropic(base_url=gw.url, api_key=broke, max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError) as e:
        an.messages.create(model="claude", max_tokens=16, messages=hello)
    assert "budget" in str(e.value)

    _, gkey = new_key(gw)
    client = genai.Client(api_key=gkey, http_options=genai_types.HttpOptions(base_url=gw.url))
    assert list(client.models.generate_content_stream(model="gem", contents="hi"))
    HTTP.delete(gw.url + f"/admin/keys/{kid}", headers=ADMIN)
    revoked = genai.Client(api_key=secret, http_options=genai_types.HttpOptions(base_url=gw.url))
    with pytest.raises(genai_errors.ClientError) as e:
        revoked.models.generate_content(model="gem", contents="hi")
    assert e.value.code == 401


def test_a_client_gone_before_the_first_body_byte_is_still_settled(rep, tmp_path):
    # The response head is held back (a full socket buffer) and the client leaves meanwhile:
    # the answer's body never starts, yet the request gets its ledger row and the open-stream
    # gauge comes back down.
    app = StalledHead(team_app(rep, f"sqlite:///{tmp_path / 'ledger.db'}"), 1.0)
    with serving(app) as gw:
        body = json.dumps({"model": "slow", "messages": [{"role": "user", "content": "hi"}], "stream": True})
        with socket.create_connection(("127.0.0.1", gw.port)) as client:
            client.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                b"authorization: Bearer %s\r\nx-test-stall-head: 1\r\ncontent-length: %d\r\n\r\n%s"
                % (MASTER.encode(), len(body), body.encode())
            )
            # leave while the head is held back (the upstream has answered by then)
            assert wait_for(lambda: app.stalled == 1, timeout=10)
        assert wait_for(lambda: len(usage(gw)) == 1, timeout=5)
        assert wait_for(lambda: "llmbridge_open_streams 0.0" in HTTP.get(gw.url + "/metrics").text, timeout=5)
