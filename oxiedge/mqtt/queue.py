"""What one session owes at QoS 1/2, as a queue log (``oxiedge/store/qlog.py``).

A durable session's queue is the run of its ``m`` records (``persist.py``: key ``m`` + owner
+ seq, so key order is delivery order), with its counters in the ``c`` record. Messages in
memory are ``Pending``; an offline session's messages stay on disk only (``keep`` False)
once their round is synced, and are read back a window at a time when its client is
attached again. A restart reads no message: ``SessionQueue.recover`` reads the counters,
the head and the tail. A clean session (or ``--no-mqtt-persist``) queues in memory.

Re-deliveries carry DUP (MQTT-3.3.1-1): a message in memory knows whether it was sent; a
message read back was not sent by this run, but may have been before a restart, so every
seq below the tail found at recovery is read back with DUP set.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from oxiedge.mqtt import persist
from oxiedge.mqtt.message import Message, message_of
from oxiedge.store.qlog import WINDOW, WINDOW_BYTES, LogStore, QueueLog, Tally
from oxiedge.store.qlog_read import decode_each

_TOPICS_MAX = 256  # topics a session queue remembers as checked (then forgotten at once)


class Pending:
    """A message owed to one session at QoS 1 or 2."""

    __slots__ = ("dup", "held", "msg", "qos", "retain", "seq", "size")

    def __init__(self, seq: int, msg: Message, qos: int, retain: bool, dup: bool,
                 size: int) -> None:
        self.seq = seq
        self.size = size  # what it counts in its queue's bytes: topic + payload
        self.msg = msg
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.held = False  # True: its commit round is still open (see ``session.Hold``)


class Reader(Protocol):
    """The read check of a session's client (``oxiedge.access.grants.Grants``)."""

    def may_read(self, topic: str) -> bool: ...


class PendingCodec:
    """``m`` records <-> ``Pending``; a queue counts topic + payload bytes."""

    __slots__ = ("_head", "_last", "_topics", "dup_below", "reader")

    def __init__(self) -> None:
        self.dup_below = 0  # seqs below: possibly sent before a restart (DUP)
        # Set once a client whose read rules apply is attached: a message it may not read
        # is dropped when it is read back (``Broker.drop_unreadable`` did the memory part).
        self.reader: Reader | None = None
        # Topics read back, checked once (a backlog holds a few topics many times): the
        # raw topic -> (topic, the raw topic every message of it shares).
        self._topics: dict[bytes, tuple[str, bytes]] = {}
        # The header (flags, topic length, topic) of the last MQTT 3.1.1 record decoded and
        # what it decoded to: a backlog's next record has the same one, mostly. (Starts as
        # flags 0xFF, which no record has: ``decode`` refuses QoS 3.)
        self._head = b"\xff"
        self._last: tuple[str, bytes, int, bool] = ("", b"", 0, False)

    def decode(self, seq: int, value: bytes) -> Pending | None:
        """``persist.check_msg_value`` with the topic checked once per topic (and a record
        with the header of the one before checked by comparing that header)."""
        head = self._head
        if value.startswith(head) and self.reader is None:
            topic, topic_b, qos, retain = self._last
            return Pending(seq, Message(topic, value[len(head):], topic_b), qos, retain,
                           seq < self.dup_below, len(value) - 3)
        length = len(value)
        if length < 3:
            raise ValueError("message header does not match its length")
        flags = value[0]
        end = 3 + ((value[1] << 8) | value[2])
        if end > length or flags & 3 == 3:
            raise ValueError(f"message header does not match its length (flags {flags})")
        raw = value[3:end]
        known = self._topics.get(raw)
        if known is None:
            if len(self._topics) >= _TOPICS_MAX:
                self._topics.clear()
            known = self._topics[raw] = (persist.check_topic(raw.decode("utf-8")), raw)
        topic, topic_b = known
        reader = self.reader
        if reader is not None and not reader.may_read(topic):
            return None
        if flags & persist.MSG_V5:  # an MQTT 5 message with its properties
            msg: Message = message_of(topic, topic_b, value, end)
            size = len(msg.payload) + end - 3
        else:
            msg = Message(topic, value[end:], topic_b)
            size = length - 3  # topic + payload
            self._head, self._last = value[:end], (topic, topic_b, flags & 3, bool(flags & 4))
        return Pending(seq, msg, flags & 3, bool(flags & 4), seq < self.dup_below, size)

    def raw_size(self, value: bytes) -> int:
        return max(0, len(value) - 3)

    def decode_run(self, pairs: list[tuple[bytes, bytes]], i: int, width: int,
                   out: deque[Pending], room_bytes: int) -> tuple[int, int]:
        """``decode`` through a run of records (``qlog_api.Codec``)."""
        return decode_each(self.decode, pairs, i, width, out, room_bytes)


class SessionQueue(QueueLog[Pending]):
    """The queue of one session (module docstring)."""

    __slots__ = ()

    codec: PendingCodec

    def __init__(self, store: LogStore | None, owner_b: bytes, tally: Tally | None = None
                 ) -> None:
        super().__init__(PendingCodec(), store, persist.CF, persist.MSG + owner_b,
                         persist.count_key(owner_b), WINDOW, WINDOW_BYTES, tally)

    def recover(self) -> None:
        super().recover()
        self.codec.dup_below = self.tail

    def waiting(self) -> bool:
        """A message waits for the in-flight window (one held for its commit round, in
        memory at the tail, does not count: it waits for the commit)."""
        if not len(self):
            return False
        newest = self.newest_in_memory()
        return newest is None or not newest.held
