"""How a queue log (``qlog.py``) removes records: the acknowledged head as deferred range
deletes, the rest one point delete each, and the counters record of every round.

Theory of operation
-------------------
An acknowledged or dropped seq below every live seq (the usual case) only moves
``deleted_to`` (an in-order ack: the seq at ``deleted_to``, one compare in the log's
``ack``). Just before a round is written (the log's ``_flush``: ``Store.defer``)
:meth:`Removals.stage` moves it up to the log's floor and, once the run below the floor is
``RANGE_RUN`` seqs long, the queue is empty or a bound dropped messages, stages the run as
one ``delete_range``: a range tombstone per round would slow every iterator of a long drain
(each one in the memtable is work for every new iterator on the family until it is
flushed). What is below the floor is never read (reads and recovery start at the floor, and
recovery removes a run left over), so deferring its delete costs nothing but disk space.
A seq removed out of order (above the floor): a point delete at once. The counters record
(``meta_key``: floor, tail, count, bytes, 8 bytes BE each) goes in the same batch.
"""

from __future__ import annotations

from .qlog_api import LogStore
from .qlog_recover import META, SEQ

#: Acknowledged seqs gathered below the floor before their range delete is staged (at once
#: when the queue is empty or a bound dropped messages).
RANGE_RUN = 1024


class Removals:
    """One queue log's removed seqs on their way off the disk (module docstring)."""

    __slots__ = ("cf", "deleted_to", "dropped", "flushed_to", "meta_key", "prefix", "store")

    def __init__(self, store: LogStore, cf: str, prefix: bytes, meta_key: bytes) -> None:
        self.store = store
        self.cf = cf
        self.prefix = prefix
        self.meta_key = meta_key
        self.deleted_to = 0  # every seq below is removed (its range delete maybe deferred)
        self.flushed_to = 0  # ... and staged as a range delete up to here
        self.dropped = False  # a bound dropped messages: the run goes this round

    def at(self, first: int) -> None:
        """Recovery: every seq below ``first`` is gone from the disk (or its run is staged)."""
        self.deleted_to = self.flushed_to = first

    def one(self, seq: int, floor: int) -> None:
        """``seq`` is removed, ``floor`` the smallest live seq: with the run below the floor
        (deferred), or alone."""
        if seq < floor:
            if floor > self.deleted_to:
                self.deleted_to = floor
        else:
            self.store.stage_delete_key(self.cf, self.prefix + SEQ.pack(seq))

    def run(self, start: int, end: int) -> None:
        """Seqs ``[start, end)`` are removed at once, above the floor: one range delete."""
        prefix = self.prefix
        self.store.stage_delete_range(self.cf, prefix + SEQ.pack(start), prefix + SEQ.pack(end))

    def stage(self, floor: int, tail: int, count: int, size: int, empty: bool) -> None:
        """The round is about to be written: stage the run below ``floor`` when it is due
        (``empty``: the queue holds no message, with a record or without), and the counters
        record (``count`` records of ``size`` bytes, ``tail`` the next seq; never
        negative)."""
        if floor > self.deleted_to:
            self.deleted_to = floor
        if self.deleted_to > self.flushed_to and (
                self.dropped or empty or self.deleted_to - self.flushed_to >= RANGE_RUN):
            self.run(self.flushed_to, self.deleted_to)
            self.flushed_to = self.deleted_to
        self.dropped = False
        self.store.stage_put(self.cf, self.meta_key, META.pack(
            self.deleted_to, tail, max(0, count), max(0, size)))
