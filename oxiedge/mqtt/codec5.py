"""Sans-IO decoding of MQTT 5 (bytes -> ``oxiedge.mqtt.packets5``), beside 3.1.1's.

Theory of operation
-------------------
One connection speaks one protocol level, known from its CONNECT. ``Decoder5`` is a
``codec.Decoder`` (same buffer, bounds and framing) with the MQTT 5 methods added, so the
connection builds one decoder before it knows the level and branches once, on the level,
in what it calls:

- ``next_connect()``: the first packet, a CONNECT of any level: a ``Connect5`` for level 5,
  else what the 3.1.1 decoder makes of it (a ``Connect``; for a level it does not speak, one
  that carries just the level, so the broker can refuse it, MQTT-3.1.2-2).
- then ``next_item()`` (3.1.1, untouched: no test of the level on its hot path) or
  ``next_item5()``, the same contract for MQTT 5: a PUBLISH comes back as a ``RawPublish5``
  tuple, a PUBACK of remaining length 2 (reason Success, no properties: the common one) as
  its bare packet id, a PUBREC, PUBREL or PUBCOMP of remaining length 2 straight from its
  packet id, anything else as a ``packets5`` object. ``next_packet5()`` turns
  the first two into ``Publish5`` / ``Puback5`` (tests, tools, the uplink's client side).

Why a tuple for PUBLISH: the 3.1.1 hot path hands ``RawPublish`` to the router without
building an object; ``RawPublish5`` is the same eight slots plus the ``Properties``
(``NO_PROPERTIES``, shared, when the packet has none), so the router's code for the
first eight slots is shared between the levels and a packet without properties costs one
extra slot. Its ``frame`` slot is the whole packet when, byte for byte, it is what an
MQTT 5 QoS 0 subscriber without a Subscription Identifier must receive: QoS 0, RETAIN 0, a
minimal remaining length and no Topic Alias (an alias belongs to one connection, 3.3.2.3.4).
A 3.1.1 subscriber always needs the message re-encoded.

Every malformed input raises ``MalformedPacket`` (0x81) or ``ProtocolViolation`` (0x82),
both ``ProtocolError``; ``reason_code`` says which DISCONNECT to send. No other exception
escapes, whatever the bytes. After an error the decoder stays failed.

This module must not import trio or anything doing I/O (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from struct import error as StructError

from oxiedge.mqtt.bodies import (
    CONTROL_DECODERS,
    MalformedPacket,
    ProtocolError,
    ProtocolViolation,
)
from oxiedge.mqtt.bodies5 import CONTROL_DECODERS5, decode_connect5
from oxiedge.mqtt.codec import (
    DEFAULT_MAX_PACKET_SIZE,
    TOPIC_CACHE,
    Decoder,
    PacketTooLarge,
    TopicTooLong,
    cached_topic,
)
from oxiedge.mqtt.packets import RESERVED_FLAGS, Connect, PacketType, first_byte
from oxiedge.mqtt.packets5 import Packet5, Puback5, Pubcomp5, Publish5, Pubrec5, Pubrel5
from oxiedge.mqtt.properties import NO_PROPERTIES, Properties, decode_properties
from oxiedge.mqtt.topics import DEFAULT_MAX_TOPIC_LENGTH, DEFAULT_MAX_TOPIC_LEVELS

#: An MQTT 5 PUBLISH on the hot path: ``codec.RawPublish``'s slots ``(topic, topic_b, qos,
#: retain, dup, packet_id, payload, frame)`` and its ``Properties``. ``topic`` is "" when
#: the packet names its topic by a Topic Alias only (the protocol resolves it).
RawPublish5 = tuple[str, bytes, int, bool, bool, int | None, bytes, bytes | None, Properties]

_PUBLISH = int(PacketType.PUBLISH)
_CONNECT_FIRST = first_byte(PacketType.CONNECT)
_PUBACK_FIRST = first_byte(PacketType.PUBACK)
#: First byte -> packet of the QoS 2 steps whose remaining length 2 says reason 0x00 and
#: no properties (3.5.2.1, 3.6.2.1, 3.7.2.1).
_SHORT_ACKS: dict[int, Callable[[int], Packet5]] = {
    first_byte(t): cls for t, cls in ((PacketType.PUBREC, Pubrec5), (PacketType.PUBREL, Pubrel5),
                   (PacketType.PUBCOMP, Pubcomp5))}  # fmt: skip
_V5_CONNECT = b"\x00\x04MQTT\x05"
# The topic cache under a name bound here: CPython compiles a method call on a name bound
# by an import as an attribute load and a call (it takes it for a module's function), not
# as the cheaper method call.
_TOPICS: dict[bytes, str] = TOPIC_CACHE


def parse_publish5(
    first: int,
    frame: bytes,
    off: int,
    forwardable: bool,
    max_levels: int = DEFAULT_MAX_TOPIC_LEVELS,
    max_length: int = DEFAULT_MAX_TOPIC_LENGTH,
) -> RawPublish5:
    """Parse an MQTT 5 PUBLISH whose variable header starts at ``frame[off]`` (3.3)."""
    qos = (first >> 1) & 3
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3 (MQTT-3.3.1-4)")
    dup = bool(first & 8)
    if dup and not qos:
        raise MalformedPacket("DUP set on a QoS 0 PUBLISH (MQTT-3.3.1-2)")
    n = len(frame)
    if n - off < 2:
        raise MalformedPacket("truncated topic length")
    start = off + 2
    end = start + ((frame[off] << 8) | frame[off + 1])
    if end > n:
        raise MalformedPacket("truncated topic")
    raw = frame[start:end]
    tl = end - start
    if tl > max_length:
        raise TopicTooLong(f"topic of {tl} bytes exceeds the limit of {max_length}")
    if raw.count(b"/") > max_levels:
        raise TopicTooLong(f"topic has more than {max_levels} '/' separators")
    if tl:
        topic = _TOPICS.get(raw)  # (``cached_topic``'s hit, without the call)
        if topic is None:
            topic = cached_topic(raw, frame, off)
    else:
        topic = ""
    retain = bool(first & 1)
    pid = None
    if qos:
        if n - end < 2:
            raise MalformedPacket("truncated packet identifier")
        pid = (frame[end] << 8) | frame[end + 1]
        if not pid:
            raise MalformedPacket("packet identifier 0 (MQTT-2.2.1-3)")
        end += 2
    if end < n and not frame[end]:
        # No properties, the common case: no call, no Topic Alias to look at.
        if not tl:
            raise ProtocolViolation("empty topic name without a Topic Alias (3.3.2.1)")
        return (topic, raw, qos, retain, dup, pid, frame[end + 1:],
                frame if forwardable and not qos and not retain else None, NO_PROPERTIES)
    props, end = decode_properties(frame, end, PacketType.PUBLISH)
    alias = props.topic_alias
    if not tl and alias is None:
        raise ProtocolViolation("empty topic name without a Topic Alias (3.3.2.1)")
    fwd = frame if forwardable and not qos and not retain and alias is None else None
    return (topic, raw, qos, retain, dup, pid, frame[end:], fwd, props)


def _decode_publish5(flags: int, body: bytes) -> Publish5:
    topic, _raw, qos, retain, dup, pid, payload, _fwd, props = parse_publish5(
        first_byte(PacketType.PUBLISH, flags), body, 0, False)
    return Publish5(topic, payload, qos, retain, dup, pid, props)


def _decode_connect(flags: int, body: bytes) -> Connect | Packet5:
    if body[:7] == _V5_CONNECT:
        return decode_connect5(flags, body)
    packet = CONTROL_DECODERS[PacketType.CONNECT](flags, body)
    assert isinstance(packet, Connect)
    return packet


_BODY_DECODERS5: dict[PacketType, Callable[[int, bytes], Connect | Packet5]] = {
    PacketType.CONNECT: _decode_connect, PacketType.PUBLISH: _decode_publish5,
    **CONTROL_DECODERS5}
# type -> (required fixed-header flags or None for PUBLISH, decoder); MQTT-2.1.3-1: a
# wrong value of reserved flags is a Malformed Packet.
_DECODERS5: dict[int, tuple[int | None, Callable[[int, bytes], Connect | Packet5]]] = {
    int(t): (None if t is PacketType.PUBLISH else RESERVED_FLAGS.get(t, 0), dec)
    for t, dec in _BODY_DECODERS5.items()
}


def decode_body5(first: int, body: bytes) -> Connect | Packet5:
    """Decode one MQTT 5 packet from its first header byte and its complete body (a
    CONNECT of another level as ``codec.decode_body`` would)."""
    entry = _DECODERS5.get(first >> 4)
    if entry is None:
        raise MalformedPacket(f"reserved packet type {first >> 4}")
    want, decode = entry
    flags = first & 0x0F
    if want is not None and flags != want:
        raise MalformedPacket(f"bad fixed-header flags {flags:#x} (MQTT-2.1.3-1)")
    try:
        return decode(flags, body)
    except ProtocolError:
        raise
    except (IndexError, ValueError, UnicodeError, StructError) as exc:  # defence in depth
        raise MalformedPacket(f"malformed packet: {exc}") from None


class Decoder5(Decoder):
    """``codec.Decoder`` with the MQTT 5 methods (see the module docstring)."""

    __slots__ = ()

    def next_connect(self) -> Connect | Packet5 | None:
        """The first packet, which must be a CONNECT (MQTT-3.1.0-1), decoded by its level."""
        frame = self.take_frame()
        if frame is None:
            return None
        first, raw, off, _minimal = frame
        if first >> 4 != PacketType.CONNECT:
            self.fail()
            raise ProtocolViolation("first packet is not CONNECT (MQTT-3.1.0-1)")
        return self._decode(first, raw[off:])

    def next_item5(self) -> Packet5 | Connect | RawPublish5 | int | None:
        """The next complete MQTT 5 packet (a PUBLISH as ``RawPublish5``, a plain PUBACK
        as its packet id), or None when more bytes are needed."""
        if self._failed:
            raise ProtocolError("decoder already failed")
        # The framing of ``Decoder.take_frame``, inlined as 3.1.1's ``next_item`` does: this
        # is every packet's path (a call and a tuple less per packet).
        buf, pos = self._buf, self._pos
        n = len(buf)
        if n - pos < 2:
            return None
        i = pos + 1
        length = shift = 0
        while True:
            if i >= n:
                return None
            b = buf[i]
            i += 1
            length |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= 28:
                self._failed = True
                raise MalformedPacket("remaining length longer than 4 bytes (2.2.3)")
        end = i + length
        if end - pos > self.max_packet_size:
            self._failed = True
            raise PacketTooLarge(
                f"packet of {end - pos} bytes exceeds max_packet_size {self.max_packet_size}")
        if end > n:
            return None
        first = buf[pos]
        self._pos = end
        if length == 2 and (buf[i] or buf[i + 1]):  # (an id of 0 goes the checked way)
            if first == _PUBACK_FIRST:
                return (buf[i] << 8) | buf[i + 1]  # a subscriber's hot path: no object
            ack = _SHORT_ACKS.get(first)
            if ack is not None:  # a QoS 2 step with reason 0x00: no body decoder
                return ack((buf[i] << 8) | buf[i + 1])
        raw, off = bytes(buf[pos:end]), i - pos
        if first >> 4 == _PUBLISH:
            try:
                return parse_publish5(first, raw, off, shift == 0 or length >= 1 << shift,
                                      self.max_topic_levels, self.max_topic_length)
            except ProtocolError:
                self.fail()
                raise
            except (IndexError, ValueError, UnicodeError, StructError) as exc:
                self.fail()
                raise MalformedPacket(f"malformed packet: {exc}") from None
        return self._decode(first, raw[off:])

    def next_packet5(self) -> Packet5 | Connect | None:
        """Like ``next_item5``, with PUBLISH and PUBACK as packet objects."""
        item = self.next_item5()
        if isinstance(item, tuple):
            topic, _raw, qos, retain, dup, pid, payload, _fwd, props = item
            return Publish5(topic, payload, qos, retain, dup, pid, props)
        if isinstance(item, int):
            return Puback5(item)
        return item

    def _decode(self, first: int, body: bytes) -> Connect | Packet5:
        try:
            return decode_body5(first, body)
        except ProtocolError:
            self.fail()
            raise


def decode_all5(data: bytes, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
                ) -> list[Connect | Packet5]:  # fmt: skip
    """Decode every complete MQTT 5 packet in ``data`` (test/tool convenience)."""
    decoder = Decoder5(max_packet_size)
    decoder.feed(data)
    out: list[Connect | Packet5] = []
    while (packet := decoder.next_packet5()) is not None:
        out.append(packet)
    if decoder.buffered:
        raise MalformedPacket(f"{decoder.buffered} trailing bytes (incomplete packet)")
    return out
