"""Team gateway as real processes: two replicas sharing one Redis enforce one RPM limit exactly;
Redis down fails open or closed as configured; SIGKILL loses at most the documented ledger rows."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from llmbridge import replay
from llmbridge.gateway import config, create_app
from tests.conftest import CORPUS
from tests.gateway_util import replay_config, serving
from tests.teams_util import free_port, redis_server
from tests.test_teams_gateway import check_budget_stops_a_key, team_app

MASTER = "master-" + "y" * 24
ADMIN = {"authorization": f"Bearer {MASTER}"}
MODELS = {"claude": ("anthropic-messages", "claude-text-simple")}


@pytest.fixture(scope="module")
def rep():
    with serving(replay.create_app(CORPUS, seed=3)) as server:
        yield server


def toml(raw: dict) -> str:
    """The few TOML shapes replay_config makes (tables, arrays of tables, strings, numbers)."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, dict):
            return "{ " + ", ".join(f'"{k}" = {value(x)}' for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines = ["[gateway]", *(f"{k} = {value(v)}" for k, v in raw["gateway"].items())]
    for name, up in raw["upstreams"].items():
        lines += [f'[upstreams."{name}"]', *(f"{k} = {value(v)}" for k, v in up.items())]
    for entry in raw["models"]:
        lines += ["[[models]]", *(f"{k} = {value(v)}" for k, v in entry.items())]
    return "\n".join(lines) + "\n"


@contextmanager
def gateway_process(tmp: Path, raw: dict, name: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """``llmbridge serve`` as its own process on 127.0.0.1; yields (base URL, process)."""
    path = tmp / f"{name}.toml"
    path.write_text(toml(raw))
    port = free_port()
    log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed below
    cmd = [sys.executable, "-m", "llmbridge.cli", "serve", "--config", str(path), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway {name} did not start: {(tmp / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def body(model: str = "claude") -> dict:
    return {"model": model, "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def test_two_replicas_sharing_redis_let_through_exactly_the_rpm_limit(rep, tmp_path):
    limit, attempts = 7, 40
    with redis_server(tmp_path) as redis_url:
        gateway = {"master_key": MASTER, "database_url": f"sqlite:///{tmp_path / 'shared.db'}", "redis_url": redis_url}
        raw = replay_config(rep.url, MODELS, gateway=gateway)
        with gateway_process(tmp_path, raw, "a") as (a, _), gateway_process(tmp_path, raw, "b") as (b, _):
            made = httpx.post(a + "/admin/keys", json={"name": "shared", "rpm_limit": limit}, headers=ADMIN)
            assert made.status_code == 201, made.text
            secret = made.json()["key"]

            async def load() -> list[int]:
                async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=100)) as client:

                    async def one(i: int) -> int:
                        url = (a, b)[i % 2] + "/v1/messages"
                        r = await client.post(url, json=body(), headers={"x-api-key": secret})
                        return r.status_code

                    return await asyncio.gather(*(one(i) for i in range(attempts)))

            statuses = asyncio.run(load())
    assert statuses.count(200) == limit, statuses
    assert statuses.count(429) == attempts - limit
    # both replicas stopped gracefully: every request is in the shared ledger, refusals too
    con = sqlite3.connect(tmp_path / "shared.db")
    try:
        rows = dict(con.execute("SELECT status, COUNT(*) FROM llmb_usage GROUP BY status").fetchall())
    finally:
        con.close()
    assert rows == {200: limit, 429: attempts - limit}


def _app(rep, tmp_path, redis_url: str, failure: str):
    gateway = {"master_key": MASTER, "database_url": f"sqlite:///{tmp_path / f'{failure}.db'}",
               "redis_url": redis_url, "rate_limit_failure": failure}  # fmt: skip
    return create_app(config.parse(replay_config(rep.url, MODELS, gateway=gateway)))


@pytest.mark.parametrize("failure, status", [("open", 200), ("closed", 503)])
def test_redis_down_fails_open_or_closed_as_configured(rep, tmp_path, failure, status):
    with redis_server(tmp_path) as redis_url, serving(_app(rep, tmp_path, redis_url, failure)) as gw:
        secret = httpx.post(gw.url + "/admin/keys", json={"name": "k", "rpm_limit": 100}, headers=ADMIN).json()["key"]
        assert httpx.post(gw.url + "/v1/messages", json=body(), headers={"x-api-key": secret}).status_code == 200
        dead = redis_url  # the server stops when this block ends
    with serving(_app(rep, tmp_path, dead, failure)) as gw:
        r = httpx.post(gw.url + "/v1/messages", json=body(), headers={"x-api-key": secret}, timeout=20)
        assert r.status_code == status, r.text
        metrics = httpx.get(gw.url + "/metrics").text
        assert "llmbridge_limiter_errors_total 1.0" in metrics
        if status == 503:
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "overloaded_error"


def test_a_budget_stops_a_key_within_one_request_with_redis_counters(rep, tmp_path):
    # the spend counter lives in Redis (seeded from the ledger on first use, INCRBYFLOAT per request)
    with redis_server(tmp_path) as redis_url:
        app = team_app(rep, f"sqlite:///{tmp_path / 'budget.db'}", redis_url=redis_url)
        with serving(app) as gw:
            check_budget_stops_a_key(gw)


FLUSH = 0.2  # ledger_flush_seconds of the killed gateway
SLACK = 1.5  # extra seconds for a loaded 2-core machine: the bound checked is FLUSH + SLACK


def test_sigkill_mid_load_loses_at_most_the_last_flush_interval(rep, tmp_path):
    db = tmp_path / "ledger.db"
    gateway = {"master_key": MASTER, "database_url": f"sqlite:///{db}", "ledger_flush_seconds": FLUSH}
    raw = replay_config(rep.url, MODELS, gateway=gateway)
    with gateway_process(tmp_path, raw, "victim") as (url, proc):
        secret = httpx.post(url + "/admin/keys", json={"name": "load"}, headers=ADMIN).json()["key"]
        done: list[float] = []  # monotonic times at which a response was complete
        stop = threading.Event()

        def client() -> None:
            with httpx.Client(timeout=10) as c:
                while not stop.is_set():
                    try:
                        r = c.post(url + "/v1/messages", json=body(), headers={"x-api-key": secret})
                    except httpx.HTTPError:
                        return
                    if r.status_code == 200 and r.content.rstrip().endswith(b"}"):
                        done.append(time.monotonic())

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        # enough load that some requests ended well before the kill, whatever the machine's speed
        while len(done) < 50 or time.monotonic() - done[0] < FLUSH + SLACK + 1.0:
            time.sleep(0.01)
        killed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = con.execute("SELECT COUNT(*) FROM llmb_usage WHERE status = 200").fetchone()[0]
    finally:
        con.close()
    safe = sum(1 for t in done if t < killed_at - FLUSH - SLACK)
    assert safe > 0
    # at most the 4 requests in flight can be in the ledger without their client having seen the end
    assert safe <= rows <= len(done) + len(threads), (safe, rows, len(done))
