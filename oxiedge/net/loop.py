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

The *writer* owns the send side. Everything else (deliveries from other connections'
publishes, re-sends, heartbeats) is appended with ``write`` (never blocks, keeps order)
and coalesced into one ``send_all`` per wake-up; after each send the protocol hears
``on_sent()`` so it can refill (the MQTT in-flight window, a retained replay).
Deliveries that a reader's burst wrote to *other* connections go out from that reader
too, at the end of its burst and before its own replies (``flush_written``: one direct
write per connection touched, under the same nothing-in-transit rule), so a delivery
waits neither for the subscriber's writer task nor for the publisher's PUBACK; the
writer sends whatever that left.
``out_bytes`` (buffered + in transit) is the back-pressure signal: protocols hold back
deliveries while it is over their bound, and the reader stops reading while it is over
``pause_at`` (a peer that sends but never reads cannot make us buffer its replies
without limit; TCP then pushes back on it).

Reading: a plain socket is read with ``os.read`` on its (non-blocking) descriptor and
``wait_readable`` only when nothing is there; trio's socket wrappers (error translation,
two context managers, the failed first ``recv``) cost more than the rest of a small burst.
Input taken at once still passes one scheduling point, as trio's own ``recv`` does. When
nothing is there, the reader parks its descriptor in the hot loop (``net.hot``) instead of
waiting in trio: bursts that need no await are then served inline, in the event loop's
own wait, and the reader task wakes only for what needs it (``_pending``).

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
only one with the direct-write shortcut), a ``trio.SSLStream`` (TLS, see ``tls.py``), a
WebSocket stream later.
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
from oxiedge.net.blocked import wait_blocked
from oxiedge.net.hot import RECV_SIZE, HotLoop, Raise, hot_loop
from oxiedge.net.written import Written, current_written, flush_written

CLOSE_FLUSH_TIMEOUT = 5.0  # seconds to flush final replies on a close
#: Streams without a file descriptor (TLS): the reader sends a burst's replies itself
#: only after a read smaller than this - a request waiting for its answer. After a big
#: read more is coming, and the writer coalesces the replies of several bursts into one
#: send (one TLS record instead of several: sending after every read cost ~15 % more
#: broker CPU per PUBACK in the pipelined QoS 1 scenario over TLS).
DIRECT_READ_MAX = 4096

_LOST = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


#: ``_perform``'s answer when the reader must re-enter in a fresh cancel scope with no
#: input to hand over (the hot loop already gave it to the protocol).
_NO_INPUT = bytearray()


class Committer(Protocol):
    """The store as the loop sees it: the group commit."""

    async def commit(self) -> Any: ...

    def kick(self) -> None: ...


