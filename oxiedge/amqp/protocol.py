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

Publishing (``burst.py``): a burst of ``basic.publish`` (and ``basic.ack``) frames is
routed at once (``Broker.publish``); at the end of the burst, or before any other method,
ONE commit for everything staged, then the confirms in publish order, coalesced to one
``basic.ack multiple=true`` per channel.  Transient bursts never wait.  Consumers may see
a message before its sync (as with RabbitMQ); what waits for the sync is the publisher's
confirm, the only promise made about it.

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
from oxiedge.amqp.burst import PublishBurst
from oxiedge.amqp.channel import UNSYNCED, AfterCommit, Channel, server_cancel
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
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    FRAME_ERROR,
    INTERNAL_ERROR,
    NOT_ALLOWED,
    PRECONDITION_FAILED,
)
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.handshake import CLOSE_OK_FRAME, Handshake
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.streaming import (
    CLOSE_LINGER,
    CLOSE_TIMEOUT,
    LoopSide,
    Outlet,
    _Ended,
)

if TYPE_CHECKING:
    from oxiedge.access.grants import Grants
    from oxiedge.access.rules import PermissionStore
    from oxiedge.alarms import ResourceAlarms
    from oxiedge.amqp.broker import Broker
    from oxiedge.config import Config

__all__ = ["CLOSE_OK_FRAME", "COMMIT", "NEED_DATA", "SEND", "AmqpProtocol", "Authenticate",
           "Close"]

_PUBLISH = spec.BasicPublish
#: Longest stretch of one burst before the other connections get a turn (``CHECKPOINT``).
BURST_SLICE_S = 0.005
_ACK = spec.BasicAck


def _nothing() -> None:
    pass


