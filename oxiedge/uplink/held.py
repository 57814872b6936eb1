"""Outbox records kept aside from the send order: returned by the upstream, or parked.

Theory of operation
-------------------
An outbox (``outbox.py``) sends its queue log (``store/qlog.py``) front to back, and a
record leaves the log only when the upstream confirms it. Two kinds of record must stay
but must not be sent in that order: one the upstream gave back (AMQP Basic.Return: nothing
takes its routing key; retried in rounds with back-off) and one the uplink cannot send as
it is defined now (*parked*: no upstream name for its topic, or refused by the upstream).
Left in the log, such a record would sit among the unacknowledged ones for as long as it
waits, and hold the log's floor (and its range deletes) back behind it.

So it is moved aside, into its own key range: key ``b"h" + NAME + b"\\0" + seq`` (8 bytes
BE), the same value. The put here and the log's ``ack`` of that seq (which removes the
record there) are staged into the same group-commit batch, so a crash leaves the record in
exactly one of the two places.

In memory a held record costs 12 bytes: its seq in a sorted ``array('Q')`` and, at the
same index, its size + 1 and its state in an ``array('I')`` (0: gone). The states:

    WAITING   to be sent by the next take, before the log (freed by a re-check, or found at
              start-up: a record's state is not stored, so it is sent once more, as before)
    RETURNED  waits for its retry round
    PARKED    waits for a definition that can send it
    SENDING   in flight

A removed entry is zeroed where it stands; the arrays are compacted once more than half of
them is gone (confirms come mostly in seq order, so compaction is rare and cheap). Start-up
reads every held record once (``load``), parking those the definition cannot send.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Callable, Iterator

from ..store.encoding import prefix_end
from ..store.qlog_api import LogStore

WAITING, RETURNED, PARKED, SENDING = 0, 1, 2, 3
_SHIFT = 29
_SIZE_MASK = (1 << _SHIFT) - 1
_SEQ = struct.Struct(">Q")
#: Dead slots tolerated before a compaction (and then only when they are the majority).
_COMPACT_MIN = 1024


class Held:
    """One outbox's held records: the compact index and their staged writes."""

    __slots__ = ("_dead", "_end", "_info", "_seqs", "bytes", "cf", "count", "prefix",
                 "states", "store")

    def __init__(self, store: LogStore, cf: str, prefix: bytes) -> None:
        self.store = store
        self.cf = cf
        self.prefix = prefix
        end = prefix_end(prefix)
        assert end is not None
        self._end = end
        self._seqs: array[int] = array("Q")
        self._info: array[int] = array("I")
        self._dead = 0
        self.count = 0
        self.bytes = 0
        self.states = [0, 0, 0, 0]  # held records per state

    def key(self, seq: int) -> bytes:
        return self.prefix + _SEQ.pack(seq)

    @property
    def returned(self) -> int:
        return self.states[RETURNED]

    @property
    def parked(self) -> int:
        return self.states[PARKED]

    @property
    def waiting(self) -> int:
        return self.states[WAITING]

    # ------------------------------------------------------------------- index
    def _index(self, seq: int) -> int:
        """Where ``seq`` stands in the arrays, or -1 if it is not held."""
        seqs = self._seqs
        i = bisect.bisect_left(seqs, seq)
        if i < len(seqs) and seqs[i] == seq and self._info[i]:
            return i
        return -1

    def _add(self, seq: int, size: int, state: int) -> None:
        info = min(size + 1, _SIZE_MASK) | state << _SHIFT
        seqs = self._seqs
        if not seqs or seqs[-1] < seq:
            seqs.append(seq)
            self._info.append(info)
        else:
            i = bisect.bisect_left(seqs, seq)
            if i < len(seqs) and seqs[i] == seq:  # a dead slot of the same seq
                if self._info[i]:
                    return
                self._dead -= 1
                self._info[i] = info
            else:
                seqs.insert(i, seq)
                self._info.insert(i, info)
        self.count += 1
        self.bytes += size
        self.states[state] += 1

    def state(self, seq: int) -> int | None:
        """The state of a held ``seq``, or None if it is not held."""
        i = self._index(seq)
        return None if i < 0 else self._info[i] >> _SHIFT

    def set_state(self, seq: int, state: int) -> bool:
        """Change the state of a held ``seq``; False if it is not held."""
        i = self._index(seq)
        if i < 0:
            return False
        info = self._info[i]
        self.states[info >> _SHIFT] -= 1
        self.states[state] += 1
        self._info[i] = (info & _SIZE_MASK) | state << _SHIFT
        return True

    def seqs(self, state: int, start: int = 0) -> Iterator[int]:
        """Held seqs ``>= start`` in ``state``, in order (a scan of the index; the caller
        may change states while it iterates, not add or remove)."""
        seqs, info = self._seqs, self._info
        for i in range(bisect.bisect_left(seqs, start), len(seqs)):
            value = info[i]
            if value and value >> _SHIFT == state:
                yield seqs[i]

    def oldest(self) -> int | None:
        info = self._info
        for i in range(len(info)):
            if info[i]:
                return int(self._seqs[i])
        return None

    def last(self) -> int:
        """The greatest seq held or once held since the last compaction (0: none)."""
        return int(self._seqs[-1]) if self._seqs else 0

    # ------------------------------------------------------------------ writes
    def put(self, seq: int, value: bytes, state: int) -> None:
        """Stage ``value`` as the held record of ``seq`` (the caller removes it from the
        log in the same batch)."""
        self.store.stage_put(self.cf, self.key(seq), value)
        self._add(seq, len(value), state)

    def remove(self, seq: int) -> bool:
        """Stage the delete of a held ``seq`` (confirmed, or dropped); False if not held."""
        i = self._index(seq)
        if i < 0:
            return False
        info = self._info[i]
        self._info[i] = 0
        self.count -= 1
        self.bytes -= (info & _SIZE_MASK) - 1
        self.states[info >> _SHIFT] -= 1
        self.store.stage_delete_key(self.cf, self.key(seq))
        self._dead += 1
        if self._dead >= _COMPACT_MIN and self._dead * 2 > len(self._info):
            self._compact()
        return True

    def _compact(self) -> None:
        live = [i for i, info in enumerate(self._info) if info]
        self._seqs = array("Q", (self._seqs[i] for i in live))
        self._info = array("I", (self._info[i] for i in live))
        self._dead = 0

    def clear(self) -> None:
        """Stage the removal of every held record (the uplink is being removed)."""
        self.store.stage_delete_range(self.cf, self.prefix, self._end)
        self._seqs, self._info, self._dead = array("Q"), array("I"), 0
        self.count = self.bytes = 0
        self.states = [0, 0, 0, 0]

    # ------------------------------------------------------------------- reads
    def read(self, seq: int) -> bytes | None:
        """The record of a held, committed ``seq`` (None: gone, or only staged)."""
        return self.store.get_raw(self.cf, self.key(seq))

    def records(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(seq, value)`` of every committed held record from ``start`` on, in order."""
        width = len(self.prefix) + _SEQ.size
        for key, value in self.store.iter_range(self.cf, self.key(start), self._end):
            if len(key) == width:
                yield _SEQ.unpack_from(key, len(self.prefix))[0], value

    def load(self, check: Callable[[bytes], None], sendable: Callable[[bytes], bool] | None,
             what: str) -> None:
        """Index what a previous run held (start-up): each record WAITING, or PARKED when
        ``sendable`` refuses it; one that ``check`` refuses (ValueError) is quarantined."""
        width = len(self.prefix) + _SEQ.size
        for key, value in self.store.iter_range(self.cf, self.prefix, self._end):
            try:
                if len(key) != width:
                    raise ValueError(f"key of {len(key)} bytes")
                check(value)
            except ValueError as exc:  # recovery never crash-loops: moved aside
                self.store.quarantine(self.cf, key, value, f"{what} held record: {exc}")
                continue
            seq = _SEQ.unpack_from(key, len(self.prefix))[0]
            ok = sendable is None or sendable(value)
            self._add(seq, len(value), WAITING if ok else PARKED)