class Transport:
    """One connection's stream, buffers and tasks (the protocol's ``Outlet``)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        store: Committer,
        *,
        pause_at: int,
        authenticate: Callable[[str | None, bytes | None], Awaitable[bool]] | None = None,
        wait_unblocked: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.stream = stream
        self.store = store
        self.protocol: StreamProtocol | None = None
        self.out_bytes = 0  # buffered + in transit
        self.pause_at = pause_at  # the reader waits while out_bytes is above this
        self.writes = 0  # direct writes and sends so far (idle heartbeats: any change)
        self._authenticate = authenticate
        self._wait_unblocked = wait_unblocked
        self._out: list[bytes] = []
        self._wake = trio.Event()
        self._drained: trio.Event | None = None
        self._sending = False  # a send_all is in progress (bytes in transit)
        self._reader_sending = False  # ... and the reader does it (``_send_direct``)
        self._closing = False  # the reader ended: the writer exits once the buffer is empty
        self._listed = False  # in the running reader's list (it sends the buffer, Written)
        self._written = current_written()
        self._scope = trio.CancelScope()  # (no deadline: cancelled only by ``_cancel``)
        self._cancelled = False  # ``_scope.cancel_called``, without its clock read
        # The hot loop (``net.hot``): while the reader is parked there, its descriptor,
        # the scope deadline it parked under, and the action it hands back on waking.
        self._hot: HotLoop | None = None
        self._parked_fd = -1
        self._armed = math.inf
        self._unparked: trio.Event | None = None
        self._pending: object = None
        self._hung_up = False  # the peer hung up while blocked: no alarm holds it again
        sock = getattr(stream, "socket", None)
        self._fd = sock.fileno() if sock is not None else -1  # -1: no direct writes

    # -------------------------------------------------------------------- output
    def write(self, data: bytes) -> None:
        """Queue bytes for the writer task (never blocks, keeps order)."""
        self._out.append(data)
        self.out_bytes += len(data)
        written = self._written
        if written.in_burst and self._fd >= 0:
            if not self._listed:  # the running reader sends it before it awaits
                self._listed = True
                written.items.append(self)
        else:
            self._wake.set()

    def flush(self) -> None:
        """Send the buffer from the calling task with one non-blocking write if the writer
        has nothing in transit (order is kept); what the socket does not take, or all of
        it while a send is in transit, is left to the writer (woken here)."""
        if not self._out:
            return
        if self._sending or self._fd < 0 or self._cancelled:
            self._wake.set()  # in transit or no direct write: the writer sends it
            return
        chunks, self._out = self._out, []
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            n = os.write(self._fd, data)
        except OSError:
            n = 0  # full (EAGAIN) or broken: the writer waits or meets the error
        if n < len(data):
            self._out.insert(0, data[n:] if n else data)
            self._wake.set()  # the writer sends the rest
        if n:
            self._sent(n)

    def deliver_now(self) -> None:
        """Send what the running burst wrote to other connections so far, now (the
        protocol calls it after the last packet of its input: a delivery then does not
        wait for the end-of-burst processing). Its later writes are listed again."""
        written = self._written
        if written.items and written.in_burst:
            flush_written(written)
            written.in_burst = True

    def _sent(self, n: int) -> None:
        self.writes += 1
        self.out_bytes -= n
        drained = self._drained
        if drained is not None and self.out_bytes <= self.pause_at:
            drained.set()
        proto = self.protocol
        if proto is not None and proto.on_sent():
            self.store.kick()

    def send_now(self, data: bytes) -> None:
        """Send from the calling task when nothing is buffered or in transit (nothing can
        be overtaken): one non-blocking write; what the socket does not take, and
        everything when the writer is busy, goes through the writer."""
        if not self._out and not self._sending and self._fd >= 0 \
                and not self._cancelled:
            try:
                n = os.write(self._fd, data)  # the socket is non-blocking (trio)
            except OSError:
                n = 0  # full (EAGAIN) or broken: the writer waits or meets the error
            if n:
                self.writes += 1
            if n == len(data):
                return
            data = data[n:]
        self.write(data)

    async def _send_direct(self, data: bytes) -> None:
        """A stream without a file descriptor (TLS, WebSocket): the reading task sends a
        small burst's replies itself when nothing is buffered or in transit, instead of
        waking the writer (one task hop less per round trip). The writer waits meanwhile."""
        self._sending = self._reader_sending = True
        self.out_bytes += len(data)
        try:
            await self.stream.send_all(data)
        finally:
            self._sending = self._reader_sending = False
            self.out_bytes -= len(data)
        self.writes += 1
        if self._out:
            self._wake.set()  # what others wrote meanwhile

    def abort(self) -> None:
        """End the connection now (e.g. a session take-over): unsent bytes are dropped."""
        self._out.clear()
        self._leave_hot_loop()
        self._cancel()

    def _cancel(self) -> None:
        self._cancelled = True
        self._scope.cancel()

    @property
    def writable(self) -> bool:
        """Under the read pause bound (AMQP: consumers are skipped while not)."""
        return self.out_bytes <= self.pause_at

    async def wait_drained(self) -> None:
        """Return once ``out_bytes`` is back under ``pause_at``."""
        while self.out_bytes > self.pause_at:
            self._drained = trio.Event()
            await self._drained.wait()
        self._drained = None

    async def _writer(self) -> None:
        stream = self.stream
        proto = self.protocol
        assert proto is not None
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if self._reader_sending:
                    continue  # one send at a time: the reader wakes us when it is done
                while self._out:
                    chunks, self._out = self._out, []
                    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    self._sending = True
                    await stream.send_all(data)
                    self._sending = False
                    self._sent(len(data))
                if self._closing:
                    return
        except _LOST as exc:
            # The peer is gone: end the reader too.
            proto.connection_lost(f"connection lost: {exc}")
            self._leave_hot_loop()
            self._cancel()

    # ------------------------------------------------------------------ hot loop
    async def _park(self, hot: HotLoop, fd: int, armed: float) -> None:
        """Wait for input in the hot loop instead of trio; returns once the loop handed
        the connection back (``_pending`` says what to do next)."""
        self._unparked = woken = trio.Event()
        self._hot, self._parked_fd, self._armed = hot, fd, armed
        hot.park(self, fd)
        try:
            await woken.wait()
        finally:
            self._leave_hot_loop()

    def _leave_hot_loop(self) -> None:
        fd = self._parked_fd
        if fd >= 0:
            self._parked_fd = -1
            hot = self._hot
            if hot is not None:
                hot.unpark(fd)

    def _hand_off(self, action: object) -> None:
        """The hot loop's inline part ends (``hot.serve_inline``): the reader task goes on
        with ``action`` (None: just wait for input in trio)."""
        self._pending = NEED_DATA if action is None else action
        self._leave_hot_loop()
        woken = self._unparked
        if woken is not None:
            self._unparked = None
            woken.set()

    # ---------------------------------------------------------------------- life
    async def run(self, proto: StreamProtocol) -> None:
        """Serve ``proto`` over the stream until the connection ends; never raises for
        network errors (the protocol hears about them)."""
        self.protocol = proto
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
                        await self._reader(proto)
                    except _LOST as exc:
                        proto.connection_lost(f"connection lost: {exc}")
                    # Flush what is written (final acks, a refusing CONNACK), bounded.
                    self._closing = True
                    self._wake.set()
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
        written = self._written
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
        stream, store = self.stream, self.store
        send_now, kick = self.send_now, store.kick
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
            if resume and self._pending is None:
                resume = False  # back to the read wait the stale deadline interrupted
            else:
                resume = False
                action = self._pending
                if action is None:
                    action = run_until_await(proto, send_now, kick)
                else:  # handed back by the hot loop
                    self._pending = None
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
                        if self._wait_unblocked is not None and not self._hung_up:
                            # Also watches for the peer hanging up (``net.blocked``);
                            # True: it did, its last input is read as if unblocked.
                            self._hung_up = await wait_blocked(self._wait_unblocked,
                                                               stream)
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
                if data and not (fd < 0 and small_read and not self._out
                                 and not self._sending):
                    send_now(data)
                    data = b""
                if data:  # no file descriptor (TLS): the reader sends, under the deadline
                    deadline = proto.deadline
                    if deadline != armed:
                        scope.deadline = armed = deadline
                    await self._send_direct(data)
            # The read wait: the protocol's deadline applies (also to a peer that stops
            # reading our replies), set only when it moved earlier than the scope's.
            deadline = proto.deadline
            if deadline < armed:
                scope.deadline = armed = deadline
            if self.out_bytes > self.pause_at:
                await self.wait_drained()
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
                        await self._park(hot, fd, armed)
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
            if scope.cancel_called:
                return got  # the deadline passed as input arrived: handled in a new scope
            awaited = False
            written.in_burst = True
            small_read = len(got) < DIRECT_READ_MAX
            proto.receive_data(got)
