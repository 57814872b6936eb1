"""``AmqpService``: the AMQP 0-9-1 broker as an ``oxiedge serve`` service.

It owns the :class:`~oxiedge.amqp.broker.Broker` (exchanges, queues, bindings), accepts
connections, recovers durable state before any listener opens, and exposes the admin
operations (``queues``, ``exchanges``, ``bindings``) and counters.

The AMQP end of the bus (``oxiedge/bus.py``): :meth:`AmqpService.publish_from_bridge`
routes one message from another origin through the one enqueue path, :meth:`Broker.publish()
<oxiedge.amqp.publish.PublishPath.publish>` (durable records staged before the message
becomes deliverable); it returns a ``staged.Staged``, and on ``COMMIT`` the
caller awaits ``store.commit()`` (one commit for its whole batch) before it acknowledges its
source. Every client publish to ``amq.topic`` goes on to the bus (``broker.bus``, wired by
``server.py``) from one marked place of the publish path; bridge publishes do not, so
nothing loops back.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import trio

from oxiedge.amqp import persist, recovery, spec
from oxiedge.amqp.acktimeout import AckTimeouts
from oxiedge.amqp.broker import Broker
from oxiedge.amqp.connection import AmqpConnection
from oxiedge.amqp.exchanges import binding_row
from oxiedge.amqp.messageops import AmqpMessageOps
from oxiedge.amqp.operations import AmqpOperations
from oxiedge.amqp.ports import ConnectionLimits
from oxiedge.amqp.protocol import AmqpProtocol
from oxiedge.operations import handlers
from oxiedge.staged import COMMIT, MQTT, NOTHING, REFUSED, ROUTED, Origin, Staged
from oxiedge.tls import TlsManager, open_secured, peer_name, transport_socket

if TYPE_CHECKING:
    from oxiedge.app import App

PRODUCT = "oxiedge"
#: Publisher bytes read (across connections) between two extra memory-alarm samples.
ALARM_SAMPLE_BYTES = 4 << 20


class AmqpService:
    """The AMQP broker service (vhost ``/`` only)."""

    name = "amqp"

    def __init__(self, app: App, *, tls: TlsManager | None = None) -> None:
        self.app = app
        self.tls = tls  # the TLS listener's manager (handshakes), if there is one
        cfg = app.config
        # A queue held in memory (exclusive, non-durable) has RAM-sized bounds; a durable
        # one goes on queue logs with the disk-sized flags and the shared backlog budget.
        memory_limit = min(cfg.amqp_memory_queue_limit, cfg.amqp_queue_limit)
        self.broker = Broker(app.store, memory_limit,
                             min(cfg.amqp_memory_queue_bytes, cfg.amqp_queue_bytes))
        self.broker.paging.configure(cfg.amqp_queue_limit, cfg.amqp_queue_bytes, app.backlog)
        self.broker.topology.max_exchanges = cfg.amqp_max_exchanges
        #: The delivery acknowledgement timeout (``acktimeout.py``), swept by ``run``.
        self.ack_timeouts = AckTimeouts(cfg.amqp_consumer_timeout, self.broker.clock,
                                        self.broker.counters)
        self.broker.topology.max_bindings = cfg.amqp_max_bindings
        self.broker.topology.max_arguments_bytes = cfg.amqp_max_arguments_bytes
        self.broker.max_queues = cfg.amqp_max_queues
        #: What each connection's protocol object is given (it never sees the config).
        self.limits = ConnectionLimits(
            handshake_timeout=cfg.amqp_handshake_timeout, frame_max=cfg.amqp_frame_max,
            channel_max=cfg.amqp_channel_max, heartbeat=cfg.amqp_heartbeat,
            preauth_max_size=cfg.amqp_preauth_max_size,
            max_message_size=cfg.amqp_max_message_size,
            max_consumers=cfg.amqp_max_consumers_per_connection,
            max_queues=cfg.amqp_max_queues_per_connection,
            unacked_limit=memory_limit, tx_max_messages=cfg.amqp_tx_max_messages,
            tx_max_bytes=cfg.amqp_tx_max_bytes)
        self.connections: set[AmqpConnection] = set()
        self.counters = {"connections_total": 0, "connections_closed": 0,
                         "connection_errors": 0, "connections_dropped": 0,
                         "channel_errors": 0, "auth_failures": 0, "handshake_timeouts": 0,
                         "preauth_too_large": 0, "messages_too_large": 0,
                         "channel_limit_refused": 0, "queue_limit_refused": 0,
                         "consumer_limit_refused": 0, "channels_opened": 0,
                         "channels_closed": 0}
        #: What an operator may do (declare, delete, close...): the admin socket's and the
        #: HTTP API's one implementation.
        self.operations = AmqpOperations(self.broker, lambda: list(self.connections),
                                         self.counters)
        self.message_ops = AmqpMessageOps(self.broker, cfg.amqp_max_message_size, app.alarms)
        self._recovered = (0, 0)
        self._input_since_sample = 0
        self.broker.on_queue_expired = self._queue_expired
        # Stream consumers see a record once its round is synced (``stream.py``).
        app.store.committer.after_sync.append(self.broker.streams.synced)
        app.store.register_view(persist.COLL, self._message_view)

    def note_publisher_input(self, size: int, alarms: Any) -> None:
        """Publishing connections read ``size`` bytes: every ALARM_SAMPLE_BYTES the memory
        alarm samples the RSS at once, so a flood (or bodies trickled on many channels,
        which complete no message) trips it within a few MiB instead of a second's worth
        of loopback traffic (hundreds of MB)."""
        self._input_since_sample += size
        if self._input_since_sample >= ALARM_SAMPLE_BYTES:
            self._input_since_sample = 0
            alarms.check()

    # -- Service protocol ----------------------------------------------------------------

    async def recover(self) -> None:
        """Load durable queues, exchanges, bindings and messages (before listening)."""
        self._recovered = recovery.recover(self.broker)
        topology = self.broker.topology
        used, limit = topology.exchanges_shared.argument_bytes, topology.max_arguments_bytes
        if used > limit:  # all of it stays (durable state is never dropped for a bound)
            self.app.log.warning(
                "AMQP: the recovered argument tables of bindings, queues and exchanges cost "
                "%d bytes, over --amqp-max-arguments-bytes %d: all are kept; new ones with "
                "arguments get 406 until deletes bring it under", used, limit)
        await self.app.store.commit()  # orphan/duplicate clean-ups staged by recovery

    def _queue_expired(self, queue: Any) -> None:
        """x-expires deleted an exclusive queue: forget it on its connection."""
        owner = queue.exclusive_owner
        if isinstance(owner, AmqpProtocol):
            owner.exclusive_queues.pop(queue.name, None)

    def listening_suffix(self) -> str:
        queues, messages = self._recovered
        return f" - recovered {queues} durable queues, {messages} messages"

    def extra_lines(self) -> list[str]:
        return []

    async def run(
        self,
        listeners: list[trio.abc.Listener[Any]],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept connections on ``listeners`` until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.broker.timers.run)
            nursery.start_soon(self._sweep_ack_timeouts)
            for listener in listeners:
                nursery.start_soon(trio.serve_listeners,
                                   self.app.connections.guard(self._handle, "AMQP"), [listener])
            task_status.started()

    async def _sweep_ack_timeouts(self) -> None:
        """Close channels holding a delivery past its acknowledgement timeout."""
        sweep = self.ack_timeouts
        while True:
            await trio.sleep(sweep.interval)
            sweep.sweep([c.proto for c in self.connections])

    async def _handle(self, stream: trio.abc.Stream) -> None:
        # ONE deadline for the whole handshake, TLS included (issue 16): a client that
        # trickles its TLS handshake cannot then take another full AMQP handshake timeout.
        deadline = trio.current_time() + self.app.config.amqp_handshake_timeout
        go_on, identity = False, None
        with trio.move_on_at(deadline) as tls_phase:
            go_on, identity = await open_secured(self.tls, stream, "AMQP")
        if tls_phase.cancelled_caught:  # the TLS handshake used up the whole deadline
            self.counters["handshake_timeouts"] += 1
            await trio.aclose_forcefully(stream)
            return
        if not go_on:
            return
        self.counters["connections_total"] += 1
        peer = peer_name(stream)
        sock = transport_socket(stream)
        try:
            import socket

            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        except OSError:
            pass
        try:
            # A set identity (a verified client certificate) offers EXTERNAL.
            conn = AmqpConnection(self, stream, peer, identity, deadline)
            await conn.run()
        except Exception:  # one broken connection must never take the broker down
            self.app.log.exception("AMQP %s: connection failed", peer)

    def admin_handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """The listings and the operator's operations (``amqp/operations.py``)."""
        return {
            "queues": lambda args: self.queue_rows(),
            "exchanges": lambda args: self.exchange_rows(),
            "bindings": lambda args: self.binding_rows(args.get("queue")),
            **handlers(self.operations.operations()),
            **handlers(self.message_ops.operations()),
        }

    def status(self) -> dict[str, Any]:
        b = self.broker
        cfg = self.app.config
        return {
            "connections": len(self.connections),
            "channels": sum(len(c.channels) for c in self.connections),
            "queues": len(b.queues),
            "exchanges": len(b.exchanges),
            "bindings": b.topology.exchanges_shared.bindings,
            "max_exchanges": b.topology.max_exchanges,
            "max_bindings": b.topology.max_bindings,
            "arguments_bytes": b.topology.exchanges_shared.argument_bytes,
            "max_arguments_bytes": b.topology.max_arguments_bytes,
            "route_cache_bytes": b.topology.exchanges_shared.bytes,
            "route_caches_cleared": b.topology.exchanges_shared.cleared,
            "ready": sum(q.ready_count() for q in b.queues.values()),
            "unacked": sum(q.unacked for q in b.queues.values()),
            "consumers": sum(len(q.consumers) for q in b.queues.values()),
            "memory_queue_limit": b.queue_limit,
            "memory_queue_bytes_default": b.queue_bytes,
            **b.paging.status(b.queues.values()),  # bounds, the backlog budget, reads
            "receiving_bytes": sum(c.parser.receiving_bytes for c in self.connections
                                   if c.parser is not None),
            # publishes taken in whose confirm waits for their commit round (per connection,
            # as receiving_bytes: the connections are few, the queues may be many)
            "unconfirmed": sum(len(c.proto.burst.confirms) for c in self.connections),
            "max_message_size": cfg.amqp_max_message_size,
            "channel_max": cfg.amqp_channel_max,
            "max_queues": cfg.amqp_max_queues,
            "max_queues_per_connection": cfg.amqp_max_queues_per_connection,
            "max_consumers_per_connection": cfg.amqp_max_consumers_per_connection,
            "preauth_max_size": cfg.amqp_preauth_max_size,
            "handshake_timeout_s": cfg.amqp_handshake_timeout,
            "consumer_timeout_s": cfg.amqp_consumer_timeout,
            **b.streams.status(b.queues.values()),
            **b.counters,
            "expired": b.counters["expired"] + b.paging.paged.expired,  # (+ unread ones)
            "expiry_rounds_cut": b.timers.rounds_cut,  # (queues.EXPIRE_ROUND)
            **self.counters,
        }

    # -- rows ----------------------------------------------------------------------------

    def queue_rows(self) -> list[dict[str, Any]]:
        return [q.row() for q in sorted(self.broker.queues.values(), key=lambda q: q.name)]

    def queue_row_slices(self, size: int = 250) -> Iterator[list[dict[str, Any]]]:
        """``queue_rows`` a slice of ``size`` rows at a time, for a caller that lets the
        event loop run between slices (the HTTP API of a broker with 10,000 queues): only
        the names are sorted at once; a queue deleted between slices is left out."""
        queues = self.broker.queues
        names = sorted(queues)
        for start in range(0, len(names), size):
            yield [q.row() for name in names[start:start + size]
                   if (q := queues.get(name)) is not None]

    def queue_row(self, name: str) -> dict[str, Any] | None:
        q = self.broker.queues.get(name)
        return None if q is None else q.row()

    def binding_rows(self, queue: Any = None) -> list[dict[str, Any]]:
        """``oxiedge bindings``' rows; with ``queue`` (a name), only that queue's, without
        making a row for any other (the console's queue page)."""
        if queue is None:
            return self.broker.topology.bindings(list(self.broker.queues.values()))
        q = self.broker.queues.get(str(queue))
        if q is None:
            return []
        return [binding_row("", q.name, q.name, q.durable)] + [
            binding_row(x.name, q.name, b.routing_key, b.doc_id is not None)
            for x in self.broker.exchanges.values() for b in x.bindings.values()
            if b.queue is q]

    def exchange_rows(self) -> list[dict[str, Any]]:
        return [x.row() for x in sorted(self.broker.exchanges.values(), key=lambda x: x.name)]

    def _message_view(self) -> Any:
        names = {q.qid: q.name for q in self.broker.queues.values()}
        return persist.iter_message_docs(self.app.store, names.get)

    def server_properties(self) -> dict[str, Any]:
        from oxiedge import __version__ as version

        return {
            "product": PRODUCT,
            "version": version,
            "platform": f"Python {platform.python_version()}",
            "copyright": "oxiedge contributors",
            "information": "AMQP 0-9-1 broker of oxiedge",
            "capabilities": {
                "publisher_confirms": True,
                "basic.nack": True,
                "consumer_cancel_notify": True,
                "connection.blocked": True,
                "exchange_exchange_bindings": True,
                "per_consumer_qos": True,
                "authentication_failure_close": True,
            },
        }

    # -- the bus's entry into AMQP ------------------------------------------------------

    def publish_from_bridge(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        persistent: bool,
        properties: spec.BasicProperties | None = None,
        origin: Origin = MQTT,
    ) -> Staged:
        """Route one message from another origin of the bus (``origin``: an MQTT client,
        an uplink; never ``AMQP``, whose clients publish through their connection); stage
        its durable records.

        Returns a ``staged.Staged``: ``ROUTED`` if it reached a queue, ``REFUSED`` if a
        queue's reject-publish refused it (MQTT 5's PUBACK 0x97); on ``COMMIT``,
        ``await store.commit()`` before acknowledging the source. An unknown exchange
        routes nowhere (``NOTHING``).
        """
        if properties is None:
            properties = spec.BasicProperties(delivery_mode=2 if persistent else 1)
        x = self.broker.exchanges.get(exchange)
        if x is None:
            return NOTHING
        # origin: this message comes from elsewhere on the bus, so it is not handed back
        # to the bus from amq.topic (the echo rule).
        flags, _queues = self.broker.publish(x, routing_key, properties.encode(), body,
                                             persistent, properties.expiration, origin=origin)
        return flags & (ROUTED | COMMIT | REFUSED)
