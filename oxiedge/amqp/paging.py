"""Which queues keep their ready messages on queue logs, their bounds, and their recovery.

A durable classic or quorum queue goes on one queue log (``queuelog.LogReady``), a durable
priority queue on one per level (``prioritylog.PriorityLogReady``); exclusive queues (never
durable) and stream queues (their own log, ``stream.py``) do not. A priority queue
recovered with records of the older layout (``m`` records) keeps them in memory.

Bounds: a queue is created with the bounds of a queue held in memory (the broker's
``queue_limit`` / ``queue_bytes``: ``--amqp-memory-queue-limit`` / ``-bytes``, at most the
flags below); one that goes on queue logs gets the disk-sized ones of :class:`Paging`
(``--amqp-queue-limit`` / ``--amqp-queue-bytes``) in their place, ``x-max-length`` still
capped by them, and its bytes count in ``--max-backlog-bytes`` (``queuelog.PagedBytes``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from oxiedge.amqp.priority import PriorityQueue, PriorityReady
from oxiedge.amqp.prioritylog import PriorityLogReady
from oxiedge.amqp.queuelog import LogReady, PagedBytes
from oxiedge.amqp.queues import ByteLimitedQueue, Queue
from oxiedge.store.backlog import Backlog

#: The bounds of a queue on queue logs unless the service sets the flags' (docs/limits.md).
PAGED_QUEUE_LIMIT = 10_000_000
PAGED_QUEUE_BYTES = 1 << 30


class Paging:
    """Puts durable queues on queue logs with their bounds; the bytes they hold."""

    __slots__ = ("limit", "max_bytes", "paged", "store")

    def __init__(self, store: Any, limit: int = PAGED_QUEUE_LIMIT,
                 max_bytes: int | None = PAGED_QUEUE_BYTES) -> None:
        self.store = store
        self.limit = limit  # ready messages per queue (x-max-length is capped by it)
        self.max_bytes = max_bytes  # ready body bytes per queue without x-max-length-bytes
        self.paged = PagedBytes()  # every log's bytes, against --max-backlog-bytes

    def configure(self, limit: int, max_bytes: int, backlog: Backlog | None) -> None:
        """The service's flags, and the budget shared with MQTT (before any queue)."""
        self.limit, self.max_bytes = limit, max_bytes
        self.paged.attach(backlog)
        if backlog is not None:
            backlog.join(self.paged)

    def attach(self, q: Queue, legacy: bool = False) -> bool:
        """``attach`` with this broker's store, then the disk-sized bounds."""
        if not attach(q, self.store, legacy, self.paged):
            return False
        a = q.arguments
        q.limit = min(self.limit, int(a["x-max-length"])) if "x-max-length" in a else self.limit
        if "x-max-length-bytes" not in a and q.max_bytes is not None:
            q.max_bytes = self.max_bytes
        return True

    def status(self, queues: Iterable[Queue] = ()) -> dict[str, Any]:
        """What ``oxiedge status`` shows of the paged queues (``queues``: the broker's) and
        the budget."""
        paged, backlog = self.paged, self.paged.backlog
        read_back = sum(q.ready.read_back for q in queues
                        if isinstance(q.ready, (LogReady, PriorityLogReady)))
        return {"queue_limit": self.limit, "queue_bytes_default": self.max_bytes,
                "read_back_messages": read_back,
                "backlog_bytes": paged.backlog_bytes,
                "dropped_backlog_bytes": paged.dropped,
                "rejected_backlog_bytes": paged.rejected,
                "max_backlog_bytes": None if backlog is None else backlog.budget,
                "max_backlog_source": "none" if backlog is None else backlog.source}


def attach(q: Queue, store: Any, legacy: bool = False, paged: PagedBytes | None = None
           ) -> bool:
    """Put the ready messages of durable queue ``q`` (none yet) on queue logs; ``legacy``:
    it has records of the older layout (a priority queue then stays in memory); ``paged``:
    where their bytes add up. False if it stays as it is."""
    ready: LogReady | PriorityLogReady
    if type(q) in (Queue, ByteLimitedQueue) and type(q.ready) is deque and not q.ready:
        ready = LogReady(q, store, paged=paged)
    elif (type(q) is PriorityQueue and isinstance(q.ready, PriorityReady) and not q.ready
          and not legacy):
        ready = PriorityLogReady(q, store, q.ready.max_priority, paged)
    else:
        return False
    q.ready = ready
    q.paged = ready
    return True


def recover(q: Queue) -> int:
    """Find the head, tail and counts of ``q``'s logs (no message is read); returns how
    many messages they hold. Every one of them is redelivered."""
    ready = q.ready
    if isinstance(ready, PriorityLogReady):
        count = ready.recover()
        tail, q.ready_bytes = ready.tail, ready.queued_bytes
    else:
        assert isinstance(ready, LogReady)
        log = ready.log
        log.recover()
        ready.codec.recovered_tail = tail = log.tail
        count, q.ready_bytes = len(log), log.queued_bytes
    q.next_seq = max(q.next_seq, tail, 1)
    # (a deadline of a message on disk: its head record alone, decoded, tells)
    if q.message_ttl is not None or (count and ready.head_expires()):
        q.ttl_seen = True
    return count


def trim(q: Queue) -> None:
    """Recovered beyond its length limits (lowered since): drop from the head as enqueue
    would (dead-lettered where the queue has a DLX); reads back only what it drops (a queue
    within its limits reads nothing: its window is read when a delivery needs it)."""
    ready = q.ready
    while (len(ready) > q.limit
           or (q.max_bytes is not None and q.ready_bytes > q.max_bytes)) and ready:
        old = ready.popleft()
        q.ready_bytes -= len(old.body)
        q.dropped += 1
        if q.on_drop is not None:
            q.on_drop(q, old)
