"""A durable queue's ready messages on the store's queue log (``oxiedge/store/qlog.py``).

Theory of operation
-------------------
A durable classic or quorum queue (not a priority queue, not an exclusive one) keeps its
ready messages in a :class:`~oxiedge.store.qlog.QueueLog` over the records it already had:
key ``b"m" + qid + seq`` in the ``amqp`` column family (``persist.py``), so key order is
delivery order, with its counters in ``b"c" + qid``. :class:`LogReady` stands in for the
queue's ready deque (as ``priority.PriorityReady`` does), so dispatch, ``basic.get``, TTL
expiry and the length limits, which work on the head, are unchanged:

* ``popleft`` = the log's ``peek`` + ``pop``: the message is *out* until the broker forgets
  it (ack, drop, expiry, dead-lettering: ``PublishPath.forget`` calls :meth:`LogReady.done`).
  A consumer that keeps up is served from the log's window in memory; a deep backlog is
  read back a window at a time, in sequential batches.
* ``put_back``: a requeue (nack, reject, recover, a closed channel) returns the message to
  its place, redelivered.
* a persistent message's record is handed over by ``PublishPath.store_message``
  (:meth:`LogReady.stage`) and staged by the log's ``append``; a non-persistent one is kept
  in the window without a record while the window has room, else written with the
  :data:`persist.VOLATILE` mark: it pages to disk like the others, and a restart discards
  it when it is read back (it was written by an earlier run: ``Codec.recovered_tail``).
* purge is the log's ``discard_waiting`` (one range delete for the disk run); deleting the
  queue drops the log and its counters with the queue's key range.

Which queues go on a queue log, their bounds and their recovery (counters, head and tail, no
message), are in ``paging.py``. The bytes of every log (out, waiting and on disk) add up in
one :class:`PagedBytes`, which counts in ``--max-backlog-bytes`` with MQTT's persistent
sessions (``store/backlog.py``): past it, a drop-head queue drops its oldest (the newest is
kept) as it appends, a reject-publish queue refuses the publish (``Queue.would_overflow``).
Every message recovered is redelivered. A record that does not decode when read back is
quarantined by the log (counted, logged) and delivery goes on.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator
from typing import Any, SupportsIndex

from oxiedge.amqp import persist
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.properties import scan_properties
from oxiedge.amqp.queued import VOLATILE, QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.store.backlog import Backlog
from oxiedge.store.qlog import QueueLog
from oxiedge.store.qlog_api import Tally
from oxiedge.store.qlog_recover import SEQ

_LEN = struct.Struct(">I")
_CACHED = 256  # entries of each decode cache (then cleared, as the MQTT codec's topics)
#: A longer property block is checked each time: comparing it costs about what checking
#: does, and 256 of them (up to a frame each) would stay in memory after their messages.
_CACHED_PROPS = 512
#: What a codec compares records with before it decoded one (``Codec._like``): the prefix
#: of a real record (no exchange, no routing key, an empty property block), so one that
#: starts with it is that record (a marker no record starts with cannot exist: a damaged
#: one may start with anything).
_NO_PROPERTIES = b"\x00\x00"
_EMPTY_LIKE = bytes((1, 0, 0)) + _LEN.pack(len(_NO_PROPERTIES)) + _NO_PROPERTIES
#: Records in the first and the largest read of ``LogReady.expire_unread``.
_EXPIRE_CHUNK, _EXPIRE_CHUNK_MAX = 64, 4096


class Codec:
    """``amqp`` message records <-> :class:`QueuedMessage` (size: the body's length).

    A backlog repeats a few exchange / routing-key pairs and property blocks many times:
    each is decoded and checked once (a bounded cache), then only compared. A record like
    the one before (the same head, the same property block: a backlog from one publisher)
    is one compare of its prefix, without a slice, and its message shares the property
    block; ``decode_run`` goes through a run of them in one call."""

    __slots__ = ("_last", "_like", "_names", "_props", "queue", "recovered_tail")

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.recovered_tail = 0  # seqs below were written before this run: redelivered
        self._names: dict[bytes, tuple[str, str]] = {}  # record head -> exchange, key
        self._props: set[bytes] = set()  # property blocks that passed scan_properties
        # The previous record up to its body (version, names, the property block's length
        # and the block, checked), and its names and property block.
        self._like: bytes = _EMPTY_LIKE
        self._last: tuple[str, str, bytes] = ("", "", _NO_PROPERTIES)

    def decode(self, seq: int, value: bytes) -> QueuedMessage | None:
        like = self._like
        if value.startswith(like):  # (no slice, no lookup)
            exchange, routing_key, props = self._last
            return QueuedMessage(seq, exchange, routing_key, props, value[len(like):], True,
                                 seq < self.recovered_tail)
        return self._decode_cached(seq, value)

    def decode_run(self, pairs: list[tuple[bytes, bytes]], i: int, width: int,
                   out: deque[QueuedMessage], room_bytes: int) -> tuple[int, int]:
        """``decode`` through a run of records in one call (``qlog_api.Codec``): per
        record like the one before, a compare of its prefix, the body's slice and the
        message; it stops before a record that does not decode or is skipped."""
        at, unpack, append, recovered = width - SEQ.size, SEQ.unpack_from, out.append, \
            self.recovered_tail
        like, (exchange, routing_key, props), held = self._like, self._last, 0
        skip = len(like)
        for j in range(i, len(pairs)):
            key, value = pairs[j]
            if len(key) != width:
                return j, held
            seq = unpack(key, at)[0]
            if value.startswith(like):
                body = value[skip:]
                append(QueuedMessage(seq, exchange, routing_key, props, body, True,
                                     seq < recovered))
            else:
                try:
                    msg = self._decode_cached(seq, value)
                except ValueError:
                    return j, held
                if msg is None:
                    return j, held
                append(msg)
                body = msg.body
                like, (exchange, routing_key, props) = self._like, self._last
                skip = len(like)
            held += len(body)
            if held >= room_bytes:
                return j + 1, held
        return len(pairs), held

    def _decode_cached(self, seq: int, value: bytes) -> QueuedMessage | None:
        stored: int = True
        if value[:1] == persist.VOLATILE:
            if seq < self.recovered_tail:
                return None  # a non-persistent message of an earlier run
            value, stored = value[1:], VOLATILE
        try:
            if value[0] != 1:  # (a deadline, or not a record: the general decoder)
                return self._decode(seq, value, stored)
            end = 3 + value[1]
            end += value[end - 1]
            head = value[:end]
            names = self._names.get(head)
            if names is None:
                ex, rk, _p, _b, _e = persist.decode_record(value)
                names = self._remember(self._names, head, (ex, rk))
            start = end + 4
            length = _LEN.unpack_from(value, end)[0]
            props = value[start : start + length]
            if len(props) != length:
                raise ValueError("AMQP message record shorter than its properties")
            body = value[start + length :]
            if len(props) > _CACHED_PROPS:
                scan_properties(props)
            elif props not in self._props:
                scan_properties(props)
                self._remember(self._props, props, None)
        except (IndexError, struct.error, AmqpError) as exc:
            raise ValueError(str(exc)) from None
        if stored is True and len(props) <= _CACHED_PROPS:  # the next one may be alike
            self._like, self._last = value[: start + length], (names[0], names[1], props)
        return QueuedMessage(seq, names[0], names[1], props, body, stored,
                             seq < self.recovered_tail)

    def _decode(self, seq: int, value: bytes, stored: int) -> QueuedMessage:
        exchange, routing_key, props, body, expires = persist.decode_record(value)
        scan_properties(props)
        if expires:
            self.queue.ttl_seen = True  # its deadline needs the queue's timer
        return QueuedMessage(seq, exchange, routing_key, props, body, stored,
                             seq < self.recovered_tail, expires)

    @staticmethod
    def _remember(cache: Any, key: bytes, value: Any) -> Any:
        if len(cache) >= _CACHED:
            cache.clear()
        if isinstance(cache, dict):
            cache[key] = value
        else:
            cache.add(key)
        return value

    def raw_size(self, value: bytes) -> int:
        return persist.body_size(value)


class PagedBytes:
    """The bytes of every AMQP queue log (``backlog_bytes``: the logs' tally) against the
    budget they share with MQTT (``backlog``, None: no budget), and what it cost."""

    __slots__ = ("backlog", "backlog_bytes", "budget", "dropped", "expired", "rejected",
                 "tallies")

    def __init__(self, backlog: Backlog | None = None) -> None:
        self.backlog_bytes = 0
        self.expired = 0  # messages expired on disk without being read back (expire_unread)
        self.dropped = 0  # oldest messages dropped (or dead-lettered) at the budget
        self.rejected = 0  # publishes refused there (x-overflow reject-publish*)
        self.backlog: Backlog | None = None
        self.budget: int | None = None  # the backlog's (fixed once configured)
        self.tallies: list[Tally] = []  # the backlog's own list: every tally, this one too
        self.attach(backlog)

    def attach(self, backlog: Backlog | None) -> None:
        """Count in ``backlog`` (None: no budget); the caller joins this tally to it."""
        self.backlog = backlog
        self.budget = None if backlog is None else backlog.budget
        self.tallies = [] if backlog is None else backlog.tallies

    def over(self, extra: int = 0) -> bool:
        """Would ``extra`` more bytes (or those held now) exceed the budget? (On every
        append: a plain loop over the two or so tallies, no generator.)"""
        budget = self.budget
        if budget is None:
            return False
        total = extra
        for tally in self.tallies:  # (this one among them)
            total += tally.backlog_bytes
        return total > budget


def log_head(log: QueueLog[QueuedMessage]) -> QueuedMessage | None:
    """The next message of ``log`` without reading its window: the one in memory, else its
    first record on disk read alone; where that record is not a message to deliver (an
    earlier run's non-persistent one, one that does not decode) the log's own ``peek``,
    which removes or quarantines it and reads the window."""
    if log.ready:
        return log.ready[0]
    store = log.store
    if store is not None and log.disk_to > log.disk_from:
        for key, value in store.read_range(log.cf, log.key(log.disk_from),
                                           log.key(log.disk_to), 1):
            if len(key) != len(log.prefix) + SEQ.size:
                break
            try:
                head = log.codec.decode(SEQ.unpack_from(key, len(log.prefix))[0], value)
            except ValueError:
                break
            if head is not None:
                return head
    return log.peek()


class LogReady(deque[QueuedMessage]):
    """The ready messages of a durable queue on its queue log (module docstring)."""

    __slots__ = ("_head", "_record", "_record_seq", "codec", "log", "paged", "queue", "records",
                 "store")

    def __init__(self, queue: Queue, store: Any, log: QueueLog[QueuedMessage] | None = None,
                 codec: Codec | None = None, paged: PagedBytes | None = None) -> None:
        super().__init__()
        self.queue = queue
        self.store = store
        self.codec = codec or Codec(queue)
        self.paged = paged or PagedBytes()
        self.log: QueueLog[QueuedMessage] = log or QueueLog(
            self.codec, store, persist.CF, persist.msg_key(queue.qid, 0)[:9],
            persist.meta_key(queue.qid), tally=self.paged)
        # The record of the message being published, staged and not appended yet (a
        # second one while it is, its enqueue dead-lettering back here: ``records``).
        self._record: bytes | None = None
        self._record_seq = -1
        self.records: dict[int, bytes] = {}  # seq -> record: staged, not appended yet
        self._head: tuple[int, float] = (-1, 0.0)  # disk_from -> its record's deadline

    def head_expires(self) -> float:
        """The deadline of the next message (0: none, or no message), without reading the
        window: the head in memory, else its record alone (remembered until it moves)."""
        log = self.log
        if log.ready:
            return log.ready[0].expires
        at = log.disk_from
        if log.disk_to > at and self._head[0] == at:
            return self._head[1]
        head = log_head(log)
        expires = head.expires if head is not None else 0.0
        if log.disk_to > at and log.disk_from == at:
            self._head = (at, expires)
        return expires

    @property
    def read_back(self) -> int:
        """Messages read back from disk so far."""
        return self.log.read_back

    def expire_unread(self, now: float, limit: int) -> tuple[int, int]:
        """The head is on disk and nothing needs the bodies (no dead-letter exchange):
        remove the run of records at the head of the disk part whose deadline is at or
        before ``now`` without decoding them and without reading them into the window
        (``expire_run``), at most ``limit`` (the caller's round: the rest is left for the
        next). Returns ``(messages expired, their body bytes)``."""
        n, size, following = self.expire_run(self.log, now, limit)
        # the next head's deadline, known without decoding it (``head_expires``, ``arm``)
        self._head = (self.log.disk_from, following / 1000) if following else (-1, 0.0)
        return n, size

    def expire_run(self, log: QueueLog[QueuedMessage], now: float, limit: int
                   ) -> tuple[int, int, int]:
        """``expire_unread`` on ``log`` (this queue's, or a priority level's): the deadline
        and body size of each record come from its header; it stops at the first one that
        does not expire, or that is not a plain record this run can judge (the read-back
        deals with it), or after ``limit`` records. Returns ``(messages expired, their body
        bytes, the deadline in ms of the record it stopped at, 0 where not known)``."""
        store = log.store
        if log.ready or log.disk_to <= log.disk_from or store is None or limit <= 0:
            return 0, 0, 0
        width, recovered = len(log.prefix) + SEQ.size, self.codec.recovered_tail
        start, end = log.key(log.disk_from), log.key(log.disk_to)
        limit_ms, to, n, size = int(now * 1000), log.disk_from, 0, 0
        chunk = min(_EXPIRE_CHUNK, limit + 1)
        following = 0  # the deadline (ms) of the record it stopped at, where it has one
        while pairs := store.read_range(persist.CF, start, end, chunk):
            for key, value in pairs:
                seq = SEQ.unpack_from(key, width - SEQ.size)[0] if len(key) == width else -1
                head = value[1:10] if value[:1] == persist.VOLATILE else value[:9]
                if seq < 0 or (seq < recovered and value[:1] == persist.VOLATILE) or (
                        len(head) < 9 or head[0] != persist.VERSION_TTL):
                    break  # (an earlier run's transient one: the read-back skips it)
                at = int.from_bytes(head[1:9], "big")
                if at > limit_ms or n >= limit:
                    following = at
                    break
                to, n, size = seq + 1, n + 1, size + persist.body_size(value)
            else:
                if len(pairs) == chunk:
                    start = pairs[-1][0] + b"\x00"
                    chunk = min(chunk * 4, _EXPIRE_CHUNK_MAX, limit - n + 1)
                    continue
                to = log.disk_to  # every record left expired (a gap after the last: none)
            break
        if n:
            log.drop_disk_head(to, n, size)
            self.paged.expired += n
        return n, size, following

    # -- what the queue and the publish path call --------------------------------------
    def stage(self, seq: int, record: bytes) -> None:
        """The record of persistent message ``seq``: written when it is appended, or now
        over the old one (a message already queued: its delivery count changed)."""
        if seq < self.log.tail:
            self.store.stage_put(persist.CF, self.log.key(seq), record)
        else:
            self.hold(seq, record)

    def hold(self, seq: int, record: bytes) -> None:
        """Keep the record of message ``seq`` until it is appended (``take_record``)."""
        if self._record is None:
            self._record, self._record_seq = record, seq
        else:
            self.records[seq] = record

    def take_record(self, seq: int) -> bytes | None:
        """The record ``stage`` keeps for ``seq`` (None: none), let go of."""
        if seq == self._record_seq:
            record, self._record, self._record_seq = self._record, None, -1
            return record
        return self.records.pop(seq, None) if self.records else None

    def append(self, msg: QueuedMessage) -> None:
        log = self.log
        body = msg.body
        seq = msg.seq
        if seq == self._record_seq:  # (``take_record``, inline: on every publish)
            record, self._record, self._record_seq = self._record, None, -1
        else:
            record = self.records.pop(seq, None) if self.records else None
        if seq < log.tail:  # overtaken by a message its enqueue dead-lettered back here
            msg.seq = self.queue.take_seq()  # (keys stay in queue order)
        if record is not None:
            log.append(msg, len(body), record)
        else:
            msg.stored = VOLATILE  # the log must hear when it leaves
            if not log.append(msg, len(body), None):  # beyond the window: paged as well
                log.append(msg, len(body), persist.VOLATILE + persist.encode_record(
                    msg.exchange, msg.routing_key, msg.properties, body, msg.expires))
                self.store.kick()  # no publisher waits for it, but the page must be synced
        paged = self.paged
        budget = paged.budget
        if budget is not None:  # (``PagedBytes.over``, inline: on every append)
            total = 0
            for tally in paged.tallies:
                total += tally.backlog_bytes
            if total > budget:
                self.shed(msg)

    def shed(self, msg: QueuedMessage) -> None:
        """Every queued byte together is over --max-backlog-bytes: a drop-head queue drops
        its oldest ready messages (dead-lettered where it has a DLX) until they fit or only
        ``msg`` is left, as its length limits do; a reject-publish queue refused the publish
        before (``over_budget``)."""
        q, paged = self.queue, self.paged
        if q.reject_publish:
            return
        ready = q.ready  # (the queue's: all levels of a priority queue)
        while paged.over() and len(ready) > 1:
            old = ready.popleft()
            if q.max_bytes is not None:
                q.ready_bytes -= len(old.body)
            if old is msg:  # (the head of a priority queue) its enqueue counts it next
                q.published -= 1
            q.dropped += 1
            paged.dropped += 1
            if q.on_drop is not None:
                q.on_drop(q, old)

    def over_budget(self, size: int) -> bool:
        """Would a message of ``size`` body bytes exceed --max-backlog-bytes (counted: a
        reject-publish queue refuses it)?"""
        paged = self.paged
        if paged.backlog is None or not paged.over(size):
            return False
        paged.rejected += 1
        return True

    def done(self, msg: QueuedMessage) -> None:
        """``msg`` (popped) left the queue: acked, dropped, expired or dead-lettered (or
        dropped before it was appended: x-max-length 0)."""
        if self._record is not None or self.records:
            self.take_record(msg.seq)
        self.log.ack(msg.seq)

    def put_back(self, msgs: list[QueuedMessage]) -> None:
        """Requeued messages (sorted by seq) back to their places."""
        self.log.put_back(msgs)

    def purge(self) -> int:
        return self.log.discard_waiting()

    def drop(self) -> None:
        """The queue is deleted (its key range with it): stage nothing more."""
        self.log.close()
        self.store.stage_delete_key(persist.CF, persist.meta_key(self.queue.qid))

    # -- the deque operations a Queue uses (on the head) -------------------------------
    def popleft(self) -> QueuedMessage:
        item = self.log.take()
        if item is None:
            raise IndexError("pop from an empty queue")
        return item

    def __len__(self) -> int:
        log = self.log  # (``len(self.log)``, inline: on every enqueue)
        return log.count - len(log.out)

    def __bool__(self) -> bool:
        """Is there a next message (read back if need be)? Never true while ``popleft``
        would find nothing, even if the counters were off."""
        log = self.log
        return bool(log.ready) or log.peek() is not None

    def __getitem__(self, index: SupportsIndex) -> QueuedMessage:  # type: ignore[override]
        if index.__index__() == 0:
            head = self.log.peek()
            if head is None:
                raise IndexError("queue is empty")
            return head
        return list(self)[index]

    def __iter__(self) -> Iterator[QueuedMessage]:
        """Every waiting message in order, disk ones read (admin and tests)."""
        return iter(self.log)

    def clear(self) -> None:
        self.purge()
