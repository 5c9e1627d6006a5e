"""Issue 23: what *starting* a request costs the gateway — CPU per request, and where it goes.

Two parts, both with 2-token streams (``fast-2-0``: a role chunk, two tokens, finish, usage,
``[DONE]``), so nearly all of the gateway's work is per request, not per event:

1. **CPU per request, no profiler**: the fast upstream (``bench/fast_upstream.py serve``) and
   ``llmbridge serve`` (as shipped: uvicorn, httptools, uvloop, access log on) each in their
   own process; the load generator (another process) runs ``REQUEST_PROFILE_N`` streams at 10
   concurrent; the gateway's utime+stime from ``/proc`` over the run ÷ streams.  The upstream's
   own CPU per stream (the "direct" server's cost) is shown beside it.  CPU time, not wall
   time, because the machine is shared; each figure is the median of ``REQUEST_PROFILE_ROUNDS``
   rounds, with the spread.  Relayed (chat → chat), translated (Messages → chat), and with the
   team features on (a virtual key with RPM/TPM/budget, SQLite ledger, metrics).
2. **Where it goes, under cProfile**: the gateway served *in this process* (thread CPU time as
   the clock), grouped by step of a request.  Profiling inflates every figure several times;
   the shares are the point.

3. **The first token's path** (``path``): which of that work the first token waits for. Only
   two stretches are on its path: from the client's request to the upstream request's write,
   and from the first token's arrival to its write to the client; what lies between overlaps
   the upstream's own time to its first token. The gateway is served in this process with a
   timestamp (wall and thread CPU) at those four points, and one client runs
   ``REQUEST_PROFILE_PATH_N`` streams one after another, twice: paced (``fast-2-10``: the
   first token 10 ms after the head, so the gateway sleeps in between and runs cold, as it
   does in front of a real model) and unpaced (``fast-2-0``: back to back, the caches warm).
   Paced, the rest of a request's CPU is shown too, stretch by stretch (the step that wrote
   the upstream request, the answer's head until the wait for the first token, and from the
   first token's write to the next request): the five add up to what one paced request costs.

4. **A burst's first tokens** (``burst``): rounds of ten paced streams arriving together
   (``fast-20-10``, ``REQUEST_PROFILE_BURST_N`` streams, 80), as the gateway bench's 10-paced
   row, direct and through a gateway served here. The load generator's marks (a stream's
   request written, its first token read) and the gateway's (request in, upstream request
   out, first token in, first token out) are on one clock, CLOCK_MONOTONIC, so each stream's
   added time splits into five stretches; beside each, how many of the *other* streams'
   events the gateway handled inside it: a stretch that holds them is a queue.

``python -m bench request``; env REQUEST_PROFILE_N (2000), REQUEST_PROFILE_ROUNDS (3),
REQUEST_PROFILE_PATH_N (300), REQUEST_PROFILE_PARTS (cpu,profile; path adds the first
token's path; burst adds a burst's first tokens, below; callgrind adds instruction counts, which do not move
with the machine's load: the server runs under ``valgrind --tool=callgrind``, counting only
while the load runs; REQUEST_PROFILE_CG_N streams, 300; REQUEST_PROFILE_CG_CONC concurrent, 10;
REQUEST_PROFILE_CG_TEAMS=0 skips the run with team features on).
"""

from __future__ import annotations

import collections
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import table
from .gateway_bench import BIN, HERE, Server, _port, _start
from .teams_bench import _virtual_key

N = int(os.environ.get("REQUEST_PROFILE_N", "2000"))
ROUNDS = int(os.environ.get("REQUEST_PROFILE_ROUNDS", "3"))
PARTS = os.environ.get("REQUEST_PROFILE_PARTS", "cpu,profile").split(",")
CONC = 10
# callgrind's load: 10 concurrent as the CPU figures; 1 (serial) moves less between runs
CG_CONC = int(os.environ.get("REQUEST_PROFILE_CG_CONC", str(CONC)))
MODEL = "fast-2-0"
KEY = "sk-bench-5f0c1e9a7b3d42c88e61f0a4d2b79c35"  # = fast_upstream.KEY
MASTER = "bench-master-key-0123456789abcdef"
PATHS = {"relay": ("/v1/chat/completions", "openai-chat"), "translate": ("/v1/messages", "anthropic-messages")}

