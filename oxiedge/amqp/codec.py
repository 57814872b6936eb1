"""Sans-IO AMQP 0-9-1 frame codec: bytes in, commands out; commands in, bytes out.

Theory of operation
-------------------
:class:`FrameParser` is fed whatever the socket produced (``feed``) and hands back complete
*commands* (``next_event``): a method, or for content-bearing methods (publish, deliver,
return, get-ok) the method together with its content header and all body frames (spec 4.2.6:
a content is a method frame, one header frame, then body frames until ``body-size`` octets
arrived, on one channel, not interleaved with other frames of that channel).  Heartbeats are
events too (the connection only needs to know the peer is alive).

Every malformed input raises :class:`~oxiedge.amqp.errors.AmqpError` with the reply code the
connection must close with:

* 501 FRAME_ERROR — bad frame type, missing frame-end octet (0xCE), frame larger than the
  negotiated ``frame_max``, heartbeat on a non-zero channel, body longer than announced;
* 502 SYNTAX_ERROR — truncated or malformed method arguments or content properties;
* 503 COMMAND_INVALID — unknown class/method id;
* 505 UNEXPECTED_FRAME — header/body frame with no content pending, a method frame while a
  content is still incomplete on that channel, header of the wrong class.

The content properties are kept as the raw bytes received (flags word onwards) so a message
is stored and delivered byte-exact; :func:`~oxiedge.amqp.properties.scan_properties` only
walks them to validate the lengths and pick out ``delivery-mode``; a ``headers`` table is
checked once as the decoder would read it (the broker decodes it later for dead-lettering,
``x-delivery-count`` and headers exchanges: a table it could not read there would lose the
message's properties or its delivery count), so only messages that carry headers pay for
it.  Nothing here imports trio.
"""

from __future__ import annotations

import struct

from oxiedge.amqp import spec
from oxiedge.amqp.constants import (
    COMMAND_INVALID,
    FRAME_ERROR,
    PRECONDITION_FAILED,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
)
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import encode_shortstr
from oxiedge.amqp.properties import expiration_of, scan_properties

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD = spec.FRAME_METHOD
FRAME_HEADER = spec.FRAME_HEADER
FRAME_BODY = spec.FRAME_BODY
FRAME_HEARTBEAT = spec.FRAME_HEARTBEAT
FRAME_END = spec.FRAME_END
FRAME_MIN_SIZE = spec.FRAME_MIN_SIZE
#: Frame type octet + channel short + size long, then the payload, then the end octet.
FRAME_OVERHEAD = 8

_FRAME_HDR = struct.Struct(">BHI")
_IDS = struct.Struct(">HH")
_CONTENT_HDR = struct.Struct(">HHQ")
_H = struct.Struct(">H")
_I = struct.Struct(">I")

HEARTBEAT_FRAME = _FRAME_HDR.pack(FRAME_HEARTBEAT, 0, 0) + bytes([FRAME_END])
#: The only methods that matter on a channel being closed (spec 1.5.2.5 channel.close:
#: "the peer ... must discard all frames it receives on the channel except close-ok").
_CLOSING_METHODS = (spec.ChannelClose, spec.ChannelCloseOk)
#: Distinct basic.publish method frames a parser remembers decoded (then it starts over).
PUBLISH_CACHE = 64


class ProtocolHeaderMismatch(AmqpError):
    """The peer did not open with ``AMQP 0 0 9 1``: answer with our header and close
    (spec 4.2.2)."""

    def __init__(self, received: bytes) -> None:
        super().__init__(FRAME_ERROR, f"bad protocol header {received!r}", hard=True)
        self.received = received


class ContentTooLarge(AmqpError):
    """A content header announced a body above the configured maximum message size.

    A channel error (406, as RabbitMQ's ``max_message_size``): the header is consumed and the
    channel is put in discard mode, so the body frames that follow are dropped unread.
    """

    def __init__(self, channel: int, size: int, limit: int) -> None:
        super().__init__(PRECONDITION_FAILED,
                         f"message size {size} is larger than configured max size {limit}",
                         60, 40, channel=channel)
        self.size = size
        self.limit = limit


