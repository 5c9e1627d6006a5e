"""Team gateway, pure parts: prices, keys, input rules, config keys, local limits, the ledger buffer."""

from __future__ import annotations

import asyncio
import calendar
import logging

import pytest

from llmbridge import hub
from llmbridge.gateway import config
from llmbridge.gateway._teams import LedgerRow, LocalLimiter, Price, cost, keys
from llmbridge.gateway._teams.ledger import Ledger


def test_cost_bills_cached_and_thinking_tokens_at_their_own_rates():
    price = Price(input=2.0, output=10.0, cached=0.5, thinking=20.0)
    usage = hub.Usage(input_tokens=1_000, output_tokens=500, cache_read_tokens=400, reasoning_tokens=100)
    # 600 plain in at 2, 400 cached at 0.5, 400 plain out at 10, 100 thinking at 20 (USD / Mtok)
    assert cost(price, usage) == pytest.approx((600 * 2 + 400 * 0.5 + 400 * 10 + 100 * 20) / 1e6)
    assert cost(Price(1, 2), usage) == pytest.approx((1000 * 1 + 500 * 2) / 1e6)  # defaults: input/output rates
    assert cost(None, usage) == 0.0 and cost(price, None) == 0.0


def test_price_config_and_its_errors():
    raw = {
        "upstreams": {"u": {"format": "openai-chat", "base_url": "http://127.0.0.1:1/v1"}},
        "models": [{"name": "m", "upstream": "u", "price": {"input": 2.5, "output": 10, "cached": 1.25}}],
    }
    assert config.parse(raw).models["m"].price == Price(2.5, 10.0, 1.25, None)
    for bad, where in (
        ({"input": -1}, "models[0].price.input"),
        ({"inptu": 1}, "models[0].price.inptu"),
        ({"output": float("inf")}, "models[0].price.output"),
        (3, "models[0].price"),
    ):
        raw["models"][0]["price"] = bad
        with pytest.raises(config.ConfigError) as e:
            config.parse(raw)
        assert e.value.key == where


def test_gateway_team_keys_in_config():
    t = config.parse(
        {"gateway": {"master_key": "${MK}", "database_url": "sqlite:///x.db", "redis_url": "redis://127.0.0.1:1"}},
        {"MK": "m" * 20},
    ).gateway.teams
    assert t.master_key == "m" * 20 and t.accounts and t.redis_url == "redis://127.0.0.1:1"
    assert not config.parse({}).gateway.teams.accounts  # off by default: nothing changes for existing configs
    for bad, key in (
        ({"master_key": "short"}, "gateway.master_key"),
        ({"database_url": "mysql://x"}, "gateway.database_url"),
        ({"redis_url": "http://x"}, "gateway.redis_url"),
        ({"rate_limit_failure": "maybe"}, "gateway.rate_limit_failure"),
        ({"ledger_flush_seconds": 0}, "gateway.ledger_flush_seconds"),
        ({"ledger_max_buffer": -3}, "gateway.ledger_max_buffer"),
        ({"metrics": "yes"}, "gateway.metrics"),
        ({"otlp_endpoint": "grpc://x"}, "gateway.otlp_endpoint"),
    ):
        with pytest.raises(config.ConfigError) as e:
            config.parse({"gateway": bad})
        assert e.value.key == key


def test_key_secret_is_shown_once_and_stored_as_a_hash():
    record, secret = keys.create({"name": "alice", "models": ["local"], "rpm_limit": 10, "metadata": {"team": "a"}})
    assert secret.startswith(keys.PREFIX) and len(secret) > 40
    assert record.key_hash == keys.hash_secret(secret) and secret not in repr(record)
    public = record.public()
    assert "key_hash" not in public and secret not in str(public)
    assert public["key_prefix"] == secret[: len(public["key_prefix"])]
    rotated, new = keys.rotate(record)
    assert rotated.id == record.id and new != secret and rotated.key_hash == keys.hash_secret(new)
    other, other_secret = keys.create({"name": "alice"})
    assert other.id != record.id and other_secret != secret


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x", "rpm_limit": -1}, "rpm_limit"),
        ({"name": "x", "rpm_limit": 0}, "rpm_limit"),
        ({"name": "x", "rpm_limit": 1.5}, "rpm_limit"),
        ({"name": "x", "tpm_limit": 10**15}, "tpm_limit"),
        ({"name": "x", "budget_usd": -5}, "budget_usd"),
        ({"name": "x", "budget_usd": 1e12}, "budget_usd"),
        ({"name": "x", "budget_usd": True}, "budget_usd"),
        ({"name": "x", "budget_period": "week"}, "budget_period"),
        ({"name": "x", "expires_at": "tomorrow"}, "expires_at"),
        ({"name": "x", "expires_at": "2027-01-01T00:00:00"}, "expires_at"),
        ({"name": "x", "models": "local"}, "models"),
        ({"name": "x", "metadata": [1]}, "metadata"),
        ({"name": "x", "metadata": {"a": "b" * 20000}}, "metadata"),
        ({"name": "x", "admin": True}, "admin"),
    ],
)
def test_malformed_key_requests_name_the_field(body, field):
    with pytest.raises(keys.KeyInputError) as e:
        keys.create(body)
    assert str(e.value).startswith(field)


