"""A/B of the codec hot paths: this tree against an earlier commit, in one process.

On a shared machine two separate runs of ``python -m bench translate`` differ by 20-30%
from load alone, too much to see a few percent.  This loads both versions side by side
(the old one as package ``llmbridge_ab``, from ``git archive REV``), alternates them every
repeat so load hits both alike, and keeps the best CPU time of each: encode-only ns per
hub event for every target dialect (over the corpus decoded by each side's own decoders),
decode-only ns per hub event for every dialect (over the corpus encoded into it once, by
this tree), and the SSE decoder over the corpus whole and in 64-byte pieces.

    python scripts/ab_codecs.py REV [--repeats N]

Prints one line per measurement with ``new/base``; unchanged code reads 0.9-1.1 here.
"""

from __future__ import annotations

import gc
import importlib
import io
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def load_base(rev: str, into: Path) -> Any:
    """The ``llmbridge`` package of ``rev``, importable as ``llmbridge_ab``."""
    archive = subprocess.run(["git", "archive", rev, "src/llmbridge"], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    (into / "src" / "llmbridge").rename(into / "llmbridge_ab")
    sys.path.insert(0, str(into))
    return importlib.import_module("llmbridge_ab")


def best_pair(work: dict[str, Any], repeats: int) -> dict[str, float]:
    """Best CPU seconds of each side's zero-argument callable, alternating the order."""
    best = dict.fromkeys(work, float("inf"))
    sides = list(work)
    for r in range(repeats):
        for side in sides if r % 2 else reversed(sides):
            gc.collect()
            start = time.process_time()
            work[side]()
            best[side] = min(best[side], time.process_time() - start)
    return best


def main(argv: list[str]) -> int:
    """Measure and print; the exit status."""
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    repeats = int(argv[argv.index("--repeats") + 1]) if "--repeats" in argv else 25
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT))
    from bench.common import corpus_bodies

    import llmbridge

    with tempfile.TemporaryDirectory() as tmp:
        base = load_base(argv[0], Path(tmp))
        packages = {"base": base, "new": llmbridge}
        dialects = {side: importlib.import_module(f"{pkg.__name__}.dialects") for side, pkg in packages.items()}
        sources = ("openai-chat", "anthropic-messages", "openai-responses", "gemini")
        bodies = [body for source in sources for _, body in corpus_bodies(source)]
        streams: dict[str, list[list[Any]]] = {}
        for side, d in dialects.items():
            streams[side] = []
            for source in sources:
                module = d.get(source)
                for _, body in corpus_bodies(source):
                    decoder = module.StreamDecoder()
                    streams[side].append(decoder.feed(body) + decoder.close())
        n = sum(map(len, streams["new"]))

        def encoder_run(side: str, target: str) -> Any:
            module = dialects[side].get(target)

            def run() -> None:
                for events in streams[side]:
                    encode = module.StreamEncoder().encode
                    for event in events:
                        encode(event)

            return run

        for target in llmbridge.dialects.NAMES:
            best = best_pair({side: encoder_run(side, target) for side in dialects}, repeats)
            print(
                f"encode {target:20} base {best['base'] / n * 1e9:6.0f} ns/event"
                f"  new {best['new'] / n * 1e9:6.0f} ns/event  new/base {best['new'] / best['base']:.3f}"
            )

        def decoder_run(side: str, source: str, wire: list[bytes]) -> Any:
            module = dialects[side].get(source)

            def run() -> None:
                for body in wire:
                    decoder = module.StreamDecoder()
                    decoder.feed(body)
                    decoder.close()

            return run

        for source in llmbridge.dialects.NAMES:
            module = dialects["new"].get(source)
            wire = []
            for events in streams["new"]:
                encode = module.StreamEncoder().encode
                wire.append(b"".join(encode(event) for event in events))
            best = best_pair({side: decoder_run(side, source, wire) for side in dialects}, repeats)
            print(
                f"decode {source:20} base {best['base'] / n * 1e9:6.0f} ns/event"
                f"  new {best['new'] / n * 1e9:6.0f} ns/event  new/base {best['new'] / best['base']:.3f}"
            )
        sse = {side: importlib.import_module(f"{pkg.__name__}.sse") for side, pkg in packages.items()}
        for label, size in (("whole", 0), ("64-byte", 64)):
            inputs = [[b] if not size else [b[i : i + size] for i in range(0, len(b), size)] for b in bodies]

            def sse_run(module: Any, inputs: list[list[bytes]] = inputs) -> Any:
                def run() -> None:
                    for chunks in inputs:
                        decoder = module.Decoder()
                        for chunk in chunks:
                            decoder.feed(chunk)
                        decoder.close()

                return run

            best = best_pair({side: sse_run(mod) for side, mod in sse.items()}, repeats)
            print(
                f"sse    {label:20} base {best['base'] * 1e3:6.1f} ms  new {best['new'] * 1e3:6.1f} ms"
                f"  new/base {best['new'] / best['base']:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
