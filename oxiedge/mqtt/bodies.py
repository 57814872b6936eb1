"""Body decoders of the MQTT 3.1.1 control packets, and the field readers they share.

Everything but PUBLISH's hot path (``oxiedge.mqtt.codec``): CONNECT, CONNACK, the
acknowledgements that carry only a packet identifier, SUBSCRIBE, SUBACK, UNSUBSCRIBE and
the empty packets. Each decoder takes the fixed header's flags and the complete body and
returns a packet of ``oxiedge.mqtt.packets`` or raises ``ProtocolError``; the codec checks
the fixed-header flags and turns any other exception into ``ProtocolError``.

This module must not import trio or anything doing I/O (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

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
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
)

_VALID_SUBACK_CODES = frozenset((0, 1, 2, 0x80))


class ProtocolError(Exception):
    """Malformed bytes or a protocol violation: the connection must be closed.

    ``reason_code`` is what an MQTT 5 peer is told in its CONNACK or DISCONNECT (0x81
    Malformed Packet unless a subclass says otherwise); MQTT 3.1.1 has no such code."""

    reason_code: ClassVar[int] = 0x81


class MalformedPacket(ProtocolError):
    """MQTT 5 "Malformed Packet" (0x81): the bytes cannot be parsed as the spec lays them
    out (a truncated field, ill-formed UTF-8, a property the packet may not carry, ...)."""

    reason_code: ClassVar[int] = 0x81


class ProtocolViolation(ProtocolError):
    """MQTT 5 "Protocol Error" (0x82): parsed, but against a rule (a single-valued property
    twice, a Receive Maximum of 0, a Subscription Identifier of 0, ...)."""

    reason_code: ClassVar[int] = 0x82


# ----------------------------------------------------------------------- field readers


def _prefixed(body: bytes, off: int, what: str, whole: str) -> int:
    """The end of the 2-byte-length-prefixed field at ``off`` (its bytes start at
    ``off + 2``); ``what``/``whole`` name it in the errors."""
    if off + 2 > len(body):
        raise ProtocolError(f"truncated {what} length")
    end = off + 2 + ((body[off] << 8) | body[off + 1])
    if end > len(body):
        raise ProtocolError(f"truncated {whole}")
    return end


def read_string(body: bytes, off: int) -> tuple[str, int]:
    """Read a UTF-8 encoded string (1.5.3) at ``off``; return it and the next offset."""
    end = _prefixed(body, off, "string", "string")
    try:
        text = body[off + 2 : end].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("ill-formed UTF-8 string (MQTT-1.5.3-1)") from None
    if "\x00" in text:
        raise ProtocolError("U+0000 in string (MQTT-1.5.3-2)")
    return text, end


def read_binary(body: bytes, off: int) -> tuple[bytes, int]:
    """Read 2-byte-length-prefixed binary data (will message, password)."""
    end = _prefixed(body, off, "binary", "binary data")
    return body[off + 2 : end], end


def read_packet_id(body: bytes, off: int) -> int:
    if off + 2 > len(body):
        raise ProtocolError("truncated packet identifier")
    pid = (body[off] << 8) | body[off + 1]
    if pid == 0:
        raise ProtocolError("packet identifier 0 (MQTT-2.3.1-1)")
    return pid


def check_topic_name(topic: str) -> None:
    if not topic:
        raise ProtocolError("empty topic name (MQTT-4.7.3-1)")
    if "+" in topic or "#" in topic:
        raise ProtocolError("wildcard in topic name (MQTT-3.3.2-2)")


# -------------------------------------------------------------------- control packets


def _decode_connect(flags: int, body: bytes) -> Connect:
    name, off = read_string(body, 0)
    if name not in ("MQTT", "MQIsdp"):
        # MQTT-3.1.2-1: the server MAY disconnect without CONNACK.
        raise ProtocolError(f"unknown protocol name {name!r}")
    if off + 4 > len(body):
        raise ProtocolError("truncated CONNECT variable header")
    level = body[off]
    if level not in (3, 4):
        # Later protocol levels lay out the rest differently (MQTT 5 properties); the
        # broker answers CONNACK 1 from the level alone (MQTT-3.1.2-2).
        return Connect(client_id="", protocol_name=name, protocol_level=level)
    cflags = body[off + 1]
    keep_alive = (body[off + 2] << 8) | body[off + 3]
    off += 4
    if cflags & 0x01:
        raise ProtocolError("reserved CONNECT flag set (MQTT-3.1.2-3)")
    will_flag = bool(cflags & 0x04)
    will_qos = (cflags >> 3) & 3
    will_retain = bool(cflags & 0x20)
    has_password = bool(cflags & 0x40)
    has_username = bool(cflags & 0x80)
    if not will_flag and (will_qos or will_retain):
        raise ProtocolError("will QoS/retain without will flag (MQTT-3.1.2-13, -15)")
    if will_qos == 3:
        raise ProtocolError("will QoS 3 (MQTT-3.1.2-14)")
    if has_password and not has_username:
        raise ProtocolError("password without username (MQTT-3.1.2-22)")
    client_id, off = read_string(body, off)
    will = None
    if will_flag:
        will_topic, off = read_string(body, off)
        check_topic_name(will_topic)
        will_payload, off = read_binary(body, off)
        will = Will(will_topic, will_payload, will_qos, will_retain)
    username = password = None
    if has_username:
        username, off = read_string(body, off)
    if has_password:
        password, off = read_binary(body, off)
    if off != len(body):
        raise ProtocolError("trailing bytes after CONNECT payload")
    return Connect(client_id=client_id, clean_session=bool(cflags & 0x02),
                   keep_alive=keep_alive, username=username, password=password, will=will,
                   protocol_name=name, protocol_level=level)


def _decode_connack(flags: int, body: bytes) -> Connack:
    if len(body) != 2:
        raise ProtocolError("CONNACK remaining length must be 2")
    if body[0] & 0xFE:
        raise ProtocolError("reserved CONNACK acknowledge flags set")
    if body[1] > 5:
        raise ProtocolError(f"CONNACK return code {body[1]} is reserved")
    return Connack(body[1], bool(body[0] & 1))


def _id_only(
    cls: type[Puback | Pubrec | Pubrel | Pubcomp | Unsuback],
) -> Callable[[int, bytes], Packet]:
    def decode(flags: int, body: bytes) -> Packet:
        if len(body) != 2:
            raise ProtocolError(f"{cls.__name__.upper()} remaining length must be 2")
        return cls(read_packet_id(body, 0))

    return decode


def _decode_subscribe(flags: int, body: bytes) -> Subscribe:
    pid = read_packet_id(body, 0)
    off, topics = 2, []
    n = len(body)
    # A packet may repeat one filter thousands of times: each distinct one is decoded once
    # (the memo is bounded by the packet, which is bounded by max_packet_size).
    seen: dict[bytes, str] = {}
    while off < n:
        if off + 2 > n:
            raise ProtocolError("truncated string length")
        end = off + 2 + ((body[off] << 8) | body[off + 1])
        if end > n:
            raise ProtocolError("truncated string")
        if end == n:
            raise ProtocolError("SUBSCRIBE filter without requested QoS")
        raw = body[off + 2 : end]
        topic = seen.get(raw)
        if topic is None:
            topic = seen[raw] = read_string(body, off)[0]
        qos = body[end]
        off = end + 1
        if qos > 2:
            raise ProtocolError("bad requested QoS byte (MQTT-3-8.3-4)")
        topics.append((topic, qos))
    if not topics:
        raise ProtocolError("SUBSCRIBE without topic filters (MQTT-3.8.3-3)")
    return Subscribe(pid, tuple(topics))


def _decode_suback(flags: int, body: bytes) -> Suback:
    pid = read_packet_id(body, 0)
    codes = tuple(body[2:])
    if not codes or any(c not in _VALID_SUBACK_CODES for c in codes):
        raise ProtocolError("bad SUBACK return codes")
    return Suback(pid, codes)


def _decode_unsubscribe(flags: int, body: bytes) -> Unsubscribe:
    pid = read_packet_id(body, 0)
    off, topics = 2, []
    while off < len(body):
        topic, off = read_string(body, off)
        topics.append(topic)
    if not topics:
        raise ProtocolError("UNSUBSCRIBE without topic filters (MQTT-3.10.3-2)")
    return Unsubscribe(pid, tuple(topics))


def _empty(cls: type[Pingreq | Pingresp | Disconnect]) -> Callable[[int, bytes], Packet]:
    instance = cls()

    def decode(flags: int, body: bytes) -> Packet:
        if body:
            raise ProtocolError(f"{cls.__name__.upper()} must have no body")
        return instance

    return decode


#: type -> decoder, every type but PUBLISH (the codec's own).
CONTROL_DECODERS: dict[PacketType, Callable[[int, bytes], Packet]] = {
    PacketType.CONNECT: _decode_connect,
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBACK: _id_only(Puback),
    PacketType.PUBREC: _id_only(Pubrec),
    PacketType.PUBREL: _id_only(Pubrel),
    PacketType.PUBCOMP: _id_only(Pubcomp),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _id_only(Unsuback),
    PacketType.PINGREQ: _empty(Pingreq),
    PacketType.PINGRESP: _empty(Pingresp),
    PacketType.DISCONNECT: _empty(Disconnect),
}
