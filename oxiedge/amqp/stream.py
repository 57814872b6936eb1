"""Stream queues (``x-queue-type: stream``) over AMQP 0-9-1, as RabbitMQ serves them.

Theory of operation
-------------------
A :class:`StreamQueue` is a queue whose messages are never removed by consuming: every
message published to it is appended to its log (``oxiedge/store/streamlog.py``) at the
next *offset*, persistent or not, and each consumer reads the log from where it chose to
start (``x-stream-offset``, ``stream_args.py``) at its own pace. The rest of the broker sees
an ordinary :class:`~oxiedge.amqp.queues.Queue` (routing, bindings, declare, delete, the
admin rows) with three differences, each a small hook:

* the publish path appends (``PublishPath.enqueue_message`` calls :meth:`append`) and, as
  for any durable queue, the publisher's confirm waits for the round's sync (``COMMIT``);
* a consumer is attached at its start offset (``ConsumerSet.consume`` asks
  :meth:`consumer_arguments` first), and :meth:`dispatch` hands each consumer the records
  from its own cursor while it has credit (its prefetch): a delivery is a
  :class:`QueuedMessage` that is not ``stored``, so its ack deletes nothing and only gives
  the credit back; a nack, reject or recover of one does the same (RabbitMQ 3.13+; 3.10
  answered 540), and a closing channel's delivery goes nowhere;
* ``basic.get`` and ``queue.purge`` are refused with 540, as RabbitMQ does; the count of
  ready messages (declare-ok, ``oxiedge queues``) is the number of messages kept, and a
  deleted stream's records go with it (``ready_count``, ``drop_ready``).

The ``x-stream-offset`` header every delivery carries is written into the message's stored
properties when it is appended (its offset is known then), so a delivery costs no header
rewrite. Consumers see a record once its round is synced (the committer calls
:meth:`Streams.synced` after each round, wired by the service), so an offset a consumer was
given always names the same message, across a crash too. Retention (``x-max-age``,
``x-max-length-bytes``) removes whole segments when the active segment fills and at
start-up, as RabbitMQ evaluates it on segment roll-over.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from oxiedge.amqp import persist, properties
from oxiedge.amqp.constants import NOT_IMPLEMENTED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import Long
from oxiedge.amqp.queued import QueueConsumer, QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.stream_args import StartAt, interval_seconds, stream_consume
from oxiedge.staged import COMMIT
from oxiedge.store.qlog_api import LogStore
from oxiedge.store.streamlog import SEGMENT_BYTES, Record, StreamLog

#: Key prefixes of stream records and segment records in the ``amqp`` family.
RECORD_PREFIX = b"s"
SEGMENT_PREFIX = b"t"
#: Records (and bytes, about) one read of a consumer behind the window takes.
READ_AHEAD = 128
READ_AHEAD_BYTES = 1 << 20


def open_log(store: LogStore, qid: int, arguments: dict[str, Any]) -> StreamLog:
    """The log of stream ``qid`` (not recovered yet)."""
    segment = arguments.get("x-stream-max-segment-size-bytes")
    return StreamLog(store, persist.CF, qid, record_prefix=RECORD_PREFIX,
                     segment_prefix=SEGMENT_PREFIX,
                     segment_bytes=int(segment) if segment else SEGMENT_BYTES)


def log_figures(log: StreamLog) -> dict[str, Any]:
    """A stream's figures in its ``oxiedge queues`` row (live, and offline from disk)."""
    return {"ready": len(log), "type": "stream", "first_offset": log.first,
            "next_offset": log.tail, "committed_offset": log.committed, "bytes": log.bytes,
            "segments": len(log.segments), "limit": 0}


def not_supported(q: Queue, what: str) -> AmqpError:
    """RabbitMQ's refusal of a method a stream does not serve (540, connection error)."""
    return AmqpError(NOT_IMPLEMENTED,
                     f"{what} not supported by stream queues queue '{q.name}' in vhost '/'",
                     hard=True)


_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">q")
#: The ``x-stream-offset`` entry of a headers table, up to its value (a signed long).
_ENTRY = b"\x0fx-stream-offset" + b"l"
_HEADERS = 0x2000


