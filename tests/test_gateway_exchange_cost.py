"""The access log's cheap paths (issue 23, round six) against what they stand in for.

- ``BatchedStreamHandler.queue`` appends without the handler's lock; :meth:`flush` (which
  another thread may run: ``emit`` outside a loop, ``logging.shutdown``) removes from the
  queue's front only what it copied, so no line queued meanwhile is lost or written twice.
"""

from __future__ import annotations

import asyncio
import io
import threading

from llmbridge.gateway._accesslog import BatchedStreamHandler


class _Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return len(s)


async def test_a_flush_from_another_thread_between_queue_reading_the_list_and_appending_loses_nothing():
    """The worst interleaving for a lock-free append, made to happen: ``queue`` has read the
    handler's list and another thread flushes before the append lands. A flush that replaced
    the list (the old ``lines, self._lines = self._lines, []``) would let the line go into
    the list it just wrote and dropped; this one leaves it for the next flush."""
    stream = _Writes()
    handler = BatchedStreamHandler(stream)

    class Interleaved(list):  # type: ignore[type-arg]
        def append(self, line: str) -> None:
            if line.startswith("racing"):
                other = threading.Thread(target=handler.flush)
                other.start()
                other.join()
            super().append(line)

    handler._lines = Interleaved()
    handler.queue("first\n")
    handler.queue("racing 1\n")  # (the other thread writes "first", then this is appended)
    handler.queue("racing 2\n")
    await asyncio.sleep(0)  # the loop's own flush
    handler.flush()
    assert "".join(stream.writes) == "first\nracing 1\nracing 2\n"


async def test_lines_queued_on_the_loop_while_other_threads_flush_all_go_out_once_in_order():
    stream = _Writes()
    handler = BatchedStreamHandler(stream)
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            handler.flush()

    threads = [threading.Thread(target=flusher) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for n in range(3000):
            handler.queue(f"line {n}\n")
            if n % 50 == 0:
                await asyncio.sleep(0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    handler.flush()
    assert "".join(stream.writes) == "".join(f"line {n}\n" for n in range(3000))
