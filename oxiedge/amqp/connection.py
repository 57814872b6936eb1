"""The trio binding of one AMQP connection: a stream, an :class:`AmqpProtocol`, two tasks.

Theory of operation
-------------------
The *reader* (the connection's main task) drives the sans-IO protocol (``protocol.py``):
it feeds what the stream had, performs the actions the protocol asks for (a store commit,
a password check off the event loop) and reads again when the protocol needs data.  At the
end of each burst it applies back-pressure: while the unsent output is over the protocol's
high-water mark it waits for the writer, and while a memory or disk alarm is on a
publishing connection is not read (TCP back-pressure throttles the publisher, as in
RabbitMQ).

The *writer* task owns the send side: the protocol appends frames (no await, order kept)
and wakes it; it writes everything queued as one ``send_all`` and reports it sent, which
lets consumers skipped while the buffer was full have their turn again.

Deadlines: the whole handshake (the TLS handshake, when there is one, and the AMQP one)
must finish by ONE deadline, ``--amqp-handshake-timeout`` after the accept (the service
starts it; issue 16).  Heartbeats (spec 4.2.7): the server sends one when it has written
nothing for half the negotiated interval, and declares the peer dead when nothing arrived
for two intervals.  A connection exception waits at most :data:`CLOSE_TIMEOUT` for the
client's close-ok; after a client's close, the socket is kept open (read and discarded)
until the client closes its side or :data:`CLOSE_LINGER` passes.  Every connection that
ends without a clean close logs one line (peer, user, reason, counts) and counts in
``connection_errors`` (the server closed it with a connection exception) or
``connections_dropped`` (the peer vanished, timed out or broke the framing badly enough
that no close could be sent).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import trio

from oxiedge.amqp import spec
from oxiedge.amqp.codec import HEARTBEAT_FRAME, FrameParser, encode_method
from oxiedge.amqp.constants import CONNECTION_FORCED
from oxiedge.amqp.protocol import (
    CLOSE_OK_FRAME,
    COMMIT,
    NEED_DATA,
    AmqpProtocol,
    Authenticate,
)

if TYPE_CHECKING:
    from oxiedge.amqp.channel import Channel
    from oxiedge.amqp.service import AmqpService

CLOSE_TIMEOUT = 2.0
#: After close-ok, how long to keep reading (and discarding) until the client closes.
CLOSE_LINGER = 3.0
RECEIVE_SIZE = 1 << 16


class PeerGone(Exception):
    """The socket closed, or the peer missed its heartbeats."""


class AmqpConnection:
    """One client connection: the stream, its protocol object, the reader and the writer."""

    def __init__(self, service: AmqpService, stream: trio.abc.Stream, peer: str = "?",
                 tls_identity: str | None = None,
                 handshake_deadline: float | None = None) -> None:
        self.service = service
        self.store = service.broker.store
        self.log: logging.Logger = service.app.log
        self.stream = stream
        self.peer = peer
        #: When the handshake must be done by (trio time); default: timeout from now.
        self.handshake_deadline = handshake_deadline
        app = service.app
        self.proto = AmqpProtocol(
            service.broker, app.config, service.counters, app.permissions,
            service.server_properties(), alarms=app.alarms, peer=peer,
            tls_identity=tls_identity, wake=self._wake_writer, log=self.log)
        self._wake = trio.Event()
        self._drained = trio.Event()
        self._last_write = 0.0
        self._forced = False  # cancelled by the server's shutdown
        self._discarded_bytes = 0  # read and dropped after close-ok
        self._write_error = ""

    # -- what the service and the admin status read ---------------------------------------

    @property
    def channels(self) -> dict[int, Channel]:
        return self.proto.channels

    @property
    def parser(self) -> FrameParser:
        return self.proto.parser

    # -- output --------------------------------------------------------------------------

    def _wake_writer(self) -> None:
        self._wake.set()

    async def _writer(self, scope: trio.CancelScope) -> None:
        try:
            await self._write_loop()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._write_error = f"write failed ({exc.__cause__ or exc or 'closed'})"
            scope.cancel()  # the peer is gone: stop the reader too

    async def _write_loop(self) -> None:
        stream = self.stream
        proto = self.proto
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while data := proto.data_to_send():
                self._last_write = trio.current_time()
                await stream.send_all(data)
                proto.sent(len(data))
            self._drained.set()
            self._drained = trio.Event()

    async def _wait_drained(self, timeout: float | None = None) -> None:
        with trio.move_on_after(timeout if timeout is not None else math.inf):
            while self.proto.unsent:
                await self._drained.wait()

    async def _heartbeats(self) -> None:
        proto = self.proto
        interval = proto.heartbeat / 2
        while not proto.closed:  # none after close-ok, while the socket lingers
            await trio.sleep(interval)
            if trio.current_time() - self._last_write >= interval and not proto.closed:
                proto.send(HEARTBEAT_FRAME)

    async def _receive(self) -> bytes:
        heartbeat = self.proto.heartbeat
        timeout = heartbeat * 2 if heartbeat else math.inf
        with trio.move_on_after(timeout):
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise PeerGone("client closed the socket without connection.close")
            return bytes(data)
        raise PeerGone(f"missed heartbeats: nothing from the client for {timeout:g} s")

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it closes; always releases its state."""
        proto = self.proto
        self.service.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, nursery.cancel_scope)
                try:
                    await self._drive(nursery)
                    await self._wait_drained(CLOSE_TIMEOUT)
                    if proto.linger:
                        await self._discard_until_peer_closes()
                except PeerGone as exc:
                    proto.end_reason = proto.end_reason or str(exc)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    proto.end_reason = proto.end_reason or \
                        f"connection reset ({exc.__cause__ or exc or 'closed'})"
                except trio.Cancelled:
                    if not self._write_error:
                        self._forced = True  # the server is shutting down
                    raise
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self.service.connections.discard(self)
            proto.release()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                if self._forced and proto.opened and not proto.clean:
                    await self._say_shutdown()
                await self.stream.aclose()
            self._report()

    async def _drive(self, nursery: trio.Nursery) -> None:
        """Perform the protocol's actions until it is done (see the module docstring)."""
        proto = self.proto
        alarms = proto.alarms
        service = self.service
        timeout = service.app.config.amqp_handshake_timeout
        deadline = self.handshake_deadline
        if deadline is None:
            deadline = trio.current_time() + timeout
        size = 0
        with trio.CancelScope(deadline=deadline) as phase:
            opened = closing = False
            while True:
                action = proto.next_action()
                if not opened and proto.opened:
                    opened = True
                    phase.deadline = math.inf  # the handshake is done
                    if proto.heartbeat:
                        nursery.start_soon(self._heartbeats)
                if not closing and proto.closing:
                    closing = True  # our connection.close: wait briefly for close-ok
                    phase.deadline = trio.current_time() + CLOSE_TIMEOUT
                if action is NEED_DATA:
                    if opened and not closing:  # the end of a burst
                        if not proto.writable:
                            await self._wait_drained()
                        receiving = proto.parser.receiving
                        if alarms is not None and (proto.publisher or receiving):
                            # Publisher input (bodies being received included) counts toward
                            # the memory alarm as it arrives: sampled every few MiB.
                            service.note_publisher_input(size, alarms)
                            if alarms.blocked:
                                # Not read while a memory or disk alarm is on, like
                                # RabbitMQ; one still receiving its first body counts too.
                                await alarms.wait_unblocked()
                    data = await self._receive()
                    size = len(data)
                    proto.receive_data(data)
                elif action is COMMIT:
                    try:
                        await self.store.commit()
                    except Exception as exc:  # CommitError: the protocol decides
                        proto.committed(exc)
                    else:
                        proto.committed(None)
                elif isinstance(action, Authenticate):
                    # Hashing off the event loop, throttled after failures (oxiedge.login).
                    proto.authenticated(await service.app.logins.check(action.user,
                                                                       action.password))
                else:  # DONE
                    return
        if phase.cancelled_caught and not opened and not closing:
            service.counters["handshake_timeouts"] += 1
            proto.end_reason = f"handshake not completed within {timeout:g} s"

    async def _discard_until_peer_closes(self) -> None:
        """After close-ok: read and drop whatever the client still sends (spec: frames
        after connection.close are discarded) until it closes, for at most CLOSE_LINGER."""
        with trio.move_on_after(CLOSE_LINGER):
            try:
                while data := await self.stream.receive_some(RECEIVE_SIZE):
                    self._discarded_bytes += len(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # a reset after it read close-ok changes nothing

    def _report(self) -> None:
        """One log line and one counter for every connection that did not close cleanly."""
        proto = self.proto
        counters = self.service.counters
        if proto.clean:
            counters["connections_closed"] += 1
            if self._discarded_bytes:
                self.log.debug("AMQP %s: discarded %d bytes after close-ok", self.peer,
                               self._discarded_bytes)
            return
        if self._forced:
            reason = "broker shutdown"
        else:
            reason = proto.end_reason or self._write_error or "closed"
            counters["connection_errors" if proto.server_error else "connections_dropped"] += 1
        self.log.info("AMQP %s (user %r): connection %s: %s - %d published, %d delivered, "
                      "%d frames discarded", self.peer, proto.user,
                      "closed" if proto.server_error else "dropped", reason, proto.published,
                      proto.delivered, proto.parser.discarded)

    async def _say_shutdown(self) -> None:
        """Tell the client why the socket closes, as RabbitMQ does on shutdown (320), and
        wait briefly for its close-ok (frames before it are discarded)."""
        frame = encode_method(0, spec.ConnectionClose(
            CONNECTION_FORCED, "CONNECTION_FORCED - broker forced connection closure with "
            "reason 'shutdown'", 0, 0))
        try:
            with trio.move_on_after(0.5):
                await self.stream.send_all(frame)
                tail = b""
                while CLOSE_OK_FRAME not in tail:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        break
                    tail = tail[-len(CLOSE_OK_FRAME):] + data
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            pass