# (substring of the code's path or function name, step), first match wins
STEPS = (
    ("uvicorn/protocols", "HTTP server (uvicorn: parse, ASGI messages)"),
    ("httptools", "HTTP server (uvicorn: parse, ASGI messages)"),
    ("uvicorn/middleware", "HTTP server (uvicorn: parse, ASGI messages)"),  # (its proxy-headers wrapper)
    ("_weakrefset", "HTTP server (uvicorn: parse, ASGI messages)"),  # (uvicorn's set of request tasks)
    ("gateway/server", "HTTP server (uvicorn: parse, ASGI messages)"),
    ("uvicorn/logging", "access log (format, redact, write)"),
    ("logging/__init__", "access log (format, redact, write)"),
    ("gateway/accesslog", "access log (format, redact, write)"),
    ("re/__init__", "access log (format, redact, write)"),
    ("starlette", "framework (Starlette router, middleware, Request)"),
    ("gateway/hotpath", "framework (Starlette router, middleware, Request)"),
    ("gateway/app", "framework (Starlette router, middleware, Request)"),
    ("gateway/response", "tasks and disconnect watchers"),
    ("asyncio/tasks", "tasks and disconnect watchers"),
    ("asyncio/base_events", "tasks and disconnect watchers"),
    ("asyncio/events", "tasks and disconnect watchers"),
    ("asyncio/timeouts", "upstream request (assembly, pool, send)"),
    ("gateway/http", "upstream request (assembly, pool, send)"),
    ("gateway/upstream", "upstream request (assembly, pool, send)"),
    ("urllib/parse", "upstream request (assembly, pool, send)"),
    # The codecs, by the step of the request they serve (issue 23 names them apart): the
    # request's (the client's body into the hub, the hub into the upstream's body) and the
    # answer's (the upstream's events decoded, the client's encoded).
    ("/_request", "request codecs (client body decoded, upstream body encoded)"),
    ("_encoder", "answer codecs (upstream events decoded, client events encoded)"),
    ("_decoder", "answer codecs (upstream events decoded, client events encoded)"),
    ("llmbridge/sse", "answer codecs (upstream events decoded, client events encoded)"),
    ("gateway/extensions", "answer codecs (upstream events decoded, client events encoded)"),  # (PlainEncoder)
    ("llmbridge/dialects", "codecs' shared parts (hub types, registry, helpers)"),
    ("llmbridge/hub", "codecs' shared parts (hub types, registry, helpers)"),
    ("gateway/streaming", "exchange (streaming, relay, timers, sources)"),
    ("gateway/relay", "exchange (streaming, relay, timers, sources)"),
    ("gateway/timers", "exchange (streaming, relay, timers, sources)"),
    ("gateway/sources", "exchange (streaming, relay, timers, sources)"),
    ("gateway/traffic", "console traffic ring, metering, metrics"),
    ("gateway/metering", "console traffic ring, metering, metrics"),
    ("gateway/teams", "console traffic ring, metering, metrics"),
    ("prometheus", "console traffic ring, metering, metrics"),
    ("gateway/routing", "routing (the deployment, its try)"),
    ("gateway/checks", "request checks (nesting, ranges, what the vendor refuses)"),
    ("gateway/acceptance", "request checks (nesting, ranges, what the vendor refuses)"),
    ("llmbridge/", "pipeline steps (chat.py, pipeline.py: auth, read, negotiation, admission)"),
    ("asyncio", "event loop, futures"),
    ("~", "builtins called from Python"),
)


def _step(path: str) -> str:
    # The gateway's modules are private (``gateway/_chat.py``): matched by their plain names.
    path = path.replace("gateway/_", "gateway/")
    return next((name for key, name in STEPS if key in path), "other")


def _config(tmp: Path, name: str, upstream: str, extra: list[str]) -> Path:
    lines = ["[gateway]", f'api_keys = ["{KEY}"]', *extra, "", "[upstreams.fast]", 'format = "openai-chat"']
    lines += [f'base_url = "{upstream}/v1"', 'api_key = "x"', "", "[[models]]", f'name = "{MODEL}"']
    lines += ['upstream = "fast"', "price = { input = 2.5, output = 10, cached = 1.25 }", ""]
    path = tmp / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def _load(url: str, dialect: str, n: int, key: str = KEY, conc: int = CONC) -> dict:
    argv = [sys.executable, str(HERE / "fast_upstream.py"), "load", url, dialect, MODEL, str(conc), str(n), "120"]
    with tempfile.TemporaryFile() as out:  # a file, not a pipe: the generator's one big line is not cut
        subprocess.run(argv, stdout=out, env={**os.environ, "LLMBRIDGE_BENCH_KEY": key}, check=False)
        out.seek(0)
        return json.loads(out.read())


