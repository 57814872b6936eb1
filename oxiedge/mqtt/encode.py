"""MQTT 3.1.1 encoding: packets (``oxiedge.mqtt.packets``) to wire bytes, sans-IO.

``encode(packet)`` returns the bytes of any packet. The hot paths build no packet
object: ``encode_publish`` (deliveries, from the already UTF-8 encoded topic) and the
id-only acknowledgements ``encode_puback`` ... ``encode_unsuback``. Every fixed header
is built here, by ``fixed_header`` from ``packets.first_byte``; nothing else in the code
writes a first byte by hand. ``oxiedge.mqtt.codec`` re-exports all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    first_byte,
)

#: Largest value the 4-byte remaining-length field can carry (2.2.3).
MAX_REMAINING_LENGTH = 268_435_455


#: The fixed header's first byte of every packet type but PUBLISH (whose flags vary).
_FIRST = {t: first_byte(t) for t in PacketType}
_PUBLISH_FIRST = first_byte(PacketType.PUBLISH, 0)


def encode_varint(n: int) -> bytes:
    """A Variable Byte Integer (1.5.5), the remaining length's encoding, in as few bytes
    as possible (MQTT-1.5.5-1); MQTT 5's property blocks use it too."""
    if n < 128:
        return bytes((n,))
    if n > MAX_REMAINING_LENGTH:
        raise ValueError(f"remaining length {n} exceeds {MAX_REMAINING_LENGTH}")
    out = bytearray()
    while True:
        digit = n & 0x7F
        n >>= 7
        if n:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


def encode_string(text: str) -> bytes:
    """A UTF-8 Encoded String (1.5.4): two-byte length, then the bytes."""
    raw = text.encode("utf-8")
    return encode_binary(raw)


def encode_binary(raw: bytes) -> bytes:
    """Binary Data (1.5.6), or an already encoded string: two-byte length, then ``raw``."""
    if len(raw) > 0xFFFF:
        raise ValueError("string/binary field longer than 65535 bytes")
    return len(raw).to_bytes(2, "big") + raw


def fixed_header(first: int, remaining: int) -> bytes:
    """The fixed header (2.2): the first byte and the remaining length."""
    return bytes((first,)) + encode_varint(remaining)


PINGREQ_BYTES = fixed_header(_FIRST[PacketType.PINGREQ], 0)
PINGRESP_BYTES = fixed_header(_FIRST[PacketType.PINGRESP], 0)
DISCONNECT_BYTES = fixed_header(_FIRST[PacketType.DISCONNECT], 0)


def _frame(first: int, body: bytes) -> bytes:
    return fixed_header(first, len(body)) + body


def encode_publish(
    topic: bytes,
    payload: bytes,
    qos: int = 0,
    retain: bool = False,
    dup: bool = False,
    packet_id: int | None = None,
) -> bytes:
    """Encode PUBLISH from an already UTF-8 encoded topic (the delivery hot path: the
    fixed header is ``fixed_header``'s, inlined, and the packet is one ``%`` format, a
    single allocation; ``%c`` refuses a topic length or packet id over 2 bytes)."""
    first = _PUBLISH_FIRST | (qos << 1) | (8 if dup else 0) | (1 if retain else 0)
    tl = len(topic)
    if qos:
        if not packet_id:
            raise ValueError("QoS > 0 PUBLISH needs a packet identifier")
        rl = 4 + tl + len(payload)
        if rl < 128:  # a one-byte remaining length
            return b"%c%c%c%c%b%c%c%b" % (first, rl, tl >> 8, tl & 0xFF, topic,
                                          packet_id >> 8, packet_id & 0xFF, payload)  # fmt: skip
        return b"%c%b%c%c%b%c%c%b" % (first, encode_varint(rl), tl >> 8, tl & 0xFF, topic,
                                      packet_id >> 8, packet_id & 0xFF, payload)  # fmt: skip
    rl = 2 + tl + len(payload)
    if rl < 128:
        return b"%c%c%c%c%b%b" % (first, rl, tl >> 8, tl & 0xFF, topic, payload)
    return b"%c%b%c%c%b%b" % (first, encode_varint(rl), tl >> 8, tl & 0xFF, topic, payload)


