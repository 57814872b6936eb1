"""One uplink connection to an upstream RabbitMQ node: an AMQP 0-9-1 client on trio.

Theory of operation
-------------------
``run_amqp_link`` connects (TCP, or TLS with certificate and host name checks), performs
the handshake, opens channel 1 in confirm mode, declares what it needs, calls
``io.up()`` and then runs four tasks until one of them fails:

reader
    The only task that reads the socket. It answers what needs an answer at once
    (Channel.Flow, Connection.Close, Channel.Close), turns publisher confirms into
    ``io.confirmed(seq)`` and queues inbound deliveries for the deliverer. It never awaits
    the manager, so heartbeats and confirms keep flowing while a command is being committed
    locally. No bytes for two heartbeat intervals means the peer (or the path to it) is
    dead, even when TCP still looks open.
publisher
    ``await io.take(n)`` → Basic.Publish frames. The manager bounds the window; this task
    only pauses while the upstream says Connection.Blocked or Channel.Flow(active=false).
heartbeat
    Sends a heartbeat frame when nothing was sent for half the negotiated interval.
deliverer
    Inbound deliveries in order: ``await io.deliver(topic, body)`` (returns once durable
    locally), then Basic.Ack. A crash before the ack leaves the message unacked upstream,
    so RabbitMQ redelivers it on the next connection: at-least-once, never lost.

A failure anywhere ends all four and raises :class:`LinkError` with a one-line reason; the
manager reconnects (possibly to another node) and resends what was not confirmed.
The handshake is the sans-IO ``amqp_handshake.ClientHandshake`` (this module only moves its
bytes); the other protocol details that need no I/O live in ``amqp_client.py``, opening the
TCP/TLS stream in ``streams.py``.
"""

from __future__ import annotations

import logging
import math
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

from oxiedge.amqp import spec
from oxiedge.amqp.codec import HEARTBEAT_FRAME, Command, encode_method
from oxiedge.bridge.props import from_amqp
from oxiedge.uplink.amqp_client import (
    CHANNEL,
    INBOUND_CHANNEL,
    ConfirmTracker,
    UpstreamFailure,
    UpstreamFrames,
    close_reason,
    publish_bytes,
    refuses_message,
    returned_seq,
)
from oxiedge.uplink.amqp_handshake import ClientHandshake, ClientSetup
from oxiedge.uplink.link import (
    Endpoint,
    LinkError,
    LinkIO,
    LinkOptions,
    OutMessage,
    PublishRefused,
    local_topic,
    upstream_filter,
    upstream_name,
)
from oxiedge.uplink.msgprops import expired
from oxiedge.uplink.streams import connect_tcp, oneline, start_tls

log = logging.getLogger("oxiedge")

#: Most messages taken from the outbox at once (the manager's window still rules).
TAKE_BATCH = 64
#: Publish frames are written in chunks of about this many bytes (one syscall for many
#: small messages; no multi-megabyte buffer for a batch of big ones).
WRITE_CHUNK = 65536
#: How long a stopping link spends on a polite Connection.Close before dropping the socket.
CLOSE_GRACE = 0.5


async def run_amqp_link(endpoint: Endpoint, options: LinkOptions, io: LinkIO) -> NoReturn:
    """Run one connection to ``endpoint`` until it fails (see the module docstring).

    Raises :class:`LinkError` with a one-line reason (never containing the password);
    cancellation closes the socket at once."""
    stream: trio.abc.Stream | None = None
    link: _Link | None = None
    phase = "TCP connect"
    try:
        with trio.move_on_after(options.connect_timeout) as deadline:
            stream = await connect_tcp(endpoint)
            if endpoint.tls:
                phase = "TLS handshake"
                stream = await start_tls(stream, endpoint, options)
            phase = "AMQP handshake"
            link = _Link(endpoint, options, io, stream)
            detail = await link.handshake()
        if deadline.cancelled_caught:
            raise LinkError(f"{endpoint.redacted()}: {phase} timed out after "
                            f"{options.connect_timeout:g} s")
        assert link is not None
        io.up(endpoint, detail)
        await link.run()
        raise AssertionError("unreachable: _Link.run returns only by raising")
    except BaseException:
        # Cancelled (possibly inside an exception group): the manager stops this link.
        if link is not None and link.ready and link.failure is None:
            await link.close_politely()
        raise
    finally:
        if stream is not None:
            await trio.aclose_forcefully(stream)


class _Closed(LinkError):
    """The upstream closed the TCP connection (EOF)."""


class _Broken(LinkError):
    """A send or receive on the stream failed (a reset, a broken pipe). The upstream may
    have said why just before (a Connection.Close still in our receive buffer, e.g.
    CONNECTION_FORCED on shutdown): the link waits briefly for the reader to find it."""


