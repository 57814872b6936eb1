"""MQTT 5 encoding: packets (``oxiedge.mqtt.packets5``) to wire bytes, sans-IO.

``encode5(packet)`` returns the bytes of any MQTT 5 packet. The hot paths build no packet
object: ``encode_publish5`` takes the topic's UTF-8 bytes and an already encoded property
block (``properties.encode_properties(props, PUBLISH)``, or ``b"\\x00"`` for none), so a
message is encoded once per distinct property set, not per subscriber;
``encode_puback5`` ... ``encode_pubcomp5`` take the packet id, reason code and properties,
and use the short forms (2.2.2, 3.4.2.1): reason 0x00 without properties is the 3.1.1 bytes,
a reason without properties omits the property length. DISCONNECT likewise (remaining length
0 or 1); AUTH is omitted to length 0 only for Success without properties. The fixed headers
are ``encode.fixed_header``'s. A reason code the packet may not carry, or a property it may
not carry, is a ValueError: the broker never sends what its peer must refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oxiedge.mqtt.encode import (
    PINGREQ_BYTES,
    PINGRESP_BYTES,
    encode_binary,
    encode_string,
    encode_varint,
    fixed_header,
)
from oxiedge.mqtt.packets import PacketType, Pingreq, Pingresp, first_byte
from oxiedge.mqtt.packets5 import (
    Auth,
    Connack5,
    Connect5,
    Disconnect5,
    Packet5,
    Puback5,
    Pubcomp5,
    Publish5,
    Pubrec5,
    Pubrel5,
    Suback5,
    Subscribe5,
    Unsuback5,
    Unsubscribe5,
)
from oxiedge.mqtt.properties import NO_PROPERTIES, WILL, Properties, encode_properties
from oxiedge.mqtt.reasons import VALID_REASONS

_FIRST = {t: first_byte(t) for t in PacketType}
_PUBLISH_FIRST = first_byte(PacketType.PUBLISH, 0)
NO_PROPERTY_BYTES = b"\x00"
DISCONNECT5_BYTES = fixed_header(_FIRST[PacketType.DISCONNECT], 0)


def _frame(ptype: PacketType, body: bytes) -> bytes:
    return fixed_header(_FIRST[ptype], len(body)) + body


def _reason(ptype: PacketType, code: int) -> int:
    """``code``, if a packet of type ``ptype`` may carry it: the broker never sends what
    its peer must refuse as a Protocol Error (MQTT-3.2.2-8, -3.4.2-1, ...)."""
    if code not in VALID_REASONS[ptype]:
        raise ValueError(f"reason code {code:#04x} is not valid in {ptype.name}")
    return code


def encode_publish5(
    topic: bytes,
    payload: bytes,
    qos: int = 0,
    retain: bool = False,
    dup: bool = False,
    packet_id: int | None = None,
    properties: bytes = NO_PROPERTY_BYTES,
) -> bytes:
    """PUBLISH from the topic's UTF-8 bytes and an encoded property block (3.3): one ``%``
    format, as 3.1.1's ``encode.encode_publish`` (every delivery to an MQTT 5 client)."""
    first = _PUBLISH_FIRST | (qos << 1) | (8 if dup else 0) | (1 if retain else 0)
    tl = len(topic)
    if tl > 0xFFFF:
        raise ValueError("topic longer than 65535 bytes")
    if qos:
        if not packet_id:
            raise ValueError("QoS > 0 PUBLISH needs a packet identifier")
        rl = 4 + tl + len(properties) + len(payload)
        if rl < 128:  # a one-byte remaining length
            return b"%c%c%c%c%b%c%c%b%b" % (first, rl, tl >> 8, tl & 0xFF, topic, packet_id >> 8,
                                            packet_id & 0xFF, properties, payload)  # fmt: skip
        return b"%c%b%c%c%b%c%c%b%b" % (first, encode_varint(rl), tl >> 8, tl & 0xFF, topic,
                                        packet_id >> 8, packet_id & 0xFF, properties,
                                        payload)  # fmt: skip
    rl = 2 + tl + len(properties) + len(payload)
    if rl < 128:
        return b"%c%c%c%c%b%b%b" % (first, rl, tl >> 8, tl & 0xFF, topic, properties, payload)
    return b"%c%b%c%c%b%b%b" % (first, encode_varint(rl), tl >> 8, tl & 0xFF, topic,
                                properties, payload)  # fmt: skip


