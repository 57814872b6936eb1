"""The broker state shared by all AMQP connections of the process (vhost ``/``).

Everything here is synchronous: it changes in-memory state and *stages* the matching durable
writes (``persist``); the connection awaits ``store.commit()`` before it answers.  Because
the in-memory change happens before any await, two connections declaring the same queue at
the same moment see one queue and stage one ``_amqp`` record.  The publish path (routing,
the one enqueue path ``Broker.publish``, dead-lettering) is in ``publish.py``, recovery at
start-up in ``recovery.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from oxiedge.amqp import arguments as args
from oxiedge.amqp import deadletter, paging, persist
from oxiedge.amqp.constants import (
    ACCESS_REFUSED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
)
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.exchanges import (
    SUPPORTED_TYPES,
    Binding,
    Exchange,
    ExchangeBinding,
    ExchangesShared,
    binding_row,
    exchange_binding_row,
    x_match_error,
)
from oxiedge.amqp.priority import queue_class
from oxiedge.amqp.publish import PublishPath
from oxiedge.amqp.queues import Queue, QueueConsumer, QueuedMessage
from oxiedge.amqp.stream import StreamQueue, Streams
from oxiedge.amqp.stream_args import is_stream
from oxiedge.amqp.tablecost import table_cost
from oxiedge.amqp.timers import Clock, QueueTimers, wall_clock
from oxiedge.staged import TopicEntry

BUILTIN_EXCHANGES = (("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
                     ("amq.headers", "headers"), ("amq.match", "headers"))


def builtin_exchanges() -> list[Exchange]:
    """The default exchange and the ``amq.*`` exchanges every vhost has."""
    return [Exchange(name, kind, durable=True, builtin=True)
            for name, kind in (("", "direct"), *BUILTIN_EXCHANGES)]


def exchange_of_doc(doc: dict[str, Any]) -> Exchange:
    """The durable exchange an ``_amqp`` ``exchange`` document describes (no bindings)."""
    x = Exchange(doc["name"], doc["type"], durable=True,
                 auto_delete=doc.get("auto_delete", False),
                 internal=doc.get("internal", False), arguments=doc.get("arguments"))
    x.alternate = args.alternate_of(doc.get("arguments") or {})
    x.doc_id = doc["_id"]
    return x


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _vhost(kind: str, name: str) -> str:
    return f"{kind} '{name}' in vhost '/'"


def _check_flags(where: str, flags: tuple[tuple[str, bool, bool], ...]) -> None:
    """A re-declare must repeat each ``(name, current, requested)`` flag (406 otherwise)."""
    for what, have, want in flags:
        if have != want:
            raise AmqpError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{what}' for {where}: received '{_flag(want)}' but current "
                f"is '{_flag(have)}'")


class Broker(PublishPath):
    """Exchanges, queues and bindings; routing; the durable mapping."""

    def __init__(self, store: Any, queue_limit: int = 100_000,
                 queue_bytes: int | None = None, clock: Clock = wall_clock) -> None:
        self.store = store
        self.queue_limit = queue_limit  # of a queue held in memory; on disk: ``paging``
        self.queue_bytes = queue_bytes  # ready bytes without x-max-length-bytes (None: no cap)
        self.paging = paging.Paging(store)  # durable queues on queue logs, their bounds
        self.queues: dict[str, Queue] = {}
        self.exchanges_shared = ExchangesShared()
        self.exchanges: dict[str, Exchange] = {}
        for builtin in builtin_exchanges():
            self.add_exchange(builtin)
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
        #: ``--amqp-max-exchanges`` / ``--amqp-max-queues`` / ``--amqp-max-bindings`` /
        #: ``--amqp-max-arguments-bytes`` (set by the service; the queue count is checked
        #: by the declaring connection)
        self.max_exchanges = 10_000
        self.max_queues = 10_000
        self.max_bindings = 50_000
        self.max_arguments_bytes = 16 << 20

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
        self.exchanges_shared.argument_bytes += table_cost(q.arguments)
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
            raise AmqpError(NOT_FOUND, f"no {_vhost('queue', name)}")
        if q.exclusive_owner is not None and q.exclusive_owner is not owner:
            raise AmqpError(RESOURCE_LOCKED,
                            f"cannot obtain exclusive access to locked {_vhost('queue', name)}")
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
        args.check_queue_args(_vhost("queue", name), arguments, durable=durable,
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
                    f"cannot obtain exclusive access to locked {_vhost('queue', name)}. It "
                    "could be originally declared on another connection or the exclusive "
                    "property value does not match that of the original declaration.")
            _check_flags(_vhost("queue", name), (("durable", q.durable, durable),
                                                 ("auto_delete", q.auto_delete, auto_delete)))
            wanted = persist.jsonable(arguments)
            if "x-queue-type" not in wanted and "x-queue-type" in q.arguments:
                # RabbitMQ: a re-declare without a type takes the existing queue's type.
                wanted["x-queue-type"] = q.arguments["x-queue-type"]
            if wanted != q.arguments:
                raise AmqpError(PRECONDITION_FAILED,
                                f"inequivalent arguments for {_vhost('queue', name)}")
            q.touch()  # a re-declare renews an x-expires lease
            self.counters["queues_declared"] += 1
            return q, False
        kept = persist.jsonable(arguments)
        self._check_arguments(table_cost(kept), f"declare {_vhost('queue', name)}", 50, 10)
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
        self.exchanges_shared.argument_bytes -= table_cost(q.arguments)
        for consumer in list(q.consumers):
            if cancel is not None:
                cancel(consumer)
        q.consumers.clear()
        for name in list(q.sources):  # only the exchanges that bind it, not all of them
            x = self.exchanges.get(name)
            if x is None:
                continue
            removed = x.remove_queue(q.name)
            for b in removed:
                self._unstage_binding(b)
            if removed:  # exchanges that lost a binding here (RabbitMQ auto-delete)
                self._maybe_auto_delete_exchange(x)
        q.sources.clear()
        if q.doc_id is not None:
            self.store.stage_delete(persist.COLL, q.doc_id)
            self.store.stage_delete_range(persist.CF, *persist.queue_range(q.qid))
        q.drop_ready()
        return count

    def purge(self, q: Queue) -> int:
        """Drop every ready message (unacked ones stay); returns how many."""
        q.expire_head()
        return q.purge_ready(lambda msg: self.forget(q, msg))

    # -- exchanges ---------------------------------------------------------------------

    def add_exchange(self, x: Exchange) -> None:
        """Make ``x`` known (declared, built in, or recovered); its route cache counts
        against the broker's one bound."""
        x.shared = self.exchanges_shared
        self.exchanges[x.name] = x
        self.exchanges_shared.argument_bytes += table_cost(x.arguments)

    def get_exchange(self, name: str) -> Exchange:
        x = self.exchanges.get(name)
        if x is None:
            raise AmqpError(NOT_FOUND, f"no {_vhost('exchange', name)}")
        return x

    def declare_exchange(
        self, name: str, type: str, *, passive: bool, durable: bool, auto_delete: bool,
        internal: bool, arguments: dict[str, Any],
    ) -> tuple[Exchange, bool]:
        if not name:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if passive:
            return self.get_exchange(name), False
        if type not in SUPPORTED_TYPES:
            raise AmqpError(NOT_IMPLEMENTED, f"exchange type '{type}' is not implemented")
        alternate = args.check_exchange_args(_vhost("exchange", name), arguments)
        x = self.exchanges.get(name)
        if x is not None:
            if alternate != x.alternate:
                raise AmqpError(
                    PRECONDITION_FAILED,
                    f"inequivalent arg 'alternate-exchange' for {_vhost('exchange', name)}: "
                    f"received {alternate!r} but current is {x.alternate!r}")
            if x.type != type:
                raise AmqpError(
                    PRECONDITION_FAILED,
                    f"inequivalent arg 'type' for {_vhost('exchange', name)}: received "
                    f"'{type}' but current is '{x.type}'")
            _check_flags(_vhost("exchange", name), (("durable", x.durable, durable),
                                                    ("auto_delete", x.auto_delete, auto_delete),
                                                    ("internal", x.internal, internal)))
            return x, False
        if name.startswith("amq."):
            raise AmqpError(ACCESS_REFUSED,
                            f"exchange name '{name}' contains reserved prefix 'amq.*'")
        if len(self.exchanges) >= self.max_exchanges:
            self.counters["exchange_limit_refused"] += 1
            raise AmqpError(PRECONDITION_FAILED, f"cannot declare {_vhost('exchange', name)}: "
                            f"exchange limit of {self.max_exchanges} is reached", 40, 10)
        kept = persist.jsonable(arguments)
        self._check_arguments(table_cost(kept), f"declare {_vhost('exchange', name)}", 40, 10)
        x = Exchange(name, type, durable=durable, auto_delete=auto_delete, internal=internal,
                     arguments=kept)
        x.alternate = alternate
        self.add_exchange(x)
        if durable:
            doc = self.store.stage_insert(persist.COLL, {
                "_kind": "exchange", "name": name, "type": type, "durable": True,
                "auto_delete": auto_delete, "internal": internal, "arguments": x.arguments})
            x.doc_id = doc["_id"]
            return x, True
        return x, False

    def delete_exchange(self, name: str, if_unused: bool) -> bool:
        """Delete an exchange; returns whether a durable write was staged."""
        if not name or name.startswith("amq."):
            raise AmqpError(ACCESS_REFUSED,
                            f"operation not permitted on {_vhost('exchange', name)}")
        x = self.exchanges.get(name)
        if x is None:
            return False
        if if_unused and x.in_use:
            raise AmqpError(PRECONDITION_FAILED, f"{_vhost('exchange', name)} in use")
        return self._drop_exchange(x)

    def _drop_exchange(self, first: Exchange) -> bool:
        """Remove an exchange with every binding where it is source or destination, and
        the auto-delete exchanges that lose their last binding through it, and so on: a
        worklist, not recursion (a chain of thousands of auto-delete exchanges is one
        client's doing, and must not reach Python's recursion limit)."""
        staged = False
        todo = [first]
        while todo:
            x = todo.pop()
            if x is not first and self.exchanges.get(x.name) is not x:
                continue  # dropped already through another path
            self.exchanges.pop(x.name, None)
            self.exchanges_shared.argument_bytes -= table_cost(x.arguments)
            for b in x.bindings.values():
                staged |= self._unstage_binding(b)
            for xb in x.xbindings.values():
                staged |= self._unstage_binding(xb)
                dest = self.exchanges.get(xb.destination)
                if dest is not None:
                    dest.sources.discard(x.name)
            x.clear_bindings()
            for name in x.sources:  # the exchanges binding into it, not all of them
                other = self.exchanges.get(name)
                if other is None:
                    continue
                gone = other.remove_destination(x.name)
                for xb in gone:
                    staged |= self._unstage_binding(xb)
                if gone and self._auto_deletable(other):
                    todo.append(other)
            x.sources.clear()
            if x.doc_id is not None:
                self.store.stage_delete(persist.COLL, x.doc_id)
                staged = True
        return staged

    def _auto_deletable(self, x: Exchange) -> bool:
        # RabbitMQ: an auto-delete exchange goes when its last binding as source goes.
        return (x.auto_delete and not x.in_use and not x.builtin
                and self.exchanges.get(x.name) is x)

    def _maybe_auto_delete_exchange(self, x: Exchange) -> None:
        if self._auto_deletable(x):
            self._drop_exchange(x)

    # -- bindings ----------------------------------------------------------------------

    def bind(self, q: Queue, exchange: str, routing_key: str, arguments: dict[str, Any]) -> bool:
        if not exchange:
            raise AmqpError(ACCESS_REFUSED,
                            "operation not permitted on the default exchange")
        x = self.get_exchange(exchange)
        if arguments and x.type != "headers":
            raise AmqpError(NOT_IMPLEMENTED,
                            f"binding argument '{next(iter(arguments))}' is not implemented")
        if x.type == "headers" and (why := x_match_error(arguments)):
            raise AmqpError(PRECONDITION_FAILED, why, 50, 20)
        b = Binding(x.name, q, routing_key, dict(arguments))
        if not x.has(b):  # (re-binding an existing one stays fine at either bound)
            if self.exchanges_shared.bindings >= self.max_bindings:
                self._refuse_binding(50, 20)
            self._check_arguments(b.cost, f"bind {_vhost('queue', q.name)} to "
                                  f"{_vhost('exchange', x.name)}", 50, 20)
        if not x.add(b):
            return False
        if q.doc_id is not None and x.durable:
            doc = self.store.stage_insert(persist.COLL, {
                "_kind": "bind", "exchange": x.name, "queue": q.name,
                "routing_key": routing_key, "arguments": persist.jsonable(arguments)})
            b.doc_id = doc["_id"]
            return True
        return False

    def _refuse_binding(self, class_id: int, method_id: int) -> None:
        self.counters["binding_limit_refused"] += 1
        raise AmqpError(PRECONDITION_FAILED, f"binding limit of {self.max_bindings} "
                        "in vhost '/' is reached", class_id, method_id)

    def _check_arguments(self, cost: int, what: str, class_id: int, method_id: int) -> None:
        """406 if keeping a new argument table of ``cost`` bytes (``tablecost``) would take
        the broker past ``--amqp-max-arguments-bytes``; one without arguments always fits
        (after a recovery over the bound, only tables are refused)."""
        used = self.exchanges_shared.argument_bytes
        if cost and used + cost > self.max_arguments_bytes:
            self.counters["arguments_limit_refused"] += 1
            # The limit first: a reply text is cut at 255 bytes, and names can be long.
            raise AmqpError(PRECONDITION_FAILED, f"arguments limit of "
                            f"{self.max_arguments_bytes} bytes in vhost '/' is reached "
                            f"(--amqp-max-arguments-bytes; {used} in use): cannot {what}, "
                            f"its arguments cost {cost} bytes", class_id, method_id)

    def unbind(self, q: Queue, exchange: str, routing_key: str,
               arguments: dict[str, Any] | None = None) -> bool:
        if not exchange:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        x = self.get_exchange(exchange)
        b = x.remove(q.name, routing_key, arguments)
        if b is None:
            return False
        staged = self._unstage_binding(b)
        self._maybe_auto_delete_exchange(x)
        return staged

    def bind_exchange(self, destination: str, source: str, routing_key: str,
                      arguments: dict[str, Any]) -> bool:
        """exchange.bind (RabbitMQ extension); returns whether a durable write was staged."""
        if not destination or not source:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        dx = self.get_exchange(destination)
        sx = self.get_exchange(source)
        if arguments:
            raise AmqpError(NOT_IMPLEMENTED,
                            f"binding argument '{next(iter(arguments))}' is not implemented")
        xb = ExchangeBinding(sx.name, dx.name, routing_key)
        if (self.exchanges_shared.bindings >= self.max_bindings
                and (dx.name, routing_key) not in sx.xbindings):
            self._refuse_binding(40, 30)
        if not sx.add_exchange_binding(xb):
            return False
        dx.sources.add(sx.name)
        if sx.durable and dx.durable:
            doc = self.store.stage_insert(persist.COLL, {
                "_kind": "bind", "exchange": sx.name, "destination_exchange": dx.name,
                "routing_key": routing_key, "arguments": {}})
            xb.doc_id = doc["_id"]
            return True
        return False

    def unbind_exchange(self, destination: str, source: str, routing_key: str) -> bool:
        if not destination or not source:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        sx = self.exchanges.get(source)
        if sx is None or destination not in self.exchanges:
            return False  # unbinding what is not bound succeeds (RabbitMQ)
        xb = sx.remove_exchange_binding(destination, routing_key)
        if xb is None:
            return False
        if not any(dest == destination for dest, _key in sx.xbindings):
            self.exchanges[destination].sources.discard(sx.name)
        staged = self._unstage_binding(xb)
        self._maybe_auto_delete_exchange(sx)
        return staged

    def _unstage_binding(self, b: Binding | ExchangeBinding) -> bool:
        if b.doc_id is not None:
            self.store.stage_delete(persist.COLL, b.doc_id)
            b.doc_id = None
            return True
        return False

    def bindings(self) -> list[dict[str, Any]]:
        # The default exchange binds every queue by its name (spec 3.1.3.1).
        rows = [binding_row("", q.name, q.name, q.durable) for q in self.queues.values()]
        for x in self.exchanges.values():
            for b in x.bindings.values():
                rows.append(binding_row(x.name, b.queue.name, b.routing_key,
                                        b.doc_id is not None))
            for xb in x.xbindings.values():
                rows.append(exchange_binding_row(x.name, xb.destination, xb.routing_key,
                                                 xb.doc_id is not None))
        return rows
