"""What a queue log (``qlog.py``) finds on disk at start-up: its head, tail, count, bytes.

Theory of operation
-------------------
The counters record (``meta_key``: floor, tail, count, bytes, 8 bytes BE each) is written in
every round that changed the queue, in the same batch as the change. Start-up reads it,
seeks to the first key at or above the floor and to the last key: no message is read. The
counters are trusted when the keys agree with them (an empty queue has no key; otherwise the
first key is at or above the floor, the last below the tail, and the count fits between
them). Otherwise - no record (a data dir written before this layout), a record of the wrong
size (quarantined), keys that do not agree - the records from the floor on are counted once
(``scan``), and the queue writes fresh counters in its next round.

Records below the floor were removed; their range delete may not have been staged yet (the
queue gathers ``RANGE_RUN`` of them first), so start-up stages it when a key is left there.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from .qlog_api import LogStore

SEQ = struct.Struct(">Q")
META = struct.Struct(">QQQQ")  # floor, tail, count, bytes


@dataclass(frozen=True, slots=True)
class Found:
    """A queue as recovery found it: first and last seq on disk (-1: none)."""

    tail: int
    count: int
    bytes: int
    first: int
    last: int
    scanned: bool  # the counters were not usable: the queue writes new ones


def floor_of(store: LogStore, cf: str, meta_key: bytes) -> int:
    """The floor a queue's counters record names (0: none). Every seq below it was removed,
    though its records stay on disk until their run's range delete is staged: a listing
    of the queue's records starts here (``docs/storage.md``, "Tombstones and seek floors")."""
    raw = store.get_raw(cf, meta_key)
    return META.unpack(raw)[0] if raw is not None and len(raw) == META.size else 0


def find(store: LogStore, cf: str, prefix: bytes, end: bytes, meta_key: bytes,
         raw_size: Callable[[bytes], int]) -> Found:
    """Read a queue's counters, head and tail (module docstring)."""
    meta: tuple[int, int, int, int] | None = None
    raw = store.get_raw(cf, meta_key)
    if raw is not None and len(raw) == META.size:
        meta = META.unpack(raw)
    elif raw is not None:
        store.quarantine(cf, meta_key, raw, f"queue counters of {len(raw)} bytes")
    width = len(prefix) + SEQ.size
    floor = meta[0] if meta is not None else 0
    start = prefix + SEQ.pack(floor)
    head = next(iter(store.iter_range(cf, start, end)), None)
    last = store.last_key(cf, prefix, end) if head is not None else None
    first_seq = last_seq = -1
    if head is not None and last is not None and len(head[0]) == len(last) == width:
        first_seq = SEQ.unpack_from(head[0], width - SEQ.size)[0]
        last_seq = SEQ.unpack_from(last, width - SEQ.size)[0]
    if floor and store.read_range(cf, prefix, start, 1):
        store.stage_delete_range(cf, prefix, start)  # removed, its range delete not staged
    if meta is not None and (
            (head is None and meta[2] == 0)
            or (first_seq >= floor and 0 <= last_seq < meta[1]
                and 0 < meta[2] <= last_seq - first_seq + 1)):
        return Found(meta[1], meta[2], meta[3], first_seq, last_seq, False)
    count, size, first_seq, last_seq = scan(store, cf, start if meta is not None else prefix,
                                            end, width, raw_size)
    tail = max(last_seq + 1, meta[1] if meta is not None else 0)
    return Found(tail, count, size, first_seq, last_seq, True)


def scan(store: LogStore, cf: str, start: bytes, end: bytes, width: int,
         raw_size: Callable[[bytes], int]) -> tuple[int, int, int, int]:
    """Count the records of ``[start, end)``: ``(count, bytes, first seq, last seq)``, the
    seqs -1 if there is none. A key of the wrong length is quarantined."""
    first = last = -1
    count = size = 0
    for key, value in store.iter_range(cf, start, end):
        if len(key) != width:
            store.quarantine(cf, key, value, f"queue key of {len(key)} bytes")
            continue
        seq = SEQ.unpack_from(key, width - SEQ.size)[0]
        first = seq if first < 0 else first
        last = seq
        count += 1
        size += raw_size(value)
    return count, size, first, last