#: Commands (``--in``) use their own channel: a refused queue declaration (permissions, an
#: inequivalent queue type) closes only that channel, and forwarding goes on.
INBOUND = INBOUND_CHANNEL


class _Link:
    """The state of one established (or establishing) connection."""

    def __init__(self, endpoint: Endpoint, options: LinkOptions, io: LinkIO,
                 stream: trio.abc.Stream) -> None:
        self.endpoint = endpoint
        self.options = options
        self.io = io
        self.stream = stream
        self.frames = UpstreamFrames()
        self.frame_max = self.frames.frame_max
        self.heartbeat = 0
        self.send_lock = trio.Lock()
        self.last_sent = trio.current_time()
        self.confirms = ConfirmTracker()
        self.paused: set[str] = set()   # "blocked" (connection) and/or "flow" (channel)
        self.resumed = trio.Event()
        self.returned: dict[int, str] = {}  # seq -> why, between its Basic.Return and ack
        self.broken = False             # a send was interrupted: the stream is unusable
        self.failure: BaseException | None = None
        self.ready = False              # handshake complete
        self.deliveries_in, self.deliveries_out = \
            trio.open_memory_channel[Command](math.inf)

    # -------------------------------------------------------------- bytes
    async def send(self, data: bytes) -> None:
        async with self.send_lock:
            self.broken = True  # until send_all completes: cancelled mid-frame = unusable
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError,
                    ssl.SSLError) as exc:
                raise _Broken(f"{self.endpoint.redacted()}: send failed: "
                                f"{oneline(exc)}") from None
            self.broken = False
            self.last_sent = trio.current_time()

    async def send_method(self, method: spec.Method, channel: int = CHANNEL) -> None:
        await self.send(encode_method(channel, method))

    async def receive(self) -> Command:
        """The next command; heartbeats only count as traffic. No bytes for two heartbeat
        intervals (once negotiated) → LinkError."""
        while True:
            try:
                event = self.frames.next_event()
            except UpstreamFailure as exc:
                raise LinkError(str(exc)) from None
            if isinstance(event, Command):
                return event
            if event is not None:  # a heartbeat: its arrival already reset the timer
                continue
            timeout = 2 * self.heartbeat if self.heartbeat else math.inf
            with trio.move_on_after(timeout):
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError,
                        ssl.SSLError) as exc:
                    raise _Broken(f"{self.endpoint.redacted()}: receive failed: "
                                    f"{oneline(exc)}") from None
                if not data:
                    raise _Closed("connection closed by upstream")
                self.frames.feed(data)
                continue
            raise LinkError(f"no heartbeat from upstream in {timeout:g} s")

    async def handle_control(self, cmd: Command) -> bool:
        """Connection-level commands that may come at any time; True if handled.
        A close from the upstream is answered (spec 4.2.4, 4.5.6) and then raised."""
        m = cmd.method
        if isinstance(m, spec.ConnectionClose):
            await self._try_send(encode_method(0, spec.ConnectionCloseOk()))
            raise LinkError(close_reason(m))
        if isinstance(m, spec.ChannelClose):
            await self._try_send(encode_method(cmd.channel, spec.ChannelCloseOk()))
            if cmd.channel == CHANNEL and refuses_message(m):
                raise PublishRefused(close_reason(m), self.confirms.pending(), m.reply_code)
            raise LinkError(close_reason(m))
        if isinstance(m, spec.ConnectionBlocked):
            log.warning("uplink %s: upstream %s blocked publishing: %s", self.options.name,
                        self.endpoint.redacted(), m.reason)
            self.pause("blocked")
            return True
        if isinstance(m, spec.ConnectionUnblocked):
            log.info("uplink %s: upstream %s unblocked publishing", self.options.name,
                     self.endpoint.redacted())
            self.unpause("blocked")
            return True
        if isinstance(m, spec.ChannelFlow):  # old-style flow control: obey, then answer
            if m.active:
                self.unpause("flow")
            else:
                self.pause("flow")
            await self.send_method(spec.ChannelFlowOk(m.active), cmd.channel)
            return True
        return False

    async def _try_send(self, data: bytes) -> None:
        """Best effort (the peer is closing anyway)."""
        try:
            with trio.move_on_after(CLOSE_GRACE):
                await self.send(data)
        except LinkError:
            pass

    def pause(self, why: str) -> None:
        if not self.paused:
            self.resumed = trio.Event()
        self.paused.add(why)

    async def unpaused(self) -> None:
        """Return once neither Connection.Blocked nor Channel.Flow(false) is in force."""
        while self.paused:
            await self.resumed.wait()

    def unpause(self, why: str) -> None:
        self.paused.discard(why)
        if not self.paused:
            self.resumed.set()

    # -------------------------------------------------------------- handshake
    async def handshake(self) -> str:
        """Connection → channel 1 in confirm mode → declarations → consumer, as
        ``amqp_handshake.ClientHandshake`` says. Returns a short detail for ``io.up``
        (server product/version)."""
        ep, opts = self.endpoint, self.options
        hs = ClientHandshake(ClientSetup(
            username=ep.username if ep.username is not None else "guest",
            password=ep.password if ep.password is not None else "guest",
            connection_name=f"oxiedge {opts.device_id} uplink {opts.name}",
            vhost=ep.vhost, heartbeat=opts.heartbeat, exchange=opts.exchange,
            queue=opts.queue, queue_type=opts.queue_type,
            bind_keys=tuple(upstream_filter("amqp", opts.prefix, f) for f in opts.inbound),
            # retired filters are whole upstream filters (the prefix already applied)
            unbind_keys=tuple(upstream_filter("amqp", "", f) for f in opts.retired),
            prefetch=opts.window))
        await self.send(hs.start())
        while not hs.done:
            try:
                cmd = await self.receive()
            except _Closed:
                reason = hs.eof_reason()  # what the close means at this step, if more
                if reason is None:
                    raise
                raise LinkError(reason) from None
            try:
                answer = hs.receive(cmd)
            except UpstreamFailure as exc:
                raise LinkError(str(exc)) from None
            if answer is None:
                if not await self.handle_control(cmd):
                    raise LinkError(f"unexpected {cmd.method.NAME} from upstream "
                                    f"(waiting for {hs.waiting_for})")
                continue
            self.heartbeat, self.frame_max = hs.heartbeat, hs.frame_max
            self.frames.frame_max = hs.frame_max
            if answer:
                await self.send(answer)
        if hs.inbound_refused is not None:
            # Forwarding goes on; the next connection tries the commands again.
            log.warning("uplink %s: commands (--in) unavailable on %s: %s",
                        opts.name, ep.redacted(), hs.inbound_refused)
        self.ready = True
        return hs.summary()

    # -------------------------------------------------------------- running
    async def run(self) -> NoReturn:
        tasks: list[Callable[[], Awaitable[None]]] = [self.reader, self.publisher]
        if self.heartbeat:
            tasks.append(self.heartbeater)
        if self.options.inbound:
            tasks.append(self.deliverer)
        async with trio.open_nursery() as nursery:
            for task in tasks:
                nursery.start_soon(self._guard, task, nursery.cancel_scope)
        # Only reached after a task failed and cancelled the others.
        assert self.failure is not None
        raise self.failure

    async def _guard(self, task: Callable[[], Awaitable[None]],
                     scope: trio.CancelScope) -> None:
        """Run a task; its failure (the first one wins) ends the connection."""
        try:
            await task()
        except Exception as exc:  # LinkError, or a manager bug: re-raised as is by run()
            self._fail(exc, scope)

    def _fail(self, exc: BaseException, scope: trio.CancelScope) -> None:
        """The first failure wins, except that a broken stream gives way to the reason the
        upstream gave (its Connection.Close, read within CLOSE_GRACE): "320
        CONNECTION_FORCED" tells the operator more than "connection reset by peer"."""
        if isinstance(exc, _Broken):
            if self.failure is None:
                self.failure = exc
                scope.deadline = min(scope.deadline, trio.current_time() + CLOSE_GRACE)
            return
        if self.failure is None or isinstance(self.failure, _Broken):
            self.failure = exc
        scope.cancel()

    async def reader(self) -> None:
        while True:
            cmd = await self.receive()
            m = cmd.method
            if isinstance(m, spec.BasicAck):
                for seq in self.confirms.settle(m.delivery_tag, m.multiple):
                    why = self.returned.pop(seq, None)
                    if why is None:
                        self.io.confirmed(seq)
                    else:  # acked, but only after coming back: the upstream did not take it
                        self.io.returned(seq, why)
            elif isinstance(m, spec.BasicDeliver):
                self.deliveries_in.send_nowait(cmd)  # bounded by Basic.Qos prefetch
            elif isinstance(m, spec.BasicNack):
                # The broker could not take responsibility (e.g. a full queue with
                # overflow=reject-publish): they stay in the outbox; a new connection
                # resends them.
                seqs = self.confirms.settle(m.delivery_tag, m.multiple)
                shown = ", ".join(map(str, seqs[:5])) + (", ..." if len(seqs) > 5 else "")
                raise LinkError(f"upstream refused {len(seqs)} message(s) (basic.nack; "
                                f"seq {shown})")
            elif isinstance(m, spec.BasicReturn):
                self.on_return(cmd, m)
            elif isinstance(m, spec.BasicCancel):
                raise LinkError(f"upstream cancelled the consumer of {self.options.queue} "
                                "(queue deleted?)")
            elif not await self.handle_control(cmd):
                raise LinkError(f"unexpected {m.NAME} from upstream")

    def on_return(self, cmd: Command, m: spec.BasicReturn) -> None:
        """A mandatory publish no queue took (RabbitMQ sends it back, then acks it). Our
        message id ``DEVICE/UPLINK/SEQ`` says which outbox record it was."""
        seq = returned_seq(cmd.properties, self.options.device_id, self.options.name)
        if seq is None:
            # Not one of ours (or its properties were mangled): failing the link makes the
            # manager resend everything unconfirmed, so nothing is wrongly confirmed.
            raise LinkError(f"upstream returned a message without our message id "
                            f"(routing key {m.routing_key!r})")
        self.returned[seq] = (f"no queue for routing key {m.routing_key!r} on exchange "
                              f"{m.exchange!r} ({m.reply_code} {m.reply_text})")
        log.debug("uplink %s: message %d returned by upstream: %s", self.options.name, seq,
                  self.returned[seq])

    async def publisher(self) -> None:
        while True:
            await self.unpaused()
            batch = await self.io.take(TAKE_BATCH)
            now = int(time.time())
            chunk: list[bytes] = []
            size = 0
            for msg in batch:
                data = self._encode(msg, now)
                if data is None:
                    continue
                self.confirms.published(msg.seq)  # before sending: the ack may beat us
                chunk.append(data)
                size += len(data)
                if size >= WRITE_CHUNK:  # big bodies: don't build one huge buffer
                    await self._write(chunk)
                    chunk, size = [], 0
            if chunk:
                await self._write(chunk)

    def _encode(self, msg: OutMessage, now: int) -> bytes | None:
        """Basic.Publish frames for ``msg``; ``None`` (and parked: kept, not sent) if it
        cannot be expressed upstream. Failing the link could not help and would hold back
        everything behind it; dropping it would lose it."""
        opts = self.options
        key = upstream_name("amqp", opts.prefix, msg.topic)
        wall = time.time()
        if msg.props is not None and expired(msg.props, wall):
            self.io.confirmed(msg.seq)  # past its Message Expiry: never sent (msgprops.py)
            return None
        try:
            if key is None:
                raise ValueError("no AMQP routing key for it")
            return publish_bytes(opts.exchange, key, msg.payload, seq=msg.seq,
                                 topic=msg.topic, device_id=opts.device_id,
                                 link_name=opts.name,
                                 # when it was published HERE, not when a backlog drains
                                 timestamp=msg.enqueued_ms // 1000 or now,
                                 frame_max=self.frame_max, mqtt5=msg.props, now=wall)
        except ValueError as exc:
            self.io.park(msg.seq, str(exc))
            return None

    async def _write(self, chunk: list[bytes]) -> None:
        # A block that arrived while we waited in take(): hold what we have (the manager
        # counts it in flight; a reconnect resends it) and send it once unblocked.
        await self.unpaused()
        await self.send(b"".join(chunk))

    async def heartbeater(self) -> None:
        interval = self.heartbeat / 2
        while True:
            idle_until = self.last_sent + interval
            now = trio.current_time()
            if now < idle_until:
                await trio.sleep(idle_until - now)
                continue
            await self.send(HEARTBEAT_FRAME)

    async def deliverer(self) -> None:
        opts = self.options
        async for cmd in self.deliveries_out:
            m = cmd.method
            assert isinstance(m, spec.BasicDeliver)
            topic = local_topic("amqp", opts.prefix, m.routing_key)
            if topic is None:
                # Not ours to translate: reject without requeue (an upstream DLX keeps it).
                log.warning("uplink %s: rejecting inbound message with routing key %r "
                            "(no local topic)", opts.name, m.routing_key)
                await self.send_method(spec.BasicReject(m.delivery_tag, requeue=False),
                                       INBOUND)
                continue
            try:
                # its properties mapped as across amq.topic (MQTT 5 subscribers get them)
                props = from_amqp(cmd.properties, time.time()) if cmd.properties else None
                await self.io.deliver(topic, cmd.body or b"", props)
            except LinkError as exc:
                log.warning("uplink %s: rejecting inbound message for %r: %s",
                            opts.name, topic, exc)
                await self.send_method(spec.BasicReject(m.delivery_tag, requeue=False),
                                       INBOUND)
                continue
            await self.send_method(spec.BasicAck(m.delivery_tag), INBOUND)

    async def close_politely(self) -> None:
        """On cancellation: tell the upstream we leave (Connection.Close), bounded."""
        if self.broken or self.send_lock.locked():
            return
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_GRACE):
            try:
                await self.stream.send_all(encode_method(0, spec.ConnectionClose(
                    spec.REPLY_SUCCESS, "oxiedge uplink stopping")))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError,
                    ssl.SSLError):
                pass
