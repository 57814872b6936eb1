"""The operator's AMQP operations (``oxiedge/operations.py`` tells the whole story).

Declarations go through :class:`~oxiedge.amqp.broker.Broker`'s own methods - the checks,
bounds, argument validation and durable records of a client's ``queue.declare``,
``queue.delete``, ``queue.purge``, ``exchange.declare``/``delete``, ``queue.bind``/``unbind``
and ``exchange.bind``/``unbind`` - and each returns once what it staged is committed.
An :class:`~oxiedge.amqp.errors.AmqpError` becomes an ``OperationError`` with RabbitMQ's
reply text (``NOT_FOUND - no queue 'x' in vhost '/'``).

Where the operator's verbs differ from the protocol's, they follow rabbitmqadmin and
the management API: deleting or purging a queue, exchange or binding that does not exist
is ``not_found`` (AMQP's delete succeeds silently); an exclusive queue may be deleted or
purged (its connection forgets it); queues are not declared exclusive (no connection
would own them).

Connections, channels and consumers are read from the live connections (``connections``:
the service's set), and ``close_connection`` tells the client why (320
CONNECTION_FORCED with the operator's reason, as ``rabbitmqctl close_connection`` does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from oxiedge.amqp.constants import ACCESS_REFUSED, NOT_FOUND
from oxiedge.amqp.consumers import server_cancel
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.selection import activity
from oxiedge.operations import (
    BAD_REQUEST,
    FORBIDDEN,
    REFUSED,
    Args,
    Operation,
    OperationError,
)
from oxiedge.operations import NOT_FOUND as MISSING

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.protocol import AmqpProtocol
    from oxiedge.amqp.queues import Queue

#: The reason a client hears when none is given (``rabbitmqctl close_connection``'s words).
DEFAULT_CLOSE_REASON = "closed by the administrator"


class LiveConnection(Protocol):
    """What the operations read of one client connection (``AmqpConnection``)."""

    peer: str
    proto: AmqpProtocol

    async def close(self, reason: str) -> None:
        """Tell the client (320 CONNECTION_FORCED, ``reason``) and end the connection."""


# -- result rows ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QueueDeclared:
    name: str
    created: bool  # False: it existed with the same properties
    durable: bool
    messages: int
    consumers: int


@dataclass(frozen=True, slots=True)
class QueueCount:
    """What a delete or purge did: ``messages`` ready messages went with it."""
    name: str
    messages: int


@dataclass(frozen=True, slots=True)
class ExchangeDeclared:
    name: str
    type: str
    created: bool
    durable: bool


@dataclass(frozen=True, slots=True)
class Named:
    name: str


@dataclass(frozen=True, slots=True)
class BindingChanged:
    source: str
    destination: str
    destination_type: str
    routing_key: str
    changed: bool  # add: False if it was bound already


@dataclass(frozen=True, slots=True)
class ConnectionRow:
    name: str  # the peer, ``host:port`` (the id ``connection close`` takes)
    user: str
    state: str  # starting | running | blocking | blocked | closing
    channels: int
    consumers: int
    unacked: int
    published: int
    delivered: int
    protocol: str = "AMQP 0-9-1"
    vhost: str = "/"
    #: What is kept of the client's start-ok table (bounded: amqp/client_properties.py).
    client_properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChannelRow:
    connection: str
    number: int
    user: str
    state: str  # running | closing
    consumers: int
    unacked: int
    prefetch: int
    global_prefetch: int
    confirm: bool


@dataclass(frozen=True, slots=True)
class ConsumerRow:
    queue: str
    consumer_tag: str
    connection: str
    channel: int
    ack_required: bool
    exclusive: bool
    prefetch: int
    unacked: int
    priority: int  # x-priority
    #: up, or on a single-active-consumer queue single_active / waiting (selection.py)
    activity_status: str
    active: bool


_KINDS = {NOT_FOUND: MISSING, ACCESS_REFUSED: FORBIDDEN}


def _refusal(exc: AmqpError) -> OperationError:
    kind = _KINDS.get(exc.code, REFUSED)
    return OperationError(exc.reply_text, kind)


class AmqpOperations:
    """The AMQP operations on one broker (see the module docstring)."""

    def __init__(self, broker: Broker, connections: Callable[[], Iterable[LiveConnection]],
                 counters: dict[str, int],
                 commit: Callable[[], Awaitable[None]] | None = None) -> None:
        self.broker = broker
        self.connections = connections
        self.counters = counters  # the service's (``queue_limit_refused``)
        self._commit = commit if commit is not None else broker.store.commit

    async def _done(self, staged: bool) -> None:
        if staged:
            await self._commit()

    def _queue(self, name: str) -> Queue:
        q = self.broker.queues.get(name)
        if q is None:
            raise OperationError(f"NOT_FOUND - no queue '{name}' in vhost '/'", MISSING)
        return q

    # -- queues ---------------------------------------------------------------------------

    async def declare_queue(self, name: str, *, durable: bool = True, auto_delete: bool = False,
                            arguments: dict[str, Any] | None = None) -> QueueDeclared:
        broker = self.broker
        if not name:
            raise OperationError("a queue declared by the operator needs a name", BAD_REQUEST)
        created = name not in broker.queues
        if created and len(broker.queues) >= broker.max_queues:
            self.counters["queue_limit_refused"] = self.counters.get("queue_limit_refused", 0) + 1
            raise OperationError(f"PRECONDITION_FAILED - cannot declare queue '{name}': queue "
                                 f"limit of {broker.max_queues} in vhost '/' is reached")
        try:
            q, staged = broker.declare_queue(
                name, passive=False, durable=durable, exclusive=False, auto_delete=auto_delete,
                arguments=dict(arguments or {}), owner=None)
        except AmqpError as exc:
            raise _refusal(exc) from None
        await self._done(staged)
        return QueueDeclared(q.name, created, q.durable, q.ready_count(), len(q.consumers))

    async def delete_queue(self, name: str, *, if_unused: bool = False,
                           if_empty: bool = False) -> QueueCount:
        q = self._queue(name)
        if if_unused and q.consumers:
            raise OperationError(f"PRECONDITION_FAILED - queue '{name}' in vhost '/' in use")
        if if_empty and q.ready_count():
            raise OperationError(f"PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty")
        durable = q.doc_id is not None
        count = self.broker.delete_queue(q, server_cancel)  # consumers hear basic.cancel
        owner_queues = getattr(q.exclusive_owner, "exclusive_queues", None)
        if isinstance(owner_queues, dict):
            owner_queues.pop(q.name, None)
        self.broker.store.kick()
        await self._done(durable)
        return QueueCount(name, count)

    async def purge_queue(self, name: str) -> QueueCount:
        q = self._queue(name)
        count = self.broker.purge(q)
        await self._done(q.doc_id is not None and count > 0)
        return QueueCount(name, count)

    # -- exchanges --------------------------------------------------------------------

    async def declare_exchange(self, name: str, type: str, *, durable: bool = True,
                               auto_delete: bool = False, internal: bool = False,
                               arguments: dict[str, Any] | None = None) -> ExchangeDeclared:
        created = name not in self.broker.exchanges
        try:
            x, staged = self.broker.topology.declare_exchange(
                name, type, passive=False, durable=durable, auto_delete=auto_delete,
                internal=internal, arguments=dict(arguments or {}))
        except AmqpError as exc:
            raise _refusal(exc) from None
        await self._done(staged)
        return ExchangeDeclared(x.name, x.type, created, x.durable)

    async def delete_exchange(self, name: str, *, if_unused: bool = False) -> Named:
        if name and not name.startswith("amq.") and name not in self.broker.exchanges:
            raise OperationError(f"NOT_FOUND - no exchange '{name}' in vhost '/'", MISSING)
        try:
            staged = self.broker.topology.delete_exchange(name, if_unused)
        except AmqpError as exc:
            raise _refusal(exc) from None
        await self._done(staged)
        return Named(name)

    # -- bindings ---------------------------------------------------------------------

    async def bind(self, source: str, destination: str, *, routing_key: str = "",
                   destination_type: str = "queue",
                   arguments: dict[str, Any] | None = None) -> BindingChanged:
        broker = self.broker
        before = broker.topology.exchanges_shared.bindings
        try:
            if destination_type == "queue":
                staged = broker.topology.bind(self._queue(destination), source, routing_key,
                                              dict(arguments or {}))
            elif destination_type == "exchange":
                staged = broker.topology.bind_exchange(destination, source, routing_key,
                                                       dict(arguments or {}))
            else:
                raise OperationError("destination_type must be 'queue' or 'exchange', not "
                                     f"{destination_type!r}", BAD_REQUEST)
        except AmqpError as exc:
            raise _refusal(exc) from None
        await self._done(staged)
        return BindingChanged(source, destination, destination_type, routing_key,
                              broker.topology.exchanges_shared.bindings != before)

    async def unbind(self, source: str, destination: str, *, routing_key: str = "",
                     destination_type: str = "queue",
                     arguments: dict[str, Any] | None = None) -> BindingChanged:
        broker = self.broker
        if source not in broker.exchanges:
            raise OperationError(f"NOT_FOUND - no exchange '{source}' in vhost '/'", MISSING)
        before = broker.topology.exchanges_shared.bindings
        try:
            if destination_type == "queue":
                staged = broker.topology.unbind(self._queue(destination), source, routing_key,
                                                dict(arguments or {}))
            elif destination_type == "exchange":
                if destination not in broker.exchanges:
                    raise OperationError(f"NOT_FOUND - no exchange '{destination}' in vhost "
                                         "'/'", MISSING)
                staged = broker.topology.unbind_exchange(destination, source, routing_key)
            else:
                raise OperationError("destination_type must be 'queue' or 'exchange', not "
                                     f"{destination_type!r}", BAD_REQUEST)
        except AmqpError as exc:
            raise _refusal(exc) from None
        await self._done(staged)
        if broker.topology.exchanges_shared.bindings == before:
            raise OperationError(f"NOT_FOUND - no binding from exchange '{source}' to "
                                 f"{destination_type} '{destination}' with routing key "
                                 f"'{routing_key}' in vhost '/'", MISSING)
        return BindingChanged(source, destination, destination_type, routing_key, True)

    # -- connections, channels, consumers -----------------------------------------------

    def connection_rows(self) -> list[ConnectionRow]:
        rows = []
        for conn in self.connections():
            proto = conn.proto
            channels = proto.channels.values()
            rows.append(ConnectionRow(
                conn.peer, proto.user, _state(proto), len(proto.channels),
                sum(len(ch.consumers) for ch in channels),
                sum(len(ch.settlement.unacked) for ch in channels), proto.published,
                proto.delivered, client_properties=dict(proto.handshake.client_properties)))
        return sorted(rows, key=lambda r: r.name)

    async def close_connection(self, name: str, reason: str = DEFAULT_CLOSE_REASON
                               ) -> Named:
        found = [c for c in self.connections() if c.peer == name]
        if not found:
            raise OperationError(f"no AMQP connection {name!r} (see `oxiedge connections`)",
                                 MISSING)
        await found[0].close(reason or DEFAULT_CLOSE_REASON)
        return Named(name)

    def channel_rows(self) -> list[ChannelRow]:
        rows = []
        for conn in self.connections():
            proto = conn.proto
            for number, ch in sorted(proto.channels.items()):
                rows.append(ChannelRow(
                    conn.peer, number, proto.user, "closing" if ch.closing else "running",
                    len(ch.consumers), len(ch.settlement.unacked), ch.prefetch,
                    ch.settlement.global_prefetch, ch.confirm))
        return sorted(rows, key=lambda r: (r.connection, r.number))

    def consumer_rows(self, queue: str | None = None) -> list[ConsumerRow]:
        """Every consumer's row (with ``queue``: of that queue only)."""
        rows = []
        for conn in self.connections():
            for number, ch in conn.proto.channels.items():
                for c in ch.consumers:
                    if queue is not None and c.queue.name != queue:
                        continue
                    q = c.queue
                    status = activity(q.selector, c, q.consumers)
                    rows.append(ConsumerRow(q.name, c.tag, conn.peer, number, not c.no_ack,
                                            c.exclusive, c.prefetch, c.unacked, c.priority,
                                            status, status != "waiting"))
        return sorted(rows, key=lambda r: (r.queue, r.consumer_tag))

    # -- the operation table ------------------------------------------------------------

    def operations(self) -> list[Operation]:
        """This broker's entries of the operation table (``docs/operations.md``)."""

        def where(a: Args) -> dict[str, Any]:
            return {"routing_key": a.text("routing_key", ""),
                    "destination_type": a.text("destination_type", "queue"),
                    "arguments": a.table("arguments")}

        return [
            Operation("queue.declare", "declare a queue (durable by default)", lambda a:
                      self.declare_queue(a.text("name", required=True),
                                         durable=a.flag("durable", True),
                                         auto_delete=a.flag("auto_delete"),
                                         arguments=a.table("arguments")), writes=True),
            Operation("queue.delete", "delete a queue and its messages", lambda a:
                      self.delete_queue(a.text("name", required=True),
                                        if_unused=a.flag("if_unused"),
                                        if_empty=a.flag("if_empty")), writes=True),
            Operation("queue.purge", "drop a queue's ready messages", lambda a:
                      self.purge_queue(a.text("name", required=True)), writes=True),
            Operation("exchange.declare", "declare an exchange (durable by default)", lambda a:
                      self.declare_exchange(a.text("name", required=True, empty=False),
                                            a.text("type", "direct"),
                                            durable=a.flag("durable", True),
                                            auto_delete=a.flag("auto_delete"),
                                            internal=a.flag("internal"),
                                            arguments=a.table("arguments")), writes=True),
            Operation("exchange.delete", "delete an exchange and its bindings", lambda a:
                      self.delete_exchange(a.text("name", required=True, empty=False),
                                           if_unused=a.flag("if_unused")), writes=True),
            Operation("binding.add", "bind a queue or exchange to an exchange", lambda a:
                      self.bind(a.text("source", required=True),
                                a.text("destination", required=True), **where(a)),
                      writes=True),
            Operation("binding.remove", "remove a binding", lambda a:
                      self.unbind(a.text("source", required=True),
                                  a.text("destination", required=True), **where(a)),
                      writes=True),
            Operation("connections", "AMQP connections", lambda a: self.connection_rows()),
            Operation("connection.close", "close an AMQP connection (320, with a reason)",
                      lambda a: self.close_connection(a.text("name", required=True),
                                                      a.text("reason", DEFAULT_CLOSE_REASON)),
                      writes=True),
            Operation("channels", "AMQP channels", lambda a: self.channel_rows()),
            Operation("consumers", "AMQP consumers (of one queue with queue)",
                      lambda a: self.consumer_rows(a.text("queue", "") or None)),
        ]


def _state(proto: AmqpProtocol) -> str:
    """RabbitMQ's connection states: ``blocking`` while a resource alarm is on and the
    connection has not published yet, ``blocked`` once it publishes into it."""
    if not proto.opened:
        return "starting"
    if proto.closing or proto.closed:
        return "closing"
    alarms = proto.alarms
    if alarms is not None and alarms.blocked:
        return "blocked" if proto.burst.publisher else "blocking"
    return "running"


__all__ = ["DEFAULT_CLOSE_REASON", "AmqpOperations", "LiveConnection"]