_SHORT = {t: fixed_header(_FIRST[t], 2) for t in
          (PacketType.PUBACK, PacketType.PUBREC, PacketType.PUBREL, PacketType.PUBCOMP)}
_WITH_CODE = {t: fixed_header(_FIRST[t], 3) for t in _SHORT}


def _ack(ptype: PacketType, packet_id: int, reason_code: int, properties: Properties) -> bytes:
    """PUBACK, PUBREC, PUBREL or PUBCOMP in its shortest form (3.4.2.1)."""
    pid = packet_id.to_bytes(2, "big")
    if properties is NO_PROPERTIES:
        if not reason_code:
            return _SHORT[ptype] + pid
        return _WITH_CODE[ptype] + pid + bytes((_reason(ptype, reason_code),))
    return _frame(ptype, pid + bytes((_reason(ptype, reason_code),))
                  + encode_properties(properties, ptype))  # fmt: skip


_PUBACK2 = _SHORT[PacketType.PUBACK]
_PUBREC2 = _SHORT[PacketType.PUBREC]
_PUBREL2 = _SHORT[PacketType.PUBREL]
_PUBCOMP2 = _SHORT[PacketType.PUBCOMP]
_PUBACK3 = _WITH_CODE[PacketType.PUBACK]
_PUBREC3 = _WITH_CODE[PacketType.PUBREC]
_NO_MATCHING = b"\x10"  # (No matching subscribers: a PUBACK/PUBREC code, not an error)
# A PUBACK/PUBREC 0x10 as one integer with the packet id's place empty: one ``to_bytes``
# makes the packet (no concatenation).
_PUBACK_NO_MATCHING = int.from_bytes(_PUBACK3 + b"\x00\x00" + _NO_MATCHING, "big")
_PUBREC_NO_MATCHING = int.from_bytes(_PUBREC3 + b"\x00\x00" + _NO_MATCHING, "big")


def encode_puback5(packet_id: int, reason_code: int = 0,
                   properties: Properties = NO_PROPERTIES) -> bytes:  # fmt: skip
    """PUBACK (3.4)."""
    if properties is NO_PROPERTIES:  # (every publish's: one call)
        if not reason_code:
            return _PUBACK2 + packet_id.to_bytes(2, "big")
        if reason_code == 0x10:
            return (_PUBACK_NO_MATCHING | packet_id << 8).to_bytes(5, "big")
    return _ack(PacketType.PUBACK, packet_id, reason_code, properties)


def encode_pubrec5(packet_id: int, reason_code: int = 0,
                   properties: Properties = NO_PROPERTIES) -> bytes:  # fmt: skip
    """PUBREC (3.5)."""
    if properties is NO_PROPERTIES:  # (every QoS 2 publish's: one call)
        if not reason_code:
            return _PUBREC2 + packet_id.to_bytes(2, "big")
        if reason_code == 0x10:
            return (_PUBREC_NO_MATCHING | packet_id << 8).to_bytes(5, "big")
    return _ack(PacketType.PUBREC, packet_id, reason_code, properties)


def encode_pubrel5(packet_id: int, reason_code: int = 0,
                   properties: Properties = NO_PROPERTIES) -> bytes:  # fmt: skip
    """PUBREL (3.6)."""
    if not reason_code and properties is NO_PROPERTIES:
        return _PUBREL2 + packet_id.to_bytes(2, "big")
    return _ack(PacketType.PUBREL, packet_id, reason_code, properties)


def encode_pubcomp5(packet_id: int, reason_code: int = 0,
                    properties: Properties = NO_PROPERTIES) -> bytes:  # fmt: skip
    """PUBCOMP (3.7)."""
    if not reason_code and properties is NO_PROPERTIES:
        return _PUBCOMP2 + packet_id.to_bytes(2, "big")
    return _ack(PacketType.PUBCOMP, packet_id, reason_code, properties)


def encode_disconnect5(reason_code: int = 0, properties: Properties = NO_PROPERTIES) -> bytes:
    """DISCONNECT (3.14): remaining length 0 for a normal one, 1 for a reason alone."""
    if properties is NO_PROPERTIES:
        if not reason_code:
            return DISCONNECT5_BYTES
        return _frame(PacketType.DISCONNECT, bytes((_reason(PacketType.DISCONNECT, reason_code),)))
    return _frame(PacketType.DISCONNECT, bytes((_reason(PacketType.DISCONNECT, reason_code),))
                  + encode_properties(properties, PacketType.DISCONNECT))  # fmt: skip


