"""MQTT 5 properties (spec 2.2.2): identifiers, types, where each may appear, decode, encode.

Theory of operation
-------------------
A property block is a Variable Byte Integer length, then (identifier, value) pairs. Each
identifier has one data type (``SPECS``: byte, two- or four-byte integer, variable byte
integer, UTF-8 string, binary data, UTF-8 string pair) and a set of *contexts* it may appear
in: a packet type, or ``WILL`` for the will properties of CONNECT, which differ from
PUBLISH's (Will Delay Interval only there, Topic Alias and Subscription Identifier never).

``decode_properties`` raises ``MalformedPacket`` (0x81) for what cannot be parsed as the
spec lays it out: an unknown identifier, one the packet may not carry (2.2.2.2: "an
Identifier which is not valid for its packet type ... is a Malformed Packet"), a value
running past the block or the packet, a variable byte integer over 4 bytes, ill-formed
UTF-8 or U+0000 (1.5.4); and ``ProtocolViolation`` (0x82) for a parsed block that breaks a
rule: a single-valued property given twice (only User Property repeats, and Subscription
Identifier in PUBLISH), a value the spec forbids (Receive Maximum, Maximum Packet Size or
Subscription Identifier 0; a 0/1 flag with another value), Authentication Data without an
Authentication Method. What needs connection state (a Topic Alias over the maximum, a
Subscription Identifier in a client's PUBLISH) is the protocol's to check, not the codec's.

Decoded properties are one immutable ``Properties`` (a NamedTuple), a field per property (None when
absent); User Properties are a tuple of pairs in wire order, duplicates kept. A packet
without properties gets the shared ``NO_PROPERTIES`` (no allocation), and
``encode_properties(NO_PROPERTIES, ...)`` is the constant ``b"\\x00"``. The fields of
``Properties`` are in identifier order, so decoding fills them by index (``SLOT``) and
encoding walks them: the block is written in identifier order, User Properties in their
own order (only their relative order is significant, 3.3.2.3.7), and decode(encode(p)) == p.

Plain typed code, no reflection, so that mypyc can compile it; sans-IO (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

from oxiedge.mqtt.bodies import MalformedPacket, ProtocolViolation
from oxiedge.mqtt.encode import encode_varint
from oxiedge.mqtt.packets import PacketType

# Data types (1.5).
BYTE: Final = 1
TWO_BYTE: Final = 2
FOUR_BYTE: Final = 4
VARINT: Final = 5
STRING: Final = 6
BINARY: Final = 7
STRING_PAIR: Final = 8

#: The context of CONNECT's will properties (3.1.3.2); the others are packet types.
WILL: Final = 0
MAX_VARINT: Final = 268_435_455

# Contexts as bits.
_CONNECT = 1 << PacketType.CONNECT
_CONNACK = 1 << PacketType.CONNACK
_PUBLISH = 1 << PacketType.PUBLISH
_WILL = 1 << WILL
_SUBSCRIBE = 1 << PacketType.SUBSCRIBE
_DISCONNECT = 1 << PacketType.DISCONNECT
_AUTH = 1 << PacketType.AUTH
_REPLIES = sum(1 << t for t in (PacketType.CONNACK, PacketType.PUBACK, PacketType.PUBREC,
                                PacketType.PUBREL, PacketType.PUBCOMP, PacketType.SUBACK,
                                PacketType.UNSUBACK, PacketType.DISCONNECT, PacketType.AUTH))
_EVERY = _REPLIES | _CONNECT | _PUBLISH | _WILL | _SUBSCRIBE | (1 << PacketType.UNSUBSCRIBE)

# Identifiers (table 2-4).
PAYLOAD_FORMAT_INDICATOR: Final = 0x01
MESSAGE_EXPIRY_INTERVAL: Final = 0x02
CONTENT_TYPE: Final = 0x03
RESPONSE_TOPIC: Final = 0x08
CORRELATION_DATA: Final = 0x09
SUBSCRIPTION_IDENTIFIER: Final = 0x0B
SESSION_EXPIRY_INTERVAL: Final = 0x11
ASSIGNED_CLIENT_IDENTIFIER: Final = 0x12
SERVER_KEEP_ALIVE: Final = 0x13
AUTHENTICATION_METHOD: Final = 0x15
AUTHENTICATION_DATA: Final = 0x16
REQUEST_PROBLEM_INFORMATION: Final = 0x17
WILL_DELAY_INTERVAL: Final = 0x18
REQUEST_RESPONSE_INFORMATION: Final = 0x19
RESPONSE_INFORMATION: Final = 0x1A
SERVER_REFERENCE: Final = 0x1C
REASON_STRING: Final = 0x1F
RECEIVE_MAXIMUM: Final = 0x21
TOPIC_ALIAS_MAXIMUM: Final = 0x22
TOPIC_ALIAS: Final = 0x23
MAXIMUM_QOS: Final = 0x24
RETAIN_AVAILABLE: Final = 0x25
USER_PROPERTY: Final = 0x26
MAXIMUM_PACKET_SIZE: Final = 0x27
WILDCARD_SUBSCRIPTION_AVAILABLE: Final = 0x28
SUBSCRIPTION_IDENTIFIER_AVAILABLE: Final = 0x29
SHARED_SUBSCRIPTION_AVAILABLE: Final = 0x2A


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """One row of table 2-4: identifier, name, data type, the contexts (bits) it may appear
    in, and those where it may appear more than once."""

    ident: int
    name: str
    kind: int
    contexts: int
    repeats: int = 0


_ROWS = (
    PropertySpec(PAYLOAD_FORMAT_INDICATOR, "Payload Format Indicator", BYTE, _PUBLISH | _WILL),
    PropertySpec(MESSAGE_EXPIRY_INTERVAL, "Message Expiry Interval", FOUR_BYTE, _PUBLISH | _WILL),
    PropertySpec(CONTENT_TYPE, "Content Type", STRING, _PUBLISH | _WILL),
    PropertySpec(RESPONSE_TOPIC, "Response Topic", STRING, _PUBLISH | _WILL),
    PropertySpec(CORRELATION_DATA, "Correlation Data", BINARY, _PUBLISH | _WILL),
    # MQTT-3.3.4-4: a PUBLISH to a subscriber carries every matching subscription's id.
    PropertySpec(SUBSCRIPTION_IDENTIFIER, "Subscription Identifier", VARINT,
                 _PUBLISH | _SUBSCRIBE, repeats=_PUBLISH),
    PropertySpec(SESSION_EXPIRY_INTERVAL, "Session Expiry Interval", FOUR_BYTE,
                 _CONNECT | _CONNACK | _DISCONNECT),
    PropertySpec(ASSIGNED_CLIENT_IDENTIFIER, "Assigned Client Identifier", STRING, _CONNACK),
    PropertySpec(SERVER_KEEP_ALIVE, "Server Keep Alive", TWO_BYTE, _CONNACK),
    PropertySpec(AUTHENTICATION_METHOD, "Authentication Method", STRING,
                 _CONNECT | _CONNACK | _AUTH),
    PropertySpec(AUTHENTICATION_DATA, "Authentication Data", BINARY, _CONNECT | _CONNACK | _AUTH),
    PropertySpec(REQUEST_PROBLEM_INFORMATION, "Request Problem Information", BYTE, _CONNECT),
    PropertySpec(WILL_DELAY_INTERVAL, "Will Delay Interval", FOUR_BYTE, _WILL),
    PropertySpec(REQUEST_RESPONSE_INFORMATION, "Request Response Information", BYTE, _CONNECT),
    PropertySpec(RESPONSE_INFORMATION, "Response Information", STRING, _CONNACK),
    PropertySpec(SERVER_REFERENCE, "Server Reference", STRING, _CONNACK | _DISCONNECT),
    PropertySpec(REASON_STRING, "Reason String", STRING, _REPLIES),
    PropertySpec(RECEIVE_MAXIMUM, "Receive Maximum", TWO_BYTE, _CONNECT | _CONNACK),
    PropertySpec(TOPIC_ALIAS_MAXIMUM, "Topic Alias Maximum", TWO_BYTE, _CONNECT | _CONNACK),
    PropertySpec(TOPIC_ALIAS, "Topic Alias", TWO_BYTE, _PUBLISH),
    PropertySpec(MAXIMUM_QOS, "Maximum QoS", BYTE, _CONNACK),
    PropertySpec(RETAIN_AVAILABLE, "Retain Available", BYTE, _CONNACK),
    PropertySpec(USER_PROPERTY, "User Property", STRING_PAIR, _EVERY, repeats=_EVERY),
    PropertySpec(MAXIMUM_PACKET_SIZE, "Maximum Packet Size", FOUR_BYTE, _CONNECT | _CONNACK),
    PropertySpec(WILDCARD_SUBSCRIPTION_AVAILABLE, "Wildcard Subscription Available", BYTE,
                 _CONNACK),
    PropertySpec(SUBSCRIPTION_IDENTIFIER_AVAILABLE, "Subscription Identifier Available", BYTE,
                 _CONNACK),
    PropertySpec(SHARED_SUBSCRIPTION_AVAILABLE, "Shared Subscription Available", BYTE, _CONNACK),
)
#: identifier -> its row.
SPECS: dict[int, PropertySpec] = {row.ident: row for row in _ROWS}

#: Byte properties whose only values are 0 and 1: anything else is a Protocol Error
#: (3.1.2.11.7, 3.1.2.11.6, 3.2.2.3.4, -.5, -.11, -.12, -.13; the Payload Format Indicator's
#: two values, 3.3.2.3.2, as Mosquitto checks them).
_FLAGS = frozenset((PAYLOAD_FORMAT_INDICATOR, REQUEST_PROBLEM_INFORMATION,
                    REQUEST_RESPONSE_INFORMATION, MAXIMUM_QOS, RETAIN_AVAILABLE,
                    WILDCARD_SUBSCRIPTION_AVAILABLE,
                    SUBSCRIPTION_IDENTIFIER_AVAILABLE, SHARED_SUBSCRIPTION_AVAILABLE))


def allowed_in(ident: int, context: int) -> bool:
    """Whether property ``ident`` may appear in ``context`` (a packet type or ``WILL``)."""
    spec = SPECS.get(ident)
    return spec is not None and bool(spec.contexts & (1 << context))


class Properties(NamedTuple):
    """The properties of one packet; None (or ``()``) for each one it does not carry.

    A NamedTuple rather than a frozen dataclass: as immutable and as typed, and built in a
    fraction of the time (a frozen dataclass's ``__init__`` sets its 27 fields one
    ``object.__setattr__`` at a time). Compare with ``NO_PROPERTIES``, never test its truth
    (a tuple of 27 slots is always true)."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None


