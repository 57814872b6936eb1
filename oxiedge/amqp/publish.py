"""The AMQP publish path: routing, THE enqueue path (:meth:`PublishPath.publish`), and
the per-queue semantics every message meets (overflow, TTL, dead-lettering).

Theory of operation
-------------------
Every message that enters a queue from outside comes through :meth:`PublishPath.publish`:
a client's ``basic.publish`` (the connection's protocol object), a bridge or the uplink
(``AmqpService.publish_from_bridge``).  It routes (the common cases inlined: one dict
lookup for the default exchange, one for a direct/topic/fanout exchange without
exchange-to-exchange bindings), then enqueues into each queue.  A persistent message for a
durable queue has its record *staged* before it becomes deliverable, so an ack's delete is
always staged after the insert and can never race ahead of it.  Nothing is awaited: the
caller learns from the returned outcome whether a commit must come before it confirms.

The outcome is ``(flags, queues reached)``, the flags the bus's one result type
(``oxiedge/staged.py``): a sum of ``ROUTED``, ``COMMIT``, ``RETURNED`` and ``REFUSED``
(plain ints: this runs once per message and an ``enum.Flag`` operation costs more than the
rest of the bookkeeping).

A client publish to ``amq.topic`` (origin ``AMQP``) goes on to the bus (``oxiedge/bus.py``:
MQTT sessions, ingest, uplink outboxes) from the one marked place in :meth:`publish`; a
message that comes from elsewhere on the bus carries that origin and is not handed back.

Dead-lettering re-routes through :meth:`route` and :meth:`enqueue_message` (the per-queue
half of the path) without counting a new publish, as RabbitMQ does.
"""

from __future__ import annotations

from typing import Any

from oxiedge.amqp import deadletter, persist
from oxiedge.amqp.constants import PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.exchanges import Exchange
from oxiedge.amqp.properties import decoded_headers, scan_properties
from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.stream import StreamQueue
from oxiedge.amqp.timers import Clock
from oxiedge.staged import (
    AMQP,
    COMMIT,
    NOTHING,
    REFUSED,
    RETURNED,
    ROUTED,
    Origin,
    Staged,
    TopicEntry,
)

#: ``(flags, queues reached)``; see the module docstring.
Outcome = tuple[int, int]


def deadline(expiration: str, now: float) -> float:
    """The wall-clock deadline of a per-message TTL (the ``expiration`` property, in ms).

    RabbitMQ accepts only a non-negative integer; anything else is a 406 channel error.
    """
    if not (expiration.isascii() and expiration.isdigit()):  # "²" is a digit to Python
        raise AmqpError(PRECONDITION_FAILED, f"invalid expiration '{expiration}'", 60, 40)
    # A TTL of 0 still lets a consumer with credit take the message at once (enqueue
    # dispatches synchronously); any later look finds it expired.
    return now + int(expiration) / 1000


