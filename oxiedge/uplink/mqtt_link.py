"""The MQTT uplink: one client connection from this device to an upstream broker
(Mosquitto, EMQX, RabbitMQ's MQTT plugin), on trio, in MQTT 5 when the upstream speaks it
and MQTT 3.1.1 otherwise.

Theory of operation
-------------------
``run_mqtt_link`` opens TCP (or TLS, verifying the certificate and host name), sends
CONNECT with ``clean_session=0`` - the upstream keeps a *persistent session* for our client
id, so commands published while the device is offline wait there - SUBSCRIBEs the ``--in``
filters at QoS 1 and reports ``io.up``. All of that is bounded by ``connect_timeout``.
Packets are encoded and decoded by the broker's own sans-IO codecs through ``Wire``
(``mqtt_wire.py``: the one place MQTT 5 and 3.1.1 differ); this module only moves bytes and
keeps the client-side state. The first connection of an uplink to an endpoint speaks MQTT 5;
an upstream that refuses it (CONNACK 0x84, or a 3.1.1 CONNACK) is connected to again at
once in 3.1.1, and that endpoint is remembered as 3.1.1 for the life of the process.
In MQTT 5 each message goes with its properties (``msgprops.py``: Content Type, Response
Topic, Correlation Data, User Properties, the Message Expiry Interval left; a message that
expired in the outbox is not sent), and an inbound message's properties are published
locally with it; a PUBACK that refuses a message (0x80 or above) confirms it all the same
and is logged with its reason (resending could only be refused again).

Then four tasks share the connection until it fails:

* the *sender* takes outbox messages (``io.take``) and PUBLISHes them at QoS 1 with packet
  ids 1..65535, cycling and skipping ids still in flight (MQTT-2.3.1-2). ``inflight`` maps
  id -> outbox seq; the PUBACK for an id confirms exactly that seq (``io.confirmed``).
* the *reader* decodes everything the upstream sends. It never waits for the local store:
  inbound PUBLISHes go through a bounded channel to
* the *deliverer*, which ``await io.deliver`` s each inbound message (durable locally) and
  only then acknowledges it upstream - PUBACK for QoS 1, PUBREC for QoS 2 - in the order
  received (MQTT-4.6.0-2). A crash between the two means the upstream redelivers: at least
  once, never lost.
* the *watchdog* implements keep-alive (3.1.2.10): a PINGREQ when we sent nothing, or heard
  nothing, for ``keep_alive`` seconds, and a ``LinkError`` when nothing at all arrived for
  1.5 x ``keep_alive`` (the same bound the server applies to us, MQTT-3.1.2-24). A silently
  dead link - TCP open, nothing flowing - is therefore detected within 1.5 x keep-alive.
  While the reader cannot read because the deliverer is busy *committing locally*, the
  clock is held; while the deliverer waits to send an acknowledgement it is not.

Every failure - EOF, OSError, TLS, timeout, a malformed or unexpected packet - ends the
function with ``LinkError`` and a one-line reason; it never returns. Cancellation closes
the socket at once (after a DISCONNECT if no write was interrupted).

Decisions
---------
* Inbound messages outside the prefix (``local_topic`` is None) are acknowledged and
  dropped with a warning: they can never be delivered, and not acknowledging them would
  have the upstream redeliver them on every connection.
* When ``io.deliver`` raises ``LinkError`` the local side refused the message for good (a
  topic that cannot be published here): it is acknowledged and dropped with a warning, like
  a message outside the prefix, so it neither loops nor holds one of the upstream's
  per-client in-flight slots. A transient local failure (a failed commit) is not a
  ``LinkError``: it ends the connection unacknowledged and the upstream redelivers it.
* SUBSCRIBE is sent on every connection, even when the session was resumed, so changed
  ``--in`` filters take effect. The upstream then re-sends *retained* messages matching
  them (MQTT-3.8.4-3): retained commands are delivered again after each reconnect.
* Messages the previous connection left unconfirmed come back from the manager as new
  PUBLISHes with fresh packet ids and DUP=0, not the original ids (MQTT-4.4.0-1): for
  QoS 1 the upstream keeps no state per id, so the outcome is the same - at least once.
* Liveness is judged on bytes *received* only. ``--heartbeat`` 0 disables keep-alive and
  with it dead-link detection (only TCP errors end the link then). Sending one message
  that takes longer than 1.5 x keep-alive to upload also ends the link, since the PINGREQ
  waits behind it: keep the keep-alive above the upload time of the largest message.
* An inbound packet larger than ``MAX_INBOUND_PACKET`` is a ``LinkError``.
* An outbox message whose upstream name cannot exist (prefix + topic longer than 65535
  bytes) is *parked* (``io.park``): kept in the outbox, not sent, counted - as the AMQP link
  does with a routing key it cannot express. Failing the link instead would resend it first
  on every connection and hold back everything queued behind it; confirming it would lose
  it. (The manager never queues such a topic; it happens when the prefix changed.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import trio

from ..mqtt.codec import ProtocolError
from ..mqtt.packets import (
    Connack,
    Packet,
    Pingresp,
    Puback,
    Publish,
    Pubrel,
    Suback,
    Unsuback,
)
from ..mqtt.packets5 import Puback5, Publish5
from .link import (
    Endpoint,
    LinkError,
    LinkIO,
    LinkOptions,
    local_topic,
    upstream_filter,
    upstream_name,
)
from .mqtt_wire import Unsupported, Wire, keep_alive_seconds, refusal
from .msgprops import inbound_props, publish_block
from .streams import first_link_error, io_reason, open_stream

log = logging.getLogger("oxiedge.uplink")

#: Packet identifiers are 16-bit and non-zero (2.3.1): at most this many QoS 1 PUBLISHes
#: can be unacknowledged at once, whatever the manager's window.
MAX_PACKET_ID = 65535
#: Largest packet accepted from the upstream; a bigger one is a LinkError.
MAX_INBOUND_PACKET = 16 << 20
#: Bytes per read from the socket.
READ_SIZE = 65536
#: Inbound messages decoded but not yet delivered locally. When full, the reader stops
#: reading (TCP pushes back on the upstream) - the watchdog does not count that as dead.
INBOUND_BUFFER = 256
#: Most outbox messages asked for per ``io.take`` (written with one ``send_all``).
TAKE_LIMIT = 128
#: Encoded PUBLISHes are written once this many bytes are gathered (or the batch ends).
WRITE_CHUNK = 64 * 1024
#: A link is dead when nothing arrived for this many keep-alive periods (MQTT-3.1.2-24).
DEAD_AFTER = 1.5
#: Most upstream topic names kept encoded (a device publishes to few topics, forever).
TOPIC_CACHE_MAX = 1024

#: Endpoints (``uplink name @ endpoint``) that refused MQTT 5: connected to in 3.1.1.
MQTT311_ONLY: set[str] = set()
Inbound = Publish | Publish5


async def run_mqtt_link(endpoint: Endpoint, options: LinkOptions, io: LinkIO) -> NoReturn:
    """Run one MQTT connection to ``endpoint`` until it fails (see the module docstring).

    Raises ``LinkError`` with a one-line reason; never returns."""
    where = endpoint.redacted()
    known = f"{options.name}@{where}"
    phase = ["TLS connection" if endpoint.tls else "TCP connection"]
    stream: trio.abc.Stream | None = None
    link: _Link | None = None
    orderly = True
    try:
        with _as_link_error(where):
            try:
                with trio.fail_after(options.connect_timeout):
                    while True:
                        level = 4 if known in MQTT311_ONLY else 5
                        stream = await open_stream(endpoint, options)
                        link = _Link(stream, endpoint, options, io, phase, level)
                        try:
                            detail = await link.handshake()
                            break
                        except Unsupported as exc:
                            if level == 4:
                                raise
                            log.info("uplink %s: %s; connecting in MQTT 3.1.1", options.name,
                                     exc)
                            MQTT311_ONLY.add(known)
                            await trio.aclose_forcefully(stream)
                            stream = link = None
            except trio.TooSlowError:
                raise LinkError(f"{where}: timed out after {options.connect_timeout:g} s "
                                f"waiting for the {phase[0]} (connect timeout)") from None
        io.up(endpoint, f"MQTT {'5' if link.wire.level == 5 else '3.1.1'}, {detail}")
        await link.run()
    except LinkError:
        orderly = False
        raise
    finally:
        if stream is not None:
            await _close(stream, link if orderly else None)
    raise AssertionError("unreachable: _Link.run only ends by raising")  # pragma: no cover


async def _close(stream: trio.abc.Stream, link: _Link | None) -> None:
    """Close promptly. On an orderly shutdown (``link`` given: cancelled, not failed) a
    DISCONNECT (3.14) first, only if the handshake completed and no write was cut off
    mid-packet (else the upstream would read garbage), bounded
    and shielded so a cancelled caller still gets its socket closed at once."""
    if link is not None and link.connected and not link.writing:
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            try:
                await stream.send_all(link.wire.disconnect)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
    await trio.aclose_forcefully(stream)


@contextmanager
def _as_link_error(where: str) -> Iterator[None]:
    """Turn the I/O and protocol errors of one connection into ``LinkError``."""
    try:
        yield
    except LinkError:
        raise
    except ProtocolError as exc:
        raise LinkError(f"malformed packet from upstream: {exc}") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise LinkError(f"{where}: {io_reason(exc)}") from None


class _Link:
    """The client-side state of one connection (see the module docstring)."""

    def __init__(self, stream: trio.abc.Stream, endpoint: Endpoint, options: LinkOptions,
                 io: LinkIO, phase: list[str], level: int) -> None:
        self.stream = stream
        self.phase = phase            # what the handshake waits for (timeout message)
        self.endpoint = endpoint
        self.where = endpoint.redacted()
        self.options = options
        self.io = io
        self.wire = Wire(level, MAX_INBOUND_PACKET)
        self.keep_alive = keep_alive_seconds(options.heartbeat)
        self.connected = False
        self._send_lock = trio.Lock()
        self.writing = False          # a send_all is in progress (cut off if cancelled)
        now = trio.current_time()
        self.last_sent = now
        self.last_received = now
        self.ping_outstanding = False
        self.stalled = False          # the reader waits for room in the inbound channel
        self.delivering = False       # the deliverer is in io.deliver (local work)
        self.inflight: dict[int, int] = {}   # packet id -> outbox seq, awaiting PUBACK
        self._next_id = 1
        self._ids_freed = trio.Event()
        self._early: list[Packet | Publish5 | Puback5] = []  # PUBLISH/PUBREL before SUBACK
        self._topics: dict[str, bytes] = {}  # local topic -> encoded upstream name

    # ------------------------------------------------------------ wire
    async def send(self, data: bytes) -> None:
        """Write whole packets; one writer at a time (trio streams are not shareable)."""
        async with self._send_lock:
            self.writing = True
            await self.stream.send_all(data)
            self.writing = False
            self.last_sent = trio.current_time()

    async def next_packet(self) -> Packet | Publish5 | Puback5:
        """The next packet from the upstream; EOF is a ``LinkError``."""
        while True:
            packet = self.wire.next_packet()
            if packet is not None:
                return packet
            data = await self.stream.receive_some(READ_SIZE)
            if not data:
                raise LinkError("connection closed by upstream")
            # Any bytes prove the upstream alive, also part of a big packet on a slow link.
            self.last_received = trio.current_time()
            self.wire.feed(data)

    # ------------------------------------------------------------ handshake
    async def handshake(self) -> str:
        """CONNECT/CONNACK, then SUBSCRIBE/SUBACK for the ``--in`` filters. Returns the
        detail for ``io.up``."""
        ep, opts = self.endpoint, self.options
        self.phase[0] = "CONNACK"
        # A persistent session: commands wait while we are away.
        await self.send(self.wire.connect(
            opts.client_id, self.keep_alive, ep.username,
            ep.password.encode("utf-8") if ep.password is not None else None))
        connack = await self._expect(Connack)
        assert isinstance(connack, Connack)
        if connack.return_code:
            reason = self.wire.connack_reason(connack.return_code)
            raise LinkError(f"{self.where} refused the connection: {reason} "
                            f"({self.wire.connack_code(connack.return_code)})")
        detail = "session resumed" if connack.session_present else "new session"
        if opts.inbound:
            filters = [upstream_filter("mqtt", opts.prefix, f) for f in opts.inbound]
            self.phase[0] = "SUBACK"
            # Packet id 1 is free: no PUBLISH is in flight before the SUBACK.
            await self.send(self.wire.subscribe(1, filters))
            suback = await self._expect(Suback)
            assert isinstance(suback, Suback)
            if suback.packet_id != 1 or len(suback.return_codes) != len(filters):
                raise LinkError(f"SUBACK from upstream does not match the SUBSCRIBE "
                                f"({len(suback.return_codes)} codes for {len(filters)} "
                                "filters)")
            refused = [f for f, code in zip(filters, suback.return_codes, strict=True)
                       if code == 0x80]
            if refused:
                raise LinkError(f"{self.where} refused the subscription to "
                                f"{', '.join(map(repr, refused))} (SUBACK 0x80)")
            detail += f", subscribed to {len(filters)} filter(s)"
        if opts.retired:
            # Filters an earlier --in had: the persistent session would keep them forever.
            self.phase[0] = "UNSUBACK"
            await self.send(self.wire.unsubscribe(2, tuple(opts.retired)))
            await self._expect(Unsuback)
            detail += f", unsubscribed {len(opts.retired)} old filter(s)"
        self.connected = True
        return detail

    async def _expect(self, kind: type[Connack] | type[Suback] | type[Unsuback]
                      ) -> Packet | Publish5 | Puback5:  # fmt: skip
        """Read until a ``kind`` packet arrives. A resumed session may start delivering
        (PUBLISH, PUBREL) before the SUBACK/UNSUBACK: those are kept for the reader."""
        while True:
            packet = await self.next_packet()
            if isinstance(packet, kind):
                return packet
            if isinstance(packet, Publish | Publish5 | Pubrel) and kind is not Connack:
                self._early.append(packet)
                continue
            raise LinkError(f"unexpected {type(packet).__name__.upper()} from upstream "
                            f"while waiting for {kind.__name__.upper()}")

    # ------------------------------------------------------------ running
    async def run(self) -> NoReturn:
        """Run the reader, deliverer, sender and watchdog until one fails."""
        try:
            with _as_link_error(self.where):
                send_ch, recv_ch = trio.open_memory_channel[Inbound](INBOUND_BUFFER)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._guarded, self._reader, send_ch)
                    nursery.start_soon(self._guarded, self._deliverer, recv_ch)
                    nursery.start_soon(self._guarded, self._sender)
                    if self.keep_alive:
                        nursery.start_soon(self._guarded, self._watchdog)
        except BaseExceptionGroup as group:
            found = first_link_error(group)
            if found is None:
                raise
            raise found from None
        raise LinkError("link tasks ended")  # pragma: no cover - they loop forever

    async def _guarded(self, task: Callable[..., Awaitable[None]], *args: object) -> None:
        with _as_link_error(self.where):
            await task(*args)

    async def _reader(self, inbound: trio.MemorySendChannel[Inbound]) -> None:
        early, self._early = self._early, []
        for packet in early:
            await self._dispatch(packet, inbound)
        while True:
            await self._dispatch(await self.next_packet(), inbound)

    async def _dispatch(self, packet: Packet | Publish5 | Puback5,
                        inbound: trio.MemorySendChannel[Inbound]) -> None:
        if isinstance(packet, Puback | Puback5):
            if isinstance(packet, Puback5):  # refused upstream (module docstring)
                log.warning("uplink %s: upstream refused a message: %s", self.options.name,
                            refusal(packet.reason_code))
            seq = self.inflight.pop(packet.packet_id, None)
            if seq is None:
                # Not ours (a stale id): nothing to confirm. Never confirm a guess.
                log.debug("uplink %s: PUBACK for unknown packet id %d",
                          self.options.name, packet.packet_id)
                return
            self.io.confirmed(seq)
            self._ids_freed.set()
        elif isinstance(packet, Publish | Publish5):
            self.stalled = True
            try:
                await inbound.send(packet)
            finally:
                self.stalled = False
                self.last_received = trio.current_time()
        elif isinstance(packet, Pubrel):
            # QoS 2 inbound, second half (4.3.3): the message was delivered before our
            # PUBREC; answer every PUBREL, also for ids of an earlier connection.
            await self.send(self.wire.pubcomp(packet.packet_id))
        elif isinstance(packet, Pingresp):
            self.ping_outstanding = False
        else:
            raise LinkError(f"unexpected {type(packet).__name__.upper()} from upstream")

    async def _deliverer(self, inbound: trio.MemoryReceiveChannel[Inbound]) -> None:
        name, prefix = self.options.name, self.options.prefix
        async for msg in inbound:
            topic = local_topic("mqtt", prefix, msg.topic)
            if topic is None:
                log.warning("uplink %s: dropped inbound message on %r: outside the prefix "
                            "%r", name, msg.topic, prefix)
            else:
                self.delivering = True
                try:
                    await self.io.deliver(topic, msg.payload, inbound_props(msg))
                except LinkError as exc:
                    # Refused for good: acknowledged and dropped (module docstring).
                    log.warning("uplink %s: inbound message on %r dropped, it cannot be "
                                "published locally: %s", name, msg.topic, exc)
                finally:
                    self.delivering = False
                    if self.stalled:  # the time spent on local work is excused in full
                        self.last_received = trio.current_time()
            # Acknowledge only now, after the local durable commit (MQTT-4.3.2-2/4.3.3-2).
            if msg.qos == 1:
                assert msg.packet_id is not None
                await self.send(self.wire.puback(msg.packet_id))
            elif msg.qos == 2:
                assert msg.packet_id is not None
                await self.send(self.wire.pubrec(msg.packet_id))

    async def _sender(self) -> None:
        while True:
            free = MAX_PACKET_ID - len(self.inflight)
            if free <= 0:
                self._ids_freed = trio.Event()
                await self._ids_freed.wait()
                continue
            batch = await self.io.take(min(free, TAKE_LIMIT))
            frames: list[bytes] = []
            size = 0
            wall = time.time()
            for msg in batch:
                topic = self._upstream_topic(msg.topic)
                if topic is None:
                    # It cannot be sent as the uplink is defined: failing the link would
                    # resend it first on every connection and hold back everything behind
                    # it. Parked: it stays in the outbox, unsent (module docstring).
                    self.io.park(msg.seq, "its upstream MQTT topic would be longer than 65535 "
                                 "bytes with the prefix")
                    continue
                block = publish_block(msg.props, wall) if self.wire.level == 5 else b""
                if block is None:
                    self.io.confirmed(msg.seq)  # past its Message Expiry: never sent
                    continue
                pid = self._allocate_id()
                self.inflight[pid] = msg.seq
                # RETAIN as published here (a bridge keeps retained status retained)
                frame = self.wire.publish(topic, msg.payload, msg.retain, pid, block)
                frames.append(frame)
                size += len(frame)
                if size >= WRITE_CHUNK:  # big payloads: do not copy the whole batch
                    await self.send(b"".join(frames))
                    frames, size = [], 0
            if frames:
                await self.send(b"".join(frames))

    def _allocate_id(self) -> int:
        """The next packet id not in flight, cycling 1..65535 (MQTT-2.3.1-2: an id is
        free again only once its PUBACK arrived). Caller checks there is one."""
        pid = self._next_id
        while pid in self.inflight:
            pid = pid % MAX_PACKET_ID + 1
        self._next_id = pid % MAX_PACKET_ID + 1
        return pid

    def _upstream_topic(self, topic: str) -> bytes | None:
        """The encoded upstream topic name; None if it has none (empty or > 65535 bytes)."""
        raw = self._topics.get(topic)
        if raw is None:
            name = upstream_name("mqtt", self.options.prefix, topic)
            raw = name.encode("utf-8") if name else b""
            if not raw or len(raw) > 0xFFFF:
                return None
            if len(self._topics) >= TOPIC_CACHE_MAX:
                self._topics.clear()
            self._topics[topic] = raw
        return raw

    async def _watchdog(self) -> None:
        """Keep-alive (3.1.2.10): PINGREQ after ``keep_alive`` s without sending or without
        hearing anything; dead after ``DEAD_AFTER`` x that without receiving anything."""
        period = float(self.keep_alive)
        bound = DEAD_AFTER * period
        while True:
            now = trio.current_time()
            if self.stalled and self.delivering:
                # Our own local delivery is slow; the upstream is not to blame. A deliverer
                # waiting to *send* an acknowledgement is another matter: a dead upstream
                # that stopped draining the socket stalls it, and so the reader, forever.
                self.last_received = now
            dead_at = self.last_received + bound
            if now >= dead_at:
                raise LinkError(f"no PINGRESP from upstream in {bound:g} s "
                                f"(keep-alive {self.keep_alive} s)")
            if not self.ping_outstanding and (now >= self.last_sent + period
                                              or now >= self.last_received + period):
                self.ping_outstanding = True
                # A write blocked by a stuck peer must not stop the dead-link check.
                with trio.move_on_at(dead_at):
                    await self.send(self.wire.pingreq)
                continue
            wake = dead_at
            if not self.ping_outstanding:
                wake = min(wake, self.last_sent + period, self.last_received + period)
            await trio.sleep_until(wake)
