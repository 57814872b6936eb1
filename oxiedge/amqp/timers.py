"""One trio task that fires queue timers: head-of-queue message expiry and ``x-expires``.

Theory of operation
-------------------
A queue needs at most ONE timer: the earlier of the deadline of the message at its head
(RabbitMQ expires messages only at the head, so nothing behind it matters yet) and, for a
queue with ``x-expires`` and no consumer, the moment it has been unused long enough.  A
queue asks for its timer with :meth:`QueueTimers.schedule`; an entry goes into one heap
only when it is earlier than the one already pending for that queue, so a stream of
messages with TTLs costs a comparison each, not a heap push each.  When an entry is due
the task calls ``queue.on_timer()``, which expires the head (dead-lettering it), deletes an
unused queue, and asks again for the next deadline.  Stale entries (the queue re-armed
earlier, or went away) are skipped.  No per-message task, no polling loop.

Deadlines are wall-clock seconds (``time.time()``): a TTL stored with a durable message
keeps running across a restart.  The clock is injected (:data:`Clock`): the queues of a
broker read the time through their ``QueueTimers.clock``, so tests run TTLs and
``x-expires`` on trio's ``MockClock`` (``clock=trio.current_time``) instead of sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Protocol

import trio

_log = logging.getLogger("oxiedge")

#: A function returning the current time in seconds (wall clock in production).
Clock = Callable[[], float]
wall_clock: Clock = time.time


class TimedQueue(Protocol):
    timer_at: float
    deleted: bool

    def on_timer(self) -> None: ...


class QueueTimers:
    """The heap of queue deadlines and the task that fires them."""

    def __init__(self, clock: Clock = wall_clock) -> None:
        #: The time deadlines are measured in; queues of this broker read it too.
        self.clock = clock
        self._heap: list[tuple[float, int, TimedQueue]] = []
        self._order = itertools.count()
        self._wake = trio.Event()
        self.fired = 0
        self.errors = 0
        self.rounds_cut = 0  # expiry rounds that stopped at their budget (``queues.py``)

    def schedule(self, queue: TimedQueue, at: float) -> None:
        """Have ``queue.on_timer()`` called at wall-clock time ``at`` (or earlier)."""
        if queue.timer_at and queue.timer_at <= at:
            return  # an earlier (or the same) timer is pending; it will re-arm
        queue.timer_at = at
        heapq.heappush(self._heap, (at, next(self._order), queue))
        if self._heap[0][2] is queue:
            self._wake.set()

    def __len__(self) -> int:
        return len(self._heap)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fire due timers until cancelled."""
        task_status.started()
        heap = self._heap
        while True:
            if not heap:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            delay = heap[0][0] - self.clock()
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = trio.Event()
                continue
            at, _n, queue = heapq.heappop(heap)
            if queue.deleted or queue.timer_at != at:
                continue  # superseded by an earlier entry that already fired
            queue.timer_at = 0.0
            self.fired += 1
            try:
                queue.on_timer()
            except Exception:  # one queue's failure must not stop every other timer
                self.errors += 1
                _log.exception("AMQP queue timer failed")
            await trio.lowlevel.checkpoint()
