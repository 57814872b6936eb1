"""One queue's messages in RocksDB, in delivery order, with a bounded window in memory.

Theory of operation
-------------------
A queue is a run of records ``prefix + seq`` (8 bytes big-endian) in one column family, so
key order is delivery order; the value is whatever its owner encodes (an MQTT message
record, an AMQP message). Every record is *staged* into the group commit's batch
(``committer.py``) by ``append``: nothing of it is acknowledged before that round's sync.
A seq lives in exactly one of five places, in this order::

    out      popped (sent), not acknowledged yet: seq -> size, in seq order
    ready    the window: the next messages to deliver, decoded, in memory
    disk     [disk_from, disk_to): on disk only, nothing of them in memory
    fresh    appended beyond the window, kept in memory until their batch is synced
    (tail)   one past the newest seq

A consumer that keeps up never leaves ``ready`` (or is handed its message at once with
``append_sent``): no read-back. Messages beyond the window (an offline MQTT session: all of
them) wait in ``fresh`` until their batch is synced, then cost nothing in memory but the
counters; they join ``disk`` (``qlog_fresh.py``: once per round, no work per append).
When ``ready`` runs empty, ``_read_back`` reads the next window from ``disk_from`` in a few
sequential batches (``qlog_read.py``), never one ``get`` per message. While a consumer
drains (something is out) and the window is half empty (in messages, with room left in
bytes), the round's ``_flush`` reads ahead up to the window: after the burst's output went
out, while the client works on what is in flight, not inside the acknowledgement that finds
``ready`` empty. Only synced records are read back, so a delivery waiting for its round (an
MQTT QoS 2 ``Hold``) is never read early.

Removal (``qlog_remove.py``): an acknowledged or dropped seq below every live seq (the
usual case) joins the run below the floor, removed by a deferred range delete staged in the
round's ``_flush`` with the counters record; one above it is a point delete at once.

Recovery (``recover``, ``qlog_recover.py``) reads the metadata record, the first key at or
above the floor and the last key: no backlog read. A record that does not decode when read
back is quarantined (``store.quarantine``: moved aside, counted, logged); delivery goes on.

Without a store (a clean MQTT session, ``--no-mqtt-persist``) the queue lives in ``ready``
alone, with the same API; a message leaves it when it is popped (nothing is ``out``).
"""

from __future__ import annotations

import bisect
import operator
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic

from .encoding import prefix_end
from .qlog_api import Codec, E, Entry, Generations, LogStore, NoTally, Tally
from .qlog_fresh import Marks, mark, settle
from .qlog_read import Reader
from .qlog_recover import SEQ, find
from .qlog_remove import RANGE_RUN, Removals

__all__ = ["RANGE_RUN", "WINDOW", "WINDOW_BYTES", "Codec", "Entry", "Generations", "LogStore",
           "QueueLog", "Tally"]

_SEQ = SEQ
_SEQ_OF = operator.attrgetter("seq")
#: The window of a queue whose consumer is attached: messages, bytes (whichever first).
WINDOW = 1024
WINDOW_BYTES = 1 << 20


