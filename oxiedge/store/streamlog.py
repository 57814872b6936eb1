"""An append-only log in RocksDB, read at many independent offsets (stream queues).

Theory of operation
-------------------
A stream is a run of records ``record_prefix + owner (8 B) + offset (8 B)`` in one column
family, offsets from 0 without gaps, so key order is offset order. A record's value is the
append time (uint64 ms since the epoch) followed by whatever its owner encodes. Unlike a
queue log (``qlog.py``: one consumer that removes from the head) nothing is removed by
reading: every reader keeps its own offset, and records leave only by retention, a whole
*segment* at a time.

A segment is a run of offsets ``[first, first + count)`` of at most ``segment_bytes``
(the last one, the *active* segment, grows). Each has a small record
``segment_prefix + owner + first`` = first and last append time, count, bytes (uint64 BE
each), staged in the same round as the records it counts (``Store.defer``: once per round,
just before the round is written), so the segment records always describe exactly the
records on disk. Recovery reads those few records and nothing of the log: the tail is the
last segment's ``first + count``.

Retention (``retain``) removes the oldest segments, never the active one, while the log
is over a byte bound or their newest record is older than an age bound: one
``delete_range`` over the segment's records and one delete of its record, which RocksDB
turns into a range tombstone each (cheap on an SD card: no per-record write). A reader
never seeks below ``first`` (the oldest live offset), so it never walks those tombstones.

Visibility: a record is *committed* once the round holding it is synced (``synced``, with
the round's generation, from the committer's ``after_sync`` listeners). Readers see
committed records only, so an offset a reader was given is never reassigned after a crash:
an unsynced record that a crash loses was seen by nobody.

Memory per stream: the segment list (one small object per segment: 8 MiB of log each by
default) and a window of the newest records (``WINDOW`` records, ``WINDOW_BYTES``), which
readers at the tail are served from without a read; a reader further back reads records in
ranges (``Store.read_range``: one seek, then sequential), never one ``get`` per record.
"""

from __future__ import annotations

import struct
from collections import deque

from .qlog_api import LogStore

__all__ = ["SEGMENT_BYTES", "Segment", "StreamLog"]

_KEY = struct.Struct(">QQ")  # owner, offset
_SEG = struct.Struct(">QQQQ")  # first append ms, last append ms, count, bytes
_TS = struct.Struct(">Q")
#: Default segment size: the unit of retention (RabbitMQ's default is 500 MB; a card wants
#: retention in smaller steps).
SEGMENT_BYTES = 8 << 20
#: The newest records kept in memory for readers at the tail: count, bytes.
WINDOW = 1024
WINDOW_BYTES = 1 << 20

#: ``(offset, append time ms, value)`` of one record as read.
Record = tuple[int, int, bytes]


class Segment:
    """A run of offsets removed together by retention."""

    __slots__ = ("bytes", "count", "first", "first_ms", "last_ms")

    def __init__(self, first: int, first_ms: int, last_ms: int = 0, count: int = 0,
                 size: int = 0) -> None:
        self.first = first
        self.first_ms = first_ms
        self.last_ms = last_ms or first_ms
        self.count = count
        self.bytes = size

    @property
    def end(self) -> int:
        return self.first + self.count


