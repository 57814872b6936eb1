"""The trio side of one AMQP connection: handshake, reader, writer, heartbeats, publishing.

Theory of operation
-------------------
The *reader* (the connection's main task) receives whatever the socket has (one "burst"),
feeds the sans-IO :class:`FrameParser` and handles every complete command.  A publish is
routed at once; a persistent message for a durable queue has its record *staged* in the
store and is then enqueued (so an ack's delete is always staged after the insert and can
never race ahead of it).  At the end of the burst (or before any method other than
publish/ack) the connection flushes: ONE ``await store.commit()`` for everything staged,
then the publisher confirms go out in publish order, coalesced to one ``basic.ack
multiple=true`` per channel.  Across connections the store's group committer shares one
sync.  Transient bursts never wait: they are confirmed without a commit.  Consumers may see
a message before its sync (as with RabbitMQ); what waits for the sync is the publisher's
confirm, the only promise made about it.

The *writer* task owns the socket's send side.  Everything else appends bytes with
:meth:`AmqpConnection.send` (no await; order is preserved).  When the unsent bytes pass
:data:`HIGH_WATER` the connection stops being :attr:`writable`: queues skip its consumers
and the reader stops reading until the writer has drained, which bounds memory for slow
consumers and for publishers that never read their confirms.

Heartbeats (spec 4.2.7): the server sends one when it has written nothing for half the
negotiated interval, and declares the peer dead when nothing arrived for two intervals.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from oxiedge.amqp import persist, spec
from oxiedge.amqp.channel import Channel
from oxiedge.amqp.codec import (
    HEARTBEAT,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    Command,
    FrameParser,
    ProtocolHeaderMismatch,
    encode_content,
    encode_method,
)
from oxiedge.amqp.errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    INTERNAL_ERROR,
    NO_ROUTE,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    AmqpError,
)
from oxiedge.amqp.fields import decode_table, encode_longstr
from oxiedge.amqp.queues import Consumer, Queue, QueuedMessage

if TYPE_CHECKING:
    from oxiedge.amqp.service import AmqpService

HIGH_WATER = 1 << 20  # unsent bytes per connection before consumers are skipped
HANDSHAKE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 2.0
RECEIVE_SIZE = 1 << 16

_CLOSE_OK_FRAME = encode_method(0, spec.ConnectionCloseOk())
_PUBLISH = spec.BasicPublish
_ACK = spec.BasicAck


def _deadline(expiration: str) -> float:
    """The wall-clock deadline of a per-message TTL (the ``expiration`` property, in ms).

    RabbitMQ accepts only a non-negative integer; anything else is a 406 channel error.
    """
    if not expiration.isdigit():
        raise AmqpError(PRECONDITION_FAILED, f"invalid expiration '{expiration}'", 60, 40)
    # A TTL of 0 still lets a consumer with credit take the message at once (enqueue
    # dispatches synchronously); any later look finds it expired.
    return time.time() + int(expiration) / 1000


class PeerGone(Exception):
    """The socket closed, or the peer missed its heartbeats."""


class AmqpConnection:
    """One client connection."""

    def __init__(self, service: AmqpService, stream: trio.abc.Stream, peer: str = "?") -> None:
        cfg = service.app.config
        self.service = service
        self.broker = service.broker
        self.store = service.broker.store
        self.log: logging.Logger = service.app.log
        self.stream = stream
        self.peer = peer
        self.frame_max: int = cfg.amqp_frame_max
        self.channel_max: int = cfg.amqp_channel_max
        self.heartbeat: int = cfg.amqp_heartbeat
        #: Unacked deliveries per channel never exceed this, prefetch or not.
        self.unacked_limit: int = cfg.amqp_queue_limit
        self.user = ""
        self.client_properties: dict[str, Any] = {}
        self.cancel_notify = False
        self.channels: dict[int, Channel] = {}
        self.exclusive_queues: dict[str, Queue] = {}
        self.dirty = False  # durable deletes staged (acks); kick the committer
        # Acks staged but not awaited: made durable before the reply to the next synchronous
        # method, so "ack, then any round trip" means the ack survives a crash.
        self.unsynced = False
        self.stalled = False  # a queue skipped us because the send buffer was full
        self.publisher = False  # has published: throttled while a resource alarm is on
        self.blocked_notify = False  # client announced the connection.blocked capability
        self._unsubscribe_alarms: Any = None
        self.closed = False
        self._opened = False  # the handshake completed
        self._forced = False  # cancelled by the server's shutdown
        self._out: list[bytes] = []
        self._unsent = 0
        self._wake = trio.Event()
        self._drained = trio.Event()
        self._last_write = 0.0
        # publishing burst
        self._needs_commit = False
        self._confirms: list[tuple[Channel, int, bool]] = []  # (channel, seq, accepted)

    # -- output --------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return self._unsent < HIGH_WATER

    def send(self, data: bytes) -> None:
        """Queue bytes for the writer (never blocks)."""
        self._out.append(data)
        self._unsent += len(data)
        self._wake.set()

    async def _writer(self, scope: trio.CancelScope) -> None:
        try:
            await self._write_loop()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            scope.cancel()  # the peer is gone: stop the reader too

    async def _write_loop(self) -> None:
        stream = self.stream
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._out:
                data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
                self._out = []
                self._last_write = trio.current_time()
                await stream.send_all(data)
                self._unsent -= len(data)
            self._drained.set()
            self._drained = trio.Event()
            if self.stalled:
                self.stalled = False
                for ch in list(self.channels.values()):
                    for c in list(ch.consumers.values()):
                        c.queue.dispatch()

    async def _wait_drained(self, timeout: float | None = None) -> None:
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            while self._unsent:
                await self._drained.wait()

    async def _heartbeats(self) -> None:
        interval = self.heartbeat / 2
        while True:
            await trio.sleep(interval)
            if trio.current_time() - self._last_write >= interval:
                self.send(HEARTBEAT_FRAME)

    async def _receive(self) -> bytes:
        timeout = self.heartbeat * 2 if self.heartbeat else float("inf")
        with trio.move_on_after(timeout):
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise PeerGone("connection closed by peer")
            return bytes(data)
        self.log.info("AMQP %s: missed heartbeats from client, closing", self.peer)
        raise PeerGone("missed heartbeats")

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it closes; always releases its state."""
        self.service.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, nursery.cancel_scope)
                try:
                    await self._serve(nursery)
                    await self._wait_drained(CLOSE_TIMEOUT)
                except (PeerGone, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                except trio.Cancelled:
                    self._forced = True  # the server is shutting down
                    raise
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self.service.connections.discard(self)
            self._release()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                if self._forced and self._opened:
                    await self._say_shutdown()
                await self.stream.aclose()

    async def _say_shutdown(self) -> None:
        """Tell the client why the socket closes, as RabbitMQ does on shutdown (320)."""
        frame = encode_method(0, spec.ConnectionClose(
            CONNECTION_FORCED, "CONNECTION_FORCED - broker forced connection closure with "
            "reason 'shutdown'", 0, 0))
        try:
            with trio.move_on_after(0.5):
                await self.stream.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            pass

    def _release(self) -> None:
        """Channels die (unacked back to their queues), exclusive queues are deleted."""
        self.closed = True
        if self._unsubscribe_alarms is not None:
            self._unsubscribe_alarms()
            self._unsubscribe_alarms = None
        for ch in list(self.channels.values()):
            ch.release()
        self.channels.clear()
        for q in list(self.exclusive_queues.values()):
            self.broker.delete_queue(q, self.server_cancel)
        self.exclusive_queues.clear()
        self.store.kick()

    async def _serve(self, nursery: trio.Nursery) -> None:
        parser = FrameParser(self.frame_max, expect_header=True)
        try:
            try:
                with trio.fail_after(HANDSHAKE_TIMEOUT):
                    await self._handshake(parser)
            except trio.TooSlowError:
                self.log.info("AMQP %s: handshake timed out", self.peer)
                return
            if self.closed:
                return
            if self.heartbeat:
                nursery.start_soon(self._heartbeats)
            await self._loop(parser)
        except ProtocolHeaderMismatch:
            # Spec 4.2.2: answer a bad protocol header with ours, then close.
            self.send(PROTOCOL_HEADER)
        except AmqpError as exc:
            await self._close_with(exc, parser)

    async def _close_with(self, exc: AmqpError, parser: FrameParser) -> None:
        """Connection exception: send connection.close, wait briefly for close-ok."""
        self.service.counters["connection_errors"] += 1
        self.log.info("AMQP %s: closing connection: %s %s", self.peer, exc.code, exc.text)
        self.send(encode_method(0, spec.ConnectionClose(
            exc.code, exc.reply_text, exc.class_id, exc.method_id)))
        self._release()
        with trio.move_on_after(CLOSE_TIMEOUT):
            while True:
                try:
                    ev = parser.next_event()
                except AmqpError:
                    # The framing is lost: look for the close-ok frame's bytes instead, so
                    # the socket is not reset while the client's close-ok is in flight.
                    await self._await_close_ok_bytes(parser)
                    return
                if ev is None:
                    parser.feed(await self._receive())
                elif isinstance(ev, Command) and isinstance(
                        ev.method, (spec.ConnectionCloseOk, spec.ConnectionClose)):
                    if isinstance(ev.method, spec.ConnectionClose):
                        self.send(_CLOSE_OK_FRAME)
                    return

    async def _await_close_ok_bytes(self, parser: FrameParser) -> None:
        tail = parser.unconsumed()
        while _CLOSE_OK_FRAME not in tail:
            tail = tail[-len(_CLOSE_OK_FRAME):] + await self._receive()

    # -- handshake (spec 4.2.3 / connection class) ---------------------------------------

    async def _command(self, parser: FrameParser) -> Command:
        while True:
            ev = parser.next_event()
            if ev is None:
                parser.feed(await self._receive())
            elif ev is not HEARTBEAT:
                assert isinstance(ev, Command)
                return ev

    async def _expect(self, parser: FrameParser, cls: type[spec.Method]) -> Any:
        cmd = await self._command(parser)
        if cmd.channel != 0 or type(cmd.method) is not cls:
            if isinstance(cmd.method, spec.ConnectionClose):
                self.send(_CLOSE_OK_FRAME)
                self.closed = True
                return None
            raise AmqpError(COMMAND_INVALID, f"expected {cls.NAME}, got {cmd.method.NAME}",
                            cmd.method.CLASS_ID, cmd.method.METHOD_ID)
        return cmd.method

    async def _handshake(self, parser: FrameParser) -> None:
        while parser.awaiting_header:
            if parser.next_event() is None and parser.awaiting_header:
                parser.feed(await self._receive())
        self.send(encode_method(0, spec.ConnectionStart(
            0, 9, self.service.server_properties(), b"PLAIN AMQPLAIN", b"en_US")))
        start_ok = await self._expect(parser, spec.ConnectionStartOk)
        if start_ok is None:
            return
        self.client_properties = start_ok.client_properties
        caps = self.client_properties.get("capabilities")
        self.cancel_notify = isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
        self.blocked_notify = isinstance(caps, dict) and bool(caps.get("connection.blocked"))
        if not self._authenticate(start_ok.mechanism, start_ok.response):
            self.service.counters["auth_failures"] += 1
            raise AmqpError(ACCESS_REFUSED,
                            f"Login was refused using authentication mechanism "
                            f"{start_ok.mechanism}", 10, 11)
        self.send(encode_method(0, spec.ConnectionTune(
            self.channel_max, self.frame_max, self.heartbeat)))
        tune_ok = await self._expect(parser, spec.ConnectionTuneOk)
        if tune_ok is None:
            return
        if tune_ok.frame_max:
            if tune_ok.frame_max < spec.FRAME_MIN_SIZE:
                raise AmqpError(NOT_ALLOWED, f"frame_max {tune_ok.frame_max} below 4096", 10, 31)
            self.frame_max = min(self.frame_max, tune_ok.frame_max)
        if tune_ok.channel_max:
            self.channel_max = min(self.channel_max, tune_ok.channel_max)
        self.heartbeat = tune_ok.heartbeat  # the client's choice wins (spec connection.tune-ok)
        parser.frame_max = self.frame_max
        open_ = await self._expect(parser, spec.ConnectionOpen)
        if open_ is None:
            return
        if open_.virtual_host != "/":
            raise AmqpError(NOT_ALLOWED, f"vhost '{open_.virtual_host}' not found", 10, 40)
        self.send(encode_method(0, spec.ConnectionOpenOk()))
        self._opened = True
        alarms = getattr(self.service.app, "alarms", None)
        if alarms is not None:
            self._unsubscribe_alarms = alarms.subscribe(self._on_alarm)
            if alarms.blocked:
                self._on_alarm(True, alarms.reason)

    def _on_alarm(self, blocked: bool, reason: str) -> None:
        """Resource alarm changed: tell clients that asked (RabbitMQ's connection.blocked)."""
        if not self.blocked_notify or self.closed:
            return
        if blocked:
            self.send(encode_method(0, spec.ConnectionBlocked(reason[:255])))
        else:
            self.send(encode_method(0, spec.ConnectionUnblocked()))

    def _authenticate(self, mechanism: str, response: bytes) -> bool:
        users = self.service.app.users
        password: bytes | None
        if mechanism == "PLAIN":
            # RFC 4616: [authzid] NUL authcid NUL passwd
            parts = response.split(b"\x00")
            if len(parts) != 3:
                return False
            username, password = parts[1].decode("utf-8", "replace"), parts[2]
        elif mechanism == "AMQPLAIN":
            # A field table without its length prefix: LOGIN and PASSWORD.
            try:
                table, _ = decode_table(encode_longstr(response))
            except AmqpError:
                return False
            login, pw = table.get("LOGIN"), table.get("PASSWORD")
            if isinstance(login, bytes):
                login = login.decode("utf-8", "replace")
            if isinstance(pw, str):
                pw = pw.encode()
            if not isinstance(login, str) or not isinstance(pw, (bytes, type(None))):
                return False
            username, password = login, pw
        else:
            return False
        self.user = username
        return bool(users.authenticate(username or None, password or None))

    # -- main loop -----------------------------------------------------------------------

    async def _loop(self, parser: FrameParser) -> None:
        channels = self.channels
        alarms = getattr(self.service.app, "alarms", None)
        while not self.closed:
            parser.feed(await self._receive())
            while (ev := parser.next_event()) is not None:
                if ev is HEARTBEAT:
                    continue
                assert isinstance(ev, Command)
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
                            self._publish(ch, ev)
                        else:
                            ch.ack(ev.method.delivery_tag, ev.method.multiple)  # type: ignore[attr-defined]
                    except AmqpError as exc:
                        await self._channel_error(ch, exc, ev.method, parser)
                    continue
                await self._flush()
                await self._method(ev, parser)
                if self.closed:
                    return
            await self._flush()
            if not self.writable:
                await self._wait_drained()
            if self.publisher and alarms is not None and alarms.blocked:
                # Like RabbitMQ: a publishing connection is not read while a memory or disk
                # alarm is on, so TCP back-pressure throttles the publisher.
                await alarms.wait_unblocked()

    async def _method(self, cmd: Command, parser: FrameParser) -> None:
        m = cmd.method
        number = cmd.channel
        if number == 0:
            if isinstance(m, spec.ConnectionClose):
                # Channels and exclusive queues go BEFORE close-ok: a client that saw
                # close-ok and reconnects never finds its old exclusive queue still there.
                self._release()
                self.send(_CLOSE_OK_FRAME)
                return
            if isinstance(m, spec.ConnectionUpdateSecret):
                # The new secret must authenticate the connection's user again (for PLAIN
                # and AMQPLAIN it is the password); otherwise the connection is refused.
                if not self.service.app.users.authenticate(self.user or None,
                                                           m.new_secret or None):
                    raise AmqpError(ACCESS_REFUSED, "update-secret: new secret refused",
                                    m.CLASS_ID, m.METHOD_ID)
                self.send(encode_method(0, spec.ConnectionUpdateSecretOk()))
                return
            raise AmqpError(COMMAND_INVALID, f"{m.NAME} is not allowed on channel 0",
                            m.CLASS_ID, m.METHOD_ID)
        if m.CLASS_ID == 10:
            raise AmqpError(COMMAND_INVALID, f"{m.NAME} on channel {number}",
                            m.CLASS_ID, m.METHOD_ID)
        ch = self.channels.get(number)
        if isinstance(m, spec.ChannelOpen):
            if ch is not None:
                raise AmqpError(CHANNEL_ERROR, f"second 'channel.open' seen on {number}", 20, 10)
            # RabbitMQ's reading of channel_max, which clients rely on: it bounds the number
            # of open channels (any channel number 1-65535 may be used).
            if len(self.channels) >= self.channel_max:
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
            elif isinstance(m, spec.ChannelClose):
                self.send(encode_method(number, spec.ChannelCloseOk()))
            return
        if isinstance(m, spec.ChannelClose):
            ch.release()
            del self.channels[number]
            parser.drop_channel(number)
            self.send(encode_method(number, spec.ChannelCloseOk()))
            return
        if isinstance(m, spec.ChannelCloseOk):
            return
        try:
            if self.unsynced and m.SYNCHRONOUS and type(m) is not spec.BasicGet:
                # (Not for basic.get: a get/ack worker loop must not pay a sync per message.)
                await self.commit()
            await ch.handle(m)
        except AmqpError as exc:
            await self._channel_error(ch, exc, m, parser)
        if self.dirty:
            self.dirty = False
            self.store.kick()

    async def _channel_error(self, ch: Channel, exc: AmqpError, m: spec.Method,
                             parser: FrameParser) -> None:
        if not exc.class_id:
            exc.class_id, exc.method_id = m.CLASS_ID, m.METHOD_ID
        if exc.hard:
            raise exc
        self.service.counters["channel_errors"] += 1
        self.send(encode_method(ch.number, spec.ChannelClose(
            exc.code, exc.reply_text, exc.class_id, exc.method_id)))
        parser.drop_channel(ch.number)
        ch.release()

    # -- publishing ----------------------------------------------------------------------

    def _publish(self, ch: Channel, cmd: Command) -> None:
        m: spec.BasicPublish = cmd.method  # type: ignore[assignment]
        broker = self.broker
        self.publisher = True
        x = broker.exchanges.get(m.exchange)
        if x is None:
            raise AmqpError(NOT_FOUND, f"no exchange '{m.exchange}' in vhost '/'", 60, 40)
        if m.immediate:
            # RabbitMQ's exact words, which client test suites compare.
            raise AmqpError(NOT_IMPLEMENTED, "immediate=true", 60, 40, hard=True)
        if x.internal:
            raise AmqpError(ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}'",
                            60, 40)
        rk = m.routing_key
        props = cmd.properties or b"\x00\x00"
        body = cmd.body or b""
        if m.exchange:
            if not x.xbindings and x.type != "headers":
                queues = x.route(rk)  # the common case, inlined
                if not queues and x.alternate is not None:
                    queues = broker.route_alternate(x, rk, props)
            else:  # Broker.route already falls back to the alternate exchange
                queues = broker.route(x, rk, props)
        else:  # the default exchange (Broker.route, inlined)
            q = broker.queues.get(rk)
            queues = [q] if q is not None else []
        x.published += 1
        counters = broker.counters
        counters["published"] += 1
        confirm = ch.confirm
        if confirm:
            ch.publish_seq += 1
            self._confirms.append((ch, ch.publish_seq, True))
        bridged = False
        if broker.topic_hooks and m.exchange == "amq.topic":
            for hook in broker.topic_hooks:
                # True: the bridge staged durable copies (e.g. MQTT persistent sessions):
                # commit before the confirm, and the message was routed (mandatory).
                if hook(rk, props, body, cmd.delivery_mode == 2):
                    bridged = self._needs_commit = True
        if not queues:
            if bridged:
                return
            x.unroutable += 1
            counters["unroutable"] += 1
            if m.mandatory:
                # Sent now, so it always precedes the confirm (sent at the flush).
                counters["returned"] += 1
                self.send(encode_content(ch.number, spec.BasicReturn(
                    NO_ROUTE, "NO_ROUTE", m.exchange, rk), props, body, self.frame_max))
            return
        persistent = cmd.delivery_mode == 2
        expires = 0.0 if cmd.expiration is None else _deadline(cmd.expiration)
        record = None
        for q in queues:
            if q.plain:
                msg = QueuedMessage(q.take_seq(), m.exchange, rk, props, body, expires=expires)
                if persistent and q.doc_id is not None:
                    if record is None:
                        record = persist.encode_record(m.exchange, rk, props, body, expires)
                    # Staged BEFORE the message becomes deliverable: an ack's delete is
                    # always staged after this put, so it can never race ahead of the insert.
                    broker.store_message(q, msg, record)
                    self._needs_commit = True
                q.enqueue(msg)
                if expires:
                    q.saw_deadline()  # the head may need a timer
                continue
            # x-message-ttl, x-max-length-bytes, x-overflow reject-publish(-dlx)
            staged = broker.enqueue_message(q, m.exchange, rk, props, body, persistent, expires)
            if staged < 0:
                # Refused by x-overflow=reject-publish: a confirming publisher gets
                # basic.nack for it (RabbitMQ).
                if confirm:
                    self._confirms[-1] = (ch, ch.publish_seq, False)
            elif staged:
                self._needs_commit = True

    async def _flush(self) -> None:
        """End of a burst: one commit for all its durable records, then the confirms in
        publish order (coalesced per channel)."""
        ok = True
        if self._needs_commit and not self._confirms:
            # Nobody waits for a confirm: get the records written soon, but do not hold
            # this connection's reader for the sync.
            self._needs_commit = False
            self.store.kick()
        elif self._needs_commit:
            self._needs_commit = False
            try:
                await self.store.commit()
            except Exception as exc:  # CommitError: nothing of the round may be confirmed
                ok = False
                self.log.error("AMQP %s: commit failed, publishes nacked: %s", self.peer, exc)
        if self._confirms:
            confirms, self._confirms = self._confirms, []
            self._send_confirms(confirms, ok)
        if self.dirty:
            self.dirty = False
            self.store.kick()

    def _send_confirms(self, confirms: list[tuple[Channel, int, bool]], ok: bool) -> None:
        """Confirms in publish order, per channel: runs of acks coalesced into one
        ``basic.ack multiple=true``; a rejected publish (or a failed commit) is nacked."""
        runs: dict[Channel, list[tuple[int, bool]]] = {}
        for ch, seq, accepted in confirms:
            runs.setdefault(ch, []).append((seq, accepted and ok))
        counters = self.broker.counters
        for ch, items in runs.items():
            if ch.closing:
                continue
            first = last = 0
            for seq, accepted in items:
                if accepted:
                    first = first or seq
                    last = seq
                    continue
                if last:
                    ch.reply(spec.BasicAck(last, last != first))
                    first = last = 0
                ch.reply(spec.BasicNack(seq, False, False))
                counters["nacked_confirms"] += 1
            if last:
                ch.reply(spec.BasicAck(last, last != first))
            counters["confirmed"] += sum(1 for _s, accepted in items if accepted)

    async def commit(self) -> None:
        """Wait for the durable writes staged so far (declares, deletes, purges)."""
        self.dirty = self.unsynced = False
        try:
            await self.store.commit()
        except Exception as exc:
            raise AmqpError(INTERNAL_ERROR, f"durable write failed: {exc}", hard=True) from exc

    # -- consumers cancelled by the server -----------------------------------------------

    @staticmethod
    def server_cancel(consumer: Consumer) -> None:
        """The consumer's queue was deleted: notify its client (consumer_cancel_notify)."""
        ch = consumer.channel
        ch.consumers.pop(consumer.tag, None)
        if ch.conn.cancel_notify and not ch.closing and not ch.conn.closed:
            ch.reply(spec.BasicCancel(consumer.tag, True))


