"""Queue timers on trio's MockClock (the injected clock): x-expires and per-queue TTL over
virtual minutes, no sleeping."""

from __future__ import annotations

import trio
import trio.testing

from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.timers import QueueTimers


async def test_x_expires_deletes_an_unused_queue_after_its_lease(
        autojump_clock: trio.testing.MockClock) -> None:
    timers = QueueTimers(clock=trio.current_time)
    unused = trio.Event()
    q = Queue("idle", 1, timers=timers, on_unused=lambda _q: unused.set())
    q.expires_ms = 600_000  # ten virtual minutes
    start = trio.current_time()
    q.arm()
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        await trio.sleep(300)
        q.touch()  # used half-way: the lease starts again
        with trio.fail_after(3600):
            await unused.wait()
        nursery.cancel_scope.cancel()
    assert trio.current_time() - start >= 900  # 300 s, then a fresh 600 s lease


async def test_head_expiry_waits_for_the_head(autojump_clock: trio.testing.MockClock) -> None:
    """A short deadline behind a long one expires only when it reaches the head."""
    timers = QueueTimers(clock=trio.current_time)
    expired: list[tuple[int, float]] = []
    done = trio.Event()

    def on_expire(_q: Queue, m: QueuedMessage) -> None:
        expired.append((m.seq, trio.current_time()))
        if len(expired) == 2:
            done.set()

    q = Queue("q", 1, timers=timers, on_expire=on_expire)
    now = trio.current_time()
    q.enqueue(QueuedMessage(1, "", "q", b"\x00\x00", b"a", expires=now + 60))
    q.enqueue(QueuedMessage(2, "", "q", b"\x00\x00", b"b", expires=now + 1))
    q.saw_deadline()
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        with trio.fail_after(600):
            await done.wait()
        nursery.cancel_scope.cancel()
    assert [seq for seq, _t in expired] == [1, 2]
    assert all(t >= now + 60 for _seq, t in expired)  # 2 waited behind 1