class AmqpProtocol(LoopSide, Handshake, PublishBurst):
    """One client connection's protocol state (see the module docstring)."""

    def __init__(self, broker: Broker, outlet: Outlet, config: Config,
                 counters: dict[str, int], perms: PermissionStore,
                 server_properties: dict[str, Any], *, clock: Callable[[], float],
                 handshake_deadline: float | None = None,
                 alarms: ResourceAlarms | None = None,
                 note_input: Callable[[int], None] | None = None, peer: str = "?",
                 tls_identity: str | None = None, on_opened: Callable[[], None] = _nothing,
                 log: logging.Logger | None = None) -> None:
        self.broker = broker
        self.store = broker.store
        self.config = config
        self.counters = counters  # the service's connection counters
        self.perms = perms  # docs/permissions.md, ``authz.py``: checked only while rules exist
        self.server_properties = server_properties
        self.alarms = alarms
        self.peer = peer
        #: A verified client certificate's name (--tls-identity-as-username): offers EXTERNAL.
        self.tls_identity = tls_identity
        self._outlet = outlet
        self.clock = clock
        #: Publisher input counts toward the memory alarm as it arrives (the service
        #: samples it every few MiB).
        self._note_input = note_input
        self.on_opened = on_opened  # the binding starts the heartbeats
        self.log = log or logging.getLogger("oxiedge")
        self.handshake_timeout: float = config.amqp_handshake_timeout
        if handshake_deadline is None:
            handshake_deadline = clock() + self.handshake_timeout
        #: When the next read must have arrived (the loop's clock; inf: never).
        self.deadline = handshake_deadline
        self._handshake_until = handshake_deadline
        self._until = math.inf  # the close or linger deadline, once one applies
        self.frame_max: int = config.amqp_frame_max
        self.channel_max: int = config.amqp_channel_max
        self.max_consumers: int = config.amqp_max_consumers_per_connection
        self.max_queues: int = config.amqp_max_queues_per_connection
        self.heartbeat: int = config.amqp_heartbeat  # negotiated by tune-ok
        #: Unacked deliveries per channel never exceed this, prefetch or not.
        self.unacked_limit: int = config.amqp_queue_limit
        #: Queues this connection created (live ones count toward ``max_queues``).
        self.created_queues: set[Queue] = set()
        self.user = ""
        self.client_id = ""  # of the client properties (permissions); the table is not kept
        self.grants: Grants | None = None
        self.cancel_notify = False
        self.blocked_notify = False  # client announced the connection.blocked capability
        self.channels: dict[int, Channel] = {}
        self.exclusive_queues: dict[str, Queue] = {}
        self.publisher = False  # has published: throttled while a resource alarm is on
        self.opened = False  # the handshake completed
        self.closed = False  # channels released; nothing more is handled
        self.closing = False  # we sent connection.close and wait for close-ok
        self.clean = False  # the close handshake completed
        self.linger = False  # the client closed: read until it closes its side
        self.server_error = False  # we closed it with a connection exception
        self.end_reason = ""
        self.published = 0
        self.delivered = 0
        # Before the login only a small frame is accepted (the start-ok with its client
        # properties): 500 unauthenticated sockets cannot make the broker buffer much.
        self.parser = FrameParser(config.amqp_preauth_max_size, expect_header=True,
                                  max_body=config.amqp_max_message_size)
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
        self._commit_error: BaseException | None = None
        self.unsubscribe_alarms: Callable[[], None] | None = None
        # -- what is staged and not yet durable ------------------------------------------
        self._needs_commit = False  # durable publish records of this burst
        self._confirms: list[tuple[Channel, int, bool]] = []  # (channel, seq, accepted)
        # Publishes staged but not awaited (no confirms): synced before any close-ok.
        self._publishes_unsynced = False
        self._staged = False  # durable deletes staged (acks, auto-deletes): kick the store
        # Acks staged but not awaited: made durable before the reply to the next synchronous
        # method, so "ack, then any round trip" means the ack survives a crash.
        self._unsynced = False
        self._raw: bytes | None = None  # framing lost while closing: raw bytes, see below
        self._ok = False  # the answer to Authenticate
        self._closed: Close | None = None
        self._steps: Steps = self._main()

    def note_staged(self) -> None:
        """A delivery (run in another task) staged a durable delete for this connection."""
        self._staged = True

    def release(self) -> None:
        """Channels die (unacked back to their queues), exclusive queues are deleted."""
        self.closed = True
        if self.unsubscribe_alarms is not None:
            self.unsubscribe_alarms()
            self.unsubscribe_alarms = None
        for ch in list(self.channels.values()):
            ch.release()
        self.channels.clear()
        for q in list(self.exclusive_queues.values()):
            self.broker.delete_queue(q, server_cancel)
        self.exclusive_queues.clear()
        self.store.kick()

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
            yield from self._handshake()
            if not self.closed:
                yield from self._loop()
        except ProtocolHeaderMismatch as exc:
            # Spec 4.2.2: answer a bad protocol header with ours, then close.
            self.end_reason = f"bad protocol header {exc.received!r}"
            self.send(PROTOCOL_HEADER)
        except AmqpError as exc:
            if not self.opened and exc.code == FRAME_ERROR and "frame_max" in exc.text:
                self.counters["preauth_too_large"] += 1
                exc.text += " (before login)"
            yield from self._close_with(exc)

    def _close_with(self, exc: AmqpError) -> Steps:
        """Connection exception: send connection.close, wait for close-ok (the driver
        bounds the wait)."""
        self.server_error = self.closing = True
        self._until = self.clock() + CLOSE_TIMEOUT
        self.end_reason = f"{exc.code} {exc.text}"
        self.send(encode_method(0, spec.ConnectionClose(
            exc.code, exc.reply_text, exc.class_id, exc.method_id)))
        self.release()
        parser = self.parser
        while True:
            try:
                ev = parser.next_event()
            except AmqpError:
                # The framing is lost: look for the close-ok frame's bytes instead, so the
                # socket is not reset while the client's close-ok is in flight.
                self._raw = tail = parser.unconsumed()
                while CLOSE_OK_FRAME not in tail:
                    self._raw = tail[-len(CLOSE_OK_FRAME):]
                    yield from self.read()
                    tail = self._raw
                return
            if ev is None:
                yield from self.read()
            elif isinstance(ev, Command) and isinstance(
                    ev.method, (spec.ConnectionCloseOk, spec.ConnectionClose)):
                if isinstance(ev.method, spec.ConnectionClose):
                    self.send(CLOSE_OK_FRAME)
                return

    # -- main loop -----------------------------------------------------------------------

    def _loop(self) -> Steps:
        channels = self.channels
        parser = self.parser
        alarms = self.alarms
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
                                if self._flush_due:
                                    yield from self._flush()
                                if self._out:
                                    yield SEND  # (the confirms of those)
                                yield BLOCKED
                                if ch.closing or self.closed:
                                    continue
                            self._publish(ch, ev)
                            if not parser.buffered:
                                # The last frame of this input: its deliveries go now, not
                                # after the end-of-burst work (they wait for nothing of it:
                                # consumers may see a message before its sync).
                                self._outlet.deliver_now()
                        else:
                            flags = ch.ack(ev.method.delivery_tag, ev.method.multiple)  # type: ignore[attr-defined]
                            if flags:
                                self._staged = True
                                self._unsynced = self._unsynced or bool(flags & UNSYNCED)
                    except AmqpError as exc:
                        self._channel_error(ch, exc, ev.method)
                    continue
                if self._flush_due:
                    yield from self._flush()
                yield from self._method(ev)
                if self.closed:
                    return
            if self._flush_due:
                yield from self._flush()
            # The end of a burst.  Publisher input (bodies being received included) counts
            # toward the memory alarm as it arrives; while an alarm is on, a publishing
            # connection is not read (TCP back-pressure throttles it, as in RabbitMQ; one
            # still receiving its first body counts too: the body is memory already).
            if self.publisher or parser.receiving:
                if self._note_input is not None:
                    self._note_input(self._input)
                if alarms is not None and alarms.blocked:
                    yield BLOCKED
            self._input = 0
            yield from self.read()

    def _content_too_large(self, exc: ContentTooLarge) -> Steps:
        """A content header announced more than --amqp-max-message-size: 406 on its
        channel at once (RabbitMQ); the parser already skips the body frames."""
        self.counters["messages_too_large"] += 1
        yield from self._flush()  # earlier publishes of the burst are confirmed first
        ch = self.channels.get(exc.channel)
        if ch is None:
            self.parser.resume_channel(exc.channel)
            raise AmqpError(CHANNEL_ERROR, f"basic.publish on channel {exc.channel}, which "
                            "is not open", 60, 40)
        self._channel_error(ch, exc, spec.BasicPublish())

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
            if ch is not None:
                raise AmqpError(CHANNEL_ERROR, f"second 'channel.open' seen on {number}", 20, 10)
            # RabbitMQ's reading of channel_max, which clients rely on: it bounds the number
            # of open channels (any channel number 1-65535 may be used).
            if len(self.channels) >= self.channel_max:
                self.counters["channel_limit_refused"] += 1
                raise AmqpError(NOT_ALLOWED,
                                f"number of channels opened ({len(self.channels)}) has "
                                f"reached the negotiated channel_max ({self.channel_max})",
                                20, 10)
            self.channels[number] = Channel(self, number)
            self.send(encode_method(number, spec.ChannelOpenOk()))
            return
        if ch is None:
            raise AmqpError(CHANNEL_ERROR, f"expected 'channel.open' on channel {number}",
                            m.CLASS_ID, m.METHOD_ID)
        if ch.closing:
            # After our channel.close only close-ok (or a crossing close) matters.
            if isinstance(m, spec.ChannelCloseOk):
                del self.channels[number]
                self.parser.resume_channel(number)
            elif isinstance(m, spec.ChannelClose):
                # Crossing closes: answer, and still wait for the close-ok (as RabbitMQ).
                self.send(encode_method(number, spec.ChannelCloseOk()))
            return
        if isinstance(m, spec.ChannelClose):
            yield from self._sync_before_close()  # its publishes are durable before close-ok
            self._staged |= ch.release() != 0
            del self.channels[number]
            self.send(encode_method(number, spec.ChannelCloseOk()))
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
            self._channel_error(ch, exc, m)
        if self._staged:
            self._staged = False
            self.store.kick()

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
            # The new secret must authenticate the connection's user again (for PLAIN and
            # AMQPLAIN it is the password); otherwise the connection is refused.
            yield Authenticate(self.user or None, m.new_secret or None)
            if not self._ok:
                raise AmqpError(ACCESS_REFUSED, "update-secret: new secret refused",
                                m.CLASS_ID, m.METHOD_ID)
            self.send(encode_method(0, spec.ConnectionUpdateSecretOk()))
            return
        raise AmqpError(COMMAND_INVALID, f"{m.NAME} is not allowed on channel 0",
                        m.CLASS_ID, m.METHOD_ID)

    def _sync_before_close(self) -> Steps:
        """Make what this connection staged (publishes without confirms, acks) durable."""
        if self._publishes_unsynced or self._unsynced or self._staged:
            self._publishes_unsynced = False
            yield from self._commit()

    def _commit(self) -> Steps:
        """Wait for the durable writes staged so far (declares, deletes, purges)."""
        self._staged = self._unsynced = False
        self._commit_error = None
        yield COMMIT
        error = self._commit_error
        if error is not None:
            raise AmqpError(INTERNAL_ERROR, f"durable write failed: {error}",
                            hard=True) from error

    def _channel_error(self, ch: Channel, exc: AmqpError, m: spec.Method) -> None:
        if not exc.class_id:
            exc.class_id, exc.method_id = m.CLASS_ID, m.METHOD_ID
        if exc.hard:
            raise exc
        self.counters["channel_errors"] += 1
        self.send(encode_method(ch.number, spec.ChannelClose(
            exc.code, exc.reply_text, exc.class_id, exc.method_id)))
        self.parser.drop_channel(ch.number)
        self._staged |= ch.release() != 0

    # -- per-connection bounds (issue 14: one client cannot exhaust the broker) ----------

    def check_queue_limit(self, name: str) -> None:
        """Before a declare that creates a queue: 406 past the per-connection or the
        broker-wide queue count (RabbitMQ's words for its vhost queue limit)."""
        live = {q for q in self.created_queues if not q.deleted}
        self.created_queues = live
        total = self.config.amqp_max_queues
        if len(live) >= self.max_queues:
            limit = f"limit of {self.max_queues} queues per connection"
        elif len(self.broker.queues) >= total:
            limit = f"queue limit of {total} in vhost '/'"
        else:
            return
        self.counters["queue_limit_refused"] += 1
        raise AmqpError(PRECONDITION_FAILED,
                        f"cannot declare queue '{name}': {limit} is reached", 50, 10)

    def check_consumer_limit(self) -> None:
        """Before basic.consume: 406 past the per-connection consumer count."""
        count = sum(len(ch.consumers) for ch in self.channels.values())
        if count >= self.max_consumers:
            self.counters["consumer_limit_refused"] += 1
            raise AmqpError(PRECONDITION_FAILED,
                            f"limit of {self.max_consumers} consumers per connection is "
                            "reached", 60, 20)
