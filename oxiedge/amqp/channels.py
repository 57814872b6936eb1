"""The open channels of one connection, by number: the channel class's dialogue.

``channel.open`` within the negotiated channel_max (``bounds.py``), the client's
``channel.close`` (answered with close-ok once the caller made its publishes durable), and
the server's: a channel exception sends ``channel.close``, releases the channel at once and
discards its frames (codec ``drop_channel``) until the client's close-ok, which frees the
number; a close crossing ours is answered and the close-ok still awaited, as RabbitMQ does
(spec 1.5.2.5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oxiedge.amqp import spec
from oxiedge.amqp.channel import Channel
from oxiedge.amqp.codec import encode_method
from oxiedge.amqp.constants import CHANNEL_ERROR
from oxiedge.amqp.errors import AmqpError

if TYPE_CHECKING:
    from oxiedge.amqp.bounds import ConnectionBounds
    from oxiedge.amqp.codec import FrameParser
    from oxiedge.amqp.ports import ChannelOwner


class ChannelTable:
    """The channels of one connection (see the module docstring).  ``open`` is read per
    frame by the connection's loop; only this table changes it."""

    def __init__(self, conn: ChannelOwner, parser: FrameParser,
                 counters: dict[str, int]) -> None:
        self._conn = conn
        self._parser = parser
        self._counters = counters
        self.open: dict[int, Channel] = {}

    def open_channel(self, number: int, bounds: ConnectionBounds) -> None:
        """channel.open on ``number`` (within the connection's ``bounds``)."""
        if number in self.open:
            raise AmqpError(CHANNEL_ERROR, f"second 'channel.open' seen on {number}", 20, 10)
        bounds.check_channel_open()
        self.open[number] = Channel(self._conn, number)
        self._counters["channels_opened"] += 1
        self._conn.send(encode_method(number, spec.ChannelOpenOk()))

    def while_closing(self, ch: Channel, m: spec.Method) -> None:
        """A method on a channel we closed: only its close-ok (or a crossing close)
        matters."""
        if isinstance(m, spec.ChannelCloseOk):
            del self.open[ch.number]
            self._counters["channels_closed"] += 1
            self._parser.resume_channel(ch.number)
        elif isinstance(m, spec.ChannelClose):
            # Crossing closes: answer, and still wait for the close-ok (as RabbitMQ).
            self._conn.send(encode_method(ch.number, spec.ChannelCloseOk()))

    def close(self, ch: Channel) -> int:
        """The client's channel.close: the channel goes, close-ok is sent; returns flags
        (the caller synced the channel's publishes before)."""
        flags = ch.release()
        del self.open[ch.number]
        self._counters["channels_closed"] += 1
        self._conn.send(encode_method(ch.number, spec.ChannelCloseOk()))
        return flags

    def fail(self, ch: Channel, exc: AmqpError, m: spec.Method | None) -> int:
        """A channel exception while handling ``m``: channel.close is sent, the channel
        released; returns flags.  A hard error (a connection exception) is raised."""
        if not exc.class_id and m is not None:
            exc.class_id, exc.method_id = m.CLASS_ID, m.METHOD_ID
        if exc.hard:
            raise exc
        self._counters["channel_errors"] += 1
        self._conn.send(encode_method(ch.number, spec.ChannelClose(
            exc.code, exc.reply_text, exc.class_id, exc.method_id)))
        self._parser.drop_channel(ch.number)
        return ch.release()

    def release(self) -> None:
        """The connection ends: every channel dies (its unacked back to their queues)."""
        for ch in list(self.open.values()):
            ch.release()
        self._counters["channels_closed"] += len(self.open)
        self.open.clear()
