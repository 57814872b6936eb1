"""Which queues keep their ready messages on queue logs, and their recovery.

A durable classic or quorum queue goes on one queue log (``queuelog.LogReady``), a durable
priority queue on one per level (``prioritylog.PriorityLogReady``); exclusive queues (never
durable) and stream queues (their own log, ``stream.py``) do not. A priority queue
recovered with records of the older layout (``m`` records) keeps them in memory.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from oxiedge.amqp.priority import PriorityQueue, PriorityReady
from oxiedge.amqp.prioritylog import PriorityLogReady
from oxiedge.amqp.queuelog import LogReady
from oxiedge.amqp.queues import ByteLimitedQueue, Queue


def attach(q: Queue, store: Any, legacy: bool = False) -> bool:
    """Put the ready messages of durable queue ``q`` (none yet) on queue logs; ``legacy``:
    it has records of the older layout (a priority queue then stays in memory). False if
    it stays as it is."""
    ready: LogReady | PriorityLogReady
    if type(q) in (Queue, ByteLimitedQueue) and type(q.ready) is deque and not q.ready:
        ready = LogReady(q, store)
    elif (type(q) is PriorityQueue and isinstance(q.ready, PriorityReady) and not q.ready
          and not legacy):
        ready = PriorityLogReady(q, store, q.ready.max_priority)
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
    if q.message_ttl is not None:
        q.ttl_seen = True
    return count


def trim(q: Queue) -> None:
    """Recovered beyond its length limits (lowered since): drop from the head as enqueue
    would (dead-lettered where the queue has a DLX); reads back only what it drops."""
    ready = q.ready
    while ready and (len(ready) > q.limit
                     or (q.max_bytes is not None and q.ready_bytes > q.max_bytes)):
        old = ready.popleft()
        q.ready_bytes -= len(old.body)
        q.dropped += 1
        if q.on_drop is not None:
            q.on_drop(q, old)
