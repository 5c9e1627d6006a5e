"""The access log's cheap paths (issue 23, round six) against what they stand in for.

- ``BatchedStreamHandler.queue`` appends without the handler's lock; :meth:`flush` (which
  another thread may run: ``emit`` outside a loop, ``logging.shutdown``) removes from the
  queue's front only what it copied, so no line queued meanwhile is lost or written twice.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import threading
from typing import Any

from llmbridge import hub
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


def _relaying_exchange() -> Any:
    from llmbridge.gateway._streaming import Exchange, Options, _RelayState

    exchange: Any = object.__new__(Exchange)  # (only what _note reads: no source, no loop)
    exchange.ended, exchange.relay, exchange.request_id = False, True, None
    exchange._relay_state, exchange.options = _RelayState(), Options(dialect="openai-chat", relay=True)
    exchange.usage = exchange.finish = exchange.error = None
    exchange.events = 0
    return exchange


def test_a_block_stop_forgets_that_index_in_every_choice_and_keeps_the_rest_in_order():
    exchange = _relaying_exchange()
    starts = [hub.BlockStart(index=i, kind="text", choice=c) for c in range(3) for i in range(3)]
    exchange._note([*starts, hub.BlockStop(index=1)])
    assert exchange._relay_state.replay() == [s for s in starts if s.index != 1]
    exchange._note([hub.BlockStop(index=0), hub.BlockStop(index=7)])
    assert exchange._relay_state.replay() == [s for s in starts if s.index == 2]
    assert exchange.events == len(starts) + 3


def test_the_first_usage_is_kept_as_a_copy_and_later_ones_merged_as_merge_usage_does():
    exchange = _relaying_exchange()
    first = hub.Usage(input_tokens=8, output_tokens=2, extensions={"x": {"a": 1}})
    exchange._note([first])
    assert exchange.usage == hub.merge_usage(None, first) and exchange.usage is not first
    later = hub.Usage(output_tokens=5, extensions={"x": {"b": 2}})
    exchange._note([later])
    assert exchange.usage == hub.merge_usage(hub.merge_usage(None, first), later)


def test_a_relayed_read_is_seen_to_hold_done_wherever_it_is_as_a_search_from_the_front_sees_it():
    events = [b"data: {}\n\n", b"data: [DONE]\n\n", b": [DONE\n\n", b"data: DONE]\n\n", b"\r\n", b"[DONE]"]
    reads = [b"".join(events[i] for i in picks) for picks in itertools.product(range(6), repeat=3)]
    for out in reads:
        exchange = _relaying_exchange()
        exchange._relay_done, exchange._saw_done, exchange._relay_filter = b"data: [DONE]\n\n", False, None
        assert exchange._relayed(out) is out
        assert exchange._saw_done == (b"[DONE]" in out), out


def test_a_flush_to_a_broken_stream_reports_once_drops_its_lines_and_does_not_raise():
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("gone")

    handler = BatchedStreamHandler(Broken())
    reported: list[object] = []
    handler.handleError = reported.append  # type: ignore[method-assign]
    for lines in (["one\n"], ["one\n", "two\n"]):
        reported.clear()
        handler._lines.extend(lines)
        handler.flush()
        assert len(reported) == 1 and handler._lines == []
    handler.flush()  # nothing queued: nothing to report
    assert len(reported) == 1
