"""``llmbridge usage``: the ledger report (the same rows as ``GET /admin/usage``), read from the database."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TextIO

from .keys import parse_since
from .store import BY, connect

__all__ = ["COLUMNS", "fetch", "render", "run"]

COLUMNS = ("requests", "errors", "input_tokens", "output_tokens", "thinking_tokens", "cached_tokens", "cost_usd")


async def fetch(database_url: str, by: str = "key", since: str | None = None) -> list[dict[str, Any]]:
    """The report rows. Raises ``ValueError`` (a bad ``by``/``since``/URL) or the backend's errors."""
    if by not in BY:
        raise ValueError(f"--by must be one of {', '.join(BY)}")
    start = parse_since(since) if since else 0.0
    store = connect(database_url)
    await store.open()
    try:
        return await store.usage(by, start)
    finally:
        await store.close()


def render(rows: list[dict[str, Any]], by: str, out: TextIO, as_json: bool = False) -> None:
    """Rows as JSON (``--json``) or an aligned text table."""
    if as_json:
        out.write(json.dumps(rows, indent=2) + "\n")
        return
    head = [by, *(["key_name"] if by == "key" else []), *COLUMNS]
    table = [head] + [[_cell(r.get(c)) for c in head] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    text_columns = len(head) - len(COLUMNS)  # the group (and key name): left-aligned; numbers right
    for row in table:
        cells = [
            c.ljust(w) if i < text_columns else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.write("  ".join(cells).rstrip() + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)


def run(database_url: str, by: str, since: str | None) -> list[dict[str, Any]]:
    return asyncio.run(fetch(database_url, by, since))