class QueueLog(Generic[E]):
    """One queue: append, peek / pop, ack, drop the oldest, recover (module docstring)."""

    __slots__ = ("_closed", "_dirty", "_end", "_requeued", "bare", "bytes", "cf", "codec",
                 "count", "disk_from", "disk_to", "fresh", "marks", "meta_key", "out",
                 "out_bytes", "prefix", "quarantined", "read_back", "reader", "ready",
                 "ready_bytes", "removals", "skipped", "store", "tail", "tally", "window",
                 "window_bytes")

    def __init__(self, codec: Codec[E], store: LogStore | None = None, cf: str = "",
                 prefix: bytes = b"", meta_key: bytes = b"", window: int = WINDOW,
                 window_bytes: int = WINDOW_BYTES, tally: Tally | None = None) -> None:
        self.codec = codec
        self.reader = Reader(codec, store, cf, prefix) if store is not None else None
        self.removals = Removals(store, cf, prefix, meta_key) if store is not None else None
        # The bytes of a queue with a store also count in ``tally`` (``NoTally``: nowhere).
        self.tally: Tally = tally if tally is not None and store is not None else NoTally()
        self.store = store
        self.cf = cf
        self.prefix = prefix
        self.meta_key = meta_key
        self._end = prefix_end(prefix) if prefix else None
        self.window = max(1, window)
        self.window_bytes = window_bytes
        self.ready: deque[E] = deque()
        self.ready_bytes = 0
        self.disk_from = self.disk_to = 0
        self.fresh: deque[E] = deque()
        self.marks: Marks = deque()  # which fresh messages are in which batch
        self.out: dict[int, int] = {}  # seq -> size, popped and not acknowledged
        self.out_bytes = 0
        self.count = 0  # every live record: out + ready + disk + fresh
        self.bytes = 0
        self.tail = 0
        self.quarantined = 0  # records read back that did not decode
        self.bare: dict[int, int] = {}  # seq -> size: live, without a record (not in meta)
        self.skipped = 0  # records the codec refused on read-back (removed)
        self.read_back = 0  # messages read back from disk
        self._dirty = False
        self._closed = False
        self._requeued = False  # put_back: ``out`` out of seq order

    # ------------------------------------------------------------------- sizes
    def __len__(self) -> int:
        """Messages waiting to be delivered (popped ones excluded)."""
        return self.count - len(self.out)

    @property
    def queued_bytes(self) -> int:
        return self.bytes - self.out_bytes

    def key(self, seq: int) -> bytes:
        return self.prefix + _SEQ.pack(seq)

    # ------------------------------------------------------------------ append
    def append(self, item: E, size: int, value: bytes | None, keep: bool = True) -> bool:
        """Queue ``item`` (seq above every other) and stage its record ``value``; ``keep``
        False: the consumer is away. ``value`` None: in the window without a record if it
        has room (a message that need not survive a restart), else False, nothing queued."""
        ready, fresh = self.ready, self.fresh
        room = (not fresh and self.disk_to == self.disk_from and len(ready) < self.window
                and self.ready_bytes < self.window_bytes)
        if value is None and not room:
            return False
        seq = item.seq
        self.count += 1
        self.bytes += size
        self.tail = seq + 1
        store = self.store
        if store is None:
            ready.append(item)
            self.ready_bytes += size
            return True
        self.tally.backlog_bytes += size
        if value is not None:
            store.stage_put(self.cf, self.prefix + _SEQ.pack(seq), value)
        else:
            self.bare[seq] = size
        if not self._dirty:
            self._touch()
        if room and (keep or value is None):
            ready.append(item)
            self.ready_bytes += size
        else:
            fresh.append(item)  # (``_flush`` marks it, and lets go of it once synced)
        return True

    def append_sent(self, seq: int, size: int, value: bytes) -> None:
        """Record a message handed to the consumer at once (nothing else was waiting)."""
        self.tail = seq + 1
        store = self.store
        if store is None:
            return  # in memory only: nothing to remove when it is acknowledged
        self.count, self.bytes = self.count + 1, self.bytes + size
        self.out[seq] = size
        self.out_bytes += size
        self.tally.backlog_bytes += size
        store.stage_put(self.cf, self.prefix + _SEQ.pack(seq), value)
        if not self._dirty:
            self._touch()

    def _settle(self) -> None:
        """Let go of the fresh messages whose batch is synced: on disk now (``qlog_fresh``)."""
        assert self.store is not None
        run = settle(self.fresh, self.marks, self.store.committer.synced_generation)
        if run is not None:
            if self.disk_to == self.disk_from:
                self.disk_from = run[0]
            self.disk_to = run[1] + 1

    # -------------------------------------------------------------- delivering
    def peek(self) -> E | None:
        """The next message to deliver (read back from disk if need be), or None."""
        ready = self.ready
        if ready:
            return ready[0]
        if self.count == len(self.out) or self.store is None:
            return None
        self._refill()
        if not ready:  # nothing waits after all: counters found that were off come right
            self.tally.backlog_bytes -= self.bytes - self.out_bytes
            self.count, self.bytes = len(self.out), self.out_bytes
            self._touch()
        return ready[0] if ready else None

    def pop(self) -> E:
        """Take the message ``peek`` returned: it is out until ``ack``."""
        item = self.ready.popleft()
        size = item.size
        self.ready_bytes -= size
        if self.store is None:  # in memory only: it leaves the queue now
            self.count, self.bytes = self.count - 1, self.bytes - size
            return item
        self.out[item.seq] = size
        self.out_bytes += size
        return item

    def take(self) -> E | None:
        """``peek`` then ``pop`` in one call (a consumer's next delivery), or None."""
        ready = self.ready
        if not ready:
            if self.peek() is None:
                return None
            ready = self.ready
        item = ready.popleft()
        size = item.size
        self.ready_bytes -= size
        if self.store is None:  # in memory only: it leaves the queue now
            self.count, self.bytes = self.count - 1, self.bytes - size
            return item
        self.out[item.seq] = size
        self.out_bytes += size
        return item

    def put_back(self, items: list[E]) -> None:
        """Popped, unacknowledged ``items`` (by seq) go back to their places: redelivery."""
        ready, stored = self.ready, self.store is not None
        for item in items:
            size = self.out.pop(item.seq, None) if stored else item.size
            if size is None:
                continue  # not out (acknowledged meanwhile)
            if stored:
                self.out_bytes -= size
            else:  # in memory only: it left the queue when popped
                self.count, self.bytes = self.count + 1, self.bytes + size
            self.ready_bytes += size
            ready.insert(bisect.bisect_left(ready, item.seq, key=_SEQ_OF), item)
            self._requeued = True

    def _refill(self) -> None:
        if self.fresh:
            self._settle()
        if self.disk_to > self.disk_from:
            self._read_back()
            if self.ready:
                return
        fresh, ready = self.fresh, self.ready
        while fresh and len(ready) < self.window:  # not synced yet, but in memory
            item = fresh.popleft()
            ready.append(item)
            self.ready_bytes += item.size

    def _read_back(self) -> None:
        """Read the next window (``qlog_read.py``), then quarantine or remove what it could
        not serve."""
        reader = self.reader
        assert reader is not None
        each = self.bytes // self.count if self.count > 0 else 0  # the queue's mean size
        n, held, self.disk_from = reader.read(
            self.disk_from, self.disk_to, self.ready, self.window - len(self.ready),
            self.window_bytes - self.ready_bytes, each)
        self.ready_bytes += held
        self.read_back += n
        if reader.bad:
            bad, reader.bad = reader.bad, []
            for key, value, reason in bad:
                self._lost(key, value, reason)
        if reader.skips:
            skips, reader.skips = reader.skips, []
            self.skipped += len(skips)
            for seq, size in skips:
                self._gone(seq, size)

    def _lost(self, key: bytes, value: bytes, reason: str) -> None:
        assert self.store is not None
        self.store.quarantine(self.cf, key, value, reason)
        self.quarantined += 1
        self.count = max(0, self.count - 1)
        self._less(self.codec.raw_size(value))
        self._touch()

    def _gone(self, seq: int, size: int) -> None:
        """``seq`` (read back, never out) leaves the queue without being delivered."""
        self.count = max(0, self.count - 1)
        self._less(size)
        self._removed(seq)
        self._touch()

    def _less(self, size: int) -> None:
        """``bytes`` less ``size`` (a guess for a record read back: never below 0)."""
        less = min(size, self.bytes)
        self.bytes -= less
        self.tally.backlog_bytes -= less

    # ----------------------------------------------------------------- removal
    def ack(self, seq: int) -> bool:
        """The consumer is done with an out ``seq``; False if it is not out."""
        size = self.out.pop(seq, None)
        if size is None:
            return False  # (in memory only: nothing is out, popped messages are gone)
        self.out_bytes -= size
        self.count, self.bytes = self.count - 1, self.bytes - size
        self.tally.backlog_bytes -= size
        if self.bare:
            self.bare.pop(seq, None)
        removals = self.removals
        assert removals is not None
        if seq == removals.deleted_to:  # in order: every seq below is removed already
            removals.deleted_to = seq + 1  # (``_flush`` moves it on to the floor)
        else:
            removals.one(seq, self._floor())
        if not self._dirty:
            self._touch()
        return True

    def drop_oldest(self) -> E | None:
        """Remove the oldest message not delivered yet (a bound); None if there is none."""
        item = self.peek()
        if item is None:
            return None
        self.ready.popleft()
        size = item.size
        self.ready_bytes -= size
        self.count, self.bytes = self.count - 1, self.bytes - size
        removals = self.removals
        if removals is not None:
            self.tally.backlog_bytes -= size
            self.bare.pop(item.seq, None)
            removals.one(item.seq, self._floor())
            removals.dropped = True  # (its run goes this round, not RANGE_RUN later)
            self._touch()
        return item

    def remove_where(self, doomed: Callable[[E], bool]) -> list[E]:
        """Remove the waiting messages in memory for which ``doomed`` is true (the disk
        part is left to the codec's ``decode`` when it is read back)."""
        removed = [item for item in self.ready if doomed(item)]
        if removed:
            self.ready = deque(item for item in self.ready if not doomed(item))
        gone = [item for item in self.fresh if doomed(item)]
        if gone:
            self.fresh = deque(item for item in self.fresh if not doomed(item))
            removed += gone
        if not removed:
            return removed
        self.ready_bytes = sum(item.size for item in self.ready)
        for item in removed:
            self.count -= 1
            self.bytes -= item.size
            if self.store is not None:
                self.tally.backlog_bytes -= item.size
                self.bare.pop(item.seq, None)
                self._removed(item.seq)
        self._touch()
        return removed

    def _floor(self) -> int:
        """The smallest live seq (``tail`` when the queue is empty). A message put back
        (``put_back``) may be older than every one still out: both count."""
        if self.ready:
            floor = self.ready[0].seq
        elif self.disk_to > self.disk_from:
            floor = self.disk_from
        elif self.fresh:
            floor = self.fresh[0].seq
        else:
            floor = self.tail
        if self.out:
            first = min(self.out) if self._requeued else next(iter(self.out))
            return first if first < floor else floor
        self._requeued = False
        return floor

    def _removed(self, seq: int) -> None:
        """Its record goes: with the run below the floor (deferred range), or alone."""
        assert self.removals is not None
        self.removals.one(seq, self._floor())

    def _touch(self) -> None:
        """Have ``_flush`` run before the next round is written (once per round)."""
        if not self._dirty and self.store is not None and not self._closed:
            self._dirty = True
            self.store.defer(self._flush)

    def _flush(self) -> None:
        """Stage the run removed since the last round and the metadata record; read the
        next window ahead for a consumer that is draining the disk part."""
        store = self.store
        if self._closed or store is None:
            self._dirty = False
            return
        if self.fresh:
            if self.marks:
                self._settle()
            mark(self.fresh, self.marks, store.committer.generation)
        if (self.out and self.disk_to > self.disk_from and len(self.ready) < self.window >> 1
                and self.ready_bytes < self.window_bytes):  # (requeued ones may fill it)
            self._read_back()  # (``_dirty`` still set: what it removes joins this round)
        self._dirty = False
        # Every seq below the smallest live one is removed. A quarantined record counts its
        # raw size (a guess); a message without a record is not counted: a restart will
        # not find it.
        bare, removals = self.bare, self.removals
        assert removals is not None
        removals.stage(self._floor(), self.tail, self.count - len(bare),
                       self.bytes - (sum(bare.values()) if bare else 0), self.count <= 0)

    def discard_waiting(self) -> int:
        """Remove every waiting message (a purge; the disk run as one range delete)."""
        n = len(self)
        store = self.store
        if self.removals is not None and self.disk_to > self.disk_from:
            self.removals.run(self.disk_from, self.disk_to)
        gone = [item.seq for item in self.ready] + [item.seq for item in self.fresh]
        self.ready.clear()
        self.fresh.clear()
        self.marks.clear()
        self.ready_bytes, self.disk_from = 0, self.disk_to
        self.tally.backlog_bytes -= self.bytes - self.out_bytes
        self.count, self.bytes = len(self.out), self.out_bytes
        self.bare = {seq: size for seq, size in self.bare.items() if seq in self.out}
        for seq in gone if store is not None else ():
            self._removed(seq)
        self._touch()
        return n

    def drop_disk_head(self, to: int, n: int, size: int) -> None:
        """The disk part below seq ``to`` leaves the queue undelivered without being read
        back (``n`` records, ``size`` bytes, as the owner counted them: a TTL expiry); the
        next message is on disk or later. Its records go with the run below the floor
        (``RANGE_RUN``), or as one range delete of their own when something older is out."""
        start, removals = self.disk_from, self.removals
        assert removals is not None and not self.ready and start < to <= self.disk_to
        self.disk_from = to
        self.count = max(0, self.count - n)
        self._less(size)
        if self._floor() < start:  # something older is out: this run goes on its own
            removals.run(start, to)
        self._touch()

    def close(self) -> None:
        """The owner removes every record (a deleted session): stage nothing more."""
        self._closed = True
        self.tally.backlog_bytes -= self.bytes
        self.bytes = self.out_bytes = 0
        self.ready.clear()
        self.fresh.clear()
        self.marks.clear()
        self.ready_bytes = 0

    # ------------------------------------------------------------------- views
    def newest_in_memory(self) -> E | None:
        """The newest waiting message if it is in memory (None: on disk, or none)."""
        if self.fresh:
            return self.fresh[-1]
        if self.disk_to > self.disk_from:
            return None
        return self.ready[-1] if self.ready else None

    def __iter__(self) -> Iterator[E]:
        """The waiting messages in order, disk ones decoded (admin and tests; changes
        nothing: a record that does not decode is left for the read-back to quarantine)."""
        yield from list(self.ready)
        if self.reader is not None and self.disk_to > self.disk_from:
            yield from self.reader.scan(self.disk_from, self.disk_to)
        yield from list(self.fresh)

    # ---------------------------------------------------------------- recovery
    def recover(self) -> None:
        """Find this queue's head, tail, count and bytes on disk (``qlog_recover.py``, no
        message read); every record found is waiting on disk afterwards."""
        store = self.store
        assert store is not None and self._end is not None
        found = find(store, self.cf, self.prefix, self._end, self.meta_key, self.codec.raw_size)
        self.tail, self.count, self.bytes = found.tail, found.count, found.bytes
        if found.scanned:
            self._touch()
        self.tally.backlog_bytes += self.bytes
        if self.count:
            self.disk_from, self.disk_to = found.first, found.last + 1
        assert self.removals is not None
        self.removals.at(found.first if self.count else self.tail)
