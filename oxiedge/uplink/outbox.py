"""The durable outbox of one uplink: messages waiting for the upstream's confirm.

Theory of operation
-------------------
An outbox is a queue log (``oxiedge/store/qlog.py``, the one MQTT session queues and AMQP
queues use) in the ``uplink`` column family: records ``b"o" + NAME + b"\\0" + seq`` (8 bytes
BE), value ``enqueued_ms (8 bytes BE) + flags (1 byte: 1 = RETAIN, 2 = PROPS) + topic length
(2 bytes BE) + topic + [PROPS: the message's properties, ``msgprops.py``] + payload``, and
the log's counters record ``b"c" + NAME`` (floor, tail, count, bytes). Key order is publish
order, so the upstream sees each topic's messages in order, and ``DEVICE/UPLINK/SEQ`` is a
unique message id: ``seq`` is never reused, also across restarts with an empty outbox (the
counters record keeps the tail).

``stage`` appends a record into the group-commit batch of the publish that produced it: the
local PUBACK / confirm waits for that same commit, so "acknowledged locally" already covers
the copy for upstream. While a link is up the message also stays in the log's window in
memory (``keep``), so a link that keeps up sends without reading back; otherwise it costs
nothing in memory once its round is synced, and is read back a window at a time, in large
sequential reads. ``take`` pops the next messages (they are *out*, in flight) but only
those below a seq the caller knows is durable: nothing is sent upstream before it is on
disk here. ``remove`` acknowledges one (the upstream confirmed exactly that message); a
crash before that commit only means it is sent again (an upstream duplicate, bounded by the
in-flight window), never that it is lost. ``release`` puts what a dead connection had in
flight back in its place, to be sent again in order.

Records that must wait without being sent - returned by the upstream (Basic.Return) or
parked (no upstream name as the uplink is defined now) - are moved aside into their own key
range with a compact index (``held.py``): 12 bytes each in memory, nothing per message of
the log itself. A restart reads the log's counters, head and tail (no record), and the held
records.

Data dirs written before the queue log (records of the same key and value, a seq
high-water mark ``b"n" + NAME``, no counters record): the log counts their records once at
the first start and writes its counters from then on; the mark is honoured until the log's
tail has passed it, then removed. Nothing is rewritten.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Callable, Iterator

from ..staged import MessageProps
from ..store import Store
from ..store.encoding import prefix_end
from ..store.qlog import QueueLog
from ..store.qlog_read import decode_each
from ..store.qlog_recover import floor_of
from .held import PARKED, RETURNED, SENDING, WAITING, Held
from .link import OutMessage
from .msgprops import decode_props, encode_props

__all__ = ["CF", "PARKED", "RETURNED", "Outbox", "check_record", "decode_record",
           "encode_record", "record_props", "stored_outbox_names"]

CF = "uplink"
_SEQ = struct.Struct(">Q")
_HEAD = struct.Struct(">QBH")
_RETAIN = 1
_PROPS = 2
#: Key tags: the log's records, held records (``held.py``), counters, the old seq mark.
_LOG, _HELD, _COUNTERS, _MARK = b"o", b"h", b"c", b"n"
#: ``(seq, value)`` of a stored record.
Record = tuple[int, bytes]


def _prefix(name: str, tag: bytes = _LOG) -> bytes:
    return tag + name.encode() + b"\x00"


def encode_record(topic: str, payload: bytes, now_ms: int, retain: bool = False,
                  props: MessageProps | None = None) -> bytes:
    raw = topic.encode()
    flags = (_RETAIN if retain else 0) | (0 if props is None else _PROPS)
    head = _HEAD.pack(now_ms, flags, len(raw)) + raw
    return head + payload if props is None else head + encode_props(props) + payload


def message(seq: int, value: bytes) -> OutMessage:
    """The message of record ``value``; ValueError if it does not decode."""
    if len(value) < _HEAD.size:
        raise ValueError("record shorter than its header")
    enqueued, flags, length = _HEAD.unpack_from(value)
    start = _HEAD.size + length
    if start > len(value):
        raise ValueError("topic longer than the record")
    topic = value[_HEAD.size:start].decode()  # (UnicodeDecodeError is a ValueError)
    if not topic:
        raise ValueError("empty topic")
    props = None
    if flags & _PROPS:
        props, start = decode_props(value, start)
    return OutMessage(seq, topic, value[start:], enqueued, bool(flags & _RETAIN), props,
                      len(value))


def decode_record(value: bytes) -> tuple[int, bool, str, bytes]:
    """``(enqueued_ms, retain, topic, payload)`` (``record_props``: its properties)."""
    m = message(0, value)
    return m.enqueued_ms, m.retain, m.topic, m.payload


def record_props(value: bytes) -> MessageProps | None:
    """The properties of a record (None without)."""
    return message(0, value).props


def check_record(value: bytes) -> None:
    """Raise ValueError unless ``value`` decodes (lengths, UTF-8 topic, properties)."""
    message(0, value)


class RecordCodec:
    """Outbox records -> ``OutMessage`` for the queue log (``qlog_api.Codec``): ValueError
    for a record that does not decode (the log quarantines it)."""

    __slots__ = ("held",)

    def __init__(self, held: Held) -> None:
        self.held = held

    def decode(self, seq: int, value: bytes) -> OutMessage | None:
        if self.held.count and self.held.state(seq) is not None:
            return None  # moved aside (cannot be: the same batch removed it from the log)
        return message(seq, value)

    def raw_size(self, value: bytes) -> int:
        return len(value)

    def decode_run(self, pairs: list[tuple[bytes, bytes]], i: int, width: int,
                   out: deque[OutMessage], room_bytes: int) -> tuple[int, int]:
        """``decode`` through a run of records (``qlog_api.Codec``)."""
        return decode_each(self.decode, pairs, i, width, out, room_bytes)


class Outbox:
    """One uplink's outbox: stage, take, confirm, hold aside, drop, bound (module
    docstring)."""

    def __init__(self, store: Store, name: str,
                 sendable: Callable[[str], bool] | None = None) -> None:
        """Recover what a previous run left; with ``sendable``, the held records whose
        topic it refuses are parked (the uplink's definition may have changed)."""
        self.store = store
        self.name = name
        self.prefix = _prefix(name)
        self.held = Held(store, CF, _prefix(name, _HELD))
        self.log: QueueLog[OutMessage] = QueueLog(
            RecordCodec(self.held), store, CF, self.prefix, _COUNTERS + name.encode())
        self.held.load(check_record, _TopicCheck(sendable) if sendable is not None else None,
                       f"uplink {name}")
        self.log.recover()
        self.next_seq = max(1, self.log.tail, self.held.last() + 1)
        mark_key = _MARK + name.encode()
        mark = store.get_raw(CF, mark_key)
        if mark is not None and len(mark) != _SEQ.size:  # moved aside, seqs from records
            store.quarantine(CF, mark_key, mark,
                             f"uplink {name} seq high-water mark of {len(mark)} bytes")
        elif mark is not None:  # an outbox written before the queue log (module docstring)
            top = int(_SEQ.unpack(mark)[0])
            if self.log.tail >= top:
                store.stage_delete_key(CF, mark_key)  # the counters record carries it now
            self.next_seq = max(self.next_seq, top)

    # ------------------------------------------------------------------ writes
    def stage(self, topic: str, payload: bytes, retain: bool = False,
              props: MessageProps | None = None, keep: bool = False) -> int:
        """Stage one message (with its ``props``) into the current group-commit batch;
        ``keep``: a link is up, hold it in memory too. Returns its seq."""
        seq = self.next_seq
        self.next_seq = seq + 1
        now_ms = int(time.time() * 1000)
        value = encode_record(topic, payload, now_ms, retain, props)
        size = len(value)
        self.log.append(OutMessage(seq, topic, payload, now_ms, retain, props, size), size,
                        value, keep)
        return seq

    def remove(self, seq: int) -> bool:
        """``seq`` leaves the outbox (confirmed upstream, or dropped); False if it was not
        in flight or held (a confirm after a drop, or a duplicate confirm)."""
        return self.log.ack(seq) or self.held.remove(seq)

    def hold(self, seq: int, state: int) -> bool:
        """Set ``seq`` aside as ``RETURNED`` / ``PARKED`` (``held.py``): an in-flight record
        of the log moves to the held range, a held one changes state. False if it is
        neither (dropped, or confirmed meanwhile)."""
        held = self.held
        if held.set_state(seq, state):
            return True
        if seq not in self.log.out:
            return False
        value = self.store.get_raw(CF, self.log.key(seq))
        if value is None:  # cannot be: only committed records are taken
            return False
        held.put(seq, value, state)
        self.log.ack(seq)
        return True

    def release(self, items: list[OutMessage]) -> None:
        """In-flight ``items`` of a connection that ended go back to their places: the
        log's in seq order, held ones to be sent again first."""
        back = []
        for m in items:
            if self.held.state(m.seq) == SENDING:
                self.held.set_state(m.seq, WAITING)
            else:
                back.append(m)
        if back:
            self.log.put_back(back)

    def drop_oldest(self) -> int | None:
        """Remove the oldest message not in flight; its seq, or None if there is none."""
        held = self.held.oldest()
        item = self.log.peek()
        if item is not None and (held is None or item.seq < held):
            self.log.drop_oldest()
            return item.seq
        if held is not None:
            self.held.remove(held)
        return held

    def clear(self) -> None:
        """Stage the removal of every record (the uplink is being deleted); the counters
        record stays, with the tail: seqs are not reused."""
        log = self.log
        for seq in list(log.out):
            log.ack(seq)
        log.discard_waiting()
        end = prefix_end(self.prefix)
        assert end is not None
        self.store.stage_delete_range(CF, self.prefix, end)
        self.held.clear()

    # ------------------------------------------------------------------- reads
    def take(self, limit: int, before: int) -> list[OutMessage]:
        """Up to ``limit`` next messages of the log with seqs below ``before`` (durable),
        in order; they are in flight until ``remove``, ``hold`` or ``release``."""
        log, out = self.log, list[OutMessage]()
        while len(out) < limit:
            item = log.peek()
            if item is None or item.seq >= before:
                break
            out.append(log.pop())
        return out

    def take_held(self, state: int, start: int, limit: int) -> list[OutMessage]:
        """Up to ``limit`` held records in ``state`` from seq ``start`` on, in order; they
        are in flight (``SENDING``). A record not committed yet waits for the next call."""
        held, out = self.held, list[OutMessage]()
        for seq in held.seqs(state, start):
            if len(out) >= limit:
                break
            value = held.read(seq)
            if value is None:
                continue
            held.set_state(seq, SENDING)
            out.append(message(seq, value))
        return out

    def topic_of(self, seq: int) -> str | None:
        """The topic of an in-flight or held, committed ``seq`` (None if gone)."""
        if self.held.state(seq) is not None:
            value = self.held.read(seq)
        elif seq in self.log.out:
            value = self.store.get_raw(CF, self.log.key(seq))
        else:
            return None
        return None if value is None else decode_record(value)[2]

    def recheck(self, sendable: Callable[[str], bool], from_seq: int, limit: int
                ) -> tuple[int | None, int, int]:
        """Re-check up to ``limit`` held records from ``from_seq`` on: park those whose
        topic ``sendable`` refuses, free the rest (a returned record is then sent again at
        once under the new definition). ``(next seq or None when done, parked, freed)``.
        The log's records are checked by the link as it sends them (``io.park``)."""
        check, held = _TopicCheck(sendable), self.held
        parked = freed = n = 0
        for seq, value in held.records(from_seq):
            if n >= limit:
                return seq, parked, freed
            n += 1
            old = held.state(seq)
            if old is None or old == SENDING:
                continue
            new = WAITING if check(value) else PARKED
            if new != old:
                held.set_state(seq, new)
                parked += new == PARKED
                freed += old == PARKED
        return None, parked, freed

    def records(self) -> Iterator[Record]:
        """``(seq, value)`` of every committed record, the log's then the held ones (tests
        and admin: no counter is changed)."""
        end = prefix_end(self.prefix)
        assert end is not None
        for key, value in self.store.iter_range(CF, self.log.key(self._floor()), end):
            yield _SEQ.unpack_from(key, len(self.prefix))[0], value
        yield from self.held.records()

    def _floor(self) -> int:
        """The log's stored floor: every seq below was removed (its records may wait for
        their range delete), so a listing starts there."""
        return floor_of(self.store, CF, self.log.meta_key)

    def oldest_age(self) -> float:
        """Seconds since the oldest waiting message was enqueued (0 when empty)."""
        end = prefix_end(self.prefix)
        assert end is not None
        # (A record too short for its header is quarantined when read back, not here.)
        first = [_HEAD.unpack_from(item[1])[0] for item in (
            next(iter(self.store.iter_range(CF, self.log.key(self._floor()), end)), None),
            next(self.held.records(), None)) if item is not None and len(item[1]) >= _HEAD.size]
        if not first:  # empty, or staged and not yet committed: brand new
            return 0.0
        return max(0.0, time.time() - min(first) / 1000)


    # ---------------------------------------------------------------- counters
    @property
    def messages(self) -> int:
        return self.log.count + self.held.count

    @property
    def bytes(self) -> int:
        return self.log.bytes + self.held.bytes

    @property
    def returned(self) -> int:
        """Held records waiting for a retry round."""
        return self.held.returned

    @property
    def parked(self) -> int:
        """Held records waiting for a definition that can send them."""
        return self.held.parked

    @property
    def waiting(self) -> int:
        """Records waiting to be sent (held ones to send again included)."""
        return len(self.log) + self.held.waiting

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
    """Names that have outbox records, sent or held (to clean up after uplinks removed
    offline)."""
    names: set[str] = set()
    for tag in (_LOG, _HELD):
        start = tag
        while True:
            item = next(iter(store.iter_raw(CF, tag, start=start)), None)
            if item is None:
                break
            key = item[0]
            end = key.find(b"\x00")
            try:
                if end < 1:
                    raise ValueError("no uplink name in the key")
                name = key[1:end].decode()
                nxt = prefix_end(_prefix(name, tag))
            except ValueError as exc:  # recovery never crash-loops: moved aside
                store.quarantine(CF, key, item[1], f"uplink outbox key: {exc}")
                nxt = prefix_end(key)
            else:
                names.add(name)
            if nxt is None:
                break
            start = nxt
    return names
