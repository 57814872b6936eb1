"""The durable outbox of one uplink: messages waiting for the upstream's confirm.

Theory of operation
-------------------
Records live in the ``uplink`` column family, key ``b"o" + NAME + b"\\0" + seq (8 bytes BE)``,
value ``enqueued_ms (8 bytes BE) + flags (1 byte: 1 = RETAIN, 2 = PROPS) + topic length
(2 bytes BE) + topic + [PROPS: the message's properties, ``msgprops.py``] + payload``.
``seq`` grows by one per message and is never reused, also across restarts with an empty
outbox: key ``b"n" + NAME`` holds a high-water mark, reserved ``_RESERVE`` seqs
ahead in the same batch as the record that crosses it. Key order is publish order, so the
upstream sees each topic's messages in order, and ``DEVICE/UPLINK/SEQ`` is a unique message id.

``stage`` puts a record into the group-commit batch of the publish that produced it: the
local PUBACK / confirm waits for that same commit, so "acknowledged locally" already covers
the copy for upstream. ``confirm(seq)`` stages the record's delete once the upstream confirmed
exactly that message; a crash before that commit only means the message is sent again (an
upstream duplicate, bounded by the in-flight window), never that it is lost.

Links read records back from RocksDB (``read``), never from the pending batch, so nothing is
sent upstream before it is durable here. Sizes stay in memory as 4 bytes per waiting message
(``_Sizes``), which is what the byte/message bounds and the drop-oldest policy need; the
payloads themselves are only on disk.

A record leaves the outbox only when the upstream took it (or a bound or ``uplink remove``
discards it on purpose). Two flags in the same 4 bytes mark records that wait without being
sent: ``RETURNED`` (the upstream gave it back, Basic.Return: retried with back-off by the
manager) and ``PARKED`` (its topic cannot be sent as the uplink is defined now: kept until a
changed definition can send it). Flags live in memory only: a restart re-checks every record
(``sendable`` at recovery) and sends the returned ones once more.
"""

from __future__ import annotations

import struct
import time
from array import array
from collections.abc import Callable, Iterator

from ..staged import MessageProps
from ..store import Store
from ..store.encoding import prefix_end
from .link import OutMessage
from .msgprops import decode_props, encode_props

CF = "uplink"
_SEQ = struct.Struct(">Q")
_HEAD = struct.Struct(">QBH")
_RESERVE = 1024
_RETAIN = 1
_PROPS = 2
_CHUNK = 4096
#: Flags of a waiting record in ``_Sizes`` (the low 30 bits hold the size + 1).
RETURNED = 1 << 30
PARKED = 1 << 31
_SIZE_MASK = RETURNED - 1
_FLAGS = RETURNED | PARKED


