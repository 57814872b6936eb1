"""The trio transport loop: one stream, one sans-IO protocol object.

Theory of operation
-------------------
Two tasks per connection. The *reader* (``Transport.run``'s own task) receives bytes,
hands them to the protocol object and performs what ``next_action()`` asks for until the
protocol needs more data (``oxiedge.net.actions``). Everything received in one read is
one **burst**: the protocol stages durable records for all of it and asks for ONE commit
at its end (``COMMIT``), and only then releases the replies that waited for it. A reply
that waits for nothing goes out from the reader itself, in the same wake-up, with one
write for the whole burst (``send_now``: a direct non-blocking ``os.write`` when nothing
is buffered or in transit, so nothing can be overtaken; the rest goes to the writer).

The output side is its own object (``net.output.Output``, the protocol's ``Outlet``):
the buffer and the *writer* task that sends everything that is not a burst reply
(deliveries, re-sends, heartbeats), the direct sends, and ``out_bytes`` (buffered + in
transit), the back-pressure signal: the reader stops reading while it is over ``pause_at``
(a peer that sends but never reads cannot make us buffer its replies without limit).
Deliveries that a reader's burst wrote to *other* connections go out from that reader
too, at the end of its burst and before its own replies (``flush_written``: one direct
write per connection touched), so a delivery waits neither for the subscriber's writer
task nor for the publisher's PUBACK.

Reading: a plain socket is read with ``os.read`` on its (non-blocking) descriptor and
``wait_readable`` only when nothing is there; trio's socket wrappers (error translation,
two context managers, the failed first ``recv``) cost more than the rest of a small burst.
Input taken at once still passes one scheduling point, as trio's own ``recv`` does. When
nothing is there, the reader parks its descriptor in the hot loop (``net.hot``) instead of
waiting in trio: bursts that need no await are then served inline, in the event loop's
own wait, and the reader task wakes only for what needs it (``Seat.pending``).

Deadlines are the protocol's (``deadline``, in ``trio.current_time()``): the CONNECT or
handshake deadline, the keep-alive or heartbeat window. The loop applies it to the wait
for input (and for the output to drain) and tells the protocol ``timed_out()``. One cancel
scope serves many reads and its deadline is set lazily, only when the protocol's moves
earlier (a keep-alive window moves later with every packet: setting it per read cost two
deadline updates per packet). A stale deadline that passes while the reader waits only
restarts the wait in a fresh scope; any other await (a commit, a held publisher, a login)
runs with no deadline.

Blocked (``BLOCKED``: a resource alarm holds a publisher): the reader stops reading and
awaits the alarm's end, watching the socket meanwhile for the peer hanging up without
reading it (``net.blocked``): a hang-up ends the wait early - the peer's last input is
read and handled, or discarded if over a bound - so a gone client does not hold its
connection, session and slot for the whole alarm.

Closing: on ``Close`` (or the peer gone, or ``abort``) the reader stops, the writer gets
``CLOSE_FLUSH_TIMEOUT`` to send what is buffered, the protocol hears
``connection_closed()`` and the stream is closed forcefully in a shielded scope.

Which stream: anything ``trio.abc.Stream`` — a ``trio.SocketStream`` (plain TCP, the
only one with the direct read and write shortcuts), a ``trio.SSLStream`` (TLS, see
``tls.py``), a WebSocket stream (``oxiedge.ws.stream``: it de-frames the input; the output
is framed by ``Output``'s ``frame`` hook).
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio
from trio.lowlevel import cancel_shielded_checkpoint, wait_readable

from oxiedge.net.actions import (
    BLOCKED,
    CHECKPOINT,
    COMMIT,
    NEED_DATA,
    Authenticate,
    Close,
    StreamProtocol,
    run_until_await,
)
from oxiedge.net.blocked import BlockedWatch
from oxiedge.net.hot import RECV_SIZE, Raise, Seat, hot_loop
from oxiedge.net.output import LOST, Output, Traffic
from oxiedge.net.written import Written, flush_written

CLOSE_FLUSH_TIMEOUT = 5.0  # seconds to flush final replies on a close
#: Streams without a file descriptor (TLS): the reader sends a burst's replies itself
#: only after a read smaller than this - a request waiting for its answer. After a big
#: read more is coming, and the writer coalesces the replies of several bursts into one
#: send (one TLS record instead of several: sending after every read cost ~15 % more
#: broker CPU per PUBACK in the pipelined QoS 1 scenario over TLS).
DIRECT_READ_MAX = 4096

#: ``_perform``'s answer when the reader must re-enter in a fresh cancel scope with no
#: input to hand over (the hot loop already gave it to the protocol).
_NO_INPUT = bytearray()


class Committer(Protocol):
    """The store as the loop sees it: the group commit."""

    async def commit(self) -> Any: ...

    def kick(self) -> None: ...


class Transport:
    """One connection: its stream, the reader, the end-of-burst commit, deadlines and the
    close; its output side is ``output`` (``net.output.Output``: the protocol's ``Outlet``),
    its place in the hot loop ``net.hot.Seat``."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        store: Committer,
        *,
        pause_at: int,
        authenticate: Callable[[str | None, bytes | None], Awaitable[bool]] | None = None,
        blocked: BlockedWatch | None = None,
        frame: Callable[[bytes], bytes] | None = None,
        traffic: Traffic | None = None,
    ) -> None:
        self.stream = stream
        self.store = store
        sock = getattr(stream, "socket", None)
        self._fd = sock.fileno() if sock is not None else -1  # -1: read with receive_some
        # ``frame``: the output's framing hook (WebSocket: ``oxiedge.ws.stream``)
        self.output = Output(stream, self._fd, pause_at=pause_at, kick=store.kick,
                             end=self._end, frame=frame, traffic=traffic)
        self._seat = Seat(self.output)
        self._authenticate = authenticate
        self._blocked = blocked
        self._scope = trio.CancelScope()  # (no deadline: cancelled only by ``_end``)
        self._hung_up = False  # the peer hung up while blocked: no alarm holds it again

    def abort(self) -> None:
        """End the connection now (e.g. a session take-over): unsent bytes are dropped."""
        self.output.abort()

    def _end(self) -> None:
        """Stop the reader (``Output.abort``, or the writer found the peer gone)."""
        self._seat.leave()
        self._scope.cancel()

    @property
    def parked(self) -> bool:
        """The reader waits in the hot loop (``net.hot``)."""
        return self._seat.fd >= 0

    # ---------------------------------------------------------------------- life
    async def run(self, proto: StreamProtocol) -> None:
        """Serve ``proto`` over the stream until the connection ends; never raises for
        network errors (the protocol hears about them)."""
        output = self.output
        output.protocol = self._seat.protocol = proto
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    writer_done = trio.Event()

                    async def writer() -> None:
                        try:
                            await output.run_writer()
                        finally:
                            writer_done.set()

                    nursery.start_soon(writer)
                    try:
                        await self._reader(proto)
                    except LOST as exc:
                        proto.connection_lost(f"connection lost: {exc}")
                    # Flush what is written (final acks, a refusing CONNACK), bounded.
                    output.finish()
                    with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                        await writer_done.wait()
                    nursery.cancel_scope.cancel()
        finally:
            try:
                if proto.connection_closed():
                    self.store.kick()
            finally:
                # No direct write after this: the closed fd's number may be reused at once.
                self._fd = -1
                output.detach()
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(self.stream)

    async def _reader(self, proto: StreamProtocol) -> None:
        # One cancel scope for many reads (entering one per read costs more than the rest
        # of a small burst), and its deadline is set lazily: only when the protocol's
        # deadline moves EARLIER than the scope's (``_perform``), never per packet. So a
        # scope's deadline may be stale (the protocol's moved on since): when it passes
        # while the reader waits for input, the wait starts again in a fresh scope with
        # the protocol's deadline; only a deadline that really passed is ``timed_out()``.
        resume = False  # re-enter at the read (a stale deadline passed while waiting)
        carry: bytes | bytearray | None = None  # input that arrived as the deadline passed
        while True:
            with trio.CancelScope(deadline=proto.deadline if resume else math.inf) as scope:
                # (taken before the await: if this scope's deadline cancels it later, the
                # input it carried in is not handed to the protocol a second time)
                given, carry = carry, None
                carry = await self._actions(proto, scope, resume, given)
                if carry is None:
                    return
                resume = False
                continue  # (a fresh scope, then the input is handled)
            # The scope's deadline passed during the read wait (the only await it covers).
            resume = trio.current_time() < proto.deadline
            if not resume:
                proto.timed_out()

    async def _actions(self, proto: StreamProtocol, scope: trio.CancelScope,
                       resume: bool, carry: bytes | bytearray | None) -> bytes | bytearray | None:
        written = self.output.written
        try:
            return await self._perform(proto, scope, written, resume, carry)
        finally:
            flush_written(written)  # (an error or a cancel in the middle of a burst)

    async def _perform(self, proto: StreamProtocol, scope: trio.CancelScope,
                       written: Written, resume: bool,
                       carry: bytes | bytearray | None) -> bytes | bytearray | None:
        """Perform the protocol's actions; returns None when it closed, or the input just
        received when the scope's deadline passed as it arrived (the caller re-enters with
        a fresh scope: no await of this burst may run in a cancelled scope)."""
        # ``flush_written`` before every await: what the burst wrote to other connections
        # goes out now, and writes by other tasks wake writers again (``Written``).
        # The scope's deadline is finite only while the reader waits for input (the
        # output to drain, then the read): it is cleared before any other await, which
        # no deadline may cut (a commit, a held publisher, a login check).
        stream, store, output, seat = self.stream, self.store, self.output, self._seat
        send_now, kick, traffic = output.send_now, output.kick, output.traffic
        fd = self._fd
        inf = math.inf
        armed = scope.deadline
        small_read = True
        hot = hot_loop() if fd >= 0 else None
        # A burst that needed an await (a commit: AMQP confirms, MQTT durable QoS 1) is
        # likely followed by one that does too: its connection then waits in trio, where
        # the hand-back would cost more than the inline part saves (measured: +20 % CPU
        # per AMQP confirm); one that needed none parks in the hot loop.
        awaited = False
        if carry is not None and carry is not _NO_INPUT:
            written.in_burst = True
            proto.receive_data(carry)
        while True:
            if resume and seat.pending is None:
                resume = False  # back to the read wait the stale deadline interrupted
            else:
                resume = False
                action = seat.pending
                if action is None:
                    action = run_until_await(proto, send_now, kick)
                else:  # handed back by the hot loop
                    seat.pending = None
                    if type(action) is Raise:
                        raise action.exc
                if action is not NEED_DATA:
                    if armed != inf:
                        scope.deadline = armed = inf
                    if action is COMMIT:
                        awaited = True
                        flush_written(written)
                        try:
                            await store.commit()
                        except Exception as exc:  # CommitError: the protocol acks none of it
                            written.in_burst = True
                            proto.commit_done(exc)
                        except BaseException:
                            proto.commit_cancelled()
                            raise
                        else:
                            written.in_burst = True
                            proto.commit_done(None)
                    elif action is CHECKPOINT:
                        awaited = True
                        flush_written(written)
                        await trio.sleep(0)
                        written.in_burst = True
                    elif action is BLOCKED:
                        awaited = True
                        flush_written(written)
                        blocked = self._blocked
                        if blocked is not None and not self._hung_up:
                            # Also watches for the peer hanging up (``net.blocked``);
                            # True: it did, its last input is read as if unblocked.
                            self._hung_up = await blocked.wait(stream)
                        written.in_burst = True
                        proto.unblocked()
                    elif type(action) is Authenticate:
                        awaited = True
                        flush_written(written)
                        auth = self._authenticate
                        ok = auth is not None and await auth(action.username, action.password)
                        written.in_burst = True
                        proto.authenticated(ok)
                    elif type(action) is Close:
                        return None
                    else:
                        raise TypeError(f"unknown action {action!r}")
                    continue
                data = proto.data_to_send()
                # Deliveries to other connections first (a publish's way to its
                # subscribers is the latency that counts; its PUBACK or confirm follows
                # in the same wake-up), then this connection's replies.
                flush_written(written)
                if data and (fd >= 0 or not small_read or output.busy):
                    send_now(data)
                    data = b""
                if data:  # no file descriptor (TLS): the reader sends, under the deadline
                    deadline = proto.deadline
                    if deadline != armed:
                        scope.deadline = armed = deadline
                    await output.send_direct(data)
            # The read wait: the protocol's deadline applies (also to a peer that stops
            # reading our replies), set only when it moved earlier than the scope's.
            deadline = proto.deadline
            if deadline < armed:
                scope.deadline = armed = deadline
            if output.out_bytes > output.pause_at:
                await output.wait_drained()
            got: bytes | bytearray
            if fd >= 0:
                # A plain socket: read it directly (trio's socket wrappers cost more than
                # the rest of a small burst). What is there is taken at once, with the
                # scheduling point trio's own recv has; otherwise wait for epoll.
                try:
                    got = os.read(fd, RECV_SIZE)
                except BlockingIOError:
                    if hot is not None and not awaited and not hot.broken:
                        # Wait in the hot loop: it serves the input inline and hands
                        # back only what needs this task (``_pending``).
                        await seat.park(hot, fd, armed)
                        if scope.cancel_called:
                            return _NO_INPUT  # (handled in a fresh scope)
                        continue
                    while True:
                        await wait_readable(fd)
                        try:
                            got = os.read(fd, RECV_SIZE)
                            break
                        except BlockingIOError:
                            continue  # (a spurious wake-up)
                else:
                    await cancel_shielded_checkpoint()
            else:
                got = await stream.receive_some(RECV_SIZE)
            traffic.received += len(got)
            if scope.cancel_called:
                return got  # the deadline passed as input arrived: handled in a new scope
            awaited = False
            written.in_burst = True
            small_read = len(got) < DIRECT_READ_MAX
            proto.receive_data(got)
