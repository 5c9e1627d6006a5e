"""Helpers shared by the benchmarks: the corpus, timing, tables."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"


def corpus_bodies(dialect: str | None = None) -> list[tuple[str, bytes]]:
    """(relative name, body) for every .sse file (of one dialect folder, or all SSE ones)."""
    folders = [CORPUS / dialect] if dialect else sorted(p for p in CORPUS.iterdir() if p.is_dir())
    out = []
    for folder in folders:
        for f in sorted(folder.glob("*.sse")):
            body = f.read_bytes()
            if not body.lstrip().startswith(b"["):  # Gemini JSON-array streams are not SSE
                out.append((f"{folder.name}/{f.name}", body))
    return out


def pieces(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


def best_of(fn: Callable[[], object], repeat: int = 5, min_time: float = 0.2) -> float:
    """Best CPU seconds for one call of ``fn`` (looping until ``min_time`` per sample)."""
    best = float("inf")
    for _ in range(repeat):
        n = 0
        start = time.process_time()
        while True:
            fn()
            n += 1
            elapsed = time.process_time() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / n)
    return best


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers] + [
        [
            f"{c:,.0f}" if isinstance(c, float) and c >= 100 else f"{c:.2f}" if isinstance(c, float) else str(c)
            for c in r
        ]
        for r in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
