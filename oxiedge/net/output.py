"""The output side of one connection: every byte to a client passes here.

Theory of operation
-------------------
``Output`` owns a connection's send side: the buffer, the writer task, the direct sends
and the count of bytes not yet taken by the kernel. Protocol objects write to it (it is
their ``Outlet``); the reader (``net.loop.Transport``) and the hot loop (``net.hot``) send
a burst's replies through it.

Three ways out, one order:

* ``write(data)`` appends to the buffer (never blocks, keeps order): deliveries from other
  connections' publishes, re-sends, heartbeats. Outside a burst it wakes the writer task
  (``run_writer``), which coalesces the buffer into one ``send_all`` per wake-up and, after
  each send, tells the protocol ``on_sent()`` so it can refill (the MQTT in-flight window,
  a retained replay). Inside a burst (``Written``, ``net.written``) it only lists the
  connection: the running reader sends the buffer with ``flush`` before it awaits
  anything - one direct write per connection touched, so a delivery waits neither for the
  subscriber's writer task nor for the publisher's PUBACK; the writer sends what is left.
* ``send_now(data)``: a burst's replies from the reading task, one non-blocking
  ``os.write`` when nothing is buffered or in transit (nothing can be overtaken); what the
  socket does not take goes through the writer.
* ``send_direct(data)``: a stream without a file descriptor (TLS): the reader sends a small
  burst's replies itself when nothing is buffered or in transit, one task hop less per
  round trip; the writer waits meanwhile.

``out_bytes`` (buffered + in transit) is the back-pressure signal: protocols hold back
deliveries while it is over their bound, and the reader stops reading while it is over
``pause_at`` (``wait_drained``): a peer that sends but never reads cannot make us buffer
its replies without limit; TCP then pushes back on it.

Framing (WebSocket, ``oxiedge.ws.stream``): ``frame`` maps the bytes of one send to the
bytes on the wire (the counts above stay in unframed bytes, the protocols' measure). With a
``frame`` every byte goes through ``send_all`` (the writer, ``send_direct``), never a direct
``os.write`` (a partial write would leave half a frame), and each send is framed once, the
coalesced buffer as a whole. Without one (TCP, TLS) nothing is added to the path.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import trio

from oxiedge.net.actions import StreamProtocol
from oxiedge.net.written import current_written, flush_written

LOST = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Traffic:
    """Bytes received and sent by a group of connections (one per service: MQTT's feeds
    ``$SYS/broker/bytes/*``), kept up to date by every read and send - two additions per
    burst, so nobody has to sum over the connections. Sent bytes are counted unframed."""

    __slots__ = ("received", "sent")

    def __init__(self) -> None:
        self.received = 0
        self.sent = 0


class Output:
    """One connection's buffer, writer task, direct sends and back-pressure.

    ``fd``: the stream's non-blocking socket descriptor for direct writes (-1: none, TLS);
    ``kick``: the committer's, called when ``on_sent`` asks for it; ``end``: ends the
    connection (the transport's), called on ``abort`` and when a send finds the peer gone;
    ``frame``: see the module docstring; ``traffic``: the byte counters it adds to (its
    own when not given)."""

    __slots__ = ("_closing", "_drained", "_end", "_fd", "_frame", "_out", "_reader_sending",
                 "_sending", "_stopped", "_wake", "kick", "listed", "out_bytes", "pause_at",
                 "protocol", "stream", "traffic", "writes", "written")

    def __init__(self, stream: trio.abc.Stream, fd: int, *, pause_at: int,
                 kick: Callable[[], None], end: Callable[[], None],
                 frame: Callable[[bytes], bytes] | None = None,
                 traffic: Traffic | None = None) -> None:
        self.stream = stream
        self.traffic = traffic if traffic is not None else Traffic()
        #: hears ``on_sent``; the connection's owner for a session take-over
        self.protocol: StreamProtocol | None = None
        self.out_bytes = 0  # buffered + in transit
        self.pause_at = pause_at  # the reader waits while out_bytes is above this
        self.writes = 0  # direct writes and sends so far (idle heartbeats: any change)
        self.listed = False  # in the running reader's list (it sends the buffer, Written)
        self.written = current_written()
        self.kick = kick
        self._end = end
        self._frame = frame
        self._fd = fd if frame is None else -1  # -1: no direct writes
        self._out: list[bytes] = []
        self._wake = trio.Event()
        self._drained: trio.Event | None = None
        self._sending = False  # a send_all is in progress (bytes in transit)
        self._reader_sending = False  # ... and the reader does it (``send_direct``)
        self._closing = False  # the reader ended: the writer exits once the buffer is empty
        self._stopped = False  # aborted or lost: no direct write from here on

    def write(self, data: bytes) -> None:
        """Queue bytes for the writer task (never blocks, keeps order)."""
        self._out.append(data)
        self.out_bytes += len(data)
        written = self.written
        if written.in_burst and self._fd >= 0:
            if not self.listed:  # the running reader sends it before it awaits
                self.listed = True
                written.items.append(self)
        else:
            self._wake.set()

    def flush(self) -> None:
        """Send the buffer from the calling task with one non-blocking write if the writer
        has nothing in transit (order is kept); what the socket does not take, or all of
        it while a send is in transit, is left to the writer (woken here)."""
        if not self._out:
            return
        if self._sending or self._fd < 0 or self._stopped:
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
        written = self.written
        if written.items and written.in_burst:
            flush_written(written)
            written.in_burst = True

    def _sent(self, n: int) -> None:
        self.writes += 1
        self.traffic.sent += n
        self.out_bytes -= n
        drained = self._drained
        if drained is not None and self.out_bytes <= self.pause_at:
            drained.set()
        proto = self.protocol
        if proto is not None and proto.on_sent():
            self.kick()

    def send_now(self, data: bytes) -> None:
        """Send from the calling task when nothing is buffered or in transit (nothing can
        be overtaken): one non-blocking write; what the socket does not take, and
        everything when the writer is busy, goes through the writer."""
        if not self._out and not self._sending and self._fd >= 0 \
                and not self._stopped:
            try:
                n = os.write(self._fd, data)  # the socket is non-blocking (trio)
            except OSError:
                n = 0  # full (EAGAIN) or broken: the writer waits or meets the error
            if n:
                self.writes += 1
                self.traffic.sent += n
            if n == len(data):
                return
            data = data[n:]
        self.write(data)

    @property
    def busy(self) -> bool:
        """Bytes are buffered or in transit (a direct send now would overtake them)."""
        return bool(self._out) or self._sending

    async def send_direct(self, data: bytes) -> None:
        """A stream without a file descriptor (TLS, WebSocket): the reading task sends a
        small burst's replies itself when nothing is buffered or in transit, instead of
        waking the writer (one task hop less per round trip). The writer waits meanwhile."""
        self._sending = self._reader_sending = True
        self.out_bytes += len(data)
        frame = self._frame
        try:
            await self.stream.send_all(data if frame is None else frame(data))
        finally:
            self._sending = self._reader_sending = False
            self.out_bytes -= len(data)
        self.writes += 1
        self.traffic.sent += len(data)
        if self._out:
            self._wake.set()  # what others wrote meanwhile

    def abort(self) -> None:
        """End the connection now (e.g. a session take-over): unsent bytes are dropped."""
        self._out.clear()
        self._stopped = True
        self._end()

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

    async def run_writer(self) -> None:
        """The writer task: sends what is buffered, one coalesced ``send_all`` per wake-up,
        until ``finish`` and an empty buffer. A peer gone ends the connection."""
        stream, frame = self.stream, self._frame
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
                    await stream.send_all(data if frame is None else frame(data))
                    self._sending = False
                    self._sent(len(data))
                if self._closing:
                    return
        except LOST as exc:
            # The peer is gone: end the reader too.
            proto.connection_lost(f"connection lost: {exc}")
            self._stopped = True
            self._end()

    def finish(self) -> None:
        """The reader ended: the writer sends what is buffered, then exits."""
        self._closing = True
        self._wake.set()

    def detach(self) -> None:
        """The stream is closing: no direct write after this (the descriptor's number may
        be reused at once)."""
        self._fd = -1