class Heartbeat:
    """A heartbeat frame arrived (spec 4.2.7)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Heartbeat()"


HEARTBEAT = Heartbeat()


class Command:
    """A complete method, with its content for content-bearing methods.

    ``properties`` are the raw content-header property bytes (flags word onwards),
    ``body`` the concatenated body frames; both ``None`` for methods without content.
    """

    __slots__ = ("body", "channel", "delivery_mode", "expiration", "method", "properties")

    def __init__(
        self,
        channel: int,
        method: spec.Method,
        properties: bytes | None = None,
        body: bytes | None = None,
        delivery_mode: int | None = None,
        expiration: str | None = None,
    ) -> None:
        self.channel = channel
        self.method = method
        self.properties = properties
        self.body = body
        self.delivery_mode = delivery_mode
        self.expiration = expiration

    def __repr__(self) -> str:
        extra = "" if self.body is None else f", body={len(self.body)}B"
        return f"Command({self.channel}, {self.method!r}{extra})"


class _Pending:
    """A content whose header or body frames are still arriving on one channel."""

    __slots__ = ("body_size", "chunks", "delivery_mode", "expiration", "method", "properties",
                 "received")

    def __init__(self, method: spec.Method) -> None:
        self.method = method
        self.properties: bytes | None = None
        self.delivery_mode: int | None = None
        self.expiration: str | None = None
        self.body_size = 0
        self.received = 0
        self.chunks: list[bytes] = []


def decode_method(payload: bytes) -> spec.Method:
    """Decode a method frame payload (class id, method id, arguments)."""
    if len(payload) < 4:
        raise AmqpError(FRAME_ERROR, "method frame shorter than its ids")
    class_id, method_id = _IDS.unpack_from(payload, 0)
    cls = spec.METHODS.get((class_id << 16) | method_id)
    if cls is None:
        raise AmqpError(
            COMMAND_INVALID, f"unknown method {class_id}.{method_id}", class_id, method_id
        )
    try:
        return cls.decode_args(payload, 4)
    except AmqpError as exc:
        exc.class_id, exc.method_id = class_id, method_id
        raise
    except (IndexError, struct.error, UnicodeDecodeError, ValueError):
        raise AmqpError(
            SYNTAX_ERROR, f"malformed arguments for {cls.NAME}", class_id, method_id
        ) from None


class FrameParser:
    """Incremental frame parser and content assembler for one connection (server side).

    ``frame_max`` is the largest whole frame accepted (0 = no limit); set it after
    Tune-Ok.  With ``expect_header`` the first 8 bytes must be the protocol header
    (spec 4.2.2); a mismatch raises :class:`ProtocolHeaderMismatch`.
    """

    def __init__(self, frame_max: int = 131072, *, expect_header: bool = True,
                 max_body: int = 0) -> None:
        self.frame_max = frame_max
        #: Largest body a content header may announce (0 = no limit): ContentTooLarge above.
        self.max_body = max_body
        self._buf = b""
        self._pos = 0
        self._need_header = expect_header
        self._pending: dict[int, _Pending] = {}
        #: Channels being closed by us: their frames are skipped until close-ok.
        self._discarding: set[int] = set()
        #: Frames skipped on closing channels (for the connection's counters).
        self.discarded = 0
        #: Decoded basic.publish methods by their payload bytes (bounded: PUBLISH_CACHE).
        self._publishes: dict[bytes, spec.Method] = {}

    def feed(self, data: bytes) -> None:
        """Append bytes received from the peer.

        The buffer is immutable ``bytes``: slicing a frame's payload out of it is one copy.
        What is kept between feeds is less than one frame (at most ``frame_max``), so the
        concatenation stays cheap even for large multi-frame bodies.
        """
        if self._pos:
            self._buf = self._buf[self._pos :] + data
            self._pos = 0
        elif self._buf:
            self._buf += data
        else:
            self._buf = bytes(data)

    def unconsumed(self) -> bytes:
        """The bytes received but not parsed (after an error: from the bad frame on)."""
        return self._buf[self._pos :]

    @property
    def awaiting_header(self) -> bool:
        """True until the protocol header has been received."""
        return self._need_header

    @property
    def buffered(self) -> int:
        """Bytes received but not yet consumed."""
        return len(self._buf) - self._pos

    def _header(self) -> bool:
        """Consume the protocol header; False while it is incomplete."""
        buf, pos = self._buf, self._pos
        got = buf[pos : pos + 8]
        if len(got) < 8:
            if got and not PROTOCOL_HEADER.startswith(got):
                raise ProtocolHeaderMismatch(got)
            return False
        if got != PROTOCOL_HEADER:
            raise ProtocolHeaderMismatch(got)
        self._pos = pos + 8
        self._need_header = False
        return True

    def next_event(self) -> Command | Heartbeat | None:
        """The next complete command or heartbeat, or ``None`` when more bytes are needed."""
        if self._need_header and not self._header():
            return None
        buf = self._buf
        n = len(buf)
        pos = self._pos
        # RabbitMQ tolerates a payload of up to frame_max itself (its FRAME_SIZE_FUDGE of 8
        # bytes, for clients that forget the frame overhead - amqpstorm does); so do we.
        limit = self.frame_max if self.frame_max else 1 << 32
        unpack = _FRAME_HDR.unpack_from
        while n - pos >= 7:
            ftype, channel, size = unpack(buf, pos)
            if size > limit:
                raise AmqpError(
                    FRAME_ERROR, f"frame size {size + 8} exceeds frame_max {self.frame_max}"
                )
            end = pos + 7 + size
            if end >= n:
                return None
            if buf[end] != FRAME_END:
                raise AmqpError(FRAME_ERROR, f"frame end octet is {buf[end]:#x}, not 0xce")
            payload = buf[pos + 7 : end]
            pos = self._pos = end + 1
            event = self._frame(ftype, channel, payload)
            if event is not None:
                return event
        return None

    @property
    def receiving_bytes(self) -> int:
        """Body bytes of contents still being received (they count toward memory)."""
        return sum(p.received for p in self._pending.values()) if self._pending else 0

    @property
    def receiving(self) -> bool:
        """A content (publish) is partly received on some channel."""
        return bool(self._pending)

    def _frame(self, ftype: int, channel: int, payload: bytes) -> Command | Heartbeat | None:
        if self._discarding and channel in self._discarding and ftype != FRAME_HEARTBEAT:
            return self._closing_frame(ftype, channel, payload)
        if ftype == FRAME_METHOD:
            if channel in self._pending:
                raise AmqpError(
                    UNEXPECTED_FRAME,
                    f"method frame while content incomplete on {channel}",
                    channel=channel,
                )
            # A publisher repeats the same basic.publish (exchange, key, flags) message after
            # message: its decoded method (frozen, so shareable) is looked up by its bytes.
            method = self._publishes.get(payload)
            if method is None:
                method = decode_method(payload)
                if type(method) is spec.BasicPublish:
                    if len(self._publishes) >= PUBLISH_CACHE:
                        self._publishes.clear()
                    self._publishes[payload] = method
            if method.HAS_CONTENT:
                self._pending[channel] = _Pending(method)
                return None
            return Command(channel, method)
        if ftype == FRAME_HEADER:
            pend = self._pending.get(channel)
            if pend is None or pend.properties is not None:
                raise AmqpError(
                    UNEXPECTED_FRAME, "content header frame without a method", channel=channel
                )
            if len(payload) < 14:
                raise AmqpError(FRAME_ERROR, "content header frame too short", channel=channel)
            class_id, _weight, body_size = _CONTENT_HDR.unpack_from(payload, 0)
            if class_id != pend.method.CLASS_ID:
                raise AmqpError(
                    UNEXPECTED_FRAME, f"content header of class {class_id}", channel=channel
                )
            if self.max_body and body_size > self.max_body:
                del self._pending[channel]
                self._discarding.add(channel)  # its body frames are dropped unread
                raise ContentTooLarge(channel, body_size, self.max_body)
            props = payload[12:]
            pend.delivery_mode = scan_properties(props)
            if props[0] & 0x01:  # the expiration flag (0x0100): rare, so looked up only then
                pend.expiration = expiration_of(props)
            pend.properties = props
            pend.body_size = body_size
            if body_size == 0:
                del self._pending[channel]
                return Command(channel, pend.method, props, b"", pend.delivery_mode,
                               pend.expiration)
            return None
        if ftype == FRAME_BODY:
            pend = self._pending.get(channel)
            if pend is None or pend.properties is None:
                raise AmqpError(
                    UNEXPECTED_FRAME, "body frame without a content header", channel=channel
                )
            pend.received += len(payload)
            if pend.received > pend.body_size:
                raise AmqpError(
                    FRAME_ERROR, "body longer than the content header announced", channel=channel
                )
            pend.chunks.append(payload)
            if pend.received == pend.body_size:
                del self._pending[channel]
                body = payload if len(pend.chunks) == 1 else b"".join(pend.chunks)
                return Command(channel, pend.method, pend.properties, body, pend.delivery_mode,
                               pend.expiration)
            return None
        if ftype == FRAME_HEARTBEAT:
            if channel != 0:
                raise AmqpError(FRAME_ERROR, f"heartbeat frame on channel {channel}")
            return HEARTBEAT
        raise AmqpError(FRAME_ERROR, f"unknown frame type {ftype}")

    def _closing_frame(self, ftype: int, channel: int, payload: bytes) -> Command | None:
        """A frame on a channel we are closing: only channel.close(-ok) is passed on;
        anything else (content frames, other methods, even undecodable ones) is dropped,
        never an error (spec 1.5.2.5)."""
        if ftype == FRAME_METHOD and len(payload) >= 4:
            ids = _IDS.unpack_from(payload, 0)
            for cls in _CLOSING_METHODS:
                if ids == (cls.CLASS_ID, cls.METHOD_ID):
                    try:
                        return Command(channel, decode_method(payload))
                    except AmqpError:
                        break
        self.discarded += 1
        return None

    def drop_channel(self, channel: int) -> None:
        """We sent channel.close: forget its half-received content and skip its frames
        (all but channel.close / close-ok) until :meth:`resume_channel`."""
        self._pending.pop(channel, None)
        self._discarding.add(channel)

    def resume_channel(self, channel: int) -> None:
        """The closing handshake of ``channel`` is over: its number may be opened again."""
        self._discarding.discard(channel)


# -- encoding -----------------------------------------------------------------------------


def encode_frame(ftype: int, channel: int, payload: bytes) -> bytes:
    """One frame: type, channel, size, payload, frame-end."""
    return _FRAME_HDR.pack(ftype, channel, len(payload)) + payload + b"\xce"


def encode_method(channel: int, method: spec.Method) -> bytes:
    """A method frame."""
    payload = _IDS.pack(method.CLASS_ID, method.METHOD_ID) + method.encode_args()
    return _FRAME_HDR.pack(FRAME_METHOD, channel, len(payload)) + payload + b"\xce"


#: basic.ack as one frame: header (type 1, channel, size 13), ids 60.80, tag, bits, 0xce.
_ACK_FRAME = struct.Struct(">BHIHHQBB")
#: basic.deliver's method frame up to the consumer tag: header, ids 60.60.
_DELIVER_HEAD = struct.Struct(">BHIHH")
#: After the consumer tag: delivery tag, the redelivered bit.
_DELIVER_TAG = struct.Struct(">QB")
#: After the names: the method frame's end, the header frame's header, its class 60,
#: weight 0 and body size (then the properties).
_DELIVER_HEADER = struct.Struct(">BBHIHHQ")
#: After the properties: the header frame's end and the body frame's header.
_DELIVER_BODY = struct.Struct(">BBHI")


def encode_basic_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """``encode_method(channel, spec.BasicAck(delivery_tag, multiple))`` in one pack: a
    publisher confirm is sent once per burst (or message)."""
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, 60, 80, delivery_tag,
                           1 if multiple else 0, FRAME_END)


def encode_names(exchange: str, routing_key: str) -> bytes:
    """basic.deliver's exchange and routing-key fields (two shortstrs)."""
    return (encode_shortstr(exchange) if exchange else b"\x00") + (
        encode_shortstr(routing_key) if routing_key else b"\x00")