class _Sizes:
    """Record sizes (+1, so 0 means "gone") and flags by seq, from the oldest waiting seq on.

    Chunked ``array('I')``: 4 bytes per message, O(1) append, lookup and head advance. A
    record of 1 GiB or more (impossible within the brokers' packet limits) is counted as
    just under 1 GiB, so its size can never spill into the flag bits."""

    __slots__ = ("_chunks", "_head", "_used", "first")

    def __init__(self, first: int) -> None:
        self.first = first          # seq of the first slot of _chunks[0]
        self._head = 0              # slots of _chunks[0] already released
        self._used = 0              # slots in all chunks
        self._chunks: list[array[int]] = []

    @property
    def end(self) -> int:
        """One past the last seq appended."""
        return self.first + self._used

    def append(self, seq: int, size: int) -> None:
        if not self._chunks:
            self.first, self._head, self._used = seq, 0, 0
        gap = seq - self.end
        for _ in range(gap):  # seqs skipped (records never staged): mark them gone
            self._push(0)
        self._push(min(size + 1, _SIZE_MASK))

    def _push(self, value: int) -> None:
        if not self._chunks or len(self._chunks[-1]) >= _CHUNK:
            self._chunks.append(array("I"))
        self._chunks[-1].append(value)
        self._used += 1

    def _value(self, seq: int) -> int:
        """The raw slot of ``seq`` (0: gone or never there)."""
        offset = seq - self.first
        if offset < self._head or offset < 0 or not self._chunks:
            return 0
        index, slot = divmod(offset, _CHUNK)
        if index >= len(self._chunks) or slot >= len(self._chunks[index]):
            return 0
        return self._chunks[index][slot]

    def get(self, seq: int) -> int | None:
        """The size of ``seq`` if it is still waiting, else None."""
        value = self._value(seq)
        return (value & _SIZE_MASK) - 1 if value else None

    def flags(self, seq: int) -> int:
        """``RETURNED`` / ``PARKED`` bits of a waiting ``seq`` (0 if none, or gone)."""
        return self._value(seq) & _FLAGS

    def set_flags(self, seq: int, flags: int) -> None:
        """Replace the flags of a waiting ``seq`` (the caller checked it is waiting)."""
        index, slot = divmod(seq - self.first, _CHUNK)
        chunk = self._chunks[index]
        chunk[slot] = (chunk[slot] & _SIZE_MASK) | flags

    def release(self, seq: int) -> int:
        """Mark ``seq`` gone; returns the flags it had."""
        offset = seq - self.first
        index, slot = divmod(offset, _CHUNK)
        flags = self._chunks[index][slot] & _FLAGS
        self._chunks[index][slot] = 0
        self._trim()
        return flags

    def flagged(self, start: int, flag: int) -> Iterator[int]:
        """Waiting seqs ``>= start`` carrying ``flag``, in order (a scan of the array)."""
        if not self._chunks:
            return
        offset = max(start - self.first, self._head)
        index, slot = divmod(offset, _CHUNK)
        for i in range(index, len(self._chunks)):
            chunk = self._chunks[i]
            base = self.first + i * _CHUNK
            for j in range(slot if i == index else 0, len(chunk)):
                if chunk[j] & flag:
                    yield base + j

    def _trim(self) -> None:
        """Advance past released slots at the head; free whole chunks."""
        while self._chunks:
            chunk = self._chunks[0]
            while self._head < len(chunk) and chunk[self._head] == 0:
                self._head += 1
            if self._head < _CHUNK:
                return
            self._chunks.pop(0)
            self.first += _CHUNK
            self._used -= _CHUNK
            self._head = 0

    def oldest(self) -> int | None:
        """The oldest waiting seq."""
        if not self._chunks:
            return None
        self._trim()
        chunk = self._chunks[0]
        if self._head < len(chunk):
            return self.first + self._head
        return None


def _prefix(name: str) -> bytes:
    return b"o" + name.encode() + b"\x00"


def _mark_key(name: str) -> bytes:
    return b"n" + name.encode()


def encode_record(topic: str, payload: bytes, now_ms: int, retain: bool = False,
                  props: MessageProps | None = None) -> bytes:
    raw = topic.encode()
    flags = (_RETAIN if retain else 0) | (0 if props is None else _PROPS)
    head = _HEAD.pack(now_ms, flags, len(raw)) + raw
    return head + payload if props is None else head + encode_props(props) + payload


def decode_record(value: bytes) -> tuple[int, bool, str, bytes]:
    """``(enqueued_ms, retain, topic, payload)`` (``record_props``: its properties)."""
    enqueued, flags, length = _HEAD.unpack_from(value)
    start = _HEAD.size + length
    if flags & _PROPS:
        start = decode_props(value, start)[1]
    return (enqueued, bool(flags & _RETAIN), value[_HEAD.size:_HEAD.size + length].decode(),
            value[start:])


def record_props(value: bytes) -> MessageProps | None:
    """The properties of a record (None without)."""
    if not value[_HEAD.size - 3] & _PROPS:
        return None
    return decode_props(value, _HEAD.size + _HEAD.unpack_from(value)[2])[0]


def check_record(value: bytes) -> None:
    """Raise ValueError unless ``value`` decodes (lengths, UTF-8 topic)."""
    if len(value) < _HEAD.size:
        raise ValueError("record shorter than its header")
    length = _HEAD.unpack_from(value)[2]
    if _HEAD.size + length > len(value):
        raise ValueError("topic longer than the record")
    if not bytes(value[_HEAD.size:_HEAD.size + length]).decode():  # UnicodeDecodeError too
        raise ValueError("empty topic")
    record_props(value)  # (ValueError when they do not decode)


