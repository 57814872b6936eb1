"""``MqttProtocol``: one MQTT 3.1.1 client connection, sans-IO (no trio, no socket).

Bytes in (``receive_data``), actions out (``next_action``, see ``oxiedge.net.actions``);
``oxiedge.net.loop.Transport`` performs them. The protocol is one generator
(``_run``) that reads like the connection it is: wait for CONNECT, authenticate, open
the session, then handle bursts. Wherever only the loop can go on (await a commit, run
the login check in a thread, let other tasks run) it yields an action and resumes with
the answer, so the order of everything stays the straight-line order of the code.

Bursts: every complete packet of one read is handled (``handlers.py``); replies (PUBACK,
PUBREC, SUBACK, ...) collect in the burst state. At the end, if anything a reply depends
on was staged, the protocol asks for ONE commit (``COMMIT``) and only then releases the
replies, in order, and after them the deliveries the router held for that commit (QoS 2,
``router.py``). If the commit fails, no reply of the burst is sent and the connection
closes: an ack always means "on disk". Staged work nobody waits for (a subscriber's
PUBACK deleting its record) only asks for a ``KICK``. A reply that depends on state
another connection may have staged in a round still open (a re-sent QoS 2 PUBLISH or
PUBREL, a resumed session's CONNACK) awaits a commit too, with nothing of its own
staged: a barrier. A burst that needs no commit has its replies go out at once
(``NEED_DATA`` then ``data_to_send()``: one write from the reading task).

Deliveries (other connections' publishes, re-sends, retained replays) are written
straight into the connection's output buffer (``Session.conn`` is the ``Outlet``, the
transport's ``net.output.Output``), never through this object: the fan-out path costs no
extra call.

Rules: the first packet must be CONNECT (MQTT-3.1.0-1), a second one is a violation
(MQTT-3.1.0-2); keep-alive is 1.5x the client's value (MQTT-3.1.2-24); the will is
published when the connection ends without DISCONNECT (MQTT-3.1.2-8, MQTT-3.14.4-3).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator

from oxiedge.access.grants import Grants
from oxiedge.access.rules import PermissionStore
from oxiedge.lograte import clip
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec import ProtocolError, TopicTooLong
from oxiedge.mqtt.codec5 import Decoder5
from oxiedge.mqtt.connect import CloseConnection, ConnectStep
from oxiedge.mqtt.encode5 import encode_disconnect5
from oxiedge.mqtt.handlers import STEP_FILTERS, Handlers
from oxiedge.mqtt.handlers5 import Handlers5
from oxiedge.mqtt.packets import (
    PacketType,
    Subscribe,
    Unsubscribe,
    Will,
    first_byte,
)
from oxiedge.mqtt.packets5 import Will5
from oxiedge.mqtt.ports import Alarms, Log, Outlet
from oxiedge.mqtt.properties import NO_PROPERTIES, Properties
from oxiedge.mqtt.reasons import ReasonCode
from oxiedge.mqtt.session import Session
from oxiedge.mqtt.topics import sys_topic
from oxiedge.mqtt.will5 import send_will5
from oxiedge.net.actions import (
    BLOCKED,
    CHECKPOINT,
    COMMIT,
    KICK,
    NEED_DATA,
    SEND,
    Close,
)

#: Packets one burst handles between two checkpoints.
BURST_SLICE = 512
#: Seconds an MQTT 5 connection is read (and its input dropped) after the broker's
#: DISCONNECT for a broken rule (``_linger``).
LINGER_S = 2.0
_STEPPED = (Subscribe, Unsubscribe)
_CONNECT_FIRST = first_byte(PacketType.CONNECT)


class _Cancelled(BaseException):
    """Thrown into the generator when the loop's commit was cancelled."""