def encode_deliver(channel: int, consumer_tag: bytes, delivery_tag: int, redelivered: bool,
                   names: bytes, properties: bytes, body: bytes, frame_max: int) -> bytes:
    """``encode_content(channel, spec.BasicDeliver(...), properties, body, frame_max)``
    without building the method object: this runs once per delivered message.
    ``consumer_tag`` is the tag already encoded as a shortstr (the consumer keeps it),
    ``names`` the exchange and routing key as ``encode_names`` encodes them."""
    head = _DELIVER_HEAD.pack(FRAME_METHOD, channel, 13 + len(consumer_tag) + len(names), 60,
                              60)
    tag = _DELIVER_TAG.pack(delivery_tag, 1 if redelivered else 0)
    n = len(body)
    if 0 < n <= frame_max - FRAME_OVERHEAD or (n and not frame_max):  # one body frame
        return b"".join((
            head, consumer_tag, tag, names,
            _DELIVER_HEADER.pack(0xCE, FRAME_HEADER, channel, _CONTENT_HDR.size + len(properties),
                                 60, 0, n),
            properties, _DELIVER_BODY.pack(0xCE, FRAME_BODY, channel, n), body, b"\xce"))
    parts = [head, consumer_tag, tag, names, b"\xce"]
    _add_content_frames(parts, channel, 60, properties, body, frame_max)
    return b"".join(parts)


