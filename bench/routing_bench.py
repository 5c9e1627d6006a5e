"""Issue 24: routing across deployments under injected faults.

Three fault-injecting OpenAI-chat upstreams on real sockets (``tests/fault_upstream.py``, one
thread each in this process): **A** healthy, **B** failing 30% of its requests (every
request n with n % 10 in {1, 4, 7}; the faults in turn: 429 with ``retry-after: 1``, 500,
connection refused (its listener closes for 5 ms), a stall before the first byte), **C**
slow (its answer after 200 ms).  One ``llmbridge serve`` process in front of them, model
``m`` with the three as deployments (equal weights), ``retries = {attempts = 3,
backoff_ms = 100, max_backoff_ms = 4000}``, ``cooldown = {failures = 3, seconds = 5}``,
``first_byte = 0.5`` s per upstream.  The load generator (httpx, this process): 2,000
streams at 20 concurrent, one run per strategy.

Per run: the share of streams completed without an error reaching the client (a non-200, an
error event, or no ``[DONE]``); who served them (``x-llmbridge-deployment``); how many
upstream requests each took (``x-llmbridge-attempts``); p50 latency of the streams served at
the first attempt and of those that needed one retry after a fast failure (429, 500,
refused) or after the stall (which waits ``first_byte`` first), and the difference against
the backoff's own p50 (full jitter over 100 ms: 50 ms); B's requests within its retry-after.

``python -m bench routing``; env ROUTING_BENCH_STREAMS (2000), ROUTING_BENCH_CONC (20),
ROUTING_BENCH_STRATEGIES (latency,least-busy,weighted,ordered).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from .common import table

STREAMS = int(os.environ.get("ROUTING_BENCH_STREAMS", "2000"))
CONC = int(os.environ.get("ROUTING_BENCH_CONC", "20"))
STRATEGIES = os.environ.get("ROUTING_BENCH_STRATEGIES", "latency,least-busy,weighted,ordered").split(",")
FIRST_BYTE = 0.5
BACKOFF_MS = 100
FAULTS = ("429", "500", "refuse", "stall")
ROOT = Path(__file__).resolve().parent.parent
FAILURES: Counter[str] = Counter()  # what the client saw when a stream failed, over the whole run


def b_mode(n: int) -> str:
    """30% of B's requests fail, the faults in turn."""
    slot = n % 10
    if slot not in (1, 4, 7):
        return "ok"
    k = (n // 10) * 3 + (1, 4, 7).index(slot)
    return FAULTS[k % 4]


def _config(tmp: Path, routing: str, urls: dict[str, str]) -> Path:
    lines = ["[gateway]", "metrics = true", "ui_traffic = 100000", ""]  # every attempt in the Traffic ring
    for name, url in urls.items():
        lines += [f"[upstreams.{name}]", 'format = "openai-chat"', f'base_url = "{url}"',
                  f"timeouts = {{ connect = 2, first_byte = {FIRST_BYTE} }}", ""]  # fmt: skip
    deployments = ", ".join(f'{{ upstream = "{n}", model = "x" }}' for n in urls)
    lines += [
        "[[models]]", 'name = "m"', f'routing = "{routing}"', f"deployments = [{deployments}]",
        f"retries = {{ attempts = 3, backoff_ms = {BACKOFF_MS}, max_backoff_ms = 4000 }}",
        "cooldown = { failures = 3, seconds = 5 }", "",
    ]  # fmt: skip
    path = tmp / f"routing-{routing}.toml"
    path.write_text("\n".join(lines))
    return path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(config: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    import urllib.request

    port = _free_port()
    log = (tmp / f"{config.stem}.log").open("wb")
    cmd = [sys.executable, "-m", "llmbridge.cli", "serve", "--config", str(config), "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the gateway did not start: " + (tmp / f"{config.stem}.log").read_text()[-2000:])


def _get(url: str) -> dict:
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


async def _load(url: str) -> list[tuple[bool, str, int, float]]:
    """(ok, deployment, attempts, seconds) per stream."""
    import httpx

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    results: list[tuple[bool, str, int, float]] = []
    started = 0
    limits = httpx.Limits(max_connections=CONC, max_keepalive_connections=CONC)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def worker() -> None:
            nonlocal started
            while started < STREAMS:
                started += 1
                t0 = time.perf_counter()
                try:
                    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                        text = (await r.aread()).decode()
                    ok = r.status_code == 200 and "data: [DONE]" in text and '"error"' not in text
                    who = r.headers.get("x-llmbridge-deployment", "?")
                    tries = int(r.headers.get("x-llmbridge-attempts", "0"))
                    if not ok:
                        FAILURES[f"HTTP {r.status_code}: {text[:200]}"] += 1
                except httpx.HTTPError as exc:
                    ok, who, tries = False, "?", 0
                    FAILURES[f"{type(exc).__name__}: {exc}"[:200]] += 1
                results.append((ok, who, tries, time.perf_counter() - t0))

        await asyncio.gather(*(worker() for _ in range(CONC)))
    return results


def _one(routing: str, tmp: Path) -> dict[str, object]:
    sys.path.insert(0, str(ROOT))
    from tests.fault_upstream import FaultUpstream

    ups = {"a": FaultUpstream("a", "ok"), "b": FaultUpstream("b", b_mode, refuse_ms=5), "c": FaultUpstream("c", "slow")}
    for up in ups.values():
        up.start()
    proc, url = _serve(_config(tmp, routing, {n: u.url for n, u in ups.items()}), tmp)
    try:
        t0 = time.perf_counter()
        results = asyncio.run(_load(url))
        wall = time.perf_counter() - t0
        traffic = _get(url + "/ui/api/traffic")["entries"]
        deployments = {r["deployment"]: r for r in _get(url + "/admin/deployments")["data"]}
    finally:
        proc.terminate()
        proc.wait(10)
        for up in ups.values():
            up.stop()
    log = (tmp / f"routing-{routing}.log").read_text(errors="replace")
    if "Traceback" in log or " ERROR " in log or "ERROR:" in log:
        FAILURES[f"gateway log of {routing}: " + log[log.find("Traceback") - 300 :][:1500]] += 1
    ok = sum(r[0] for r in results)
    by = Counter(r[1] for r in results if r[0])
    # like with like: streams A served, at the first try or after one retry
    first = [r[3] for r in results if r[0] and r[2] == 1 and r[1] == "a/x"]
    fast_retry = [r[3] for r in results if r[0] and r[2] == 2 and r[3] < FIRST_BYTE and r[1] == "a/x"]
    failed = [e["duration_ms"] / 1000 for e in traffic if e["upstream"] == "b" and e["status"] == "error"
              and e["duration_ms"] is not None and e["duration_ms"] < FIRST_BYTE * 1000]  # fmt: skip
    stall_retry = [r[3] for r in results if r[0] and r[2] == 2 and r[3] >= FIRST_BYTE]
    b = ups["b"]
    times = [t for t, _ in b.arrivals]
    early = 0  # B requests that arrived within 1 s of a 429 it answered (and were sent after it)
    for t in b.arrivals_of("429"):
        early += sum(1 for u in times if t + 0.05 < u < t + 1.0)
    p50 = statistics.median
    return {
        "routing": routing,
        "streams": len(results),
        "ok": ok,
        "wall": wall,
        "by": by,
        "retries": Counter(r[2] for r in results),
        "p50_first": p50(first) if first else None,
        "p50_fast_retry": p50(fast_retry) if fast_retry else None,
        "p50_stall_retry": p50(stall_retry) if stall_retry else None,
        "n_fast_retry": len(fast_retry),
        "p50_failed": p50(failed) if failed else None,
        "b_gateway": {k: deployments["b/x"][k] for k in ("requests", "errors", "cooldowns")},
        "b_faults": Counter(m for _, m in b.arrivals),
        "b_early": early,
    }


DOWN_SECONDS = 2.0  # the down/up phase's cooldown


async def _down_up(url: str, b: object) -> dict[str, float]:
    """Load at CONC concurrent; B goes down (500 to everything), then comes back.  Returns the
    requests that reached B after it went down, how long until it cooled, and how long after
    it came back until it was probed back to ok; plus the client errors."""
    import httpx

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    stop = False
    errors = 0
    done = 0

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def worker() -> None:
            nonlocal errors, done
            while not stop:
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    text = (await r.aread()).decode()
                ok = r.status_code == 200 and "data: [DONE]" in text and '"error"' not in text
                errors += not ok
                done += 1

        async def state() -> str:
            rows = (await client.get("/admin/deployments")).json()["data"]
            return str(next(r["state"] for r in rows if r["deployment"] == "b/x"))

        workers = [asyncio.ensure_future(worker()) for _ in range(CONC)]
        await asyncio.sleep(2.0)
        assert await state() == "ok"
        b.mode = "500"  # type: ignore[attr-defined]
        down = time.monotonic()
        while await state() != "cooling":
            await asyncio.sleep(0.005)
        cooled = time.monotonic()
        reached = len([t for t in b.arrivals_of("500") if t >= down])  # type: ignore[attr-defined]
        await asyncio.sleep(0.5)
        b.mode = "ok"  # type: ignore[attr-defined]
        up = time.monotonic()
        while await state() != "ok":
            await asyncio.sleep(0.01)
        back = time.monotonic()
        await asyncio.sleep(1.0)
        stop = True
        await asyncio.gather(*workers)
    return {"reached": reached, "to_cool": cooled - down, "to_back": back - up, "errors": errors, "streams": done}


def down_up(tmp: Path) -> str:
    sys.path.insert(0, str(ROOT))
    from tests.fault_upstream import FaultUpstream

    ups = {"a": FaultUpstream("a", "ok"), "b": FaultUpstream("b", "ok"), "c": FaultUpstream("c", "slow")}
    for up in ups.values():
        up.start()
    config = _config(tmp, "least-busy", {n: u.url for n, u in ups.items()})
    text = config.read_text().replace("cooldown = { failures = 3, seconds = 5 }",
                                      f"cooldown = {{ failures = 3, seconds = {DOWN_SECONDS} }}")  # fmt: skip
    config.write_text(text)
    proc, url = _serve(config, tmp)
    try:
        r = asyncio.run(_down_up(url, ups["b"]))
    finally:
        proc.terminate()
        proc.wait(10)
        for up in ups.values():
            up.stop()
    return (
        f"B down (500 to everything) under {CONC} concurrent streams, least-busy, cooldown = {{ failures = 3, "
        f"seconds = {DOWN_SECONDS:g} }}: {r['reached']} requests reached B after it went down, cooled after "
        f"{r['to_cool'] * 1000:.0f} ms; B back up: probed and ok after {r['to_back']:.2f} s "
        f"(bound: seconds + 1 = {DOWN_SECONDS + 1:g} s); client errors {r['errors']} of {r['streams']} streams"
    )


def _ms(x: object) -> str:
    return "-" if x is None else f"{float(x) * 1000:.0f}"  # type: ignore[arg-type]


def run() -> str:
    rows = []
    notes = []
    with tempfile.TemporaryDirectory() as d:
        for routing in STRATEGIES:
            r = _one(routing, Path(d))
            n = int(r["streams"])  # type: ignore[call-overload]
            by: Counter[str] = r["by"]  # type: ignore[assignment]
            added = expected = None
            if r["p50_fast_retry"] is not None and r["p50_first"] is not None:
                added = float(r["p50_fast_retry"]) - float(r["p50_first"])  # type: ignore[arg-type]
            if r["p50_failed"] is not None:
                expected = float(r["p50_failed"]) + BACKOFF_MS / 2000  # type: ignore[arg-type]
            rows.append([
                routing, n, f"{100 * int(r['ok']) / n:.2f}%",  # type: ignore[call-overload]
                *(f"{100 * by[f'{x}/x'] / n:.1f}%" for x in "abc"),
                _ms(r["p50_first"]), _ms(r["p50_fast_retry"]), r["n_fast_retry"], _ms(added), _ms(r["p50_failed"]),
                _ms(expected), _ms(r["p50_stall_retry"]), r["b_early"], f"{float(r['wall']):.1f}",  # type: ignore[arg-type]
            ])  # fmt: skip
            notes.append(f"{routing}: attempts per stream {dict(sorted(r['retries'].items()))}, "  # type: ignore[attr-defined]
                         f"B answered {dict(r['b_faults'])}, B at the gateway {r['b_gateway']}")  # fmt: skip
    head = ["routing", "streams", "no client error", "by A", "by B", "by C", "A p50 ms, 1st try",
            "A p50 ms, 1 retry", "(n)", "added ms", "failed try p50 ms", "failed + backoff p50 ms",
            "p50 ms, retry after a stall", "B requests within a retry-after", "wall s"]  # fmt: skip
    if FAILURES:
        notes.append(f"client-visible failures: {dict(FAILURES)}")
    with tempfile.TemporaryDirectory() as d:
        notes.append(down_up(Path(d)))
    return table(head, rows) + "\n\n" + "\n".join(notes)
