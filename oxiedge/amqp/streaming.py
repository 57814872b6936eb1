"""The transport loop's side of :class:`~oxiedge.amqp.protocol.AmqpProtocol`: the
``oxiedge.net`` ``StreamProtocol`` interface (bytes in, actions out, the answers back),
where output goes, the read deadlines and the end of input.

The server's own closes are here too: a connection exception (``_close_with``) and the
broker's shutdown (``shutdown``).

A mixin: ``AmqpProtocol`` owns the attributes declared here; the module docstring of
``protocol.py`` tells the whole story.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oxiedge.amqp import spec
from oxiedge.amqp.actions import NEED_DATA, SEND, Close, Steps
from oxiedge.amqp.codec import Command, FrameParser, encode_method
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.handshake import CLOSE_OK_FRAME

if TYPE_CHECKING:
    from oxiedge.amqp.channel import Channel
    from oxiedge.amqp.handshake import Handshake
    from oxiedge.amqp.ports import Outlet

HIGH_WATER = 1 << 20  # unsent bytes per connection before consumers are skipped
CLOSE_TIMEOUT = 2.0  # after our connection.close: how long to wait for close-ok
#: After close-ok, how long to keep reading (and discarding) until the client closes.
CLOSE_LINGER = 3.0
#: On shutdown: how long the client has to answer our 320 with close-ok.
SHUTDOWN_TIMEOUT = 0.5


def _forced_frame(reason: str) -> bytes:
    """RabbitMQ's words when the broker ends a connection (its shutdown, an operator's
    ``rabbitmqctl close_connection``): 320 with the reason, cut to a shortstr."""
    text = f"CONNECTION_FORCED - broker forced connection closure with reason '{reason}'"
    return encode_method(0, spec.ConnectionClose(
        320, text.encode()[:255].decode("utf-8", "ignore"), 0, 0))


_SHUTDOWN_FRAME = _forced_frame("shutdown")

class _Ended(Exception):
    """The connection is over (deadline, end of input); the text is the reason."""


class LoopSide:
    """What the transport loop calls (see the module docstring)."""

    parser: FrameParser
    channels: dict[int, Channel]
    counters: dict[str, int]
    clock: Callable[[], float]
    heartbeat: int
    handshake: Handshake
    deadline: float
    opened: bool
    closed: bool
    closing: bool
    clean: bool
    linger: bool
    end_reason: str
    discarded_bytes: int
    release: Callable[[], None]
    _outlet: Outlet
    _out: list[bytes]
    _out_size: int
    _stepping: bool
    _held: Any
    _stalled: bool
    _timed_out: bool
    _eof: bool
    _input: int
    _shutting_down: bool
    commit_error: BaseException | None
    login_ok: bool
    _raw: bytes | None
    _closed: Close | None
    _steps: Steps
    _until: float

    # -- the loop's side (oxiedge.net.actions.StreamProtocol) ----------------------------

    def receive_data(self, data: bytes | bytearray) -> None:
        """Bytes from the peer (any split); ``b""``: the peer closed its side."""
        if not data:
            self._eof = True
        elif self.linger:
            self.discarded_bytes += len(data)  # frames after connection.close are dropped
        elif self._shutting_down:
            self._scan_for_close_ok(bytes(data))
        elif self._raw is not None:
            self._raw += data
        else:
            self._input += len(data)
            self.parser.feed(data if type(data) is bytes else bytes(data))

    def next_action(self) -> object:
        """Handle what was received until an action is needed (see the module docstring)."""
        held = self._held
        if held is not None:
            self._held = None
            return held
        closed = self._closed
        if closed is not None:
            return closed
        self._stepping = True
        try:
            action = next(self._steps)
        finally:
            self._stepping = False
        if self._out and action is not NEED_DATA and action is not SEND:
            self._held = action  # what this step wrote goes first (nothing overtakes it)
            return SEND
        return action

    def data_to_send(self) -> bytes:
        """The replies of the last step (taken: a second call returns ``b""``)."""
        out = self._out
        if not out:
            return b""
        self._out = []
        self._out_size = 0
        return b"".join(out) if len(out) > 1 else out[0]

    def commit_done(self, error: Exception | None) -> None:
        """The commit asked for by ``COMMIT`` returned (``error``: it failed)."""
        self.commit_error = error

    def commit_cancelled(self) -> None:
        """Cancelled while waiting for the commit: the connection is ending."""

    def authenticated(self, ok: bool) -> None:
        """The answer to :class:`Authenticate`."""
        self.login_ok = ok

    def unblocked(self) -> None:
        """The resource alarm that ``BLOCKED`` waited for has cleared."""

    def timed_out(self) -> None:
        """Nothing arrived before ``deadline``."""
        self._timed_out = True

    def connection_lost(self, reason: str) -> None:
        """The stream broke (a reset, a failed write)."""
        self.end_reason = self.end_reason or reason

    def on_sent(self) -> bool:
        """The transport wrote buffered bytes: consumers skipped while the output was
        full get their turn again."""
        if self._stalled and self.writable:
            self._stalled = False
            self._redispatch()
        return False

    def _redispatch(self) -> None:
        for ch in list(self.channels.values()):
            ch.consumers.dispatch_all()

    def connection_closed(self) -> bool:
        """The stream is closing: channels and exclusive queues go."""
        self.release()
        return False

    @property
    def writable(self) -> bool:
        """False while the unsent output is over HIGH_WATER: queues skip this connection's
        consumers (noted, so they are dispatched again once it drained) and the loop
        stops reading."""
        if self._outlet.out_bytes + self._out_size < HIGH_WATER:
            return True
        self._stalled = True
        return False

    def send(self, data: bytes) -> None:
        """Output (never blocks; order is preserved): a reply of the current step, or,
        from anywhere else (a delivery, a heartbeat), straight to the transport."""
        if self._stepping:
            self._out.append(data)
            self._out_size += len(data)
        else:
            self._outlet.write(data)

    def shutdown(self, reason: str = "shutdown") -> bool:
        """The broker is stopping, or an operator closes this connection (``reason``): tell
        the client why (320 CONNECTION_FORCED, as RabbitMQ) and end once its close-ok
        arrives; False if there is nobody to tell."""
        if not self.opened or self.clean or self.closing or self._closed is not None:
            return False
        self._shutting_down = True
        self._raw = b""
        if reason == "shutdown":
            self.end_reason = "broker shutdown"
            self._outlet.write(_SHUTDOWN_FRAME)
        else:
            self.end_reason = f"closed by the administrator: {reason}"
            self._outlet.write(_forced_frame(reason))
        return True

    def _close_with(self, exc: AmqpError) -> Steps:
        """A connection exception: send connection.close, wait for close-ok (the driver
        bounds the wait, :data:`CLOSE_TIMEOUT`)."""
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

    def _scan_for_close_ok(self, data: bytes) -> None:
        tail = (self._raw or b"")[-len(CLOSE_OK_FRAME):] + data
        self._raw = tail
        if CLOSE_OK_FRAME in tail:
            self._eof = True  # (frames before it are discarded)

    # -- reading ----------------------------------------------------------------------

    def read(self) -> Steps:
        """Wait for more input (``NEED_DATA``); raises ``_Ended`` at the deadline or at
        the end of input."""
        while self._stalled and self._out:
            # Deliveries of this step filled the output: send them, and if the transport
            # took them (directly, no writer pass to call ``on_sent``), deliver on.
            yield SEND
            if not self.writable:
                break  # ``on_sent`` re-dispatches once the writer drained it
            self._stalled = False
            self._redispatch()
        if self.closing or self.linger:
            self.deadline = self._until
        elif self.opened:
            heartbeat = self.heartbeat
            self.deadline = self.clock() + 2 * heartbeat if heartbeat else math.inf
        else:
            self.deadline = self.handshake.deadline(self.clock())
        yield NEED_DATA
        self.check_deadline()
        if self._eof:
            raise _Ended("client closed the socket without connection.close")

    def check_deadline(self) -> None:
        """After a read or a login check: end the connection if its deadline passed."""
        if not self._timed_out:
            return
        self._timed_out = False
        if self.closing or self.linger:
            raise _Ended("")
        if not self.opened:
            self.counters["handshake_timeouts"] += 1
            raise _Ended(f"handshake not completed within {self.handshake.timeout:g} s")
        raise _Ended(f"missed heartbeats: nothing from the client for "
                     f"{2 * self.heartbeat:g} s")
