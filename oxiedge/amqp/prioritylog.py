"""A durable priority queue's ready messages on one queue log per priority level.

Theory of operation
-------------------
As ``priority.PriorityReady`` keeps one FIFO per level in memory, :class:`PriorityLogReady`
keeps one :class:`~oxiedge.store.qlog.QueueLog` per level 0 to ``x-max-priority``: records
``b"p" + qid + level + seq``, counters ``b"d" + qid + level`` (``persist.py``). Seqs are the
queue's, so each level's records are in publish order and a message's level comes from its
stored properties. The head is the oldest message of the highest level that holds one, so
dispatch, ``basic.get``, TTL expiry and drop-head work unchanged, and each level is read back
in batches like any queue log (``queuelog.py`` has the rest: the codec, non-persistent
messages, acks through ``done``). A restart recovers each level's counters, head and tail.

A priority queue whose messages were written before this layout (``m`` records) keeps them
in memory, as before (``recovery.py`` and ``paging.attach`` decide).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, SupportsIndex

from oxiedge.amqp import persist
from oxiedge.amqp.properties import priority_of
from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queuelog import Codec, LogReady, PagedBytes, log_head
from oxiedge.amqp.queues import Queue
from oxiedge.store.qlog import QueueLog


class PriorityLogReady(deque[QueuedMessage]):
    """The ready messages of a durable priority queue, one queue log per level."""

    __slots__ = ("codec", "levels", "queue", "store", "writer")

    def __init__(self, queue: Queue, store: Any, max_priority: int,
                 paged: PagedBytes | None = None) -> None:
        super().__init__()
        self.queue = queue
        self.store = store
        self.codec = Codec(queue)
        paged = paged or PagedBytes()
        self.levels: list[QueueLog[QueuedMessage]] = [
            QueueLog(self.codec, store, persist.CF, persist.level_prefix(queue.qid, level),
                     persist.level_meta_key(queue.qid, level), tally=paged)
            for level in range(max_priority + 1)]
        # The record handed over by the publish path waits in one LogReady-like writer
        # (which also applies --max-backlog-bytes: ``LogReady.shed``, ``over_budget``).
        self.writer = LogReady(queue, store, self.levels[0], self.codec, paged)

    def level_of(self, msg: QueuedMessage) -> QueueLog[QueuedMessage]:
        return self.levels[min(priority_of(msg.properties), len(self.levels) - 1)]

    def _head(self) -> QueueLog[QueuedMessage] | None:
        """The highest level with a next message: a level's count may hold records that
        its read-back skips or quarantines (an earlier run's transient messages), and
        those must not hide a lower level's messages."""
        for log in reversed(self.levels):
            if len(log) and log.peek() is not None:
                return log
        return None

    def head_expires(self) -> float:
        """The deadline of the next message (0: none), reading no level's window: the
        highest level's head in memory or its first record alone (``log_head``)."""
        for log in reversed(self.levels):
            if len(log):
                head = log_head(log)
                if head is not None:
                    return head.expires
        return 0.0

    def expire_unread(self, now: float, limit: int) -> tuple[int, int]:
        """``LogReady.expire_unread`` on the highest level that holds a message: its run is
        the queue's head while every higher level is empty (and stays so: nothing is
        published during the call). A level whose count holds only records the read-back
        skips stops the run at once (``expire_run``): then the queue reads its head back."""
        for log in reversed(self.levels):
            if len(log):
                return self.writer.expire_run(log, now, limit)[:2]
        return 0, 0

    @property
    def read_back(self) -> int:
        """Messages read back from disk so far (all levels)."""
        return sum(log.read_back for log in self.levels)

    # -- what the queue and the publish path call --------------------------------------
    def stage(self, seq: int, record: bytes) -> None:
        for log in self.levels:
            if seq in log.out:  # a queued message's record rewritten (delivery count)
                self.store.stage_put(persist.CF, log.key(seq), record)
                return
        self.writer.hold(seq, record)

    def append(self, msg: QueuedMessage) -> None:
        self.writer.log = self.level_of(msg)
        self.writer.append(msg)

    def done(self, msg: QueuedMessage) -> None:
        self.writer.take_record(msg.seq)  # (dropped before it was appended: x-max-length 0)
        self.level_of(msg).ack(msg.seq)

    def over_budget(self, size: int) -> bool:
        return self.writer.over_budget(size)

    def put_back(self, msgs: list[QueuedMessage]) -> None:
        for log in self.levels:
            mine = [m for m in msgs if m.seq in log.out]
            if mine:
                log.put_back(mine)

    def purge(self) -> int:
        return sum(log.discard_waiting() for log in self.levels)

    def drop(self) -> None:
        for log in self.levels:
            log.close()
        qid = self.queue.qid
        self.store.stage_delete_range(persist.CF, *persist.level_range(qid))
        self.store.stage_delete_range(persist.CF, persist.level_meta_key(qid, 0),
                                      persist.level_meta_key(qid + 1, 0))

    def recover(self) -> int:
        """Every level's counters, head and tail; how many messages in all."""
        for log in self.levels:
            log.recover()
        self.codec.recovered_tail = max(log.tail for log in self.levels)
        return len(self)

    # -- the deque operations a Queue uses (on the head) -------------------------------
    def popleft(self) -> QueuedMessage:
        log = self._head()
        if log is None or log.peek() is None:
            raise IndexError("pop from an empty queue")
        return log.pop()

    def __len__(self) -> int:
        return sum(len(log) for log in self.levels)

    def __bool__(self) -> bool:
        return self._head() is not None

    def __getitem__(self, index: SupportsIndex) -> QueuedMessage:  # type: ignore[override]
        if index.__index__() == 0:
            log = self._head()
            head = log.peek() if log is not None else None
            if head is None:
                raise IndexError("queue is empty")
            return head
        return list(self)[index]

    def __iter__(self) -> Iterator[QueuedMessage]:
        """Head first: the highest level first, each in order (admin and tests)."""
        for log in reversed(self.levels):
            yield from log

    def clear(self) -> None:
        self.purge()

    @property
    def tail(self) -> int:
        return max(log.tail for log in self.levels)

    @property
    def queued_bytes(self) -> int:
        return sum(log.queued_bytes for log in self.levels)
