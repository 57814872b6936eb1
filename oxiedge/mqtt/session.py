"""Session state: what the broker owes one client id (MQTT 3.1.1, 4.1 and 4.3).

A ``Session`` outlives its connections when ``clean_session`` is 0. Outbound messages of
QoS 1/2 take this path::

    deliver() -> queue (bounded; the oldest is dropped and counted) -> pump() ->
    inflight (sent, PUBACK/PUBREC awaited; window ``max_inflight``) -> rel (PUBREL sent,
    PUBCOMP awaited)

The queue is a ``SessionQueue`` (``queue.py``, a store-level queue log): a durable session
keeps a bounded window of it in memory and the rest on disk only, so an offline session's
backlog costs its counters, not its messages.

Every queued/in-flight message of a durable session has a record ``(owner, seq)`` on
disk from the moment it is routed (staged in the publisher's commit round) until the
subscriber's PUBACK/PUBREC deletes it. QoS 0 deliveries go straight to the connection and
are never queued: for an offline session they are skipped (MQTT-3.1.2-5 allows either),
and a connection whose output buffer is over its bound drops them (counted).

A delivery may be *held* (``Hold``): queued but not sent until the round that made its
record durable has committed. The broker holds every delivery of a QoS 2 PUBLISH (so a
publisher that re-sends it after a crash cannot give anyone a second copy) and every QoS 2
delivery to a durable session (so a packet identifier the client may hold open always
belongs to a record that survives a crash, MQTT-4.3.3). ``pump`` stops at a held head,
which keeps the delivery order.

Nothing here awaits: the connection task owns the I/O and the commits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from oxiedge.mqtt import persist
from oxiedge.mqtt.bounds import Limits, Stats
from oxiedge.mqtt.encode import encode_publish, encode_pubrel
from oxiedge.mqtt.inbound2 import InboundQos2
from oxiedge.mqtt.persist import CF, packet_id_of
from oxiedge.mqtt.queue import Message, Pending, Reader, SessionQueue

if TYPE_CHECKING:
    from oxiedge.mqtt.replay import RetainedReplay

__all__ = ["Hold", "Limits", "Message", "Outlet", "Peer", "Pending", "Reader", "Session", "Stats"]


class Outlet(Protocol):
    """The live connection of a session, as the session sees it."""

    out_bytes: int

    def write(self, data: bytes) -> None: ...


class Peer(Protocol):
    """An MQTT 5 client's side of the session (``forward5.Peer5``)."""
    plain_max: int  # the longest shared QoS 0 frame it takes as is (-1: none)

    def publish(self, msg: Message, qos: int, retain: bool, dup: bool,
                pid: int | None) -> bytes | None: ...


class Hold:
    """Deliveries that wait for a commit round: released (sent) only after a
    ``store.commit()`` that was called once they were all staged has returned.

    Whoever is about to commit takes the broker's open hold (``Broker.take_hold``) and
    releases it after the commit succeeded. After a failed commit it is dropped: those
    messages are not durable, were never acknowledged, and are never sent."""

    __slots__ = ("pending", "qos0")

    def __init__(self) -> None:
        self.pending: list[tuple[Session, Pending]] = []
        self.qos0: list[tuple[Session, bytes]] = []  # QoS 0 deliveries, written on release

    def __bool__(self) -> bool:
        return bool(self.pending or self.qos0)

    def merge(self, other: Hold) -> None:
        self.pending += other.pending
        self.qos0 += other.qos0

    def release(self) -> None:
        """The commit succeeded: send what was held, in staging order."""
        touched: dict[Session, None] = {}
        for s, p in self.pending:
            p.held = False
            touched[s] = None
        for s, data in self.qos0:
            s.send_qos0(data)
        for s in touched:
            if s.conn is not None:
                s.pump()
        self.pending = []
        self.qos0 = []


