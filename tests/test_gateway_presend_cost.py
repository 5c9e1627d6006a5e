"""Issue 23, the first token: what the gateway does between a request's arrival and the
upstream request's write, each shortcut checked against the general path it skips."""

from __future__ import annotations

import os
import re

import pytest

from llmbridge.gateway import _hotpath


def test_request_ids_keep_their_format_and_differ() -> None:
    """``req_`` and 32 lower-case hex digits, as ``uuid4().hex`` gave, zero-padded when the
    draw is small; no two alike."""
    ids = {_hotpath.new_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"req_[0-9a-f]{32}", rid) for rid in ids)


def test_a_small_draw_is_zero_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_hotpath, "_bits", lambda n: 0x1F)
    assert _hotpath.new_request_id() == "req_" + "0" * 30 + "1f"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_worker_draws_other_ids() -> None:
    """Workers forked from one process do not repeat its ids (``random`` reseeds after a fork)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write, _hotpath.new_request_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    mine = _hotpath.new_request_id()
    os.waitpid(pid, 0)
    theirs = os.read(read, 100).decode()
    os.close(read)
    assert re.fullmatch(r"req_[0-9a-f]{32}", theirs) and theirs != mine
