"""The gateway against the direct path and LiteLLM's proxy, in one run, one load generator.

Processes (each its own, so /proc tells each one's CPU and memory apart):

- the fast upstream (``bench/fast_upstream.py serve``): OpenAI chat chunks, N tokens, unpaced
  or paced per token, chosen by model name (``fast-200-0``, ``fast-200-10``);
- ``llmbridge serve --config <tmp toml>`` (one uvicorn worker), upstream ``openai-chat``;
- ``litellm --config <tmp yaml> --num_workers 1`` (LiteLLM's proxy), model ``openai/<name>``;
- the load generator (``bench/fast_upstream.py load``), one per measurement;
- two floor relays (``bench/floor_relay.py``) that check nothing: uvloop protocols alone, and
  uvicorn with a dozen-line ASGI app. Their figures bound what any Python gateway can reach
  against direct (issue 23's ratios).

Targets: direct (client -> upstream), llmbridge and LiteLLM at ``/v1/chat/completions`` (same
dialect: llmbridge relays the bytes) and at ``/v1/messages`` (translated to Anthropic).
Unpaced and paced runs at 1, 10, 100 and 1,000 concurrent streams, then 1,000 open slow
streams for memory. Nothing is asserted: issue 11's targets are printed as met or not.
Then 2-token streams, the cost of starting a request (issue 23).
``python -m bench gateway``; env: GATEWAY_BENCH_TOKENS (200), GATEWAY_BENCH_LEVELS (1,10,100,1000),
GATEWAY_BENCH_SHORT (2000; 0 = skip), GATEWAY_BENCH_PEERS (0 = skip LiteLLM), GATEWAY_BENCH_LITELLM
(the ``litellm`` executable, default: beside this Python), GATEWAY_BENCH_FLOOR (0 = skip the floor relays).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .common import table

HERE = Path(__file__).resolve().parent
TOKENS = int(os.environ.get("GATEWAY_BENCH_TOKENS", "200"))
LEVELS = [int(x) for x in os.environ.get("GATEWAY_BENCH_LEVELS", "1,10,100,1000").split(",")]
PEERS = os.environ.get("GATEWAY_BENCH_PEERS", "1") != "0"
OPEN = os.environ.get("GATEWAY_BENCH_OPEN", "1") != "0"  # 0 = skip the 1,000 open streams run
PACED_1000 = os.environ.get("GATEWAY_BENCH_PACED_1000", "1") != "0"
FLOOR = os.environ.get("GATEWAY_BENCH_FLOOR", "1") != "0"  # 0 = skip the two floor relays (bench/floor_relay.py)
WORKERS = int(os.environ.get("GATEWAY_BENCH_WORKERS", "1"))  # llmbridge serve --workers N
SHORT = int(os.environ.get("GATEWAY_BENCH_SHORT", "2000"))  # 2-token streams per target (issue 23); 0 = skip
SHORT_MODEL = "fast-2-0"
PACE_MS = 10  # per token in the paced runs
OPEN_TOKENS, OPEN_PACE_MS = 10, 500  # 1,000 open streams of 5 s each, for memory per open stream
FLOOR_BARE, FLOOR_UVICORN = "floor: bare relay", "floor: uvicorn relay"  # (bench/floor_relay.py)
UPSTREAM_EVENTS = TOKENS + 4  # role chunk, tokens, finish chunk, usage chunk, [DONE]
BIN = Path(sys.executable).parent
# LiteLLM's proxy: the bench environment's own, or one installed elsewhere (its pins clash with ours)
LITELLM = os.environ.get("GATEWAY_BENCH_LITELLM") or str(BIN / "litellm")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_tree(pid: int) -> list[int]:
    pids, i = [pid], 0
    while i < len(pids):
        for task in Path(f"/proc/{pids[i]}/task").glob("*/children"):
            pids += [int(c) for c in task.read_text().split()]
        i += 1
    return pids


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    log: Path
    argv: list[str]
    ready: str
    env: dict[str, str]

    def _pids(self) -> list[int]:
        return _proc_tree(self.proc.pid)

    def cpu(self) -> float:
        """CPU seconds (user + system) of the process and its children."""
        total = 0
        for pid in self._pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def memory(self, key: str = "VmRSS") -> int:
        """Bytes of ``key`` (VmRSS, VmHWM) summed over the process tree."""
        total = 0
        for pid in self._pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith(key + ":"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                continue
        return total

    def restart(self, tmp: Path) -> None:
        """A fresh process on the same port (so an RSS baseline is not an earlier run's heap)."""
        self.stop()
        self.proc = _start(self.name, self.argv, self.ready, tmp, self.env).proc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _start(name: str, argv: list[str], ready: str, tmp: Path, env: dict | None = None, wait: float = 240) -> Server:
    """Start a server and wait until ``ready`` (a URL) answers; raise with its log's tail otherwise."""
    import urllib.request

    log = tmp / f"{name}.log"
    proc = subprocess.Popen(
        argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=tmp, env={**os.environ, **(env or {})}
    )
    server = Server(name, proc, log, argv, ready, env or {})
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(ready, timeout=2).read()
            return server
        except OSError:
            time.sleep(0.25)
    server.stop()
    tail = log.read_text(errors="replace").strip().splitlines()[-8:]
    raise RuntimeError(f"{name} did not start within {wait:.0f} s: " + " | ".join(tail))


# --------------------------------------------------------------------------- one measurement


@dataclass
class Run:
    target: str
    concurrency: int
    expected: int  # tokens a whole stream carries
    streams: int
    errors: int
    wall: float
    ttft: list[float]
    total: list[float]
    tokens: int
    bad_token_counts: int
    server_cpu: float  # seconds over the run, the server under test
    upstream_cpu: float
    loadgen_cpu: float
    idle_rss: int
    peak_rss: int
    peak_open: int
    cut: int
    error_samples: list[str]

    @property
    def streams_per_s(self) -> float:
        """Whole streams' worth of tokens per second: the tokens of cut streams count too, so a
        saturated server whose streams all finish after the cap does not read as 0."""
        return self.tokens / self.expected / self.wall if self.wall else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall if self.wall else 0.0

    def pct(self, q: float, xs: list[float] | None = None) -> float:
        xs = sorted(self.ttft if xs is None else xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _quiesce(servers: list[Server], limit: float = 20.0) -> None:
    """Wait (up to ``limit`` s) until the servers use under 5% CPU: an earlier run's leftovers
    (streams whose clients are gone) must not bill the next one."""
    stop_at = time.monotonic() + limit
    while time.monotonic() < stop_at:
        before = sum(s.cpu() for s in servers)
        time.sleep(0.5)
        if sum(s.cpu() for s in servers) - before < 0.025:
            return


def measure(target: Target, model: str, tokens: int, concurrency: int, requests: int, deadline: float) -> Run:
    server, upstream = target.server, target.upstream
    _quiesce([server, upstream])
    argv = [sys.executable, str(HERE / "fast_upstream.py"), "load", target.url, target.dialect, model]
    argv += [str(concurrency), str(requests), str(deadline)]
    idle_rss = server.memory()
    cpu0, up0 = server.cpu(), upstream.cpu()
    peak = idle_rss
    with tempfile.TemporaryFile() as out:
        gen = subprocess.Popen(argv, stdout=out)
        stop_at = time.monotonic() + deadline + 240
        while gen.poll() is None and time.monotonic() < stop_at:
            peak = max(peak, server.memory())
            time.sleep(0.05)
        if gen.poll() is None:
            gen.kill()
            gen.wait()
        cpu, up = server.cpu() - cpu0, upstream.cpu() - up0
        out.seek(0)
        text = out.read()
    try:
        data = json.loads(text)
    except ValueError:
        data = {"results": [], "errors": requests, "error_samples": ["load generator failed"], "wall": 0, "cpu": 0}
    results = data["results"]
    partial = data.get("partial", [])
    return Run(
        target=target.label,
        concurrency=concurrency,
        expected=tokens,
        streams=len(results),
        errors=data["errors"],
        wall=data["wall"],
        ttft=[r[0] for r in results] + [f for f, _ in partial if f is not None],
        total=[r[1] for r in results],
        tokens=sum(r[2] for r in results) + sum(n for _, n in partial),
        bad_token_counts=sum(r[2] != tokens for r in results),
        server_cpu=cpu if server is not upstream else up,
        upstream_cpu=up,
        loadgen_cpu=data["cpu"],
        idle_rss=idle_rss,
        peak_rss=peak,
        peak_open=data.get("peak_open", 0),
        cut=data.get("cut", 0),
        error_samples=data["error_samples"],
    )


@dataclass
class Target:
    label: str
    url: str
    dialect: str
    server: Server
    upstream: Server


# --------------------------------------------------------------------------- servers


def _gateway_config(tmp: Path, upstream_url: str, models: list[str], key: str) -> Path:
    lines = ["[gateway]", f'api_keys = ["{key}"]', "", "[upstreams.fast]", 'format = "openai-chat"']
    lines += [f'base_url = "{upstream_url}/v1"', 'api_key = "x"', ""]
    for m in models:
        lines += ["[[models]]", f'name = "{m}"', 'upstream = "fast"', ""]
    path = tmp / "gateway.toml"
    path.write_text("\n".join(lines))
    return path


def _litellm_config(tmp: Path, upstream_url: str, models: list[str], key: str) -> Path:
    lines = ["model_list:"]
    for m in models:
        lines += [
            f"  - model_name: {m}",
            f'    litellm_params: {{model: "openai/{m}", api_base: "{upstream_url}/v1", api_key: x}}',
        ]
    lines += [
        "litellm_settings:",
        "  telemetry: false",
        "  drop_params: true",
        # /v1/messages in front of an openai/ model goes to the Responses API by default (our
        # upstream speaks chat completions, as a "fast local upstream" does): use chat.
        "  use_chat_completions_url_for_anthropic_messages: true",
        "general_settings:",
        f"  master_key: {key}",  # 1.108 refuses to start without one
    ]
    path = tmp / "litellm.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- the run


def _requests(concurrency: int, paced: bool) -> int:
    # The rows issue 23 reads at 1 and 10 streams are medians of a few milliseconds each: enough
    # of them that a run's verdict is not one noisy moment's (20 unpaced streams alone lasted
    # 30 ms, and the same tree read 1.05-1.61 ms per stream from one run to the next).
    if paced:
        # (10 streams arrive together: eight rounds of them, 2 s each, inside the 20 s deadline)
        return {1: 8, 10: 80}.get(concurrency, 2 * concurrency if concurrency <= 100 else concurrency)
    return {1: 200}.get(concurrency, max(20, 2 * concurrency) if concurrency <= 100 else concurrency)


def _ms(x: float) -> float:
    return x * 1000


def _rows(runs: list[Run], direct: dict[int, Run]) -> list[list[object]]:
    rows = []
    for r in runs:
        d = direct.get(r.concurrency)
        done = r.tokens / r.expected  # whole streams' worth (cut streams count by their tokens)
        events = done * UPSTREAM_EVENTS
        rows.append(
            [
                r.target,
                r.concurrency,
                f"{r.streams}/{r.errors}/{r.cut}" + (f" ({r.bad_token_counts} short)" if r.bad_token_counts else ""),
                r.streams_per_s,
                r.tokens_per_s,
                _ms(r.pct(0.5)),
                _ms(r.pct(0.99)),
                _ms(r.pct(0.5) - d.pct(0.5)) if d and d is not r else "",
                _ms(r.pct(0.99) - d.pct(0.99)) if d and d is not r else "",
                r.tokens_per_s / d.tokens_per_s if d and d.tokens_per_s else "",
                _ms(r.server_cpu / done) if done else "",
                _ms(r.server_cpu) / events * 1000 if events else "",
            ]
        )
    return rows


HEADERS = [
    "target",
    "conc",
    "ok/err/cut",
    "streams/s",
    "tokens/s",
    "TTFT p50 ms",
    "p99 ms",
    "+p50 ms",
    "+p99 ms",
    "tok/s vs direct",
    "CPU ms/stream",
    "CPU ms/1k ev",
]


def _series(targets: list[Target], paced: bool, tmp: Path) -> list[Run]:
    pace = PACE_MS if paced else 0
    model = f"fast-{TOKENS}-{pace}"
    deadline = 20.0 if paced else 10.0  # no new stream after it; open ones cut at twice it
    runs = []
    for level in LEVELS:
        if paced and level > 100 and not PACED_1000:
            continue  # 1,000 paced streams: GATEWAY_BENCH_PACED_1000=1 (100,000 events/s: the upstream saturates)
        for t in targets:
            if t.server.proc.poll() is not None:
                continue
            run = measure(t, model, TOKENS, level, _requests(level, paced), deadline)
            runs.append(run)
            if run.cut and t.server is not t.upstream:
                # LiteLLM goes on serving streams whose clients were cut (minutes of backlog at
                # 1,000): start afresh rather than bill the next run for it.
                log(f"restarting {t.server.name} after {run.cut} cut streams")
                t.server.restart(tmp)
                measure(t, f"fast-{TOKENS}-0", TOKENS, 2, 6, 60)
            log(
                f"{'paced' if paced else 'unpaced'} {t.label} x{level}: {run.streams} ok, {run.errors} err, "
                f"{run.streams_per_s:.1f} streams/s, p50 TTFT {_ms(run.pct(0.5)):.2f} ms"
            )
    return runs


def log(s: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr, flush=True)


def run() -> str:
    tmp = Path(tempfile.mkdtemp(prefix="gwbench-"))
    key = "sk-bench-5f0c1e9a7b3d42c88e61f0a4d2b79c35"  # = fast_upstream.KEY
    models = [f"fast-{TOKENS}-0", f"fast-{TOKENS}-{PACE_MS}", f"fast-{OPEN_TOKENS}-{OPEN_PACE_MS}", SHORT_MODEL]
    up_port, gw_port, ll_port = _port(), _port(), _port()
    up_url = f"http://127.0.0.1:{up_port}"
    quiet = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "PYTHONUNBUFFERED": "1"}
    servers: list[Server] = []
    notes = []
    load_before = os.getloadavg()
    try:
        upstream = _start(
            "upstream",
            [sys.executable, str(HERE / "fast_upstream.py"), "serve", str(up_port)],
            up_url + "/v1/models",
            tmp,
        )
        servers.append(upstream)
        gateway = _start(
            "llmbridge",
            [
                str(BIN / "llmbridge"),
                "serve",
                "--config",
                str(_gateway_config(tmp, up_url, models, key)),
                "--port",
                str(gw_port),
                *(["--workers", str(WORKERS)] if WORKERS > 1 else []),
            ],
            f"http://127.0.0.1:{gw_port}/healthz",
            tmp,
        )
        servers.append(gateway)
        gw = f"http://127.0.0.1:{gw_port}"
        targets = [
            Target("direct", up_url + "/v1/chat/completions", "openai-chat", upstream, upstream),
            Target("llmbridge chat (relay)", gw + "/v1/chat/completions", "openai-chat", gateway, upstream),
            Target("llmbridge messages (transl.)", gw + "/v1/messages", "anthropic-messages", gateway, upstream),
        ]
        for mode, label in (("bare", FLOOR_BARE), ("uvicorn", FLOOR_UVICORN)) if FLOOR else ():
            port = _port()
            relay = _start(
                f"floor-{mode}",
                [sys.executable, str(HERE / "floor_relay.py"), mode, str(port), str(up_port)],
                f"http://127.0.0.1:{port}/v1/models",
                tmp,
            )
            servers.append(relay)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            targets.append(Target(label, url, "openai-chat", relay, upstream))
        litellm_started = time.monotonic()
        if PEERS:
            try:
                litellm = _start(
                    "litellm",
                    [
                        LITELLM,
                        "--config",
                        str(_litellm_config(tmp, up_url, models, key)),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(ll_port),
                        "--num_workers",
                        "1",
                    ],
                    f"http://127.0.0.1:{ll_port}/health/liveliness",
                    tmp,
                    env=quiet,
                )
                servers.append(litellm)
                ll = f"http://127.0.0.1:{ll_port}"
                targets += [
                    Target("litellm chat", ll + "/v1/chat/completions", "openai-chat", litellm, upstream),
                    Target("litellm messages (transl.)", ll + "/v1/messages", "anthropic-messages", litellm, upstream),
                ]
                notes.append(f"LiteLLM proxy started in {time.monotonic() - litellm_started:.0f} s")
            except (RuntimeError, OSError) as exc:
                notes.append(f"LiteLLM proxy did not run: {exc}")
        for t in targets:  # warm up: imports, pools, caches
            warm = measure(t, models[0], TOKENS, 2, 6, 60)
            if warm.errors or warm.bad_token_counts:
                notes.append(
                    f"warm-up {t.label}: {warm.errors} errors, {warm.bad_token_counts} short; {warm.error_samples}"
                )
        idle = {s.name: s.memory() for s in servers}
        # Memory first, on servers that have served only the warm-up; llmbridge restarts for each
        # endpoint (a second of start-up); LiteLLM (20-60 s to start) serves chat, then messages.
        open_runs = []
        for t in targets if OPEN else []:
            if t.server.proc.poll() is not None:
                continue
            if t.server is gateway and open_runs and open_runs[-1].target.startswith("llmbridge"):
                gateway.restart(tmp)
                measure(t, models[0], TOKENS, 2, 6, 60)
            open_runs.append(measure(t, models[2], OPEN_TOKENS, 1000, 1000, 30))
            log(f"open {t.label}: peak open {open_runs[-1].peak_open}")
        for server in servers[1:]:  # one still serving cut streams: start the timed runs afresh
            if any(r.cut for t, r in zip(targets, open_runs, strict=False) if t.server is server):
                server.restart(tmp)
                log(f"restarted {server.name} after the open streams")
                for t in targets:
                    if t.server is server:
                        measure(t, models[0], TOKENS, 2, 6, 60)  # warm up again
        # Issue 23: the cost of starting a request, with 2-token streams (almost all of it per request).
        short = []
        for t in targets if SHORT else []:
            if t.server.proc.poll() is None:
                n = SHORT if not t.label.startswith("litellm") else 40  # (LiteLLM: a few streams a second)
                short.append(measure(t, SHORT_MODEL, 2, 10, n, 30))
                log(f"short {t.label}: {short[-1].streams_per_s:.0f} streams/s")
        unpaced = _series(targets, False, tmp)
        paced = _series(targets, True, tmp)
        hwm = {s.name: s.memory("VmHWM") for s in servers}
    finally:
        for s in reversed(servers):
            s.stop()
    for r in open_runs + unpaced + paced:
        if r.errors:
            notes.append(f"errors, {r.target} x{r.concurrency}: {r.error_samples}")
    return _report(unpaced, paced, open_runs, idle, hwm, notes, load_before, os.getloadavg(), short)


def _report(unpaced, paced, open_runs, idle, hwm, notes, load_before, load_after, short=()) -> str:
    out = [
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; {os.cpu_count()} cores; {TOKENS} tokens a stream "
        f"({UPSTREAM_EVENTS} upstream events). TTFT = first content token at the client; "
        "+p50/+p99 = over direct at the same concurrency. CPU = the server under test "
        "(direct: the upstream itself).",
    ]
    out += notes
    by = {}
    for title, runs in (
        (f"unpaced ({TOKENS} tokens as fast as possible)", unpaced),
        (f"paced ({PACE_MS} ms per token)", paced),
    ):
        direct = {r.concurrency: r for r in runs if r.target == "direct"}
        out += ["", title, table(HEADERS, _rows(runs, direct))]
        by[title] = {(r.target, r.concurrency): r for r in runs}
    if short:
        d = next((r for r in short if r.target == "direct"), None)
        rows = [
            [
                r.target,
                f"{r.streams}/{r.errors}/{r.cut}",
                r.streams_per_s,
                r.streams_per_s / d.streams_per_s if d and d.streams_per_s else "",
                _ms(r.pct(0.5)),
                _ms(r.pct(0.5) - d.pct(0.5)) if d and d is not r else "",
                r.server_cpu * 1e6 / max(1, r.streams),
            ]
            for r in short
        ]
        head = ["target", "ok/err/cut", "streams/s", "vs direct", "TTFT p50 ms", "+p50 ms", "CPU µs/stream"]
        title = "short streams (2 tokens, 10 concurrent, unpaced): the cost of starting a request"
        out += ["", title, table(head, rows)]
        by["short"] = {(r.target, r.concurrency): r for r in short}
    # memory per open stream
    rows = []
    for r in open_runs:
        rows.append(
            [
                r.target,
                r.peak_open,
                f"{r.streams}/{r.errors}/{r.cut}",
                (r.peak_rss - r.idle_rss) / 1e6,
                (r.peak_rss - r.idle_rss) / max(1, r.peak_open) / 1e3,
                _ms(r.server_cpu / r.wall / max(1, r.peak_open)) if r.wall else "",
                _ms(r.pct(0.5)),
                _ms(r.pct(0.5, r.total)),
            ]
        )
    out += [
        "",
        f"1,000 open streams ({OPEN_TOKENS} tokens, {OPEN_PACE_MS} ms per token)",
        table(
            [
                "target",
                "peak open",
                "ok/err/cut",
                "RSS added MB",
                "KB per open stream",
                "CPU ms/s per open stream",
                "TTFT p50 ms",
                "stream p50 ms",
            ],
            rows,
        ),
    ]
    out += [
        "",
        "RSS idle / peak (VmHWM) MB: "
        + ", ".join(f"{name} {idle.get(name, 0) / 1e6:.0f} / {hwm.get(name, 0) / 1e6:.0f}" for name in hwm),
    ]
    out += ["", "targets (issue 11)", *_targets({k: v for k, v in by.items() if k != "short"})]
    out += ["", "targets (issue 23)", *_targets_23(by)]
    return "\n".join(out)


def _targets_23(by: dict) -> list[str]:
    """Issue 23's targets (and moonshots), from this run's figures: met or not, never asserted."""

    def verdict(value: float, target: float, moonshot: float, lower_is_better: bool = True) -> str:
        ok = (lambda v, t: v <= t) if lower_is_better else (lambda v, t: v >= t)
        return "moonshot met" if ok(value, moonshot) else "met" if ok(value, target) else "NOT met"

    lines = []
    short = by.get("short", {})
    unpaced = next((v for k, v in by.items() if k.startswith("unpaced")), {})
    paced = next((v for k, v in by.items() if k.startswith("paced")), {})
    direct = short.get(("direct", 10))
    floors = [label for label in (FLOOR_BARE, FLOOR_UVICORN) if (label, 10) in short]
    for label in ("llmbridge chat (relay)", "llmbridge messages (transl.)", *floors):
        floor = label in floors
        if floors and label == floors[0]:
            lines.append("the floor (bench/floor_relay.py: relays that check nothing, so no gateway does better):")

        def say(text: str, target: str, met: str, floor: bool = floor) -> None:
            # (the floors' figures are bounds, not candidates: no verdict for them)
            lines.append(f"  {text}" if floor else f"{text} ({target}: {met})")

        r = short.get((label, 10))
        if r and r.streams:
            us = r.server_cpu * 1e6 / r.streams
            say(f"gateway CPU per request (2-token stream), {label}: {us:.0f} µs", "target <= 250, moonshot <= 100",
                verdict(us, 250, 100))  # fmt: skip
            if direct and direct.streams_per_s:
                x = r.streams_per_s / direct.streams_per_s
                say(f"short streams/s vs direct, {label}: {x:.2f}x", "target >= 0.6, moonshot >= 0.9",
                    verdict(x, 0.6, 0.9, False))  # fmt: skip
        for conc, target, moonshot in ((10, 1.0, 0.3), (100, 10.0, 3.0)):
            r, d = paced.get((label, conc)), paced.get(("direct", conc))
            if r and d:
                added = _ms(r.pct(0.5) - d.pct(0.5))
                say(f"added TTFT p50, {conc} paced streams, {label}: {added:.2f} ms",
                    f"target <= {target:g}, moonshot <= {moonshot:g}", verdict(added, target, moonshot))  # fmt: skip
        r, d = unpaced.get((label, 1)), unpaced.get(("direct", 1))
        if r and d and d.streams_per_s:
            x = r.streams_per_s / d.streams_per_s
            say(f"one unpaced {TOKENS}-token stream alone, streams/s vs direct, {label}: {x:.2f}x",
                "target >= 0.7, moonshot >= 0.9", verdict(x, 0.7, 0.9, False))  # fmt: skip
    lines.append("with team features on: python -m bench request (CPU and instructions per request, on - off)")
    return lines


def _targets(by: dict) -> list[str]:
    """Issue 11's targets (and moonshots), from this run's figures: met or not, never asserted."""
    lines = []

    def verdict(value: float, target: float, moonshot: float, lower_is_better: bool = True) -> str:
        ok = (lambda v, t: v <= t) if lower_is_better else (lambda v, t: v >= t)
        return "moonshot met" if ok(value, moonshot) else "met" if ok(value, target) else "NOT met"

    for title, runs in by.items():
        paced = title.startswith("paced")
        for label, target, moonshot in (
            ("llmbridge chat (relay)", 20.0, 10.0),
            ("llmbridge messages (transl.)", 40.0, 20.0),
        ):
            for conc in LEVELS:
                r = runs.get((label, conc))
                if r and r.streams and not paced:
                    us = r.server_cpu * 1e6 / max(1, r.tokens / r.expected * UPSTREAM_EVENTS)
                    lines.append(
                        f"{title}: CPU per event at {conc}, {label}: {us:.1f} µs "
                        f"(target <= {target:g}, moonshot <= {moonshot:g}: {verdict(us, target, moonshot)})"
                    )
        d10 = runs.get(("direct", 10))
        for label in ("llmbridge chat (relay)", "llmbridge messages (transl.)"):
            r = runs.get((label, 10))
            if r and d10 and paced:
                added = _ms(r.pct(0.5) - d10.pct(0.5))
                lines.append(
                    f"{title}: added TTFT p50 at 10, {label}: {added:.2f} ms "
                    f"(target <= 2, moonshot <= 0.5: {verdict(added, 2.0, 0.5)})"
                )
            for conc in (100, 1000):
                r, d = runs.get((label, conc)), runs.get(("direct", conc))
                if r and d and d.tokens_per_s and paced:
                    x = r.tokens_per_s / d.tokens_per_s
                    lines.append(
                        f"{title}: tokens/s at {conc} vs direct, {label}: {x:.2f}x "
                        f"(target >= 0.90, moonshot >= 0.97: {verdict(x, 0.90, 0.97, False)})"
                    )
        for ours, theirs in (
            ("llmbridge chat (relay)", "litellm chat"),
            ("llmbridge messages (transl.)", "litellm messages (transl.)"),
        ):
            a, b = runs.get((ours, 100)), runs.get((theirs, 100))
            if a and b and b.streams_per_s:
                lines.append(f"{title}: streams/s at 100, {ours} vs {theirs}: {a.streams_per_s / b.streams_per_s:.1f}x")
    return lines


if __name__ == "__main__":
    print(run())
