"""Where the gateway's CPU goes per event: cProfile of one gateway process, grouped by component.

Starts the fast upstream (``bench/fast_upstream.py serve``, a separate process), serves the
gateway *in this process* under cProfile (thread CPU time as the clock, so other jobs on the
machine do not bill it), drives it with the load generator (another process), and prints the
profile's own time per upstream event, grouped by where the code lives.  Once for the relay
(chat client, chat upstream), once for translation (Messages client, chat upstream).

Profiling inflates every figure several times over; the shares are the point.  Figures
without the profiler are ``python -m bench gateway``'s.
``python -m bench profile``; env PROFILE_STREAMS (300), PROFILE_TOKENS (200).
"""

from __future__ import annotations

import collections
import cProfile
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STREAMS = int(os.environ.get("PROFILE_STREAMS", "300"))
TOKENS = int(os.environ.get("PROFILE_TOKENS", "200"))
EXCHANGE = "exchange (streaming, relay, timers, sources)"
SERVER = "server (uvicorn, starlette, our ASGI side)"
GROUPS = (  # (substring of the code's path, group), first match wins
    ("llmbridge/gateway/_http", "upstream HTTP client"),
    ("httpx", "upstream HTTP client"),
    ("httpcore", "upstream HTTP client"),
    ("anyio", "upstream HTTP client"),
    ("llmbridge/gateway/_streaming", EXCHANGE),
    ("llmbridge/gateway/_relay", EXCHANGE),
    ("llmbridge/gateway/_timers", EXCHANGE),
    ("llmbridge/gateway/_sources", EXCHANGE),
    ("llmbridge/gateway/_extensions", "client dialect encoder"),  # (the plain wrapper around it)
    ("llmbridge/sse", "upstream dialect decoder"),
    ("_decoder", "upstream dialect decoder"),
    ("decoder.py", "upstream dialect decoder"),
    ("_encoder", "client dialect encoder"),
    ("encoder.py", "client dialect encoder"),
    ("llmbridge/gateway/_server", SERVER),
    ("llmbridge/gateway/_response", SERVER),
    ("llmbridge/gateway/_hotpath", SERVER),
    ("llmbridge/", "per request (app, request codecs, hub)"),
    ("uvicorn", SERVER),
    ("starlette", SERVER),
    ("asyncio/runners", "event loop itself"),
    ("asyncio", "asyncio (tasks, futures)"),
    ("~", "builtins called from Python"),
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group(path: str) -> str:
    return next((name for key, name in GROUPS if key in path), "other")


def _profile(config: Path, path: str, dialect: str) -> dict[str, float]:
    import uvicorn

    from llmbridge.gateway import create_app, load

    port = _port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(load(config)), host="127.0.0.1", port=port, log_level="warning", loop="uvloop")
    )
    model = f"fast-{TOKENS}-0"
    streams = [0]

    def drive() -> None:
        while not server.started:
            time.sleep(0.05)
        argv = [sys.executable, str(HERE / "fast_upstream.py"), "load", f"http://127.0.0.1:{port}{path}", dialect]
        done = subprocess.run([*argv, model, "10", str(STREAMS), "60"], capture_output=True, text=True)
        import json

        streams[0] = len(json.loads(done.stdout)["results"])
        server.should_exit = True

    profile = cProfile.Profile(time.thread_time)
    threading.Thread(target=drive, daemon=True).start()
    profile.enable()
    server.run()
    profile.disable()
    events = max(1, streams[0] * (TOKENS + 4))
    groups: collections.Counter[str] = collections.Counter()
    for (file, _, _), (_, _, own, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        groups[_group(file)] += own
    return {name: seconds * 1e6 / events for name, seconds in groups.items()}


def run() -> str:
    from .common import table

    tmp = Path(tempfile.mkdtemp(prefix="gwprofile-"))
    up_port = _port()
    upstream = subprocess.Popen([sys.executable, str(HERE / "fast_upstream.py"), "serve", str(up_port)])
    config = tmp / "gateway.toml"
    config.write_text(
        f'[upstreams.fast]\nformat = "openai-chat"\nbase_url = "http://127.0.0.1:{up_port}/v1"\n\n'
        f'[[models]]\nname = "fast-{TOKENS}-0"\nupstream = "fast"\n'
    )
    try:
        time.sleep(1.0)
        relay = _profile(config, "/v1/chat/completions", "openai-chat")
        translate = _profile(config, "/v1/messages", "anthropic-messages")
    finally:
        upstream.terminate()
        upstream.wait()
    names = sorted(set(relay) | set(translate), key=lambda n: -(relay.get(n, 0) + translate.get(n, 0)))
    names = [n for n in names if n != "event loop itself"]
    rows = [[n, relay.get(n, 0.0), translate.get(n, 0.0)] for n in names]
    rows.append(["Python total", sum(relay.get(n, 0) for n in names), sum(translate.get(n, 0) for n in names)])
    head = ["µs per upstream event, under cProfile", "relay chat->chat", "translate chat->Messages"]
    return f"{STREAMS} streams of {TOKENS} tokens, 10 concurrent\n" + table(head, rows)


if __name__ == "__main__":
    print(run())
