"""MQTT 5 reason codes (spec 2.4): one table of code, name and the packets that may carry it.

``ReasonCode`` names every code; 0x00, 0x01 and 0x02 have several names, as in the spec (0x00
is "Success" in most packets, "Normal disconnection" in DISCONNECT and "Granted QoS 0" in
SUBACK), so they are aliases of one value. ``VALID_REASONS[packet type]`` is the set a packet
may carry: the decoder refuses any other value as a protocol error (0x82), and
``reason_name`` gives the name the spec uses in that packet (for logs and ``oxiedge status``).

Sans-IO, like the rest of the codec (a test checks it).
"""

from __future__ import annotations

from enum import IntEnum

from oxiedge.mqtt.packets import PacketType

CONNACK = PacketType.CONNACK
PUBACK = PacketType.PUBACK
PUBREC = PacketType.PUBREC
PUBREL = PacketType.PUBREL
PUBCOMP = PacketType.PUBCOMP
SUBACK = PacketType.SUBACK
UNSUBACK = PacketType.UNSUBACK
DISCONNECT = PacketType.DISCONNECT
AUTH = PacketType.AUTH


class ReasonCode(IntEnum):
    """Every MQTT 5 reason code (table 2-6). Values under 0x80 report success."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


R = ReasonCode
_ACKS = (CONNACK, PUBACK, PUBREC, SUBACK, UNSUBACK, DISCONNECT)  # the common error codes

#: The spec's table 2-6: (code, its name in those packets, the packets that may carry it).
TABLE: tuple[tuple[int, str, tuple[PacketType, ...]], ...] = (
    (R.SUCCESS, "Success", (CONNACK, PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK, AUTH)),
    (R.NORMAL_DISCONNECTION, "Normal disconnection", (DISCONNECT,)),
    (R.GRANTED_QOS_0, "Granted QoS 0", (SUBACK,)),
    (R.GRANTED_QOS_1, "Granted QoS 1", (SUBACK,)),
    (R.GRANTED_QOS_2, "Granted QoS 2", (SUBACK,)),
    (R.DISCONNECT_WITH_WILL_MESSAGE, "Disconnect with Will Message", (DISCONNECT,)),
    (R.NO_MATCHING_SUBSCRIBERS, "No matching subscribers", (PUBACK, PUBREC)),
    (R.NO_SUBSCRIPTION_EXISTED, "No subscription existed", (UNSUBACK,)),
    (R.CONTINUE_AUTHENTICATION, "Continue authentication", (AUTH,)),
    (R.RE_AUTHENTICATE, "Re-authenticate", (AUTH,)),
    (R.UNSPECIFIED_ERROR, "Unspecified error", _ACKS),
    (R.MALFORMED_PACKET, "Malformed Packet", (CONNACK, DISCONNECT)),
    (R.PROTOCOL_ERROR, "Protocol Error", (CONNACK, DISCONNECT)),
    (R.IMPLEMENTATION_SPECIFIC_ERROR, "Implementation specific error", _ACKS),
    (R.UNSUPPORTED_PROTOCOL_VERSION, "Unsupported Protocol Version", (CONNACK,)),
    (R.CLIENT_IDENTIFIER_NOT_VALID, "Client Identifier not valid", (CONNACK,)),
    (R.BAD_USER_NAME_OR_PASSWORD, "Bad User Name or Password", (CONNACK,)),
    (R.NOT_AUTHORIZED, "Not authorized", _ACKS),
    (R.SERVER_UNAVAILABLE, "Server unavailable", (CONNACK,)),
    (R.SERVER_BUSY, "Server busy", (CONNACK, DISCONNECT)),
    (R.BANNED, "Banned", (CONNACK,)),
    (R.SERVER_SHUTTING_DOWN, "Server shutting down", (DISCONNECT,)),
    (R.BAD_AUTHENTICATION_METHOD, "Bad authentication method", (CONNACK, DISCONNECT)),
    (R.KEEP_ALIVE_TIMEOUT, "Keep Alive timeout", (DISCONNECT,)),
    (R.SESSION_TAKEN_OVER, "Session taken over", (DISCONNECT,)),
    (R.TOPIC_FILTER_INVALID, "Topic Filter invalid", (SUBACK, UNSUBACK, DISCONNECT)),
    (R.TOPIC_NAME_INVALID, "Topic Name invalid", (CONNACK, PUBACK, PUBREC, DISCONNECT)),
    (R.PACKET_IDENTIFIER_IN_USE, "Packet Identifier in use", (PUBACK, PUBREC, SUBACK, UNSUBACK)),
    (R.PACKET_IDENTIFIER_NOT_FOUND, "Packet Identifier not found", (PUBREL, PUBCOMP)),
    (R.RECEIVE_MAXIMUM_EXCEEDED, "Receive Maximum exceeded", (DISCONNECT,)),
    (R.TOPIC_ALIAS_INVALID, "Topic Alias invalid", (DISCONNECT,)),
    (R.PACKET_TOO_LARGE, "Packet too large", (CONNACK, DISCONNECT)),
    (R.MESSAGE_RATE_TOO_HIGH, "Message rate too high", (DISCONNECT,)),
    (R.QUOTA_EXCEEDED, "Quota exceeded", (CONNACK, PUBACK, PUBREC, SUBACK, DISCONNECT)),
    (R.ADMINISTRATIVE_ACTION, "Administrative action", (DISCONNECT,)),
    (R.PAYLOAD_FORMAT_INVALID, "Payload format invalid", (CONNACK, PUBACK, PUBREC, DISCONNECT)),
    (R.RETAIN_NOT_SUPPORTED, "Retain not supported", (CONNACK, DISCONNECT)),
    (R.QOS_NOT_SUPPORTED, "QoS not supported", (CONNACK, DISCONNECT)),
    (R.USE_ANOTHER_SERVER, "Use another server", (CONNACK, DISCONNECT)),
    (R.SERVER_MOVED, "Server moved", (CONNACK, DISCONNECT)),
    (R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, "Shared Subscriptions not supported",
     (SUBACK, DISCONNECT)),
    (R.CONNECTION_RATE_EXCEEDED, "Connection rate exceeded", (CONNACK, DISCONNECT)),
    (R.MAXIMUM_CONNECT_TIME, "Maximum connect time", (DISCONNECT,)),
    (R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, "Subscription Identifiers not supported",
     (SUBACK, DISCONNECT)),
    (R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED, "Wildcard Subscriptions not supported",
     (SUBACK, DISCONNECT)),
)


def _valid() -> dict[int, frozenset[int]]:
    sets: dict[int, set[int]] = {int(t): set() for t in
                                 (CONNACK, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK,
                                  DISCONNECT, AUTH)}  # fmt: skip
    for code, _name, packets in TABLE:
        for ptype in packets:
            sets[int(ptype)].add(int(code))
    return {t: frozenset(codes) for t, codes in sets.items()}


#: packet type -> the reason codes it may carry (MQTT-3.2.2-8, -3.4.2-1, ... "MUST use one of").
VALID_REASONS: dict[int, frozenset[int]] = _valid()

_NAMES: dict[tuple[int, int], str] = {
    (int(ptype), int(code)): name for code, name, packets in TABLE for ptype in packets
}


def reason_name(ptype: int, code: int) -> str:
    """The spec's name of ``code`` in a packet of type ``ptype`` (hex for an unknown one)."""
    return _NAMES.get((ptype, code), f"reason code {code:#04x}")
