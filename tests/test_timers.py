"""gateway/_timers.py: a lazy timer fires once its due time has passed, wherever that moved."""

from __future__ import annotations

import asyncio

from llmbridge.gateway._timers import LazyTimer


async def test_a_lazy_timer_follows_its_due_time_later_and_earlier():
    loop = asyncio.get_running_loop()
    due = [loop.time() + 0.05]
    fired: list[float] = []
    timer = LazyTimer(lambda: due[0], lambda: fired.append(loop.time()))

    due[0] = loop.time() + 0.15  # later: nothing to do now, the armed wake-up finds the new time
    timer.rearm()
    await asyncio.sleep(0.1)
    assert not fired
    await asyncio.sleep(0.1)
    assert len(fired) == 1 and fired[0] >= due[0] - 0.002  # (uvloop's clock moves in whole ms)

    due[0] = loop.time() + 10  # armed again after a fire, far out ...
    timer.rearm()
    due[0] = loop.time() + 0.05  # ... then earlier: re-armed for the earlier time
    timer.rearm()
    await asyncio.sleep(0.15)
    assert len(fired) == 2

    due[0] = loop.time() + 0.05
    timer.rearm()
    timer.cancel()  # for good
    await asyncio.sleep(0.1)
    assert len(fired) == 2