class StreamLog:
    """One stream's records: append, read at an offset, retention, recovery."""

    __slots__ = ("_chunk_gen", "_deferred", "_dirty", "bytes", "cf", "chunk_start",
                 "committed", "owner", "record_prefix", "removed_segments", "segment_bytes",
                 "segment_prefix", "segments", "store", "tail", "unsynced", "window",
                 "window_bytes")

    def __init__(self, store: LogStore, cf: str, owner: int, *, record_prefix: bytes,
                 segment_prefix: bytes, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.store = store
        self.cf = cf
        self.owner = owner
        self.record_prefix = record_prefix
        self.segment_prefix = segment_prefix
        self.segment_bytes = max(1, segment_bytes)
        self.segments: deque[Segment] = deque()
        self.tail = 0  # the next offset
        self.committed = 0  # offsets below are synced: what readers may see
        self.bytes = 0  # record bytes of every live segment
        #: the first offset of the newest chunk (what one commit round appended): "last"
        self.chunk_start = 0
        self._chunk_gen = -1
        self.window: deque[Record] = deque()
        self.window_bytes = 0
        self._dirty: dict[int, Segment] = {}  # segments whose record the next round writes
        self._deferred = False
        self.removed_segments = 0
        #: ``(generation, tail)`` of each round with appends not known synced yet
        self.unsynced: deque[tuple[int, int]] = deque()

    # -- keys -----------------------------------------------------------------------------

    def key(self, offset: int) -> bytes:
        return self.record_prefix + _KEY.pack(self.owner, offset)

    def _segment_key(self, first: int) -> bytes:
        return self.segment_prefix + _KEY.pack(self.owner, first)

    @property
    def first(self) -> int:
        """The oldest live offset (``tail`` when the log is empty)."""
        return self.segments[0].first if self.segments else self.tail

    def __len__(self) -> int:
        return self.tail - self.first

    # -- appending ------------------------------------------------------------------------

    def append(self, value: bytes, now_ms: int) -> int:
        """Stage one record; returns its offset (final once its round is synced)."""
        offset = self.tail
        self.tail = offset + 1
        record = _TS.pack(now_ms) + value
        size = len(record)
        self.store.stage_put(self.cf, self.key(offset), record)
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.bytes >= self.segment_bytes:
            seg = Segment(offset, now_ms)
            self.segments.append(seg)
        seg.count += 1
        seg.bytes += size
        seg.last_ms = max(seg.last_ms, now_ms)
        self.bytes += size
        self._dirty[seg.first] = seg
        generation = self.store.committer.generation
        if generation != self._chunk_gen:
            self._chunk_gen = generation
            self.chunk_start = offset
            self.unsynced.append((generation, offset + 1))
        else:
            self.unsynced[-1] = (generation, offset + 1)
        window = self.window
        window.append((offset, now_ms, value))
        self.window_bytes += len(value)
        while len(window) > WINDOW or (self.window_bytes > WINDOW_BYTES and len(window) > 1):
            self.window_bytes -= len(window.popleft()[2])
        if not self._deferred:
            self._deferred = True
            self.store.defer(self._flush)
        return offset

    def _flush(self) -> None:
        """Just before the round is written: the records of the segments it changed."""
        self._deferred = False
        for seg in self._dirty.values():
            self.store.stage_put(self.cf, self._segment_key(seg.first),
                                 _SEG.pack(seg.first_ms, seg.last_ms, seg.count, seg.bytes))
        self._dirty.clear()

    def synced(self, generation: int) -> bool:
        """The committer synced every round up to ``generation``: readers may see the
        records those rounds held. Returns whether nothing appended waits for a sync."""
        unsynced = self.unsynced
        while unsynced and unsynced[0][0] <= generation:
            self.committed = unsynced.popleft()[1]
        return not unsynced

    @property
    def last_chunk(self) -> int:
        """Where a reader asking for "last" starts: the newest committed chunk."""
        if self.committed <= self.first:
            return self.committed
        return self.chunk_start if self.chunk_start < self.committed else self.committed - 1

    # -- reading --------------------------------------------------------------------------

    def read(self, offset: int, limit: int, max_bytes: int = WINDOW_BYTES) -> list[Record]:
        """Up to ``limit`` committed records from ``offset`` (raised to ``first``) on; from
        the store, about ``max_bytes`` at most (the log's mean record size decides how
        many: big messages are read a few at a time)."""
        offset = max(offset, self.first)
        if self.bytes and len(self):
            limit = max(1, min(limit, max_bytes * len(self) // self.bytes))
        end = min(offset + limit, self.committed)
        if offset >= end:
            return []
        window = self.window
        if window and offset >= window[0][0]:
            start = offset - window[0][0]
            return [window[i] for i in range(start, start + end - offset)]
        out: list[Record] = []
        for key, value in self.store.read_range(self.cf, self.key(offset), self.key(end),
                                                end - offset):
            if len(key) != 17 or len(value) < 8:
                self.store.quarantine(self.cf, key, value, "stream record too short")
                continue
            out.append((_KEY.unpack_from(key, 1)[1], _TS.unpack_from(value)[0],
                        bytes(value[8:])))
        return out

    def offset_at(self, at_ms: int) -> int:
        """The first offset appended at or after ``at_ms`` (``tail`` if none): the segment
        from its record, then a binary search of its records by point reads."""
        for seg in self.segments:
            if seg.last_ms >= at_ms:
                break
        else:
            return self.tail
        if seg.first_ms >= at_ms:
            return seg.first
        low, high = seg.first, seg.end - 1  # the record at ``high`` is at or after at_ms
        while low < high:
            mid = (low + high) // 2
            if self._time_of(mid) >= at_ms:
                high = mid
            else:
                low = mid + 1
        return low

    def _time_of(self, offset: int) -> int:
        for off, ms, _value in self.window:
            if off == offset:
                return ms
        raw = self.store.get_raw(self.cf, self.key(offset))
        return _TS.unpack_from(raw)[0] if raw is not None and len(raw) >= 8 else 0

    # -- retention ------------------------------------------------------------------------

    def retain(self, max_bytes: int | None, max_age_ms: int | None, now_ms: int) -> int:
        """Remove the oldest whole segments (never the active one) while the log is over
        ``max_bytes`` or their newest record is older than ``max_age_ms``; returns how
        many records went."""
        segments = self.segments
        removed = 0
        while len(segments) > 1:
            seg = segments[0]
            over = max_bytes is not None and self.bytes > max_bytes
            old = max_age_ms is not None and seg.last_ms < now_ms - max_age_ms
            if not (over or old):
                break
            segments.popleft()
            self.bytes -= seg.bytes
            removed += seg.count
            self.removed_segments += 1
            self._dirty.pop(seg.first, None)
            self.store.stage_delete_range(self.cf, self.key(seg.first), self.key(seg.end))
            self.store.stage_delete_key(self.cf, self._segment_key(seg.first))
        return removed

    def drop(self) -> None:
        """Stage the removal of the whole stream (records and segment records)."""
        for prefix in (self.record_prefix, self.segment_prefix):
            self.store.stage_delete_range(self.cf, prefix + _KEY.pack(self.owner, 0),
                                          prefix + _KEY.pack(self.owner + 1, 0))
        self.segments.clear()
        self._dirty.clear()
        self.window.clear()
        self.window_bytes = self.bytes = 0
        self.unsynced.clear()
        self.committed = self.tail

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> None:
        """Read the segment records (never the log itself): first, tail, sizes."""
        start = self.segment_prefix + _KEY.pack(self.owner, 0)
        end = self.segment_prefix + _KEY.pack(self.owner + 1, 0)
        for key, value in self.store.iter_range(self.cf, start, end):
            if len(key) != 17 or len(value) != _SEG.size:
                self.store.quarantine(self.cf, key, value, "stream segment record")
                continue
            first_ms, last_ms, count, size = _SEG.unpack(value)
            first = _KEY.unpack_from(key, 1)[1]
            if self.segments and first < self.segments[-1].end:
                self.store.quarantine(self.cf, key, value, "overlapping stream segment")
                continue
            self.segments.append(Segment(first, first_ms, last_ms, count, size))
            self.bytes += size
        self.tail = self.committed = self.segments[-1].end if self.segments else 0
        self.chunk_start = max(self.tail - 1, self.first)
