"""How a queue log (``qlog.py``) reads its disk part back: records to messages, in batches.

Theory of operation
-------------------
A queue's records are ``prefix + seq`` (8 bytes big-endian), so the disk part
``[disk_from, disk_to)`` is one key range. :meth:`Reader.read` fills the window from it in a
few bounded reads (``LogStore.read_range``: one seek at the first seq still needed, above
every tombstone of the acknowledged head, then a list of sequential pairs made by RocksDB's
iterator, no Python step per pair), never one ``get`` per message. The first read asks for
as many records as the room left in the window takes at the queue's mean size; the next ones
go by the mean of what was read.

Each read is decoded a run at a time by the codec (``Codec.decode_run``: one call for as many
records as it can take in a row, so a backlog of like records costs no Python call per
record in between); the record a run stops at goes through ``decode`` alone (:meth:`one`),
then the next run starts.

A record whose key has the wrong length, or that the codec cannot decode, is not served:
the reader lists it in ``bad`` (key, value, reason), and one the codec refuses (``decode``
returns None) in ``skips`` (seq, size); the log quarantines or removes them and corrects its
counters after the read. ``scan`` decodes a range without changing anything (admin views).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic

from .qlog_api import Codec, E, LogStore
from .qlog_recover import SEQ

#: Records in the first read of a read-back when the queue's mean size is not known.
CHUNK = 64


class Reader(Generic[E]):
    """Reads one queue log's records back (module docstring)."""

    __slots__ = ("at", "bad", "cf", "codec", "prefix", "skips", "store", "width")

    def __init__(self, codec: Codec[E], store: LogStore, cf: str, prefix: bytes) -> None:
        self.codec = codec
        self.store = store
        self.cf = cf
        self.prefix = prefix
        self.width = len(prefix) + SEQ.size  # a record's key length
        self.at = len(prefix)  # where the seq starts in it
        self.bad: list[tuple[bytes, bytes, str]] = []  # not served: quarantine them
        self.skips: list[tuple[int, int]] = []  # refused by the codec: (seq, raw size)

    def read(self, first: int, end: int, out: deque[E], room: int, room_bytes: int,
             each: int) -> tuple[int, int, int]:
        """Read records of seqs ``[first, end)`` into ``out`` until ``room`` messages or
        ``room_bytes`` bytes were added (``each``: the mean size, 0 if not known); returns
        ``(messages added, bytes added, the seq to go on from)``."""
        store, codec, cf, prefix = self.store, self.codec, self.cf, self.prefix
        run, width = codec.decode_run, self.width
        start, stop = prefix + SEQ.pack(first), prefix + SEQ.pack(end)
        next_from = end
        chunk = max(1, min(room, room_bytes // each if each else CHUNK))
        n = held = 0
        while True:
            pairs = store.read_range(cf, start, stop, chunk)
            i, count = 0, len(pairs)
            while i < count:
                # (A chunk never holds more than ``room`` messages: only bytes can fill up.)
                was = len(out)
                i, size = run(pairs, i, width, out, room_bytes - held)
                added = len(out) - was
                n += added
                held += size
                # Full only after a message (its key is right): a run that stopped at once
                # (no room in bytes left, a bad record first) still hands that record on.
                full = added > 0 and (n >= room or held >= room_bytes)
                if not full and i < count:
                    size = self.one(pairs[i], out)
                    i += 1
                    if size >= 0:
                        n += 1
                        held += size
                        full = n >= room or held >= room_bytes
                if full:
                    next_from = SEQ.unpack_from(pairs[i - 1][0], self.at)[0] + 1
                    break
            else:
                if count == chunk:  # more on disk: go on after the last key read
                    start = pairs[-1][0] + b"\x00"
                    mean = max(1, held // max(1, n)) if n else max(1, each)
                    chunk = max(1, min(room - n, (room_bytes - held) // mean))
                    continue
            break
        return n, held, next_from

    def one(self, pair: tuple[bytes, bytes], out: deque[E]) -> int:
        """The record ``decode_run`` stopped at: into ``out`` (its size returned), or listed
        in ``bad`` or ``skips`` (-1)."""
        key, value = pair
        if len(key) != self.width:  # cannot come from ``append``: moved aside, not served
            self.bad.append((key, value, f"queue key of {len(key)} bytes"))
            return -1
        seq = SEQ.unpack_from(key, self.at)[0]
        try:
            item = self.codec.decode(seq, value)
        except ValueError as exc:  # UnicodeDecodeError too
            self.bad.append((key, value, f"queued message {seq}: {exc}"))
            return -1
        if item is None:
            self.skips.append((seq, self.codec.raw_size(value)))
            return -1
        out.append(item)
        return item.size

    def scan(self, first: int, end: int) -> Iterator[E]:
        """The messages of seqs ``[first, end)`` in order; a record that does not decode or
        that the codec refuses is passed over, nothing is changed."""
        width, at, decode = self.width, self.at, self.codec.decode
        for key, value in self.store.iter_range(self.cf, self.prefix + SEQ.pack(first),
                                                self.prefix + SEQ.pack(end)):
            if len(key) != width:
                continue
            try:
                item = decode(SEQ.unpack_from(key, at)[0], value)
            except ValueError:
                continue
            if item is not None:
                yield item


def decode_each(decode: Callable[[int, bytes], E | None], pairs: list[tuple[bytes, bytes]],
                i: int, width: int, out: deque[E], room_bytes: int) -> tuple[int, int]:
    """``Codec.decode_run`` by ``decode``, one call per record (a codec without a faster
    way through a run of records)."""
    at, held, unpack = width - SEQ.size, 0, SEQ.unpack_from
    for j in range(i, len(pairs)):
        key, value = pairs[j]
        if len(key) != width:
            return j, held
        try:
            item = decode(unpack(key, at)[0], value)
        except ValueError:
            return j, held
        if item is None:
            return j, held
        out.append(item)
        held += item.size
        if held >= room_bytes:
            return j + 1, held
    return len(pairs), held