def _add_content_frames(parts: list[bytes], channel: int, class_id: int, properties: bytes,
                        body: bytes, frame_max: int) -> None:
    """Append the header frame and the body frames (each at most ``frame_max``, 0 =
    unlimited; none for an empty body) of a content-bearing method."""
    n = len(body)
    parts += (_FRAME_HDR.pack(FRAME_HEADER, channel, _CONTENT_HDR.size + len(properties)),
              _CONTENT_HDR.pack(class_id, 0, n), properties, b"\xce")
    chunk = frame_max - FRAME_OVERHEAD if frame_max else n
    if n <= chunk:  # the common case: one body frame
        if n:
            parts += (_FRAME_HDR.pack(FRAME_BODY, channel, n), body, b"\xce")
        return
    for start in range(0, n, chunk):
        piece = body[start : start + chunk]
        parts += (_FRAME_HDR.pack(FRAME_BODY, channel, len(piece)), piece, b"\xce")


def encode_content(
    channel: int, method: spec.Method, properties: bytes, body: bytes, frame_max: int
) -> bytes:
    """A content-bearing method: method frame, header frame, body frames no larger than
    ``frame_max`` (0 = unlimited).  ``properties`` are raw bytes from the flags word on."""
    args = _IDS.pack(method.CLASS_ID, method.METHOD_ID) + method.encode_args()
    parts = [_FRAME_HDR.pack(FRAME_METHOD, channel, len(args)), args, b"\xce"]
    _add_content_frames(parts, channel, method.CLASS_ID, properties, body, frame_max)
    return b"".join(parts)