#: What a packet without properties carries (shared: costs nothing).
NO_PROPERTIES: Final = Properties()

Value = int | str | bytes


def _field_name(spec: PropertySpec) -> str:
    """The ``Properties`` field of a property: its name in snake case ("Maximum QoS" ->
    ``maximum_qos``), plural for the two that repeat."""
    if spec.ident == SUBSCRIPTION_IDENTIFIER:
        return "subscription_identifiers"
    if spec.ident == USER_PROPERTY:
        return "user_properties"
    return spec.name.lower().replace(" ", "_")


#: identifier -> the index of its field in ``Properties`` (the fields are in identifier
#: order, so encoding in field order is encoding in identifier order).
SLOT: dict[int, int] = {row.ident: Properties._fields.index(_field_name(row)) for row in _ROWS}
#: field index -> its property.
_SPEC_AT: tuple[PropertySpec, ...] = tuple(sorted(_ROWS, key=lambda row: SLOT[row.ident]))
assert [SLOT[row.ident] for row in _SPEC_AT] == list(range(len(Properties._fields)))
_SUBIDS = SLOT[SUBSCRIPTION_IDENTIFIER]
_USER = SLOT[USER_PROPERTY]
_RECEIVE_MAXIMUM = SLOT[RECEIVE_MAXIMUM]
_MAXIMUM_PACKET_SIZE = SLOT[MAXIMUM_PACKET_SIZE]
_AUTHENTICATION_DATA = SLOT[AUTHENTICATION_DATA]
_AUTHENTICATION_METHOD = SLOT[AUTHENTICATION_METHOD]
_FLAG_SLOTS = tuple(SLOT[ident] for ident in sorted(_FLAGS))


