"""One AMQP client connection: ``AmqpProtocol`` (sans-IO) on a ``net.Transport``.

The binding only: the protocol (``protocol.py``) decides everything, the transport loop
(``oxiedge.net.loop``, shared with MQTT) owns the stream, the commit, the writer,
back-pressure and the read deadlines.  What is AMQP's own here:

* heartbeats (spec 4.2.7): the server sends one when it has written nothing for half the
  negotiated interval (the protocol declares the peer dead after two silent intervals);
* the broker's shutdown: the protocol says 320 CONNECTION_FORCED and the client gets
  :data:`~oxiedge.amqp.streaming.SHUTDOWN_TIMEOUT` to answer before the socket closes;
* one log line and one counter for every connection that ends without a clean close
  (``connection_errors``: the server closed it with a connection exception;
  ``connections_dropped``: the peer vanished, timed out or broke the framing badly enough
  that no close could be sent).

The handshake deadline (``--amqp-handshake-timeout``) runs from the accept, TLS
handshake included (the service starts it; issue 16).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import trio

from oxiedge.amqp.codec import HEARTBEAT_FRAME, FrameParser
from oxiedge.amqp.protocol import AmqpProtocol
from oxiedge.amqp.streaming import HIGH_WATER, SHUTDOWN_TIMEOUT
from oxiedge.lograte import clip, suppressed_note
from oxiedge.net.loop import Transport

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.channel import Channel
    from oxiedge.amqp.ports import ConnectionLimits
    from oxiedge.app import App


class Host(Protocol):
    """What a connection needs of its service (``AmqpService`` is the one there is)."""

    app: App
    broker: Broker
    limits: ConnectionLimits
    counters: dict[str, int]
    connections: set[Any]

    def server_properties(self) -> dict[str, Any]:
        """connection.start's server properties."""

    def note_publisher_input(self, size: int, alarms: Any) -> None:
        """Publisher bytes read (the memory alarm samples every few MiB)."""


class AmqpConnection:
    """One client connection: a transport serving an ``AmqpProtocol``."""

    def __init__(self, service: Host, stream: trio.abc.Stream, peer: str = "?",
                 tls_identity: str | None = None,
                 handshake_deadline: float | None = None) -> None:
        app = service.app
        self.service = service
        self.log: logging.Logger = app.log
        self.close_lines = app.close_lines
        self.peer = peer
        # Above HIGH_WATER unsent bytes the reader stops reading (a client that publishes
        # but never reads its confirms) and queues skip this connection's consumers.
        self.transport = Transport(stream, app.store, pause_at=HIGH_WATER,
                                   authenticate=app.logins.check, blocked=app.blocked)
        self.proto = AmqpProtocol(
            service.broker, self.transport.output, service.limits, service.counters,
            app.permissions,
            service.server_properties(),
            clock=trio.lowlevel.current_clock().current_time,  # (= trio.current_time)
            handshake_deadline=handshake_deadline, alarms=app.alarms,
            note_input=lambda size: service.note_publisher_input(size, app.alarms),
            peer=peer, tls_identity=tls_identity, on_opened=self._opened, log=self.log)
        self._nursery: trio.Nursery | None = None
        self._forced = False  # cancelled by the server's shutdown
        self._finished = trio.Event()  # the transport loop has ended

    # -- what the service and the admin status read ---------------------------------------

    @property
    def channels(self) -> dict[int, Channel]:
        return self.proto.channels

    @property
    def parser(self) -> FrameParser:
        return self.proto.parser

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it closes; always releases its state."""
        service = self.service
        service.connections.add(self)
        finished = self._finished

        async def serve() -> None:
            # Shielded from the broker's shutdown, which is handled below: the client is
            # told why first (the transport still ends on its own, and on abort()).
            with trio.CancelScope(shield=True):
                try:
                    await self.transport.run(self.proto)
                finally:
                    finished.set()

        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(serve)
                try:
                    await finished.wait()
                except trio.Cancelled:
                    self._forced = True
                    with trio.CancelScope(shield=True):
                        if self.proto.shutdown():
                            with trio.move_on_after(SHUTDOWN_TIMEOUT):
                                await finished.wait()
                        self.transport.abort()
                        with trio.move_on_after(1):
                            await finished.wait()
                    raise
                nursery.cancel_scope.cancel()  # the heartbeats
        finally:
            service.connections.discard(self)
            self.proto.release()
            self._report()

    async def close(self, reason: str) -> None:
        """An operator closes this connection (``oxiedge connection close``): 320
        CONNECTION_FORCED with ``reason``; the client has SHUTDOWN_TIMEOUT to answer with
        close-ok, then the socket closes (at once if the handshake is not done)."""
        if self.proto.shutdown(reason):
            with trio.move_on_after(SHUTDOWN_TIMEOUT):
                await self._finished.wait()
        self.transport.abort()
        with trio.move_on_after(1):
            await self._finished.wait()

    def _opened(self) -> None:
        """The handshake is done: heartbeats, if negotiated."""
        if self.proto.heartbeat and self._nursery is not None:
            self._nursery.start_soon(self._heartbeats)

    async def _heartbeats(self) -> None:
        proto, output = self.proto, self.transport.output
        interval = proto.heartbeat / 2
        seen = output.writes
        while not proto.closed:  # none after close-ok, while the socket lingers
            await trio.sleep(interval)
            # Nothing written for a whole interval (the count of writes did not move;
            # cheaper on the send path than a timestamp per write): a heartbeat.
            if output.writes == seen and not proto.closed:
                proto.send(HEARTBEAT_FRAME)
                seen = output.writes + 1  # (the heartbeat's own write is no traffic)
            else:
                seen = output.writes

    def _report(self) -> None:
        """One log line and one counter for every connection that did not close cleanly."""
        proto = self.proto
        counters = self.service.counters
        if proto.clean:
            counters["connections_closed"] += 1
            if proto.discarded_bytes:
                self.log.debug("AMQP %s: discarded %d bytes after close-ok", self.peer,
                               proto.discarded_bytes)
            return
        if self._forced:
            reason = "broker shutdown"
        else:
            reason = proto.end_reason or "closed"
            counters["connection_errors" if proto.server_error else "connections_dropped"] += 1
        if not self._forced and proto.parser.awaiting_header and not proto.parser.unconsumed():
            # not one byte came: a port probe (a health check, `oxiedge check listeners`)
            self.log.debug("AMQP %s: closed before the protocol header", self.peer)
            return
        held = self.close_lines.take()
        if held is None:
            return  # (a flood of bad connections: counted above, not logged)
        self.log.info("AMQP %s (user %s): connection %s: %s - %d published, %d delivered, "
                      "%d frames discarded%s", self.peer, clip(proto.user),
                      "closed" if proto.server_error else "dropped",
                      clip(reason, 300, quote=False), proto.published,
                      proto.delivered, proto.parser.discarded, suppressed_note(held))