class Session:
    """State of one client id. ``store`` is set for durable sessions only."""

    __slots__ = (
        "acl",
        "clean",
        "client_id",
        "conn",
        "dropped",
        "expires_at",
        "expiry",
        "inflight",
        "limits",
        "max_queued",
        "max_queued_bytes",
        "next_seq",
        "offline_since",
        "owner",
        "owner_b",
        "peer",
        "queue",
        "rel",
        "replay",
        "rx2",
        "stats",
        "store",
        "subs",
        "user",
        "window",
    )

    def __init__(
        self,
        client_id: str,
        clean: bool,
        owner: int,
        limits: Limits,
        stats: Stats,
        store: persist.RawStore | None,
    ) -> None:
        self.client_id = client_id
        self.clean = clean
        self.owner = owner
        self.owner_b = persist.owner_bytes(owner)
        self.limits = limits
        self.stats = stats
        self.store = store  # None: nothing of this session goes to disk
        self.subs: dict[str, int] = {}
        # Messages not sent yet, and (durable) the records of those in flight. Its bounds:
        # disk-sized for a durable session, capped for one kept in memory (bounds.py).
        self.queue = SessionQueue(store, self.owner_b, stats)  # (stats.backlog_bytes)
        self.max_queued = limits.queue_limit if store is not None else limits.memory_queue_limit
        self.max_queued_bytes = (limits.queue_bytes if store is not None
                                 else limits.memory_queue_bytes)  # fmt: skip
        # Retained messages still owed to new subscriptions (MQTT-3.8.4-3), sent at the
        # pace of the output buffer and the in-flight window: see ``RetainedReplay``.
        self.replay: RetainedReplay | None = None
        self.inflight: dict[int, Pending] = {}  # packet id -> message, in send order
        self.rel: dict[int, int] = {}  # packet id -> seq: PUBREL sent, PUBCOMP awaited
        # Inbound QoS 2 packet ids before PUBREL (4.3.3), oldest first, bounded.
        self.rx2 = InboundQos2(store, self.owner_b, limits, stats)
        self.next_seq = 0
        self.dropped = 0
        self.conn: Outlet | None = None
        # The attached client's MQTT 5 side (``forward5.Peer5``: how its PUBLISHes are
        # encoded, its limits); None for MQTT 3.1.1, whose path stays as it was.
        self.peer: Peer | None = None
        # MQTT 5: the Session Expiry Interval its client set (seconds); None for 3.1.1,
        # whose sessions follow --mqtt-session-expiry.
        self.expiry: int | None = None
        # ... and when it ends (wall clock: it runs while the broker is down); None while
        # its client is connected.
        self.expires_at: float | None = None
        # Messages in flight at most: ``max_inflight``, or the MQTT 5 client's Receive
        # Maximum when lower (MQTT-3.3.4-9).
        self.window = limits.max_inflight
        # When its last client left (the broker's monotonic clock); None while a client is
        # attached or not yet noticed offline (recovered: the first expiry sweep sets it).
        self.offline_since: float | None = None
        # What the connected client may read (``access.Grants``), kept while offline; None
        # for a session recovered at start-up until its client connects again.
        self.acl: Reader | None = None
        # The user whose client owns the session ("" anonymous; None unknown: a session
        # recovered from a record written before the user was kept). Kept in the session
        # record, so a recovered session reads with its user's rules before it reconnects.
        self.user: str | None = None

    # ------------------------------------------------------------------ outbound
    def deliver(self, msg: Message, qos: int, retain: bool, hold: Hold | None = None) -> bool:
        """Hand ``msg`` to this session at effective ``qos``; True if a durable record
        was staged (the publisher must then commit before acknowledging). With ``hold``
        nothing is sent before the hold is released (after the commit)."""
        if qos == 0:
            conn = self.conn
            if conn is not None:
                peer = self.peer
                if peer is not None:  # MQTT 5: the shared frame as is (``Peer5.plain_max``)
                    data = msg.qos0v5
                    if data is None or retain or len(data) > peer.plain_max:
                        data = peer.publish(msg, 0, retain, False, None)
                        if data is None:
                            return False  # expired or over the client's Maximum Packet Size
                else:
                    data = (msg.qos0_bytes() if not retain
                            else encode_publish(msg.topic_b, msg.payload, 0, True))  # fmt: skip
                if hold is not None:
                    hold.qos0.append((self, data))
                elif conn.out_bytes < self.limits.out_limit:
                    conn.write(data)
                    self.stats.messages_out += 1
                    if peer is not None:  # an MQTT 5 client
                        self.stats.messages_out5 += 1
                else:
                    self.stats.dropped_qos0 += 1
            return False
        seq = self.next_seq
        self.next_seq = seq + 1
        size = len(msg.payload) + len(msg.topic_b)
        p = Pending(seq, msg, qos, retain, False, size)
        store = self.store
        queue, limits, conn = self.queue, self.limits, self.conn
        value = b"" if store is None else msg.record(qos, retain)
        if hold is None and conn is not None and queue.count == len(queue.out):
            # Nothing queued (the common case): what ``pump`` does with a queue of this one
            # message, without queueing it. Where ``pump`` would wait, it is queued below.
            inflight, rel = self.inflight, self.rel
            pid = packet_id_of(seq)
            if (len(inflight) + len(rel) < self.window
                    and conn.out_bytes < limits.out_limit
                    and pid not in inflight and pid not in rel):  # fmt: skip
                queue.append_sent(seq, size, value)
                self._send(conn, p, pid)
                return store is not None
        if len(queue) >= self.max_queued:
            self.drop_oldest()
        queue.append(p, size, value, conn is not None)
        if queue.bytes - queue.out_bytes > self.max_queued_bytes:
            self.trim_queue_bytes()
        budget = limits.backlog_left(self.stats)  # (less what AMQP queues hold on disk)
        if budget is not None and store is not None and self.stats.backlog_bytes > budget:
            self.trim_backlog(budget)
        if hold is not None:
            p.held = True
            hold.pending.append((self, p))
        elif self.conn is not None:
            self.pump()
        return store is not None

    @property
    def queue_bytes(self) -> int:
        """Topic + payload bytes of the messages not sent yet (--mqtt-queue-bytes)."""
        return self.queue.queued_bytes

    def trim_queue_bytes(self) -> None:
        """Drop the oldest queued messages until the queue fits ``queue_bytes`` again;
        the newest message is always kept (one message never exceeds the packet bound)."""
        while self.queue.queued_bytes > self.max_queued_bytes and len(self.queue) > 1:
            self.drop_oldest()
            self.stats.dropped_queue_bytes += 1

    def trim_backlog(self, budget: int) -> None:
        """The persistent sessions are over their part of --max-backlog-bytes (``budget``:
        less AMQP's queues): this one, queuing a message, drops its oldest until they fit."""
        while self.stats.backlog_bytes > budget and len(self.queue) > 1:
            self.drop_oldest()
            self.stats.dropped_backlog_bytes += 1

    def send_qos0(self, data: bytes) -> None:
        """Write a QoS 0 delivery now, or drop it (counted) on a full output buffer."""
        conn = self.conn
        if conn is None:
            return  # offline: QoS 0 is not queued (MQTT-3.1.2-5 allows either)
        if conn.out_bytes < self.limits.out_limit:
            conn.write(data)
            self.stats.messages_out += 1
            if self.peer is not None:  # an MQTT 5 client
                self.stats.messages_out5 += 1
        else:
            self.stats.dropped_qos0 += 1

    def drop_oldest(self) -> None:
        """Drop the oldest message not sent yet (a queue bound), counted."""
        if self.queue.drop_oldest() is not None:
            self.dropped += 1
            self.stats.dropped += 1

    def pump(self) -> None:
        """Send queued messages while the in-flight window and the output buffer allow."""
        conn = self.conn
        queue = self.queue
        if conn is None or queue.count == len(queue.out):
            return
        inflight, rel, limits = self.inflight, self.rel, self.limits
        while len(inflight) + len(rel) < self.window:
            if conn.out_bytes >= limits.out_limit:
                return  # the writer calls pump() again once the buffer drained
            p = queue.peek()  # (a window read back from disk when the memory part is empty)
            if p is None:
                return
            if p.held:
                return  # its round is still open; ``Hold.release`` pumps again
            pid = packet_id_of(p.seq)
            if pid in inflight or pid in rel:
                return  # a 65535-old message is still unacknowledged: wait for it
            queue.pop()
            self._send(conn, p, pid)

    def _send(self, conn: Outlet, p: Pending, pid: int) -> None:
        """Send ``p`` as packet ``pid``; it is in flight until acknowledged."""
        msg = p.msg
        peer = self.peer
        if peer is None:
            data = encode_publish(msg.topic_b, msg.payload, p.qos, p.retain, p.dup, pid)
        else:
            got = peer.publish(msg, p.qos, p.retain, p.dup, pid)
            if got is None:  # expired or too large: as if acknowledged (MQTT-3.1.2-25)
                self._forget(p)
                return
            data = got
        self.inflight[pid] = p
        conn.write(data)
        p.dup = True  # any later send is a re-delivery (MQTT-3.3.1-1)
        self.stats.messages_out += 1
        if peer is not None:  # an MQTT 5 client
            self.stats.messages_out5 += 1

    def resend(self) -> None:
        """After a reconnect: re-send unacknowledged PUBLISH (DUP) and PUBREL packets in
        their original order (MQTT-4.4.0-1), then pump the queue."""
        conn = self.conn
        if conn is None:
            return
        items: list[tuple[int, int, Pending | None]] = [
            (p.seq, pid, p) for pid, p in self.inflight.items()
        ]
        items += [(seq, pid, None) for pid, seq in self.rel.items()]
        items.sort(key=lambda t: t[0])
        for _seq, pid, p in items:
            if p is None:
                conn.write(encode_pubrel(pid))
            else:
                m = p.msg
                peer = self.peer
                if peer is None:
                    conn.write(encode_publish(m.topic_b, m.payload, p.qos, p.retain, True, pid))
                else:
                    # (a QoS 1/2 message once sent is re-sent even if expired since:
                    # the client may hold its packet id, MQTT-4.4.0-1)
                    data = peer.publish(m, p.qos, p.retain, True, pid)
                    if data is None:
                        del self.inflight[pid]
                        self._forget(p)
                        continue
                    conn.write(data)
                self.stats.messages_out += 1
                if peer is not None:  # an MQTT 5 client
                    self.stats.messages_out5 += 1
        self.pump()

    def on_puback(self, pid: int) -> bool:
        """PUBACK from the client; True if a deletion was staged."""
        p = self.inflight.get(pid)
        if p is None or p.qos != 1:
            return False  # unknown id: ignore (a late ack after take-over/re-send)
        del self.inflight[pid]
        queue = self.queue
        queue.ack(p.seq)  # (a durable record goes with the round's acknowledged run)
        if queue.count != len(queue.out):
            self.pump()
        return self.store is not None

    def _forget(self, p: Pending) -> None:
        """A message that is not sent (expired, too large for the client) counts as
        delivered: its record goes."""
        self.queue.ack(p.seq)

    def on_pubrec(self, pid: int) -> bool:
        """PUBREC: the message becomes a PUBREL obligation (4.3.3); True if the transition
        was staged. The caller sends PUBREL only after its commit: once a PUBREL went out
        the PUBLISH must never be sent again, also not after a crash (MQTT-4.3.3)."""
        p = self.inflight.get(pid)
        if p is None or p.qos != 2:
            # A duplicate PUBREC for a PUBREL already pending: answer PUBREL again.
            return False
        del self.inflight[pid]
        self.rel[pid] = p.seq
        self.queue.ack(p.seq)  # its ``m`` record goes in the same round as ``r`` comes
        if self.store is not None:
            self.store.stage_put(CF, persist.rel_key(self.owner_b, p.seq), b"")
        return self.store is not None

    def on_pubcomp(self, pid: int) -> bool:
        seq = self.rel.pop(pid, None)
        if seq is None:
            return False
        if self.store is not None:
            self.store.stage_delete_key(CF, persist.rel_key(self.owner_b, seq))
        self.pump()
        return self.store is not None

    # ------------------------------------------------------------------- records
    def stage_record(self) -> None:
        """Stage the session record (owner, user, subscriptions) of a durable session."""
        if self.store is not None:
            self.store.stage_put(
                CF,
                persist.session_key(self.client_id),
                persist.encode_session(self.owner, self.subs, self.user),
            )

    def set_expiry(self, interval: int | None, deadline: float | None) -> bool:
        """MQTT 5: the session's expiry interval (None: back to 3.1.1's rule) and wall-clock
        deadline (None: connected); True if its ``e`` record was staged."""
        self.expiry, self.expires_at = interval, deadline
        store = self.store
        if store is None or self.clean:
            return False
        key = persist.expiry_key(self.owner_b)
        if interval is None:
            store.stage_delete_key(CF, key)
        else:
            store.stage_put(CF, key, persist.encode_expiry(interval, deadline))
        return True

    def stage_delete(self) -> None:
        """Stage the removal of everything this session has on disk."""
        self.queue.close()
        if self.store is not None:
            persist.stage_delete_session(self.store, self.client_id, self.owner)

    def row(self, now: float | None = None, wall: float | None = None) -> dict[str, object]:
        """The admin listing row (``oxiedge sessions``); ``expires_in``: seconds until this
        offline persistent session is deleted, by ``--mqtt-session-expiry`` (``now`` on the
        clock of ``offline_since``) or, MQTT 5, at its own deadline (``wall``: now on the
        wall clock). None: connected, clean, no expiry, or not yet seen offline by a sweep."""
        expiry, since, at = self.limits.session_expiry, self.offline_since, self.expires_at
        expires_in = None
        if self.conn is not None or self.clean:
            pass
        elif self.expiry is not None:  # MQTT 5 (``at`` is None while it is connected)
            expires_in = None if at is None or wall is None else max(0, round(at - wall))
        elif now is not None and expiry is not None and since is not None:
            expires_in = max(0, round(since + expiry - now))
        return {
            "client": self.client_id,
            "connected": self.conn is not None,
            "clean": self.clean,
            "subscriptions": len(self.subs),
            "queued": len(self.queue),
            "inflight": len(self.inflight) + len(self.rel),
            "dropped": self.dropped,
            "expires_in": expires_in,
        }