class MqttProtocol(ConnectStep):
    """One client connection's protocol state (see the module docstring)."""

    def __init__(
        self,
        broker: Broker,
        outlet: Outlet,
        *,
        max_packet_size: int,
        max_connect_size: int,
        connect_timeout: float,
        perms: PermissionStore,
        alarms: Alarms,
        log: Log,
        clock: Callable[[], float],
        tls_identity: str | None = None,
    ) -> None:
        self.broker = broker
        self.outlet = outlet
        limits = broker.limits
        self.limits = limits
        self.max_packet_size = max_packet_size
        # Before CONNECT is accepted only a small packet is buffered (--mqtt-max-connect-size):
        # unauthenticated sockets cannot hold --mqtt-max-packet-size each.
        # One decoder for both levels: ``next_connect`` reads CONNECT of any level, then
        # ``_serve`` binds ``next_item`` (3.1.1) or ``next_item5`` once (``codec5.py``).
        self.decoder = Decoder5(min(max_connect_size, max_packet_size),
                                limits.max_topic_levels, limits.max_topic_length)  # fmt: skip
        self.level = 4  # the CONNECT's protocol level (3, 4 or 5) once it was read
        self.clock = clock
        self.deadline = clock() + connect_timeout
        self.session: Session | None = None
        self.will: Will | Will5 | None = None
        self.client_id = ""
        self.close_reason = ""
        # The broker ended it (a protocol error, the keep-alive, no CONNECT in time, a
        # take-over), not the client: the connection logs it at info level.
        self.ended_by_broker = False
        # The verified client certificate's name under --tls-identity-as-username (tls.py).
        self.tls_identity = tls_identity
        self.username: str | None = None  # once CONNECT is accepted
        # Permissions (docs/permissions.md): ``_perms.active`` is False while no rule exists,
        # so an unrestricted broker pays one attribute test per PUBLISH.
        self._perms = perms
        self.grants: Grants | None = None
        self._alarms = alarms
        self._log = log
        # The packet handlers and the state of the current burst (``handlers.py``).
        self._h = Handlers(broker, perms)
        self._h5: Handlers5 | None = None  # MQTT 5's, composed with ``_h`` (``connect.py``)
        self._ready = b""  # replies that may go now (``data_to_send``)
        self._abnormal = False
        self._eof = False
        self._fresh = False  # bytes arrived since the last NEED_DATA
        self._timed_out = False
        self._keep_alive = 0
        self._ok = False  # the answer to ``Authenticate``
        self._commit_error: Exception | None = None
        self._closed: Close | None = None
        self._had_session = False  # the session was this connection's until ``_detach``
        self._gen: Generator[object, None, None] = self._run()
        broker.stats.connections += 1
        broker.stats.connections_total += 1

    # ------------------------------------------------------------ loop interface
    def receive_data(self, data: bytes | bytearray) -> None:
        self._fresh = True
        if data:
            self.decoder.feed(data)
        else:
            self._eof = True

    def next_action(self) -> object:
        closed = self._closed
        if closed is not None:
            return closed
        return next(self._gen)

    def data_to_send(self) -> bytes:
        data, self._ready = self._ready, b""
        return data

    def commit_done(self, error: Exception | None) -> None:
        self._commit_error = error

    def commit_cancelled(self) -> None:
        # Runs the generator's ``except``/``finally`` of the commit it was waiting for.
        try:
            self._gen.throw(_Cancelled())
        except _Cancelled:
            pass

    def authenticated(self, ok: bool) -> None:
        self._ok = ok

    def unblocked(self) -> None:
        pass

    def timed_out(self) -> None:
        self._timed_out = True

    def connection_lost(self, reason: str) -> None:
        self._abnormal = True
        self.close_reason = self.close_reason or reason

    def on_sent(self) -> bool:
        s = self.session
        if s is not None and s.conn is self.outlet:
            if s.queue:
                s.pump()
            if s.replay is not None:
                return self.broker.replay_step(s)
        return False

    def connection_closed(self) -> bool:
        """Publish the will if the end was abnormal, release the session."""
        broker = self.broker
        broker.stats.connections -= 1
        kick = False
        self._detach()  # (unless the protocol's own close did)
        s = self.session
        ours = s is not None and self._had_session and s.conn is None  # (not taken over)
        if self._abnormal and self.will is not None:
            will, self.will = self.will, None
            if (self._perms.active and self.grants is not None
                    and not self.grants.may_publish(will.topic)) or sys_topic(will.topic):
                # A will obeys the publish rules at the moment it would go out.
                self._perms.counters["mqtt_wills_denied"] += 1
            elif isinstance(will, Will5):
                kick = send_will5(broker, will, self.client_id, self.session,
                                  s if ours else None)
            else:
                broker.stats.wills += 1
                kick = broker.route(will.topic, will.payload, will.qos, will.retain)
        if s is not None and ours and s.clean:
            kick = broker.discard_session(s) or kick  # MQTT-3.1.2-6: ends with it
        elif s is not None and ours:
            s.offline_since = self.clock()  # its --mqtt-session-expiry runs from now
            if s.expiry is not None:
                broker.deadlines = True  # (the expiry sweep checks every second now)
                if s.set_expiry(s.expiry, time.time() + s.expiry):
                    kick = True  # MQTT 5: its deadline on disk (the clock runs while down)
        return kick

    def _detach(self) -> None:
        """The session leaves this connection (owed retained messages end with it)."""
        s = self.session
        if s is not None and s.conn is self.outlet:
            self._had_session, s.conn, s.replay = True, None, None

    def take_over(self) -> None:
        """Another CONNECT with our client id won (MQTT-3.1.4-2): end this connection.
        Unsent deliveries stay with the session (in-flight ones are re-sent on the new
        connection); none of them may still leave through this one."""
        self.disconnect5(ReasonCode.SESSION_TAKEN_OVER)
        self.end("session taken over")

    def disconnect5(self, code: int, props: Properties = NO_PROPERTIES) -> None:
        """MQTT 5: tell the client why the broker ends the connection (4.13.1), sent now
        when nothing is buffered before it (``end`` drops unsent bytes)."""
        if self.level == 5 and self.session is not None:
            self.broker.stats.disconnects_sent += 1
            self.outlet.send_now(encode_disconnect5(code, props))

    def end(self, reason: str) -> None:
        """The broker ends this connection now (a take-over, an operator's ``oxiedge client
        kick``): the client did not say goodbye, so its will is published."""
        self._abnormal = True
        self.ended_by_broker = True
        self.close_reason = reason
        self.outlet.abort()

    # ----------------------------------------------------------------- the run
    def _run(self) -> Generator[object, None, None]:
        stats = self.broker.stats
        try:
            keep_alive = yield from self._handshake()
            yield from self._serve(keep_alive)
        except CloseConnection as exc:
            self._abnormal = exc.abnormal
            self.ended_by_broker = exc.by_broker
            self.close_reason = str(exc)
        except ProtocolError as exc:
            told = self.level == 5 and self.session is not None
            if told:
                self._ready = b""
                self._h.replies.clear()
                self.broker.stats.disconnects_sent += 1
                self.outlet.write(encode_disconnect5(exc.reason_code))
            self.ended_by_broker = True
            stats.protocol_errors += 1
            if isinstance(exc, TopicTooLong):
                stats.topics_refused += 1
            self._abnormal = True
            self.close_reason = f"protocol error: {exc}"
            if told:
                yield from self._linger()
        self._h.replies.clear()  # nothing of an unfinished burst is acknowledged
        self._ready = b""
        # The session leaves now: a publish routed before the stream's close is queued,
        # not written to a connection that never sends it (then re-sent with DUP=1).
        self._detach()
        self._closed = Close(self.close_reason)
        yield self._closed

    def _linger(self) -> Generator[object, None, None]:
        """After a DISCONNECT for a broken rule: nothing more is sent (MQTT-3.14.4-1), and
        what the client still sends (PUBRELs for PUBRECs it had not read yet) is read and
        dropped until it closes or ``LINGER_S`` passed, so that it reads the DISCONNECT
        instead of a reset of a connection closed on its unread input."""
        self._detach()
        self.deadline = self.clock() + LINGER_S
        while not (self._timed_out or self._eof):
            self.decoder.discard()
            yield NEED_DATA

    def _read(self) -> Generator[object, None, None]:
        """Wait for more input; raises ``CloseConnection`` at the deadline or end of input."""
        if not self._fresh:  # (bytes fed before the first ``next_action``: go on)
            yield NEED_DATA
        self._fresh = False
        if self._timed_out or self._eof:
            self._end_of_input()

    def _end_of_input(self) -> None:
        if self._timed_out:
            self._timed_out = False
            if self.session is None:
                self.broker.stats.connect_timeouts += 1
                raise CloseConnection("no CONNECT in time", abnormal=False, by_broker=True)
            if self.level == 5:
                self.broker.stats.disconnects_sent += 1
                self.outlet.write(encode_disconnect5(ReasonCode.KEEP_ALIVE_TIMEOUT))
            raise CloseConnection(f"keep-alive timeout ({self._keep_alive}s x 1.5)", by_broker=True)
        if self.session is None:
            raise CloseConnection("closed before CONNECT", abnormal=False)
        raise CloseConnection("connection closed without DISCONNECT")

    def _commit(self) -> Generator[object, None, None]:
        """Ask the loop for one commit; raises ``CloseConnection`` if it failed."""
        self._commit_error = None
        yield COMMIT
        exc = self._commit_error
        if exc is not None:  # CommitError: nothing that waited for it may be acked
            self.broker.stats.commit_errors += 1
            self._log.error("MQTT: commit failed, closing %s: %s", clip(self.client_id), exc)
            if self._h5 is not None:  # MQTT 5: PUBACK/PUBREC 0x80 with why, then DISCONNECT
                self.broker.stats.disconnects_sent += 1
                self.outlet.write(self._h5.failed(f"commit failed: {exc}"))
            raise CloseConnection(f"commit failed: {exc}")

    # -------------------------------------------------------------------- bursts
    def _serve(self, keep_alive: int) -> Generator[object, None, None]:
        self._keep_alive = keep_alive
        # MQTT-3.1.2-24: 1.5x the keep-alive without any packet closes the connection.
        window = keep_alive * 1.5 if keep_alive else math.inf
        h = self._h
        handlers = h.table()
        decoder = self.decoder
        next_item, on_publish, on_puback = decoder.next_item, h.on_publish, h.on_puback
        h5 = self._h5
        if h5 is not None:  # MQTT 5: the branch on the level, once per connection
            handlers = h5.table()
            next_item, on_publish = decoder.next_item5, h5.on_publish  # type: ignore[assignment]
        deliver_now = self.outlet.deliver_now
        replies = h.replies
        alarms, clock, router = self._alarms, self.clock, self.broker.router
        inf = math.inf
        held = None  # a PUBLISH that came during an alarm (handled once it clears)
        while True:
            budget = BURST_SLICE
            sliced = False  # (a CHECKPOINT reset ``budget``: packets were handled)
            if held is not None:
                on_publish(held)
                held = None
                if not decoder.buffered:
                    deliver_now()
            while (item := next_item()) is not None:
                budget -= 1
                if not budget:
                    # A 64 KiB read can hold ~9,000 tiny packets: let the other
                    # connections run every so often (the burst goes on afterwards).
                    budget = BURST_SLICE
                    sliced = True
                    yield CHECKPOINT
                if type(item) is tuple:
                    if alarms.blocked:
                        held = item  # waits for the alarm (below), what follows too
                        break
                    on_publish(item)  # the hot path: no packet object, no lookup
                    if not decoder.buffered:
                        # The last packet of this input: its deliveries go now, not
                        # after the end-of-burst work (they wait for nothing of it).
                        deliver_now()
                        break  # (what ``next_item`` would say: nothing more)
                    continue
                if type(item) is int:
                    on_puback(item)  # a subscriber's hot path: a PUBACK's packet id
                    continue
                if isinstance(item, _STEPPED) and len(item.topics) > STEP_FILTERS:
                    yield from h.in_steps(item)  # a big (UN)SUBSCRIBE: others run
                    continue
                handler = handlers.get(type(item))
                if handler is None:
                    raise ProtocolError(f"unexpected {type(item).__name__} from a client")
                if handler(item):
                    break  # DISCONNECT: nothing after it is processed
            if h.disconnected:
                self._disconnected()
            # (``router.hold``'s lists tested directly: ``Hold.__bool__`` is a call)
            hold = router.hold
            if h.need_commit or h.kick or h.after_burst or hold.pending or hold.qos0:
                # A slow disk is not the client's silence: no keep-alive during the commit.
                self.deadline = inf
                yield from self._end_burst()
            elif replies:  # nothing staged or held (the common case): the replies go now
                self._ready = replies[0] if len(replies) == 1 else b"".join(replies)
                replies.clear()
            if h.disconnected:
                self.deadline = inf
                if self._ready:
                    yield SEND  # the burst before DISCONNECT is answered in full
                raise CloseConnection("client sent DISCONNECT", abnormal=self.will is not None)
            if budget != BURST_SLICE or sliced or self.deadline == inf:
                # A complete packet restarts the keep-alive, as in Mosquitto; bytes of
                # an unfinished one do not (MQTT-3.1.2-24: a client that dribbles a
                # packet a byte at a time is closed 1.5x keep-alive after its last one).
                # (``inf``: the commit or the alarm above suspended it.)
                self.deadline = clock() + window
            if held is not None:
                # A PUBLISH during a memory or disk alarm, the first of a new connection
                # too (else reconnecting per message would get past a disk alarm): what
                # came before it is answered, it and what follows wait unread.
                self.deadline = inf
                if self._ready:
                    yield SEND
                self.broker.stats.blocked += 1
                yield BLOCKED
                self.deadline = clock() + window
                continue
            # (``_read`` inlined: one generator less per burst)
            if not self._fresh:
                yield NEED_DATA
            self._fresh = False
            if self._timed_out or self._eof:
                self._end_of_input()
            if h.published and alarms.blocked:
                # Memory or disk alarm: hold a publisher's input unprocessed (and so its
                # socket unread: TCP back-pressure) while subscribers keep draining. A
                # held client is not silent by choice, so no keep-alive meanwhile.
                self.deadline = math.inf
                self.broker.stats.blocked += 1
                yield BLOCKED
                self.deadline = clock() + window

    def _disconnected(self) -> None:
        """The client sent DISCONNECT: its will is discarded (MQTT-3.14.4-3) unless an
        MQTT 5 client asked for it (0x04); MQTT 5 may change the session's expiry."""
        h5 = self._h5
        if h5 is None or not h5.keep_will:
            self.will = None
        s = self.session
        if h5 is not None and s is not None and s.expiry is not None:
            s.expiry = h5.session_expiry
            if not h5.session_expiry:
                s.clean = True  # ends with this connection (3.1.2.11.2)

    def _end_burst(self) -> Generator[object, None, None]:
        broker, h = self.broker, self._h
        # Deliveries held for a commit (QoS 2): staged before the commit below, so it
        # makes them durable. Held deliveries always mean a commit, if only a barrier.
        hold = broker.take_hold()
        if h.need_commit or hold is not None:
            h.need_commit = False
            try:
                yield from self._commit()  # a failure drops ``hold``: never sent
            except _Cancelled:  # (take-over, peer gone): the next commit releases them
                if hold is not None:  # (the service's releaser task)
                    broker.return_hold(hold)
                raise
        elif h.kick:
            yield KICK
        h.kick = False
        replies = h.replies
        if replies:
            self._ready = replies[0] if len(replies) == 1 else b"".join(replies)
            replies.clear()
        if hold is None and not h.after_burst:
            return  # the loop sends ``_ready`` with NEED_DATA: one write per burst
        if self._ready:
            yield SEND
        if hold is not None:
            # After the replies: a client subscribed to its own QoS 2 PUBLISH gets the
            # PUBREC first, then the delivery (as mosquitto's 02-subpub-qos2 expects).
            hold.release()
        if h.after_burst:
            # Retained messages go out after the SUBACK that establishes the subscription,
            # paced by the output buffer and the in-flight window (``replay.py``).
            for sub, resulting in h.after_burst:
                if sub.conn is self.outlet:
                    broker.queue_retained(sub, resulting)
            h.after_burst.clear()
            own = self.session
            if own is not None and own.conn is self.outlet and broker.replay_step(own):
                yield KICK