# ------------------------------------------------------------------------------ decode


def read_varint(buf: bytes, off: int, end: int) -> tuple[int, int]:
    """A Variable Byte Integer (1.5.5) at ``off``, within ``buf[:end]``: value, next offset."""
    value = shift = 0
    while True:
        if off >= end:
            raise MalformedPacket("truncated variable byte integer")
        b = buf[off]
        off += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, off
        shift += 7
        if shift >= 28:
            raise MalformedPacket("variable byte integer longer than 4 bytes (1.5.5)")


def read_utf8(buf: bytes, off: int, end: int) -> tuple[str, int]:
    """A UTF-8 Encoded String (1.5.4) within ``buf[:end]``; ill-formed UTF-8 or U+0000 is a
    Malformed Packet (MQTT-1.5.4-1, -2)."""
    raw, off = read_bytes(buf, off, end)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket("ill-formed UTF-8 string (MQTT-1.5.4-1)") from None
    if "\x00" in text:
        raise MalformedPacket("U+0000 in a string (MQTT-1.5.4-2)")
    return text, off


def read_bytes(buf: bytes, off: int, end: int) -> tuple[bytes, int]:
    """Binary Data (1.5.6): a two-byte length, then that many bytes, within ``buf[:end]``."""
    if off + 2 > end:
        raise MalformedPacket("truncated length of a string or binary field")
    stop = off + 2 + ((buf[off] << 8) | buf[off + 1])
    if stop > end:
        raise MalformedPacket("truncated string or binary field")
    return buf[off + 2 : stop], stop