class PublishPath:
    """Routing and enqueueing; mixed into :class:`~oxiedge.amqp.broker.Broker`, which owns
    the attributes declared here."""

    store: Any
    queues: dict[str, Queue]
    exchanges: dict[str, Exchange]
    counters: dict[str, int]
    clock: Clock
    bus: TopicEntry | None

    def publish(self, x: Exchange, routing_key: str, properties: bytes, body: bytes,
                persistent: bool, expiration: str | None = None, mandatory: bool = False,
                origin: Origin = AMQP) -> Outcome:
        """Route one message published to ``x`` and enqueue it everywhere it goes.

        ``expiration`` is the raw per-message TTL property (406 when invalid, raised only
        for a message that reaches a queue, as RabbitMQ); ``origin`` is where it entered
        the bus (an AMQP client's unless it comes from elsewhere on the bus, which is not
        handed back there: the echo rule).
        """
        if x.name:
            if not x.xbindings and x.type != "headers":
                queues = x.route(routing_key)  # the common case, inlined
                if not queues and x.alternate is not None:
                    queues = self.route_alternate(x, routing_key, properties)
            else:  # route() falls back to the alternate exchange itself
                queues = self.route(x, routing_key, properties)
        else:  # the default exchange: the queue named by the key (spec 3.1.3.1)
            q = self.queues.get(routing_key)
            queues = [q] if q is not None else []
        x.published += 1
        counters = self.counters
        counters["published"] += 1
        flags = 0
        # -- THE bus (oxiedge/bus.py) beyond amq.topic: the one place it is called -------
        if origin is AMQP and x.name == "amq.topic":
            bus = self.bus
            # COMMIT: the bus staged durable copies (e.g. MQTT persistent sessions): commit
            # before the confirm, and the message counts as routed (mandatory).
            if bus is not None and bus.from_amqp(routing_key, body, persistent,
                                                     properties) & COMMIT:
                flags = ROUTED | COMMIT
        if not queues:
            if flags:
                return flags, 0
            x.unroutable += 1
            counters["unroutable"] += 1
            if mandatory:
                counters["returned"] += 1
                return RETURNED, 0
            return 0, 0
        flags |= ROUTED
        expires = 0.0 if expiration is None else deadline(expiration, self.clock())
        exchange = x.name
        record = None
        for q in queues:
            if q.plain:
                msg = QueuedMessage(q.take_seq(), exchange, routing_key, properties, body,
                                    expires=expires)
                if persistent and q.doc_id is not None:
                    if record is None:
                        record = persist.encode_record(exchange, routing_key, properties,
                                                       body, expires)
                    # Staged BEFORE the message becomes deliverable (module docstring).
                    self.store_message(q, msg, record)
                    flags |= COMMIT
                q.enqueue(msg)
                if expires:
                    q.saw_deadline()  # the head may need a timer
                continue
            # x-message-ttl, x-max-length-bytes, x-overflow reject-publish(-dlx)
            flags |= self.enqueue_message(q, exchange, routing_key, properties, body,
                                          persistent, expires)
        return flags, len(queues)

    # -- routing -----------------------------------------------------------------------

    def route(self, x: Exchange, routing_key: str, properties: bytes = b"\x00\x00"
              ) -> list[Queue]:
        """Every queue a message published to ``x`` reaches, following exchange-to-exchange
        bindings (each queue once, cycles cut); headers exchanges match ``properties``.

        A message the exchange cannot route goes to its ``alternate-exchange`` (and on to
        that one's alternate; a cycle of alternates ends), as in RabbitMQ's "ae" doc.
        (:meth:`publish` inlines the common cases.)"""
        if not x.name:  # the default exchange: the queue named by the key (spec 3.1.3.1)
            q = self.queues.get(routing_key)
            return [q] if q is not None else []
        queues = self._route(x, routing_key, properties)
        if queues or x.alternate is None:
            return queues
        return self.route_alternate(x, routing_key, properties)

    def route_alternate(self, x: Exchange, routing_key: str, properties: bytes
                        ) -> list[Queue]:
        """Route through ``x``'s alternate exchanges (``x`` itself routed nowhere)."""
        seen = {x.name}
        queues: list[Queue] = []
        while not queues and x.alternate is not None and x.alternate not in seen:
            ax = self.exchanges.get(x.alternate)
            if ax is None:
                break
            seen.add(ax.name)
            x = ax
            queues = self._route(ax, routing_key, properties)
        if queues:
            self.counters["alternate_routed"] += 1
        return queues

    def _route(self, x: Exchange, routing_key: str, properties: bytes) -> list[Queue]:
        if not x.xbindings and x.type != "headers":
            return x.route(routing_key)
        headers: dict[str, Any] | None = None
        found: dict[int, Queue] = {}
        seen = {x.name}
        stack = [x]
        while stack:
            ex = stack.pop()
            if ex.type == "headers":
                if headers is None:
                    headers = decoded_headers(properties)
                routed = ex.route_headers(headers)
            else:
                routed = ex.route(routing_key)
            for q in routed:
                found.setdefault(id(q), q)
            for name in ex.route_exchanges(routing_key):
                dx = self.exchanges.get(name)
                if dx is not None and name not in seen:
                    seen.add(name)
                    stack.append(dx)
        return list(found.values())

    # -- messages ----------------------------------------------------------------------

    def store_message(self, q: Queue, msg: QueuedMessage, record: bytes) -> None:
        """Stage the durable record of a persistent message on a durable queue (a queue
        log stages it as the message is appended)."""
        if q.paged is not None:
            q.paged.stage(msg.seq, record)
        else:
            self.store.stage_put(persist.CF, persist.msg_key(q.qid, msg.seq), record)
        msg.stored = True
        self.counters["persisted"] += 1

    def forget(self, q: Queue, msg: QueuedMessage) -> None:
        """Stage the deletion of a message's durable record (ack, drop, purge)."""
        stored = msg.stored
        if stored:
            msg.stored = False
            if q.paged is not None:
                q.paged.done(msg)  # (an in-order run becomes one range delete)
                if stored is not True:
                    return  # a non-persistent message: nothing to make durable
            else:
                self.store.stage_delete_key(persist.CF, persist.msg_key(q.qid, msg.seq))
            # Cheap when already kicked; the round itself runs only once this task yields,
            # so the deletes of one burst still share one commit.
            self.store.kick()

    # -- RabbitMQ's production semantics: overflow, TTL, dead-lettering -----------------

    def enqueue_message(self, q: Queue, exchange: str, routing_key: str, properties: bytes,
                        body: bytes, persistent: bool, expires: float = 0.0) -> Staged:
        """Put one message in a queue that is not ``plain`` (or any queue, off the hot
        path).  Returns ``REFUSED`` if the queue refused it (x-overflow reject-publish*),
        ``COMMIT`` if a durable record was staged, else ``NOTHING``."""
        if type(q) is StreamQueue:  # a stream appends to its log (stream.py)
            return q.append(exchange, routing_key, properties, body)
        if q.reject_publish and q.would_overflow(len(body)):
            # reject-publish: the new message is not taken and a confirming publisher gets
            # basic.nack; reject-publish-dlx also dead-letters it (RabbitMQ "maxlen" doc).
            q.rejected += 1
            self.counters["rejected"] += 1
            if q.overflow == "reject-publish-dlx":
                self.dead_letter(q, QueuedMessage(0, exchange, routing_key, properties, body),
                                 deadletter.MAXLEN)
            return REFUSED
        if q.message_ttl is not None:  # the earlier of the queue's and the message's TTL
            qexp = self.clock() + q.message_ttl / 1000
            expires = min(expires, qexp) if expires else qexp
        msg = QueuedMessage(q.take_seq(), exchange, routing_key, properties, body,
                            expires=expires)
        staged = NOTHING
        if persistent and q.doc_id is not None:
            self.store_message(q, msg, persist.encode_record(exchange, routing_key, properties,
                                                             body, expires))
            staged = COMMIT
        q.enqueue(msg)
        if expires:
            q.saw_deadline()
        return staged

    def dead_letter(self, q: Queue, msg: QueuedMessage, reason: str) -> None:
        """Move a message out of ``q``: republish it to ``q``'s dead-letter exchange with
        ``x-death`` headers, or (no DLX) drop it.

        The source record's delete and the target records' inserts are staged together,
        synchronously, so they land in ONE write batch and one sync: across a crash the
        message is either still in ``q`` or in its targets, never lost, never in both."""
        dlx = q.dlx
        if dlx is None or q.deleted:
            self.forget(q, msg)
            return
        x = self.exchanges.get(dlx)
        if x is None:  # RabbitMQ drops what goes to a missing DLX
            self.counters["dead_letter_dropped"] += 1
            self.forget(q, msg)
            return
        routing_key = q.dlrk if q.dlrk is not None else msg.routing_key
        props, deaths = deadletter.mark_dead(msg.properties, q.name, reason, msg.exchange,
                                             [msg.routing_key], self.clock())
        targets = self.route(x, routing_key, props)
        try:
            persistent = scan_properties(props) == 2
        except AmqpError:
            persistent = False
        placed = 0
        for t in targets:
            if t.deleted or deadletter.is_cycle(t.name, deaths):
                continue
            if not self.enqueue_message(t, dlx, routing_key, props, msg.body,
                                        persistent) & REFUSED:
                placed += 1
        q.dead_lettered += 1
        self.counters["dead_lettered"] += 1
        if not placed:
            self.counters["dead_letter_dropped"] += 1
        self.forget(q, msg)
        self.store.kick()

