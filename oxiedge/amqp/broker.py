"""The broker state shared by all AMQP connections of the process (vhost ``/``).

Everything here is synchronous: it changes in-memory state and *stages* the matching durable
writes (``persist``); the connection awaits ``store.commit()`` before it answers.  Because
the in-memory change happens before any await, two connections declaring the same queue at
the same moment see one queue and stage one ``_amqp`` record.  The publish path (routing,
the one enqueue path ``Broker.publish``, dead-lettering) is in ``publish.py``, recovery at
start-up in ``recovery.py``, exchanges and bindings in ``topology.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from oxiedge.amqp import arguments as args
from oxiedge.amqp import deadletter, paging, persist
from oxiedge.amqp.constants import ACCESS_REFUSED, NOT_FOUND, PRECONDITION_FAILED, RESOURCE_LOCKED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.priority import queue_class
from oxiedge.amqp.publish import PublishPath
from oxiedge.amqp.queued import QueueConsumer, QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.stream import StreamQueue, Streams
from oxiedge.amqp.stream_args import is_stream
from oxiedge.amqp.tablecost import table_cost
from oxiedge.amqp.timers import Clock, QueueTimers, wall_clock
from oxiedge.amqp.topology import Topology, check_flags, in_vhost
from oxiedge.staged import TopicEntry


class Broker(PublishPath):
    """Exchanges, queues and bindings; routing; the durable mapping."""

    def __init__(self, store: Any, queue_limit: int = 100_000,
                 queue_bytes: int | None = None, clock: Clock = wall_clock) -> None:
        self.store = store
        self.queue_limit = queue_limit  # of a queue held in memory; on disk: ``paging``
        self.queue_bytes = queue_bytes  # ready bytes without x-max-length-bytes (None: no cap)
        self.paging = paging.Paging(store)  # durable queues on queue logs, their bounds
        self.queues: dict[str, Queue] = {}
        self.next_qid = 1
        #: Where client publishes to amq.topic go on (``oxiedge/bus.py``; wired by server.py).
        self.bus: TopicEntry | None = None
        #: Fires TTL and x-expires deadlines; ``timers.clock`` is the broker's clock.
        self.timers = QueueTimers(clock)
        self.clock = clock
        self.streams = Streams(store)  # what the stream queues share (stream.py)
        #: called with a queue that x-expires deleted (the service drops it from its owner)
        self.on_queue_expired: Callable[[Queue], None] | None = None
        self.counters = {"published": 0, "unroutable": 0, "returned": 0, "dropped": 0,
                         "expired": 0, "rejected": 0, "dead_lettered": 0,
                         "dead_letter_dropped": 0, "delivery_limit": 0,
                         "queues_expired": 0, "alternate_routed": 0,
                         "delivered": 0, "acked": 0, "requeued": 0, "discarded": 0,
                         "persisted": 0, "confirmed": 0, "nacked_confirms": 0,
                         "exchange_limit_refused": 0, "binding_limit_refused": 0,
                         "arguments_limit_refused": 0, "tx_commits": 0, "tx_rollbacks": 0,
                         "tx_limit_refused": 0,
                         # as RabbitMQ counts them (its dashboards' churn and get panels)
                         "queues_declared": 0, "queues_created": 0, "queues_deleted": 0,
                         "delivered_ack": 0, "delivered_noack": 0, "get_ack": 0,
                         "get_noack": 0, "get_empty": 0}
        #: Exchanges and bindings (``topology.py``); routing reads its exchange table.
        self.topology = Topology(store, self.counters)
        self.exchanges = self.topology.exchanges
        #: ``--amqp-max-queues`` (set by the service; checked by the declaring connection)
        self.max_queues = 10_000

    # -- queues ------------------------------------------------------------------------

    def new_queue(self, name: str, qid: int, **kw: Any) -> Queue:
        """Create and register a queue (declare, recovery); its arguments configure it."""
        a = kw.get("arguments")
        byte_limited = self.queue_bytes is not None or "x-max-length-bytes" in (a or {})
        cls = StreamQueue if is_stream(a) else queue_class(a, byte_limited)
        q = cls(name, qid, limit=self.queue_limit, on_drop=self._dropped,
                on_expire=self._expired, on_unused=self._unused, timers=self.timers, **kw)
        args.configure_queue(q, self.queue_limit, self.queue_bytes)
        if isinstance(q, StreamQueue):
            self.streams.open(q)  # its log, its retention (stream.py)
        self.queues[name] = q
        self.topology.exchanges_shared.argument_bytes += table_cost(q.arguments)
        q.arm()
        return q

    def _dropped(self, queue: Queue, msg: QueuedMessage) -> None:
        self.counters["dropped"] += 1
        self.dead_letter(queue, msg, deadletter.MAXLEN)

    def _expired(self, queue: Queue, msg: QueuedMessage) -> None:
        self.counters["expired"] += 1
        self.dead_letter(queue, msg, deadletter.EXPIRED)

    def _unused(self, queue: Queue) -> None:
        """x-expires: the queue was unused (no consumer, no get, no re-declare) too long."""
        self.counters["queues_expired"] += 1
        self.delete_queue(queue)
        if self.on_queue_expired is not None:
            self.on_queue_expired(queue)
        self.store.kick()

    def get_queue(self, name: str, owner: object | None = None) -> Queue:
        """The queue ``name``, or 404; 405 if another connection holds it exclusively."""
        q = self.queues.get(name)
        if q is None:
            raise AmqpError(NOT_FOUND, f"no {in_vhost('queue', name)}")
        if q.exclusive_owner is not None and q.exclusive_owner is not owner:
            raise AmqpError(RESOURCE_LOCKED,
                            f"cannot obtain exclusive access to locked {in_vhost('queue', name)}")
        return q

    def declare_queue(
        self, name: str, *, passive: bool, durable: bool, exclusive: bool, auto_delete: bool,
        arguments: dict[str, Any], owner: object,
    ) -> tuple[Queue, bool]:
        """Declare (or check) a queue; returns ``(queue, staged a durable write)``."""
        if passive:
            found = self.get_queue(name, owner)
            self.counters["queues_declared"] += 1
            return found, False
        if isinstance(self.queues.get(name), StreamQueue) and "x-queue-type" not in arguments:
            arguments = {**arguments, "x-queue-type": "stream"}  # (RabbitMQ: the existing type)
        args.check_queue_args(in_vhost("queue", name), arguments, durable=durable,
                              exclusive=exclusive, auto_delete=auto_delete)
        if not name:
            name = "amq.gen-" + secrets.token_urlsafe(16)
        elif name.startswith("amq.") and name not in self.queues:
            raise AmqpError(ACCESS_REFUSED,
                            f"queue name '{name}' contains reserved prefix 'amq.*'")
        q = self.queues.get(name)
        if q is not None:
            self.get_queue(name, owner)  # exclusivity
            if q.exclusive != exclusive:
                raise AmqpError(
                    RESOURCE_LOCKED,
                    f"cannot obtain exclusive access to locked {in_vhost('queue', name)}. It "
                    "could be originally declared on another connection or the exclusive "
                    "property value does not match that of the original declaration.")
            check_flags(in_vhost("queue", name), (("durable", q.durable, durable),
                                                 ("auto_delete", q.auto_delete, auto_delete)))
            wanted = persist.jsonable(arguments)
            if "x-queue-type" not in wanted and "x-queue-type" in q.arguments:
                # RabbitMQ: a re-declare without a type takes the existing queue's type.
                wanted["x-queue-type"] = q.arguments["x-queue-type"]
            if wanted != q.arguments:
                raise AmqpError(PRECONDITION_FAILED,
                                f"inequivalent arguments for {in_vhost('queue', name)}")
            q.touch()  # a re-declare renews an x-expires lease
            self.counters["queues_declared"] += 1
            return q, False
        kept = persist.jsonable(arguments)
        self.topology.check_arguments(table_cost(kept), f"declare {in_vhost('queue', name)}",
                                      50, 10)
        qid = self.next_qid
        self.next_qid += 1
        q = self.new_queue(name, qid, durable=durable, auto_delete=auto_delete,
                            exclusive_owner=owner if exclusive else None, arguments=kept)
        self.counters["queues_declared"] += 1
        self.counters["queues_created"] += 1
        staged = False
        if durable and not exclusive:
            # Exclusive queues die with their connection, so they never reach the disk.
            doc = self.store.stage_insert(persist.COLL, {
                "_kind": "queue", "name": name, "qid": qid, "durable": True,
                "auto_delete": auto_delete, "arguments": q.arguments})
            q.doc_id = doc["_id"]
            self.paging.attach(q)  # its ready messages on queue logs, disk-sized bounds
            staged = True
        # The default exchange binds every queue by name implicitly (spec 3.1.3.1).
        return q, staged

    def delete_queue(self, q: Queue, cancel: Callable[[QueueConsumer], None] | None = None) -> int:
        """Delete a queue, its bindings and its stored messages; returns the ready count."""
        if q.deleted:
            return 0
        q.deleted = True
        self.counters["queues_deleted"] += 1
        count = q.ready_count()
        self.queues.pop(q.name, None)
        self.topology.exchanges_shared.argument_bytes -= table_cost(q.arguments)
        for consumer in list(q.consumers):
            if cancel is not None:
                cancel(consumer)
        q.consumers.clear()
        self.topology.unbind_queue(q)
        if q.doc_id is not None:
            self.store.stage_delete(persist.COLL, q.doc_id)
            self.store.stage_delete_range(persist.CF, *persist.queue_range(q.qid))
        q.drop_ready()
        return count

    def purge(self, q: Queue) -> int:
        """Drop every ready message (unacked ones stay); returns how many."""
        q.expire_head()
        return q.purge_ready(lambda msg: self.forget(q, msg))

