"""gateway/_timers.py: a lazy timer fires once its due time has passed, wherever that moved;
an answer's deadlines and its client keep-alive share one."""

from __future__ import annotations

import asyncio

from llmbridge.gateway._http import Inbox
from llmbridge.gateway._timers import Deadlines, LazyTimer
from llmbridge.gateway.config import Timeouts


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


class CountingInbox(Inbox):
    """An inbox that counts the alarms raised in it."""

    __slots__ = ("raised",)

    def __init__(self) -> None:
        super().__init__()
        self.raised: list[str] = []

    def alarm(self, name: str) -> None:
        self.raised.append(name)
        super().alarm(name)


class Client:
    """What a keep-alive counts from (an exchange, in the gateway)."""

    def __init__(self, last_write: float) -> None:
        self.last_write = last_write


async def test_the_deadlines_timer_carries_the_client_keep_alive_and_goes_on_after_raising_it():
    """One timer an answer (issue 23): the keep-alive alarm comes once per silence until it is
    answered, and meanwhile the first-byte deadline still fires on the same timer."""
    loop = asyncio.get_running_loop()
    inbox = CountingInbox()
    client = Client(loop.time())
    timeouts = Timeouts(first_byte=0.5, idle=None, total=None)
    deadlines = Deadlines(inbox, timeouts, "fake", loop.time(), keepalive=0.05, client=client)

    await asyncio.sleep(0.12)
    assert inbox.raised == ["keepalive"]  # once, not again while unanswered
    inbox.alarms.clear()
    client.last_write = loop.time()  # the client had its keep-alive bytes
    deadlines.keep_alive_again()
    await asyncio.sleep(0.15)
    assert inbox.raised == ["keepalive", "keepalive"]  # the next, an interval after that write
    await asyncio.sleep(0.35)
    assert inbox.raised == ["keepalive", "keepalive", "deadline"]
    assert deadlines.missed is not None and "sent no data within 0.5 s" in deadlines.missed.message
    deadlines.cancel()


async def test_a_cancelled_deadlines_timer_raises_nothing_and_lets_go_of_its_owner():
    loop = asyncio.get_running_loop()
    inbox = CountingInbox()
    client = Client(loop.time())
    timeouts = Timeouts(first_byte=0.05, idle=None, total=None)
    deadlines = Deadlines(inbox, timeouts, "fake", loop.time(), keepalive=0.03, client=client)
    deadlines.cancel()
    await asyncio.sleep(0.1)
    assert not inbox.raised and deadlines.missed is None
    assert deadlines._client is not client  # the owner dropped: no cycle through it