def with_offset(props: bytes, offset: int) -> bytes:
    """Raw content properties with the header ``x-stream-offset`` = ``offset`` added.

    The headers table is the third property (after content-type and content-encoding): the
    entry is appended to it in place, every other byte kept. Properties that already carry
    the header (a stream message published again) or that do not parse take the general
    rewrite (``properties.rewrite``), which replaces it."""
    try:
        flags = _H.unpack_from(props)[0]
        if not flags & 1:  # (no second flags word)
            off = 2
            if flags & 0x8000:
                off += 1 + props[off]
            if flags & 0x4000:
                off += 1 + props[off]
            entry = _ENTRY + _Q.pack(offset)
            if not flags & _HEADERS:
                return b"".join((_H.pack(flags | _HEADERS), props[2:off],
                                 _I.pack(len(entry)), entry, props[off:]))
            n = _I.unpack_from(props, off)[0]
            table = props[off + 4 : off + 4 + n]
            if len(table) == n and _ENTRY[:-1] not in table:
                return b"".join((props[:off], _I.pack(n + len(entry)), table, entry,
                                 props[off + 4 + n :]))
    except (IndexError, struct.error):
        pass
    try:
        headers: dict[str, Any] = dict(properties.headers_of(props))
    except AmqpError:
        headers = {}
    headers["x-stream-offset"] = Long(offset)
    return properties.rewrite(props, headers)


class Reader:
    """One consumer's place in the log and the records it read ahead."""

    __slots__ = ("ahead", "cursor")

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor
        self.ahead: deque[Record] = deque()


class Streams:
    """What every stream of one broker shares: the store, the sync notice, counters."""

    def __init__(self, store: LogStore | None) -> None:
        self.store = store
        #: streams with appended records not known synced yet
        self.unsynced: set[StreamQueue] = set()
        self.counters = {"stream_appended": 0, "stream_delivered": 0,
                         "stream_retention_removed": 0}

    def open(self, q: StreamQueue) -> None:
        """Give a new (declared or recovered) stream its log and read its segments."""
        a = q.arguments
        assert self.store is not None, "streams need a store"
        q.log = open_log(self.store, q.qid, a)
        q.streams = self
        age = interval_seconds(a["x-max-age"]) if "x-max-age" in a else None
        q.max_age_ms = None if age is None else age * 1000
        q.max_length_bytes = int(a["x-max-length-bytes"]) if "x-max-length-bytes" in a else None
        q.max_bytes = None  # (the broker's --amqp-queue-bytes bounds ready messages only)
        q.plain = False  # every publish goes through enqueue_message, which appends
        q.log.recover()
        q.retain()

    def synced(self, generation: int) -> None:
        """The committer synced its rounds up to ``generation`` (``after_sync``): the
        streams that appended in them deliver what their consumers may now see."""
        for q in list(self.unsynced):
            if q.log.synced(generation):
                self.unsynced.discard(q)
            if q.readers and not q.deleted:
                q.dispatch()

    def status(self, queues: Any) -> dict[str, int]:
        """The figures of ``oxiedge status`` (section ``amqp``)."""
        streams = [q for q in queues if isinstance(q, StreamQueue)]
        return {"streams": len(streams),
                "stream_messages": sum(len(q.log) for q in streams),
                "stream_bytes": sum(q.log.bytes for q in streams),
                "stream_segments": sum(len(q.log.segments) for q in streams),
                **self.counters}


