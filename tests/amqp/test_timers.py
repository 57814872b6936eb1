"""Queue timers on trio's MockClock (the injected clock): x-expires and per-queue TTL over
virtual minutes, no sleeping."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from oxiedge.amqp import paging
from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queues import EXPIRE_EACH, EXPIRE_ROUND, Queue
from oxiedge.amqp.timers import QueueTimers
from oxiedge.store import Store


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


class _Taker:
    """A consumer with credit, as a queue sees it (``queued.QueueConsumer``)."""

    exclusive, priority, unacked = False, 0, 0

    def __init__(self) -> None:
        self.got: list[QueuedMessage] = []

    def has_credit(self) -> bool:
        return True

    def deliver(self, msg: QueuedMessage) -> None:
        self.got.append(msg)

    def server_cancelled(self) -> None:
        raise AssertionError("not deleted")


def test_a_long_due_run_expires_in_rounds_and_is_never_handed_out() -> None:
    """A head run longer than two rounds is due: basic.get finds nothing while it lasts, a
    consumer that arrives then gets nothing of it; each call expires one round
    (``EXPIRE_ROUND``) and arms the timer at once; the live message behind it comes last."""
    now = 100.0
    timers = QueueTimers(clock=lambda: now)
    expired: list[int] = []
    q = Queue("q", 1, timers=timers, on_expire=lambda _q, m: expired.append(m.seq))
    per = EXPIRE_ROUND // EXPIRE_EACH  # expired one at a time in a round
    n = 2 * per + 10
    for i in range(1, n + 1):
        q.enqueue(QueuedMessage(i, "", "q", b"\x00\x00", b"x", expires=now - 1))
    q.enqueue(QueuedMessage(n + 1, "", "q", b"\x00\x00", b"live"))
    q.saw_deadline()
    assert q.pop_ready() is None  # get-empty: the run is longer than a round
    assert expired == list(range(1, per + 1)) and q.timer_at <= now
    taker = _Taker()
    q.add_consumer(taker)
    q.dispatch()  # (basic.consume) one more round, nothing delivered
    assert taker.got == [] and len(expired) == 2 * per
    q.timer_at = 0.0  # (what the timer task does before it calls on_timer)
    q.on_timer()  # the rest of the run, then what follows it
    assert expired == list(range(1, n + 1)) and [m.seq for m in taker.got] == [n + 1]
    assert timers.rounds_cut == 2 and q.ready_count() == 0


def test_a_dispatch_past_live_messages_and_due_runs_spends_one_round(tmp_path: Path) -> None:
    """Live messages with due runs between them, on a durable queue: a dispatch delivers
    the live ones and expires the runs it meets within one round in all (not a round for
    each run: 60 runs of 1,500 were one synchronous call), the timer does the rest; each
    due message expires once, none is handed out."""
    now = 100.0
    store = Store.open(tmp_path / "db")
    try:
        timers = QueueTimers(clock=lambda: now)
        q = Queue("q", 1, durable=True, timers=timers)
        assert paging.attach(q, store)
        seq, live, runs, run = 0, [], 6, 1500
        for _ in range(runs):
            seq += 1
            live.append(seq)
            q.enqueue(QueuedMessage(seq, "", "q", b"\x00\x00", b"live"))
            for _ in range(run):
                seq += 1
                q.enqueue(QueuedMessage(seq, "", "q", b"\x00\x00", b"x", expires=now - 1))
        q.saw_deadline()
        store.commit_blocking()
        store.commit_blocking()  # (the round after lets go of what the first one synced)
        taker = _Taker()
        q.add_consumer(taker)
        q.dispatch()
        assert q.expired <= EXPIRE_ROUND and timers.rounds_cut == 1
        for _ in range(runs * run):
            if q.expired == runs * run:
                break
            q.timer_at = 0.0  # (what the timer task does before it calls on_timer)
            q.on_timer()
        assert q.expired == runs * run and [m.seq for m in taker.got] == live
    finally:
        store.close()
