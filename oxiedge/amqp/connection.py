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

Closing, as RabbitMQ does it (spec 1.4.2.8 / 1.5.2.5): frames that arrived before a client's
``connection.close`` are fully processed first (routed, made durable, confirmed), then
close-ok is sent and the socket is kept open, reading and discarding, until the client
closes its side or :data:`CLOSE_LINGER` passes.  Closing at once would make the kernel
answer the client's still-arriving frames with a reset, which destroys the close-ok before
the client reads it (amqplib queues its publishes and may write the close frame first).
A channel the server closes has its frames discarded until its close-ok (codec
``drop_channel``).  Every connection that ends without a clean handshake logs one line
(peer, user, reason, counts) and counts in ``connection_errors`` (the server closed it
with a connection exception) or ``connections_dropped`` (the peer vanished, timed out or
broke the framing badly enough that no close could be sent).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from oxiedge.access.grants import Grants
from oxiedge.amqp import authz, spec
from oxiedge.amqp.channel import Channel
from oxiedge.amqp.codec import (
    HEARTBEAT,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    Command,
    ContentTooLarge,
    FrameParser,
    ProtocolHeaderMismatch,
    encode_content,
    encode_method,
)
from oxiedge.amqp.constants import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    FRAME_ERROR,
    INTERNAL_ERROR,
    NO_ROUTE,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
)
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import decode_table, encode_longstr
from oxiedge.amqp.publish import REFUSED, RETURNED, STAGED
from oxiedge.amqp.queues import Consumer, Queue

if TYPE_CHECKING:
    from oxiedge.amqp.service import AmqpService

HIGH_WATER = 1 << 20  # unsent bytes per connection before consumers are skipped
CLOSE_TIMEOUT = 2.0
#: After close-ok, how long to keep reading (and discarding) until the client closes.
CLOSE_LINGER = 3.0
RECEIVE_SIZE = 1 << 16