def _enc_connect(p: Connect5) -> bytes:
    flags = 0x02 if p.clean_start else 0
    tail = encode_string(p.client_id)
    will = p.will
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        tail += (encode_properties(will.properties, WILL) + encode_string(will.topic)
                 + encode_binary(will.payload))  # fmt: skip
    if p.username is not None:
        flags |= 0x80
        tail += encode_string(p.username)
    if p.password is not None:
        flags |= 0x40
        tail += encode_binary(p.password)
    head = b"\x00\x04MQTT\x05" + bytes((flags, p.keep_alive >> 8, p.keep_alive & 0xFF))
    return _frame(PacketType.CONNECT,
                  head + encode_properties(p.properties, PacketType.CONNECT) + tail)  # fmt: skip


def _enc_connack(p: Connack5) -> bytes:
    code = _reason(PacketType.CONNACK, p.reason_code)
    if p.session_present and code:
        raise ValueError("Session Present with a failure reason code (MQTT-3.2.2-6)")
    return _frame(PacketType.CONNACK, bytes((1 if p.session_present else 0, code))
                  + encode_properties(p.properties, PacketType.CONNACK))  # fmt: skip


def _enc_publish(p: Publish5) -> bytes:
    return encode_publish5(p.topic.encode("utf-8"), p.payload, p.qos, p.retain, p.dup,
                           p.packet_id, encode_properties(p.properties, PacketType.PUBLISH))


def _enc_subscribe(p: Subscribe5) -> bytes:
    body = p.packet_id.to_bytes(2, "big") + encode_properties(p.properties, PacketType.SUBSCRIBE)
    for s in p.subscriptions:
        if s.qos > 2 or s.retain_handling > 2:
            raise ValueError(f"Subscription Options out of range: {s}")
    return _frame(PacketType.SUBSCRIBE, body + b"".join(
        encode_string(s.topic_filter) + bytes((s.options,)) for s in p.subscriptions))


def _enc_unsubscribe(p: Unsubscribe5) -> bytes:
    body = p.packet_id.to_bytes(2, "big") + encode_properties(p.properties,
                                                              PacketType.UNSUBSCRIBE)
    return _frame(PacketType.UNSUBSCRIBE, body + b"".join(encode_string(t) for t in p.topics))


def _enc_codes(ptype: PacketType, p: Suback5 | Unsuback5) -> bytes:
    for code in p.reason_codes:
        _reason(ptype, code)
    return _frame(ptype, p.packet_id.to_bytes(2, "big") + encode_properties(p.properties, ptype)
                  + bytes(p.reason_codes))  # fmt: skip


def _enc_auth(p: Auth) -> bytes:
    if not p.reason_code and p.properties == NO_PROPERTIES:
        return fixed_header(_FIRST[PacketType.AUTH], 0)
    return _frame(PacketType.AUTH, bytes((_reason(PacketType.AUTH, p.reason_code),))
                  + encode_properties(p.properties, PacketType.AUTH))  # fmt: skip


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    Connect5: _enc_connect,
    Connack5: _enc_connack,
    Publish5: _enc_publish,
    Puback5: lambda p: encode_puback5(p.packet_id, p.reason_code, p.properties),
    Pubrec5: lambda p: encode_pubrec5(p.packet_id, p.reason_code, p.properties),
    Pubrel5: lambda p: encode_pubrel5(p.packet_id, p.reason_code, p.properties),
    Pubcomp5: lambda p: encode_pubcomp5(p.packet_id, p.reason_code, p.properties),
    Subscribe5: _enc_subscribe,
    Suback5: lambda p: _enc_codes(PacketType.SUBACK, p),
    Unsubscribe5: _enc_unsubscribe,
    Unsuback5: lambda p: _enc_codes(PacketType.UNSUBACK, p),
    Pingreq: lambda p: PINGREQ_BYTES,
    Pingresp: lambda p: PINGRESP_BYTES,
    Disconnect5: lambda p: encode_disconnect5(p.reason_code, p.properties),
    Auth: _enc_auth,
}


def encode5(packet: Packet5) -> bytes:
    """Encode any MQTT 5 packet to its wire bytes."""
    return _ENCODERS[type(packet)](packet)