def decode_properties(buf: bytes, off: int, context: int) -> tuple[Properties, int]:
    """The property block at ``buf[off]`` (its length first) of a packet of type ``context``
    (or ``WILL``): the properties and the offset after the block."""
    n = len(buf)
    if off < n and buf[off] == 0:
        return NO_PROPERTIES, off + 1  # the common case: no properties
    length, off = read_varint(buf, off, n)
    end = off + length
    if end > n:
        raise MalformedPacket("property length runs past the packet")
    bit = 1 << context
    # One slot per field of ``Properties``, filled in place: the block becomes one tuple
    # (``_make``), with no per-field mapping.
    slots: list[object] = list(NO_PROPERTIES)
    user: list[tuple[str, str]] = []
    subids: list[int] = []
    while off < end:
        ident = buf[off]
        spec = SPECS.get(ident)
        if spec is None:
            raise MalformedPacket(f"unknown property identifier {ident:#04x}")
        if not spec.contexts & bit:
            # 2.2.2.2: an identifier not valid for its packet type is a Malformed Packet.
            raise MalformedPacket(f"{spec.name} is not allowed in this packet")
        kind = spec.kind
        value: Value
        if kind == STRING_PAIR:  # User Property: repeats, order kept
            key, off = read_utf8(buf, off + 1, end)
            val, off = read_utf8(buf, off, end)
            user.append((key, val))
            continue
        if kind == STRING:
            value, off = read_utf8(buf, off + 1, end)
        elif kind == BINARY:
            value, off = read_bytes(buf, off + 1, end)
        elif kind == VARINT:  # Subscription Identifier, the one of this type
            number, off = read_varint(buf, off + 1, end)
            if not number:
                raise ProtocolViolation("Subscription Identifier 0 (3.8.2.1.2)")
            if subids and not spec.repeats & bit:
                raise ProtocolViolation("Subscription Identifier more than once")
            subids.append(number)
            continue
        else:  # BYTE, TWO_BYTE, FOUR_BYTE: the kind is the width in bytes
            stop = off + 1 + kind
            if stop > end:
                raise MalformedPacket(f"truncated {spec.name}")
            value = int.from_bytes(buf[off + 1 : stop], "big")
            off = stop
        k = SLOT[ident]
        if slots[k] is not None:
            raise ProtocolViolation(f"{spec.name} more than once")
        slots[k] = value
    if subids:
        slots[_SUBIDS] = tuple(subids)
    if user:
        slots[_USER] = tuple(user)
    _check(slots)
    return Properties._make(slots), off


