"""The usage ledger's write path: rows buffered in memory, written in batches off the hot path.

:meth:`Ledger.record` is a list append (the request's end never waits for a disk or a
network). A background task writes the buffer every ``flush_seconds`` in one transaction.
So a gateway killed with SIGKILL loses at most the rows that ended in the last
``flush_seconds`` plus the batch being written at that moment; a graceful stop
(:meth:`Ledger.close`) writes everything.

While the database is down the rows stay buffered (and are retried) up to ``max_buffer``;
beyond that the oldest are shed and counted in ``dropped``. Streams never wait for the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable

from .store import LedgerRow, Store

__all__ = ["Ledger"]

log = logging.getLogger("llmbridge.gateway.teams")


class Ledger:
    def __init__(
        self,
        store: Store,
        flush_seconds: float = 1.0,
        max_buffer: int = 100_000,
        on_write: Callable[[int, int], None] | None = None,
    ):
        """``on_write(written, dropped)`` is called after each flush attempt (for metrics)."""
        self.store = store
        self.flush_seconds = flush_seconds
        self.max_buffer = max_buffer
        self._buffer: deque[LedgerRow] = deque()
        self._task: asyncio.Task[None] | None = None
        self._on_write = on_write
        self.written = 0
        self.dropped = 0
        self.failing = False

    def record(self, row: LedgerRow) -> int:
        """Queue a row (never blocks, never raises); sheds the oldest row past ``max_buffer``.
        Returns the rows now waiting (:attr:`pending`, which settling reports as a gauge)."""
        buffer = self._buffer
        buffer.append(row)
        if len(buffer) > self.max_buffer:
            buffer.popleft()
            self.dropped += 1
        return len(buffer)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="llmbridge-ledger")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_seconds)
            await self.flush()

    async def flush(self) -> bool:
        """Write what is buffered now; on failure the rows go back to the front. True if all written."""
        if not self._buffer:
            return True
        batch = list(self._buffer)
        self._buffer.clear()
        dropped_before = self.dropped
        try:
            await self.store.insert_rows(batch)
        except asyncio.CancelledError:
            self._requeue(batch)
            raise
        except Exception as exc:  # the database is down or refused the batch: keep the rows, retry later
            if not self.failing:
                log.warning("ledger: cannot write %d rows (%s: %s); buffering", len(batch), type(exc).__name__, exc)
            self.failing = True
            self._requeue(batch)
            if self._on_write is not None:
                self._on_write(0, self.dropped - dropped_before)
            return False
        if self.failing:
            log.warning("ledger: writing again")
            self.failing = False
        self.written += len(batch)
        if self._on_write is not None:
            self._on_write(len(batch), self.dropped - dropped_before)
        return True

    def _requeue(self, batch: list[LedgerRow]) -> None:
        # Rows that arrived meanwhile are newer: the failed batch goes in front, oldest shed first.
        self._buffer.extendleft(reversed(batch))
        while len(self._buffer) > self.max_buffer:
            self._buffer.popleft()
            self.dropped += 1

    async def close(self) -> None:
        """Stop the writer and write what is left (one try)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