class Outbox:
    """One uplink's outbox: stage, read back, confirm, drop, bound."""

    def __init__(self, store: Store, name: str,
                 sendable: Callable[[str], bool] | None = None) -> None:
        self.store = store
        self.name = name
        self.prefix = _prefix(name)
        self.messages = 0
        self.bytes = 0
        self.returned = 0  # waiting records flagged RETURNED
        self.parked = 0    # waiting records flagged PARKED
        self.next_seq = 1
        self.sizes = _Sizes(1)
        self._recover(sendable)

    def _key(self, seq: int) -> bytes:
        return self.prefix + _SEQ.pack(seq)

    def _seq(self, key: bytes) -> int:
        return int(_SEQ.unpack_from(key, len(self.prefix))[0])

    def _recover(self, sendable: Callable[[str], bool] | None) -> None:
        """Count what a previous run left (one scan at start-up); with ``sendable``, park
        the records whose topic it refuses (the uplink's definition may have changed)."""
        mark = self.store.get_raw(CF, _mark_key(self.name))
        if mark is not None and len(mark) == _SEQ.size:
            self.next_seq = int(_SEQ.unpack(mark)[0])
        elif mark is not None:  # recovery never crash-loops: moved aside, seqs from records
            self.store.quarantine(CF, _mark_key(self.name), mark,
                                  f"uplink {self.name} seq high-water mark of {len(mark)} bytes")
        check = _TopicCheck(sendable) if sendable is not None else None
        for key, value in self.store.iter_raw(CF, self.prefix):
            try:  # a record no link could send is moved aside now, not met later
                if len(key) != len(self.prefix) + _SEQ.size:
                    raise ValueError(f"key of {len(key)} bytes")
                check_record(value)
            except ValueError as exc:
                self.store.quarantine(CF, key, value, f"uplink {self.name} outbox record: {exc}")
                continue
            seq = self._seq(key)
            self.sizes.append(seq, len(value))
            self.messages += 1
            self.bytes += len(value)
            self.next_seq = max(self.next_seq, seq + 1)
            if check is not None and not check(value):
                self.set_flag(seq, PARKED)
        self._reserved = self.next_seq  # the first stage reserves the next block

    # ------------------------------------------------------------------ writes
    def stage(self, topic: str, payload: bytes, retain: bool = False,
              props: MessageProps | None = None) -> int:
        """Stage one message (with its ``props``) into the current group-commit batch;
        returns its seq."""
        seq = self.next_seq
        self.next_seq += 1
        if seq >= self._reserved:
            self._reserved = seq + _RESERVE
            self.store.stage_put(CF, _mark_key(self.name), _SEQ.pack(self._reserved))
        value = encode_record(topic, payload, int(time.time() * 1000), retain, props)
        self.store.stage_put(CF, self._key(seq), value)
        self.sizes.append(seq, len(value))
        self.messages += 1
        self.bytes += len(value)
        return seq

    def remove(self, seq: int) -> bool:
        """Stage the delete of ``seq`` (confirmed upstream, or dropped); False if it was
        already gone (a confirm after a drop, or a duplicate confirm)."""
        size = self.sizes.get(seq)
        if size is None:
            return False
        self.store.stage_delete_key(CF, self._key(seq))
        self._count_flags(self.sizes.release(seq), -1)
        self.messages -= 1
        self.bytes -= size
        return True

    # ------------------------------------------------------------------ flags
    def _count_flags(self, flags: int, delta: int) -> None:
        if flags & RETURNED:
            self.returned += delta
        if flags & PARKED:
            self.parked += delta

    def set_flag(self, seq: int, flag: int) -> bool:
        """Flag a waiting ``seq`` ``RETURNED`` or ``PARKED`` (0: neither, it is sent again
        normally); False if it is gone (dropped, or confirmed by an earlier connection)."""
        if self.sizes.get(seq) is None:
            return False
        old = self.sizes.flags(seq)
        if old != flag:
            self._count_flags(old, -1)
            self._count_flags(flag, +1)
            self.sizes.set_flags(seq, flag)
        return True

    def recheck(self, sendable: Callable[[str], bool], from_seq: int, limit: int
                ) -> tuple[int | None, int, int]:
        """Re-check up to ``limit`` waiting records from ``from_seq`` on: park those whose
        topic ``sendable`` refuses, unflag the rest (a returned record is then sent again
        at once under the new definition). ``(next seq or None when done, parked, freed)``."""
        check = _TopicCheck(sendable)
        parked = freed = n = 0
        for key, value in self.store.iter_raw(CF, self.prefix, start=self._key(from_seq)):
            seq = self._seq(key)
            if n >= limit:
                return seq, parked, freed
            n += 1
            if self.sizes.get(seq) is None:
                continue
            old = self.sizes.flags(seq)
            new = 0 if check(value) else PARKED
            if new != old:
                self.set_flag(seq, new)
                parked += new == PARKED
                freed += old == PARKED
        return None, parked, freed

    def drop_oldest(self) -> int | None:
        """Remove the oldest waiting message; its seq, or None if the outbox is empty."""
        seq = self.sizes.oldest()
        if seq is None:
            return None
        self.remove(seq)
        return seq

    def clear(self) -> None:
        """Stage the removal of every record (the uplink is being deleted)."""
        end = prefix_end(self.prefix)
        assert end is not None
        self.store.stage_delete_range(CF, self.prefix, end)
        self.messages = self.bytes = self.returned = self.parked = 0
        self.sizes = _Sizes(self.next_seq)

    # ------------------------------------------------------------------- reads
    def waiting(self, seq: int) -> bool:
        return self.sizes.get(seq) is not None

    def topic_of(self, seq: int) -> str | None:
        """The topic of a waiting, committed ``seq`` (None if gone)."""
        if self.sizes.get(seq) is None:
            return None
        value = self.store.get_raw(CF, self._key(seq))
        return None if value is None else decode_record(value)[2]

    def sendable_now(self, seq: int) -> bool:
        """Waiting and neither returned (waits for its retry) nor parked."""
        return self.sizes.get(seq) is not None and not self.sizes.flags(seq)

    def oldest(self) -> int | None:
        return self.sizes.oldest()

    def read(self, from_seq: int, limit: int, before: int | None = None
             ) -> Iterator[OutMessage]:
        """Still-waiting, unflagged records with ``from_seq <= seq < before``, in order, from
        disk (returned and parked records are not sent in the normal pass)."""
        if limit <= 0:
            return
        n = 0
        for key, value in self.store.iter_raw(CF, self.prefix, start=self._key(from_seq)):
            seq = self._seq(key)
            if before is not None and seq >= before:
                return
            if not self.sendable_now(seq):
                continue  # confirmed or dropped (delete not committed yet), or flagged
            enqueued, retain, topic, payload = decode_record(value)
            yield OutMessage(seq, topic, payload, enqueued, retain, record_props(value))
            n += 1
            if n >= limit:
                return

    def take_returned(self, from_seq: int, limit: int) -> list[OutMessage]:
        """Up to ``limit`` RETURNED records from ``from_seq`` on, in order, unflagged (they
        are being retried). Returned records were sent, so they are on disk."""
        out: list[OutMessage] = []
        for seq in self.sizes.flagged(from_seq, RETURNED):
            if len(out) >= limit:
                break
            value = self.store.get_raw(CF, self._key(seq))
            if value is None:  # cannot be: a returned record was read from disk
                continue
            self.set_flag(seq, 0)
            enqueued, retain, topic, payload = decode_record(value)
            out.append(OutMessage(seq, topic, payload, enqueued, retain, record_props(value)))
        return out

    def oldest_age(self) -> float:
        """Seconds since the oldest waiting message was enqueued (0 when empty)."""
        seq = self.oldest()
        if seq is None:
            return 0.0
        value = self.store.get_raw(CF, self._key(seq))
        if value is None:  # staged, not yet committed: brand new
            return 0.0
        enqueued = _HEAD.unpack_from(value)[0]
        return max(0.0, time.time() - enqueued / 1000)


