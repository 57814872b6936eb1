"""Priority queues (``x-max-priority``) as RabbitMQ's classic queues run them.

Theory of operation
-------------------
A priority queue keeps one FIFO per priority level, 0 to its ``x-max-priority``
(:class:`PriorityReady`, which stands in for the ready deque of a :class:`Queue`): the
*head* is the oldest message of the highest non-empty level, so dispatch, ``basic.get``,
TTL expiry and the length limits, which all work on the head, need nothing else.  What
follows is RabbitMQ's documented behaviour (rabbitmq.com/docs/priority):

* a message's level is its ``priority`` property, 0 when absent, capped at the queue's
  maximum;
* messages expire only at the head: an expired low-priority message waits behind live
  higher-priority ones (counted as ready until then);
* ``x-max-length`` / ``x-max-length-bytes`` with drop-head drop the head, which is the
  *highest* priority message: a full priority queue makes room for a low one by dropping a
  high one, as in RabbitMQ;
* a requeued message goes back to its place (by publish sequence) within its level;
* a durable priority queue keeps its levels on queue logs (``prioritylog.py``), one per
  level, with this same head; one recovered with records of the older layout has them
  enqueued again in publish order, each in its level (the priority is in its properties).

Only priority queues pay: the level is read from the raw properties on the way in
(``properties.priority_of``), plain queues keep their deque.  RabbitMQ's advice holds here
too: a few levels (up to 5 or 10) are plenty; each level is a deque and the head search
walks down from the highest level that may hold something.  ``x-max-priority: 0`` is
accepted, as RabbitMQ does, and makes a plain queue.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from typing import Any, SupportsIndex

from oxiedge.amqp.properties import priority_of
from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queues import ByteLimitedQueue, Queue

MAX_PRIORITY = 255


def _seq_of(msg: QueuedMessage) -> int:
    return msg.seq


class PriorityReady(deque[QueuedMessage]):
    """The ready messages of a priority queue, one FIFO per level (see the module
    docstring); the deque operations a :class:`Queue` uses work on the head."""

    __slots__ = ("levels", "max_priority", "n_ready", "top")

    def __init__(self, max_priority: int) -> None:
        super().__init__()
        self.max_priority = max_priority
        self.levels: list[deque[QueuedMessage]] = [deque() for _ in range(max_priority + 1)]
        self.n_ready = 0
        self.top = 0  # no level above this one holds a message

    def level_of(self, msg: QueuedMessage) -> deque[QueuedMessage]:
        priority = priority_of(msg.properties)
        if priority > self.max_priority:
            priority = self.max_priority
        if priority > self.top:
            self.top = priority
        return self.levels[priority]

    def _head(self) -> deque[QueuedMessage]:
        levels = self.levels
        top = self.top
        while top and not levels[top]:
            top -= 1
        self.top = top
        return levels[top]

    def append(self, msg: QueuedMessage) -> None:
        self.level_of(msg).append(msg)
        self.n_ready += 1

    def appendleft(self, msg: QueuedMessage) -> None:
        self.level_of(msg).appendleft(msg)
        self.n_ready += 1

    def put_back(self, msg: QueuedMessage) -> None:
        """A requeued message, to its place (by publish sequence) in its level."""
        level = self.level_of(msg)
        level.insert(bisect.bisect_left(level, msg.seq, key=_seq_of), msg)
        self.n_ready += 1

    def popleft(self) -> QueuedMessage:
        if not self.n_ready:
            raise IndexError("pop from an empty priority queue")
        self.n_ready -= 1
        return self._head().popleft()

    def __len__(self) -> int:
        return self.n_ready

    def __bool__(self) -> bool:
        return self.n_ready > 0

    def __iter__(self) -> Iterator[QueuedMessage]:
        """Head first: highest level first, each in order."""
        for level in reversed(self.levels):
            yield from level

    def __getitem__(self, index: SupportsIndex) -> QueuedMessage:  # type: ignore[override]
        i = index.__index__()
        if i == 0:
            return self._head()[0]
        if i == -1:
            for level in self.levels:
                if level:
                    return level[-1]
            raise IndexError("priority queue is empty")
        return list(self)[i]

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self.n_ready = 0
        self.top = 0


class PriorityQueue(Queue):
    """A queue declared with ``x-max-priority`` (see the module docstring)."""

    __slots__ = ()

    def __init__(self, name: str, qid: int, **kw: Any) -> None:
        super().__init__(name, qid, **kw)
        self.ready = PriorityReady(max_priority_of(self.arguments))

    def enqueue(self, msg: QueuedMessage) -> None:
        super().enqueue(msg)
        if self.max_bytes is not None and self.limit:  # (as ByteLimitedQueue)
            self._over_bytes(msg)

    def requeue(self, msgs: list[QueuedMessage]) -> None:
        """Unacked messages back to their places in their levels, redelivered."""
        if not msgs or self.paged is not None:  # (on queue logs: as any queue)
            super().requeue(msgs)
            return
        ready = self.ready
        assert isinstance(ready, PriorityReady)
        for msg in msgs:
            msg.redelivered = True
            ready.put_back(msg)
        if self.max_bytes is not None:
            self.ready_bytes += sum(len(m.body) for m in msgs)
        if self.consumers:
            self.dispatch()
        if self.ttl_seen:
            self.arm()


def max_priority_of(arguments: dict[str, Any]) -> int:
    """A queue's ``x-max-priority`` (0: none)."""
    value = arguments.get("x-max-priority", 0)
    return int(value) if isinstance(value, int) else 0


def queue_class(arguments: dict[str, Any] | None, byte_limited: bool) -> type[Queue]:
    """The class of a new queue with these (checked) arguments."""
    if arguments and max_priority_of(arguments) > 0:
        return PriorityQueue
    return ByteLimitedQueue if byte_limited else Queue