_CLOSE_OK_FRAME = encode_method(0, spec.ConnectionCloseOk())
_PUBLISH = spec.BasicPublish
_ACK = spec.BasicAck


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
        # A verified client certificate's name (--tls-identity-as-username): offers EXTERNAL.
        self.tls_identity: str | None = None
        self.frame_max: int = cfg.amqp_frame_max
        self.channel_max: int = cfg.amqp_channel_max
        self.handshake_timeout: float = cfg.amqp_handshake_timeout
        self.preauth_max_size: int = cfg.amqp_preauth_max_size
        self.max_message_size: int = cfg.amqp_max_message_size
        self.max_consumers: int = cfg.amqp_max_consumers_per_connection
        self.max_queues: int = cfg.amqp_max_queues_per_connection
        #: Queues this connection created (live ones count toward ``max_queues``).
        self.created_queues: set[Queue] = set()
        self.heartbeat: int = cfg.amqp_heartbeat
        #: Unacked deliveries per channel never exceed this, prefetch or not.
        self.unacked_limit: int = cfg.amqp_queue_limit
        self.user = ""
        self.client_properties: dict[str, Any] = {}
        # Permissions (docs/permissions.md, ``authz.py``): checked only while rules exist.
        self.perms = service.app.permissions
        self.grants: Grants | None = None
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
        # Publishes staged but not awaited (no confirms): synced before any close-ok.
        self._publishes_unsynced = False
        self.parser: FrameParser | None = None
        # -- how it ended (one log line, one counter; see the module docstring) ----------
        self.published = 0
        self.delivered = 0
        self._end_reason = ""
        self._clean = False  # the close handshake completed
        self._server_error = False  # we closed it with a connection exception
        self._linger = False  # the client closed: read until it closes its side
        self._discarded_bytes = 0  # read and dropped after close-ok
        self._write_error = ""

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
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._write_error = f"write failed ({exc.__cause__ or exc or 'closed'})"
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
        while not self.closed:  # none after close-ok, while the socket lingers
            await trio.sleep(interval)
            if trio.current_time() - self._last_write >= interval and not self.closed:
                self.send(HEARTBEAT_FRAME)

    async def _receive(self) -> bytes:
        timeout = self.heartbeat * 2 if self.heartbeat else float("inf")
        with trio.move_on_after(timeout):
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise PeerGone("client closed the socket without connection.close")
            return bytes(data)
        raise PeerGone(f"missed heartbeats: nothing from the client for {timeout:g} s")

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
                    if self._linger:
                        await self._discard_until_peer_closes()
                except PeerGone as exc:
                    self._end_reason = self._end_reason or str(exc)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self._end_reason = self._end_reason or \
                        f"connection reset ({exc.__cause__ or exc or 'closed'})"
                except trio.Cancelled:
                    if not self._write_error:
                        self._forced = True  # the server is shutting down
                    raise
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self.service.connections.discard(self)
            self._release()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                if self._forced and self._opened and not self._clean:
                    await self._say_shutdown()
                await self.stream.aclose()
            self._report()

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
        counters = self.service.counters
        if self._clean:
            counters["connections_closed"] += 1
            if self._discarded_bytes:
                self.log.debug("AMQP %s: discarded %d bytes after close-ok", self.peer,
                               self._discarded_bytes)
            return
        if self._forced:
            reason = "broker shutdown"
        else:
            reason = self._end_reason or self._write_error or "closed"
            counters["connection_errors" if self._server_error else "connections_dropped"] += 1
        self.log.info("AMQP %s (user %r): connection %s: %s - %d published, %d delivered, "
                      "%d frames discarded", self.peer, self.user,
                      "closed" if self._server_error else "dropped", reason, self.published,
                      self.delivered, self.parser.discarded if self.parser else 0)
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
                while _CLOSE_OK_FRAME not in tail:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        break
                    tail = tail[-len(_CLOSE_OK_FRAME):] + data
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
        # Before the login only a small frame is accepted (the start-ok with its client
        # properties): 500 unauthenticated sockets cannot make the broker buffer much.
        parser = FrameParser(self.preauth_max_size, expect_header=True,
                             max_body=self.max_message_size)
        self.parser = parser
        try:
            try:
                with trio.fail_after(self.handshake_timeout):
                    await self._handshake(parser)
            except trio.TooSlowError:
                self.service.counters["handshake_timeouts"] += 1
                self._end_reason = f"handshake not completed within {self.handshake_timeout:g} s"
                return
            if self.closed:
                return
            if self.heartbeat:
                nursery.start_soon(self._heartbeats)
            await self._loop(parser)
        except ProtocolHeaderMismatch as exc:
            # Spec 4.2.2: answer a bad protocol header with ours, then close.
            self._end_reason = f"bad protocol header {exc.received!r}"
            self.send(PROTOCOL_HEADER)
        except AmqpError as exc:
            if not self._opened and exc.code == FRAME_ERROR and "frame_max" in exc.text:
                self.service.counters["preauth_too_large"] += 1
                exc.text += " (before login)"
            await self._close_with(exc, parser)

    async def _close_with(self, exc: AmqpError, parser: FrameParser) -> None:
        """Connection exception: send connection.close, wait briefly for close-ok."""
        self._server_error = True
        self._end_reason = f"{exc.code} {exc.text}"
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
                self._clean = self._linger = True
                return None
            raise AmqpError(COMMAND_INVALID, f"expected {cls.NAME}, got {cmd.method.NAME}",
                            cmd.method.CLASS_ID, cmd.method.METHOD_ID)
        return cmd.method

    async def _handshake(self, parser: FrameParser) -> None:
        while parser.awaiting_header:
            if parser.next_event() is None and parser.awaiting_header:
                parser.feed(await self._receive())
        self.send(encode_method(0, spec.ConnectionStart(
            0, 9, self.service.server_properties(), self._mechanisms(), b"en_US")))
        start_ok = await self._expect(parser, spec.ConnectionStartOk)
        if start_ok is None:
            return
        self.client_properties = start_ok.client_properties
        caps = self.client_properties.get("capabilities")
        self.cancel_notify = isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
        self.blocked_notify = isinstance(caps, dict) and bool(caps.get("connection.blocked"))
        if not await self._authenticate(start_ok.mechanism, start_ok.response):
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
        # (parser.frame_max was the pre-login bound until here)
        self.heartbeat = tune_ok.heartbeat  # the client's choice wins (spec connection.tune-ok)
        parser.frame_max = self.frame_max
        open_ = await self._expect(parser, spec.ConnectionOpen)
        if open_ is None:
            return
        if open_.virtual_host != "/":
            raise AmqpError(NOT_ALLOWED, f"vhost '{open_.virtual_host}' not found", 10, 40)
        client_id = self.client_properties.get("client_id", "")
        self.grants = Grants(self.perms, self.user or None,
                             client_id if isinstance(client_id, str) else "", "/")
        if self.perms.active and not self.grants.vhost_allowed():
            self.perms.counters["amqp_access_refused"] += 1
            raise AmqpError(NOT_ALLOWED, f"access to vhost '/' refused for user '{self.user}'",
                            10, 40)
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

    def _mechanisms(self) -> bytes:
        # EXTERNAL (RabbitMQ's rabbitmq_auth_mechanism_ssl): only on a TLS listener with a
        # verified client certificate and --tls-identity-as-username.
        return b"PLAIN AMQPLAIN EXTERNAL" if self.tls_identity else b"PLAIN AMQPLAIN"

    async def _authenticate(self, mechanism: str, response: bytes) -> bool:
        password: bytes | None
        if mechanism == "EXTERNAL":
            # The certificate is the credential; the response (an authzid) is not used.
            if not self.tls_identity:
                return False
            self.user = self.tls_identity
            return True
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
        # Hashing off the event loop, throttled after failures (oxiedge.login).
        return await self.service.app.logins.check(username or None, password or None)

    # -- main loop -----------------------------------------------------------------------

    async def _loop(self, parser: FrameParser) -> None:
        channels = self.channels
        alarms = getattr(self.service.app, "alarms", None)
        while not self.closed:
            data = await self._receive()
            parser.feed(data)
            while True:
                try:
                    ev = parser.next_event()
                except ContentTooLarge as exc:
                    await self._content_too_large(exc, parser)
                    continue
                if ev is None:
                    break
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
            if alarms is not None and (self.publisher or parser.receiving):
                # Publisher input (bodies being received included) counts toward the
                # memory alarm as it arrives: sampled every few MiB, not only once a second.
                self.service.note_publisher_input(len(data), alarms)
            if alarms is not None and alarms.blocked and (self.publisher or parser.receiving):
                # Like RabbitMQ: a publishing connection is not read while a memory or disk
                # alarm is on, so TCP back-pressure throttles the publisher.  One still
                # receiving its first body counts too: the body is memory already.
                await alarms.wait_unblocked()

    async def _content_too_large(self, exc: ContentTooLarge, parser: FrameParser) -> None:
        """A content header announced more than --amqp-max-message-size: 406 on its
        channel at once (RabbitMQ); the parser already skips the body frames."""
        self.service.counters["messages_too_large"] += 1
        await self._flush()  # earlier publishes of the burst are confirmed first
        ch = self.channels.get(exc.channel)
        if ch is None:
            parser.resume_channel(exc.channel)
            raise AmqpError(CHANNEL_ERROR, f"basic.publish on channel {exc.channel}, which "
                            "is not open", 60, 40)
        await self._channel_error(ch, exc, spec.BasicPublish(), parser)

    async def _method(self, cmd: Command, parser: FrameParser) -> None:
        m = cmd.method
        number = cmd.channel
        if number == 0:
            if isinstance(m, spec.ConnectionClose):
                # What arrived before the close is durable before close-ok (spec 1.4.2.8:
                # the close-ok means the peer may discard the connection's state).
                await self._sync_before_close()
                # Channels and exclusive queues go BEFORE close-ok: a client that saw
                # close-ok and reconnects never finds its old exclusive queue still there.
                self._release()
                self.send(_CLOSE_OK_FRAME)
                # Keep reading until the client closes: frames it queued before its close
                # must not reach a closed socket (a reset would destroy our close-ok).
                self._clean = self._linger = True
                return
            if isinstance(m, spec.ConnectionUpdateSecret):
                # The new secret must authenticate the connection's user again (for PLAIN
                # and AMQPLAIN it is the password); otherwise the connection is refused.
                if not await self.service.app.logins.check(self.user or None,
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
        if ch is None and isinstance(m, spec.ChannelCloseOk):
            return  # a late close-ok after crossing closes: nothing left to do
        if isinstance(m, spec.ChannelOpen):
            if ch is not None:
                raise AmqpError(CHANNEL_ERROR, f"second 'channel.open' seen on {number}", 20, 10)
            # RabbitMQ's reading of channel_max, which clients rely on: it bounds the number
            # of open channels (any channel number 1-65535 may be used).
            if len(self.channels) >= self.channel_max:
                self.service.counters["channel_limit_refused"] += 1
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
                parser.resume_channel(number)
            elif isinstance(m, spec.ChannelClose):
                # Crossing closes: answer, and still wait for the close-ok (as RabbitMQ).
                self.send(encode_method(number, spec.ChannelCloseOk()))
            return
        if isinstance(m, spec.ChannelClose):
            await self._sync_before_close()  # its publishes are durable before close-ok
            ch.release()
            del self.channels[number]
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

    async def _sync_before_close(self) -> None:
        """Make what this connection staged (publishes without confirms, acks) durable."""
        if self._publishes_unsynced or self.unsynced or self.dirty:
            self._publishes_unsynced = False
            await self.commit()

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

    # -- per-connection bounds (issue 14: one client cannot exhaust the broker) ----------

    def check_queue_limit(self, name: str) -> None:
        """Before a declare that creates a queue: 406 past the per-connection or the
        broker-wide queue count (RabbitMQ's words for its vhost queue limit)."""
        live = {q for q in self.created_queues if not q.deleted}
        self.created_queues = live
        total = self.service.app.config.amqp_max_queues
        if len(live) >= self.max_queues:
            limit = f"limit of {self.max_queues} queues per connection"
        elif len(self.broker.queues) >= total:
            limit = f"queue limit of {total} in vhost '/'"
        else:
            return
        self.service.counters["queue_limit_refused"] += 1
        raise AmqpError(PRECONDITION_FAILED,
                        f"cannot declare queue '{name}': {limit} is reached", 50, 10)

    def check_consumer_limit(self) -> None:
        """Before basic.consume: 406 past the per-connection consumer count."""
        count = sum(len(ch.consumers) for ch in self.channels.values())
        if count >= self.max_consumers:
            self.service.counters["consumer_limit_refused"] += 1
            raise AmqpError(PRECONDITION_FAILED,
                            f"limit of {self.max_consumers} consumers per connection is "
                            "reached", 60, 20)

    # -- publishing ----------------------------------------------------------------------

    def _publish(self, ch: Channel, cmd: Command) -> None:
        m: spec.BasicPublish = cmd.method  # type: ignore[assignment]
        self.publisher = True
        x = self.broker.exchanges.get(m.exchange)
        if x is None:
            raise AmqpError(NOT_FOUND, f"no exchange '{m.exchange}' in vhost '/'", 60, 40)
        if m.immediate:
            # RabbitMQ's exact words, which client test suites compare.
            raise AmqpError(NOT_IMPLEMENTED, "immediate=true", 60, 40, hard=True)
        if x.internal:
            raise AmqpError(ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}'",
                            60, 40)
        if self.perms.active:
            authz.check_publish(self, x, m.routing_key)
        self.published += 1
        confirm = ch.confirm
        if confirm:
            ch.publish_seq += 1
            self._confirms.append((ch, ch.publish_seq, True))
        props = cmd.properties or b"\x00\x00"
        body = cmd.body or b""
        flags, _routed = self.broker.publish(x, m.routing_key, props, body,
                                             cmd.delivery_mode == 2, cmd.expiration,
                                             m.mandatory)
        if flags & STAGED:
            self._needs_commit = True
        if flags & REFUSED and confirm:
            # Refused by x-overflow=reject-publish: a confirming publisher gets basic.nack
            # for it (RabbitMQ).
            self._confirms[-1] = (ch, ch.publish_seq, False)
        if flags & RETURNED:
            # Sent now, so it always precedes the confirm (sent at the flush).
            self.send(encode_content(ch.number, spec.BasicReturn(
                NO_ROUTE, "NO_ROUTE", m.exchange, m.routing_key), props, body,
                self.frame_max))

    async def _flush(self) -> None:
        """End of a burst: one commit for all its durable records, then the confirms in
        publish order (coalesced per channel)."""
        ok = True
        if self._needs_commit and not self._confirms:
            # Nobody waits for a confirm: get the records written soon, but do not hold
            # this connection's reader for the sync (a close waits for it, though).
            self._needs_commit = False
            self._publishes_unsynced = True
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


