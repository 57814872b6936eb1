"""One MQTT client connection: the trio loop around the codec and the broker core.

Theory of operation
-------------------
Two tasks per connection. The *reader* receives bytes, feeds the decoder and handles
every complete packet of that read as one **burst**: handlers change broker state, stage
durable records and queue their replies (PUBACK, PUBREC, SUBACK, ...) in ``_replies``.
At the end of the burst, if anything a reply depends on was staged, the reader awaits one
``store.commit()`` for the whole burst and only then releases the replies, in order, and
then the deliveries the broker held for that commit (QoS 2, see ``broker.py``). If the
commit fails, no reply of the burst is sent and the connection closes: an ack always
means "on disk". Staged work nobody waits for (a subscriber's PUBACK deleting its
record) only kicks the committer. A reply that depends on state another connection may
have staged in a round still open (a re-sent QoS 2 PUBLISH or PUBREL, a resumed
session's CONNACK) awaits a commit too, with nothing of its own staged: a barrier.

The *writer* owns the socket's send side. Everything - replies, deliveries from other
connections' publishes, re-sends - is appended to ``_out`` and coalesced into one
``send_all`` per wake-up. One exception: the replies of a burst go straight to the socket
from the reader (one non-blocking ``os.write``) when the writer has nothing queued and
nothing in transit - nothing can then be overtaken, and a lone PUBLISH -> PUBACK round
trip saves waking a second task. What the socket does not take goes to the writer.
``out_bytes`` (buffered + in transit) is what sessions check to
hold back QoS 1/2 messages and to drop QoS 0 ones on a slow consumer; the reader itself
stops reading while the output is far over that bound (a client that publishes but never
reads cannot make us buffer its acknowledgements without limit).

Rules: the first packet must be CONNECT (MQTT-3.1.0-1), a second one is a violation
(MQTT-3.1.0-2); keep-alive is 1.5x the client's value (MQTT-3.1.2-24); the will is
published when the connection ends without DISCONNECT (MQTT-3.1.2-8, MQTT-3.14.4-3).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import trio

from oxiedge.access.grants import Grants
from oxiedge.mqtt.codec import (
    Decoder,
    PacketTooLarge,
    ProtocolError,
    RawPublish,
    TopicTooLong,
    encode,
)
from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Puback,
    Pubcomp,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsubscribe,
    Will,
)
from oxiedge.mqtt.session import Session
from oxiedge.mqtt.topics import topic_limit_problem

if TYPE_CHECKING:
    from oxiedge.mqtt.service import MqttService

RECV_SIZE = 65536
CLOSE_FLUSH_TIMEOUT = 5.0  # seconds to flush final replies on a clean close

_PINGRESP = b"\xd0\x00"

#: Packets one burst handles between two checkpoints (``Connection._reader``).
BURST_SLICE = 512
#: A SUBSCRIBE / UNSUBSCRIBE with more filters than this is applied in steps of at most
#: ``STEP_LEVELS`` filter levels (``Connection._in_steps``).
STEP_FILTERS = 64
STEP_LEVELS = 2000
_STEPPED = (Subscribe, Unsubscribe)


def _steps(topics: list[tuple[str, int]]) -> Iterator[list[tuple[str, int]]]:
    """``topics`` in consecutive slices of at most ``STEP_LEVELS`` levels each."""
    start, levels = 0, 0
    for i, (flt, _qos) in enumerate(topics):
        levels += flt.count("/") + 1
        if levels >= STEP_LEVELS:
            yield topics[start : i + 1]
            start, levels = i + 1, 0
    if start < len(topics):
        yield topics[start:]


def _id_packet(first: int, pid: int) -> bytes:
    return bytes((first, 2, pid >> 8, pid & 0xFF))


def _connack(code: int, present: bool = False) -> bytes:
    return encode(Connack(code, present))


class _Close(Exception):
    """End the connection; ``abnormal`` means the will is published."""

    def __init__(self, reason: str, abnormal: bool = True) -> None:
        super().__init__(reason)
        self.abnormal = abnormal


class Connection:
    """A client connection (``Outlet`` of its session while attached)."""

    def __init__(self, service: MqttService, stream: trio.abc.Stream) -> None:
        self.service = service
        self.broker = service.broker
        self.store = service.app.store
        self.stream = stream
        limits = service.limits
        # Before CONNECT is accepted only a small packet is buffered (--mqtt-max-connect-size):
        # unauthenticated sockets cannot hold --mqtt-max-packet-size each.
        self.decoder = Decoder(min(service.max_connect_size, service.max_packet_size),
                               limits.max_topic_levels, limits.max_topic_length)  # fmt: skip
        self.session: Session | None = None
        self.will: Will | None = None
        self.out_bytes = 0
        # A client that publishes but does not read would grow our output (its PUBACKs)
        # without bound: above this many buffered bytes the reader stops reading.
        self._read_pause_at = 4 * service.limits.out_limit
        self._drain: trio.Event | None = None
        self._out: list[bytes] = []
        self._wake = trio.Event()
        self._sending = False  # the writer is inside send_all (bytes in transit)
        sock = getattr(stream, "socket", None)
        self._fd = sock.fileno() if sock is not None else -1  # -1: no direct replies
        self._replies: list[bytes] = []
        # (session, newly accepted filters): retained sends pending after the SUBACK
        self._after_burst: list[tuple[Session, list[tuple[str, int]]]] = []
        self._need_commit = False
        self._kick = False
        self._published = False  # publishers are held while a resource alarm is on
        self._closing = False  # the reader ended: the writer exits once the buffer is empty
        self._disconnected = False
        self._abnormal = False
        self._scope = trio.CancelScope()
        self.client_id = ""
        self.close_reason = ""
        # The verified client certificate's name under --tls-identity-as-username (tls.py).
        self.tls_identity: str | None = None
        self.username: str | None = None  # once CONNECT is accepted
        # Permissions (docs/permissions.md): ``_perms.active`` is False while no rule exists,
        # so an unrestricted broker pays one attribute test per PUBLISH.
        self._perms = service.app.permissions
        self.grants: Grants | None = None

    # -------------------------------------------------------------------- output
    def write(self, data: bytes) -> None:
        """Queue bytes for the writer task (never blocks)."""
        self._out.append(data)
        self.out_bytes += len(data)
        self._wake.set()

    async def _writer(self) -> None:
        stream = self.stream
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self._out:
                    chunks, self._out = self._out, []
                    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    self._sending = True
                    await stream.send_all(data)
                    self._sending = False
                    self.out_bytes -= len(data)
                    drain = self._drain
                    if drain is not None and self.out_bytes <= self._read_pause_at:
                        drain.set()
                    s = self.session
                    if s is not None and s.conn is self:
                        if s.queue:
                            s.pump()
                        if s.replay is not None and self.broker.replay_step(s):
                            self.store.kick()
                if self._closing:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            # The peer is gone: end the reader too (abnormal: the will goes out).
            self._abnormal = True
            self.close_reason = self.close_reason or f"connection lost: {exc}"
            self._scope.cancel()

    def _send_replies(self, data: bytes) -> None:
        """Release a burst's replies (after its commit). Directly when the writer is idle
        with an empty queue, so they cannot overtake anything; otherwise, and for what the
        socket does not take at once, through the writer."""
        if not self._out and not self._sending and self._fd >= 0 and not self._scope.cancel_called:
            try:
                n = os.write(self._fd, data)  # the socket is non-blocking (trio)
            except OSError:
                n = 0  # full (EAGAIN) or broken: the writer waits or meets the error
            if n == len(data):
                return
            data = data[n:]
        self.write(data)

    def take_over(self) -> None:
        """Another CONNECT with our client id won (MQTT-3.1.4-2): end this connection."""
        self._abnormal = True
        self.close_reason = "session taken over"
        # Unsent deliveries stay with the session (in-flight ones are re-sent on the new
        # connection); none of them may still leave through this one.
        self._out.clear()
        self._scope.cancel()

    # ---------------------------------------------------------------------- life
    async def serve(self) -> None:
        """Run the connection until it ends; never raises for network/protocol errors."""
        stats = self.broker.stats
        stats.connections += 1
        stats.connections_total += 1
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    writer_done = trio.Event()

                    async def writer() -> None:
                        try:
                            await self._writer()
                        finally:
                            writer_done.set()

                    nursery.start_soon(writer)
                    try:
                        await self._reader()
                    except _Close as exc:
                        self._abnormal = exc.abnormal
                        self.close_reason = str(exc)
                    except ProtocolError as exc:
                        stats.protocol_errors += 1
                        if isinstance(exc, TopicTooLong):
                            stats.topics_refused += 1
                        self._abnormal = True
                        self.close_reason = f"protocol error: {exc}"
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                        self._abnormal = True
                        self.close_reason = f"connection lost: {exc}"
                    # Flush what is queued (final acks, a refusing CONNACK), bounded in time.
                    self._closing = True
                    self._wake.set()
                    with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                        await writer_done.wait()
                    nursery.cancel_scope.cancel()
        finally:
            stats.connections -= 1
            self._detach()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    def _detach(self) -> None:
        """Connection over: publish the will if abnormal, release the session."""
        s = self.session
        ours = s is not None and s.conn is self
        if s is not None and ours:
            s.conn = None
            s.replay = None  # owed retained messages end with the connection's SUBSCRIBEs
        if self._abnormal and self.will is not None:
            will, self.will = self.will, None
            if self._perms.active and self.grants is not None \
                    and not self.grants.may_publish(will.topic):
                # A will obeys the publish rules at the moment it would go out.
                self._perms.counters["mqtt_wills_denied"] += 1
            else:
                self.broker.stats.wills += 1
                if self.broker.route(will.topic, will.payload, will.qos, will.retain):
                    self.store.kick()
        if s is not None and ours and s.clean:
            self.broker.discard_session(s)  # MQTT-3.1.2-6: ends with the connection

    # -------------------------------------------------------------------- reader
    async def _reader(self) -> None:
        stream, decoder = self.stream, self.decoder
        first: Packet | None = None
        with trio.move_on_after(self.service.connect_timeout):
            while first is None:
                data = await stream.receive_some(RECV_SIZE)
                if not data:
                    raise _Close("closed before CONNECT", abnormal=False)
                decoder.feed(data)
                if decoder.first_byte != 0x10:
                    # MQTT-3.1.0-1: no need to wait for the body of a non-CONNECT.
                    raise ProtocolError("first packet is not CONNECT (MQTT-3.1.0-1)")
                try:
                    first = decoder.next_packet()
                except PacketTooLarge:
                    self.broker.stats.connect_too_large += 1
                    raise
        if first is None:
            self.broker.stats.connect_timeouts += 1
            raise _Close("no CONNECT in time", abnormal=False)
        if not isinstance(first, Connect):
            raise ProtocolError("first packet is not CONNECT (MQTT-3.1.0-1)")
        keep_alive = await self._connect(first)
        decoder.max_packet_size = self.service.max_packet_size  # authenticated now
        decoder.mqtt31 = first.protocol_level == 3
        # MQTT-3.1.2-24: 1.5x the keep-alive without any packet closes the connection.
        window = keep_alive * 1.5 if keep_alive else math.inf
        handlers = self._handlers()
        next_item, on_publish = decoder.next_item, self._on_publish
        alarms = self.service.app.alarms
        with trio.CancelScope() as ka:
            while True:
                budget = BURST_SLICE
                while (item := next_item()) is not None:
                    budget -= 1
                    if not budget:
                        # A 64 KiB read can hold ~9,000 tiny packets: let the other
                        # connections run every so often (the burst goes on afterwards).
                        budget = BURST_SLICE
                        await trio.sleep(0)
                    if type(item) is tuple:
                        on_publish(item)  # the hot path: no packet object, no lookup
                        continue
                    if isinstance(item, _STEPPED) and len(item.topics) > STEP_FILTERS:
                        await self._in_steps(item)  # a big (UN)SUBSCRIBE: others run meanwhile
                        continue
                    handler = handlers.get(type(item))
                    if handler is None:
                        raise ProtocolError(f"unexpected {type(item).__name__} from a client")
                    if handler(item):
                        break  # DISCONNECT: nothing after it is processed
                # A slow disk is not the client's silence: no keep-alive during the commit.
                ka.deadline = math.inf
                await self._end_burst()
                if self._disconnected:
                    raise _Close("client sent DISCONNECT", abnormal=False)
                ka.deadline = trio.current_time() + window
                if self.out_bytes > self._read_pause_at:
                    self._drain = trio.Event()
                    await self._drain.wait()  # the writer sets it (keep-alive still applies)
                    self._drain = None
                data = await stream.receive_some(RECV_SIZE)
                if not data:
                    raise _Close("connection closed without DISCONNECT")
                decoder.feed(data)
                if self._published and alarms.blocked:
                    # Memory or disk alarm: hold a publisher's input unprocessed (and so its
                    # socket unread: TCP back-pressure) while subscribers keep draining. A
                    # held client is not silent by choice, so no keep-alive meanwhile.
                    ka.deadline = math.inf
                    self.broker.stats.blocked += 1
                    await alarms.wait_unblocked()
                    ka.deadline = trio.current_time() + window
        raise _Close(f"keep-alive timeout ({keep_alive}s x 1.5)")

    async def _end_burst(self) -> None:
        broker = self.broker
        # Deliveries held for a commit (QoS 2): staged before the commit below, so it
        # makes them durable. Held deliveries always mean a commit, if only a barrier.
        hold = broker.take_hold()
        if self._need_commit or hold is not None:
            self._need_commit = False
            try:
                await self.store.commit()
            except Exception as exc:  # CommitError: nothing of this burst may be acked
                # ``hold`` is dropped: those messages are not durable and never go out.
                broker.stats.commit_errors += 1
                self.service.app.log.error("MQTT: commit failed, closing %s: %s",
                                           self.client_id, exc)  # fmt: skip
                raise _Close(f"commit failed: {exc}") from None
            except BaseException:  # cancelled (take-over, peer gone): the next commit
                if hold is not None:  # releases them (the service's releaser task)
                    broker.return_hold(hold)
                raise
        elif self._kick:
            self.store.kick()
        self._kick = False
        if self._replies:
            self._send_replies(b"".join(self._replies))
            self._replies.clear()
        if hold is not None:
            # After the replies: a client subscribed to its own QoS 2 PUBLISH gets the
            # PUBREC first, then the delivery (as mosquitto's 02-subpub-qos2 expects).
            hold.release()
        if self._after_burst:
            # Retained messages go out after the SUBACK that establishes the subscription,
            # paced by the output buffer and the in-flight window (``replay.py``).
            broker = self.broker
            for sub, resulting in self._after_burst:
                if sub.conn is self:
                    broker.queue_retained(sub, resulting)
            self._after_burst.clear()
            own = self.session
            if own is not None and own.conn is self and broker.replay_step(own):
                self.store.kick()

    # ------------------------------------------------------------------- CONNECT
    async def _connect(self, pkt: Connect) -> int:
        service, broker = self.service, self.broker
        if (pkt.protocol_name, pkt.protocol_level) not in (("MQTT", 4), ("MQIsdp", 3)):
            self.write(_connack(1))  # MQTT-3.1.2-2
            raise _Close(f"unsupported protocol level {pkt.protocol_level}", abnormal=False)
        client_id = pkt.client_id
        if not client_id:
            if not pkt.clean_session:
                self.write(_connack(2))  # MQTT-3.1.3-8
                raise _Close("empty client id with clean_session=0", abnormal=False)
            client_id = broker.assign_client_id()  # MQTT-3.1.3-6
        self.client_id = client_id
        will = pkt.will
        if will is not None:
            lim = service.limits
            if topic_limit_problem(will.topic, lim.max_topic_levels, lim.max_topic_length):
                raise TopicTooLong("will topic over --mqtt-max-topic-levels/-length")
        if self.tls_identity is not None:
            # --tls-identity-as-username (Mosquitto's use_identity_as_username): the verified
            # certificate is the credential and its name the user; CONNECT's are ignored.
            self.username = self.tls_identity
        elif not await service.authenticate(pkt.username, pkt.password):
            broker.stats.auth_failures += 1
            # 3.2.2.3: 4 = bad user name or password, 5 = not authorized (no credentials).
            self.write(_connack(4 if pkt.username is not None else 5))
            raise _Close("authentication failed", abnormal=False)
        else:
            self.username = pkt.username
        self.grants = Grants(self._perms, self.username, client_id)
        if not broker.session_room(client_id):
            broker.stats.sessions_refused += 1
            self.write(_connack(3))  # 3.2.2.3: server unavailable
            raise _Close(f"--mqtt-max-sessions ({service.limits.max_sessions}) reached",
                         abnormal=False)  # fmt: skip
        old = broker.sessions.get(client_id)
        if old is not None and old.conn is not None:
            conn = old.conn
            old.conn = None  # from here on the old connection delivers nothing
            old.replay = None
            broker.stats.takeovers += 1
            if isinstance(conn, Connection):
                if not old.clean and not pkt.clean_session and conn.will is not None:
                    # A persistent session taken over by a persistent one continues: its
                    # will is not published (Mosquitto 2; MQTT 5 does the same).
                    conn.will = None
                    broker.stats.wills_skipped += 1
                conn.take_over()
        s, present, staged = broker.open_session(client_id, pkt.clean_session,
                                                 self.username or "")
        # CONNACK waits for a commit when it depends on one: the session record (new, or
        # a clean session replacing a durable one) exists before CONNACK; a resumed
        # durable session may have state that an earlier connection staged in a round
        # still open (QoS 2 packet ids, PUBREL obligations that ``resend`` sends below).
        if staged or (present and s.store is not None):
            broker.connecting[client_id] = self
            try:
                await self.store.commit()
            except Exception as exc:
                broker.stats.commit_errors += 1
                raise _Close(f"commit failed: {exc}") from None
            finally:
                newest = broker.connecting.get(client_id) is self
                if newest:
                    del broker.connecting[client_id]
            if not newest or broker.sessions.get(client_id) is not s or s.conn is not None:
                raise _Close("session taken over during CONNECT")
        self.session = s
        self.will = pkt.will
        # MQTT 3.1 (level 3) has no session-present flag: that byte is reserved there.
        self.write(_connack(0, present and pkt.protocol_level == 4))
        s.conn = self
        broker.set_acl(s, self.grants)
        if self._perms.active and (s.queue or s.inflight):
            unreadable = broker.drop_unreadable(s)
            if unreadable:
                self._perms.counters["mqtt_queued_dropped"] += unreadable
                self.store.kick()
        s.resend()
        return pkt.keep_alive

    # ------------------------------------------------------------------ handlers
    def _handlers(self) -> dict[type, Callable[[Any], bool]]:
        return {
            Puback: self._on_puback,
            Pubrec: self._on_pubrec,
            Pubrel: self._on_pubrel,
            Pubcomp: self._on_pubcomp,
            Subscribe: self._on_subscribe,
            Unsubscribe: self._on_unsubscribe,
            Pingreq: self._on_pingreq,
            Disconnect: self._on_disconnect,
            Connect: self._on_second_connect,
        }

    def _on_publish(self, p: RawPublish) -> None:
        self._published = True
        topic, topic_b, qos, retain, _dup, pid, payload, frame = p
        if self._perms.active and not self.grants.may_publish(topic):  # type: ignore[union-attr]
            self._deny_publish(qos, pid)  # type: ignore[arg-type]
            return
        if qos == 0:
            # ``frame``: the received bytes, forwarded unchanged to QoS 0 subscribers.
            if self.broker.route(topic, payload, 0, retain, None, topic_b, frame):
                self._kick = True
        elif qos == 1:
            if self.broker.route(topic, payload, 1, retain, None, topic_b):
                self._need_commit = True
            self._replies.append(_id_packet(0x40, pid))  # type: ignore[arg-type]
        else:
            s = self.session
            assert s is not None
            # Method B of 4.3.3: route once, remember the id until PUBREL (MQTT-4.3.3-2);
            # the deliveries are held until the commit (broker.py), PUBREC follows it.
            if s.received_qos2(pid):  # type: ignore[arg-type]
                routed = self.broker.route(topic, payload, 2, retain, None, topic_b)
                if routed or s.store is not None:
                    self._need_commit = True
            elif s.store is not None:
                # A re-send of an id we hold: not routed again. Its first copy may sit in a
                # round still open (of a connection this one took over): a barrier.
                self._need_commit = True
            self._replies.append(_id_packet(0x50, pid))  # type: ignore[arg-type]

    def _deny_publish(self, qos: int, pid: int) -> None:
        """A PUBLISH the user may not write: acknowledged and dropped (3.1.1 has no negative
        acknowledgement; Mosquitto does the same), counted. Nothing is routed or retained;
        a QoS 2 id is not remembered, so its PUBREL gets the PUBCOMP of an unknown id."""
        self._perms.counters["mqtt_publish_denied"] += 1
        if qos == 1:
            self._replies.append(_id_packet(0x40, pid))
        elif qos == 2:
            self._replies.append(_id_packet(0x50, pid))

    def _on_puback(self, p: Puback) -> bool:
        s = self.session
        if s is not None and s.on_puback(p.packet_id):
            self._kick = True
        return False

    def _on_pubrec(self, p: Pubrec) -> bool:
        s = self.session
        if s is not None:
            # PUBREL only after the PUBREC transition (message record -> PUBREL
            # obligation) is synced: after a PUBREL the PUBLISH is never sent again, not
            # even after a crash (MQTT-4.3.3). A repeated PUBREC is answered the same way.
            if s.on_pubrec(p.packet_id):
                self._need_commit = True
            if p.packet_id in s.rel:
                if s.store is not None:
                    self._need_commit = True
                self._replies.append(_id_packet(0x62, p.packet_id))  # PUBREL
        return False

    def _on_pubrel(self, p: Pubrel) -> bool:
        s = self.session
        if s is not None and (s.released_qos2(p.packet_id) or s.store is not None):
            # PUBCOMP after the id's removal is durable; for an id we do not know, after a
            # barrier (a taken-over connection may have staged its removal).
            self._need_commit = True
        self._replies.append(_id_packet(0x70, p.packet_id))  # PUBCOMP, known id or not
        return False

    def _on_pubcomp(self, p: Pubcomp) -> bool:
        s = self.session
        if s is not None and s.on_pubcomp(p.packet_id):
            self._kick = True
        return False

    def _on_subscribe(self, p: Subscribe) -> bool:
        s = self.session
        assert s is not None
        codes, accepted, staged = self._subscribe(s, p.topics)
        if staged:
            self._need_commit = True
        # encode() writes the remaining length as a varint: > 125 filters need 2 bytes.
        self._replies.append(encode(Suback(p.packet_id, tuple(codes))))
        if accepted:
            self._after_burst.append((s, accepted))
        return False

    async def _in_steps(self, p: Subscribe | Unsubscribe) -> None:
        """Apply a SUBSCRIBE or UNSUBSCRIBE with many filters a few thousand filter levels
        at a time, letting other tasks run in between: 1,000 filters of 200 levels are
        200,000 trie nodes, a third of a second of work in one go. The result is the same
        as in one go: one SUBACK with a code per filter, identical filters merged."""
        s = self.session
        assert s is not None
        broker = self.broker
        if isinstance(p, Unsubscribe):
            for chunk in _steps([(flt, 0) for flt in p.topics]):
                if broker.unsubscribe(s, [flt for flt, _ in chunk]):
                    self._need_commit = True
                await trio.sleep(0)
            self._replies.append(_id_packet(0xB0, p.packet_id))  # MQTT-3.10.4-4
            return
        codes: list[int] = []
        resulting: dict[str, int] = {}
        for chunk in _steps(list(p.topics)):
            part, res, staged = self._subscribe(s, chunk)
            codes += part
            for flt, qos in res:
                resulting.pop(flt, None)  # MQTT-3.8.4-3 across the steps too
                resulting[flt] = qos
            if staged:
                self._need_commit = True
            await trio.sleep(0)
        self._replies.append(encode(Suback(p.packet_id, tuple(codes))))
        if resulting:
            self._after_burst.append((s, list(resulting.items())))
    def _subscribe(self, s: Session, topics: Any
                   ) -> tuple[list[int], list[tuple[str, int]], bool]:
        grants = self.grants
        if self._perms.active and grants is not None:
            return self._subscribe_checked(s, topics, grants)
        return self.broker.subscribe(s, topics)

    def _subscribe_checked(self, s: Session, topics: Any, grants: Grants
                           ) -> tuple[list[int], list[tuple[str, int]], bool]:
        """SUBSCRIBE with the read rules: a denied filter gets 0x80 (3.9.3), the others are
        subscribed as usual and keep their position in the SUBACK (MQTT-3.8.4-5)."""
        allowed = [(f, q) for f, q in topics if grants.may_subscribe(f)]
        if len(allowed) == len(topics):
            return self.broker.subscribe(s, topics)
        self._perms.counters["mqtt_subscribe_denied"] += len(topics) - len(allowed)
        got, accepted, staged = self.broker.subscribe(s, allowed)
        it = iter(got)
        codes = [next(it) if grants.may_subscribe(f) else 0x80 for f, _q in topics]
        return codes, accepted, staged

    def _on_unsubscribe(self, p: Unsubscribe) -> bool:
        s = self.session
        assert s is not None
        if self.broker.unsubscribe(s, p.topics):
            self._need_commit = True
        self._replies.append(_id_packet(0xB0, p.packet_id))  # MQTT-3.10.4-4: always
        return False

    def _on_pingreq(self, p: Pingreq) -> bool:
        self._replies.append(_PINGRESP)
        return False

    def _on_disconnect(self, p: Disconnect) -> bool:
        self.will = None  # MQTT-3.14.4-3: discard the will
        self._disconnected = True
        return True

    def _on_second_connect(self, p: Connect) -> bool:
        raise ProtocolError("second CONNECT (MQTT-3.1.0-2)")
