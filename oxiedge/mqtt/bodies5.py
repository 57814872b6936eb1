"""Body decoders of the MQTT 5 control packets (everything but PUBLISH, the codec's own).

Each decoder takes the fixed header's flags and the complete body and returns a packet of
``oxiedge.mqtt.packets5`` or raises ``MalformedPacket`` (0x81) / ``ProtocolViolation``
(0x82), as the spec classes the fault (4.13, and each packet's section). The codec checks the
fixed-header flags, branches here when the connection speaks MQTT 5, and turns any other
exception into ``ProtocolError``. Properties are read by ``oxiedge.mqtt.properties``.

The acknowledgements have short forms (3.4.2.1, 3.14.2.1, 3.15.2.1): a PUBACK, PUBREC,
PUBREL or PUBCOMP of remaining length 2 is reason 0x00 without properties, of length 3 a
reason without properties; a DISCONNECT of length 0 is reason 0x00, of length 1 a reason
without properties; an AUTH of length 0 is reason 0x00 (any other AUTH names its method).

Sans-IO (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable

from oxiedge.mqtt.bodies import MalformedPacket, ProtocolViolation, check_topic_name
from oxiedge.mqtt.packets import PacketType, Pingreq, Pingresp
from oxiedge.mqtt.packets5 import (
    Auth,
    Connack5,
    Connect5,
    Disconnect5,
    Packet5,
    Puback5,
    Pubcomp5,
    Pubrec5,
    Pubrel5,
    Suback5,
    Subscribe5,
    Subscription,
    Unsuback5,
    Unsubscribe5,
    Will5,
)
from oxiedge.mqtt.properties import (
    NO_PROPERTIES,
    WILL,
    Properties,
    decode_properties,
    read_bytes,
    read_utf8,
)
from oxiedge.mqtt.reasons import VALID_REASONS


def read_packet_id(body: bytes, off: int) -> int:
    """A non-zero packet identifier (MQTT-2.2.1-3) at ``off``."""
    if off + 2 > len(body):
        raise MalformedPacket("truncated packet identifier")
    pid = (body[off] << 8) | body[off + 1]
    if pid == 0:
        raise MalformedPacket("packet identifier 0 (MQTT-2.2.1-3)")
    return pid


def check_reason(ptype: int, code: int) -> int:
    """``code`` if packets of type ``ptype`` may carry it, else a Protocol Error."""
    if code not in VALID_REASONS[ptype]:
        raise ProtocolViolation(f"reason code {code:#04x} is not valid in packet type {ptype}")
    return code


def _properties_to_end(body: bytes, off: int, context: int) -> Properties:
    props, off = decode_properties(body, off, context)
    if off != len(body):
        raise MalformedPacket("bytes after the properties")
    return props


# -------------------------------------------------------------------------------- CONNECT


def decode_connect5(flags: int, body: bytes) -> Connect5:
    """CONNECT whose protocol name is "MQTT" and level 5 (3.1.2.1, 3.1.2.2)."""
    if body[:7] != b"\x00\x04MQTT\x05":
        raise MalformedPacket("not an MQTT 5 CONNECT")
    if len(body) < 10:
        raise MalformedPacket("truncated CONNECT variable header")
    cflags = body[7]
    keep_alive = (body[8] << 8) | body[9]
    if cflags & 0x01:
        raise MalformedPacket("reserved CONNECT flag set (MQTT-3.1.2-3)")
    will_flag = bool(cflags & 0x04)
    will_qos = (cflags >> 3) & 3
    will_retain = bool(cflags & 0x20)
    if not will_flag and (will_qos or will_retain):
        raise MalformedPacket("will QoS/retain without will flag (MQTT-3.1.2-11, -13)")
    if will_qos == 3:
        raise MalformedPacket("will QoS 3 (MQTT-3.1.2-12)")
    props, off = decode_properties(body, 10, PacketType.CONNECT)
    client_id, off = read_utf8(body, off, len(body))
    will = None
    if will_flag:
        will_props, off = decode_properties(body, off, WILL)
        will_topic, off = read_utf8(body, off, len(body))
        check_topic_name(will_topic)
        will_payload, off = read_bytes(body, off, len(body))
        will = Will5(will_topic, will_payload, will_qos, will_retain, will_props)
    username = password = None
    if cflags & 0x80:
        username, off = read_utf8(body, off, len(body))
    if cflags & 0x40:  # a password without a user name is allowed in MQTT 5 (3.1.2.9)
        password, off = read_bytes(body, off, len(body))
    if off != len(body):
        raise MalformedPacket("trailing bytes after CONNECT payload")
    return Connect5(client_id, bool(cflags & 0x02), keep_alive, username, password, will, props)


def _decode_connack(flags: int, body: bytes) -> Connack5:
    if len(body) < 3:
        raise MalformedPacket("truncated CONNACK")
    if body[0] & 0xFE:
        raise MalformedPacket("reserved CONNACK acknowledge flags set (3.2.2.1)")
    code = check_reason(PacketType.CONNACK, body[1])
    present = bool(body[0] & 1)
    if present and code:
        raise ProtocolViolation("Session Present with a failure reason code (MQTT-3.2.2-6)")
    return Connack5(code, present, _properties_to_end(body, 2, PacketType.CONNACK))


# ------------------------------------------------------------------- acknowledgements


def _ack(
    cls: type[Puback5 | Pubrec5 | Pubrel5 | Pubcomp5], ptype: PacketType
) -> Callable[[int, bytes], Packet5]:
    def decode(flags: int, body: bytes) -> Packet5:
        pid = read_packet_id(body, 0)
        n = len(body)
        if n == 2:
            return cls(pid)
        code = check_reason(ptype, body[2])
        if n == 3:
            return cls(pid, code)
        return cls(pid, code, _properties_to_end(body, 3, ptype))

    return decode


def _decode_disconnect(flags: int, body: bytes) -> Disconnect5:
    if not body:
        return _NORMAL_DISCONNECTION
    code = check_reason(PacketType.DISCONNECT, body[0])
    if len(body) == 1:
        return Disconnect5(code)
    return Disconnect5(code, _properties_to_end(body, 1, PacketType.DISCONNECT))


_NORMAL_DISCONNECTION = Disconnect5()
_AUTH_SUCCESS = Auth()


def _decode_auth(flags: int, body: bytes) -> Auth:
    if not body:
        return _AUTH_SUCCESS
    code = check_reason(PacketType.AUTH, body[0])
    props = NO_PROPERTIES if len(body) == 1 else _properties_to_end(body, 1, PacketType.AUTH)
    if props.authentication_method is None:
        # 3.15.2.2.2: omitting the Authentication Method is a Protocol Error (only the
        # short form, remaining length 0, carries none).
        raise ProtocolViolation("AUTH without Authentication Method")
    return Auth(code, props)


def _reason_codes(body: bytes, off: int, ptype: PacketType) -> tuple[int, ...]:
    codes = tuple(body[off:])
    if not codes:
        raise ProtocolViolation("acknowledgement without reason codes")
    valid = VALID_REASONS[ptype]
    for code in codes:
        if code not in valid:
            raise ProtocolViolation(f"reason code {code:#04x} is not valid here")
    return codes


def _decode_suback(flags: int, body: bytes) -> Suback5:
    pid = read_packet_id(body, 0)
    props, off = decode_properties(body, 2, PacketType.SUBACK)
    return Suback5(pid, _reason_codes(body, off, PacketType.SUBACK), props)


def _decode_unsuback(flags: int, body: bytes) -> Unsuback5:
    pid = read_packet_id(body, 0)
    props, off = decode_properties(body, 2, PacketType.UNSUBACK)
    return Unsuback5(pid, _reason_codes(body, off, PacketType.UNSUBACK), props)


# -------------------------------------------------------------- SUBSCRIBE / UNSUBSCRIBE


def _decode_subscribe(flags: int, body: bytes) -> Subscribe5:
    pid = read_packet_id(body, 0)
    props, off = decode_properties(body, 2, PacketType.SUBSCRIBE)
    n = len(body)
    subs: list[Subscription] = []
    # A packet may repeat one filter thousands of times: each distinct one is decoded once.
    seen: dict[bytes, str] = {}
    while off < n:
        raw, end = read_bytes(body, off, n)
        topic = seen.get(raw)
        if topic is None:
            topic = seen[raw] = read_utf8(body, off, n)[0]
        if end == n:
            raise MalformedPacket("SUBSCRIBE filter without Subscription Options")
        opts = body[end]
        off = end + 1
        if opts & 0xC0:
            raise MalformedPacket("reserved Subscription Options bits set (MQTT-3.8.3-5)")
        qos, handling = opts & 3, (opts >> 4) & 3
        if qos == 3:
            raise ProtocolViolation("Maximum QoS 3 in Subscription Options (3.8.3.1)")
        if handling == 3:
            raise ProtocolViolation("Retain Handling 3 (3.8.3.1)")
        subs.append(Subscription(topic, qos, bool(opts & 4), bool(opts & 8), handling))
    if not subs:
        raise ProtocolViolation("SUBSCRIBE without topic filters (3.8.3)")
    return Subscribe5(pid, tuple(subs), props)


def _decode_unsubscribe(flags: int, body: bytes) -> Unsubscribe5:
    pid = read_packet_id(body, 0)
    props, off = decode_properties(body, 2, PacketType.UNSUBSCRIBE)
    topics: list[str] = []
    n = len(body)
    while off < n:
        topic, off = read_utf8(body, off, n)
        if not topic:
            raise MalformedPacket("empty topic filter in UNSUBSCRIBE (MQTT-4.7.3-1)")
        topics.append(topic)
    if not topics:
        raise ProtocolViolation("UNSUBSCRIBE without topic filters (3.10.3)")
    return Unsubscribe5(pid, tuple(topics), props)


def _empty(instance: Pingreq | Pingresp) -> Callable[[int, bytes], Packet5]:
    def decode(flags: int, body: bytes) -> Packet5:
        if body:
            raise MalformedPacket(f"{type(instance).__name__.upper()} must have no body")
        return instance

    return decode


#: type -> decoder, every type but CONNECT and PUBLISH (the codec dispatches those).
CONTROL_DECODERS5: dict[PacketType, Callable[[int, bytes], Packet5]] = {
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBACK: _ack(Puback5, PacketType.PUBACK),
    PacketType.PUBREC: _ack(Pubrec5, PacketType.PUBREC),
    PacketType.PUBREL: _ack(Pubrel5, PacketType.PUBREL),
    PacketType.PUBCOMP: _ack(Pubcomp5, PacketType.PUBCOMP),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _decode_unsuback,
    PacketType.PINGREQ: _empty(Pingreq()),
    PacketType.PINGRESP: _empty(Pingresp()),
    PacketType.DISCONNECT: _decode_disconnect,
    PacketType.AUTH: _decode_auth,
}