def _cpu_rounds(label: str, url: str, dialect: str, server: Server, upstream: Server, key: str = KEY) -> list:
    gw, up = [], []
    for _ in range(ROUNDS):
        _load(url, dialect, 50, key)  # warm (and settle after the previous round)
        time.sleep(0.3)
        c0, u0 = server.cpu(), upstream.cpu()
        data = _load(url, dialect, N, key)
        c1, u1 = server.cpu(), upstream.cpu()
        ok = len(data["results"])
        if data["errors"] or ok == 0:
            raise RuntimeError(f"{label}: {data['errors']} errors: {data['error_samples']}")
        gw.append((c1 - c0) / ok * 1e6)
        up.append((u1 - u0) / ok * 1e6)
    return [label, statistics.median(gw), min(gw), max(gw), statistics.median(up)]


def cpu_per_request(tmp: Path) -> str:
    up_port = _port()
    up_url = f"http://127.0.0.1:{up_port}"
    servers: list[Server] = []
    rows = []
    try:
        upstream = _start("upstream", [sys.executable, str(HERE / "fast_upstream.py"), "serve", str(up_port)],
                          up_url + "/v1/models", tmp)  # fmt: skip
        servers.append(upstream)
        setups = {
            "off": [],
            "teams on": [f'master_key = "{MASTER}"', f'database_url = "sqlite:///{tmp / "ledger.db"}"'],
        }
        for name, extra in setups.items():
            port = _port()
            cfg = _config(tmp, name.replace(" ", "-"), up_url, extra)
            base = f"http://127.0.0.1:{port}"
            gw = _start(f"gw-{len(servers)}", [str(BIN / "llmbridge"), "serve", "--config", str(cfg), "--port",
                        str(port)], base + "/healthz", tmp)  # fmt: skip
            servers.append(gw)
            key = KEY if name == "off" else _virtual_key(base)
            for what, (path, dialect) in PATHS.items():
                rows.append(_cpu_rounds(f"llmbridge {what}, teams {name.split()[-1]}", base + path, dialect, gw,
                                        upstream, key))  # fmt: skip
        direct = _cpu_rounds("direct (the upstream itself)", up_url + "/v1/chat/completions", "openai-chat",
                             upstream, upstream)  # fmt: skip
        rows.append(direct)
    finally:
        for s in reversed(servers):
            s.stop()
    head = ["CPU µs per 2-token stream", "median", "min", "max", "upstream's own"]
    return f"{N} streams x {ROUNDS} rounds, {CONC} concurrent; load average {os.getloadavg()[0]:.1f}\n" + table(
        head, rows
    )


def _instructions(tmp: Path, name: str, up_url: str, extra: list[str], n: int) -> dict[str, float]:
    """Instructions per request (valgrind's callgrind, counting only while the load runs):
    a count that does not move with the machine's load, unlike CPU time."""
    import shutil

    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    port = _port()
    base = f"http://127.0.0.1:{port}"
    out = tmp / f"callgrind.{name}.out"
    cfg = _config(tmp, f"cg-{name}", up_url, extra)
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", sys.executable,
            "-m", "llmbridge", "serve", "--config", str(cfg), "--port", str(port)]  # fmt: skip
    server = _start(f"cg-{name}", argv, base + "/healthz", tmp, wait=600)
    result = {}
    try:
        key = KEY if not extra else _virtual_key(base)
        for what, (path, dialect) in PATHS.items():
            _load(base + path, dialect, 20, key)  # warm: imports, pools, caches
            subprocess.run(["callgrind_control", "-i", "on", str(server.proc.pid)], capture_output=True, check=True)
            done = _load(base + path, dialect, n, key, CG_CONC)
            subprocess.run(["callgrind_control", "-i", "off", str(server.proc.pid)], capture_output=True, check=True)
            ok = len(done["results"])
            dumped = tmp / f"callgrind.{name}.{what}"
            subprocess.run(["callgrind_control", "-d", what, str(server.proc.pid)], capture_output=True, check=True)
            time.sleep(1.0)
            total = 0
            for f in tmp.glob(f"callgrind.{name}.out*"):
                text = f.read_text(errors="replace")
                if f"desc: Trigger: dump {what}\n" in text:
                    total = max(total, _totals(text))
                    f.rename(dumped)
            result[what] = total / max(1, ok)
    finally:
        server.stop()
    return result


