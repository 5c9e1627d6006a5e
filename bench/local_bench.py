"""Local model: LocalUpstream.stream against llama-cpp-python called directly, same run, same model.

    .venv/bin/python bench/local_bench.py [--tokens 128] [--rounds 3] [--threads N]

Both paths use one ``Llama`` object, the same prompt tokens and greedy decoding, so they
generate the same tokens.  The KV cache is reset before every run so each pays the full
prompt evaluation.  Runs alternate (direct, local, direct, local ...) so machine load hits
both alike; the table shows medians.  TTFT is request to first text; decode tokens/s
counts the tokens after the first over the time after the first; CPU ms/token is the
process's CPU time (all threads, prompt evaluation included) per generated token, which
machine load disturbs far less than wall-clock rates.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from llmbridge import hub
from llmbridge.local import LocalUpstream
from llmbridge.local.upstream import DEFAULT_REPEAT_PENALTY

PROMPT = "Write a long story about a dragon who learns to bake bread."


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def direct(llm, tokens: list[int], max_tokens: int) -> tuple[float, float, int, float]:
    llm.reset()
    cpu = time.process_time()
    start = time.perf_counter()
    first = last = 0.0
    n = 0
    for chunk in llm.create_completion(
        tokens, max_tokens=max_tokens, temperature=0.0, repeat_penalty=DEFAULT_REPEAT_PENALTY, stream=True
    ):
        if chunk["choices"][0]["text"]:
            last = time.perf_counter()
            first = first or last
        n += 1
    n -= 1  # the last chunk carries the finish reason, no token
    return first - start, last - first, n, time.process_time() - cpu


async def local(upstream: LocalUpstream, request: hub.Request) -> tuple[float, float, int, float]:
    upstream._engine.llm.reset()
    cpu = time.process_time()
    start = time.perf_counter()
    first = last = 0.0
    n = 0
    async for event in upstream.stream(request):
        if type(event) is hub.Delta:
            last = time.perf_counter()
            first = first or last
        elif type(event) is hub.Usage:
            n = event.output_tokens
    return first - start, last - first, n, time.process_time() - cpu


def row(name: str, runs: list[tuple[float, float, int, float]]) -> tuple[str, float, float, float, int, float]:
    ttft = statistics.median(r[0] for r in runs) * 1000
    cpu = statistics.median(r[3] / r[2] for r in runs) * 1000
    decode = statistics.median((r[2] - 1) / r[1] for r in runs if r[1] > 0)
    overall = statistics.median(r[2] / (r[0] + r[1]) for r in runs)
    return name, ttft, decode, overall, runs[0][2], cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    before = rss_mb()
    upstream = LocalUpstream(n_threads=args.threads)
    started = time.perf_counter()
    await upstream.load()
    load_s = time.perf_counter() - started
    loaded = rss_mb()
    request = hub.Request(model="local", messages=[hub.Message("user", [hub.TextPart(PROMPT)])], max_tokens=args.tokens)
    llm = upstream._engine.llm
    tokens = upstream._engine.tokenize(upstream._template.render(request))

    await local(upstream, request)  # warm up both paths once
    direct(llm, tokens, args.tokens)
    runs: dict[str, list] = {"llama-cpp direct": [], "LocalUpstream": []}
    for _ in range(args.rounds):
        runs["llama-cpp direct"].append(direct(llm, tokens, args.tokens))
        runs["LocalUpstream"].append(await local(upstream, request))
    await upstream.aclose()

    rows = [row(name, r) for name, r in runs.items()]
    print(
        f"model {Path(upstream._engine.model_path or '').name}, prompt {len(tokens)} tokens, "
        f"threads {args.threads or 'default'}, {args.rounds} rounds, load {load_s:.2f} s"
    )
    print(f"{'path':<18} {'tokens':>6} {'TTFT ms':>9} {'decode tok/s':>13} {'overall tok/s':>14} {'CPU ms/token':>13}")
    for name, ttft, decode, overall, n, cpu in rows:
        print(f"{name:<18} {n:>6} {ttft:>9.1f} {decode:>13.1f} {overall:>14.1f} {cpu:>13.2f}")
    ratio = rows[1][2] / rows[0][2] * 100
    print(f"LocalUpstream decode speed: {ratio:.1f}% of direct (target >= 95%)")
    print(f"RSS: {before:.0f} MB before load, {loaded:.0f} MB after load, {rss_mb():.0f} MB peak")


if __name__ == "__main__":
    asyncio.run(main())
