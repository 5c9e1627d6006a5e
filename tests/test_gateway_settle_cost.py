"""What settling a request costs (issue 23): each shortcut taken on the settle path against
the general path it stands for, over many inputs (a shortcut that diverges fails here)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import random
import struct
import time
import types
from pathlib import Path

from llmbridge import hub
from llmbridge.gateway import config
from llmbridge.gateway._pipeline import REQUEST_ID, Pipeline
from llmbridge.gateway._teams import AS_MASTER, AS_OPEN, AS_STATIC, VIRTUAL, Principal, Refusal, Teams, Ticket, keys
from llmbridge.gateway._teams.core import bounded_request_id, milliseconds
from llmbridge.gateway._teams.limits import ADMITTED, LocalLimiter
from llmbridge.gateway._teams.metrics import Histogram, Metrics
from llmbridge.gateway._teams.pricing import Price, cost
from llmbridge.gateway.config import Config


def _cost_in_full(price: Price, usage: hub.Usage) -> float:
    # pricing.cost's general rule, every term written out (the reference the shortcut must equal)
    inp, out = usage.input_tokens or 0, usage.output_tokens or 0
    cached = min(usage.cache_read_tokens or 0, inp)
    thinking = min(usage.reasoning_tokens or 0, out)
    cached_rate = price.input if price.cached is None else price.cached
    thinking_rate = price.output if price.thinking is None else price.thinking
    micro = (inp - cached) * price.input + cached * cached_rate + (out - thinking) * price.output
    return (micro + thinking * thinking_rate) / 1_000_000


def test_cost_without_cached_or_reasoning_tokens_equals_the_general_rule_exactly() -> None:
    prices = [Price(2.5, 10, 1.25), Price(0.15, 0.6), Price(3, 15, 0.3, 20), Price(0, 0), Price(1e6, 0.1, 0.0, 0.0)]
    tokens = [None, 0, 1, 7, 8, 4096, 123_457, -3]
    seen = 0
    for price, inp, out, cached, thinking in itertools.product(prices, tokens, tokens, [None, 0, 5], [None, 0, 2]):
        usage = hub.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached, reasoning_tokens=thinking)
        expected = _cost_in_full(price, usage)
        got = cost(price, usage)
        assert got == expected and type(got) is type(expected), (price, usage, got, expected)
        seen += 1
    assert seen == 5 * 8 * 8 * 9


def _settled_by_labels(m: Metrics, model, dialect, status, inp, out, spent, ttft, duration, cache, error) -> None:
    # what Metrics.settled stands for, through the families' labels() and the series' own calls
    m.open_streams.dec()
    m.requests.labels(model, dialect, str(status)).inc()
    if inp and inp > 0:
        m.tokens.labels(model, "input").inc(inp)
    if out and out > 0:
        m.tokens.labels(model, "output").inc(out)
    if spent and spent > 0:
        m.cost.labels(model).inc(spent)
    if ttft is not None:
        m.ttft.labels(model).observe(ttft)
    m.duration.labels(model).observe(duration)
    if cache is not None:
        m.cache.labels(model, cache).inc()
    if error is not None:
        m.upstream_errors.labels(*error).inc()


def _exposition(m: Metrics) -> list[str]:
    return [line for line in m.render().decode().splitlines() if "_created" not in line]


def test_settled_moves_the_same_series_as_labels_calls() -> None:
    rng = random.Random(23)
    fast, by_labels = Metrics(), Metrics()
    for i in range(600):
        args = (
            rng.choice(["m1", "m2", "(unknown)"]),
            rng.choice(["openai-chat", "anthropic-messages"]),
            rng.choice([200, 200, 400, 429, 499, 502]),
            rng.choice([None, 0, 3, 812]),
            rng.choice([None, 0, 1, 40]),
            rng.choice([0.0, 0.0, 1.5e-05, 0.02]),
            rng.choice([None, 0.0004, 0.3, 7.0]),
            rng.choice([0.0, 0.001, 0.6, 45.0, 1000.0]),
            rng.choice([None, None, "hit", "miss"]),
            rng.choice([None, None, ("up-a", "overloaded"), ("up-b", "api_error")]),
        )
        fast.settled(*args)
        _settled_by_labels(by_labels, *args)
        if i in (0, 1, 7, 60, 599):  # series appear as they first move, not all at once
            assert _exposition(fast) == _exposition(by_labels)


def _team_config(tmp_path: Path, extra: str = "") -> Config:
    return config.loads(
        f'[gateway]\nmaster_key = "sk-master-0123456789abcdef"\ndatabase_url = "sqlite:///{tmp_path / "l.db"}"\n'
        f'api_keys = ["sk-static-0123456789"]\n{extra}\n'
        '[upstreams.u]\nformat = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "x"\n\n'
        '[[models]]\nname = "m1"\nupstream = "u"\nprice = { input = 2.5, output = 10 }\n'
    )


def test_a_virtual_keys_kept_principal_follows_its_record(tmp_path: Path) -> None:
    """Teams keeps a usable key's principal (Teams._virtual); every answer must be
    what the record held *now* gives: the same principal, or the same refusal."""

    async def main() -> None:
        teams = Teams(_team_config(tmp_path).gateway.teams, _team_config(tmp_path), [b"sk-static-0123456789"])
        await teams.start()
        try:
            assert teams.store is not None
            records, secrets = [], []
            for i in range(3):
                record, secret = keys.create({"name": f"k{i}", "rpm_limit": 100 + i})
                await teams.store.insert_key(record)
                teams.remember(record)
                records.append(record)
                secrets.append(secret)

            async def check() -> None:  # every secret, twice (the second from what is kept)
                for _ in range(2):
                    for record, secret in zip(records, secrets, strict=True):
                        who = await teams.authenticate(secret)
                        current = teams._by_hash.get(keys.hash_secret(secret))
                        why = None if current is None else current.usable(time.time())
                        if current is None or why is not None:
                            assert isinstance(who, Refusal), (record.name, who)
                            assert who.error.message == (why or "invalid API key")
                        else:
                            assert isinstance(who, Principal) and who == Principal(VIRTUAL, current)
                            assert who.key is current  # the record in force, not the one first seen

            await check()
            for held in vars(teams).values():  # no secret kept as a memo's key (the store holds digests)
                if isinstance(held, dict):
                    assert not any(secret in held or secret.encode() in held for secret in secrets)
            records[0] = keys.update(records[0], {"rpm_limit": 7})  # a changed limit is seen at once
            teams.remember(records[0])
            await check()
            old = records[1].key_hash
            rotated, new_secret = keys.rotate(records[1])
            teams.remember(rotated, old)
            await check()  # the old secret is refused now
            records[1], secrets[1] = rotated, new_secret
            await check()
            records[2] = dataclasses.replace(records[2], revoked_at=time.time())
            teams.remember(records[2])
            await check()
            expired = dataclasses.replace(records[0], expires_at=time.time() - 1)
            teams.remember(expired)
            records[0] = expired
            await check()
            assert await teams.authenticate("sk-static-0123456789") is AS_STATIC
        finally:
            await teams.stop()

    asyncio.run(main())


def test_keyless_admission_without_a_coroutine_gives_admits_ticket(tmp_path: Path) -> None:
    """Pipeline.admit calls Teams.admit_keyless for a principal without a virtual key (and
    Pipeline.authenticate Teams.authenticate_keyless when there are no accounts): the same
    tickets and answers as the coroutines, which also serve every other caller."""

    async def main() -> None:
        cfg = config.loads(
            '[gateway]\napi_keys = ["sk-static-0123456789"]\n\n'
            '[upstreams.u]\nformat = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "x"\n\n'
            '[[models]]\nname = "m1"\nupstream = "u"\nprice = { input = 2.5, output = 10 }\n'
        )
        teams = Teams(cfg.gateway.teams, cfg, [b"sk-static-0123456789"])
        assert not teams.accounts and teams.metrics is not None
        for secret in [None, "", "sk-static-0123456789", "sk-static-012345678", "wrong"]:
            assert teams.authenticate_keyless(secret) == await teams.authenticate(secret)
        assert teams.metrics.rejections.labels("auth").value == 2 * 4
        fields = [f.name for f in dataclasses.fields(Ticket) if f.name not in ("started", "wall")]
        for who in (AS_STATIC, AS_MASTER, AS_OPEN):
            for model in ("m1", "other", None):
                for rid in ("req_1", "a b", "x" * 200, ""):
                    hreq = hub.Request(model=model, stream=True)
                    fast = teams.admit_keyless(who, hreq, "openai-chat", "anthropic-messages", rid)
                    slow = await teams.admit(who, hreq, 100, "openai-chat", "anthropic-messages", rid)
                    assert isinstance(slow, Ticket)
                    assert [getattr(fast, f) for f in fields] == [getattr(slow, f) for f in fields]
                    assert slow.started - fast.started >= 0 and fast.admission is ADMITTED

    asyncio.run(main())


def test_bounded_request_id_keeps_exactly_what_the_header_rule_allows() -> None:
    # The rule (pipeline.REQUEST_ID, the x-request-id header's): 1-128 characters in 0x21-0x7e.
    # bounded_request_id keeps such an id (and "") as it is and filters anything else.
    def reference(value: str) -> str:
        if not value or REQUEST_ID.fullmatch(value):
            return value
        return "".join(c for c in value[:4096] if "!" <= c <= "~")[:128]

    singles = [chr(c) for c in [*range(0x3000), 0xFEFF, 0x10FFFF, 0xD7FF, 0x1F600]]
    longer = ["req_" + "a" * n for n in (0, 123, 124, 125, 200)] + ["a b", "tab\there", "é" * 3, "x\x7f", "ok~!"]
    for value in ["", *singles, *longer, *(s + "z" for s in singles[:300])]:
        assert bounded_request_id(value) == reference(value), repr(value)


def test_timing_clamps_each_share_as_max_does(monkeypatch) -> None:
    """Pipeline.timing clamps the shares with comparisons: the Server-Timing value and the
    overhead histogram must be what max(0.0, ...) gives, for every sign, zero, -0.0 and NaN."""
    pipeline = object.__new__(Pipeline)  # (timing reads only .teams)
    metrics = Metrics()
    pipeline.teams = types.SimpleNamespace(metrics=metrics)  # type: ignore[assignment]
    reference = Histogram(metrics.overhead.bounds)
    values = [None, 0.0, -0.0, 1e-9, 0.0004, 0.25, 3.0, -0.001, -5.0, math.nan, math.inf]
    now = 100.0
    monkeypatch.setattr(time, "perf_counter", lambda: now)
    for arrived in (100.0, 99.9996, 99.0, 100.5, math.nan):
        for started, at in itertools.product(values, values):
            upstream = at - started if at is not None and started is not None else 0.0
            gateway = max(0.0, now - arrived - max(0.0, upstream))
            expected = f"gateway;dur={gateway * 1000:.3f}, upstream;dur={max(0.0, upstream) * 1000:.3f}"
            assert pipeline.timing(arrived, started, at) == expected, (arrived, started, at)
            reference.observe(gateway)
    assert metrics.overhead.counts == reference.counts
    assert metrics.overhead.sum == reference.sum


def test_local_limiter_admit_now_decides_and_counts_as_admit_does() -> None:
    """Teams._check asks LocalLimiter.admit_now first (no coroutine) and awaits admit only when
    it says None: the same admissions and the same counts as admit alone, over budgets,
    RPM, TPM, settlements and new periods."""

    async def main() -> None:
        t = [1_767_225_000.0]  # 2025-12-31 23:50 UTC: the month and the day change on the way
        seeded: list[tuple[str, float]] = []

        async def seed(key_id: str, since: float) -> float:
            seeded.append((key_id, since))
            return 0.4

        fast, slow = LocalLimiter(seed, lambda: t[0]), LocalLimiter(seed, lambda: t[0])
        specs = [
            {"name": "a", "rpm_limit": 5, "tpm_limit": 300, "budget_usd": 1.0, "budget_period": "day"},
            {"name": "b", "rpm_limit": 2},
            {"name": "c", "tpm_limit": 50, "budget_usd": 0.5, "budget_period": "month"},
            {"name": "d"},
        ]
        records = [keys.create(spec)[0] for spec in specs]
        rng = random.Random(6)
        for _ in range(400):
            key = rng.choice(records)
            estimate = rng.choice([0, 10, 40, 200])
            ready = fast.admit_now(key, estimate)
            got = ready if ready is not None else await fast.admit(key, estimate)
            assert got == await slow.admit(key, estimate)
            if got.ok and rng.random() < 0.7:
                tokens, spent = rng.choice([0, 30, 120]), rng.choice([0.0, 0.01, 0.3])
                fast.settle_now(key, got, tokens, spent)
                slow.settle_now(key, got, tokens, spent)
            assert (fast._rpm, fast._tpm, fast._spend) == (slow._rpm, slow._tpm, slow._spend)
            t[0] += rng.choice([0.5, 3.0, 20.0, 61.0])
        assert len({since for _, since in seeded}) >= 3  # new periods were met (and seeded) on the way

    asyncio.run(main())


def test_settling_reports_the_ledgers_pending_rows(tmp_path: Path) -> None:
    """Ledger.record returns the rows waiting, which settling sets the gauge to (in place of
    reading Ledger.pending again): the gauge follows the buffer, shedding included."""

    async def main() -> None:
        cfg = _team_config(tmp_path, "ledger_max_buffer = 3\nledger_flush_seconds = 3600")
        teams = Teams(cfg.gateway.teams, cfg, [])
        await teams.start()
        try:
            assert teams.store is not None and teams.ledger is not None and teams.metrics is not None
            record, secret = keys.create({"name": "k", "budget_usd": 5.0})
            await teams.store.insert_key(record)
            teams.remember(record)
            who = await teams.authenticate(secret)
            assert isinstance(who, Principal)
            for i in range(6):
                ticket = await teams.admit(who, hub.Request(model="m1"), 80, "openai-chat", "openai-chat", f"r{i}")
                assert isinstance(ticket, Ticket)
                teams.settle(ticket, 200)
                assert teams.metrics.ledger_pending.value == teams.ledger.pending == min(i + 1, 3)
            assert teams.ledger.dropped == 3
        finally:
            await teams.stop()

    asyncio.run(main())


def test_milliseconds_is_round_to_three_digits_bit_for_bit() -> None:
    """The ledger's ttft_ms and duration_ms: teams.core.milliseconds against round(x * 1000, 3),
    compared as bits (the sign of zero included), over magnitudes, halves and their neighbours."""
    rng = random.Random(1000)
    values = [0.0, -0.0, 1e-12, 5e-7, 4.999e-7, 5.0005e-4, 0.0015, 2.5e-6, 1e9, 1.1e9, -0.001, math.inf, math.nan]
    for _ in range(20_000):
        values.append(rng.uniform(0, 10) * 10.0 ** rng.randint(-7, 7))
    for _ in range(5_000):  # at a half of a microsecond, and one or two floats either side
        half = (rng.randint(0, 10**9) + 0.5) / 1e6
        values += [half, math.nextafter(half, 0), math.nextafter(half, 1), half * (1 + 2e-16), half * (1 - 2e-16)]
    for x in values:
        expected, got = round(x * 1000, 3), milliseconds(x)
        assert struct.pack("<d", got) == struct.pack("<d", expected), (x, got, expected)