def _totals(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    return 0


def instructions(tmp: Path) -> str:
    up_port = _port()
    up_url = f"http://127.0.0.1:{up_port}"
    upstream = _start("upstream", [sys.executable, str(HERE / "fast_upstream.py"), "serve", str(up_port)],
                      up_url + "/v1/models", tmp)  # fmt: skip
    n = int(os.environ.get("REQUEST_PROFILE_CG_N", "300"))
    teams = os.environ.get("REQUEST_PROFILE_CG_TEAMS", "1") != "0"
    rows = []
    try:
        off = _instructions(tmp, "off", up_url, [], n)
        on = _instructions(tmp, "on", up_url, [f'master_key = "{MASTER}"',
                           f'database_url = "sqlite:///{tmp / "cg-ledger.db"}"'], n) if teams else {}  # fmt: skip
    finally:
        upstream.stop()
    for what in PATHS:
        if teams:
            rows.append([f"llmbridge {what}", off[what] / 1e3, on[what] / 1e3, (on[what] - off[what]) / 1e3])
        else:
            rows.append([f"llmbridge {what}", off[what] / 1e3, "", ""])
    head = ["k instructions per 2-token request (callgrind)", "teams off", "teams on", "on - off"]
    return f"{n} streams per figure, {CG_CONC} concurrent, counted by valgrind --tool=callgrind\n" + table(head, rows)


def _profile(config: Path, path: str, dialect: str) -> tuple[dict[str, float], list[tuple[str, float]], int]:
    import uvicorn

    from llmbridge.gateway import load
    from llmbridge.gateway._server import (
        GuardedConfig,
        GuardedHttpToolsProtocol,
        build_app,
        freeze_startup_objects,
        log_config,
    )

    port = _port()
    # As `llmbridge serve` runs it (access log, redaction, the guarded protocol, the collector's
    # settings), in this process.
    logging = log_config()
    logging["handlers"]["access"]["stream"] = "ext://sys.stderr"  # (stdout is this report)
    app = build_app(load(config))
    freeze_startup_objects()
    server = uvicorn.Server(
        GuardedConfig(
            app,
            host="127.0.0.1",
            port=port,
            loop="uvloop",
            log_level="info",
            log_config=logging,
            http=GuardedHttpToolsProtocol,
        )
    )
    done = [0]

    profile = cProfile.Profile(time.thread_time)

    def drive() -> None:
        while not server.started:
            time.sleep(0.05)
        # Only the requests are profiled, not the server's start-up and shut-down (closing the
        # pools and stores once read as ~20 µs a request of "framework"): the profiler is
        # switched on and off by the server's own thread, between two loop callbacks.
        loop = server.servers[0].get_loop()
        switched = threading.Event()
        loop.call_soon_threadsafe(lambda: (profile.enable(), switched.set()))
        switched.wait()
        done[0] = len(_load(f"http://127.0.0.1:{port}{path}", dialect, N)["results"])
        switched.clear()
        loop.call_soon_threadsafe(lambda: (profile.disable(), switched.set()))
        switched.wait()
        server.should_exit = True

    # The server runs in this thread; the load comes from a process started by another.
    threading.Thread(target=drive, daemon=True).start()
    server.run()
    n = max(1, done[0])
    steps: collections.Counter[str] = collections.Counter()
    funcs: collections.Counter[str] = collections.Counter()
    for (file, line, fn), (_, _, own, _, callers) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        short = file.split("site-packages/")[-1].split("/src/")[-1]
        funcs[f"{short}:{line} {fn}"] += own
        if file != "~" or not callers:
            steps[_step(file)] += own
            continue
        # A builtin (a dict lookup, a bytes search, a socket write) counts in the step of the
        # code that called it, by what each caller's calls took: the steps' shares are then
        # what each step costs, not what it costs outside the builtins it uses.
        for (caller_file, _, _), edge in callers.items():
            steps[_step(caller_file)] += edge[2]
    per = {name: s * 1e6 / n for name, s in steps.items()}
    top = [(name, s * 1e6 / n) for name, s in funcs.most_common(25)]
    return per, top, n


def profile_steps(tmp: Path) -> str:
    up_port = _port()
    upstream = subprocess.Popen([sys.executable, str(HERE / "fast_upstream.py"), "serve", str(up_port)])
    config = _config(tmp, "profile", f"http://127.0.0.1:{up_port}", [])
    out = []
    try:
        time.sleep(1.0)
        results = {what: _profile(config, path, dialect) for what, (path, dialect) in PATHS.items()}
    finally:
        upstream.terminate()
        upstream.wait()
    relay, translate = results["relay"][0], results["translate"][0]
    names = sorted(set(relay) | set(translate), key=lambda k: -(relay.get(k, 0) + translate.get(k, 0)))
    names = [k for k in names if relay.get(k, 0.0) >= 0.01 or translate.get(k, 0.0) >= 0.01]
    tr, tt = sum(relay.values()), sum(translate.values())
    rows = [[k, relay.get(k, 0.0), 100 * relay.get(k, 0.0) / tr, translate.get(k, 0.0),
             100 * translate.get(k, 0.0) / tt] for k in names]  # fmt: skip
    rows.append(["total", tr, 100.0, tt, 100.0])
    head = [
        "µs per request under cProfile (own time, builtins in their callers' steps)",
        "relay",
        "%",
        "translate",
        "%",
    ]
    out.append(f"{results['relay'][2]} / {results['translate'][2]} streams of 2 tokens, {CONC} concurrent")
    out.append(table(head, rows))
    for what in ("relay", "translate"):
        out.append(f"\ntop functions, {what} (own µs per request):")
        out += [f"  {us:7.1f}  {name}" for name, us in results[what][1]]
    return "\n".join(out)


PATH_N = int(os.environ.get("REQUEST_PROFILE_PATH_N", "300"))
PACED_MODEL = "fast-2-10"  # the first token 10 ms after the head (fast_upstream.py)


Probe = tuple[type, str, Callable[[Any], Any]]  # (class, method, wrap(original) -> the probed method)


def _serve_here(config: Path, probes: list[Probe], drive: Callable[[int], None]) -> None:
    """Serve the gateway from ``config`` in this process, as ``llmbridge serve`` does (start-up
    objects frozen), with each ``(class, method, wrap)`` of ``probes`` replaced by
    ``wrap(original)`` until the server stops; ``drive(port)`` runs in a thread once it is
    up, and the server stops when it returns."""
    import uvicorn

    from llmbridge.gateway import _server, load
    from llmbridge.gateway._server import GuardedConfig, GuardedHttpToolsProtocol, build_app, log_config

    originals = [(cls, name, getattr(cls, name)) for cls, name, _ in probes]
    for (cls, name, wrap), (_, _, original) in zip(probes, originals, strict=True):
        setattr(cls, name, wrap(original))
    port = _port()
    logging = log_config()
    logging["handlers"]["access"]["stream"] = "ext://sys.stderr"
    options = {"host": "127.0.0.1", "port": port, "loop": "uvloop", "log_level": "warning", "log_config": logging}
    app = build_app(load(config))
    _server.freeze_startup_objects()  # (as `llmbridge serve` does: the collector's settings too)
    server = uvicorn.Server(GuardedConfig(app, http=GuardedHttpToolsProtocol, **options))

    def run_drive() -> None:
        while not server.started:
            time.sleep(0.05)
        try:
            drive(port)
        finally:
            server.should_exit = True

    threading.Thread(target=run_drive, daemon=True).start()
    try:
        server.run()
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def _path_run(config: Path, model: str) -> dict[str, list[tuple[float, float]]]:
    """One client's ``PATH_N`` streams through a gateway served here, with timestamps at the
    first token's four points; per stretch, a (wall µs, CPU µs) pair per stream."""
    from llmbridge.gateway import _http, _server
    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    marks: list[tuple[str, int, int]] = []  # (point, perf_counter_ns, thread_time_ns)
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    # The probes wrap the four methods at the points (a call each: ~0.2 µs, against stretches
    # of a hundred; the client's side at its body messages, which put the token on the wire).

    def probe(point: str) -> Callable[[Any], Any]:
        def wrap(original: Any) -> Any:
            def probed(*args: Any) -> Any:
                marks.append((point, wall(), cpu()))
                return original(*args)

            def body_probed(cycle: Any, message: Any) -> Any:  # (the token is on the wire with a body message)
                if message["type"] == "http.response.body":
                    marks.append((point, wall(), cpu()))
                return original(cycle, message)

            return body_probed if point == "client out" else probed

        return wrap

    probes = [
        (GuardedHttpToolsProtocol, "data_received", probe("request in")),
        (_http._Connection, "send", probe("upstream out")),
        (_http._Connection, "data_received", probe("upstream in")),
        (_server.GuardedCycle, "send", probe("client out")),
    ]

    def drive(port: int) -> None:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        argv = [sys.executable, str(HERE / "fast_upstream.py"), "load", url, "openai-chat", model, "1", "20", "60"]
        subprocess.run(argv, capture_output=True, check=False)  # warm: imports, pools, caches
        marks.clear()
        argv[-2] = str(PATH_N)
        subprocess.run(argv, capture_output=True, check=False)

    _serve_here(config, probes, drive)
    stretches: dict[str, list[tuple[float, float]]] = {name: [] for name in STRETCHES}
    streams, current = [], None
    for mark in marks:  # one stream: its request, the upstream's reads, the client's messages
        if mark[0] == "request in":
            current = [mark]
            streams.append(current)
        elif current is not None:
            current.append(mark)
    for n, stream in enumerate(streams):
        points = [m[0] for m in stream]
        if "upstream out" not in points:
            continue
        sent = stream[points.index("upstream out")]
        stretches["request in → upstream out"].append(_between(stream[0], sent))
        if model != PACED_MODEL or points.count("upstream in") < 2:  # (unpaced: the token came with the head)
            continue
        # The first token: the upstream's second read (its first is the head and the role
        # chunk), to the client's first body message after it (the head goes with it).
        reads = [i for i, p in enumerate(points) if p == "upstream in"]
        head, token = stream[reads[0]], stream[reads[1]]
        out = next((stream[i] for i in range(reads[1], len(stream)) if points[i] == "client out"), None)
        if out is None or n + 1 >= len(streams):
            continue
        # The rest of the request's CPU, off the first token's path: the step that wrote the
        # upstream request, after the write; the answer's head (and role chunk) until the wait
        # for the first token; and from the first token's write to the next request (the
        # later token, the end, the access log, the next read of the connection).
        stretches["upstream out → its head in (CPU)"].append(_between(sent, head))
        stretches["head in → first token in (CPU)"].append(_between(head, token))
        stretches["first token in → out"].append(_between(token, out))
        stretches["first token out → next request in (CPU)"].append(_between(out, streams[n + 1][0]))
    return stretches


# The stretches of one paced request (_path_run), in their order; the ones marked CPU hold a
# wait for the upstream or the client (their wall time is not the gateway's).
STRETCHES = (
    "request in → upstream out",
    "upstream out → its head in (CPU)",
    "head in → first token in (CPU)",
    "first token in → out",
    "first token out → next request in (CPU)",
)


def _between(a: tuple[str, int, int], b: tuple[str, int, int]) -> tuple[float, float]:
    """(wall µs, thread CPU µs) from mark ``a`` to mark ``b``."""
    return (b[1] - a[1]) / 1e3, (b[2] - a[2]) / 1e3


def _paced_upstream(tmp: Path, name: str, model: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    """A fast upstream started (its process and port) and a gateway config for it that also
    serves ``model`` (a paced one)."""
    up_port = _port()
    upstream = subprocess.Popen([sys.executable, str(HERE / "fast_upstream.py"), "serve", str(up_port)])
    config = _config(tmp, name, f"http://127.0.0.1:{up_port}", [])
    config.write_text(config.read_text() + f'[[models]]\nname = "{model}"\nupstream = "fast"\n')
    return upstream, up_port, config


def first_token_path(tmp: Path) -> str:
    upstream, _, config = _paced_upstream(tmp, "path", PACED_MODEL)
    rows = []
    try:
        time.sleep(1.0)
        for model, label in ((PACED_MODEL, "paced (cold)"), (MODEL, "unpaced (warm)")):
            cpu = 0.0
            for stretch, pairs in _path_run(config, model).items():
                if pairs:
                    cpu += statistics.median(c for _, c in pairs)
                    rows.append([f"{stretch}, {label}", len(pairs), statistics.median(w for w, _ in pairs),
                                 statistics.median(c for _, c in pairs), min(c for _, c in pairs)])  # fmt: skip
            if model == PACED_MODEL:  # the five stretches are the whole request, one after another
                rows.append([f"the request's CPU (the medians' sum), {label}", "", "", cpu, ""])
    finally:
        upstream.terminate()
        upstream.wait()
    head = ["the first token's path, µs", "streams", "wall p50", "CPU p50", "CPU min"]
    return "one client, streams one after another; probes at the four points (bench/request_profile.py)\n" + table(
        head, rows
    )


BURST_N = int(os.environ.get("REQUEST_PROFILE_BURST_N", "80"))
BURST_MODEL = "fast-20-10"  # 20 tokens 10 ms apart: a round of ten lasts 0.2 s
BURST_CONC = 10
# The first token's stretches in a burst, on one clock (CLOCK_MONOTONIC: the load generator's
# perf_counter and the gateway's monotonic_ns read it alike), and the other streams' events
# the gateway handled inside each: a stretch that holds them is a queue.
BURST_STRETCHES = (
    ("client's write → request in", "sent", "request in"),
    ("request in → upstream out", "request in", "upstream out"),
    ("upstream out → first token in", "upstream out", "token in"),
    ("first token in → out", "token in", "client out"),
    ("first token out → client's read", "client out", "first"),
)


def _burst_run(config: Path, path: str, dialect: str) -> tuple[list[dict[str, int]], list[tuple[int, str, int]]]:
    """Rounds of ``BURST_CONC`` paced streams arriving together through a gateway served here:
    the load generator's per-stream marks (client port, request written, first token) and the
    gateway's, each tagged with the client's port."""
    import contextvars

    from llmbridge.gateway import _http, _server
    from llmbridge.gateway._server import GuardedHttpToolsProtocol

    marks: list[tuple[int, str, int]] = []  # (monotonic ns, point, client port)
    now = time.monotonic_ns
    port_of: contextvars.ContextVar[int] = contextvars.ContextVar("port_of", default=0)  # the request's task
    conns: dict[int, int] = {}  # upstream connection → client port (its reads are callbacks, not the task)

    def request_in(original: Any) -> Any:
        def probed(protocol: Any, data: bytes) -> Any:
            marks.append((now(), "request in", protocol.transport.get_extra_info("peername")[1]))
            return original(protocol, data)

        return probed

    def tagged(original: Any) -> Any:
        async def probed(cycle: Any, *args: Any) -> Any:
            port_of.set(cycle.scope["client"][1])
            return await original(cycle, *args)

        return probed

    def upstream_out(original: Any) -> Any:
        def probed(conn: Any, *args: Any) -> Any:
            conns[id(conn)] = port_of.get()
            marks.append((now(), "upstream out", port_of.get()))
            return original(conn, *args)

        return probed

    def upstream_in(original: Any) -> Any:
        def probed(conn: Any, data: bytes) -> Any:
            marks.append((now(), "upstream in", conns.get(id(conn), 0)))
            return original(conn, data)

        return probed

    def client_out(original: Any) -> Any:
        def probed(cycle: Any, message: Any) -> Any:
            if message["type"] == "http.response.body":
                marks.append((now(), "client out", cycle.scope["client"][1]))
            return original(cycle, message)

        return probed

    probes: list[Probe] = [
        (GuardedHttpToolsProtocol, "data_received", request_in),
        (_server.GuardedCycle, "run_asgi", tagged),
        (_http._Connection, "send", upstream_out),
        (_http._Connection, "data_received", upstream_in),
        (_server.GuardedCycle, "send", client_out),
    ]
    streams: list[dict[str, int]] = []

    def drive(port: int) -> None:
        url = f"http://127.0.0.1:{port}{path}"
        argv = [sys.executable, str(HERE / "fast_upstream.py"), "load", url, dialect, BURST_MODEL, str(BURST_CONC)]
        subprocess.run([*argv, "20", "60"], capture_output=True, check=False)  # warm
        marks.clear()
        data = _load_marks([*argv, str(BURST_N), "60"])
        streams.extend({"port": p, "sent": round(a * 1e9), "first": round(b * 1e9)} for p, a, b in data)

    _serve_here(config, probes, drive)
    return streams, marks


def _load_marks(argv: list[str]) -> list[tuple[int, float, float]]:
    with tempfile.TemporaryFile() as out:
        subprocess.run(argv, stdout=out, env={**os.environ, "LLMBRIDGE_BENCH_KEY": KEY}, check=False)
        out.seek(0)
        return [tuple(m) for m in json.loads(out.read())["marks"]]


def _burst_stretches(
    streams: list[dict[str, int]], marks: list[tuple[int, str, int]]
) -> dict[str, list[tuple[float, float]]]:
    """Per stretch, a (µs, other streams' events inside) pair per stream."""
    by_port: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for t, point, port in marks:
        by_port[port].append((t, point))
    out: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in BURST_STRETCHES}
    for stream in streams:
        own = [(t, p) for t, p in by_port[stream["port"]] if stream["sent"] <= t <= stream["first"]]
        at: dict[str, int] = {"sent": stream["sent"], "first": stream["first"]}
        for t, point in own:
            if point == "upstream in" and "upstream out" in at and "head in" not in at:
                at["head in"] = t  # the head and role chunk; the token is the next read
            elif point == "upstream in" and "head in" in at and "token in" not in at:
                at["token in"] = t
            elif point == "client out" and "token in" in at and "client out" not in at:
                at["client out"] = t
            elif point in ("request in", "upstream out"):
                at.setdefault(point, t)
        if len(at) < 7:  # (a stream whose token came with its head: not a paced one)
            continue
        for name, a, b in BURST_STRETCHES:
            lo, hi = at[a], at[b]
            inside = sum(1 for t, _, p in marks if lo < t < hi and p != stream["port"]) if hi > lo else 0
            out[name].append(((hi - lo) / 1e3, inside))
    return out


def burst_path(tmp: Path) -> str:
    upstream, up_port, config = _paced_upstream(tmp, "burst", BURST_MODEL)
    rows = []
    try:
        time.sleep(1.0)
        argv = [
            sys.executable,
            str(HERE / "fast_upstream.py"),
            "load",
            f"http://127.0.0.1:{up_port}/v1/chat/completions",
        ]
        argv += ["openai-chat", BURST_MODEL, str(BURST_CONC)]
        subprocess.run([*argv, "20", "60"], capture_output=True, check=False)
        direct = statistics.median(b - a for _, a, b in _load_marks([*argv, str(BURST_N), "60"])) * 1e6
        rows.append(["direct: first token", BURST_N, direct, "", ""])
        for what, (path, dialect) in PATHS.items():
            streams, marks = _burst_run(config, path, dialect)
            stretches = _burst_stretches(streams, marks)
            total = statistics.median((s["first"] - s["sent"]) / 1e3 for s in streams)
            rows.append([f"{what}: first token", len(streams), total, total - direct, ""])
            for name, pairs in stretches.items():
                if pairs:
                    rows.append([f"  {name}", len(pairs), statistics.median(us for us, _ in pairs), "",
                                 statistics.mean(n for _, n in pairs)])  # fmt: skip
    finally:
        upstream.terminate()
        upstream.wait()
    head = ["a burst's first token, µs", "streams", "p50", "added p50", "others' events inside (mean)"]
    return (
        f"rounds of {BURST_CONC} paced streams ({BURST_MODEL}) arriving together, {BURST_N} streams; "
        "one clock for the load generator and the gateway (bench/request_profile.py)\n" + table(head, rows)
    )


def run() -> str:
    tmp = Path(tempfile.mkdtemp(prefix="reqprofile-"))
    parts = []
    if "path" in PARTS:
        parts.append(first_token_path(tmp))
    if "burst" in PARTS:
        parts.append(burst_path(tmp))
    if "cpu" in PARTS:
        parts.append(cpu_per_request(tmp))
    if "callgrind" in PARTS:
        parts.append(instructions(tmp))
    if "profile" in PARTS:
        parts.append(profile_steps(tmp))
    return "\n\n".join(parts)


if __name__ == "__main__":
    print(run())