def _enc_connect(p: Connect) -> bytes:
    flags = 0x02 if p.clean_session else 0
    tail = encode_string(p.client_id)
    if p.will is not None:
        flags |= 0x04 | (p.will.qos << 3) | (0x20 if p.will.retain else 0)
        tail += encode_string(p.will.topic) + encode_binary(p.will.payload)
    if p.username is not None:
        flags |= 0x80
        tail += encode_string(p.username)
    if p.password is not None:
        flags |= 0x40
        tail += encode_binary(p.password)
    head = encode_string(p.protocol_name) + bytes(
        (p.protocol_level, flags, p.keep_alive >> 8, p.keep_alive & 0xFF)
    )
    return _frame(_FIRST[PacketType.CONNECT], head + tail)


def _enc_subscribe(p: Subscribe) -> bytes:
    body = p.packet_id.to_bytes(2, "big") + b"".join(
        encode_string(t) + bytes((q,)) for t, q in p.topics
    )
    return _frame(_FIRST[PacketType.SUBSCRIBE], body)


def _enc_unsubscribe(p: Unsubscribe) -> bytes:
    body = p.packet_id.to_bytes(2, "big") + b"".join(encode_string(t) for t in p.topics)
    return _frame(_FIRST[PacketType.UNSUBSCRIBE], body)


def _id_packet(ptype: PacketType) -> Callable[[int], bytes]:
    """The encoder of a packet that carries only a packet id (PUBACK ... UNSUBACK)."""
    first = _FIRST[ptype]
    head = fixed_header(first, 2)
    return lambda packet_id: head + packet_id.to_bytes(2, "big")


#: The id-only acknowledgements, by packet id (the protocol's hot path: no packet object).
encode_puback = _id_packet(PacketType.PUBACK)
encode_pubrec = _id_packet(PacketType.PUBREC)
encode_pubrel = _id_packet(PacketType.PUBREL)
encode_pubcomp = _id_packet(PacketType.PUBCOMP)
encode_unsuback = _id_packet(PacketType.UNSUBACK)


def _enc_id(ptype: PacketType) -> Callable[[Any], bytes]:
    enc = _id_packet(ptype)
    return lambda p: enc(p.packet_id)


def _enc_const(raw: bytes) -> Callable[[Any], bytes]:
    return lambda p: raw


def _enc_connack(p: Connack) -> bytes:
    return fixed_header(_FIRST[PacketType.CONNACK], 2) + bytes(
        (1 if p.session_present else 0, p.return_code))


def _enc_publish(p: Publish) -> bytes:
    return encode_publish(p.topic.encode("utf-8"), p.payload, p.qos, p.retain, p.dup, p.packet_id)


def _enc_suback(p: Suback) -> bytes:
    return _frame(_FIRST[PacketType.SUBACK], p.packet_id.to_bytes(2, "big") + bytes(p.return_codes))


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    Connect: _enc_connect,
    Connack: _enc_connack,
    Publish: _enc_publish,
    Puback: _enc_id(PacketType.PUBACK),
    Pubrec: _enc_id(PacketType.PUBREC),
    Pubrel: _enc_id(PacketType.PUBREL),
    Pubcomp: _enc_id(PacketType.PUBCOMP),
    Subscribe: _enc_subscribe,
    Suback: _enc_suback,
    Unsubscribe: _enc_unsubscribe,
    Unsuback: _enc_id(PacketType.UNSUBACK),
    Pingreq: _enc_const(PINGREQ_BYTES),
    Pingresp: _enc_const(PINGRESP_BYTES),
    Disconnect: _enc_const(DISCONNECT_BYTES),
}


def encode(packet: Packet) -> bytes:
    """Encode any packet to its wire bytes."""
    return _ENCODERS[type(packet)](packet)