class _TopicCheck:
    """``sendable`` applied to a record's topic, remembered per topic (a backlog holds a
    few topics many times; the memo is bounded)."""

    __slots__ = ("_memo", "_sendable")

    def __init__(self, sendable: Callable[[str], bool]) -> None:
        self._sendable = sendable
        self._memo: dict[bytes, bool] = {}

    def __call__(self, value: bytes) -> bool:
        length = int.from_bytes(value[_HEAD.size - 2:_HEAD.size], "big")
        raw = bytes(value[_HEAD.size:_HEAD.size + length])
        ok = self._memo.get(raw)
        if ok is None:
            ok = self._sendable(raw.decode())
            if len(self._memo) >= 4096:
                self._memo.clear()
            self._memo[raw] = ok
        return ok


def stored_outbox_names(store: Store) -> set[str]:
    """Names that have outbox records (to clean up after uplinks removed offline)."""
    names: set[str] = set()
    start = b"o"
    while True:
        item = next(iter(store.iter_raw(CF, b"o", start=start)), None)
        if item is None:
            return names
        key = item[0]
        end = key.find(b"\x00")
        try:
            if end < 1:
                raise ValueError("no uplink name in the key")
            name = key[1:end].decode()
        except ValueError as exc:  # recovery never crash-loops: moved aside
            store.quarantine(CF, key, item[1], f"uplink outbox key: {exc}")
            nxt = prefix_end(key)
            if nxt is None:
                return names
            start = nxt
            continue
        names.add(name)
        nxt = prefix_end(_prefix(name))
        if nxt is None:
            return names
        start = nxt