def test_budget_periods_are_utc_days_and_months():
    t = calendar.timegm((2026, 12, 31, 15, 30, 0))
    assert keys.period_start("day", t) == calendar.timegm((2026, 12, 31, 0, 0, 0))
    assert keys.period_end("month", t) == calendar.timegm((2027, 1, 1, 0, 0, 0))
    assert keys.period_start("total", t) == 0 and keys.period_end("total", t) is None
    assert keys.parse_since("7d", now=t) == t - 7 * 86400
    assert keys.parse_since("2026-12-01") == calendar.timegm((2026, 12, 1, 0, 0, 0))
    with pytest.raises(keys.KeyInputError):
        keys.parse_since("last tuesday")


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_local_limiter_rpm_window_tpm_correction_and_budget():
    clock = Clock()
    seeded = []

    async def seed(key_id, since):
        seeded.append((key_id, since))
        return 0.0

    limiter = LocalLimiter(seed, clock)
    key, _ = keys.create({"name": "k", "rpm_limit": 3, "tpm_limit": 100, "budget_usd": 1.0})
    got = [await limiter.admit(key, 10) for _ in range(4)]
    assert [a.ok for a in got] == [True, True, True, False]
    assert got[3].reason == "rpm" and 0 < got[3].retry_after <= 60
    clock.t += 60.001  # the window slides: one minute later the first three have left it
    a = await limiter.admit(key, 10)
    assert a.ok
    await limiter.settle(key, a, 200, 0.0)  # the real usage was far above the estimate: TPM is spent
    b = await limiter.admit(key, 10)
    assert not b.ok and b.reason == "tpm"
    await limiter.settle(key, got[0], 0, 1.0)  # $1 spent: the budget stops the key
    clock.t += 120
    c = await limiter.admit(key, 10)
    assert not c.ok and c.reason == "budget" and c.retry_after is None
    assert seeded == [(key.id, 0.0)]  # the spend was read from the ledger once, then kept here


class FlakyStore:
    def __init__(self):
        self.rows: list = []
        self.down = False

    async def insert_rows(self, rows):
        if self.down:
            raise ConnectionError("database down")
        self.rows.extend(rows)


def row(i: int) -> LedgerRow:
    return LedgerRow(float(i), f"req_{i}", None, "m", "u", "openai-chat", "openai-chat",
                     1, 2, None, None, 0.0, None, 1.0, 200, None)  # fmt: skip


async def test_ledger_buffers_while_the_database_is_down_then_sheds_the_oldest():
    store = FlakyStore()
    ledger = Ledger(store, flush_seconds=3600, max_buffer=5)
    store.down = True
    for i in range(3):
        ledger.record(row(i))
    assert not await ledger.flush() and ledger.pending == 3 and ledger.failing
    for i in range(3, 8):
        ledger.record(row(i))
    assert ledger.pending == 5 and ledger.dropped == 3  # the oldest three were shed, and counted
    store.down = False
    assert await ledger.flush()
    assert [r.request_id for r in store.rows] == [f"req_{i}" for i in range(3, 8)]
    assert ledger.written == 5 and not ledger.failing


async def test_ledger_writes_in_the_background_and_on_close():
    store = FlakyStore()
    ledger = Ledger(store, flush_seconds=0.01)
    ledger.start()
    ledger.record(row(1))
    for _ in range(500):
        if store.rows:
            break
        await asyncio.sleep(0.01)
    assert len(store.rows) == 1
    ledger.record(row(2))
    await ledger.close()  # a graceful stop writes what is left
    assert [r.request_id for r in store.rows] == ["req_1", "req_2"]


def test_otlp_endpoint_needs_its_exporter_or_says_so():
    from llmbridge.gateway import create_app

    cfg = config.parse({"gateway": {"otlp_endpoint": "http://127.0.0.1:1"}})
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="opentelemetry-exporter-otlp-proto-http"):
            create_app(cfg)
    else:
        app = create_app(cfg)
        assert app.state.gateway.teams._tracer is not None


def test_keys_in_query_strings_never_reach_the_access_log(caplog):
    from llmbridge.gateway._teams import redact

    redact.install()
    redact.install()  # idempotent
    access = logging.getLogger("uvicorn.access")
    assert sum(isinstance(f, redact.RedactKeys) for f in access.filters) == 1
    secret = "sk-llmb-" + "s" * 43
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        # the exact call uvicorn's protocol makes for each response
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "POST",
                    f"/v1beta/models/m:streamGenerateContent?alt=sse&key={secret}", "1.1", 200)  # fmt: skip
    assert secret not in caplog.text and "key=[redacted]" in caplog.text and "alt=sse" in caplog.text
    assert redact.redact("/x?API_KEY=abc&b=1") == "/x?API_KEY=[redacted]&b=1"