def _check(slots: list[object]) -> None:
    """The rules about values (Protocol Errors, 3.1.2.11, 3.2.2.3)."""
    for k in _FLAG_SLOTS:
        flag = slots[k]
        if flag is not None and flag != 0 and flag != 1:
            raise ProtocolViolation(f"{_SPEC_AT[k].name} must be 0 or 1, not {flag}")
    if slots[_RECEIVE_MAXIMUM] == 0:
        raise ProtocolViolation("Receive Maximum 0 (3.1.2.11.3)")
    if slots[_MAXIMUM_PACKET_SIZE] == 0:
        raise ProtocolViolation("Maximum Packet Size 0 (3.1.2.11.4)")
    if slots[_AUTHENTICATION_DATA] is not None and slots[_AUTHENTICATION_METHOD] is None:
        raise ProtocolViolation("Authentication Data without Authentication Method")


# ------------------------------------------------------------------------------ encode


def _field(raw: bytes) -> bytes:
    if len(raw) > 0xFFFF:
        raise ValueError("string or binary property longer than 65535 bytes")
    return len(raw).to_bytes(2, "big") + raw


def _encode_value(kind: int, value: object) -> bytes:
    """A single value of data type ``kind`` (byte, two- or four-byte integer, string,
    binary data); ValueError when it is not of that type or does not fit."""
    if kind == STRING and isinstance(value, str):
        return _field(value.encode("utf-8"))
    if kind == BINARY and isinstance(value, bytes):
        return _field(value)
    if kind in (BYTE, TWO_BYTE, FOUR_BYTE) and isinstance(value, int):
        if not 0 <= value < 1 << (8 * kind):  # the kind is the width in bytes
            raise ValueError(f"{value} does not fit a {kind}-byte property")
        return value.to_bytes(kind, "big")
    raise ValueError(f"{value!r} is not a value of property type {kind}")


def encode_properties(p: Properties, context: int) -> bytes:
    """The property block of ``p`` (length first) for a packet of type ``context`` (or
    ``WILL``); ValueError for a property that packet may not carry or a value out of range."""
    if p is NO_PROPERTIES:
        return b"\x00"
    bit = 1 << context
    out = bytearray()
    for spec, value in zip(_SPEC_AT, p, strict=True):
        if value is None or value == ():
            continue
        ident = spec.ident
        if not spec.contexts & bit:
            raise ValueError(f"{spec.name} is not allowed in this packet")
        if ident == USER_PROPERTY:
            for key, val in p.user_properties:
                out.append(USER_PROPERTY)
                out += _field(key.encode("utf-8"))
                out += _field(val.encode("utf-8"))
        elif ident == SUBSCRIPTION_IDENTIFIER:
            ids = p.subscription_identifiers
            if len(ids) > 1 and not spec.repeats & bit:
                raise ValueError("Subscription Identifier more than once")
            for sid in ids:
                if not 0 < sid <= MAX_VARINT:
                    raise ValueError(f"Subscription Identifier {sid} out of range")
                out.append(SUBSCRIPTION_IDENTIFIER)
                out += encode_varint(sid)
        else:
            out.append(ident)
            out += _encode_value(spec.kind, value)
    return encode_varint(len(out)) + bytes(out)