class StreamQueue(Queue):
    """A stream queue (see the module docstring)."""

    __slots__ = ("_attach_at", "log", "max_age_ms", "max_length_bytes", "readers", "streams")

    log: StreamLog
    streams: Streams

    def __init__(self, name: str, qid: int, **kw: Any) -> None:
        super().__init__(name, qid, **kw)
        self.readers: dict[QueueConsumer, Reader] = {}
        self.max_age_ms: int | None = None
        self.max_length_bytes: int | None = None
        self._attach_at: StartAt | None = None

    # -- appending ------------------------------------------------------------------------

    def append(self, exchange: str, routing_key: str, props: bytes, body: bytes) -> int:
        """Append one message (whatever its delivery mode: a stream keeps everything);
        returns ``COMMIT``: the publisher's confirm waits for the round's sync."""
        log = self.log
        offset = log.tail
        props = with_offset(props, offset)
        now_ms = int(self.clock() * 1000)
        log.append(persist.encode_record(exchange, routing_key, props, body), now_ms)
        self.published += 1
        self.streams.counters["stream_appended"] += 1
        if log.segments[-1].first == offset and len(log.segments) > 1:
            self.retain()  # the active segment filled: RabbitMQ's moment for retention
        self.streams.unsynced.add(self)
        return COMMIT

    def retain(self) -> None:
        removed = self.log.retain(self.max_length_bytes, self.max_age_ms,
                                  int(self.clock() * 1000))
        self.streams.counters["stream_retention_removed"] += removed
        self.dropped += removed

    # -- consumers ------------------------------------------------------------------------

    def consumer_arguments(self, arguments: dict[str, Any], no_ack: bool, prefetch: int
                           ) -> tuple[int, int | None]:
        """``basic.consume``'s checks for a stream (``stream_args.py``); keeps where the
        consumer starts for :meth:`add_consumer`, which follows in the same call."""
        where = f"queue '{self.name}' in vhost '/'"
        self._attach_at = stream_consume(where, arguments, no_ack, prefetch,
                                         int(self.clock() * 1000))
        timeout = arguments.get("x-consumer-timeout")
        return 0, timeout if isinstance(timeout, int) and timeout > 0 else None

    def add_consumer(self, consumer: QueueConsumer) -> None:
        start = self._attach_at or StartAt("next")
        self._attach_at = None
        log = self.log
        if start.kind == "first":
            cursor = log.first
        elif start.kind == "last":
            cursor = log.last_chunk
        elif start.kind == "next":
            cursor = log.tail
        elif start.kind == "offset":
            cursor = min(max(start.value, log.first), log.tail)
        else:
            cursor = log.offset_at(start.value)
        self.readers[consumer] = Reader(cursor)
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        self.readers.pop(consumer, None)
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def dispatch(self) -> None:
        """Hand each consumer the committed records from its cursor while it has credit."""
        if self._dispatching or self.deleted:
            return
        self._dispatching = True
        try:
            for consumer, reader in list(self.readers.items()):
                self._serve(consumer, reader)
        finally:
            self._dispatching = False

    def _serve(self, consumer: QueueConsumer, reader: Reader) -> None:
        log = self.log
        ahead = reader.ahead
        counters = self.streams.counters
        while consumer.has_credit():
            if not ahead:
                if reader.cursor >= log.committed:
                    return
                ahead.extend(log.read(reader.cursor, READ_AHEAD, READ_AHEAD_BYTES))
                if not ahead:  # (only quarantined records there)
                    reader.cursor = log.committed
                    return
            offset, _ms, value = ahead.popleft()
            reader.cursor = offset + 1
            try:
                exchange, routing_key, props, body, _expires = persist.decode_record(value)
            except (ValueError, IndexError):
                log.store.quarantine(persist.CF, log.key(offset), value,
                                     f"stream {self.name!r} offset {offset}")
                continue
            self.delivered += 1
            counters["stream_delivered"] += 1
            consumer.deliver(QueuedMessage(offset, exchange, routing_key, props, body))

    # -- what a stream does not do ----------------------------------------------------------

    def enqueue(self, msg: QueuedMessage) -> None:
        """(Only the publish path's :meth:`append` adds to a stream.)"""
        self.append(msg.exchange, msg.routing_key, msg.properties, msg.body)

    def requeue(self, msgs: list[QueuedMessage]) -> None:
        """A returned delivery stays where it is in the log: nothing to do."""

    def pop_ready(self) -> QueuedMessage | None:
        raise not_supported(self, "basic.get")

    def purge_ready(self, forget: Callable[[QueuedMessage], None]) -> int:
        raise not_supported(self, "queue.purge")

    def ready_count(self) -> int:
        """The messages the stream keeps (declare-ok's message count, as RabbitMQ)."""
        return len(self.log)

    def drop_ready(self) -> None:
        """The stream is deleted: its records and segment records go."""
        self.log.drop()

    def would_overflow(self, size: int) -> bool:
        return False

    def arm(self) -> None:
        """(No TTL, no x-expires: a stream needs no timer.)"""

    def expire_head(self) -> bool:
        """(Nothing expires from a stream but by retention.)"""
        return True

    def row(self) -> dict[str, Any]:
        row = super().row()
        row.update(log_figures(self.log),
                   max_age_s=None if self.max_age_ms is None else self.max_age_ms // 1000,
                   max_length_bytes=self.max_length_bytes)
        return row
