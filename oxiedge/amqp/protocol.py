"""``AmqpProtocol``: one AMQP 0-9-1 connection as a sans-IO object (bytes in, actions out).

Theory of operation
-------------------
The protocol knows nothing of sockets, tasks or clocks (the clock is injected).  The
transport loop of ``oxiedge.net`` feeds it what the stream had (``receive_data``) and
performs what ``next_action()`` asks for until it says ``NEED_DATA`` (``net/__init__``
lists the vocabulary): ``COMMIT`` (await ``store.commit()``, then ``commit_done``),
``Authenticate`` (the password check runs in a thread, ``oxiedge.login``), ``BLOCKED``
(a resource alarm holds publishers), ``SEND`` and finally ``Close``.  ``deadline`` is
when the next read must have arrived: the handshake deadline, then two heartbeat
intervals (spec 4.2.7), the wait for a close-ok, the linger after one.

Replies to what was read are collected during a step and taken with ``data_to_send()``
(one write per burst); before any action that lets other tasks run the protocol asks for
``SEND`` first, so nothing it wrote can be overtaken.  Everything else (deliveries caused
by other connections' publishes, heartbeats, connection.blocked) goes straight to the
transport (``Outlet.write``).  Frames that wait for the commit round stay inside: the
publisher confirms of a burst, and the reply of a method whose durable writes it promises
(a durable declare, bind, delete) are produced only once ``commit_done`` reports the
round, and then in order, because nothing after them is handled before.  Internally the
protocol is a generator that *yields* the actions, so the handling code reads top to
bottom like the spec's dialogue.

The parts, each an object owning its state: the opening dialogue (``handshake.py``),
the publishing burst and its confirms (``burst.py``: ONE commit per burst; consumers may
see a message before its sync, as with RabbitMQ, the publisher's confirm waits for it),
the per-connection bounds (``bounds.py``), the channel table (``channels.py``) and its
channels (``channel.py``).  The transport loop's side (output, deadlines, the end of
input, the server's closes) is ``streaming.py``.

Closing, as RabbitMQ does it (spec 1.4.2.8 / 1.5.2.5): what arrived before a client's
``connection.close`` is fully handled (routed, made durable, confirmed), then close-ok is
sent and the protocol keeps reading and discarding until the client closes or
:data:`CLOSE_LINGER` passes (closing at once would make the kernel answer the client's
still-arriving frames with a reset, which destroys the close-ok before the client reads
it).  A connection exception sends ``connection.close`` and waits :data:`CLOSE_TIMEOUT`
for the close-ok; a channel the server closes has its frames discarded until its close-ok
(codec ``drop_channel``).  :meth:`AmqpProtocol.shutdown` is the broker stopping (320).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

from oxiedge.amqp import methods, spec
from oxiedge.amqp.actions import (
    BLOCKED,
    CHECKPOINT,
    COMMIT,
    NEED_DATA,
    SEND,
    Authenticate,
    Close,
    Steps,
)
from oxiedge.amqp.bounds import ConnectionBounds
from oxiedge.amqp.burst import PublishBurst
from oxiedge.amqp.channel import AfterCommit
from oxiedge.amqp.channels import ChannelTable
from oxiedge.amqp.codec import (
    HEARTBEAT,
    PROTOCOL_HEADER,
    Command,
    ContentTooLarge,
    FrameParser,
    ProtocolHeaderMismatch,
    encode_method,
)
from oxiedge.amqp.constants import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    FRAME_ERROR,
    INTERNAL_ERROR,
)
from oxiedge.amqp.consumers import server_cancel
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.handshake import CLOSE_OK_FRAME, Handshake
from oxiedge.amqp.ports import Alarms, ConnectionLimits, Outlet
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.settlement import UNSYNCED
from oxiedge.amqp.streaming import CLOSE_LINGER, LoopSide, _Ended
from oxiedge.lograte import clip

if TYPE_CHECKING:
    from oxiedge.access.grants import Grants
    from oxiedge.access.rules import PermissionStore
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.channel import Channel

__all__ = ["CLOSE_OK_FRAME", "COMMIT", "NEED_DATA", "SEND", "AmqpProtocol", "Authenticate",
           "Close", "ConnectionLimits"]

_PUBLISH = spec.BasicPublish
#: Longest stretch of one burst before the other connections get a turn (``CHECKPOINT``).
BURST_SLICE_S = 0.005
_ACK = spec.BasicAck


def _nothing() -> None:
    pass


class AmqpProtocol(LoopSide):
    """One client connection's protocol state (see the module docstring)."""

    def __init__(self, broker: Broker, outlet: Outlet, limits: ConnectionLimits,
                 counters: dict[str, int], perms: PermissionStore,
                 server_properties: dict[str, Any], *, clock: Callable[[], float],
                 handshake_deadline: float | None = None,
                 alarms: Alarms | None = None,
                 note_input: Callable[[int], None] | None = None, peer: str = "?",
                 tls_identity: str | None = None, on_opened: Callable[[], None] = _nothing,
                 log: logging.Logger | None = None) -> None:
        self.broker = broker
        self.store = broker.store
        self.counters = counters  # the service's connection counters
        self.perms = perms  # docs/permissions.md, ``authz.py``: checked only while rules exist
        self.alarms = alarms
        self.peer = peer
        self._outlet = outlet
        self.clock = clock
        #: Publisher input counts toward the memory alarm as it arrives (the service
        #: samples it every few MiB).
        self._note_input = note_input
        self.on_opened = on_opened  # the binding starts the heartbeats
        self.log = log or logging.getLogger("oxiedge")
        if handshake_deadline is None:
            handshake_deadline = clock() + limits.handshake_timeout
        #: When the next read must have arrived (the loop's clock; inf: never).
        self.deadline = handshake_deadline
        self._until = math.inf  # the close or linger deadline, once one applies
        #: Unacked deliveries per channel never exceed this, prefetch or not.
        self.unacked_limit = limits.unacked_limit
        # Before the login only a small frame is accepted (the start-ok with its client
        # properties): 500 unauthenticated sockets cannot make the broker buffer much.
        self.parser = FrameParser(limits.preauth_max_size, expect_header=True,
                                  max_body=limits.max_message_size)
        self.handshake = Handshake(self, self.parser, limits, server_properties, perms,
                                   counters, until=handshake_deadline,
                                   tls_identity=tls_identity)
        # What the handshake settles, in force from connection.open-ok (``_opened``):
        # read per frame, so they are plain attributes of the connection.
        self.frame_max = limits.frame_max
        self.heartbeat = limits.heartbeat
        self.grants: Grants | None = None
        self.cancel_notify = False
        self.burst = PublishBurst(self, broker, self.store, self.log, peer)
        self.table = ChannelTable(self, self.parser, counters)
        #: The open channels by number (the table's: read per frame, changed by the table).
        self.channels = self.table.open
        self.bounds = ConnectionBounds(
            self.channels, broker, counters, channel_max=limits.channel_max,
            max_consumers=limits.max_consumers, max_queues=limits.max_queues,
            tx_max_messages=limits.tx_max_messages, tx_max_bytes=limits.tx_max_bytes)
        self.exclusive_queues: dict[str, Queue] = {}
        self.opened = False  # the handshake completed
        self.closed = False  # channels released; nothing more is handled
        self.closing = False  # we sent connection.close and wait for close-ok
        self.clean = False  # the close handshake completed
        self.linger = False  # the client closed: read until it closes its side
        self.server_error = False  # we closed it with a connection exception
        self.end_reason = ""
        self.delivered = 0
        self._out: list[bytes] = []  # replies of the current step (``data_to_send``)
        self._out_size = 0
        self._stepping = False  # inside next_action: replies go to _out
        self._held: Any = None  # an action held back behind a SEND
        self._stalled = False  # a consumer was skipped while the output was full
        self._timed_out = False
        self._eof = False
        self._input = 0  # bytes received since the last NEED_DATA
        self.discarded_bytes = 0  # read and dropped after close-ok
        self._shutting_down = False
        #: The transport loop's answers: to the last ``COMMIT`` and ``Authenticate``.
        self.commit_error: BaseException | None = None
        self.login_ok = False
        self._secret_logged = -math.inf  # update-secret's log line, see _secret_updated
        self.unsubscribe_alarms: Callable[[], None] | None = None
        # Durable deletes staged (acks, auto-deletes): kick the store.
        self._staged = False
        # Acks staged but not awaited: made durable before the reply to the next synchronous
        # method, so "ack, then any round trip" means the ack survives a crash.
        self._unsynced = False
        self._raw: bytes | None = None  # framing lost while closing: raw bytes, see below
        self._closed: Close | None = None
        self._steps: Steps = self._main()

    @property
    def user(self) -> str:
        """The user name the client logged in with (or tried to)."""
        return self.handshake.user

    @property
    def published(self) -> int:
        return self.burst.published

    def note_staged(self) -> None:
        """A delivery (run in another task) staged a durable delete for this connection."""
        self._staged = True

    def fail_channel(self, ch: Channel, exc: AmqpError) -> None:
        """A channel exception from outside a step (``acktimeout.py``): channel.close goes
        out now, the channel is released (its unacked back to their queues)."""
        if not self.closed and not ch.closing and self.table.fail(ch, exc, None):
            self.store.kick()

    def release(self) -> None:
        """Channels die (unacked back to their queues), exclusive queues are deleted."""
        self.closed = True
        if self.unsubscribe_alarms is not None:
            self.unsubscribe_alarms()
            self.unsubscribe_alarms = None
        self.table.release()
        for q in list(self.exclusive_queues.values()):
            self.broker.delete_queue(q, server_cancel)
        self.exclusive_queues.clear()
        self.store.kick()

    def _opened(self) -> None:
        """open-ok is sent: what the handshake settled is in force."""
        hs = self.handshake
        self.frame_max, self.heartbeat = hs.frame_max, hs.heartbeat
        self.bounds.channel_max = hs.channel_max
        self.grants, self.cancel_notify = hs.grants, hs.cancel_notify
        self.opened = True
        self.on_opened()
        alarms = self.alarms
        if alarms is not None:
            self.unsubscribe_alarms = alarms.subscribe(self._on_alarm)
            if alarms.blocked:
                self._on_alarm(True, alarms.reason)

    def _on_alarm(self, blocked: bool, reason: str) -> None:
        """Resource alarm changed: tell clients that asked (RabbitMQ's connection.blocked)."""
        if not self.handshake.blocked_notify or self.closed:
            return
        if blocked:
            self.send(encode_method(0, spec.ConnectionBlocked(reason[:255])))
        else:
            self.send(encode_method(0, spec.ConnectionUnblocked()))

    # -- the dialogue --------------------------------------------------------------------

    def _main(self) -> Steps:
        try:
            yield from self._run()
            if self.linger:
                # After close-ok: read and drop what the client still sends until it
                # closes, for at most CLOSE_LINGER.
                self._until = self.clock() + CLOSE_LINGER
                while True:
                    yield from self.read()
        except _Ended as exc:
            self.end_reason = self.end_reason or str(exc)
        self._closed = Close(self.end_reason or "closed")
        yield self._closed

    def _run(self) -> Steps:
        try:
            if (yield from self.handshake.run()):
                self._opened()
                yield from self._loop()
            else:  # the client sent connection.close instead: it got close-ok
                self.closed = self.clean = self.linger = True
        except ProtocolHeaderMismatch as exc:
            # Spec 4.2.2: answer a bad protocol header with ours, then close.
            self.end_reason = f"bad protocol header {exc.received!r}"
            self.send(PROTOCOL_HEADER)
        except AmqpError as exc:
            if not self.opened and exc.code == FRAME_ERROR and "frame_max" in exc.text:
                self.counters["preauth_too_large"] += 1
                exc.text += " (before login)"
            yield from self._close_with(exc)

    # -- main loop -----------------------------------------------------------------------

    def _loop(self) -> Steps:
        channels = self.channels
        parser = self.parser
        alarms = self.alarms
        burst = self.burst
        publish = burst.publish
        while True:
            slice_end = perf_counter() + BURST_SLICE_S
            while True:
                try:
                    ev = parser.next_event()
                except ContentTooLarge as exc:
                    yield from self._content_too_large(exc)
                    continue
                if ev is None:
                    break
                if ev is HEARTBEAT:
                    continue
                assert isinstance(ev, Command)
                if perf_counter() > slice_end:
                    # A 64 KiB read can hold hundreds of commands, and one may be dear (a
                    # publish through a long exchange chain, a big delete): let the other
                    # connections run every few ms (the burst goes on afterwards).
                    yield CHECKPOINT
                    slice_end = perf_counter() + BURST_SLICE_S
                cls = type(ev.method)
                if cls is _PUBLISH or cls is _ACK:
                    ch = channels.get(ev.channel)
                    if ch is None:
                        code = COMMAND_INVALID if ev.channel == 0 else CHANNEL_ERROR
                        raise AmqpError(code, f"{ev.method.NAME} on channel {ev.channel}, "
                                        "which is not open", ev.method.CLASS_ID,
                                        ev.method.METHOD_ID)
                    if ch.closing:
                        continue
                    try:
                        if cls is _PUBLISH:
                            if alarms is not None and alarms.blocked:
                                # A publish during an alarm waits for it to clear, the
                                # first of a new connection too (else reconnecting per
                                # message would get past a disk alarm): what came before
                                # it is finished first, nothing after it is read.
                                if burst.flush_due:
                                    yield from burst.flush()
                                if self._staged:
                                    self._kick()
                                if self._out:
                                    yield SEND  # (the confirms of those)
                                yield BLOCKED
                                if ch.closing or self.closed:
                                    continue
                            publish(ch, ev)
                            if not parser.buffered:
                                # The last frame of this input: its deliveries go now, not
                                # after the end-of-burst work (they wait for nothing of it:
                                # consumers may see a message before its sync).
                                self._outlet.deliver_now()
                        else:
                            ack: Any = ev.method
                            if ch.tx is not None:  # held until tx.commit
                                ch.tx.hold_settlement(ack.delivery_tag, ack.multiple, None)
                                continue
                            flags = ch.settlement.ack(ack.delivery_tag, ack.multiple)
                            if flags:
                                self._staged = True
                                self._unsynced = self._unsynced or bool(flags & UNSYNCED)
                    except AmqpError as exc:
                        self._staged |= self.table.fail(ch, exc, ev.method) != 0
                    continue
                if burst.flush_due:
                    yield from burst.flush()
                if self._staged:
                    self._kick()
                yield from self._method(ev)
                if self.closed:
                    return
            if burst.flush_due:
                yield from burst.flush()
            if self._staged:
                self._kick()
            # The end of a burst.  Publisher input (bodies being received included) counts
            # toward the memory alarm as it arrives; while an alarm is on, a publishing
            # connection is not read (TCP back-pressure throttles it, as in RabbitMQ; one
            # still receiving its first body counts too: the body is memory already).
            if burst.publisher or parser.receiving:
                if self._note_input is not None:
                    self._note_input(self._input)
                if alarms is not None and alarms.blocked:
                    yield BLOCKED
            self._input = 0
            yield from self.read()

    def _kick(self) -> None:
        """Durable deletes were staged: have a commit round soon (nobody waits for it)."""
        self._staged = False
        self.store.kick()

    def _content_too_large(self, exc: ContentTooLarge) -> Steps:
        """A content header announced more than --amqp-max-message-size: 406 on its
        channel at once (RabbitMQ); the parser already skips the body frames."""
        self.counters["messages_too_large"] += 1
        yield from self.burst.flush()  # earlier publishes of the burst are confirmed first
        if self._staged:
            self._kick()
        ch = self.channels.get(exc.channel)
        if ch is None:
            self.parser.resume_channel(exc.channel)
            raise AmqpError(CHANNEL_ERROR, f"basic.publish on channel {exc.channel}, which "
                            "is not open", 60, 40)
        self._staged |= self.table.fail(ch, exc, spec.BasicPublish()) != 0

    def _method(self, cmd: Command) -> Steps:
        m = cmd.method
        number = cmd.channel
        if number == 0:
            yield from self._connection_method(m)
            return
        if m.CLASS_ID == 10:
            raise AmqpError(COMMAND_INVALID, f"{m.NAME} on channel {number}",
                            m.CLASS_ID, m.METHOD_ID)
        ch = self.channels.get(number)
        if ch is None and isinstance(m, spec.ChannelCloseOk):
            return  # a late close-ok after crossing closes: nothing left to do
        if isinstance(m, spec.ChannelOpen):
            self.table.open_channel(number, self.bounds)
            return
        if ch is None:
            raise AmqpError(CHANNEL_ERROR, f"expected 'channel.open' on channel {number}",
                            m.CLASS_ID, m.METHOD_ID)
        if ch.closing:
            self.table.while_closing(ch, m)
            return
        if isinstance(m, spec.ChannelClose):
            yield from self._sync_before_close()  # its publishes are durable before close-ok
            self._staged |= self.table.close(ch) != 0
            return
        if isinstance(m, spec.ChannelCloseOk):
            return
        try:
            if self._unsynced and m.SYNCHRONOUS and type(m) is not spec.BasicGet:
                # (Not for basic.get: a get/ack worker loop must not pay a sync per message.)
                yield from self._commit()
            step = methods.handle(ch, m)
            if isinstance(step, AfterCommit):
                yield from self._commit()
                step.then()
            elif step:
                self._staged = True
                self._unsynced = self._unsynced or bool(step & UNSYNCED)
        except AmqpError as exc:
            self._staged |= self.table.fail(ch, exc, m) != 0
        if self._staged:
            self._kick()

    def _connection_method(self, m: spec.Method) -> Steps:
        if isinstance(m, spec.ConnectionClose):
            # What arrived before the close is durable before close-ok (spec 1.4.2.8: the
            # close-ok means the peer may discard the connection's state).
            yield from self._sync_before_close()
            # Channels and exclusive queues go BEFORE close-ok: a client that saw close-ok
            # and reconnects never finds its old exclusive queue still there.
            self.release()
            self.send(CLOSE_OK_FRAME)
            # Keep reading until the client closes: frames it queued before its close must
            # not reach a closed socket (a reset would destroy our close-ok).
            self.clean = self.linger = True
            return
        if isinstance(m, spec.ConnectionUpdateSecret):
            # Accepted, not checked: passwords and certificates do not expire during a
            # connection, so there is nothing to refresh; the user and its rights stay
            # those of the login (RabbitMQ's internal users, docs/amqp.md "update-secret").
            self._secret_updated(m.reason)
            self.send(encode_method(0, spec.ConnectionUpdateSecretOk()))
            return
        raise AmqpError(COMMAND_INVALID, f"{m.NAME} is not allowed on channel 0",
                        m.CLASS_ID, m.METHOD_ID)

    def _secret_updated(self, reason: str) -> None:
        """One info line per connection and minute (the client may loop), else debug."""
        now = self.clock()
        level = logging.INFO if now >= self._secret_logged else logging.DEBUG
        if level == logging.INFO:
            self._secret_logged = now + 60.0
        self.log.log(level, "AMQP %s (user %s): update-secret accepted, the user is "
                     "unchanged - reason: %s", self.peer, clip(self.user), clip(reason))

    def _sync_before_close(self) -> Steps:
        """Make what this connection staged (publishes without confirms, acks) durable."""
        if self.burst.take_unsynced() | self._unsynced | self._staged:
            yield from self._commit()

    def _commit(self) -> Steps:
        """Wait for the durable writes staged so far (declares, deletes, purges)."""
        self._staged = self._unsynced = False
        self.commit_error = None
        yield COMMIT
        error = self.commit_error
        if error is not None:
            raise AmqpError(INTERNAL_ERROR, f"durable write failed: {error}",
                            hard=True) from error
